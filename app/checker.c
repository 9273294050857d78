/* checker.c — GPU stage outputs against the CPU reference (cpu_ref/).
 *
 * Tolerances: one table, each with its reason. Stage checks feed the CPU the
 * GPU's own input to that stage, so a failure names the stage that caused it.
 * Metrics: NaN/Inf first (a non-finite value where the reference is finite
 * fails at once), then relative RMS ||got - ref|| / ||ref|| and the max abs
 * error relative to max |ref|. */
#include "checker.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_ref.h"
#include "numerics.h"

/* BF16 has 8 significant bits: one ulp is 2^-7..2^-8 of a value. Two
 * computations of the same FP32 result that round to BF16 differ only where
 * the FP32 values straddle a rounding boundary, by one ulp; such flips are
 * rare, so their relative RMS stays far below one ulp. */
const h3_tolerance h3_tolerances[] = {
    {"adaln", 2e-3, 1.6e-2, "2688-term FP32 dot products in another order, BF16 output: rare 1-ulp flips"},
    {"norm1_mod", 2e-3, 1.6e-2, "FP32 row reduction in another order, BF16 output: rare 1-ulp flips"},
    {"norm2_mod", 2e-3, 1.6e-2, "FP32 row reduction in another order, BF16 output: rare 1-ulp flips"},
    {"qkv_gemm", 3e-3, 2e-2, "cuBLASLt FP32 accumulation order (error ~sqrt(K) 2^-24) then BF16 rounding"},
    {"out_gemm", 3e-3, 2e-2, "cuBLASLt FP32 accumulation order (error ~sqrt(K) 2^-24) then BF16 rounding"},
    {"fc1_gemm", 3e-3, 2e-2, "cuBLASLt FP32 accumulation order (error ~sqrt(K) 2^-24) then BF16 rounding"},
    {"fc2_gemm", 3e-3, 2e-2, "cuBLASLt FP32 accumulation order (error ~sqrt(K) 2^-24) then BF16 rounding"},
    {"qk_norm_rope_quant", 1e-3, 0, "codes: <= 0.1% may differ (a 1-ulp BF16 RMSNorm flip, amplified by RoPE cancellation, see h3_e4m3_codes_close), none beyond one step or 448*2^-7"},
    {"qk_scales", 1e-2, 0x1p-7, "amax/448: <= 1% of groups may differ, by <= 2^-7 (a 1-ulp BF16 flip of the group's largest q/k value)"},
    {"attention", 5e-3, 5e-2, "same FP8 contract and key tile; exp2 approximations and FP32 sum order differ (issue 4: <= 5e-3)"},
    {"attention_lse", 1e-4, 1e-3, "LSE = m + log l from the same running max; FP32 sum order"},
    {"gate_res1", 2e-3, 1.6e-2, "x + g*y in FP32, BF16 output: rare 1-ulp flips"},
    {"gate_res2", 2e-3, 1.6e-2, "x + g*y in FP32, BF16 output: rare 1-ulp flips"},
    {"swiglu", 2e-3, 1.6e-2, "silu(g)*u in FP32 (expf and IEEE division vs the GPU's __expf and __fdividef, a few ulp), BF16 output: rare 1-ulp flips"},
    {"block", 1e-2, 1e-1, "end to end: 1-ulp BF16 flips and 1-step FP8 flips propagate through nine stages"},
    /* FP8 GEMM mode (--gemm fp8, or fp8:LIST for those GEMMs). The GEMM
     * stages keep their BF16 rows above: cuBLASLt applies the outer-vector
     * scales to an FP32 sum of exact e4m3 products, so only the summation
     * order and the BF16 rounding differ. */
    /* --gemm-accum fast: the wgmma accumulator keeps ~14 significant bits of
     * its running sum (truncating) instead of FP32 partial sums; the error
     * grows between sqrt(K) and K. Measured on the H100 (docs/perf.md),
     * BF16 output included: in the full-size block 2.6e-3 (qkv, fc1: K =
     * 5376), 2.9e-3 (out: 7168), 4.0e-3 (fc2: 14336) vs 0.7-0.8e-3 with
     * FP32 sums; 8e-3 leaves 2x over the largest, for K <= 14336. */
    {"gemm_fp8_fast", 8e-3, 5e-2, "FP8 GEMM with fast accumulation: the tensor cores' ~14-bit running sum along K (K <= 14336), then BF16 rounding"},
    {"rows_q8", 1e-3, 0, "codes of a BF16 stage output: <= 0.1% may differ in rows whose scales agree (the rare 1-ulp BF16 flips of the stage), none anywhere beyond one step or 448*2^-7"},
    {"row_scales", 1e-2, 0x1p-7, "amax/448 per token: <= 1% of rows (at least one) may differ, by <= 2^-7 (a 1-ulp flip of the row's largest value)"},
    {"quant_exact", 0, 0, "the GPU's own BF16 input, the same max and IEEE multiply and RNE: bit-exact"},
    {"block_fp8", 6e-2, 4e-1, "end to end vs the CPU's BF16-GEMM chain: the e4m3 rounding of every FP8 GEMM's operands (3 mantissa bits, per-row scales) is the error measured (4.0% with all four on the tiny config on the H200, less with fewer; issue 6's goal of <= 2% is tracked in docs/accuracy.md, not asserted)"},
    {NULL, 0, 0, NULL},
};

