/* main.c — dit_block: load and validate one H3 block and its inputs, run it on
 * the GPU (or the CPU reference), print the per-op table and the checks.
 *
 * Exit codes: 0 the run completed and every check that ran passed; 1 a stage
 * check failed, the block's output holds NaN/Inf (unless --allow-nonfinite),
 * out of host or device memory (the message gives the bytes), or an internal
 * error; 2 a user error (bad flag, unreadable, malformed, FIFO or device
 * file, an output that is the same file as an input or the other output or
 * cannot be written there, no usable GPU with --gpu). Errors are one line on
 * stderr, with every path and name in it escaped. The outputs are checked
 * before any work and written only by a run that succeeded. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "block.h"
#include "cli.h"
#include "config.h"
#include "cpu_ref.h"
#include "files.h"
#include "inputs.h"
#include "numerics.h"
#include "report.h"
#include "safetensors.h"
#include "version.h"
#ifdef H3_HAVE_CUDA
#include "runner.h"
#include "stage_checks.h"
#endif

#define CPU_DEFAULT_TOKENS 1024

/* One line on stderr, "dit_block: <kind><msg>". Paths and names in msg come
 * from flags and files: control characters are escaped (st_escape), so the
 * line stays one line and cannot drive the terminal. */
static void say(const char *kind, const char *msg)
{
    char line[2048];
    fprintf(stderr, "dit_block: %s%s\n", kind, st_escape(line, sizeof line, msg, strlen(msg), 0));
}

static void warn_cb(const char *msg) { say("warning: ", msg); }

static void die(int code, const char *msg)
{
    say("", msg);
    exit(code);
}

/* The loaders' codes: a refused file is the user's (2), no memory is not (1). */
static int exit_code(int rc) { return rc == ST_ERR_RESOURCE ? 1 : 2; }

/* The block's shapes are the published H3 block's? */
static int is_h3(const h3_config *c)
{
    const h3_config f = h3_config_full();
    return c->hidden == f.hidden && c->heads == f.heads && c->head_dim == f.head_dim && c->ffn == f.ffn &&
           c->temb == f.temb && c->modalities == f.modalities;
}

static void print_summary(const h3_block *b, const h3_inputs *in, const char *path, const cli_options *o,
                          const report *r)
{
    const h3_config *c = &b->cfg;
    char p[1024], lay[1200];
    st_escape(p, sizeof p, path, strlen(path), 0);
    char which[96];
    if (b->block_index < 0)
        snprintf(which, sizeof which, "no block number, %d tensors", b->n_source_tensors);
    else
        snprintf(which, sizeof which, "block %d (%d block%s, %d tensors in the source)", b->block_index, b->n_blocks,
                 b->n_blocks == 1 ? "" : "s", b->n_source_tensors);
    /* a test-size block must not pass for the real one: said on the first line */
    fprintf(stderr, "weights %s: %s%s, %.3f GB BF16 (%lld parameters)%s%s\n", p,
            r->h3_config ? "" : "NOT THE H3 BLOCK (a smaller config: its timings and errors say nothing about H3), ",
            which, h3_param_count(c) * 2 / 1e9, (long long)h3_param_count(c),
            b->profile[0] ? ", synthetic, profile " : "", b->profile);
    fprintf(stderr, "  layout: %s\n", st_escape(lay, sizeof lay, b->layout, strlen(b->layout), 0));
    fprintf(stderr, "  config: %s, eps %g%s\n", r->config, c->eps,
            r->h3_config ? "" : " -- H3 is hidden 5376, heads 56 x 128, ffn 14336, temb 2688, modalities 3");
    fprintf(stderr, "inputs: %d tokens (video %d, text %d, audio %d)", in->S, in->count[H3_TAG_VIDEO],
            in->count[H3_TAG_TEXT], in->count[H3_TAG_AUDIO]);
    if (o->input)
        fprintf(stderr, " from %s\n", st_escape(p, sizeof p, o->input, strlen(o->input), 0));
    else
        fprintf(stderr, ", synthetic: profile %s, seed %llu\n", h3_profile_name((h3_profile)o->profile),
                (unsigned long long)o->seed);
}

