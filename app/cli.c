/* cli.c — dit_block's flags, through the tools' shared parser (core/opts.h).
 * Every numeric flag rejects a missing, negative, zero (where meaningless),
 * huge or non-numeric value with one line naming the flag, exit 2. */
#include "cli.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint.h"
#include "config.h"
#include "inputs.h"
#include "opts.h"
#ifdef H3_HAVE_CUDA
#include "runner.h"
#endif

static const char *usage_text =
    "usage: dit_block --weights PATH [--block N] [--qkv-layout grouped|stacked]\n"
    "                 [--input FILE] [--tokens N] [--seed N] [--profile model|uniform]\n"
    "                 [--output FILE] [--json FILE] [--allow-nonfinite] [--repeat N] [--warmup N]\n"
    "                 [--check stages|full|none] [--sample N] [--attn auto|mma|sm90]\n"
    "                 [--smooth-v on|off] [--rotate-qk on|off] [--gemm bf16|fp8|fp8:LIST]\n"
    "                 [--gemm-scales auto|blocks|rows] [--gemm-accum fp32|fast] [--gpus P] [--sp-one-device]\n"
    "                 [--cpu] [--cpu-exact] [--gpu] [--quiet] [--help] [--version]\n"
    "\n"
    "Runs one MiniMax-H3 DiT block on the GPU (cuBLASLt GEMMs, FP8 flash attention),\n"
    "prints a per-op timing table and checks every stage against the CPU reference.\n"
    "A value follows its flag as the next word or after '=' (--tokens 32, --tokens=32).\n"
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
    "  --gemm MODE        bf16 (default): BF16 cuBLASLt GEMMs; fp8: e4m3 weights and activations\n"
    "                     (scales: --gemm-scales), cuBLASLt FP8 (on the CPU path: the same\n"
    "                     quantisation, FP32 sums); fp8:LIST: only the GEMMs in\n"
    "                     LIST in FP8, the others BF16; LIST: comma-separated, each at most once,\n"
    "                     of qkv, out, fc1, fc2 (e.g. fp8:qkv,out; fp8:qkv,out,fc1,fc2 = fp8)\n"
    "  --gemm-scales SC   auto (default), blocks or rows: the FP8 GEMMs' scales, one per 128 x 128\n"
    "                     block of the weight and one per token per 128 input channels (cuBLASLt's\n"
    "                     block scaling; GPU runs need a token count that is a multiple of 8; one\n"
    "                     GPU; excludes --gemm-accum fast), or one per output channel and one per\n"
    "                     token; auto takes blocks wherever they can run, rows elsewhere\n"
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
    "  --help, -h         this text\n"
    "  --version          version, commit, CUDA runtime, cuBLASLt and driver versions, GPU targets built\n"
    "\n"
    "Flags given that do not apply on the path that runs (--check, --sample, --attn on the CPU,\n"
    "--cpu-exact on the GPU) are named in one warning line. A config other than the published\n"
    "H3 block (e.g. gen_weights --config tiny) is flagged in the summary and the report.\n"
    "Exit: 0 the run completed and every check that ran passed; 1 a check failed, the output\n"
    "holds NaN/Inf (without --allow-nonfinite), out of host or device memory, or an internal\n"
    "error; 2 a user error (a flag, an unreadable, malformed, FIFO or device file, an output\n"
    "that is the same file as an input or the other output, or cannot be written, no usable\n"
    "GPU with --gpu). Every error is one line on stderr.\n";

static const h3_flag flags[] = {
    {"weights", 1}, {"block", 1},  {"qkv-layout", 1}, {"input", 1},     {"output", 1},          {"json", 1},
    {"tokens", 1},  {"seed", 1},   {"profile", 1},    {"repeat", 1},    {"warmup", 1},          {"sample", 1},
    {"check", 1},   {"attn", 1},   {"smooth-v", 1},   {"rotate-qk", 1}, {"gemm", 1},            {"gemm-accum", 1},
    {"cpu", 0},     {"cpu-exact", 0}, {"gpu", 0},     {"quiet", 0},     {"allow-nonfinite", 0}, {"gpus", 1},
    {"sp-one-device", 0}, {"gemm-scales", 1}, {NULL, 0}};
