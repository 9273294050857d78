/* attn_error.c — where the FP8 attention contract's error comes from, on the
 * CPU, and what would lift it.
 *
 *   attn_error [--seq S] [--heads H] [--seed N] [--mix normal|stress|both]
 *
 * Draws q, k, v as BF16 from N(0,1) or FA3's stress mix N(0,1) +
 * N(0,100)·Bernoulli(0.001) (docs/accuracy.md), computes float64 attention,
 * and then attention with only some operands rounded to e4m3 the way the
 * contract rounds them (DESIGN.md §3: Q, K, V per (head, 128-token group) with
 * s = amax/448; P = e4m3(p · 256 · s_v/s_vmax) against the row's max; l from
 * the unrounded p; O rounded to BF16). Everything else is float64, so each
 * row of the table isolates the rounding it names. Rounding errors of
 * independent operands add in quadrature: the rows "Q K", "V", "P" alone show
 * the share of each, and the rows after them what a remedy would buy:
 *
 *   - "Q K rotated": Q and K multiplied by one orthonormal matrix (a 128-point
 *     Hadamard transform after fixed random signs) before rounding — FA3's
 *     "incoherent processing". QKᵀ is unchanged; an outlier channel is spread
 *     over all 128, so the group's amax shrinks and the other values keep
 *     more of e4m3's range.
 *   - "Q K per-token scales": one scale per token instead of per 128 tokens.
 *   - "P two-term": P as the sum of two e4m3 terms (a second P·V product).
 *   - "Q K exact": what a BF16 QKᵀ (half the FP8 rate) would give.
 *   - "QK^T summed in FP16": what an FP16 accumulator for QKᵀ (wgmma
 *     .f16.e4m3.e4m3: half the registers of FP32) would cost. Q and K codes
 *     are taken at amax 16 instead of 448, so 128 products stay below FP16's
 *     65504 (|sum| <= 128 * 16 * 16 = 32768), and each dot of codes is summed
 *     in FP16: every k32 step's exact sum added with one rounding (the
 *     hardware's internal order is not documented), or, as a worst case,
 *     every product added with a rounding.
 *
 * The first rows check the method: the contract itself (cpu_quant_fp8 and
 * cpu_attention_fp8, key tile 128, online softmax against the running max)
 * must agree with "Q K V P" (row max) to a few hundredths of a point, and the
 * contract with --rotate-qk's rotation (cpu_quant_fp8 with rot_qk: the
 * rotated q, k rounded to BF16 before e4m3) with "Q K V P, Q K rotated"
 * (the same signs, the transform in float64 and not rounded).
 * Deterministic for a seed on any thread count. Cost ~S²·H·D·10 flops per
 * mix: S = 8192, H = 8 takes minutes on 2 cores. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cpu_internal.h"
#include "cpu_ref.h"
#include "numerics.h"
#include "opts.h"
#include "rng.h"

#define D 128

/* Operand forms of Q and K the table compares (each costs one QKᵀ per row). */
enum { QK_EXACT, QK_GROUP, QK_TOKEN, QK_ROT, QK_F16, QK_F16W, QK_N };
/* V / P forms. */
enum { VP_EXACT, VP_V, VP_P, VP_VP, VP_VP2, VP_N };

typedef struct {
    const char *what;
    int qk, vp;
} row_def;

static const row_def ROWS[] = {
    {"Q K V P e4m3 (the contract, row max)", QK_GROUP, VP_VP},
    {"Q K alone", QK_GROUP, VP_EXACT},
    {"V alone", QK_EXACT, VP_V},
    {"P alone", QK_EXACT, VP_P},
    {"V P, Q K exact (a BF16 QK^T)", QK_EXACT, VP_VP},
    {"Q K V P, Q K per-token scales", QK_TOKEN, VP_VP},
    {"Q K V P, Q K rotated", QK_ROT, VP_VP},
    {"Q K rotated alone", QK_ROT, VP_EXACT},
    {"Q K V P, P two-term", QK_GROUP, VP_VP2},
    {"Q K rotated, V, P two-term", QK_ROT, VP_VP2},
    {"V, P two-term, Q K exact", QK_EXACT, VP_VP2},
    {"Q K V P, QK^T summed in FP16 per 32 keys (codes at amax 16)", QK_F16, VP_VP},
    {"Q K alone, QK^T summed in FP16 per 32 keys", QK_F16, VP_EXACT},
    {"Q K V P, QK^T summed in FP16 per product (worst case)", QK_F16W, VP_VP},
};
#define NROWS ((int)(sizeof ROWS / sizeof ROWS[0]))