/* NaN or Inf anywhere in the weights or x would make every later check
 * meaningless: refuse them up front, naming the tensor and element. */
static void require_finite(const h3_block *b, const h3_inputs *in, const char *wpath, const char *ipath)
{
    h3_tensor_spec specs[H3_T_COUNT];
    h3_tensor_specs(&b->cfg, specs);
    char msg[512];
    long at;
    for (int i = 0; i < H3_T_COUNT; i++) {
        size_t n = (size_t)specs[i].shape[0] * (specs[i].rank == 2 ? (size_t)specs[i].shape[1] : 1);
        if ((at = h3_bf16_first_nonfinite(b->w[i], n)) >= 0) {
            snprintf(msg, sizeof msg, "%s: tensor '%s' has a non-finite value (NaN or Inf) at element %ld", wpath,
                     specs[i].name, at);
            die(2, msg);
        }
    }
    if ((at = h3_bf16_first_nonfinite(in->x, (size_t)in->S * b->cfg.hidden)) >= 0) {
        snprintf(msg, sizeof msg, "%s: tensor 'x' has a non-finite value (NaN or Inf) at token %ld, channel %ld", ipath,
                 at / b->cfg.hidden, at % b->cfg.hidden);
        die(2, msg);
    }
}

/* cuBLASLt's block-scaled GEMMs take token counts that are multiples of 8:
 * on the GPU, --gemm-scales auto takes row scales for any other S (with a
 * note), and an explicit --gemm-scales blocks is refused. Called once S is
 * known (before the memory check for synthetic inputs, after loading a file). */
static void settle_gemm_scales(cli_options *o, int use_gpu, int S)
{
    if (!use_gpu || !o->gemm_blocks || S % 8 == 0) return;
    char err[256];
    if (!o->gemm_scales_auto) {
        snprintf(err, sizeof err,
                 "--gemm-scales blocks: cuBLASLt's block-scaled GEMMs need a token count that is a multiple of 8 "
                 "(this run has %d)", S);
        die(2, err);
    }
    o->gemm_blocks = 0;
    o->fp8_mask &= ~H3_FP8_BLOCKS;
    fprintf(stderr, "dit_block: FP8 GEMMs with row scales: block scales need a token count that is a multiple of 8 "
                    "(this run has %d)\n", S);
}

/* Flags given that do not apply on the path that runs: one warning line. */
static void warn_ignored(const cli_options *o, int use_gpu)
{
    const struct {
        int given;
        const char *flag;
    } f[] = {
        {use_gpu && o->exact_cpu, "--cpu-exact"},
        {!use_gpu && o->check_given && o->check != CHECK_NONE, o->check == CHECK_FULL ? "--check full" : "--check stages"},
        {!use_gpu && o->sample_given, "--sample"},
        {!use_gpu && o->attn_given, "--attn"},
    };
    char list[128] = "";
    size_t n = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].given) n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "", f[i].flag);
    if (n)
        fprintf(stderr, "dit_block: warning: %s: %s\n", list,
                use_gpu ? "applies to the CPU path only, ignored on the GPU"
                        : "GPU only, ignored on the CPU path (no GPU output to check: no check runs)");
}

static double now_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec * 1e3 + tv.tv_usec * 1e-3;
}

/* The whole block on the CPU reference, --warmup untimed and --repeat timed
 * runs (defaults 0 and 1: a run of the full block takes minutes), with the
 * per-stage medians. 0, or -1 out of host memory. */
