/* cli.c — strict parsing of dit_block's flags. Every numeric flag rejects a
 * missing, negative, zero (where meaningless), huge or non-numeric value with
 * one line naming the flag, exit 2. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "config.h"
#include "inputs.h"
#include "safetensors.h"

static const char *usage_text =
    "usage: dit_block --weights PATH [options]\n"
    "\n"
    "Runs one MiniMax-H3 DiT block on the GPU (cuBLASLt GEMMs, FP8 flash attention),\n"
    "prints a per-op timing table and checks every stage against the CPU reference.\n"
    "\n"
    "  --weights PATH     block weights: a .safetensors file, an index (*.safetensors.index.json)\n"
    "                     or a directory holding one (or a snapshot root, in its transformer/); our\n"
    "                     names, the MiniMaxAI shards', single-file checkpoints' or diffusers', with\n"
    "                     any name prefix (README: Use the official weights)\n"
    "  --block N          the block to run where PATH holds several (default: its only one)\n"
    "  --qkv-layout L     grouped or stacked: the QKV row order of a file that does not state it\n"
    "                     (no __metadata__ qkv_layout, no index file, not diffusers' to_q/to_k/to_v);\n"
    "                     grouped: per head [q k v] (MiniMaxAI shards, extract_block files),\n"
    "                     stacked: [q; k; v] (single-file checkpoints such as Comfy-Org's)\n"
    "  --input FILE       inputs (.safetensors: x [S][C] bf16, temb [T] f32, tags [S] i32,\n"
    "                     positions [S][3] f32); default: synthetic H3 layout from --seed\n"
    "  --tokens N         tokens for synthetic inputs (default 30272 on the GPU, 1024 on the CPU)\n"
    "  --seed N           seed of the synthetic inputs (default 1)\n"
    "  --profile P        statistics of the synthetic inputs: model (default: massive-activation\n"
    "                     channels and channel means, as a trained DiT's hidden states) or\n"
    "                     uniform (N(0,1)); make the weights with the same gen_weights --profile\n"
    "  --output FILE      write the block's output hidden states (x [S][C] bf16) as safetensors\n"
    "  --json FILE        write the timing table and check results as JSON\n"
    "                     (outputs: a regular file or absent, in an existing writable directory,\n"
    "                     never the same file as an input or the other output; checked before\n"
    "                     anything runs, and nothing is written when the run fails)\n"
    "  --allow-nonfinite  write the output even if it holds NaN or Inf (a warning naming the first\n"
    "                     stage that made one; without it: exit 1 and nothing written)\n"
    "  --repeat N         timed runs of the block, median reported (default 10 on the GPU, 1 on the CPU)\n"
    "  --warmup N         untimed runs first (default 2 on the GPU, 0 on the CPU)\n"
    "  --check MODE       stages (default): each GPU stage vs the CPU on sampled rows, given\n"
    "                     the GPU's own stage input; full: the CPU's own end-to-end chain over\n"
    "                     every row vs the GPU output; none: timing only. GPU only: the CPU path\n"
    "                     has nothing to check against (its report says checks: not run)\n"
    "  --sample N         rows checked per stage with --check stages (default 256; GPU only)\n"
    "  --attn KERNEL      auto (default: sm90 on Hopper, else mma), mma (portable mma.sync),\n"
    "                     sm90 (wgmma + TMA, sm_90a only; GPU only)\n"
    "  --smooth-v on|off  V smoothing (default on, GPU only): V's per-channel mean is taken out\n"
    "                     before FP8 quantisation and added back to the attention output (exact\n"
    "                     for softmax; lets the Hopper kernel keep O in the tensor cores); with\n"
    "                     --gpus P the ranks share their column sums for the mean over all tokens\n"
    "  --rotate-qk on|off Q/K rotation (default off, GPU only): q and k multiplied by one fixed\n"
    "                     orthonormal matrix (random signs, then a 128-point Hadamard transform)\n"
    "                     before FP8 quantisation; QK^T is unchanged, an outlier channel is spread\n"
    "                     over all 128 dims (docs/accuracy.md)\n"
    "  --gemm MODE        bf16 (default): BF16 cuBLASLt GEMMs; fp8: e4m3 weights (one scale per\n"
    "                     output channel) and activations (one per token), cuBLASLt FP8 (on the CPU\n"
    "                     path: the same quantisation, FP32 sums); fp8:LIST: only the GEMMs in\n"
    "                     LIST in FP8, the others BF16; LIST: comma-separated, each at most once,\n"
    "                     of qkv, out, fc1, fc2 (e.g. fp8:qkv,out; fp8:qkv,out,fc1,fc2 = fp8)\n"
    "  --gemm-accum A     fp32 (default) or fast: the FP8 GEMMs' sums along K in FP32 partial sums,\n"
    "                     or in the tensor cores' own ~14-bit accumulator (cuBLASLt FAST_ACCUM:\n"
    "                     faster, less accurate; GPU only, needs --gemm fp8 or fp8:LIST)\n"
    "  --gpus P           sequence parallel (Ulysses) over P GPUs of this host, P dividing the\n"
    "                     head count (56: 1, 2, 4, 7, 8); one process, NCCL all-to-alls (default 1)\n"
    "  --sp-one-device    with --gpus P: run the P ranks on GPU 0 one after another, exchanges as\n"
    "                     device copies (checks the sharding on one GPU; times are sums)\n"
    "  --cpu              run the whole block on the CPU reference (any --tokens)\n"
    "  --cpu-exact        with --cpu: exact FP32 attention instead of the FP8 emulation\n"
    "  --gpu              require the GPU path (exit 2 if there is no usable GPU)\n"
    "  --quiet            no progress bars\n"
    "  --help             this text\n"
    "\n"
    "Flags given that do not apply on the path that runs (--check, --sample, --attn on the CPU,\n"
    "--cpu-exact on the GPU) are named in one warning line. A config other than the published\n"
    "H3 block (e.g. gen_weights --config tiny) is flagged in the summary and the report.\n"
    "Exit: 0 the run completed and every check that ran passed; 1 a check failed, the output\n"
    "holds NaN/Inf (without --allow-nonfinite), out of host or device memory, or an internal\n"
    "error; 2 a user error (a flag, an unreadable, malformed, FIFO or device file, an output\n"
    "that is the same file as an input or the other output, or cannot be written, no usable\n"
    "GPU with --gpu). Every error is one line on stderr.\n";

/* One line: values from the command line are printed escaped (st_escape),
 * so a newline or a terminal escape in one cannot break or colour it. */