const h3_tolerance *h3_tolerance_for(const char *stage)
{
    for (const h3_tolerance *t = h3_tolerances; t->stage; t++)
        if (!strcmp(t->stage, stage)) return t;
    return NULL;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int h3_sample_rows(const h3_inputs *in, int want, int *rows)
{
    const int S = in->S;
    if (want >= S) {
        for (int i = 0; i < S; i++) rows[i] = i;
        return S;
    }
    int n = 0;
    /* the ends of every modality run (tags change), capped at a quarter of want */
    for (int i = 0; i < S && n < want / 4; i++)
        if (i == 0 || in->tags[i] != in->tags[i - 1]) {
            rows[n++] = i;
            if (i > 0 && n < want / 4) rows[n++] = i - 1;
        }
    /* the ragged tail: last rows and the start of the last 128-token group */
    int tail[] = {S - 1, S - 2, S - 3, (S - 1) / H3_QGROUP * H3_QGROUP, (S - 1) / H3_QGROUP * H3_QGROUP - 1};
    for (int j = 0; j < 5 && n < want; j++)
        if (tail[j] >= 0) rows[n++] = tail[j];
    /* evenly spaced, offset so they are not all group-aligned */
    int rest = want - n;
    for (int j = 0; j < rest; j++) rows[n++] = (int)(((long long)j * S + S / 2) / rest) % S;
    qsort(rows, n, sizeof *rows, cmp_int);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || rows[i] != rows[m - 1]) rows[m++] = rows[i];
    return m;
}

void h3_gather_rows_bf16(const uint16_t *full, long row_len, const int *rows, int nrows, uint16_t *out)
{
    for (int r = 0; r < nrows; r++) memcpy(out + (long)r * row_len, full + (long)rows[r] * row_len, row_len * 2);
}

static void set_tol(report_check *c, const char *stage)
{
    const h3_tolerance *t = h3_tolerance_for(stage);
    c->tol_rms = t ? t->tol_rms : 0;
    c->tol_max = t ? t->tol_max : 0;
}