static int run_cpu(const cli_options *o, const h3_block *b, const h3_inputs *in, report *r, uint16_t *out)
{
    const h3_config *c = &b->cfg;
    const int S = in->S;
    cpu_block_weights wt;
    for (int i = 0; i < H3_T_COUNT; i++) wt.w[i] = b->w[i];
    const int key_tile = 32; /* the portable kernel's tile: the CPU result is what that kernel should give */
    const int mask = o->fp8_mask & H3_FP8_ALL;
    const char *scales = o->gemm_blocks ? "e4m3 per 128x128 weight block x 1x128 input block"
                                        : "e4m3 per channel x per token";
    const int R = o->repeat_given ? o->repeat : 1, W = o->warmup_given ? o->warmup : 0;
    /* Which GEMMs run in which precision, for the log line and the report:
     * all one way reads as before; a subset names both lists. */
    char fp8_list[H3_GEMM_LIST_LEN], bf16_list[H3_GEMM_LIST_LEN], gemms[64];
    h3_gemm_list(mask, fp8_list, sizeof fp8_list);
    h3_gemm_list(H3_FP8_ALL & ~mask, bf16_list, sizeof bf16_list);
    if (mask == 0 || mask == H3_FP8_ALL)
        snprintf(gemms, sizeof gemms, "%s", mask ? "FP8 (e4m3)" : "BF16");
    else
        snprintf(gemms, sizeof gemms, "FP8 (e4m3) %s, BF16 %s", fp8_list, bf16_list);
    fprintf(stderr, "running the block on the CPU reference (%d threads, %s attention, %s GEMMs): %d warm-up + %d "
                    "timed run%s...\n",
            omp_get_max_threads(), o->exact_cpu ? "exact FP32" : "emulated FP8", gemms, W, R, R == 1 ? "" : "s");
    double *t = calloc((size_t)R * (H3_STAGE_COUNT + 1), sizeof(double)); /* [stage or total][R] ms */
    if (!t) return -1;
    cpu_block_stats st;
    for (int it = 0; it < W + R; it++) {
        const double t0 = now_ms();
        const int rc = mask ? cpu_block_forward_fp8(c, &wt, S, in->x, in->temb, in->tags, in->pos, key_tile, o->fp8_mask,
                                                    !o->quiet, out, &st)
                            : cpu_block_forward(c, &wt, S, in->x, in->temb, in->tags, in->pos, key_tile, o->exact_cpu,
                                                !o->quiet, out, &st);
        const double el = now_ms() - t0;
        if (rc) {
            free(t);
            return -1;
        }
        if (it < W) continue;
        for (int s = 0; s < H3_STAGE_COUNT; s++) t[(size_t)s * R + (it - W)] = st.ms[s];
        t[(size_t)H3_STAGE_COUNT * R + (it - W)] = el;
    }
    if (st.first_nonfinite >= 0)
        snprintf(r->nonfinite_stage, sizeof r->nonfinite_stage, "%s", h3_stage_names[st.first_nonfinite]);
    r->total_ms = h3_median(t + (size_t)H3_STAGE_COUNT * R, R);
    r->repeat = R;
    r->warmup = W;
    snprintf(r->path, sizeof r->path, "cpu");
    snprintf(r->device, sizeof r->device, "CPU, %d OpenMP threads", omp_get_max_threads());
    snprintf(r->attn_kernel, sizeof r->attn_kernel, "%s", o->exact_cpu ? "cpu exact fp32" : "cpu emulated fp8 (key tile 32)");
    if (mask == 0)
        snprintf(r->gemm, sizeof r->gemm, "fp32 (bf16 in)");
    else if (mask == H3_FP8_ALL)
        snprintf(r->gemm, sizeof r->gemm, "fp8 emulated (%s, fp32 sums)", scales);
    else
        snprintf(r->gemm, sizeof r->gemm, "fp8 emulated %s (%s, fp32 sums), fp32 %s (bf16 in)", fp8_list, scales,
                 bf16_list);
    r->tokens = S;
    for (int s = 0; s < H3_STAGE_COUNT; s++) {
        double fl = h3_stage_flops(c, S, s);
        report_add_row(r, h3_stage_names[s], h3_median(t + (size_t)s * R, R), fl, 0);
    }
    free(t);
    return 0;
}