static void usage_error(const char *fmt, const char *a, const char *b)
{
    char msg[512], line[1024];
    snprintf(msg, sizeof msg, fmt, a, b);
    fprintf(stderr, "dit_block: %s (see --help)\n", st_escape(line, sizeof line, msg, strlen(msg), 0));
    exit(2);
}

/* --gemm: bf16 (mask 0), fp8 (all four) or fp8:LIST, LIST a non-empty
 * comma-separated set of h3_gemm_names without repeats. */
static int parse_gemm(const char *v)
{
    if (!strcmp(v, "bf16")) return 0;
    if (!strcmp(v, "fp8")) return H3_FP8_ALL;
    if (strncmp(v, "fp8:", 4))
        usage_error("--gemm: '%s' is not one of bf16, fp8, fp8:LIST (LIST: qkv, out, fc1, fc2, comma-separated)%s",
                    v, "");
    if (!v[4]) usage_error("--gemm: '%s' names no GEMM (LIST: one or more of qkv, out, fc1, fc2, comma-separated)%s",
                           v, "");
    int mask = 0;
    for (const char *p = v + 4;; p++) {
        const size_t n = strcspn(p, ",");
        int g = 0;
        while (g < H3_GEMMS && !(strlen(h3_gemm_names[g]) == n && !strncmp(p, h3_gemm_names[g], n))) g++;
        char name[40];
        snprintf(name, sizeof name, "%.*s", (int)(n < 32 ? n : 32), p);
        if (!n) usage_error("--gemm: '%s' has an empty name in its list%s", v, "");
        if (g == H3_GEMMS) usage_error("--gemm: '%s' names '%s', not one of qkv, out, fc1, fc2", v, name);
        if (mask >> g & 1) usage_error("--gemm: '%s' names '%s' twice", v, name);
        mask |= 1 << g;
        p += n;
        if (!*p) break;
    }
    return mask;
}