enum { F_WEIGHTS, F_BLOCK, F_QKV_LAYOUT, F_INPUT, F_OUTPUT, F_JSON, F_TOKENS, F_SEED, F_PROFILE, F_REPEAT, F_WARMUP,
       F_SAMPLE, F_CHECK, F_ATTN, F_SMOOTH_V, F_ROTATE_QK, F_GEMM, F_GEMM_ACCUM, F_CPU, F_CPU_EXACT, F_GPU, F_QUIET,
       F_ALLOW_NONFINITE, F_GPUS, F_SP_ONE_DEVICE, F_GEMM_SCALES };

#define PROG "dit_block"
#define usage_error(...) h3_cli_fail(PROG, __VA_ARGS__)

/* --gemm: bf16 (mask 0), fp8 (all four) or fp8:LIST, LIST a non-empty
 * comma-separated set of h3_gemm_names without repeats. */
static int parse_gemm(const char *v)
{
    if (!strcmp(v, "bf16")) return 0;
    if (!strcmp(v, "fp8")) return H3_FP8_ALL;
    if (strncmp(v, "fp8:", 4))
        usage_error("--gemm: '%s' is not one of bf16, fp8, fp8:LIST (LIST: qkv, out, fc1, fc2, comma-separated)", v);
    if (!v[4]) usage_error("--gemm: '%s' names no GEMM (LIST: one or more of qkv, out, fc1, fc2, comma-separated)", v);
    int mask = 0;
    for (const char *p = v + 4;; p++) {
        const size_t n = strcspn(p, ",");
        int g = 0;
        while (g < H3_GEMMS && !(strlen(h3_gemm_names[g]) == n && !strncmp(p, h3_gemm_names[g], n))) g++;
        char name[40];
        snprintf(name, sizeof name, "%.*s", (int)(n < 32 ? n : 32), p);
        if (!n) usage_error("--gemm: '%s' has an empty name in its list", v);
        if (g == H3_GEMMS) usage_error("--gemm: '%s' names '%s', not one of qkv, out, fc1, fc2", v, name);
        if (mask >> g & 1) usage_error("--gemm: '%s' names '%s' twice", v, name);
        mask |= 1 << g;
        p += n;
        if (!*p) break;
    }
    return mask;
}

