/* main.c — dit_block: load and validate one H3 block and its inputs, run it on
 * the GPU (or the CPU reference), print the per-op table and the checks.
 *
 * Exit codes: 0 all checks pass; 1 a stage check failed, out of host or
 * device memory (the message gives the bytes needed) or an internal error; 2
 * a user error (bad flag, unreadable, malformed, FIFO or device file, an
 * output that is the same file as an input or the other output or cannot be
 * written there, no usable GPU with --gpu). The outputs are checked before
 * any work. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "block.h"
#include "cli.h"
#include "config.h"
#include "cpu_ref.h"
#include "files.h"
#include "inputs.h"
#include "report.h"
#include "safetensors.h"
#ifdef H3_HAVE_CUDA
#include "runner.h"
#endif

#define CPU_DEFAULT_TOKENS 1024

static void warn_cb(const char *msg) { fprintf(stderr, "dit_block: warning: %s\n", msg); }

static void die(int code, const char *msg)
{
    fprintf(stderr, "dit_block: %s\n", msg);
    exit(code);
}
static void die_user(const char *msg) { die(2, msg); }

/* The loaders' codes: a refused file is the user's (2), no memory is not (1). */
static int exit_code(int rc) { return rc == ST_ERR_RESOURCE ? 1 : 2; }

static void print_summary(const h3_block *b, const h3_inputs *in, const char *path)
{
    const h3_config *c = &b->cfg;
    fprintf(stderr, "weights %s: %d tensors, %.3f GB BF16 (%lld parameters)%s\n", path, b->file.n_tensors,
            h3_param_count(c) * 2 / 1e9, (long long)h3_param_count(c),
            b->block_index >= 0 ? "" : ", no block prefix");
    if (b->block_index >= 0) fprintf(stderr, "  block %d\n", b->block_index);
    fprintf(stderr, "  config: hidden %d, heads %d x %d, ffn %d, temb %d, modalities %d, eps %g\n", c->hidden,
            c->heads, c->head_dim, c->ffn, c->temb, c->modalities, c->eps);
    fprintf(stderr, "inputs: %d tokens (video %d, text %d, audio %d)\n", in->S, in->count[H3_TAG_VIDEO],
            in->count[H3_TAG_TEXT], in->count[H3_TAG_AUDIO]);
}

/* NaN or Inf anywhere in the weights or x would make every later check
 * meaningless: refuse them up front, naming the tensor and element. */
static int first_nonfinite_bf16(const uint16_t *v, size_t n, size_t *at)
{
    for (size_t i = 0; i < n; i++)
        if ((v[i] & 0x7f80) == 0x7f80) { /* exponent all ones: Inf or NaN */
            *at = i;
            return 1;
        }
    return 0;
}

static void require_finite(const h3_block *b, const h3_inputs *in, const char *wpath, const char *ipath)
{
    h3_tensor_spec specs[H3_T_COUNT];
    h3_tensor_specs(&b->cfg, specs);
    char msg[512];
    size_t at;
    for (int i = 0; i < H3_T_COUNT; i++) {
        size_t n = (size_t)specs[i].shape[0] * (specs[i].rank == 2 ? (size_t)specs[i].shape[1] : 1);
        if (first_nonfinite_bf16(b->w[i], n, &at)) {
            snprintf(msg, sizeof msg, "%s: tensor '%s' has a non-finite value (NaN or Inf) at element %zu", wpath,
                     specs[i].name, at);
            die_user(msg);
        }
    }
    if (first_nonfinite_bf16(in->x, (size_t)in->S * b->cfg.hidden, &at)) {
        snprintf(msg, sizeof msg, "%s: tensor 'x' has a non-finite value (NaN or Inf) at token %zu, channel %zu", ipath,
                 at / b->cfg.hidden, at % b->cfg.hidden);
        die_user(msg);
    }
}

static double now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec * 1e3 + tv.tv_usec * 1e-3;
}

/* The whole block on the CPU reference, with its per-stage table. 0, or -1
 * out of host memory. */