#define PROG "attn_error"

static const char usage_text[] =
    "usage: attn_error [--seq S] [--heads H] [--seed N] [--mix normal|stress|both] [--help] [--version]\n"
    "  the FP8 attention contract's error against float64, operand by operand (Q K, V, P), and what\n"
    "  Q/K rotation, per-token scales, a two-term P or a BF16 QK^T would buy, on the CPU\n"
    "  --seq S    tokens, 1..65536 (default 4096)\n"
    "  --heads H  heads, 1..64 (default 8)\n"
    "  --seed N   seed of q, k, v (default 1)\n"
    "  --mix M    normal: N(0,1); stress: FA3's N(0,1) + N(0,100) Bernoulli(0.001); both (default)\n"
    "  A value follows its flag as the next word or after '=' (--seq 512, --seq=512).\n";

/* q, k, v [S][H*D] bf16 of one mix; streams 0-2 the values, 3-5 the outlier
 * draws, 6-8 the outliers' values. */
static void draw_qkv(unsigned long long seed, int stress, int S, int H, uint16_t *t[3])
{
    const size_t n = (size_t)S * H * D;
    for (int a = 0; a < 3; a++) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            double x = h3_normal(seed, (uint64_t)a, i);
            if (stress && h3_uniform(seed, (uint64_t)(3 + a), i) < 0.001) x += 10.0 * h3_normal(seed, (uint64_t)(6 + a), i);
            t[a][i] = h3_f32_to_bf16((float)x);
        }
    }
}