/* Shared by the BF16 and F32 comparisons: values already as double. */
static void compare_values(report_check *c, long n, long row_len, const int *rows, int asserted,
                           double (*get)(const void *, long), const void *got, const void *ref)
{
    double se = 0, sr = 0, mx = 0, rmax = 0;
    long nonfinite = 0;
    for (long i = 0; i < n; i++) {
        double g = get(got, i), r = get(ref, i);
        if (!isfinite(r)) { /* the reference itself broke: never a pass */
            nonfinite++;
            continue;
        }
        if (!isfinite(g)) {
            nonfinite++;
            continue;
        }
        double d = fabs(g - r);
        se += d * d;
        sr += r * r;
        if (d > mx) mx = d;
        if (fabs(r) > rmax) rmax = fabs(r);
    }
    c->count = n;
    c->nonfinite = nonfinite;
    c->rel_rms = sr > 0 ? sqrt(se / sr) : sqrt(se / (n ? n : 1));
    c->max_abs = mx;
    c->ref_max = rmax;
    c->asserted = asserted;
    c->pass = nonfinite == 0 && c->rel_rms <= c->tol_rms && mx <= c->tol_max * (rmax > 0 ? rmax : 1);
    if (asserted && !c->pass) {
        /* the first mismatches, so the failing index pattern is visible */
        int shown = 0, len = 0;
        double thr = c->tol_max * (rmax > 0 ? rmax : 1);
        for (long i = 0; i < n && shown < 4; i++) {
            double g = get(got, i), r = get(ref, i);
            if (!isfinite(r) || !isfinite(g) || fabs(g - r) > thr || (thr == 0 && g != r)) {
                long row = i / row_len, col = i % row_len;
                len += snprintf(c->detail + len, sizeof c->detail - len, "%s[token %ld, col %ld] gpu %.6g cpu %.6g",
                                shown ? "; " : "first mismatches: ", rows ? (long)rows[row] : row, col, g, r);
                if (len >= (int)sizeof c->detail) break;
                shown++;
            }
        }
        if (!shown)
            snprintf(c->detail, sizeof c->detail, "rel RMS %.3g over tolerance %.3g (no single element over %.3g)",
                     c->rel_rms, c->tol_rms, thr);
    }
}

static double get_bf16(const void *p, long i) { return h3_bf16_to_f32(((const uint16_t *)p)[i]); }
static double get_f32(const void *p, long i) { return ((const float *)p)[i]; }

void h3_compare_bf16(report_check *c, const uint16_t *got, const uint16_t *ref, long nrows, long row_len,
                     const int *rows, int asserted)
{
    compare_values(c, nrows * row_len, row_len, rows, asserted, get_bf16, got, ref);
}

void h3_compare_f32(report_check *c, const float *got, const float *ref, long nrows, long row_len, const int *rows,
                    int asserted)
{
    compare_values(c, nrows * row_len, row_len, rows, asserted, get_f32, got, ref);
}

void h3_compare_e4m3(report_check *c, const uint8_t *got, const uint8_t *ref, long n)
{
    long differ = 0, far = 0, first = -1;
    for (long i = 0; i < n; i++) {
        if (got[i] == ref[i]) continue;
        differ++;
        if (!h3_e4m3_codes_close(got[i], ref[i])) {
            far++;
            if (first < 0) first = i;
        }
    }
    c->count = n;
    c->rel_rms = n ? (double)differ / n : 0;
    c->max_abs = (double)far;
    c->asserted = 1;
    c->pass = far == 0 && c->rel_rms <= c->tol_rms;
    if (!c->pass)
        snprintf(c->detail, sizeof c->detail, "%ld of %ld codes differ, %ld beyond one step and 448*2^-7 (first at %ld: gpu 0x%02x cpu 0x%02x)",
                 differ, n, far, first, first >= 0 ? got[first] : 0, first >= 0 ? ref[first] : 0);
}

/* Scales (or V's means, noun "means"): the fraction that differ at all
 * (rel_rms) and the largest relative difference (max_abs); tol_rms /
 * tol_max bound them. */