#ifdef H3_HAVE_CUDA
/* A GPU run's timing rows, device and kernels into the report (path "gpu"). */
static void report_take_run(report *r, const h3_run_result *res, const gpu_info *gi, int S, const h3_config *cfg,
                            int repeat, int warmup)
{
    snprintf(r->path, sizeof r->path, "gpu");
    r->has_gpu = 1;
    report_gpu *g = &r->gpu;
    snprintf(g->name, sizeof g->name, "%s", gi->model);
    g->cc_major = gi->cc_major;
    g->cc_minor = gi->cc_minor;
    g->sms = gi->sms;
    g->sm_clock_mhz = gi->sm_clock_mhz;
    g->mem_clock_mhz = gi->mem_clock_mhz;
    g->mem_gb = gi->mem_bytes / 1e9;
    snprintf(g->driver, sizeof g->driver, "%s", gi->libs.driver);
    g->driver_cuda = gi->libs.driver_cuda;
    g->cuda_runtime = gi->libs.runtime;
    g->cublaslt = (unsigned long)gi->libs.cublaslt;
    r->warmup = warmup;
    snprintf(r->device, sizeof r->device, "%s", res->device);
    snprintf(r->attn_kernel, sizeof r->attn_kernel, "%s", res->attn_kernel);
    snprintf(r->gemm, sizeof r->gemm, "%s", res->gemm);
    snprintf(r->nonfinite_stage, sizeof r->nonfinite_stage, "%s", res->nonfinite_stage);
    r->tokens = S;
    r->heads = cfg->heads;
    r->hidden = cfg->hidden;
    r->repeat = repeat;
    _Static_assert(REPORT_MAX_ROWS >= H3_RUN_MAX_ROWS, "a run's rows fit in the report");
    memcpy(r->rows, res->rows, (size_t)res->n_rows * sizeof *res->rows);
    r->n_rows = res->n_rows;
    r->total_ms = res->total_ms;
    r->graph_ms = res->graph_ms;
    r->peak_mem_gb = res->peak_mem_gb;
}
#endif

/* A file the run read, for the report: the path as given, the file read,
 * its size and header hash; unknown ones stay -1 and "" (null). */
static void take_file(report_file *rf, const char *given, const char *file)
{
    rf->path = given;
    rf->size = -1;
    snprintf(rf->file, sizeof rf->file, "%s", file);
    uint64_t size, hash;
    char err[512];
    if (st_fingerprint(file, &size, &hash, err, sizeof err) == 0) {
        rf->size = (long long)size;
        snprintf(rf->hash, sizeof rf->hash, "%016llx", (unsigned long long)hash);
    }
}

