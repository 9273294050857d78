/* test_gpu_attention.c — every FP8 attention kernel of the build against its
 * CPU twin (cpu_attention_fp8 with the kernel's key tile, and the Hopper
 * three-consumer kernel's split rows from its grid) and against exact
 * FP32 attention (the FP8 error, reported), on tile-edge shapes, random
 * per-group scales, one-dominant-key rows, FA3's stress distribution and
 * model-like data (sharp rows, sinks, outlier dims, V means; DIST_MODEL).
 * Also: poisoned outputs are all overwritten, rows >= S are never written,
 * and two runs give identical bytes. Exits 77 without a usable GPU.
 *
 * Run alone:   ctest --test-dir build -R test_gpu_attention --output-on-failure
 *   or         build/tests/test_gpu_attention [--sweep | --case S H MIX] [--quick | --max-s N]
 *              (H3_TEST_SEED=n fixes the inputs; --quick = --max-s 1000, for
 *              compute-sanitizer; --sweep: the shape sweep instead of the
 *              tile-edge/mix cases, see sweep() below; --case: one case,
 *              MIX 0 normal, 1 dominant key, 2 stress, 3 mean V, 4 model-like)
 *
 * Tolerances:
 *   vs emulated FP8: relative RMS <= 5e-3 over O (issue 4's contract; rows
 *     whose dominant P sits on an e4m3 rounding tie are compared with the
 *     emulation with that tie broken either way, see run_case); the
 *     GPU differs from the CPU only in FP32 summation order, ex2.approx, and
 *     the P8 roundings those flip. LSE: abs error <= 1e-3 (natural log; LSE
 *     is built from FP32 sums, so only summation order differs). Kernels whose
 *     QK^T goes through Hopper's truncating FP8 accumulator get 2e-2 and
 *     1e-3 + 2e-3 |LSE| (see run_case).
 *   vs exact: relative RMS reported; asserted only as a sanity bound (15% on
 *     normal data with per-group scales, 15% on the stress mix, whose
 *     outliers FP8 per-group scales flatten — on those two mixes, or the
 *     emulation's own distance from exact on that draw + 5% of it + 1 point,
 *     whichever is larger —, 8% otherwise; the emulation itself within
 *     twice the bound), above the ~5% FP8 error of FlashAttention-3 and far
 *     below a wrong kernel. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "config.h"
#include "attn/sm90_grid.h"
#include "cuda_check.h"
#include "cpu_ref.h"
#include "kernels.h"
#include "numerics.h"
#include "rng.h"
#include "test_stats.h"

#ifdef H3_LAB
#include "lab.h" /* --variant N: the lab's variant N instead of the Hopper kernel's default */
#endif

#define D 128
#define GUARD_ROWS 3 /* extra O rows / LSE entries past the end that must stay poisoned */

typedef int (*attn_fn)(const uint8_t *, const uint8_t *, const uint8_t *, const float *, const float *, const float *,
                       const float *, int, int, uint16_t *, float *, h3_stream);
typedef struct {
    const char *name;
    attn_fn run;
    int key_tile;
    int fp8_accumulate; /* the QK^T dots come from FP8 tensor-core accumulation (wgmma) */
    int smooth;         /* V smoothing: V quantised less its mean (h3k_v_mean), the kernel adds it back */
    /* the Hopper three-consumer kernel's grid for (S, H) (h3k_attn_fp8_sm90_grid): the emulation runs its split
     * rows as the kernel does (cpu_attn_split); NULL: a kernel without split rows */
    int (*grid)(int S, int H, h3_sm90_grid *grid);
} kernel_desc;

static int g_pass = 0, g_fail = 0;
static int g_max_s = 1 << 30; /* --quick / --max-s: skip cases with S above this (compute-sanitizer runs) */
static h3_rng g_rng;

enum { DIST_NORMAL = 0, DIST_DOMINANT, DIST_STRESS, DIST_MEANV, DIST_MODEL };
static const char *dist_name[] = {"normal+group scales", "dominant key", "FA3 stress", "v with a mean (block-like)",
                                  "model-like, sharp rows"};

/* DIST_MODEL: q and k as a trained DiT's q/k-norm gives them, v as its QKV
 * GEMM does (docs/DESIGN.md "Synthetic data"): per head a direction shared by
 * every token (0.5 N(0,1) per dim: the massive-activation channels of the
 * hidden states), plus N(0,1), RMS-normalised over the 128 dims, times gains
 * log-uniform over [0.5, 3] (one vector for q, one for k, shared by the
 * heads, as q_norm / k_norm are); two outlier dims per head times 4; in even
 * heads keys 0..3 are attention sinks (k along the head's mean q, with the
 * typical |k|). v = m + 0.5 N(0,1) with a per-(head, dim) mean m ~ N(0,1).
 * Rows come out sharp: in sink heads ~55% of a row's mass on the sinks, its
 * largest p ~0.3, logits spanning ~40 (natural log units), ~15% of the mass
 * beyond the 8 largest keys -- the tail an FP8 accumulator loses first. */