static void version_extra(FILE *f)
{
#ifdef H3_HAVE_CUDA
    gpu_libs v;
    gpu_lib_versions(&v);
    char line[256];
    gpu_libs_describe(&v, line, sizeof line);
    fprintf(f, "%s\n", line);
#else
    (void)f;
#endif
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
    o->gemm_scales_auto = 1;
    int profile_given = 0;
    static const char *const on_off[] = {"off", "on", NULL};
    const h3_cli c = {PROG, usage_text, flags, version_extra};
    const char *v;
    for (int f; (f = h3_cli_next(&c, argc, argv, &v)) >= 0;) {
        char flag[40]; /* "--tokens", for messages */
        snprintf(flag, sizeof flag, "--%s", flags[f].name);
        switch (f) {
        case F_WEIGHTS: o->weights = v; break;
        case F_BLOCK: o->block = (int)h3_cli_uint(PROG, flag, v, 0, 1000000000); break;
        case F_QKV_LAYOUT: {
            static const char *const l[] = {"grouped", "stacked", NULL};
            o->qkv_layout = h3_cli_choice(PROG, flag, v, l) ? H3_QKV_STACKED : H3_QKV_GROUPED;
            break;
        }
        case F_INPUT: o->input = v; break;
        case F_OUTPUT: o->output = v; break;
        case F_JSON: o->json = v; break;
        case F_TOKENS: o->tokens = (int)h3_cli_uint(PROG, flag, v, 1, 1 << 22); break;
        case F_SEED: o->seed = h3_cli_uint(PROG, flag, v, 0, INT64_MAX); break;
        case F_PROFILE: {
            h3_profile p;
            if (h3_profile_parse(v, &p) != 0) usage_error("--profile: '%s' is not one of model, uniform", v);
            o->profile = (int)p;
            profile_given = 1;
            break;
        }
        case F_REPEAT:
            o->repeat = (int)h3_cli_uint(PROG, flag, v, 1, 100000);
            o->repeat_given = 1;
            break;
        case F_WARMUP:
            o->warmup = (int)h3_cli_uint(PROG, flag, v, 0, 100000);
            o->warmup_given = 1;
            break;
        case F_SAMPLE:
            o->sample = (int)h3_cli_uint(PROG, flag, v, 1, 1 << 22);
            o->sample_given = 1;
            break;
        case F_CHECK: {
            static const char *const m[] = {"stages", "full", "none", NULL}; /* check_mode order */
            o->check = (check_mode)h3_cli_choice(PROG, flag, v, m);
            o->check_given = 1;
            break;
        }
        case F_ATTN: {
            static const char *const k[] = {"auto", "mma", "sm90", NULL}; /* attn_choice order */
            o->attn = (attn_choice)h3_cli_choice(PROG, flag, v, k);
            o->attn_given = 1;
            break;
        }
        case F_SMOOTH_V: o->smooth_v = h3_cli_choice(PROG, flag, v, on_off); break;
        case F_ROTATE_QK: o->rotate_qk = h3_cli_choice(PROG, flag, v, on_off); break;
        case F_GEMM:
            o->fp8_mask = parse_gemm(v);
            o->gemm = v;
            break;
        case F_GEMM_ACCUM: {
            static const char *const a[] = {"fp32", "fast", NULL};
            o->fast_accum = h3_cli_choice(PROG, flag, v, a);
            break;
        }
        case F_CPU: o->path = PATH_CPU; break;
        case F_CPU_EXACT: o->exact_cpu = 1; break;
        case F_GPU: o->path = PATH_GPU; break;
        case F_QUIET: o->quiet = 1; break;
        case F_ALLOW_NONFINITE: o->allow_nonfinite = 1; break;
        case F_GPUS: o->gpus = (int)h3_cli_uint(PROG, flag, v, 1, 8); break;
        case F_SP_ONE_DEVICE: o->sp_one_device = 1; break;
        case F_GEMM_SCALES: {
            static const char *const sc[] = {"rows", "blocks", "auto", NULL};
            const int i = h3_cli_choice(PROG, flag, v, sc);
            o->gemm_scales_auto = i == 2;
            o->gemm_blocks = i == 1;
            break;
        }
        }
    }
    if (!o->weights) usage_error("--weights PATH is required");
    if (o->input && profile_given)
        usage_error("--profile: the inputs come from --input (the profile shapes synthetic inputs only)");
    if (o->input && o->tokens) usage_error("--tokens and --input exclude each other (the input file sets S)");
    if (o->sp_one_device && o->gpus < 2) usage_error("--sp-one-device needs --gpus P with P >= 2");
    if (o->smooth_v == 1 && o->path == PATH_CPU)
        usage_error("--smooth-v on: the CPU path does not smooth V (its chain quantises V chunk by chunk)");
    if (o->rotate_qk && o->path == PATH_CPU)
        usage_error("--rotate-qk on: the CPU path does not rotate Q and K (the GPU runners do; the checker has the CPU's "
                    "twin)");
    if (o->fast_accum && !o->fp8_mask)
        usage_error("--gemm-accum fast: only FP8 GEMMs have it (add --gemm fp8 or fp8:LIST; --gemm is '%s')", o->gemm);
    if (o->gemm_blocks && !o->fp8_mask)
        usage_error("--gemm-scales blocks: only FP8 GEMMs have scales (add --gemm fp8 or fp8:LIST; --gemm is '%s')",
                    o->gemm);
    if (o->gemm_blocks && o->fast_accum)
        usage_error("--gemm-scales blocks: cuBLASLt's block-scaled FP8 GEMMs sum in FP32 (drop --gemm-accum fast)");
    if (o->gemm_blocks && (o->gpus > 1 || o->sp_one_device))
        usage_error("--gemm-scales blocks: one GPU only (not yet tested with --gpus P or --sp-one-device)");
    /* auto: block scales wherever they can run (measured faster and closer
     * to FP32 than row scales: docs/perf.md); a GPU run whose token count
     * is not a multiple of 8 falls back to rows in main */
    if (o->gemm_scales_auto) o->gemm_blocks = o->fp8_mask && !o->fast_accum && o->gpus == 1 && !o->sp_one_device;
    if (o->gemm_blocks) o->fp8_mask |= H3_FP8_BLOCKS;
    if (o->fast_accum && o->path == PATH_CPU)
        usage_error("--gemm-accum fast: the CPU path sums in FP32 (fast accumulation is the GPU's)");
    if (o->gpus > 1 || o->sp_one_device) {
        if (o->path == PATH_CPU) usage_error("--gpus: the CPU path runs on one host");
        if (o->check_given && o->check != CHECK_NONE)
            usage_error("--gpus: stage checks run on one GPU (use --check none; compare the output with --gpus 1%s)",
                        o->fp8_mask ? " --gemm-scales rows" : "");
        o->check = CHECK_NONE;
    }
}