int main(int argc, char **argv)
{
    cli_options o;
    parse_cli(argc, argv, &o);
    const time_t started = time(NULL);
    char err[1024];
    /* the outputs, before anything is loaded: nothing is read, run or
     * written for a command that could not write its results */
    if (check_files(&o, err, sizeof err)) die(2, err);

    h3_block blk;
    const h3_load_options lo = {.block = o.block, .qkv = o.qkv_layout};
    int rc = h3_block_load_with(o.weights, &lo, &blk, warn_cb, err, sizeof err);
    if (rc) die(exit_code(rc), err);
    const h3_config *cfg = &blk.cfg;

    /* Which path: the GPU when there is a usable one, else the CPU. */
    int use_gpu = 0;
    char why_cpu[512] = "--cpu given";
#ifdef H3_HAVE_CUDA
    gpu_info gi;
    if (o.path != PATH_CPU) {
        gpu_probe(&gi); /* its status picks the message: no driver, an old one, no GPU, no kernel for it */
        if (gi.status == H3_GPU_OK)
            use_gpu = 1;
        else if (gi.status == H3_GPU_NO_KERNEL)
            snprintf(why_cpu, sizeof why_cpu, "%s: this build has no kernels for it (built for %s; rebuild with "
                     "H3_CUDA_ARCHS naming sm_%d%d)", gi.name, h3_cuda_targets, gi.cc_major, gi.cc_minor);
        else
            snprintf(why_cpu, sizeof why_cpu, "%s", gi.name);
    }
#else
    snprintf(why_cpu, sizeof why_cpu, "built without CUDA");
#endif
    if (o.path == PATH_GPU && !use_gpu) {
        snprintf(err, sizeof err, "--gpu: no usable GPU: %s", why_cpu);
        die(2, err);
    }
    if (!use_gpu && o.gpus > 1) {
        snprintf(err, sizeof err, "--gpus %d: no usable GPU: %s", o.gpus, why_cpu);
        die(2, err);
    }
    if (!use_gpu && o.smooth_v == 1) {
        snprintf(err, sizeof err, "--smooth-v on: no usable GPU (%s), and the CPU path does not smooth V", why_cpu);
        die(2, err);
    }
    if (!use_gpu && o.rotate_qk) {
        snprintf(err, sizeof err, "--rotate-qk on: no usable GPU (%s), and the CPU path does not rotate Q and K", why_cpu);
        die(2, err);
    }
    if (!use_gpu && o.fp8_mask && o.exact_cpu) {
        snprintf(err, sizeof err, "--gemm %s and --cpu-exact exclude each other (the FP8 chain uses the emulated FP8 attention)",
                 o.gemm);
        die(2, err);
    }
    if (!use_gpu && o.path != PATH_CPU) fprintf(stderr, "dit_block: %s: running the CPU path\n", why_cpu);
    warn_ignored(&o, use_gpu);

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
        settle_gemm_scales(&o, use_gpu, S);
        if (use_gpu && o.gpus == 1 && gpu_check_fits(cfg, S, o.fp8_mask, err, sizeof err)) die(1, err);
#endif
        if ((rc = h3_inputs_default(cfg, S, o.seed, (h3_profile)o.profile, &in, err, sizeof err)))
            die(exit_code(rc), err);
    }
    require_finite(&blk, &in, o.weights, o.input ? o.input : "synthetic inputs");
    settle_gemm_scales(&o, use_gpu, in.S);

    report r;
    memset(&r, 0, sizeof r);
    r.tool = "dit_block";
    r.argc = argc;
    r.argv = argv;
    strftime(r.created_utc, sizeof r.created_utc, "%Y-%m-%dT%H:%M:%SZ", gmtime(&started));
    take_file(&r.weights, o.weights, blk.source);
    snprintf(r.layout, sizeof r.layout, "%s", blk.layout);
    if (o.input) {
        take_file(&r.inputs, o.input, o.input);
    } else {
        r.synthetic = 1;
        r.inputs.size = -1;
        r.seed = o.seed;
        snprintf(r.profile, sizeof r.profile, "%s", h3_profile_name((h3_profile)o.profile));
    }
    snprintf(r.config, sizeof r.config, "hidden %d, heads %d x %d, ffn %d, temb %d, modalities %d", cfg->hidden,
             cfg->heads, cfg->head_dim, cfg->ffn, cfg->temb, cfg->modalities);
    r.h3_config = is_h3(cfg);
    print_summary(&blk, &in, o.weights, &o, &r);

    /* the output on the host on every path: it is scanned for NaN/Inf */
    const size_t nout = (size_t)in.S * cfg->hidden;
    uint16_t *out = malloc(nout * 2); // [S][C] bf16
    if (!out) {
        snprintf(err, sizeof err, "out of host memory for the %d x %d output (%zu bytes)", in.S, cfg->hidden, nout * 2);
        die(1, err);
    }

    if (use_gpu) {
#ifdef H3_HAVE_CUDA
        int user_error = 0;
        const int sp = o.gpus > 1 || o.sp_one_device;
        const h3_run_params rp = {
            .attn = o.attn == ATTN_SM90 ? H3_ATTN_SM90 : o.attn == ATTN_MMA ? H3_ATTN_MMA : H3_ATTN_AUTO,
            .smooth_v = o.smooth_v != 0, /* on unless --smooth-v off */
            .rotate_qk = o.rotate_qk == 1,
            .fp8_mask = o.fp8_mask,
            .fast_accum = o.fast_accum,
            .gemm = o.gemm,
            .repeat = o.repeat,
            .warmup = o.warmup,
            .gpus = o.gpus,
            .sp_one_device = o.sp_one_device,
        };
        h3_stage_check_ctx cx = {&o, &blk, &in, &r};
        const h3_check_hook hook = {h3_stage_checks, &cx};
        h3_run_result res;
        const int fail = sp ? gpu_run_block_sp(&rp, &gi, &blk, &in, &res, out, &user_error, err, sizeof err)
                            : gpu_run_block(&rp, &gi, &blk, &in, o.check == CHECK_NONE ? NULL : &hook, &res, out,
                                            &user_error, err, sizeof err);
        if (fail) die(user_error ? 2 : 1, err);
        report_take_run(&r, &res, &gi, in.S, cfg, o.repeat, o.warmup);
        if (o.check == CHECK_NONE && !sp)
            snprintf(r.checks_not_run, sizeof r.checks_not_run, "--check none");
        else if (o.check == CHECK_NONE) /* the ranks run row scales: so must the reference */
            snprintf(r.checks_not_run, sizeof r.checks_not_run,
                     "--gpus: stage checks run on one GPU; compare the output with --gpus 1%s",
                     o.fp8_mask ? " --gemm-scales rows" : "");
#endif
    } else {
        if (run_cpu(&o, &blk, &in, &r, out)) {
            snprintf(err, sizeof err, "out of host memory running the block on the CPU at %d tokens (hidden %d)", in.S,
                     cfg->hidden);
            die(1, err);
        }
        snprintf(r.checks_not_run, sizeof r.checks_not_run, "no GPU output to check on the CPU path: %s", why_cpu);
    }

    /* A non-finite output is an error whatever the checks say (the CPU path
     * has none), named by the first stage whose output held one. */
    const long nf_at = h3_bf16_first_nonfinite(out, nout);
    if (nf_at >= 0) {
        for (size_t i = (size_t)nf_at; i < nout; i++) r.nonfinite += (out[i] & 0x7f80) == 0x7f80;
        snprintf(err, sizeof err,
                 "the block's output has %ld non-finite values (NaN or Inf) of %zu, first at token %ld, channel %ld; "
                 "the first stage to make one: %s; %s",
                 r.nonfinite, nout, nf_at / cfg->hidden, nf_at % cfg->hidden,
                 r.nonfinite_stage[0] ? r.nonfinite_stage : "not found",
                 o.allow_nonfinite ? "written anyway (--allow-nonfinite)"
                                   : "nothing written (--allow-nonfinite writes it)");
    }
    report_print(&r, stdout);
    fflush(stdout);
    if (nf_at >= 0) {
        if (!o.allow_nonfinite) die(1, err);
        say("warning: ", err);
    }

    /* The outputs were checked up front; a failure here is the machine's
     * (a full disk): exit 1, and the writers leave no partial file. */
    if (o.output) {
        st_write_tensor t = {{"x", ST_BF16, 2, {in.S, cfg->hidden}}, out};
        const char *meta[] = {"producer", "dit_block", "path", r.path};
        if (st_write(o.output, &t, 1, meta, 2, err, sizeof err)) die(1, err);
        fprintf(stderr, "wrote %s\n", st_escape(err, sizeof err, o.output, strlen(o.output), 0));
    }
    if (o.json && report_write_json(&r, o.json, err, sizeof err)) die(1, err);
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