static void make_model_inputs(int S, int H, uint16_t *q, uint16_t *k, uint16_t *v)
{
    const int I = H * D;
    double gq[D], gk[D];
    for (int d = 0; d < D; d++) gq[d] = 0.5 * pow(6.0, h3_rng_uniform(&g_rng));
    for (int d = 0; d < D; d++) gk[d] = 0.5 * pow(6.0, h3_rng_uniform(&g_rng));
    double *mq = malloc(sizeof(double) * I), *mk = malloc(sizeof(double) * I), *mv = malloc(sizeof(double) * I);
    double *qmean = calloc((size_t)I, sizeof(double)), knorm = 0.0;
    for (int c = 0; c < I; c++) mq[c] = 0.5 * h3_rng_normal(&g_rng), mk[c] = 0.5 * h3_rng_normal(&g_rng);
    for (int c = 0; c < I; c++) mv[c] = h3_rng_normal(&g_rng);
    for (int s = 0; s < S; s++)
        for (int h = 0; h < H; h++) {
            const int o1 = (37 * h + 5) % D, o2 = (37 * h + 69) % D; /* the head's outlier dims */
            for (int a = 0; a < 2; a++) {
                const double *m = a ? mk : mq, *g = a ? gk : gq;
                double x[D], ss = 0.0;
                for (int d = 0; d < D; d++) x[d] = m[h * D + d] + h3_rng_normal(&g_rng), ss += x[d] * x[d];
                const double r = 1.0 / sqrt(ss / D + 1e-5);
                double n2 = 0.0;
                for (int d = 0; d < D; d++) {
                    double y = x[d] * r * g[d] * (d == o1 || d == o2 ? 4.0 : 1.0);
                    (a ? k : q)[(size_t)s * I + h * D + d] = h3_f32_to_bf16((float)y);
                    if (a == 0) qmean[h * D + d] += y / S;
                    n2 += y * y;
                }
                if (a) knorm += sqrt(n2) / ((double)S * H);
            }
            for (int d = 0; d < D; d++)
                v[(size_t)s * I + h * D + d] = h3_f32_to_bf16((float)(mv[h * D + d] + 0.5 * h3_rng_normal(&g_rng)));
        }
    for (int h = 0; h < H; h += 2) { /* the sinks */
        double n2 = 0.0;
        for (int d = 0; d < D; d++) n2 += qmean[h * D + d] * qmean[h * D + d];
        for (int s = 0; s < 4 && s < S; s++)
            for (int d = 0; d < D; d++)
                k[(size_t)s * I + h * D + d] = h3_f32_to_bf16((float)(qmean[h * D + d] * knorm / sqrt(n2)));
    }
    free(mq), free(mk), free(mv), free(qmean);
}


/* Inputs: q, k, v [S][H*D] bf16. Every (head, 128-token group) of q, k and v
 * gets its own magnitude, so the per-group scales differ: 2^U(-1, 1) for q
 * and k (scores of std up to 4: peaky but not argmax-only, where FP8's exact
 * error would be near-tie noise), 2^U(-3, 3) for v. */
static void make_inputs(int S, int H, int dist, uint16_t *q, uint16_t *k, uint16_t *v)
{
    if (dist == DIST_MODEL) {
        make_model_inputs(S, H, q, k, v);
        return;
    }
    const int G = h3_groups(S), I = H * D;
    float *mag = malloc(sizeof(float) * 3 * H * G); /* [3][H][G] */
    for (int i = 0; i < 3 * H * G; i++) {
        const double w = i < 2 * H * G ? 1.0 : 3.0; /* q, k: +-1 octave; v: +-3 */
        mag[i] = exp2f((float)(w * (2.0 * h3_rng_uniform(&g_rng) - 1.0)));
    }
    uint16_t *arr[3] = {q, k, v};
    for (int a = 0; a < 3; a++)
        for (int s = 0; s < S; s++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++) {
                    double x = h3_rng_normal(&g_rng);
                    if (dist == DIST_STRESS) {
                        /* N(0,1) + N(0,100) * Bernoulli(0.001) */
                        if (h3_rng_uniform(&g_rng) < 0.001) x += 10.0 * h3_rng_normal(&g_rng);
                    } else if (dist == DIST_MEANV) {
                        /* As in the block: V from a GEMM of modulated rows
                         * has a per-channel mean, so O ~ mean(V) grows
                         * steadily over the keys (accumulation-precision bugs
                         * show here, not with zero-mean V). */
                        if (a == 2) x = 1.0 + 0.5 * x;
                    } else {
                        x *= mag[(a * H + h) * G + s / H3_QGROUP];
                    }
                    arr[a][(size_t)s * I + h * D + d] = h3_f32_to_bf16((float)x);
                }
    if (dist == DIST_DOMINANT) {
        /* Every 5th query row: q_i = 3 k_j for a random key j, so x_ij is
         * ~3x the typical |k|^2 / sqrt(D) and p_ij ~ 1 for that one key. */
        for (int s = 0; s < S; s += 5)
            for (int h = 0; h < H; h++) {
                int j = (int)(h3_rng_uniform(&g_rng) * S);
                for (int d = 0; d < D; d++)
                    q[(size_t)s * I + h * D + d] = h3_f32_to_bf16(3.0f * h3_bf16_to_f32(k[(size_t)j * I + h * D + d]));
            }
    }
    free(mag);
}

