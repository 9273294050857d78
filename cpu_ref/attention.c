/* attention.c — stage attention, twice (DESIGN.md §3):
 *
 * cpu_attention_fp8: the FP8 kernels' contract, emulated exactly: e4m3 Q, K, V
 * codes with per-(head, 128-token group) scales, key tiles of key_tile keys
 * (a divisor of 128, or a multiple of 64 whose 64-key chunks each keep their
 * own group's scales: the wide sm90 kernel's 192), base-2 online softmax with running max m and rescale alpha = 2^(m_old -
 * m_new), P rounded to e4m3 after the multiplier 256 * sv[g] / svmax, one
 * division by l at the end, LSE in natural log. Scores, sums and the PV
 * product are FP32 (the tensor cores accumulate e4m3 products in FP32).
 * Rows the Hopper kernel runs in split CTAs (cpu_attn_split) as three parts
 * of key tiles, each from a fresh running max, merged as the kernel merges.
 *
 * cpu_attention_exact: FP32 softmax attention on the BF16 q, k, v, two-pass
 * (scores, max, exp, sum) so it shares no algorithm with the online path.
 *
 * Both: parallel over query rows of each head; every key is used; O BF16
 * [nrows][H*128], LSE FP32 [H][nrows]. Out of memory: the head's outputs
 * are NaN (any check of them fails) and the call returns -1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "cpu_ref.h"

#define D 128

static float e4m3_lut[256];
static void init_lut(void)
{
    /* Idempotent; racing writers store the same values. */
    for (int i = 0; i < 256; i++) e4m3_lut[i] = h3_e4m3_to_f32((uint8_t)i);
}