/* x -> FWHT(x ⊙ signs) / sqrt(128): an orthonormal map, the same for q and k. */
static void rotate(double *x, const double *signs)
{
    for (int d = 0; d < D; d++) x[d] *= signs[d];
    for (int len = 1; len < D; len *= 2)
        for (int i = 0; i < D; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                const double a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
    for (int d = 0; d < D; d++) x[d] *= 0.08838834764831845; /* 128^-1/2 */
}

/* Rows [r0, r1) of m [S][D] in place: x -> e4m3(x · target/amax) · amax/target
 * (the contract quantises with target 448), one scale over the block (1 if
 * amax is 0); keep_codes leaves the codes, without the scale. Returns the
 * scale. */
static double round_block_to(double *m, int r0, int r1, double target, int keep_codes)
{
    double amax = 0.0;
    for (size_t i = (size_t)r0 * D; i < (size_t)r1 * D; i++) amax = fmax(amax, fabs(m[i]));
    const float inv = amax > 0 ? (float)(target / amax) : 1.0f, s = amax > 0 ? (float)(amax / target) : 1.0f;
    for (size_t i = (size_t)r0 * D; i < (size_t)r1 * D; i++)
        m[i] = (double)h3_round_e4m3((float)m[i] * inv) * (keep_codes ? 1.0f : s);
    return s;
}

static double round_block(double *m, int r0, int r1)
{
    return round_block_to(m, r0, r1, 448.0, 0);
}

/* FP16 accumulation of e4m3 codes (the wgmma .f16 accumulator): model
 * "chunk" adds each k32 step's exact sum to the FP16 accumulator with one
 * rounding; "each" rounds after every product (the worst case). Products of
 * two e4m3 codes are exact in FP16. */
static double dot_f16(const double *a, const double *b, int each)
{
    _Float16 acc = 0;
    for (int c = 0; c < D; c += 32) {
        double part = 0.0;
        for (int d = c; d < c + 32; d++) {
            if (each)
                acc = (_Float16)((double)acc + a[d] * b[d]);
            else
                part += a[d] * b[d];
        }
        if (!each) acc = (_Float16)((double)acc + part);
    }
    return (double)acc;
}

/* m rounded per 128-token group as round_block_to does; tok_scale (or NULL)
 * gets each token's group scale. */
static void round_groups_to(double *m, int S, double target, int keep_codes, double *tok_scale)
{
    for (int g = 0; g < S; g += H3_QGROUP) {
        const int e = g + H3_QGROUP < S ? g + H3_QGROUP : S;
        const double s = round_block_to(m, g, e, target, keep_codes);
        if (tok_scale)
            for (int j = g; j < e; j++) tok_scale[j] = s;
    }
}

static void round_groups(double *m, int S)
{
    round_groups_to(m, S, 448.0, 0, NULL);
}

static double dot(const double *a, const double *b)
{
    double s = 0.0;
    for (int d = 0; d < D; d++) s += a[d] * b[d];
    return s;
}

typedef struct {
    double se[NROWS], sr, n, contract_se[2]; /* the contract without and with Q/K rotation */
} sums;

/* One head: the float64 reference and every row's variant, summed into acc. */
static void run_head(const uint16_t *t[3], int S, int H, int h, const double *signs, const uint16_t *Oc[2], sums *acc)
{
    const size_t plane = (size_t)S * D;
    double *qk[QK_N][2], *vx = malloc(plane * sizeof(double)), *vq = malloc(plane * sizeof(double));
    double *w = malloc((size_t)S * sizeof(double)); /* P's multiplier 256 · s_v(group)/s_vmax per key */
    double *s16[2] = {malloc((size_t)S * sizeof(double)), malloc((size_t)S * sizeof(double))}; /* QK_F16 scales */
    for (int f = 0; f < QK_N; f++)
        for (int a = 0; a < 2; a++) qk[f][a] = malloc(plane * sizeof(double));
    for (int a = 0; a < 2; a++)
        for (int j = 0; j < S; j++)
            for (int d = 0; d < D; d++) {
                const double x = h3_bf16_to_f32(t[a][(size_t)j * H * D + (size_t)h * D + d]);
                for (int f = 0; f < QK_N; f++) qk[f][a][(size_t)j * D + d] = x;
            }
    for (int j = 0; j < S; j++)
        for (int d = 0; d < D; d++) vx[(size_t)j * D + d] = vq[(size_t)j * D + d] = h3_bf16_to_f32(t[2][(size_t)j * H * D + (size_t)h * D + d]);
    for (int a = 0; a < 2; a++) {
        round_groups(qk[QK_GROUP][a], S);
        for (int j = 0; j < S; j++) round_block(qk[QK_TOKEN][a], j, j + 1);
        for (int j = 0; j < S; j++) rotate(qk[QK_ROT][a] + (size_t)j * D, signs);
        round_groups(qk[QK_ROT][a], S);
        round_groups_to(qk[QK_F16][a], S, 16.0, 1, s16[a]);
        memcpy(qk[QK_F16W][a], qk[QK_F16][a], plane * sizeof(double));
    }
    /* V rounded by groups; its scales give P's multiplier */
    double svmax = 0.0;
    round_groups_to(vq, S, 448.0, 0, w);
    for (int j = 0; j < S; j++) svmax = fmax(svmax, w[j]);
    for (int j = 0; j < S; j++) w[j] = 256.0 * w[j] / svmax;
    const double scale = 1.0 / sqrt((double)D);
    int need[QK_N] = {1 << VP_EXACT}; /* the V/P forms each Q K form's rows use; the reference's */
    for (int r = 0; r < NROWS; r++) need[ROWS[r].qk] |= 1 << ROWS[r].vp;
#pragma omp parallel
    {
        double *x = malloc((size_t)S * sizeof(double)), *p = malloc((size_t)S * sizeof(double));
        double se[NROWS] = {0}, sr = 0.0, cse[2] = {0.0, 0.0};
        double o[VP_N][D], ref[D];
#pragma omp for schedule(dynamic, 16)
        for (int i = 0; i < S; i++) {
            for (int f = 0; f < QK_N; f++) {
                const double *qi = qk[f][0] + (size_t)i * D;
                double m = -INFINITY, l = 0.0;
                for (int j = 0; j < S; j++) {
                    if (f == QK_F16 || f == QK_F16W)
                        x[j] = dot_f16(qi, qk[f][1] + (size_t)j * D, f == QK_F16W) * (s16[0][i] * s16[1][j]) * scale;
                    else
                        x[j] = dot(qi, qk[f][1] + (size_t)j * D) * scale;
                    m = fmax(m, x[j]);
                }
                for (int j = 0; j < S; j++) l += p[j] = exp(x[j] - m);
                memset(o, 0, sizeof o);
                for (int j = 0; j < S; j++) {
                    /* P rounded as the contract does (against the row max
                     * here; the kernels use the running max). With V exact
                     * the multiplier is 256 alone; with V rounded it carries
                     * V's group scale, and the product is taken back to
                     * P·V's units (pv / w[j] times the rounded v). */
                    double c[VP_N];
                    const double pw = p[j] * w[j];
                    if (need[f] & (1 << VP_EXACT)) c[VP_EXACT] = p[j];
                    if (need[f] & (1 << VP_V)) c[VP_V] = p[j];
                    if (need[f] & (1 << VP_P)) c[VP_P] = cpu_round_e4m3_pos((float)(p[j] * 256.0)) / 256.0;
                    if (need[f] & (1 << VP_VP | 1 << VP_VP2)) {
                        const double hi = cpu_round_e4m3_pos((float)pw);
                        c[VP_VP] = hi / w[j];
                        /* the second term: the rest, scaled by 2^4 into e4m3's
                         * range (it is below half a step of hi) and back */
                        const double lo = pw - hi;
                        const double lo8 = (lo < 0 ? -1.0 : 1.0) * cpu_round_e4m3_pos((float)(fabs(lo) * 16.0)) / 16.0;
                        c[VP_VP2] = (hi + lo8) / w[j];
                    }
                    for (int u = 0; u < VP_N; u++) {
                        if (!(need[f] & (1 << u))) continue;
                        const double *src = (u == VP_EXACT || u == VP_P ? vx : vq) + (size_t)j * D, cu = c[u];
                        for (int d = 0; d < D; d++) o[u][d] += cu * src[d];
                    }
                }
                if (f == QK_EXACT)
                    for (int d = 0; d < D; d++) ref[d] = o[VP_EXACT][d] / l;
                for (int r = 0; r < NROWS; r++) {
                    if (ROWS[r].qk != f) continue;
                    for (int d = 0; d < D; d++) {
                        const double y = h3_round_bf16((float)(o[ROWS[r].vp][d] / l)) - ref[d];
                        se[r] += y * y;
                    }
                }
            }
            for (int d = 0; d < D; d++) {
                for (int c = 0; c < 2; c++) {
                    const double y = h3_bf16_to_f32(Oc[c][(size_t)i * H * D + (size_t)h * D + d]) - ref[d];
                    cse[c] += y * y;
                }
                sr += ref[d] * ref[d];
            }
        }
#pragma omp critical
        {
            for (int r = 0; r < NROWS; r++) acc->se[r] += se[r];
            acc->sr += sr;
            acc->contract_se[0] += cse[0];
            acc->contract_se[1] += cse[1];
        }
        free(x);
        free(p);
    }
    acc->n += (double)plane;
    for (int f = 0; f < QK_N; f++)
        for (int a = 0; a < 2; a++) free(qk[f][a]);
    free(vx); free(vq); free(w); free(s16[0]); free(s16[1]);
}

int main(int argc, char **argv)
{
    long S = 4096, H = 8;
    unsigned long long seed = 1;
    int mix0 = 0, mix1 = 1;
    static const h3_flag flags[] = {{"seq", 1}, {"heads", 1}, {"seed", 1}, {"mix", 1}, {NULL, 0}};
    enum { F_SEQ, F_HEADS, F_SEED, F_MIX };
    static const char *const mixes[] = {"normal", "stress", "both", NULL};
    const h3_cli cli = {PROG, usage_text, flags, NULL};
    const char *a;
    for (int f; (f = h3_cli_next(&cli, argc, argv, &a)) >= 0;) {
        switch (f) {
        case F_SEQ: S = (long)h3_cli_uint(PROG, "--seq", a, 1, 65536); break;
        case F_HEADS: H = (long)h3_cli_uint(PROG, "--heads", a, 1, 64); break;
        case F_SEED: seed = h3_cli_uint(PROG, "--seed", a, 0, UINT64_MAX); break;
        case F_MIX: { /* mix0..mix1: 0 N(0,1), 1 the stress mix */
            const int m = h3_cli_choice(PROG, "--mix", a, mixes);
            mix0 = m == 1;
            mix1 = m != 0;
            break;
        }
        }
    }
    const int S_pad = h3_pad_tokens((int)S), G = h3_groups((int)S);
    const size_t n = (size_t)S * H * D, n8 = (size_t)H * S_pad * D;
    uint16_t *q = malloc(n * 2), *k = malloc(n * 2), *v = malloc(n * 2), *Oc[2] = {malloc(n * 2), malloc(n * 2)};
    uint8_t *q8 = malloc(n8), *k8 = malloc(n8), *vt8 = malloc(n8);
    float *sc = malloc((size_t)3 * H * G * sizeof(float));
    if (!q || !k || !v || !Oc[0] || !Oc[1] || !q8 || !k8 || !vt8 || !sc) {
        fprintf(stderr, "attn_error: out of memory for S = %ld, H = %ld\n", S, H);
        return 1;
    }
    double signs[D]; /* the contract's (config.h) */
    for (int d = 0; d < D; d++) signs[d] = h3_rot_flips(d) ? -1.0 : 1.0;
    printf("attn_error: S = %ld, H = %ld, D = 128, seed %llu; relative RMS and RMSE against float64\n", S, H, seed);
    for (int mix = mix0; mix <= mix1; mix++) {
        uint16_t *t[3] = {q, k, v};
        draw_qkv(seed, mix, (int)S, (int)H, t);
        for (int rot = 0; rot < 2; rot++) {
            cpu_quant_fp8((int)S, (int)H, q, k, v, NULL, 0, NULL, rot, q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G);
            cpu_attention_fp8(q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G, NULL, (int)S, (int)H, 128, NULL, 1, NULL,
                              (int)S, Oc[rot], NULL);
        }
        sums acc;
        memset(&acc, 0, sizeof acc);
        for (int h = 0; h < H; h++) {
            fprintf(stderr, "\rattn_error: %s, head %d/%ld", mix ? "stress mix" : "N(0,1)", h + 1, H);
            run_head((const uint16_t **)t, (int)S, (int)H, h, signs, (const uint16_t **)Oc, &acc);
        }
        fprintf(stderr, "\n");
        const char *in = mix ? "stress mix" : "N(0,1)";
        printf("| inputs | rounded to e4m3 | rel RMS | RMSE |\n|---|---|---|---|\n");
        for (int c = 0; c < 2; c++)
            printf("| %s | the contract%s (cpu_quant_fp8, cpu_attention_fp8) | %.3f%% | %.3e |\n", in,
                   c ? " with Q/K rotation" : "", 100 * sqrt(acc.contract_se[c] / acc.sr), sqrt(acc.contract_se[c] / acc.n));
        for (int r = 0; r < NROWS; r++)
            printf("| %s | %s | %.3f%% | %.3e |\n", in, ROWS[r].what, 100 * sqrt(acc.se[r] / acc.sr),
                   sqrt(acc.se[r] / acc.n));
        fflush(stdout);
    }
    free(q); free(k); free(v); free(Oc[0]); free(Oc[1]); free(q8); free(k8); free(vt8); free(sc);
    return 0;
}
