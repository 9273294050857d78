/* bench_attn.c — times h3block's FP8 attention kernels on the GPU and measures
 * their accuracy against an FP64 reference (DESIGN.md §3, §6).
 *
 *   bench_attn [--seqs 4096,8192,16384,30272,75600] [--heads 56] [--reps 10]
 *              [--warmup 2] [--kernels mma,sm90] [--quant] [--accuracy]
 *              [--accuracy-only] [--acc-seq 8192] [--acc-heads 8] [--seed N]
 *              [--json FILE] [--no-selfcheck] [--qkv FILE[,FILE...]] [--lead-us N]
 *
 * First a self-check (S = 300, H = 3): the quantiser below must reproduce
 * cpu_quant_fp8 bit for bit and the FP64 reference must match
 * cpu_attention_exact; a failure is printed and recorded in the JSON
 * ("selfcheck") and the run goes on.
 *
 * Timing: inputs are random BF16 q, k, v ~ N(0,1) drawn on the GPU and
 * quantised by bench_kernels.cu's own quantiser (the DESIGN.md §3 contract:
 * per (head, 128-token) scale amax/448, e4m3 RNE satfinite, V transposed with
 * keys permuted), so the benchmark does not depend on the code it measures.
 * Several operand sets (>= 2, together >= 3x the L2 size) are rotated so no
 * run finds its inputs in L2. CUDA events around every launch, warm-up first,
 * median (and min) of --reps runs. TFLOPS = 4 S^2 128 H / t. Between
 * back-to-back launches the host keeps ahead of the GPU only while a launch
 * takes longer than its host-side work, and a small launch's sets fit the
 * L2; --lead-us N queues each timed launch behind a read of 3x the L2 and
 * an N µs one-thread spin kernel, so that a launch of a few µs is timed
 * from a cold L2 and without the host's share (tools/bench/scaling.sh). Row
 * h3_fp8_sm90_vs: the Hopper kernel on the smoothed-V path that dit_block
 * takes by default (a V mean passed: its own variant and the mean added in
 * the epilogue; the mean passed is 0, exact for this unsmoothed N(0,1) V).
 * With --variant N (a build with -DH3_LAB=ON) the lab's variant N is timed
 * alone, as row lab_vN, in its own mode (lab/attn_sm90_lab.cu).
 * --quant also
 * times h3k_qk_norm_rope_quant (the fused stage that feeds attention), as
 * the block runs it and with Q/K rotation (row qk_norm_rope_quant+rot).
 *
 * Accuracy (--accuracy): at S = 8192, H = 8, on N(0,1) inputs and on FA3's
 * stress mix N(0,1) + N(0,100) Bernoulli(0.001), each kernel's BF16 O against
 * O computed in FP64 on the GPU from the same BF16 q, k, v (so the error
 * includes FP8 quantisation, the online softmax and the BF16 store): relative
 * RMS ||O - ref|| / ||ref||, RMSE and max abs. The BF16 rounding of the
 * reference itself is printed as the floor no BF16-output kernel can beat.
 * Each kernel runs twice per input: on the contract's operands, and (dist
 * "normal+rot", "stress+rot") with q and k rotated before quantisation
 * (--rotate-qk's Q/K rotation; this file's own rotation, checked against
 * cpu_quant_fp8's in the self-check), against the same reference.
 *
 * --qkv: the attention inputs of a real block instead of N(0,1): each file
 * holds q, k, v as BF16 [S][H*128] (tools/bench/torch_block.py --dump-qkv
 * writes them from a block's weights and inputs); every kernel is timed on
 * them and its error against exact FP64 attention measured on 1024 sampled
 * query rows (bench_qkv; the same rows as peers_attention.py --qkv).
 *
 * A sequence length whose buffers do not fit is reported as "oom" and skipped.
 * The JSON file is rewritten after every sequence length, so a crash keeps
 * what was measured. */
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "config.h"
#include "cpu_ref.h"
#include "numerics.h"
#include "opts.h"
#include "safetensors.h"
#include "bench_kernels.h"

#define D 128
#define MAX_SEQS 32
#define MAX_ROWS 256
#define MAX_SETS 6

typedef int (*attn_fn)(const uint8_t *, const uint8_t *, const uint8_t *, const float *, const float *, const float *,
                       const float *, int, int, uint16_t *, float *, h3_stream);

typedef struct {
    const char *name;
    attn_fn fn;
    int enabled;
    int smooth; /* called with a V mean: the smoothed-V path (sm90: its own variant; the epilogue adds the mean) */
} kernel_t;

/* The V mean the smoothed-V rows pass: zeros. The benchmark's V is N(0,1)
 * (mean ~0) and quantised without smoothing, which a zero mean keeps exact;
 * the kernel runs the same code as with a real mean. */
static float *g_zero_mu;

typedef struct {
    char kernel[32];
    int S, H, sets;
    double ms, min_ms, tflops, gbs;
    char status[96];
} row_t;

typedef struct {
    char kernel[32], dist[16];
    int S, H;
    double rel_rms, rmse, max_abs, bf16_floor;
    long nonfinite;
    char status[96];
} acc_t;

typedef struct {
    uint8_t *q8, *k8, *vt8; /* [H][S_pad][128], [H][S_pad][128], [H][128][S_pad] e4m3 */
    float *sq, *sk, *sv;    /* [H][G] */
} opset;

static row_t g_rows[MAX_ROWS];
static int g_nrows;
static acc_t g_acc[24]; /* 3 kernels x 2 inputs x (plain, Q/K rotated) */
static int g_nacc;
static char g_device[320];
static char g_selfcheck[16] = "skipped";

typedef struct {
    char kernel[32], profile[32];
    int S, H;
    double ms, tflops, rel_rms, max_abs;
    long nonfinite;
    char status[96];
} qkv_row;
#define MAX_QKV_ROWS 64
static qkv_row g_qkv[MAX_QKV_ROWS];
static int g_nqkv;

/* Every allocation of one sequence length goes through here so that an OOM
 * frees what was taken and the next length still runs. */
#define MAX_ALLOCS 64
static void *g_allocs[MAX_ALLOCS];
static int g_nallocs;
static void *dalloc(size_t bytes)
{
    void *p = NULL;
    if (g_nallocs == MAX_ALLOCS) return NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError(); /* an OOM is not sticky; clear it */
        return NULL;
    }
    g_allocs[g_nallocs++] = p;
    return p;
}
static void dfree_all(void)
{
    for (int i = 0; i < g_nallocs; i++) cudaFree(g_allocs[i]);
    g_nallocs = 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die_cuda(cudaError_t e, const char *what)
{
    fprintf(stderr, "bench_attn: %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
    exit(1);
}
#define CHECKQ(cond)                                                        \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "bench_attn: selfcheck: %s failed (host or device memory)\n", #cond); \
            exit(1);                                                        \
        }                                                                   \
    } while (0)