static void compare_scales(report_check *c, const float *got, const float *ref, long n, int at_least_one,
                           const char *noun)
{
    /* tol_rms is a fraction of the scales; at_least_one: one may differ
     * whenever any may (per-token rows of a small sample) */
    const double allowed = at_least_one && c->tol_rms > 0 && c->tol_rms * n < 1 ? 1.0 / n : c->tol_rms;
    long differ = 0, far = 0;
    double worst = 0;
    for (long j = 0; j < n; j++) {
        if (got[j] == ref[j]) continue;
        differ++;
        double rel = fabs((double)got[j] - ref[j]) / fabs((double)ref[j]);
        if (!(rel <= c->tol_max)) far++;
        if (!(rel <= worst)) worst = rel;
    }
    c->count = n;
    c->rel_rms = n ? (double)differ / (double)n : 0;
    c->max_abs = worst;
    c->asserted = 1;
    c->pass = far == 0 && c->rel_rms <= allowed;
    if (!c->pass)
        snprintf(c->detail, sizeof c->detail, "%ld of %ld %s differ (largest by %.3g relative)", differ, n, noun, worst);
}

/* A compact [nrows][N] bf16 buffer for the CPU's output on the sampled rows. */
static uint16_t *rows_buf(const h3_check_ctx *k, long N)
{
    uint16_t *b = malloc((size_t)k->nrows * N * 2);
    CHECK(b, "out of host memory");
    return b;
}

/* The sampled rows of y_gpu [S][N] against ref (the CPU's output on them,
 * from rows_buf; freed here): check (stage, what), tolerance of tol. */
static void rows_vs_cpu(report *r, const h3_check_ctx *k, const char *stage, const char *what, const char *tol,
                        uint16_t *ref, const uint16_t *y_gpu, long N)
{
    uint16_t *got = rows_buf(k, N);
    h3_gather_rows_bf16(y_gpu, N, k->rows, k->nrows, got);
    report_check *c = report_add_check(r, stage, what);
    set_tol(c, tol);
    h3_compare_bf16(c, got, ref, k->nrows, N, k->rows, 1);
    free(ref);
    free(got);
}

void h3_check_adaln(report *r, const h3_check_ctx *k, const uint16_t *mod_gpu)
{
    const int N = h3_mod_width(k->cfg);
    uint16_t *ref = malloc((size_t)N * 2);
    CHECK(ref, "out of host memory");
    cpu_adaln(k->cfg, k->in->temb, k->blk->w[H3_T_ADALN_W], k->blk->w[H3_T_ADALN_B], ref);
    report_check *c = report_add_check(r, "adaln", "vs cpu");
    set_tol(c, "adaln");
    h3_compare_bf16(c, mod_gpu, ref, 1, N, NULL, 1);
    free(ref);
}

void h3_check_rmsnorm_mod(report *r, const h3_check_ctx *k, const char *stage, const uint16_t *x, const uint16_t *w,
                          const uint16_t *mod, int slot_shift, int slot_scale, const uint16_t *out_gpu)
{
    const int C = k->cfg->hidden;
    uint16_t *ref = rows_buf(k, C);
    cpu_rmsnorm_mod(x, w, mod, k->in->tags, k->S, C, k->cfg->eps, slot_shift, slot_scale, k->rows, k->nrows, ref);
    rows_vs_cpu(r, k, stage, "vs cpu", stage, ref, out_gpu, C);
}

void h3_check_gemm(report *r, const h3_check_ctx *k, const char *stage, const uint16_t *x, const uint16_t *W, int N,
                   int K, const uint16_t *y_gpu)
{
    uint16_t *ref = rows_buf(k, N);
    cpu_gemm_bf16(x, W, k->S, N, K, k->rows, k->nrows, ref);
    rows_vs_cpu(r, k, stage, "vs cpu", stage, ref, y_gpu, N);
}