/* Rows to check: all when the CPU cost is small, else the first 64, the last
 * 64 (the ragged tail) and 64 random rows between. */
static int pick_rows(int S, int H, int *rows)
{
    if ((double)S * S * H <= 4.0e6 * 3) {
        for (int i = 0; i < S; i++) rows[i] = i;
        return S;
    }
    int n = 0;
    for (int i = 0; i < 64 && i < S; i++) rows[n++] = i;
    for (int i = 0; i < 64; i++) rows[n++] = 64 + (int)(h3_rng_uniform(&g_rng) * (S - 128));
    for (int i = S - 64; i < S; i++) rows[n++] = i;
    return n;
}


/* One (row, head) of got (row gr) against ref (row rr), both [*][I] bf16. */
static h3t_stats pair_err(const uint16_t *got, int gr, const uint16_t *ref, int rr, int h, int I)
{
    h3t_stats a = {0};
    for (int d = 0; d < D; d++)
        h3t_acc(&a, h3_bf16_to_f32(got[(size_t)gr * I + h * D + d]), h3_bf16_to_f32(ref[(size_t)rr * I + h * D + d]), INFINITY);
    return a;
}

static uint64_t g_seed;

static void run_case(const kernel_desc *kd, int S, int H, int dist)
{
    if (S > g_max_s) return;
    /* Each case draws from its own stream (seed, S, H, mix), so a failing case
     * is reproduced alone: H3_TEST_SEED=n test_gpu_attention --case S H MIX. */
    g_rng.s = g_seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(((int64_t)S * 64 + H) * 8 + dist + 1));
    const int S_pad = h3_pad_tokens(S), G = h3_groups(S), I = H * D;
    const size_t nqkv = (size_t)S * I, plane = (size_t)H * S_pad * D;
    uint16_t *q = malloc(nqkv * 2), *k = malloc(nqkv * 2), *v = malloc(nqkv * 2);
    uint8_t *q8 = calloc(plane, 1), *k8 = calloc(plane, 1), *vt8 = calloc(plane, 1);
    float *sq = malloc(sizeof(float) * H * G), *sk = malloc(sizeof(float) * H * G), *sv = malloc(sizeof(float) * H * G);
    make_inputs(S, H, dist, q, k, v);
    /* V smoothing: the mean from the CPU (the emulation's) and from the GPU
     * (the kernel's) must be the same bits: fixed summation order. */
    float *mu = NULL, *dmu = NULL;
    int mu_differ = 0;
    if (kd->smooth) {
        mu = malloc(sizeof(float) * I);
        float *gmu = malloc(sizeof(float) * I);
        uint16_t *dv;
        cpu_v_mean(v, I, D, S, H, mu);
        CUDA_CHECK(cudaMalloc((void **)&dv, nqkv * 2));
        CUDA_CHECK(cudaMalloc((void **)&dmu, sizeof(float) * I));
        CUDA_CHECK(cudaMemcpy(dv, v, nqkv * 2, cudaMemcpyHostToDevice));
        CUDA_CHECK((cudaError_t)h3k_v_mean(dv, I, D, S, H, dmu, NULL));
        CUDA_CHECK(cudaMemcpy(gmu, dmu, sizeof(float) * I, cudaMemcpyDeviceToHost));
        for (int c = 0; c < I; c++) mu_differ += memcmp(&gmu[c], &mu[c], 4) != 0;
        CUDA_CHECK(cudaFree(dv));
        free(gmu);
    }
    cpu_quant_fp8(S, H, q, k, v, NULL, 0, mu, 0, q8, k8, vt8, sq, sk, sv);

    /* device buffers; O and LSE carry GUARD_ROWS of poison past the end */
    const size_t on = (size_t)(S + GUARD_ROWS) * I, ln = (size_t)H * S + GUARD_ROWS;
    uint8_t *dq8, *dk8, *dvt8;
    float *dsq, *dsk, *dsv, *dlse;
    uint16_t *dO;
    CUDA_CHECK(cudaMalloc((void **)&dq8, plane));
    CUDA_CHECK(cudaMalloc((void **)&dk8, plane));
    CUDA_CHECK(cudaMalloc((void **)&dvt8, plane));
    CUDA_CHECK(cudaMalloc((void **)&dsq, sizeof(float) * H * G));
    CUDA_CHECK(cudaMalloc((void **)&dsk, sizeof(float) * H * G));
    CUDA_CHECK(cudaMalloc((void **)&dsv, sizeof(float) * H * G));
    CUDA_CHECK(cudaMalloc((void **)&dO, on * 2));
    CUDA_CHECK(cudaMalloc((void **)&dlse, ln * 4));
    CUDA_CHECK(cudaMemcpy(dq8, q8, plane, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dk8, k8, plane, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dvt8, vt8, plane, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dsq, sq, sizeof(float) * H * G, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dsk, sk, sizeof(float) * H * G, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dsv, sv, sizeof(float) * H * G, cudaMemcpyHostToDevice));

    uint16_t *O[2];
    float *L[2];
    int ok = 1;
    char why[256] = "";
    for (int run = 0; run < 2; run++) {
        O[run] = malloc(on * 2);
        L[run] = malloc(ln * 4);
        CUDA_CHECK(cudaMemset(dO, 0xff, on * 2));   /* 0xffff: a BF16 NaN */
        CUDA_CHECK(cudaMemset(dlse, 0xff, ln * 4)); /* 0xffffffff: an FP32 NaN */
        int rc = kd->run(dq8, dk8, dvt8, dsq, dsk, dsv, dmu, S, H, dO, dlse, NULL);
        if (rc == 0) rc = (int)cudaDeviceSynchronize();
        if (rc != 0) {
            printf("FAIL %-14s S=%5d H=%2d %-20s launch: %s\n", kd->name, S, H, dist_name[dist],
                   cudaGetErrorString((cudaError_t)rc));
            g_fail++;
            exit(1); /* a failed launch leaves the context unusable */
        }
        CUDA_CHECK(cudaMemcpy(O[run], dO, on * 2, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(L[run], dlse, ln * 4, cudaMemcpyDeviceToHost));
    }
    /* NaN/Inf first: every real output written and finite, guards untouched. */
    size_t bad = 0, guard_bad = 0;
    for (size_t i = 0; i < (size_t)S * I; i++) bad += !isfinite(h3_bf16_to_f32(O[0][i]));
    for (size_t i = 0; i < (size_t)H * S; i++) bad += !isfinite(L[0][i]);
    for (size_t i = (size_t)S * I; i < on; i++) guard_bad += O[0][i] != 0xffff;
    for (size_t i = (size_t)H * S; i < ln; i++) {
        uint32_t u;
        memcpy(&u, &L[0][i], 4);
        guard_bad += u != 0xffffffffu;
    }
    if (mu_differ) {
        ok = 0;
        snprintf(why, sizeof why, "h3k_v_mean differs from cpu_v_mean in %d of %d means", mu_differ, I);
    } else if (bad) {
        ok = 0;
        snprintf(why, sizeof why, "%zu outputs non-finite or never written", bad);
    } else if (guard_bad) {
        ok = 0;
        snprintf(why, sizeof why, "%zu values written past row S", guard_bad);
    } else if (memcmp(O[0], O[1], on * 2) || memcmp(L[0], L[1], ln * 4)) {
        ok = 0;
        snprintf(why, sizeof why, "two runs differ (race?)");
    }

    /* References on sampled rows. */
    int *rows = malloc(sizeof(int) * (S > 192 ? S : 192));
    const int nr = pick_rows(S, H, rows);
    uint16_t *Oe = malloc((size_t)nr * I * 2), *Ox = malloc((size_t)nr * I * 2);
    float *Le = malloc(sizeof(float) * H * nr), *Lx = malloc(sizeof(float) * H * nr);
    h3_sm90_grid grid;
    const cpu_attn_split grid_split = {h3_sm90_grid_row_split_ctx, &grid}, *split = kd->grid ? &grid_split : NULL;
    if (kd->grid) {
        const int rc = kd->grid(S, H, &grid);
        CHECK(rc == 0, "%s: its grid for S = %d, H = %d: %s", kd->name, S, H, cudaGetErrorString((cudaError_t)rc));
    }
    cpu_attention_fp8(q8, k8, vt8, sq, sk, sv, mu, S, H, kd->key_tile, split, 1, rows, nr, Oe, Le);
    cpu_attention_exact(q, k, v, S, H, rows, nr, Ox, Lx);
    h3t_stats ee = {0}, ex = {0}, cx = {0}; /* gpu vs emulation, gpu vs exact, emulation vs exact */
    double lse_err = 0.0;
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < I; c++) {
            double got = h3_bf16_to_f32(O[0][(size_t)rows[r] * I + c]);
            h3t_acc(&ee, got, h3_bf16_to_f32(Oe[(size_t)r * I + c]), INFINITY);
            h3t_acc(&ex, got, h3_bf16_to_f32(Ox[(size_t)r * I + c]), INFINITY);
            h3t_acc(&cx, h3_bf16_to_f32(Oe[(size_t)r * I + c]), h3_bf16_to_f32(Ox[(size_t)r * I + c]), INFINITY);
        }
    for (int h = 0; h < H; h++)
        for (int r = 0; r < nr; r++) {
            double d = fabs((double)L[0][(size_t)h * S + rows[r]] - Le[(size_t)h * nr + r]);
            if (!(d <= lse_err)) lse_err = d; /* NaN propagates as a failure below */
        }
    /* Per-group V scales spread over 2^+-3 push the P8 of low-scale groups
     * towards e4m3's subnormals: the FP8 contract itself is then ~8.5% from
     * exact (the portable kernel, 3e-5 from its emulation, measures 8.3-8.7%
     * on the H200, and at S = 4097, H = 1 the emulation itself was 12.9%
     * from exact, one head's few low-scale groups), so the sanity bound for
     * that mix is 15%. The contract's own error has a long tail over draws
     * (seed 1796400469, S = 3554, H = 2: the emulation 15.5% from exact, every
     * kernel within 3e-3 of it), so on these two mixes the kernel may also be
     * as far from exact as the emulation is on this draw, plus 1 point; the
     * emulation itself must stay within twice the bound (a broken contract,
     * or a broken emulation, shows there). The other mixes keep the fixed
     * bound. */
    const int spread = dist == DIST_STRESS || dist == DIST_NORMAL; /* the mixes with spread group scales */
    const double exact_bound = spread ? 0.15 : 0.08;
    const double contract = h3t_rel_rms(&cx), exact_allowed = spread ? fmax(exact_bound, 1.05 * contract + 0.01) : exact_bound;
    /* Hopper's FP8 tensor cores accumulate with ~13 mantissa bits, truncating
     * (DeepSeek-V3 §3.5.2, SageAttention2): each QK^T dot carries a relative
     * error up to ~4 * 2^-13 (4 chained k-steps), so the logit x = c * dot is
     * off by up to ~5e-4 |x|. The CPU emulation computes exact FP32 dots, so
     * for such kernels the LSE bound grows with |LSE| and the O bound is 2e-2:
     * on peaky rows (per-group q/k magnitudes up to 2x, logits up to ~40) the
     * logit error moves p by ~1% (measured on the H200: 1.6e-3..1.33e-2, the
     * worst at S = 1000, H = 3; 1.2e-3 on the real block). The kernels with
     * exact accumulation keep the tight 5e-3 / 1e-3 of issue 4. */
    const double o_tol = kd->fp8_accumulate ? 2e-2 : 5e-3;
    double lse_excess = 0.0; /* max over rows of |dLSE| / allowed, must be <= 1 */
    for (int h = 0; h < H; h++)
        for (int r = 0; r < nr; r++) {
            double ref = Le[(size_t)h * nr + r];
            double d = fabs((double)L[0][(size_t)h * S + rows[r]] - ref);
            double allowed = 1e-3 + (kd->fp8_accumulate ? 2e-3 * fabs(ref) : 0.0);
            if (!(d / allowed <= lse_excess)) lse_excess = d / allowed;
        }
    /* P8 ties. P8 = e4m3(p * mult), mult = 256 sv[g] / svmax, and mult is
     * often an exact e4m3 rounding midpoint (a ratio of two BF16 amax values
     * times 256), so for a row's dominant key (p ~ 1) the last bits of p
     * decide the step: ex2.approx vs the CPU's exp2f, and on Hopper's wgmma
     * the truncated dots (p off by up to ~1e-3). One step of the dominant P
     * moves the whole row by ~6-11% (shape sweep: S = 202, H = 2, 13 and 95
     * rows of one head). So when the plain comparison fails, the emulation is
     * rerun with those ties broken each way (the V scales of the non-maximal
     * groups moved by +-delta, which moves every mult off its midpoint and O
     * by <= delta: 2^-12 for the exact-accumulating kernels, whose FP32 dots
     * still differ from the CPU's in summation order, 2^-9 for wgmma),
     * and each (row, head) pair is compared with the closest of the three.
     * Then at most max(2, 5%) pairs, each within 15% of the emulation (one
     * e4m3 step, plus margin), may still be set aside (ties broken one way in
     * one key and the other way in another); the rest must meet o_tol. */
    int n_out = 0, n_tie = 0;
    double out_max = 0.0;
    h3t_stats kept = ee;
    if (ok && !ee.nonfinite && !(h3t_rel_rms(&ee) <= o_tol)) {
        const int npairs = nr * H, allow = npairs / 20 > 2 ? npairs / 20 : 2;
        const double delta = kd->fp8_accumulate ? 0x1p-9 : 0x1p-12;
        uint16_t *Ot[2] = {malloc((size_t)nr * I * 2), malloc((size_t)nr * I * 2)};
        float *svt = malloc(sizeof(float) * H * G), *Lt = malloc(sizeof(float) * H * nr);
        for (int w = 0; w < 2; w++) {
            for (int h = 0; h < H; h++) {
                float mx = 0.0f;
                for (int g = 0; g < G; g++) mx = fmaxf(mx, sv[h * G + g]);
                for (int g = 0; g < G; g++)
                    svt[h * G + g] = sv[h * G + g] < mx ? (float)(sv[h * G + g] * (w ? 1.0 - delta : 1.0 + delta))
                                                        : sv[h * G + g];
            }
            cpu_attention_fp8(q8, k8, vt8, sq, sk, svt, mu, S, H, kd->key_tile, split, 1, rows, nr, Ot[w], Lt);
        }
        double *pe = malloc(sizeof(double) * npairs * 3); /* [pair]: rel err, se, sref (closest emulation) */
        kept = (h3t_stats){0};
        for (int r = 0; r < nr; r++)
            for (int h = 0; h < H; h++) {
                const h3t_stats plain = pair_err(O[0], rows[r], Oe, r, h, I);
                h3t_stats best = plain;
                for (int w = 0; w < 2; w++) {
                    const h3t_stats a = pair_err(O[0], rows[r], Ot[w], r, h, I);
                    if (a.se < best.se) best = a;
                }
                if (best.se < plain.se) n_tie++;
                double *e = pe + 3 * ((size_t)r * H + h);
                e[0] = h3t_rel_rms(&best), e[1] = best.se, e[2] = best.sref;
                kept.se += best.se;
                kept.sref += best.sref;
                kept.nonfinite += best.nonfinite;
            }
        for (int it = 0; it < allow; it++) { /* take out the worst pair, allow times */
            int w = -1;
            for (int i = 0; i < npairs; i++)
                if (pe[3 * i] >= 0 && (w < 0 || pe[3 * i] > pe[3 * w])) w = i;
            if (w < 0 || pe[3 * w] > 0.15 || h3t_rel_rms(&kept) <= o_tol) break;
            kept.se -= pe[3 * w + 1];
            kept.sref -= pe[3 * w + 2];
            if (pe[3 * w] > out_max) out_max = pe[3 * w];
            pe[3 * w] = -1.0;
            n_out++;
        }
        free(pe);
        free(Ot[0]);
        free(Ot[1]);
        free(svt);
        free(Lt);
    }
    if (ok && (ee.nonfinite || !(h3t_rel_rms(&kept) <= o_tol))) {
        ok = 0;
        snprintf(why, sizeof why, "vs emulated rel RMS %.3e > %.0e%s", h3t_rel_rms(&kept), o_tol,
                 n_out ? " even without the worst (row, head) pairs" : "");
    } else if (ok && (n_tie || n_out)) {
        snprintf(why, sizeof why, "%d (row, head) pair(s) closer to the emulation with P8 ties broken the other way, "
                 "%d set aside (up to %.1f%%), rel RMS %.2e", n_tie, n_out, 100 * out_max, h3t_rel_rms(&kept));
    }
    if (ok && !(lse_excess <= 1.0)) {
        ok = 0;
        snprintf(why, sizeof why, "LSE abs error %.3e over its bound (x%.2f)", lse_err, lse_excess);
    }
    if (ok && !(contract <= 2 * exact_bound)) {
        ok = 0;
        snprintf(why, sizeof why, "the emulation (the FP8 contract) is %.3e from exact, over its sanity bound %.2f",
                 contract, 2 * exact_bound);
    } else if (ok && !(h3t_rel_rms(&ex) <= exact_allowed)) {
        ok = 0;
        snprintf(why, sizeof why, "vs exact rel RMS %.3e > sanity bound %.3f (the emulation: %.3e)", h3t_rel_rms(&ex),
                 exact_allowed, contract);
    } else if (ok && h3t_rel_rms(&ex) > exact_bound && !why[0]) {
        snprintf(why, sizeof why, "vs exact over %.2f, as the emulation is (%.3e) on this draw", exact_bound, contract);
    }
    printf("%s %-14s S=%5d H=%2d %-20s rows %5d  emu: relRMS %.2e maxabs %.2e lse %.1e  exact: relRMS %.2e maxabs %.2e%s%s\n",
           ok ? "ok  " : "FAIL", kd->name, S, H, dist_name[dist], nr, h3t_rel_rms(&ee), ee.max_abs, lse_err, h3t_rel_rms(&ex),
           ex.max_abs, ok ? (why[0] ? "  note: " : "") : "  <- ", why);
    if (!ok) {
        /* Where: the worst (row, head) pairs against the emulation, with the
         * emulation's own distance from exact there (which side is off). */
        int wr[5] = {-1, -1, -1, -1, -1}, wh[5] = {0};
        double we[5] = {0};
        int bad_rows = 0;
        for (int r = 0; r < nr; r++)
            for (int h = 0; h < H; h++) {
                const h3t_stats a = pair_err(O[0], rows[r], Oe, r, h, I);
                bad_rows += h3t_rel_rms(&a) > 0.05;
                double e = a.nonfinite ? INFINITY : h3t_rel_rms(&a);
                for (int j = 0; j < 5; j++)
                    if (e > we[j]) {
                        for (int m = 4; m > j; m--) we[m] = we[m - 1], wr[m] = wr[m - 1], wh[m] = wh[m - 1];
                        we[j] = e, wr[j] = r, wh[j] = h;
                        break;
                    }
            }
        printf("      %d (row, head) pairs beyond 5%% of the emulation; worst:\n", bad_rows);
        for (int j = 0; j < 5 && wr[j] >= 0; j++) {
            const int r = wr[j], h = wh[j];
            const h3t_stats a = pair_err(O[0], rows[r], Ox, r, h, I), b = pair_err(Oe, r, Ox, r, h, I);
            printf("      token %5d head %d: gpu vs emu %.3e, gpu vs exact %.3e, emu vs exact %.3e, lse gpu %.5f emu %.5f\n",
                   rows[r], h, we[j], h3t_rel_rms(&a), h3t_rel_rms(&b), L[0][(size_t)h * S + rows[r]], Le[(size_t)h * nr + r]);
        }
    }
    fflush(stdout);
    if (ok)
        g_pass++;
    else
        g_fail++;

    free(rows); free(Oe); free(Ox); free(Le); free(Lx);
    for (int run = 0; run < 2; run++) {
        free(O[run]);
        free(L[run]);
    }
    cudaFree(dq8); cudaFree(dk8); cudaFree(dvt8); cudaFree(dsq); cudaFree(dsk); cudaFree(dsv); cudaFree(dO);
    cudaFree(dlse); cudaFree(dmu);
    free(q); free(k); free(v); free(q8); free(k8); free(vt8); free(sq); free(sk); free(sv); free(mu);
}