#define CK(call)                                   \
    do {                                           \
        cudaError_t e_ = (call);                   \
        if (e_ != cudaSuccess) die_cuda(e_, #call); \
    } while (0)

static double g_lead_us; /* --lead-us: the spin queued before each timed launch */

static void write_json(const char *path, int H)
{
    if (!path) return;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "bench_attn: cannot write %s\n", path);
        return;
    }
    fprintf(f, "{\n  \"tool\": \"bench_attn\",\n  \"device\": \"%s\",\n  \"selfcheck\": \"%s\",\n  \"heads\": %d,\n  \"lead_us\": %g,\n  \"results\": [",
            g_device, g_selfcheck, H, g_lead_us);
    for (int i = 0; i < g_nrows; i++) {
        const row_t *r = &g_rows[i];
        fprintf(f, "%s\n    {\"kernel\": \"%s\", \"S\": %d, \"H\": %d, \"sets\": %d, ", i ? "," : "", r->kernel, r->S,
                r->H, r->sets);
        if (strcmp(r->status, "ok") == 0) {
            fprintf(f, "\"median_ms\": %.6f, \"min_ms\": %.6f, ", r->ms, r->min_ms);
            if (r->tflops > 0) fprintf(f, "\"tflops\": %.3f, ", r->tflops);
            if (r->gbs > 0) fprintf(f, "\"gbs\": %.3f, ", r->gbs);
        }
        fprintf(f, "\"status\": \"%s\"}", r->status);
    }
    fprintf(f, "\n  ],\n  \"accuracy\": [");
    for (int i = 0; i < g_nacc; i++) {
        const acc_t *a = &g_acc[i];
        fprintf(f, "%s\n    {\"kernel\": \"%s\", \"dist\": \"%s\", \"S\": %d, \"H\": %d, ", i ? "," : "", a->kernel,
                a->dist, a->S, a->H);
        if (strcmp(a->status, "ok") == 0)
            fprintf(f, "\"rel_rms\": %.6e, \"rmse\": %.6e, \"max_abs\": %.6e, \"bf16_floor_rel_rms\": %.6e, \"nonfinite\": %ld, ",
                    a->rel_rms, a->rmse, a->max_abs, a->bf16_floor, a->nonfinite);
        fprintf(f, "\"status\": \"%s\"}", a->status);
    }
    fprintf(f, "\n  ],\n  \"qkv\": [");
    for (int i = 0; i < g_nqkv; i++) {
        const qkv_row *r = &g_qkv[i];
        fprintf(f, "%s\n    {\"kernel\": \"%s\", \"profile\": \"%s\", \"S\": %d, \"H\": %d, ", i ? "," : "",
                r->kernel, r->profile, r->S, r->H);
        if (strcmp(r->status, "ok") == 0)
            fprintf(f, "\"median_ms\": %.6f, \"tflops\": %.3f, \"err_vs_exact\": %.6e, \"max_abs\": %.6e, ",
                    r->ms, r->tflops, r->rel_rms, r->max_abs);
        fprintf(f, "\"nonfinite\": %ld, \"status\": \"%s\"}", r->nonfinite, r->status);
    }
    fprintf(f, "\n  ]\n}\n");
    fclose(f);
}

#ifdef H3_LAB
#include "lab.h"
#endif

static row_t *new_row(const char *kernel, int S, int H)
{
    if (g_nrows == MAX_ROWS) return NULL;
    row_t *r = &g_rows[g_nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->kernel, sizeof r->kernel, "%s", kernel);
    r->S = S;
    r->H = H;
    return r;
}

/* The device buffers of one operand set; -1 if any allocation failed. */
static int alloc_set(opset *o, int S, int H)
{
    const size_t nop = (size_t)H * h3_pad_tokens(S) * D, nsc = (size_t)H * h3_groups(S);
    o->q8 = dalloc(nop);
    o->k8 = dalloc(nop);
    o->vt8 = dalloc(nop);
    o->sq = dalloc(nsc * 4);
    o->sk = dalloc(nsc * 4);
    o->sv = dalloc(nsc * 4);
    return o->q8 && o->k8 && o->vt8 && o->sq && o->sk && o->sv ? 0 : -1;
}

/* Allocates and fills one operand set from fresh BF16 q, k, v (seed). */
static int make_set(opset *o, int S, int H, uint16_t *q, uint16_t *k, uint16_t *v, float *inv, uint64_t seed,
                    int stress)
{
    const size_t nx = (size_t)S * H * D;
    if (alloc_set(o, S, H)) return -1;
    CK((cudaError_t)bench_fill_bf16(q, nx, seed * 3 + 0, stress, 0));
    CK((cudaError_t)bench_fill_bf16(k, nx, seed * 3 + 1, stress, 0));
    CK((cudaError_t)bench_fill_bf16(v, nx, seed * 3 + 2, stress, 0));
    CK((cudaError_t)bench_quant_fp8(q, k, v, NULL, S, H, o->q8, o->k8, o->vt8, o->sq, o->sk, o->sv, inv, 0));
    return 0;
}

/* Another operand set from the same q, k, v with Q/K rotation (config.h):
 * q and k rotated by bench_rotate_rows, then the same quantiser. */
static int make_rotated_set(opset *o, int S, int H, const uint16_t *q, const uint16_t *k, const uint16_t *v, float *inv)
{
    const size_t nx = (size_t)S * H * D;
    static const uint32_t signs[4] = H3_ROT_SIGNS;
    uint16_t *qr = dalloc(nx * 2), *kr = dalloc(nx * 2);
    if (!qr || !kr || alloc_set(o, S, H)) return -1;
    CK((cudaError_t)bench_rotate_rows(q, (long)S * H, signs, H3_ROT_SCALE, qr, 0));
    CK((cudaError_t)bench_rotate_rows(k, (long)S * H, signs, H3_ROT_SCALE, kr, 0));
    CK((cudaError_t)bench_quant_fp8(qr, kr, v, NULL, S, H, o->q8, o->k8, o->vt8, o->sq, o->sk, o->sv, inv, 0));
    return 0;
}

/* Checks a sample of O rows (first and last 64) for NaN (the buffer was
 * poisoned with NaN before the runs, so an unwritten element shows) and for an
 * all-zero output. Returns 0 if fine. */