void h3_check_qk_quant(report *r, const h3_check_ctx *k, const uint16_t *qkv, const float *vmu, int rot_qk,
                       const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq, const float *sk,
                       const float *sv)
{
    const int H = k->cfg->heads, Sp = h3_pad_tokens(k->S), G = h3_groups(k->S);
    const size_t nq = (size_t)H * Sp * 128, ns = (size_t)H * G;
    uint8_t *rq = malloc(nq), *rk = malloc(nq), *rv = malloc(nq);
    float *rs = malloc(ns * 3 * sizeof(float)), *rmu = vmu ? malloc((size_t)H * 128 * sizeof(float)) : NULL;
    CHECK(rq && rk && rv && rs && (rmu || !vmu), "out of host memory");
    if (vmu) { /* V smoothing: the mean is summed in a fixed order, so it must agree bit for bit */
        const int I = h3_attn_width(k->cfg);
        cpu_v_mean(qkv + H3_QKV_V_OFFSET, 3L * I, H3_QKV_HEAD_STRIDE, k->S, H, rmu);
        report_check *c = report_add_check(r, "qk_norm_rope_quant", "v mean vs cpu");
        set_tol(c, "quant_exact");
        compare_scales(c, vmu, rmu, (long)H * 128, 0, "means");
    }
    cpu_qk_norm_rope_quant(k->cfg, qkv, k->in->pos, k->blk->w[H3_T_QNORM], k->blk->w[H3_T_KNORM], k->S, rmu, rot_qk,
                           rq, rk, rv, rs, rs + ns, rs + 2 * ns);
    const char *what[3] = {"q8 codes vs cpu", "k8 codes vs cpu", "vt8 codes vs cpu"};
    const uint8_t *got[3] = {q8, k8, vt8}, *ref[3] = {rq, rk, rv};
    for (int i = 0; i < 3; i++) {
        report_check *c = report_add_check(r, "qk_norm_rope_quant", what[i]);
        set_tol(c, "qk_norm_rope_quant");
        h3_compare_e4m3(c, got[i], ref[i], (long)nq);
    }
    /* Scales: amax/448 per (head, group). The largest value of a q/k group
     * can be one of the rare 1-ulp BF16 flips of the RMSNorm, so a few groups
     * may differ by up to 2^-7; V is the GEMM output itself and must agree. */
    const float *gs[3] = {sq, sk, sv};
    const char *swhat[3] = {"q scales vs cpu", "k scales vs cpu", "v scales vs cpu"};
    for (int i = 0; i < 3; i++) {
        report_check *c = report_add_check(r, "qk_norm_rope_quant", swhat[i]);
        set_tol(c, i == 2 ? "quant_exact" : "qk_scales");
        compare_scales(c, gs[i], rs + i * ns, (long)ns, 0, "scales");
    }
    free(rq);
    free(rk);
    free(rv);
    free(rs);
    free(rmu);
}

void h3_check_attention(report *r, const h3_check_ctx *k, int key_tile, const cpu_attn_split *split,
                        const uint16_t *qkv, const float *vmu, const uint8_t *q8, const uint8_t *k8,
                        const uint8_t *vt8, const float *sq, const float *sk, const float *sv, const uint16_t *O_gpu,
                        const float *lse_gpu)
{
    const int H = k->cfg->heads, I = h3_attn_width(k->cfg), S = k->S, n = k->natt;
    uint16_t *ref = malloc((size_t)n * I * 2), *got = malloc((size_t)n * I * 2);
    float *lref = malloc((size_t)H * n * 4), *lgot = malloc((size_t)H * n * 4);
    CHECK(ref && got && lref && lgot, "out of host memory");
    cpu_attention_fp8(q8, k8, vt8, sq, sk, sv, vmu, S, H, key_tile, split, 1, k->att_rows, n, ref, lref);
    h3_gather_rows_bf16(O_gpu, I, k->att_rows, n, got);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < n; i++) lgot[(size_t)h * n + i] = lse_gpu[(size_t)h * S + k->att_rows[i]];
    report_check *c = report_add_check(r, "attention", "vs emulated fp8");
    set_tol(c, "attention");
    h3_compare_bf16(c, got, ref, n, I, k->att_rows, 1);
    c = report_add_check(r, "attention", "lse vs emulated fp8");
    set_tol(c, "attention_lse");
    h3_compare_f32(c, lgot, lref, H, n, NULL, 1);

    /* The FP8 error itself: exact FP32 attention on the unquantised BF16 q/k/v. */
    uint16_t *q = malloc((size_t)S * I * 2), *kk = malloc((size_t)S * I * 2), *v = malloc((size_t)S * I * 2);
    CHECK(q && kk && v, "out of host memory");
    cpu_qk_norm_rope(k->cfg, qkv, k->in->pos, k->blk->w[H3_T_QNORM], k->blk->w[H3_T_KNORM], S, NULL, S, q, kk, v);
    cpu_attention_exact(q, kk, v, S, H, k->att_rows, n, ref, lref);
    c = report_add_check(r, "attention", "vs exact (fp8 error)");
    h3_compare_bf16(c, got, ref, n, I, k->att_rows, 0);
    free(q);
    free(kk);
    free(v);
    free(ref);
    free(got);
    free(lref);
    free(lgot);
}