/* A positive integer in [lo, hi]; anything else is a usage error. */
static long long parse_int(const char *flag, const char *v, long long lo, long long hi)
{
    if (!v || !*v) usage_error("%s needs a value%s", flag, "");
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno == ERANGE || end == v) usage_error("%s: '%s' is not an integer", flag, v);
    if (x < lo || x > hi) {
        char range[96];
        snprintf(range, sizeof range, "%%s: %%s is out of range %lld..%lld", lo, hi);
        usage_error(range, flag, v);
    }
    return x;
}

void parse_cli(int argc, char **argv, cli_options *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->repeat = 10;
    o->warmup = 2;
    o->sample = 256;
    o->gpus = 1;
    o->smooth_v = -1;
    o->gemm = "bf16";
    o->block = -1;
    int profile_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define TAKE()                                                            \
    do {                                                                  \
        if (!v || (v[0] == '-' && v[1] == '-')) usage_error("%s needs a value%s", a, ""); \
        i++;                                                              \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            exit(0);
        } else if (!strcmp(a, "--weights")) {
            TAKE();
            o->weights = v;
        } else if (!strcmp(a, "--block")) {
            TAKE();
            o->block = (int)parse_int(a, v, 0, 1000000000);
        } else if (!strcmp(a, "--qkv-layout")) {
            TAKE();
            if (!strcmp(v, "grouped")) o->qkv_layout = H3_QKV_GROUPED;
            else if (!strcmp(v, "stacked")) o->qkv_layout = H3_QKV_STACKED;
            else usage_error("--qkv-layout: '%s' is not one of grouped, stacked%s", v, "");
        } else if (!strcmp(a, "--input")) {
            TAKE();
            o->input = v;
        } else if (!strcmp(a, "--output")) {
            TAKE();
            o->output = v;
        } else if (!strcmp(a, "--json")) {
            TAKE();
            o->json = v;
        } else if (!strcmp(a, "--tokens")) {
            TAKE();
            o->tokens = (int)parse_int(a, v, 1, 1 << 22);
        } else if (!strcmp(a, "--seed")) {
            TAKE();
            o->seed = (uint64_t)parse_int(a, v, 0, INT64_MAX);
        } else if (!strcmp(a, "--profile")) {
            TAKE();
            h3_profile p;
            if (h3_profile_parse(v, &p) != 0) usage_error("--profile: '%s' is not one of model, uniform%s", v, "");
            o->profile = (int)p;
            profile_given = 1;
        } else if (!strcmp(a, "--repeat")) {
            TAKE();
            o->repeat = (int)parse_int(a, v, 1, 100000);
            o->repeat_given = 1;
        } else if (!strcmp(a, "--warmup")) {
            TAKE();
            o->warmup = (int)parse_int(a, v, 0, 100000);
            o->warmup_given = 1;
        } else if (!strcmp(a, "--sample")) {
            TAKE();
            o->sample = (int)parse_int(a, v, 1, 1 << 22);
            o->sample_given = 1;
        } else if (!strcmp(a, "--check")) {
            TAKE();
            o->check_given = 1;
            if (!strcmp(v, "stages")) o->check = CHECK_STAGES;
            else if (!strcmp(v, "full")) o->check = CHECK_FULL;
            else if (!strcmp(v, "none")) o->check = CHECK_NONE;
            else usage_error("--check: '%s' is not one of stages, full, none%s", v, "");
        } else if (!strcmp(a, "--attn")) {
            TAKE();
            o->attn_given = 1;
            if (!strcmp(v, "auto")) o->attn = ATTN_AUTO;
            else if (!strcmp(v, "mma")) o->attn = ATTN_MMA;
            else if (!strcmp(v, "sm90")) o->attn = ATTN_SM90;
            else usage_error("--attn: '%s' is not one of auto, mma, sm90%s", v, "");
        } else if (!strcmp(a, "--smooth-v")) {
            TAKE();
            if (!strcmp(v, "on")) o->smooth_v = 1;
            else if (!strcmp(v, "off")) o->smooth_v = 0;
            else usage_error("--smooth-v: '%s' is not one of on, off%s", v, "");
        } else if (!strcmp(a, "--rotate-qk")) {
            TAKE();
            if (!strcmp(v, "on")) o->rotate_qk = 1;
            else if (!strcmp(v, "off")) o->rotate_qk = 0;
            else usage_error("--rotate-qk: '%s' is not one of on, off%s", v, "");
        } else if (!strcmp(a, "--gemm")) {
            TAKE();
            o->fp8_mask = parse_gemm(v);
            o->gemm = v;
        } else if (!strcmp(a, "--gemm-accum")) {
            TAKE();
            if (!strcmp(v, "fast")) o->fast_accum = 1;
            else if (!strcmp(v, "fp32")) o->fast_accum = 0;
            else usage_error("--gemm-accum: '%s' is not one of fp32, fast%s", v, "");
        } else if (!strcmp(a, "--cpu")) {
            o->path = PATH_CPU;
        } else if (!strcmp(a, "--cpu-exact")) {
            o->exact_cpu = 1;
        } else if (!strcmp(a, "--gpu")) {
            o->path = PATH_GPU;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
        } else if (!strcmp(a, "--allow-nonfinite")) {
            o->allow_nonfinite = 1;
        } else if (!strcmp(a, "--gpus")) {
            TAKE();
            o->gpus = (int)parse_int(a, v, 1, 8);
        } else if (!strcmp(a, "--sp-one-device")) {
            o->sp_one_device = 1;
        } else {
            usage_error("unknown flag '%s'%s", a, "");
        }
#undef TAKE
    }
    if (!o->weights) usage_error("--weights PATH is required%s%s", "", "");
    if (o->input && profile_given)
        usage_error("--profile: the inputs come from --input (the profile shapes synthetic inputs only)%s%s", "", "");
    if (o->input && o->tokens) usage_error("--tokens and --input exclude each other (the input file sets S)%s%s", "", "");
    if (o->sp_one_device && o->gpus < 2) usage_error("--sp-one-device needs --gpus P with P >= 2%s%s", "", "");
    if (o->smooth_v == 1 && o->path == PATH_CPU)
        usage_error("--smooth-v on: the CPU path does not smooth V (its chain quantises V chunk by chunk)%s%s", "", "");
    if (o->rotate_qk && o->path == PATH_CPU)
        usage_error("--rotate-qk on: the CPU path does not rotate Q and K (the GPU runners do; the checker has the CPU's "
                    "twin)%s%s", "", "");
    if (o->fast_accum && !o->fp8_mask)
        usage_error("--gemm-accum fast: only FP8 GEMMs have it (add --gemm fp8 or fp8:LIST; --gemm is '%s')%s", o->gemm,
                    "");
    if (o->fast_accum && o->path == PATH_CPU)
        usage_error("--gemm-accum fast: the CPU path sums in FP32 (fast accumulation is the GPU's)%s%s", "", "");
    if (o->gpus > 1 || o->sp_one_device) {
        if (o->path == PATH_CPU) usage_error("--gpus: the CPU path runs on one host%s%s", "", "");
        if (o->check_given && o->check != CHECK_NONE)
            usage_error("--gpus: stage checks run on one GPU (use --check none; compare the output with --gpus 1)%s%s",
                        "", "");
        o->check = CHECK_NONE;
    }
}