static int sanity_check_O(const uint16_t *O, int S, int H, char *msg, size_t msglen)
{
    const int n = S < 64 ? S : 64;
    const size_t rowb = (size_t)H * D * 2;
    uint16_t *h = malloc(2 * n * rowb);
    if (!h) return 0;
    CK(cudaMemcpy(h, O, n * rowb, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy((char *)h + n * rowb, (const char *)O + (size_t)(S - n) * rowb, n * rowb, cudaMemcpyDeviceToHost));
    long bad = 0, nz = 0, tot = (long)2 * n * H * D;
    for (long i = 0; i < tot; i++) {
        float x = h3_bf16_to_f32(h[i]);
        if (!isfinite(x)) bad++;
        else if (x != 0.f) nz++;
    }
    free(h);
    if (bad) {
        snprintf(msg, msglen, "bad output: %ld non-finite of %ld sampled", bad, tot);
        return -1;
    }
    if (!nz) {
        snprintf(msg, msglen, "bad output: all sampled values are zero");
        return -1;
    }
    return 0;
}

/* --lead-us: what each timed launch is queued behind, a read of 3x the L2
 * (its inputs are then never there, however small they are) and the spin.
 * The scratch: g_lead_n zeroed floats (a multiple of 4) and the sink after
 * them, taken once by lead_init, outside dalloc's per-length set. */
static float *g_lead_buf;
static size_t g_lead_n;

static void lead_init(size_t l2)
{
    g_lead_n = (3 * l2 / 16 + 1) * 4;
    const size_t bytes = (g_lead_n + 4) * sizeof(float);
    if (cudaMalloc((void **)&g_lead_buf, bytes) != cudaSuccess || cudaMemset(g_lead_buf, 0, bytes) != cudaSuccess) {
        fprintf(stderr, "bench_attn: --lead-us: cannot allocate its %zu MB L2-flush buffer\n", bytes >> 20);
        exit(1);
    }
}

static int lead(cudaStream_t st)
{
    int rc = bench_l2_evict(g_lead_buf, g_lead_n, g_lead_buf + g_lead_n, st);
    return rc ? rc : bench_spin(g_lead_us, st);
}

/* Times fn over the rotated sets. Returns 0 or a cudaError_t. */
static int time_launches(int (*launch)(void *, int), void *ctx, int nsets, int warmup, int reps, double *med,
                         double *mn)
{
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * 2 * reps);
    double *t = malloc(sizeof(double) * reps);
    int rc = 0;
    for (int i = 0; i < 2 * reps; i++) CK(cudaEventCreate(&ev[i]));
    for (int w = 0; w < warmup && !rc; w++) rc = launch(ctx, w % nsets);
    if (!rc) rc = (int)cudaDeviceSynchronize();
    for (int r = 0; r < reps && !rc; r++) {
        if (g_lead_us > 0 && (rc = lead(0)) != 0) break;
        CK(cudaEventRecord(ev[2 * r], 0));
        rc = launch(ctx, (r + warmup) % nsets);
        CK(cudaEventRecord(ev[2 * r + 1], 0));
    }
    if (!rc) rc = (int)cudaDeviceSynchronize();
    if (!rc) {
        for (int r = 0; r < reps; r++) {
            float ms;
            CK(cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
            t[r] = ms;
        }
        qsort(t, reps, sizeof(double), cmp_double);
        *med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
        *mn = t[0];
    }
    for (int i = 0; i < 2 * reps; i++) cudaEventDestroy(ev[i]);
    free(ev);
    free(t);
    return rc;
}

typedef struct {
    const kernel_t *k;
    const opset *sets;
    int S, H;
    uint16_t *O;     /* [S][H*128] bf16 */
    float *lse;      /* [H][S] f32 */
    const float *mu; /* the smoothed-V rows' mean [H*128] */
} attn_ctx;

static int launch_attn(void *vctx, int set)
{
    attn_ctx *c = vctx;
    const opset *o = &c->sets[set];
    return c->k->fn(o->q8, o->k8, o->vt8, o->sq, o->sk, o->sv, c->k->smooth ? c->mu : NULL, c->S, c->H, c->O, c->lse,
                    0);
}

typedef struct {
    const uint16_t *qkv; /* [S][3*H*128] bf16 */
    const float *rope;   /* [S][H3_ROPE_TAB] (h3k_rope_table, once per sequence: not timed) */
    const uint16_t *qw, *kw;
    const opset *sets;
    int S, H, rot;
} quant_ctx;

static int launch_quant(void *vctx, int set)
{
    quant_ctx *c = vctx;
    const opset *o = &c->sets[set];
    return h3k_qk_norm_rope_quant(c->qkv, c->rope, c->qw, c->kw, c->S, c->H, 1e-5f, NULL, c->rot, o->q8, o->k8, o->vt8,
                                  o->sq, o->sk, o->sv, 0);
}

/* Set when a kernel left the context unusable (illegal address, launch failure):
 * nothing more can run in this process, so the JSON is written and main stops. */
static int g_sticky;

static void status_from_rc(char *st, size_t n, int rc)
{
    snprintf(st, n, "error: %s", cudaGetErrorName((cudaError_t)rc));
    (void)cudaGetLastError();
    if (cudaDeviceSynchronize() != cudaSuccess) {
        g_sticky = 1;
        snprintf(st, n, "error: %s (context lost)", cudaGetErrorName((cudaError_t)rc));
    }
}

static void bench_one_S(int S, int H, const kernel_t *ks, int nk, int warmup, int reps, int do_quant, uint64_t seed,
                        size_t l2)
{
    const int S_pad = h3_pad_tokens(S), G = h3_groups(S);
    const size_t nx = (size_t)S * H * D, setb = 3 * (size_t)H * S_pad * D;
    int nsets = (int)((3 * l2 + setb - 1) / setb);
    if (nsets < 2) nsets = 2;
    if (nsets > MAX_SETS) nsets = MAX_SETS;
    opset sets[MAX_SETS];
    char oom[96] = "";

    uint16_t *q = dalloc(nx * 2), *k = dalloc(nx * 2), *v = dalloc(nx * 2); /* [S][H*128] bf16 scratch */
    float *inv = dalloc((size_t)3 * H * G * 4);
    uint16_t *O = dalloc(nx * 2);              /* [S][H*128] bf16 */
    float *lse = dalloc((size_t)H * S * 4);    /* [H][S] */
    if (!q || !k || !v || !inv || !O || !lse) snprintf(oom, sizeof oom, "oom (inputs)");
    for (int s = 0; s < nsets && !oom[0]; s++)
        if (make_set(&sets[s], S, H, q, k, v, inv, seed + 1000 * (uint64_t)S + s, 0)) {
            if (s >= 2) nsets = s; /* two sets still rotate; fewer do not */
            else snprintf(oom, sizeof oom, "oom (operand set %d)", s);
            break;
        }
    if (!oom[0]) CK(cudaDeviceSynchronize());

    for (int i = 0; i < nk && !g_sticky; i++) {
        if (!ks[i].enabled) continue;
        row_t *r = new_row(ks[i].name, S, H);
        if (!r) return;
        r->sets = nsets;
        if (oom[0]) {
            snprintf(r->status, sizeof r->status, "%s", oom);
            continue;
        }
        CK(cudaMemset(O, 0xff, nx * 2)); /* 0xffff is a BF16 NaN: unwritten outputs show */
        attn_ctx c = {&ks[i], sets, S, H, O, lse, g_zero_mu};
        int rc = time_launches(launch_attn, &c, nsets, warmup, reps, &r->ms, &r->min_ms);
        if (rc) {
            status_from_rc(r->status, sizeof r->status, rc);
            continue;
        }
        if (sanity_check_O(O, S, H, r->status, sizeof r->status)) continue;
        r->tflops = 4.0 * S * (double)S * D * H / (r->ms * 1e-3) / 1e12;
        snprintf(r->status, sizeof r->status, "ok");
    }

    /* the stage as the block runs it, then with Q/K rotation (--rotate-qk),
     * on the same inputs */
    if (do_quant && !g_sticky) {
        const size_t nqkv = (size_t)S * 3 * H * D;
        uint16_t *qkv = oom[0] ? NULL : dalloc(nqkv * 2); /* [S][3*H*128] bf16 */
        float *pos = oom[0] ? NULL : dalloc((size_t)S * 3 * 4);
        float *rope = oom[0] ? NULL : dalloc((size_t)S * H3_ROPE_TAB * 4);
        uint16_t *w = oom[0] ? NULL : dalloc(2 * D * 2); /* q_norm, k_norm [128] bf16 */
        const int ready = qkv && pos && rope && w;
        if (ready) {
            float *hpos = malloc((size_t)S * 3 * 4), omega[16];
            uint16_t hw[2 * D];
            for (int s = 0; s < S; s++) { /* a 72 x 15 x 27 latent grid, repeated */
                hpos[3 * s + 0] = (float)(s / (15 * 27) % 72);
                hpos[3 * s + 1] = (float)(s / 27 % 15);
                hpos[3 * s + 2] = (float)(s % 27);
            }
            for (int d = 0; d < 2 * D; d++) hw[d] = h3_f32_to_bf16(1.0f + 0.01f * (float)(d % 7));
            for (int j = 0; j < 16; j++) omega[j] = (float)pow(10000.0, -j / 16.0);
            CK(cudaMemcpy(pos, hpos, (size_t)S * 3 * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(w, hw, sizeof hw, cudaMemcpyHostToDevice));
            free(hpos);
            CK((cudaError_t)bench_fill_bf16(qkv, nqkv, seed + 7, 0, 0));
            CK((cudaError_t)h3k_rope_table(pos, S, omega, rope, 0));
        }
        for (int rot = 0; rot < 2 && !g_sticky; rot++) {
            row_t *r = new_row(rot ? "qk_norm_rope_quant+rot" : "qk_norm_rope_quant", S, H);
            if (!r) break;
            r->sets = nsets;
            if (!ready) {
                snprintf(r->status, sizeof r->status, "%s", oom[0] ? oom : "oom (qkv)");
                continue;
            }
            quant_ctx c = {qkv, rope, w, w + D, sets, S, H, rot};
            int rc = time_launches(launch_quant, &c, nsets, warmup, reps, &r->ms, &r->min_ms);
            if (rc) {
                status_from_rc(r->status, sizeof r->status, rc);
            } else {
                double bytes = nqkv * 2.0 + (double)S * H3_ROPE_TAB * 4 + 3.0 * H * S_pad * D; /* table read once */
                r->gbs = bytes / (r->ms * 1e-3) / 1e9;
                snprintf(r->status, sizeof r->status, "ok");
            }
        }
    }
    dfree_all();
}

static void accuracy(int S, int H, const kernel_t *ks, int nk, uint64_t seed)
{
    static const char *dists[2] = {"normal", "stress"};
    const size_t nx = (size_t)S * H * D;
    const int G = h3_groups(S);
    uint16_t *q = dalloc(nx * 2), *k = dalloc(nx * 2), *v = dalloc(nx * 2), *O = dalloc(nx * 2);
    float *inv = dalloc((size_t)3 * H * G * 4), *lse = dalloc((size_t)H * S * 4);
    double *ref = dalloc(nx * 8); /* [S][H*128] f64 */
    opset set, rset;
    double *href = malloc(nx * 8);
    uint16_t *hO = malloc(nx * 2);
    int fail = !q || !k || !v || !O || !inv || !lse || !ref || !href || !hO;
    for (int di = 0; di < 2 && !g_sticky; di++) {
        if (!fail) fail = make_set(&set, S, H, q, k, v, inv, seed + 77 + di, di);
        if (!fail) fail = make_rotated_set(&rset, S, H, q, k, v, inv);
        int rc = fail ? 0 : bench_ref_attn_f64(q, k, v, S, H, NULL, 0, ref, 0);
        if (!fail && !rc) rc = (int)cudaDeviceSynchronize();
        if (!fail && !rc) CK(cudaMemcpy(href, ref, nx * 8, cudaMemcpyDeviceToHost));
        /* The floor: the reference itself rounded to BF16. */
        double floor_num = 0, den = 0;
        if (!fail && !rc)
            for (size_t i = 0; i < nx; i++) {
                double e = (double)h3_round_bf16((float)href[i]) - href[i];
                floor_num += e * e;
                den += href[i] * href[i];
            }
        /* each kernel on the contract's operands, then on the Q/K-rotated ones
         * (dist "+rot"; the reference is the same: rotation keeps QK^T) */
        for (int ii = 0; ii < 2 * nk && !g_sticky; ii++) {
            const int i = ii % nk, rot = ii / nk;
            const opset *op = rot ? &rset : &set;
            if (!ks[i].enabled || g_nacc == (int)(sizeof g_acc / sizeof g_acc[0])) continue;
            acc_t *a = &g_acc[g_nacc++];
            memset(a, 0, sizeof *a);
            snprintf(a->kernel, sizeof a->kernel, "%s", ks[i].name);
            snprintf(a->dist, sizeof a->dist, "%s%s", dists[di], rot ? "+rot" : "");
            a->S = S;
            a->H = H;
            if (fail) {
                snprintf(a->status, sizeof a->status, "oom");
                continue;
            }
            if (rc) {
                snprintf(a->status, sizeof a->status, "reference failed: %s", cudaGetErrorName((cudaError_t)rc));
                continue;
            }
            CK(cudaMemset(O, 0xff, nx * 2));
            int krc = ks[i].fn(op->q8, op->k8, op->vt8, op->sq, op->sk, op->sv, ks[i].smooth ? g_zero_mu : NULL, S,
                               H, O, lse, 0);
            if (!krc) krc = (int)cudaDeviceSynchronize();
            if (krc) {
                status_from_rc(a->status, sizeof a->status, krc);
                continue;
            }
            CK(cudaMemcpy(hO, O, nx * 2, cudaMemcpyDeviceToHost));
            double num = 0, mx = 0;
            long bad = 0;
            for (size_t j = 0; j < nx; j++) {
                double o = h3_bf16_to_f32(hO[j]);
                if (!isfinite(o)) {
                    bad++;
                    continue;
                }
                double e = o - href[j];
                num += e * e;
                if (fabs(e) > mx) mx = fabs(e);
            }
            a->nonfinite = bad;
            a->rel_rms = sqrt(num / den);
            a->rmse = sqrt(num / (double)nx);
            a->max_abs = mx;
            a->bf16_floor = sqrt(floor_num / den);
            snprintf(a->status, sizeof a->status, bad ? "non-finite output" : "ok");
        }
        dfree_all(); /* the set; buffers are re-taken below */
        if (di == 0) {
            q = dalloc(nx * 2), k = dalloc(nx * 2), v = dalloc(nx * 2), O = dalloc(nx * 2);
            inv = dalloc((size_t)3 * H * G * 4), lse = dalloc((size_t)H * S * 4);
            ref = dalloc(nx * 8);
            fail = !q || !k || !v || !O || !inv || !lse || !ref || !href || !hO;
        }
    }
    free(href);
    free(hO);
}

/* --qkv: attention inputs from a file (tools/bench/torch_block.py --dump-qkv
 * writes them from a block's weights and inputs): tensors q, k, v, BF16
 * [S][H*128] (q and k normalised and rotated, v as the GEMM gave it),
 * metadata "profile". Every kernel is timed on them (nsets copies of the
 * operands, for L2 rotation) and measured against exact attention: FP64 on
 * R = min(S, 1024) query rows r_j = floor((2j + 1) S / 2R), all heads -- the
 * rows peers_attention.py --qkv uses, so the figures compare. The
 * smoothed-V row (h3_fp8_sm90_vs) quantises V less its per-channel mean and
 * passes the mean, as dit_block does. */

/* The file's q, k, v on the device and its S, H, profile; 0 or -1 (msg set). */
static int load_qkv(const char *path, uint16_t **dq, uint16_t **dk, uint16_t **dv, int *S, int *H, char *profile,
                    size_t plen, char *msg, size_t mlen)
{
    st_file f;
    if (st_open(path, &f, msg, mlen) != 0) return -1;
    const char *names[3] = {"q", "k", "v"};
    const st_tensor *t[3];
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        t[i] = st_find(&f, names[i]);
        if (!t[i] || t[i]->dtype != ST_BF16 || t[i]->rank != 2 || t[i]->shape[1] % D != 0 ||
            t[i]->shape[0] < 1 || t[i]->shape[0] > 10000000 ||
            (i && (t[i]->shape[0] != t[0]->shape[0] || t[i]->shape[1] != t[0]->shape[1]))) {
            snprintf(msg, mlen, "%s: tensor '%s' missing or not BF16 [S][H*128] like q", path, names[i]);
            rc = -1;
        }
    }
    if (!rc) {
        *S = (int)t[0]->shape[0];
        *H = (int)(t[0]->shape[1] / D);
        const size_t nb = (size_t)*S * *H * D * 2;
        uint16_t **dst[3] = {dq, dk, dv};
        for (int i = 0; i < 3 && !rc; i++) {
            *dst[i] = dalloc(nb);
            if (!*dst[i]) {
                snprintf(msg, mlen, "oom (inputs)");
                rc = -1;
            } else {
                CK(cudaMemcpy(*dst[i], t[i]->data, nb, cudaMemcpyHostToDevice));
            }
        }
        const char *pr = st_meta(&f, "profile");
        snprintf(profile, plen, "%s", pr ? pr : "unknown");
    }
    st_close(&f);
    return rc;
}

static void bench_qkv(const char *path, const kernel_t *ks, int nk, int warmup, int reps, size_t l2)
{
    uint16_t *q = NULL, *k = NULL, *v = NULL;
    int S = 0, H = 0;
    char profile[32] = "?", msg[160] = "";
    if (load_qkv(path, &q, &k, &v, &S, &H, profile, sizeof profile, msg, sizeof msg) != 0) {
        fprintf(stderr, "bench_attn: --qkv %s\n", msg);
        qkv_row *r = g_nqkv < MAX_QKV_ROWS ? &g_qkv[g_nqkv++] : NULL;
        if (r) {
            memset(r, 0, sizeof *r);
            snprintf(r->kernel, sizeof r->kernel, "all");
            snprintf(r->profile, sizeof r->profile, "%s", profile);
            snprintf(r->status, sizeof r->status, "error: %.80s", msg);
        }
        dfree_all();
        return;
    }
    const int S_pad = h3_pad_tokens(S), G = h3_groups(S), R = S < 1024 ? S : 1024;
    const size_t nx = (size_t)S * H * D, setb = 3 * (size_t)H * S_pad * D;
    int nsets = (int)((3 * l2 + setb - 1) / setb);
    if (nsets < 2) nsets = 2;
    if (nsets > MAX_SETS / 2) nsets = MAX_SETS / 2;
    opset sets[MAX_SETS];           /* [0, nsets): V as is; [nsets, 2 nsets): V less its mean */
    float *mu = dalloc((size_t)H * D * 4), *inv = dalloc((size_t)3 * H * G * 4), *lse = dalloc((size_t)H * S * 4);
    uint16_t *O = dalloc(nx * 2);
    int *rows = malloc(sizeof(int) * R), *drows = dalloc(sizeof(int) * R);
    double *ref = dalloc((size_t)R * H * D * 8), *href = malloc((size_t)R * H * D * 8);
    uint16_t *hO = malloc((size_t)R * H * D * 2);
    int fail = !mu || !inv || !lse || !O || !rows || !drows || !ref || !href || !hO;
    if (!fail) CK((cudaError_t)bench_v_mean(v, S, H, mu, 0));
    for (int s = 0; s < 2 * nsets && !fail; s++) {
        fail = alloc_set(&sets[s], S, H);
        if (!fail)
            CK((cudaError_t)bench_quant_fp8(q, k, v, s < nsets ? NULL : mu, S, H, sets[s].q8, sets[s].k8,
                                            sets[s].vt8, sets[s].sq, sets[s].sk, sets[s].sv, inv, 0));
    }
    int rc = 0;
    if (!fail) {
        for (int j = 0; j < R; j++) rows[j] = (int)(((2LL * j + 1) * S) / (2LL * R));
        CK(cudaMemcpy(drows, rows, sizeof(int) * R, cudaMemcpyHostToDevice));
        rc = bench_ref_attn_f64(q, k, v, S, H, drows, R, ref, 0);
        if (!rc) rc = (int)cudaDeviceSynchronize();
        if (!rc) CK(cudaMemcpy(href, ref, (size_t)R * H * D * 8, cudaMemcpyDeviceToHost));
    }
    for (int i = 0; i < nk && !g_sticky; i++) {
        if (!ks[i].enabled || g_nqkv == MAX_QKV_ROWS) continue;
        qkv_row *r = &g_qkv[g_nqkv++];
        memset(r, 0, sizeof *r);
        snprintf(r->kernel, sizeof r->kernel, "%s", ks[i].name);
        snprintf(r->profile, sizeof r->profile, "%s", profile);
        r->S = S;
        r->H = H;
        if (fail || rc) {
            snprintf(r->status, sizeof r->status, "%s", fail ? "oom" : "reference failed");
            continue;
        }
        CK(cudaMemset(O, 0xff, nx * 2));
        attn_ctx c = {&ks[i], sets + (ks[i].smooth ? nsets : 0), S, H, O, lse, mu};
        double mn;
        int krc = time_launches(launch_attn, &c, nsets, warmup, reps, &r->ms, &mn);
        if (krc) {
            status_from_rc(r->status, sizeof r->status, krc);
            continue;
        }
        r->tflops = 4.0 * S * (double)S * D * H / (r->ms * 1e-3) / 1e12;
        /* O is the last timed run's, on a copy of the same operands */
        double num = 0, den = 0;
        for (int j = 0; j < R; j++)
            CK(cudaMemcpy(hO + (size_t)j * H * D, O + (size_t)rows[j] * H * D, (size_t)H * D * 2,
                          cudaMemcpyDeviceToHost));
        for (size_t e = 0; e < (size_t)R * H * D; e++) {
            const double o = h3_bf16_to_f32(hO[e]), d = o - href[e];
            if (!isfinite(o)) {
                r->nonfinite++;
                continue;
            }
            num += d * d;
            den += href[e] * href[e];
            if (fabs(d) > r->max_abs) r->max_abs = fabs(d);
        }
        r->rel_rms = den > 0 ? sqrt(num / den) : sqrt(num);
        snprintf(r->status, sizeof r->status, r->nonfinite ? "non-finite output" : "ok");
    }
    free(rows);
    free(href);
    free(hO);
    dfree_all();
}

/* An operand set to the host: g8 = q8 | k8 | vt8, gs = sq | sk | sv. */
static void download_set(const opset *o, int S, int H, uint8_t *g8, float *gs)
{
    const size_t nop = (size_t)H * h3_pad_tokens(S) * D, nsc = (size_t)H * h3_groups(S);
    CK(cudaMemcpy(g8, o->q8, nop, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g8 + nop, o->k8, nop, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(g8 + 2 * nop, o->vt8, nop, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gs, o->sq, nsc * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gs + nsc, o->sk, nsc * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gs + 2 * nsc, o->sv, nsc * 4, cudaMemcpyDeviceToHost));
}

/* Checks this file's own yardsticks before anything is measured: the GPU
 * quantiser must give exactly cpu_quant_fp8's bytes and scales, and the FP64
 * reference must agree with cpu_attention_exact (FP32, then BF16-rounded) to
 * within BF16 output rounding (rel RMS < 4e-3; the two differ only by that
 * rounding and FP32 sums). Small ragged shapes (S = 300, H = 3). Returns 0. */
static int selfcheck(uint64_t seed)
{
    const int S = 300, H = 3, S_pad = h3_pad_tokens(S), G = h3_groups(S);
    const size_t nx = (size_t)S * H * D, nop = (size_t)H * S_pad * D;
    uint16_t *q = dalloc(nx * 2), *k = dalloc(nx * 2), *v = dalloc(nx * 2);
    float *inv = dalloc((size_t)3 * H * G * 4);
    double *ref = dalloc(nx * 8);
    opset o;
    CHECKQ(q && k && v && inv && ref);
    CHECKQ(make_set(&o, S, H, q, k, v, inv, seed + 5, 1) == 0);
    CK((cudaError_t)bench_ref_attn_f64(q, k, v, S, H, NULL, 0, ref, 0));
    CK(cudaDeviceSynchronize());
    uint16_t *hq = malloc(nx * 2), *hk = malloc(nx * 2), *hv = malloc(nx * 2), *hO = malloc(nx * 2);
    uint8_t *g8 = malloc(3 * nop), *c8 = malloc(3 * nop);
    float *gs = malloc(3 * H * G * 4), *cs = malloc(3 * H * G * 4);
    double *href = malloc(nx * 8);
    CHECKQ(hq && hk && hv && hO && g8 && c8 && gs && cs && href);
    CK(cudaMemcpy(hq, q, nx * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hk, k, nx * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hv, v, nx * 2, cudaMemcpyDeviceToHost));
    download_set(&o, S, H, g8, gs);
    CK(cudaMemcpy(href, ref, nx * 8, cudaMemcpyDeviceToHost));
    /* the quantiser, then with Q/K rotation (bench_rotate_rows + the
     * quantiser) against cpu_quant_fp8 without and with rot_qk */
    long dbytes[2] = {0, 0}, dscales[2] = {0, 0};
    for (int rot = 0; rot < 2; rot++) {
        opset ro;
        if (rot) {
            CHECKQ(make_rotated_set(&ro, S, H, q, k, v, inv) == 0);
            download_set(&ro, S, H, g8, gs);
        }
        memset(c8, 0x55, 3 * nop);
        cpu_quant_fp8(S, H, hq, hk, hv, NULL, 0, NULL, rot, c8, c8 + nop, c8 + 2 * nop, cs, cs + H * G, cs + 2 * H * G);
        for (size_t i = 0; i < 3 * nop; i++) dbytes[rot] += g8[i] != c8[i];
        for (int i = 0; i < 3 * H * G; i++) dscales[rot] += gs[i] != cs[i];
    }
    cpu_attention_exact(hq, hk, hv, S, H, NULL, S, hO, NULL);
    double num = 0, den = 0;
    for (size_t i = 0; i < nx; i++) {
        double e = h3_bf16_to_f32(hO[i]) - href[i];
        num += e * e;
        den += href[i] * href[i];
    }
    double rel = sqrt(num / den);
    int ok = !dbytes[0] && !dscales[0] && !dbytes[1] && !dscales[1] && rel < 4e-3 && isfinite(rel);
    printf("selfcheck (S = %d, H = %d, stress inputs): quantiser vs cpu_quant_fp8: %ld bytes, %ld scales differ "
           "(Q/K rotated: %ld, %ld); FP64 reference vs cpu_attention_exact: rel RMS %.2e -> %s\n",
           S, H, dbytes[0], dscales[0], dbytes[1], dscales[1], rel, ok ? "ok" : "FAILED");
    free(hq), free(hk), free(hv), free(hO), free(g8), free(c8), free(gs), free(cs), free(href);
    dfree_all();
    return ok ? 0 : -1;
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 1 || x > 10000000) return -1;
        out[n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

#define PROG "bench_attn"

static const char usage_text[] =
    "usage: bench_attn [--seqs 4096,8192,16384,30272,75600] [--heads 56] [--reps 10 | --repeat 10] [--warmup 2]\n"
    "                  [--kernels mma,sm90] [--quant] [--accuracy] [--accuracy-only]\n"
    "                  [--acc-seq 8192] [--acc-heads 8] [--seed N] [--json FILE] [--no-selfcheck]\n"
    "                  [--qkv FILE[,FILE...]] [--variant N] [--lead-us N] [--help] [--version]\n"
    "  times h3block's FP8 attention kernels on the GPU and measures their accuracy against FP64\n"
    "  --qkv: attention inputs from files (torch_block.py --dump-qkv) instead of N(0,1)\n"
    "  --variant N: lab builds (-DH3_LAB=ON): the lab's Hopper variant N alone\n"
    "  --repeat N: --reps N as dit_block spells it\n"
    "  --lead-us N: queue each timed launch behind an L2 flush and an N microsecond spin (short launches)\n"
    "  A value follows its flag as the next word or after '=' (--reps 5, --reps=5).\n"
    "Exit: 0 done; 2 a usage error or no machine code for this GPU; 77 no usable CUDA device.\n";

/* --version: the CUDA runtime and the driver this binary runs with. */
static void version_extra(FILE *f)
{
    int rt = 0, drv = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    fprintf(f, "CUDA runtime %d.%d, ", rt / 1000, rt % 1000 / 10);
    if (drv)
        fprintf(f, "NVIDIA driver for CUDA %d.%d\n", drv / 1000, drv % 1000 / 10);
    else
        fprintf(f, "no NVIDIA driver\n");
}

int main(int argc, char **argv)
{
    int seqs[MAX_SEQS] = {4096, 8192, 16384, 30272, 75600}, nseq = 5, H = 56, reps = 10, warmup = 2;
    int do_quant = 0, do_acc = 0, no_selfcheck = 0, acc_only = 0, acc_S = 8192, acc_H = 8;
    uint64_t seed = 1234;
    const char *json = NULL, *kernels = "mma,sm90", *qkv = NULL;
    int variant = 0;
    static const h3_flag flags[] = {
        {"seqs", 1},    {"heads", 1},   {"reps", 1},         {"repeat", 1},        {"warmup", 1},
        {"kernels", 1}, {"acc-seq", 1}, {"acc-heads", 1},    {"seed", 1},          {"json", 1},
        {"variant", 1}, {"qkv", 1},     {"no-selfcheck", 0}, {"quant", 0},         {"accuracy", 0},
        {"accuracy-only", 0}, {"lead-us", 1}, {NULL, 0}};
    enum { F_SEQS, F_HEADS, F_REPS, F_REPEAT, F_WARMUP, F_KERNELS, F_ACC_SEQ, F_ACC_HEADS, F_SEED, F_JSON, F_VARIANT,
           F_QKV, F_NO_SELFCHECK, F_QUANT, F_ACCURACY, F_ACCURACY_ONLY, F_LEAD_US };
    const h3_cli cli = {PROG, usage_text, flags, version_extra};
    const char *val;
    for (int f; (f = h3_cli_next(&cli, argc, argv, &val)) >= 0;) {
        switch (f) {
        case F_SEQS:
            nseq = parse_list(val, seqs, MAX_SEQS);
            if (nseq < 1) h3_cli_fail(PROG, "--seqs: '%s' is not a list of 1 to %d lengths 1..10000000", val, MAX_SEQS);
            break;
        case F_HEADS: H = (int)h3_cli_uint(PROG, "--heads", val, 1, INT_MAX); break;
        case F_REPS:
        case F_REPEAT: reps = (int)h3_cli_uint(PROG, f == F_REPS ? "--reps" : "--repeat", val, 1, INT_MAX); break;
        case F_WARMUP: warmup = (int)h3_cli_uint(PROG, "--warmup", val, 0, INT_MAX); break;
        case F_KERNELS: kernels = val; break;
        case F_ACC_SEQ: acc_S = (int)h3_cli_uint(PROG, "--acc-seq", val, 1, INT_MAX); break;
        case F_ACC_HEADS: acc_H = (int)h3_cli_uint(PROG, "--acc-heads", val, 1, INT_MAX); break;
        case F_SEED: seed = h3_cli_uint(PROG, "--seed", val, 0, UINT64_MAX); break;
        case F_JSON: json = val; break;
        case F_VARIANT: variant = (int)h3_cli_uint(PROG, "--variant", val, 1, INT_MAX); break;
        case F_QKV: qkv = val; break;
        case F_NO_SELFCHECK: no_selfcheck = 1; break;
        case F_QUANT: do_quant = 1; break;
        case F_ACCURACY: do_acc = 1; break;
        case F_ACCURACY_ONLY: do_acc = acc_only = 1; break;
        case F_LEAD_US: g_lead_us = (double)h3_cli_uint(PROG, "--lead-us", val, 0, 1000000); break;
        }
    }

    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bench_attn: no usable CUDA device\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    snprintf(g_device, sizeof g_device, "%.200s (sm_%d%d, %d SMs, %d MB L2)", prop.name, prop.major, prop.minor,
             prop.multiProcessorCount, prop.l2CacheSize >> 20);
    if (!h3k_device_supported()) {
        fprintf(stderr, "bench_attn: this build has no machine code for %s; rebuild with H3_CUDA_ARCHS\n", g_device);
        return 2;
    }
    if (g_lead_us > 0) lead_init((size_t)prop.l2CacheSize);
    /* sm90 twice: as for unsmoothed V, and on the smoothed-V path (dit_block's default) */
    kernel_t ks[3] = {{"h3_fp8_mma", h3k_attn_fp8_mma, strstr(kernels, "mma") != NULL, 0},
                      {"h3_fp8_sm90", h3k_attn_fp8_sm90, strstr(kernels, "sm90") != NULL, 0},
                      {"h3_fp8_sm90_vs", h3k_attn_fp8_sm90, strstr(kernels, "sm90") != NULL, 1}};
    if (ks[1].enabled && !h3k_attn_fp8_sm90_available()) {
        printf("bench_attn: h3k_attn_fp8_sm90 not available on this device/build; skipped\n");
        ks[1].enabled = ks[2].enabled = 0;
    }
    /* --variant N (lab builds): the lab's variant N alone, as row lab_vN, in
     * its own mode (with or without V's mean) */
    if (variant) {
#ifdef H3_LAB
        static char vrow[32];
        const int sm = h3lab_attn_sm90_smoothed(variant);
        if (sm < 0) {
            fprintf(stderr, "bench_attn: --variant %d: the lab has no such variant\n", variant);
            return 2;
        }
        h3lab_select(variant);
        snprintf(vrow, sizeof vrow, "lab_v%d", variant);
        ks[0].enabled = ks[1].enabled = 0;
        ks[2] = (kernel_t){vrow, h3lab_attn_sm90_selected, h3k_attn_fp8_sm90_available(), sm};
        printf("lab variant: %s\n", h3lab_attn_sm90_name(variant));
#else
        fprintf(stderr, "bench_attn: --variant needs the lab (configure with -DH3_LAB=ON)\n");
        return 2;
#endif
    }
    const int maxH = H > acc_H ? H : acc_H;
    CK(cudaMalloc((void **)&g_zero_mu, sizeof(float) * 128 * (size_t)maxH));
    CK(cudaMemset(g_zero_mu, 0, sizeof(float) * 128 * (size_t)maxH));
    if (!no_selfcheck) {
        int sc = selfcheck(seed);
        snprintf(g_selfcheck, sizeof g_selfcheck, "%s", sc ? "FAILED" : "ok");
        if (sc) /* not fatal: the one benchmark run must still give numbers; the report says so */
            fprintf(stderr, "bench_attn: WARNING: the self-check failed: accuracy figures below are suspect\n");
    }
    printf("bench_attn on %s: H = %d, %d warm-up + %d timed runs, median\n", g_device, H, warmup, reps);
    if (!variant && (ks[1].enabled || ks[2].enabled))
        printf("attn_fp8_sm90: %s; with smoothed V (h3_fp8_sm90_vs): %s\n", h3k_attn_fp8_sm90_variant_name(0),
               h3k_attn_fp8_sm90_variant_name(1));

    if (qkv && !acc_only) {
        char *list = strdup(qkv);
        printf("%-16s %-10s %7s %4s %10s %9s %12s %10s  %s\n", "kernel", "profile", "S", "H", "median_ms", "TFLOPS",
               "err_vs_exact", "max_abs", "status");
        for (char *save = NULL, *file = strtok_r(list, ",", &save); file && !g_sticky; file = strtok_r(NULL, ",", &save)) {
            const int first = g_nqkv;
            bench_qkv(file, ks, 3, warmup, reps, (size_t)prop.l2CacheSize);
            for (int i = first; i < g_nqkv; i++) {
                const qkv_row *r = &g_qkv[i];
                printf("%-16s %-10s %7d %4d %10.3f %9.1f %11.3f%% %10.3e  %s\n", r->kernel, r->profile, r->S, r->H,
                       r->ms, r->tflops, 100 * r->rel_rms, r->max_abs, r->status);
            }
            fflush(stdout);
            write_json(json, H);
        }
        free(list);
    }
    if (!acc_only && !qkv) { /* --qkv replaces the N(0,1) timing */
        printf("%-20s %7s %4s %4s %10s %10s %9s  %s\n", "kernel", "S", "H", "sets", "median_ms", "min_ms",
               "TFLOPS", "status");
        for (int si = 0; si < nseq; si++) {
            int first = g_nrows;
            bench_one_S(seqs[si], H, ks, 3, warmup, reps, do_quant, seed, (size_t)prop.l2CacheSize);
            for (int i = first; i < g_nrows; i++) {
                const row_t *r = &g_rows[i];
                if (r->gbs > 0)
                    printf("%-20s %7d %4d %4d %10.3f %10.3f %6.0fGB/s  %s\n", r->kernel, r->S, r->H, r->sets, r->ms,
                           r->min_ms, r->gbs, r->status);
                else
                    printf("%-20s %7d %4d %4d %10.3f %10.3f %9.1f  %s\n", r->kernel, r->S, r->H, r->sets, r->ms,
                           r->min_ms, r->tflops, r->status);
            }
            fflush(stdout);
            write_json(json, H);
            if (g_sticky) {
                fprintf(stderr, "bench_attn: a kernel broke the CUDA context; stopping (results so far in the JSON)\n");
                return 1;
            }
        }
    }
    if (do_acc) {
        accuracy(acc_S, acc_H, ks, 3, seed);
        printf("\naccuracy vs FP64 (S = %d, H = %d; goals: rel RMS <= 3%% on normal, RMSE <= 9.1e-3 on stress)\n",
               acc_S, acc_H);
        printf("%-14s %-10s %10s %10s %10s %11s  %s\n", "kernel", "dist", "rel_rms", "rmse", "max_abs", "bf16_floor",
               "status");
        for (int i = 0; i < g_nacc; i++) {
            const acc_t *a = &g_acc[i];
            printf("%-14s %-10s %9.3f%% %10.3e %10.3e %10.3f%%  %s\n", a->kernel, a->dist, 100 * a->rel_rms, a->rmse,
                   a->max_abs, 100 * a->bf16_floor, a->status);
        }
        write_json(json, H);
    }
    return g_sticky ? 1 : 0;
}