void h3_check_gate_residual(report *r, const h3_check_ctx *k, const char *stage, const uint16_t *x, const uint16_t *y,
                            const uint16_t *mod, int slot_gate, const uint16_t *out_gpu)
{
    const int C = k->cfg->hidden;
    uint16_t *ref = rows_buf(k, C);
    cpu_gate_residual(x, y, mod, k->in->tags, k->S, C, slot_gate, k->rows, k->nrows, ref);
    rows_vs_cpu(r, k, stage, "vs cpu", stage, ref, out_gpu, C);
}

void h3_check_swiglu(report *r, const h3_check_ctx *k, const uint16_t *g, const uint16_t *u_gpu)
{
    const int F = k->cfg->ffn;
    uint16_t *ref = rows_buf(k, F);
    cpu_swiglu(g, k->S, F, k->rows, k->nrows, ref);
    rows_vs_cpu(r, k, "swiglu", "vs cpu", "swiglu", ref, u_gpu, F);
}

void h3_check_full(report *r, const h3_check_ctx *k, int key_tile, const uint16_t *out_gpu, int progress,
                   int fp8_mask)
{
    const int C = k->cfg->hidden;
    const char *stage = fp8_mask ? "block_fp8" : "block";
    uint16_t *ref = malloc((size_t)k->S * C * 2);
    CHECK(ref, "out of host memory");
    cpu_block_weights wt;
    for (int i = 0; i < H3_T_COUNT; i++) wt.w[i] = k->blk->w[i];
    const int oom = cpu_block_forward(k->cfg, &wt, k->S, k->in->x, k->in->temb, k->in->tags, k->in->pos, key_tile, 0,
                                      progress, ref, NULL);
    report_check *c = report_add_check(r, stage, "vs cpu chain (all rows)");
    set_tol(c, stage);
    h3_compare_bf16(c, out_gpu, ref, k->S, C, NULL, 1); /* out of memory: ref is NaN, the check fails */
    if (oom) snprintf(c->detail, sizeof c->detail, "the CPU reference ran out of host memory at %d tokens", k->S);
    if (fp8_mask) {
        /* The GPU's FP8 path against its own CPU twin (the same e4m3
         * quantisations of the same GEMMs, FP32 sums): reported, not
         * asserted, until a GPU run has measured it (the BF16 path is
         * 0.07-0.31% from its chain). */
        cpu_block_forward_fp8(k->cfg, &wt, k->S, k->in->x, k->in->temb, k->in->tags, k->in->pos, key_tile,
                              fp8_mask, progress, ref, NULL);
        c = report_add_check(r, stage, "vs cpu fp8 chain (all rows)");
        set_tol(c, "block");
        h3_compare_bf16(c, out_gpu, ref, k->S, C, NULL, 0);
    }
    free(ref);
}