static inline float dot128(const float *restrict a, const float *restrict b)
{
    /* 8 independent partial sums (vectorisable without reassociation). */
    float p[8] = {0};
    for (int d = 0; d < D; d += 8)
        for (int u = 0; u < 8; u++) p[u] += a[d + u] * b[d + u];
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

/* Head h's output rows (and LSE) NaN: what a head that could not run leaves. */
static void poison_head(uint16_t *O, float *lse, int H, int h, int nrows)
{
    for (int r = 0; r < nrows; r++)
        for (int d = 0; d < D; d++) O[(size_t)r * H * D + (size_t)h * D + d] = 0x7fc0;
    if (lse)
        for (int r = 0; r < nrows; r++) lse[(size_t)h * nrows + r] = NAN;
}

/* The end of a head: frees its decoded K and V; oom (an allocation failed):
 * the head is poisoned and -1 returned. */
static int end_head(float *kf, float *vf, int oom, uint16_t *O, float *lse, int H, int h, int nrows)
{
    free(kf);
    free(vf);
    if (oom) poison_head(O, lse, H, h, nrows);
    return oom ? -1 : 0;
}

/* One head of the emulation: its decoded operands and scalars, the same
 * for every query row. */
typedef struct {
    const float *kf, *vf;      /* [S_pad][D] decoded K and V codes, keys in natural order */
    const float *sq, *sk, *sv; /* [H][G] */
    int S, G, h, key_tile, quant;
    float svmax;
} head_ops;

/* The online softmax of query row qf (group gq) over key tiles [t0, t1),
 * from m = -inf, l = 0, acc = 0 (a whole row: every tile; a split row: one
 * part) -> m, l, acc [D]. x [key_tile]: scratch. */
static void row_tiles(const head_ops *a, const float *qf, int gq, int t0, int t1, float *x, float *m_out,
                      float *l_out, float *acc)
{
    const int h = a->h, G = a->G, S = a->S, key_tile = a->key_tile;
    const float *sq = a->sq, *sk = a->sk, *sv = a->sv;
    float tacc[D];
    for (int d = 0; d < D; d++) acc[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int t = t0; t < t1; t++) {
        const int j0 = t * key_tile;
        const int nv = S - j0 < key_tile ? S - j0 : key_tile; /* valid keys; the rest are -inf */
        /* x[j] holds the raw dot; the logit is c * dot, c of the
         * key's scale group (one per tile unless the tile is longer
         * than a group). m_new uses the rounded products c * dot
         * (their max = c * max dot within a group: c > 0, rounding
         * is monotone) and p the fused fma(dot, c, -m_new), exactly
         * as both GPU kernels: the row's largest key then gets the
         * same p (1 + the fma residual) on both sides, so P8 =
         * e4m3(p * mult) takes the same e4m3 step when mult is a tie
         * (a one-step flip of a dominant key's P moved whole rows by
         * ~10%: found by the shape sweep). */
        float m_new = m;
        for (int j = 0; j < nv; j++) {
            const int gk = (j0 + j) / H3_QGROUP;
            x[j] = dot128(qf, a->kf + (size_t)(j0 + j) * D);
            m_new = fmaxf(m_new, ((sq[h * G + gq] * sk[h * G + gk]) * CPU_ATTN_SCALE_LOG2E) * x[j]);
        }
        /* alpha = 2^(m - m_new); m = -inf (first tile) would give
         * -inf - -inf = NaN when m_new is -inf too, so guard it. */
        const float alpha = m == -INFINITY ? 0.0f : exp2f(m - m_new);
        float psum = 0.0f;
        for (int d = 0; d < D; d++) tacc[d] = 0.0f;
        for (int j = 0; j < nv; j++) {
            const int gk = (j0 + j) / H3_QGROUP;
            const float c = (sq[h * G + gq] * sk[h * G + gk]) * CPU_ATTN_SCALE_LOG2E;
            /* p in [0,1] -> [0,256]; V's group scale folded in */
            const float mult = 256.0f * sv[h * G + gk] / a->svmax;
            const float p = m_new == -INFINITY ? 0.0f : exp2f(fmaf(x[j], c, -m_new));
            psum += p;
            const float p8 = a->quant ? cpu_round_e4m3_pos(p * mult) : p * mult;
            const float *vr = a->vf + (size_t)(j0 + j) * D;
            for (int d = 0; d < D; d++) tacc[d] += p8 * vr[d];
        }
        l = l * alpha + psum;
        for (int d = 0; d < D; d++) acc[d] = acc[d] * alpha + tacc[d];
        m = m_new;
    }
    *m_out = m;
    *l_out = l;
}

/* A split row (cpu_ref.h): three parts of the ntiles key tiles, each from a
 * fresh running max, merged as the kernel's consumer WG 0 merges the three
 * WGs' (O, m, l) (sm90_wg3.cuh merge_partials): one running max M, each
 * part scaled by 2^(m_j - M) as the loop rescales from tile to tile, the
 * products summed in part order. A part without tiles (ntiles < 3, which
 * the kernel never splits) has m = -inf and adds nothing; the guard keeps
 * it from -inf - -inf. */
static void row_split(const head_ops *a, const float *qf, int gq, int ntiles, float *x, float *m_out, float *l_out,
                      float *acc)
{
    float mp[3], lp[3], ap[3][D], e[3];
    for (int j = 0; j < 3; j++) row_tiles(a, qf, gq, j * ntiles / 3, (j + 1) * ntiles / 3, x, &mp[j], &lp[j], ap[j]);
    const float M = fmaxf(mp[0], fmaxf(mp[1], mp[2]));
    for (int j = 0; j < 3; j++) e[j] = mp[j] == -INFINITY ? 0.0f : exp2f(mp[j] - M);
    *l_out = lp[0] * e[0] + lp[1] * e[1] + lp[2] * e[2];
    for (int d = 0; d < D; d++) acc[d] = ap[0][d] * e[0] + ap[1][d] * e[1] + ap[2][d] * e[2];
    *m_out = M;
}

int cpu_attention_fp8_head(const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq,
                           const float *sk, const float *sv, const float *vmu, int S, int H, int h, int key_tile,
                           const cpu_attn_split *split, int quant, const int *rows, int nrows, uint16_t *O,
                           float *lse)
{
    const int S_pad = h3_pad_tokens(S), G = h3_groups(S);
    const size_t plane = (size_t)S_pad * D;
    const uint8_t *qh = q8 + h * plane, *kh = k8 + h * plane, *vh = vt8 + h * plane;
    float *kf = malloc(plane * sizeof(float)); /* [S_pad][D] decoded K codes */
    float *vf = malloc(plane * sizeof(float)); /* [S_pad][D] decoded V codes, keys in natural order */
    if (!kf || !vf) return end_head(kf, vf, 1, O, lse, H, h, nrows);
    int oom = 0;
    init_lut();
    float svmax = 0.0f;
    for (int g = 0; g < G; g++) svmax = fmaxf(svmax, sv[h * G + g]);
#pragma omp parallel for schedule(static)
    for (int j = 0; j < S_pad; j++) {
        const int slot = h3_v_key_slot(j); /* undo the 16-key permutation of vt8 */
        for (int d = 0; d < D; d++) {
            kf[(size_t)j * D + d] = e4m3_lut[kh[(size_t)j * D + d]];
            vf[(size_t)j * D + d] = e4m3_lut[vh[(size_t)d * S_pad + slot]];
        }
    }
    const head_ops a = {kf, vf, sq, sk, sv, S, G, h, key_tile, quant, svmax};
    const int ntiles = (S + key_tile - 1) / key_tile;
#pragma omp parallel
    {
        float *x = malloc((size_t)key_tile * sizeof(float)); /* [key_tile] scores, then p */
        if (!x) {
#pragma omp atomic write
            oom = 1;
        }
#pragma omp for schedule(dynamic, 4)
        for (int r = 0; r < nrows; r++) {
            if (!x) continue; /* every thread meets the loop; the head is poisoned below */
            const int i = cpu_row(rows, r), gq = i / H3_QGROUP;
            float qf[D], acc[D], m, l;
            for (int d = 0; d < D; d++) qf[d] = e4m3_lut[qh[(size_t)i * D + d]];
            if (split && split->row(split->ctx, h, i))
                row_split(&a, qf, gq, ntiles, x, &m, &l, acc);
            else
                row_tiles(&a, qf, gq, 0, ntiles, x, &m, &l, acc);
            /* acc ~ (256 / svmax) * sum p v_dequant: undo with one multiply. */
            const float fin = (svmax * 0.00390625f) / l;
            uint16_t *o = O + (size_t)r * H * D + (size_t)h * D; /* [D] of [nrows][H*D] bf16 */
            if (vmu) /* V smoothing: the mean comes back in one fma, as on the GPU */
                for (int d = 0; d < D; d++) o[d] = h3_f32_to_bf16(fmaf(acc[d], fin, vmu[h * D + d]));
            else
                for (int d = 0; d < D; d++) o[d] = h3_f32_to_bf16(acc[d] * fin);
            if (lse) lse[(size_t)h * nrows + r] = (m + log2f(l)) * CPU_LN2;
        }
        free(x);
    }
    return end_head(kf, vf, oom, O, lse, H, h, nrows);
}

int cpu_attention_fp8(const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq, const float *sk,
                      const float *sv, const float *vmu, int S, int H, int key_tile, const cpu_attn_split *split,
                      int quant, const int *rows, int nrows, uint16_t *O, float *lse)
{
    int rc = 0;
    /* Library code does not abort: report and poison the outputs so any
     * check of them fails loudly. */
    if (!cpu_key_tile_ok(key_tile)) {
        fprintf(stderr, "cpu_attention_fp8: key_tile %d must divide %d or be a multiple of 64\n", key_tile, H3_QGROUP);
        rc = -1;
    } else if (split && key_tile != H3_QGROUP) { /* a split CTA's parts are runs of whole 128-key tiles */
        fprintf(stderr, "cpu_attention_fp8: split rows need key_tile %d, not %d\n", H3_QGROUP, key_tile);
        rc = -1;
    } else if (split && !split->row) {
        fprintf(stderr, "cpu_attention_fp8: a split description without its row predicate\n");
        rc = -1;
    }
    if (rc) {
        for (int h = 0; h < H; h++) poison_head(O, lse, H, h, nrows);
        return rc;
    }
    for (int h = 0; h < H; h++)
        rc |= cpu_attention_fp8_head(q8, k8, vt8, sq, sk, sv, vmu, S, H, h, key_tile, split, quant, rows, nrows, O,
                                     lse);
    return rc;
}

int cpu_attention_exact_head(const uint16_t *q, const uint16_t *k, const uint16_t *v, int S, int H, int h,
                             const int *rows, int nrows, uint16_t *O, float *lse)
{
    const size_t I = (size_t)H * D;
    const float scale = 0.08838834764831845f; /* D^-0.5 */
    float *kf = malloc((size_t)S * D * sizeof(float)); /* [S][D] K of head h */
    float *vf = malloc((size_t)S * D * sizeof(float)); /* [S][D] V of head h */
    if (!kf || !vf) return end_head(kf, vf, 1, O, lse, H, h, nrows);
    int oom = 0;
#pragma omp parallel for schedule(static)
    for (int j = 0; j < S; j++)
        for (int d = 0; d < D; d++) {
            kf[(size_t)j * D + d] = h3_bf16_to_f32(k[j * I + (size_t)h * D + d]);
            vf[(size_t)j * D + d] = h3_bf16_to_f32(v[j * I + (size_t)h * D + d]);
        }
#pragma omp parallel
    {
        float *sc = malloc((size_t)S * sizeof(float)); /* [S] scores, then exp */
        if (!sc) {
#pragma omp atomic write
            oom = 1;
        }
#pragma omp for schedule(dynamic, 4)
        for (int r = 0; r < nrows; r++) {
            if (!sc) continue; /* every thread meets the loop; the head is poisoned below */
            const int i = cpu_row(rows, r);
            float qf[D], acc[D];
            for (int d = 0; d < D; d++) {
                qf[d] = h3_bf16_to_f32(q[i * I + (size_t)h * D + d]);
                acc[d] = 0.0f;
            }
            float m = -INFINITY;
            for (int j = 0; j < S; j++) {
                sc[j] = dot128(qf, kf + (size_t)j * D) * scale;
                m = fmaxf(m, sc[j]);
            }
            float l = 0.0f;
            for (int j = 0; j < S; j++) {
                const float p = expf(sc[j] - m);
                l += p;
                const float *vr = vf + (size_t)j * D;
                for (int d = 0; d < D; d++) acc[d] += p * vr[d];
            }
            const float inv = 1.0f / l;
            uint16_t *o = O + (size_t)r * I + (size_t)h * D;
            for (int d = 0; d < D; d++) o[d] = h3_f32_to_bf16(acc[d] * inv);
            if (lse) lse[(size_t)h * nrows + r] = m + logf(l);
        }
        free(sc);
    }
    return end_head(kf, vf, oom, O, lse, H, h, nrows);
}

int cpu_attention_exact(const uint16_t *q, const uint16_t *k, const uint16_t *v, int S, int H, const int *rows,
                        int nrows, uint16_t *O, float *lse)
{
    int rc = 0;
    for (int h = 0; h < H; h++) rc |= cpu_attention_exact_head(q, k, v, S, H, h, rows, nrows, O, lse);
    return rc;
}