/* The shape sweep (reliability issue): every S from 1 to 260 (every residue
 * of the 32-key, 64/128-query and 128-key tiles, twice over), then S up to
 * 4096 in steps of 61 (61 is prime to every tile size, so the residues keep
 * moving), 4095 and 4096, with heads cycling 1..8 and the input mix cycling
 * too; every head count 1..8 at S = 777; then S = 30271, 30272, 30273
 * and 75600 (H = 1, block-like V), and for the smoothed Hopper path 188416,
 * 188417, 376000 and 380000. Both kernels, the same checks as the other cases. */
static void sweep(const kernel_desc *kd)
{
    int Ss[400], ns = 0;
    for (int S = 1; S <= 260; S++) Ss[ns++] = S;
    for (int S = 260 + 61; S < 4095; S += 61) Ss[ns++] = S;
    Ss[ns++] = 4095;
    Ss[ns++] = 4096;
    for (int n = 0; n < ns; n++)
        run_case(kd, Ss[n], 1 + n % 8, n % 3 == 2 ? DIST_MEANV : n % 7 == 3 ? DIST_STRESS : DIST_NORMAL);
    run_case(kd, 4096, 8, DIST_NORMAL);
    for (int H = 1; H <= 8; H++) run_case(kd, 777, H, H % 2 ? DIST_NORMAL : DIST_DOMINANT);
    static const int big[] = {30271, 30272, 30273, 75600};
    for (int i = 0; i < 4; i++) run_case(kd, big[i], 1, DIST_MEANV);
    /* the smoothed Hopper path only: 188416 and 188417, the last S_pad with
     * split CTAs beside the per-tile table and the first without them (when
     * the launch splits, attn_fp8_sm90.cu's kSplitGrid);
     * 376000, its largest table (v150), and 380000, past it, where the
     * launch runs v153 (split CTAs again) */
    if (kd->smooth && kd->run == h3k_attn_fp8_sm90) {
        run_case(kd, 188416, 1, DIST_MEANV);
        run_case(kd, 188417, 1, DIST_MEANV);
        run_case(kd, 376000, 1, DIST_MEANV);
        run_case(kd, 380000, 1, DIST_MEANV);
    }
}