/* An FP8 GEMM input's scales per row: 1, or one per 128 columns (gemm_blocks). */
static int act_scales_per_row(const h3_check_ctx *k, int cols)
{
    return k->gemm_blocks ? (int)h3_fp8_kblocks((size_t)cols) : 1;
}
/* The CPU's quantisation of n rows as the run's GEMM mode has it: one scale
 * per row, or with block scales per brows x 128 block (1: activations, 128:
 * weights). */
static void quant_fp8(const h3_check_ctx *k, const uint16_t *x, long n, int cols, int brows, uint8_t *q, float *s)
{
    if (k->gemm_blocks)
        cpu_quant_blocks_e4m3(x, n, cols, brows, q, s);
    else
        cpu_quant_rows_e4m3(x, n, cols, q, s);
}

void h3_check_rows_q8(report *r, const h3_check_ctx *k, const char *stage, const uint16_t *ref_rows, int cols,
                      const uint8_t *q8_gpu, const float *s_gpu)
{
    const int n = k->nrows, nb = act_scales_per_row(k, cols), seg = k->gemm_blocks ? 128 : cols;
    uint8_t *rq = malloc((size_t)n * cols), *gq = malloc((size_t)n * cols);
    float *rs = malloc(sizeof(float) * n * nb), *gs = malloc(sizeof(float) * n * nb);
    CHECK(rq && gq && rs && gs, "out of host memory");
    quant_fp8(k, ref_rows, n, cols, 1, rq, rs);
    for (int i = 0; i < n; i++) {
        memcpy(gq + (size_t)i * cols, q8_gpu + (size_t)k->rows[i] * cols, cols);
        memcpy(gs + (size_t)i * nb, s_gpu + (size_t)k->rows[i] * nb, sizeof(float) * nb);
    }
    /* A row (block) whose largest value flipped by one BF16 ulp has another
     * scale, so most of its codes may move by one step: such rows are held
     * to "no code beyond one step" only; the differing fraction is over the
     * rows whose scales agree. */
    report_check *c = report_add_check(r, stage, "e4m3 codes vs cpu");
    set_tol(c, "rows_q8");
    long differ = 0, far = 0, same_n = 0, first = -1;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < cols; j++) {
            const size_t e = (size_t)i * cols + j, sb = (size_t)i * nb + j / seg;
            const int same = gs[sb] == rs[sb];
            same_n += same;
            if (gq[e] == rq[e]) continue;
            differ += same;
            if (!h3_e4m3_codes_close(gq[e], rq[e])) {
                far++;
                if (first < 0) first = (long)e;
            }
        }
    }
    c->count = (long)n * cols;
    c->rel_rms = same_n ? (double)differ / (double)same_n : 0;
    c->max_abs = (double)far;
    c->asserted = 1;
    c->pass = far == 0 && c->rel_rms <= c->tol_rms;
    if (!c->pass)
        snprintf(c->detail, sizeof c->detail,
                 "%ld of %ld codes differ in rows with equal scales, %ld beyond one step (first at token %d, col %ld)",
                 differ, same_n, far, first >= 0 ? k->rows[first / cols] : -1, first >= 0 ? first % cols : -1L);
    c = report_add_check(r, stage, k->gemm_blocks ? "block scales vs cpu" : "row scales vs cpu");
    set_tol(c, "row_scales");
    compare_scales(c, gs, rs, (long)n * nb, 1, "scales");
    free(rq);
    free(gq);
    free(rs);
    free(gs);
}