static int run_cpu(const cli_options *o, const h3_block *b, const h3_inputs *in, report *r, uint16_t *out)
{
    const h3_config *c = &b->cfg;
    const int S = in->S;
    cpu_block_weights wt;
    for (int i = 0; i < H3_T_COUNT; i++) wt.w[i] = b->w[i];
    cpu_block_stats st;
    const int key_tile = 32; /* the portable kernel's tile: the CPU result is what that kernel should give */
    const int mask = o->fp8_mask;
    /* Which GEMMs run in which precision, for the log line and the report:
     * all one way reads as before; a subset names both lists. */
    char fp8_list[H3_GEMM_LIST_LEN], bf16_list[H3_GEMM_LIST_LEN], gemms[64];
    h3_gemm_list(mask, fp8_list, sizeof fp8_list);
    h3_gemm_list(H3_FP8_ALL & ~mask, bf16_list, sizeof bf16_list);
    if (mask == 0 || mask == H3_FP8_ALL)
        snprintf(gemms, sizeof gemms, "%s", mask ? "FP8 (e4m3)" : "BF16");
    else
        snprintf(gemms, sizeof gemms, "FP8 (e4m3) %s, BF16 %s", fp8_list, bf16_list);
    fprintf(stderr, "running the block on the CPU reference (%d threads, %s attention, %s GEMMs)...\n",
            omp_get_max_threads(), o->exact_cpu ? "exact FP32" : "emulated FP8", gemms);
    double t0 = now_ms();
    const int rc = mask ? cpu_block_forward_fp8(c, &wt, S, in->x, in->temb, in->tags, in->pos, key_tile, mask,
                                                !o->quiet, out, &st)
                        : cpu_block_forward(c, &wt, S, in->x, in->temb, in->tags, in->pos, key_tile, o->exact_cpu,
                                            !o->quiet, out, &st);
    if (rc) return -1;
    r->total_ms = now_ms() - t0;
    snprintf(r->path, sizeof r->path, "cpu");
    snprintf(r->device, sizeof r->device, "CPU, %d OpenMP threads", omp_get_max_threads());
    snprintf(r->attn_kernel, sizeof r->attn_kernel, "%s", o->exact_cpu ? "cpu exact fp32" : "cpu emulated fp8 (key tile 32)");
    if (mask == 0 || mask == H3_FP8_ALL)
        snprintf(r->gemm, sizeof r->gemm, "%s", mask ? "fp8 emulated (e4m3 per channel x per token, fp32 sums)" : "fp32 (bf16 in)");
    else
        snprintf(r->gemm, sizeof r->gemm, "fp8 emulated %s (e4m3 per channel x per token, fp32 sums), fp32 %s (bf16 in)",
                 fp8_list, bf16_list);
    r->tokens = S;
    for (int s = 0; s < H3_STAGE_COUNT; s++) {
        double fl = h3_stage_flops(c, S, s);
        report_add_row(r, h3_stage_names[s], st.ms[s], fl, 0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    cli_options o;
    parse_cli(argc, argv, &o);
    char err[1024];
    /* the outputs, before anything is loaded: nothing is read, run or
     * written for a command that could not write its results */
    if (check_files(&o, err, sizeof err)) die_user(err);

    h3_block blk;
    int rc = h3_block_load(o.weights, &blk, warn_cb, err, sizeof err);
    if (rc) die(exit_code(rc), err);
    const h3_config *cfg = &blk.cfg;

    /* Which path: the GPU when there is a usable one, else the CPU. */
    int use_gpu = 0;
    char why_cpu[256] = "--cpu given";
#ifdef H3_HAVE_CUDA
    gpu_info gi;
    if (o.path != PATH_CPU) {
        int have = gpu_probe(&gi);
        if (have && gi.supported) {
            use_gpu = 1;
        } else {
            snprintf(why_cpu, sizeof why_cpu, "%s%s", gi.name,
                     have ? ": this build has no kernels for it (rebuild with H3_CUDA_ARCHS including it)" : "");
        }
    }
#else
    snprintf(why_cpu, sizeof why_cpu, "built without CUDA");
#endif
    if (o.path == PATH_GPU && !use_gpu) {
        snprintf(err, sizeof err, "--gpu: no usable GPU: %s", why_cpu);
        die_user(err);
    }
    if (!use_gpu && o.gpus > 1) {
        snprintf(err, sizeof err, "--gpus %d: no usable GPU: %s", o.gpus, why_cpu);
        die_user(err);
    }
    if (!use_gpu && o.smooth_v == 1) {
        snprintf(err, sizeof err, "--smooth-v on: no usable GPU (%s), and the CPU path does not smooth V", why_cpu);
        die_user(err);
    }
    if (!use_gpu && o.rotate_qk) {
        snprintf(err, sizeof err, "--rotate-qk on: no usable GPU (%s), and the CPU path does not rotate Q and K", why_cpu);
        die_user(err);
    }
    if (!use_gpu && o.fp8_mask && o.exact_cpu) {
        snprintf(err, sizeof err, "--gemm %s and --cpu-exact exclude each other (the FP8 chain uses the emulated FP8 attention)",
                 o.gemm);
        die_user(err);
    }
    if (!use_gpu && o.path != PATH_CPU) fprintf(stderr, "dit_block: %s: running the CPU path\n", why_cpu);

    h3_inputs in;
    if (o.input) {
        if ((rc = h3_inputs_load(o.input, cfg, &in, err, sizeof err))) die(exit_code(rc), err);
    } else {
        int S = o.tokens;
        if (!S) {
            S = use_gpu ? H3_DEFAULT_TOKENS : CPU_DEFAULT_TOKENS;
            if (!use_gpu)
                fprintf(stderr, "dit_block: CPU path: %d tokens instead of %d (pass --tokens N to change)\n", S,
                        H3_DEFAULT_TOKENS);
        }
#ifdef H3_HAVE_CUDA
        /* Before generating S tokens of inputs on the host: will they fit the GPU? */
        if (use_gpu && o.gpus == 1 && gpu_check_fits(cfg, S, o.fp8_mask, err, sizeof err)) {
            fprintf(stderr, "dit_block: %s\n", err);
            return 1;
        }
#endif
        if ((rc = h3_inputs_default(cfg, S, o.seed, &in, err, sizeof err))) die(exit_code(rc), err);
    }
    require_finite(&blk, &in, o.weights, o.input ? o.input : "synthetic inputs");
    print_summary(&blk, &in, o.weights);

    uint16_t *out = NULL;
    if (o.output || (!use_gpu)) {
        out = malloc((size_t)in.S * cfg->hidden * 2);
        if (!out) {
            fprintf(stderr, "dit_block: out of host memory for the %d x %d output\n", in.S, cfg->hidden);
            return 1;
        }
    }

    report r;
    memset(&r, 0, sizeof r);
    if (use_gpu) {
#ifdef H3_HAVE_CUDA
        int user_error = 0;
        const int sp = o.gpus > 1 || o.sp_one_device;
        if ((sp ? gpu_run_block_sp : gpu_run_block)(&o, &gi, &blk, &in, &r, out, &user_error, err, sizeof err)) {
            fprintf(stderr, "dit_block: %s\n", err);
            return user_error ? 2 : 1;
        }
#endif
    } else if (run_cpu(&o, &blk, &in, &r, out)) {
        fprintf(stderr, "dit_block: out of host memory running the block on the CPU at %d tokens\n", in.S);
        return 1;
    }
    report_print(&r, stdout);

    if (o.json && report_write_json(&r, o.json, err, sizeof err)) die_user(err);
    if (o.output) {
        st_write_tensor t = {{"x", ST_BF16, 2, {in.S, cfg->hidden}}, out};
        const char *meta[] = {"producer", "dit_block", "path", r.path};
        if (st_write(o.output, &t, 1, meta, 2, err, sizeof err)) die_user(err);
        fprintf(stderr, "wrote %s\n", o.output);
    }
    int ok = report_all_pass(&r);
    if (!ok) {
        for (int i = 0; i < r.n_checks; i++)
            if (r.checks[i].asserted && !r.checks[i].pass)
                fprintf(stderr, "dit_block: check FAILED: stage %s (%s)\n", r.checks[i].stage, r.checks[i].what);
    }
    free(out);
    h3_inputs_free(&in);
    h3_block_free(&blk);
    return ok ? 0 : 1;
}