int main(int argc, char **argv)
{
    int do_sweep = 0, one_S = 0, one_H = 0, one_dist = -1, variant = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--variant") && i + 1 < argc) {
            variant = atoi(argv[++i]);
#ifndef H3_LAB
            fprintf(stderr, "test_gpu_attention: --variant needs the lab (configure with -DH3_LAB=ON)\n");
            return 2;
#endif
            continue;
        }
        if (!strcmp(argv[i], "--case") && i + 3 < argc) {
            one_S = atoi(argv[i + 1]), one_H = atoi(argv[i + 2]), one_dist = atoi(argv[i + 3]);
            i += 3;
            if (one_S < 1 || one_H < 1 || one_dist < 0 || one_dist > DIST_MODEL) {
                fprintf(stderr, "test_gpu_attention: --case S H MIX needs S, H >= 1 and MIX 0..%d\n", DIST_MODEL);
                return 2;
            }
            continue;
        }
        if (!strcmp(argv[i], "--quick")) {
            g_max_s = 1000;
        } else if (!strcmp(argv[i], "--sweep")) {
            do_sweep = 1;
        } else if (!strcmp(argv[i], "--max-s") && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            g_max_s = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: test_gpu_attention [--sweep | --case S H MIX] [--quick | --max-s N] [--variant N]\n");
            return 2;
        }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0 || !h3k_device_supported()) {
        printf("test_gpu_attention: no usable GPU (or this build has no code for it), skipped\n");
        return 77;
    }
    g_seed = h3t_seed("test_gpu_attention");
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("test_gpu_attention: device %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);

    kernel_desc kernels[4];
    int nk = 0;
    /* On sm_90 the portable kernel's e4m3 mma.sync runs as FP16 HMMA (ptxas
     * unpacks e4m3 to f16), whose FP32 accumulation is exact here; on sm_89
     * and sm_120 it is a native FP8 MMA with the truncating accumulator. */
    kernels[nk++] =
        (kernel_desc){"attn_fp8_mma", h3k_attn_fp8_mma, h3k_attn_fp8_mma_key_tile(), prop.major != 9, 0, NULL};
    kernels[nk++] =
        (kernel_desc){"mma+vsmooth", h3k_attn_fp8_mma, h3k_attn_fp8_mma_key_tile(), prop.major != 9, 1, NULL};
    /* with V smoothed, attn_fp8_sm90 runs its other kernel (dit_block's default on Hopper), on the grid with
     * split CTAs */
    if (h3k_attn_fp8_sm90_available() == 1) {
        kernels[nk++] = (kernel_desc){"attn_fp8_sm90", h3k_attn_fp8_sm90, h3k_attn_fp8_sm90_key_tile(), 1, 0, NULL};
        kernels[nk++] = (kernel_desc){"sm90+vsmooth", h3k_attn_fp8_sm90, h3k_attn_fp8_sm90_key_tile(), 1, 1,
                                      h3k_attn_fp8_sm90_grid};
    } else if (prop.major == 9 && prop.minor == 0) {
#ifdef H3_BUILT_SM90A
        printf("FAIL attn_fp8_sm90: this build has sm_90a code and the device is sm_90, but the kernel is not "
               "available\n");
        return 1;
#else
        printf("attn_fp8_sm90: this build has no sm_90a code (H3_CUDA_ARCHS), not tested\n");
#endif
    }
#ifndef H3_LAB
    (void)variant;
#else
    if (variant) { /* the lab's variant alone, in its own mode */
        const int sm = h3lab_attn_sm90_smoothed(variant);
        if (sm < 0) {
            fprintf(stderr, "test_gpu_attention: --variant %d: the lab has no such variant\n", variant);
            return 2;
        }
        if (!h3k_attn_fp8_sm90_available()) {
            printf("test_gpu_attention: --variant needs an sm_90 device, skipped\n");
            return 77;
        }
        static char vname[16];
        snprintf(vname, sizeof vname, "lab v%d", variant);
        h3lab_select(variant);
        printf("lab variant: %s\n", h3lab_attn_sm90_name(variant));
        nk = 0;
        kernels[nk++] = (kernel_desc){vname, h3lab_attn_sm90_selected, h3k_attn_fp8_sm90_key_tile(), 1, sm,
                                      h3lab_attn_sm90_selected_grid};
    }
#endif

    static const int Ss[] = {1, 2, 63, 65, 127, 129, 1000, 4097};
    static const int Hs[] = {1, 3};
    for (int kx = 0; kx < nk && one_dist >= 0; kx++) run_case(&kernels[kx], one_S, one_H, one_dist);
    for (int kx = 0; kx < nk && do_sweep && one_dist < 0; kx++) /* the smoothed mma differs only in its epilogue */
        if (!(kernels[kx].smooth && kernels[kx].run == h3k_attn_fp8_mma)) sweep(&kernels[kx]);
    for (int kx = 0; kx < nk && !do_sweep && one_dist < 0; kx++) {
        for (size_t si = 0; si < sizeof Ss / sizeof Ss[0]; si++)
            for (size_t hi = 0; hi < sizeof Hs / sizeof Hs[0]; hi++) run_case(&kernels[kx], Ss[si], Hs[hi], DIST_NORMAL);
        run_case(&kernels[kx], 1000, 56, DIST_NORMAL);
        run_case(&kernels[kx], 129, 3, DIST_DOMINANT);
        run_case(&kernels[kx], 4097, 2, DIST_DOMINANT);
        run_case(&kernels[kx], 1000, 3, DIST_STRESS);
        run_case(&kernels[kx], 4097, 2, DIST_STRESS);
        run_case(&kernels[kx], 4097, 2, DIST_MEANV);
        run_case(&kernels[kx], 30272, 1, DIST_MEANV);
        /* model-like data at the block's sizes: sharp rows, sinks, outlier
         * dims, V means (where an accumulator that drops small additions
         * shows) */
        run_case(&kernels[kx], 1000, 4, DIST_MODEL);
        run_case(&kernels[kx], 4096, 2, DIST_MODEL);
        run_case(&kernels[kx], 30272, 2, DIST_MODEL);
        run_case(&kernels[kx], 75600, 1, DIST_MODEL);
    }
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