void h3_check_quant_exact(report *r, const h3_check_ctx *k, const char *stage, const char *what, const uint16_t *x,
                          long n, int cols, const int *rows, const uint8_t *q8_gpu, const float *s_gpu)
{
    uint16_t *xr = (uint16_t *)x;
    uint8_t *gq = (uint8_t *)q8_gpu;
    float *gs = (float *)s_gpu;
    int gathered = rows != NULL;
    /* the scales: an activation's nb per row; a weight's one per output
     * channel or per 128 x 128 block */
    const int nb = act_scales_per_row(k, cols), brows = gathered || !k->gemm_blocks ? 1 : 128;
    const long ns = (n + brows - 1) / brows * nb;
    if (gathered) { /* compact copies of the sampled rows */
        xr = malloc((size_t)n * cols * 2);
        gq = malloc((size_t)n * cols);
        gs = malloc(sizeof(float) * ns);
        CHECK(xr && gq && gs, "out of host memory");
        h3_gather_rows_bf16(x, cols, rows, (int)n, xr);
        for (long i = 0; i < n; i++) {
            memcpy(gq + (size_t)i * cols, q8_gpu + (size_t)rows[i] * cols, cols);
            memcpy(gs + (size_t)i * nb, s_gpu + (size_t)rows[i] * nb, sizeof(float) * nb);
        }
    }
    uint8_t *rq = malloc((size_t)n * cols);
    float *rs = malloc(sizeof(float) * ns);
    CHECK(rq && rs, "out of host memory");
    quant_fp8(k, xr, n, cols, brows, rq, rs);
    char w[96];
    snprintf(w, sizeof w, "%s codes vs cpu", what);
    report_check *c = report_add_check(r, stage, w);
    set_tol(c, "quant_exact");
    h3_compare_e4m3(c, gq, rq, n * cols);
    snprintf(w, sizeof w, "%s scales vs cpu", what);
    c = report_add_check(r, stage, w);
    set_tol(c, "quant_exact");
    compare_scales(c, gs, rs, ns, 0, "scales");
    if (gathered) {
        free(xr);
        free(gq);
        free(gs);
    }
    free(rq);
    free(rs);
}

void h3_check_gemm_fp8(report *r, const h3_check_ctx *k, const char *stage, const uint8_t *x8, const float *sx,
                       const uint8_t *W8, const float *sw, int N, int K, const uint16_t *y_gpu)
{
    uint16_t *ref = rows_buf(k, N);
    if (k->gemm_blocks)
        cpu_gemm_fp8_blocks(x8, sx, 1, W8, sw, 128, k->S, N, K, k->rows, k->nrows, ref);
    else
        cpu_gemm_fp8(x8, sx, W8, sw, k->S, N, K, k->rows, k->nrows, ref);
    rows_vs_cpu(r, k, stage, k->fast_accum ? "fp8 fast-accum vs cpu (e4m3)" : "fp8 vs cpu (same e4m3 operands)",
                k->fast_accum ? "gemm_fp8_fast" : stage, ref, y_gpu, N);
}

void h3_check_rmsnorm_mod_q8(report *r, const h3_check_ctx *k, const char *stage, const uint16_t *x,
                             const uint16_t *w, const uint16_t *mod, int slot_shift, int slot_scale,
                             const uint8_t *q8_gpu, const float *s_gpu)
{
    const int C = k->cfg->hidden;
    uint16_t *ref = rows_buf(k, C);
    cpu_rmsnorm_mod(x, w, mod, k->in->tags, k->S, C, k->cfg->eps, slot_shift, slot_scale, k->rows, k->nrows, ref);
    h3_check_rows_q8(r, k, stage, ref, C, q8_gpu, s_gpu);
    free(ref);
}

void h3_check_swiglu_q8(report *r, const h3_check_ctx *k, const uint16_t *g, const uint8_t *u8_gpu,
                        const float *su_gpu)
{
    const int F = k->cfg->ffn;
    uint16_t *ref = rows_buf(k, F);
    cpu_swiglu(g, k->S, F, k->rows, k->nrows, ref);
    h3_check_rows_q8(r, k, "swiglu", ref, F, u8_gpu, su_gpu);
    free(ref);
}
