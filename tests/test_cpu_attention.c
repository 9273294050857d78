/* test_cpu_attention.c — the CPU attention references (emulated FP8 and exact)
 * against float64 two-pass softmax written here, adversarial rows, the
 * lossless-quantisation equivalence, the FP8 error figures, and the
 * emulation of the Hopper kernel's split rows (cpu_attn_split).
 *
 * Run alone:   ctest --test-dir build -R test_cpu_attention --output-on-failure
 *   or         build/tests/test_cpu_attention            (H3_TEST_SEED=n fixes the inputs)
 * Accuracy report for docs/accuracy.md (S = 4096, H = 8, ~1 min on 2 cores):
 *              build/tests/test_cpu_attention --report */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "cpu_internal.h"
#include "attn/sm90_grid.h" /* the Hopper kernel's grid: which rows a plan splits (plain C) */
#include "cpu_ref.h"
#include "numerics.h"
#include "rng.h"
#include "test_stats.h"

#define D 128
static int g_fail = 0;
static h3_rng g_rng;

/* ---- error statistics ---- */

static void report(const char *what, const h3t_stats *s, const char *tolwhy)
{
    int ok = s->n_bad == 0 && s->nonfinite == 0;
    printf("  %-58s max abs %.3e  rel RMS %.3e  %s%s%s\n", what, s->max_abs, h3t_rel_rms(s),
           ok ? "ok" : "FAIL", ok ? "" : " ", ok ? "" : tolwhy);
    if (!ok) {
        printf("    %.0f of %.0f over tolerance, %d non-finite\n", s->n_bad, s->n + s->nonfinite, s->nonfinite);
        g_fail = 1;
    }
}

static double nrm(void) { return h3_rng_normal(&g_rng); }

/* Test's own statement of V's 16-key permutation (config.h comment): slot s
 * of a 16-group holds key KEY_OF_SLOT[s]. */
static const int KEY_OF_SLOT[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
static int slot_of_key(int k)
{
    for (int s = 0; s < 16; s++)
        if (KEY_OF_SLOT[s] == (k & 15)) return (k & ~15) + s;
    return -1;
}

/* ---- float64 two-pass references ---- */
/* Dequantised operands as double: qd, kd, vd [H][S][D]. Row i of head h ->
 * o [D], lse (natural). */
static void ref_row(const double *qd, const double *kd, const double *vd, int S, int h, int i, double *o,
                    double *lse, double *xmax_abs, double *sabs_max)
{
    const double *qi = qd + ((size_t)h * S + i) * D;
    double *x = malloc((size_t)S * sizeof(double));
    double m = -INFINITY, mx = 0, sa = 0;
    for (int j = 0; j < S; j++) {
        const double *kj = kd + ((size_t)h * S + j) * D;
        double s = 0, a = 0;
        for (int d = 0; d < D; d++) s += qi[d] * kj[d], a += fabs(qi[d] * kj[d]);
        x[j] = s / sqrt((double)D);
        if (a / sqrt((double)D) > sa) sa = a / sqrt((double)D);
        if (x[j] > m) m = x[j];
        if (fabs(x[j]) > mx) mx = fabs(x[j]);
    }
    double l = 0;
    for (int d = 0; d < D; d++) o[d] = 0;
    for (int j = 0; j < S; j++) {
        double p = exp(x[j] - m);
        l += p;
        const double *vj = vd + ((size_t)h * S + j) * D;
        for (int d = 0; d < D; d++) o[d] += p * vj[d];
    }
    for (int d = 0; d < D; d++) o[d] /= l;
    *lse = m + log(l);
    if (xmax_abs) *xmax_abs = mx;
    if (sabs_max) *sabs_max = sa;
    free(x);
}

/* FP8 operands built by the test: codes [H][S][D] (natural key order) and
 * scales [H][G] -> the kernel layout, plus dequantised doubles. */
typedef struct {
    int S, H, S_pad, G;
    uint8_t *q8, *k8, *vt8;  /* kernel layouts */
    float *sq, *sk, *sv;     /* [H][G] */
    double *qd, *kd, *vd;    /* [H][S][D] dequantised */
} fp8_ops;

static void fp8_alloc(fp8_ops *f, int S, int H)
{
    f->S = S;
    f->H = H;
    f->S_pad = h3_pad_tokens(S);
    f->G = h3_groups(S);
    size_t n8 = (size_t)H * f->S_pad * D, nd = (size_t)H * S * D;
    f->q8 = calloc(n8, 1);
    f->k8 = calloc(n8, 1);
    f->vt8 = calloc(n8, 1);
    f->sq = calloc((size_t)H * f->G, 4);
    f->sk = calloc((size_t)H * f->G, 4);
    f->sv = calloc((size_t)H * f->G, 4);
    f->qd = calloc(nd, 8);
    f->kd = calloc(nd, 8);
    f->vd = calloc(nd, 8);
}
static void fp8_free(fp8_ops *f)
{
    free(f->q8); free(f->k8); free(f->vt8); free(f->sq); free(f->sk); free(f->sv);
    free(f->qd); free(f->kd); free(f->vd);
}
/* Sets code of (tensor t: 0 q, 1 k, 2 v, head h, token j, dim d). */
static void fp8_set(fp8_ops *f, int t, int h, int j, int d, uint8_t code)
{
    const int g = j / H3_QGROUP;
    const size_t plane = (size_t)f->S_pad * D, di = ((size_t)h * f->S + j) * D + d;
    float val = h3_e4m3_to_f32(code);
    if (t == 0) {
        f->q8[h * plane + (size_t)j * D + d] = code;
        f->qd[di] = (double)val * f->sq[h * f->G + g];
    } else if (t == 1) {
        f->k8[h * plane + (size_t)j * D + d] = code;
        f->kd[di] = (double)val * f->sk[h * f->G + g];
    } else {
        f->vt8[h * plane + (size_t)d * f->S_pad + slot_of_key(j)] = code;
        f->vd[di] = (double)val * f->sv[h * f->G + g];
    }
}

/* Compare cpu O/LSE rows with the float64 reference. Logit error bound per
 * row: the FP32 scores differ from exact by at most elog = 8 * 2^-24 *
 * max|x| (scale product, score product, exp2 argument: a few roundings; the
 * dot products of the small-integer codes used here are exact in FP32), and
 * a logit error e changes softmax weights by a factor within e^{+-2e}, so
 * |dO| <= 2.1 e max|v|; then one BF16 rounding of O (2^-8 relative covers a
 * rounding-boundary straddle) and the FP32 sum of S weights (S * 2^-24). */
static void compare_rows(const char *what, const fp8_ops *f, const int *rows, int nrows, const uint16_t *O,
                         const float *lse, int dot_exact)
{
    h3t_stats so = {0}, sl = {0};
    double vmax = 0;
    for (size_t i = 0; i < (size_t)f->H * f->S * D; i++) vmax = fmax(vmax, fabs(f->vd[i]));
    for (int h = 0; h < f->H; h++)
        for (int r = 0; r < nrows; r++) {
            double o[D], L, xm, sa;
            ref_row(f->qd, f->kd, f->vd, f->S, h, rows ? rows[r] : r, o, &L, &xm, &sa);
            /* inexact dot products (BF16 operands): FP32 sum of D products
             * errs by <= (D+2) 2^-24 sum|q k| */
            const double elog = 8 * 0x1p-24 * (xm * 1.4427 + 1) + (dot_exact ? 0 : (D + 2) * 0x1p-24 * sa);
            const double tol_o = (2.1 * elog + f->S * 0x1p-24 * 4) * vmax;
            for (int d = 0; d < D; d++)
                h3t_acc(&so, h3_bf16_to_f32(O[(size_t)r * f->H * D + h * D + d]), o[d], 0x1p-8 * fabs(o[d]) + tol_o);
            h3t_acc(&sl, lse[(size_t)h * nrows + r], L, elog + 8 * 0x1p-24 * fabs(L) + f->S * 0x1p-24 * 4);
        }
    char buf[160];
    snprintf(buf, sizeof buf, "%s O", what);
    report(buf, &so, "(tol: 1 bf16 ulp + FP32 logit error x max|v|)");
    snprintf(buf, sizeof buf, "%s LSE", what);
    report(buf, &sl, "(tol: FP32 logit error + sum rounding)");
}

/* Adversarial case kinds. */
enum { ADV_RANDOM, ADV_HUGE, ADV_TINY, ADV_EQUAL, ADV_MAXLAST, ADV_COUNT };
static const char *adv_names[ADV_COUNT] = {"random ints", "huge logits", "tiny logits", "all-equal keys",
                                           "max in last tile"};

/* Fills q/k with small integer codes (exact dot products in FP32), v random
 * e4m3, scales per kind; the same q direction for every query of MAXLAST. */
static void make_adversarial(fp8_ops *f, int kind)
{
    const int S = f->S, H = f->H, G = f->G;
    for (int i = 0; i < H * G; i++) {
        float base = kind == ADV_HUGE ? 6.0f : kind == ADV_TINY ? 1e-18f : 0.25f;
        f->sq[i] = base * (float)(0.5 + h3_rng_uniform(&g_rng));
        f->sk[i] = base * (float)(0.5 + h3_rng_uniform(&g_rng));
        f->sv[i] = (float)ldexp(0.5 + h3_rng_uniform(&g_rng), (int)(h3_rng_next(&g_rng) % 7) - 3);
    }
    int8_t u[D];
    for (int d = 0; d < D; d++) u[d] = (int8_t)((int)(h3_rng_next(&g_rng) % 9) - 4);
    for (int h = 0; h < H; h++)
        for (int j = 0; j < S; j++)
            for (int d = 0; d < D; d++) {
                int qi = (int)(h3_rng_next(&g_rng) % 17) - 8, ki = (int)(h3_rng_next(&g_rng) % 17) - 8;
                if (kind == ADV_EQUAL) ki = u[d];
                if (kind == ADV_MAXLAST) {
                    qi = u[d];
                    ki = (int)(h3_rng_next(&g_rng) % 3) - 1;
                    /* key 0 strong (first tile), key S-1 stronger (last tile):
                     * the running max moves and alpha must rescale a large l */
                    if (j == 0) ki = u[d] > 0 ? 2 : u[d] < 0 ? -2 : 0;
                    if (j == S - 1) ki = u[d] > 0 ? 3 : u[d] < 0 ? -3 : 0;
                }
                fp8_set(f, 0, h, j, d, h3_f32_to_e4m3((float)qi));
                fp8_set(f, 1, h, j, d, h3_f32_to_e4m3((float)ki));
                fp8_set(f, 2, h, j, d, h3_f32_to_e4m3((float)(nrm() * 8)));
            }
    if (kind == ADV_MAXLAST) /* same scales everywhere so key S-1 really wins */
        for (int i = 0; i < H * G; i++) f->sq[i] = f->sk[i] = 0.5f;
    if (kind == ADV_MAXLAST) { /* re-derive dequantised values for the new scales */
        for (int h = 0; h < H; h++)
            for (int j = 0; j < S; j++)
                for (int d = 0; d < D; d++) {
                    const size_t plane = (size_t)f->S_pad * D, di = ((size_t)h * S + j) * D + d;
                    f->qd[di] = (double)h3_e4m3_to_f32(f->q8[h * plane + (size_t)j * D + d]) * 0.5;
                    f->kd[di] = (double)h3_e4m3_to_f32(f->k8[h * plane + (size_t)j * D + d]) * 0.5;
                }
    }
}

/* The same operands rounded to BF16 q, k, v [S][H*D] for the exact path;
 * from_bf16 then points the reference at exactly these values. */
static void to_bf16(const fp8_ops *f, uint16_t *q, uint16_t *k, uint16_t *v)
{
    const int S = f->S, H = f->H;
    for (int h = 0; h < H; h++)
        for (int j = 0; j < S; j++)
            for (int d = 0; d < D; d++) {
                size_t di = ((size_t)h * S + j) * D + d, o = (size_t)j * H * D + h * D + d;
                q[o] = h3_f32_to_bf16((float)f->qd[di]);
                k[o] = h3_f32_to_bf16((float)f->kd[di]);
                v[o] = h3_f32_to_bf16((float)f->vd[di]);
            }
}
/* Replace the reference operands by the BF16 values the exact path sees. */
static void from_bf16(fp8_ops *f, const uint16_t *q, const uint16_t *k, const uint16_t *v)
{
    const int S = f->S, H = f->H;
    for (int h = 0; h < H; h++)
        for (int j = 0; j < S; j++)
            for (int d = 0; d < D; d++) {
                size_t di = ((size_t)h * S + j) * D + d, o = (size_t)j * H * D + h * D + d;
                f->qd[di] = h3_bf16_to_f32(q[o]);
                f->kd[di] = h3_bf16_to_f32(k[o]);
                f->vd[di] = h3_bf16_to_f32(v[o]);
            }
}

static void test_adversarial(void)
{
    printf("online softmax vs float64 two-pass, adversarial rows\n");
    const int Ss[] = {1, 2, 63, 65, 113, 129, 300};
    const int tiles[] = {16, 32, 64, 128, 192}; /* 192: the wide sm90 kernel, 64-key chunks of two groups */
    for (int si = 0; si < (int)(sizeof Ss / sizeof *Ss); si++)
        for (int kind = 0; kind < ADV_COUNT; kind++) {
            const int S = Ss[si], H = (si & 1) ? 3 : 1;
            fp8_ops f;
            fp8_alloc(&f, S, H);
            make_adversarial(&f, kind);
            uint16_t *O = malloc((size_t)S * H * D * 2);
            float *lse = malloc((size_t)S * H * 4);
            for (int ti = 0; ti < (int)(sizeof tiles / sizeof *tiles); ti++) {
                cpu_attention_fp8(f.q8, f.k8, f.vt8, f.sq, f.sk, f.sv, NULL, S, H, tiles[ti], NULL, 0, NULL, S, O, lse);
                char what[128];
                snprintf(what, sizeof what, "fp8 quant=0 S=%d H=%d tile %d %s", S, H, tiles[ti], adv_names[kind]);
                compare_rows(what, &f, NULL, S, O, lse, 1);
            }
            /* exact path on the BF16 image of the same operands */
            uint16_t *q = malloc((size_t)S * H * D * 2), *k = malloc((size_t)S * H * D * 2),
                     *v = malloc((size_t)S * H * D * 2);
            to_bf16(&f, q, k, v);
            from_bf16(&f, q, k, v);
            cpu_attention_exact(q, k, v, S, H, NULL, S, O, lse);
            char what[128];
            snprintf(what, sizeof what, "exact       S=%d H=%d %s", S, H, adv_names[kind]);
            compare_rows(what, &f, NULL, S, O, lse, 0);
            free(q); free(k); free(v); free(O); free(lse);
            fp8_free(&f);
        }
}

/* Exact path on N(0,1) BF16 inputs, every required size, with row sampling. */
static void test_exact_random(void)
{
    printf("exact attention vs float64 on N(0,1) BF16 q, k, v\n");
    const int Ss[] = {1, 2, 63, 65, 113, 1000};
    for (int si = 0; si < 6; si++)
        for (int H = 1; H <= 3; H += 2) {
            const int S = Ss[si];
            const size_t n = (size_t)S * H * D;
            uint16_t *q = malloc(n * 2), *k = malloc(n * 2), *v = malloc(n * 2);
            for (size_t i = 0; i < n; i++) {
                q[i] = h3_f32_to_bf16((float)nrm());
                k[i] = h3_f32_to_bf16((float)nrm());
                v[i] = h3_f32_to_bf16((float)nrm());
            }
            fp8_ops f;
            fp8_alloc(&f, S, H);
            from_bf16(&f, q, k, v);
            int rows[4] = {S - 1, 0, S / 2, S / 3}, nr = S >= 4 ? 4 : 1;
            if (S < 4) rows[0] = S - 1;
            uint16_t *O = malloc(n * 2), *Os = malloc((size_t)nr * H * D * 2);
            float *lse = malloc((size_t)S * H * 4), *lses = malloc((size_t)nr * H * 4);
            cpu_attention_exact(q, k, v, S, H, NULL, S, O, lse);
            char what[128];
            snprintf(what, sizeof what, "exact S=%d H=%d", S, H);
            const int step = S > 200 ? 7 : 1; /* float64 check of every 7th row at S = 1000 */
            int *chk = malloc((size_t)S * sizeof(int)), nc = 0;
            for (int i = 0; i < S; i += step) chk[nc++] = i;
            uint16_t *Oc = malloc((size_t)nc * H * D * 2);
            float *lsec = malloc((size_t)nc * H * 4);
            cpu_attention_exact(q, k, v, S, H, chk, nc, Oc, lsec);
            compare_rows(what, &f, chk, nc, Oc, lsec, 0);
            /* row sampling returns the same bits as the full call */
            cpu_attention_exact(q, k, v, S, H, rows, nr, Os, lses);
            int same = 1;
            for (int r = 0; r < nr; r++)
                for (int h = 0; h < H; h++) {
                    same &= !memcmp(Os + (size_t)r * H * D + h * D, O + (size_t)rows[r] * H * D + h * D, D * 2);
                    same &= lses[h * nr + r] == lse[h * S + rows[r]];
                }
            printf("  %-58s %s\n", "exact row sampling == full rows", same ? "ok" : "FAIL");
            if (!same) g_fail = 1;
            free(chk); free(Oc); free(lsec);
            free(q); free(k); free(v); free(O); free(Os); free(lse); free(lses);
            fp8_free(&f);
        }
}

/* Relative RMS etc. of a against b (both [S][H*D] bf16) or a double ref. */
typedef struct {
    double rel_rms, rmse, max_abs;
} errfig;
static errfig err_bf16(const uint16_t *a, const uint16_t *b, size_t n)
{
    double se = 0, sr = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double x = h3_bf16_to_f32(a[i]), y = h3_bf16_to_f32(b[i]), e = x - y;
        se += e * e;
        sr += y * y;
        mx = fmax(mx, fabs(e));
    }
    return (errfig){sqrt(se / sr), sqrt(se / n), mx};
}
static errfig err_f64(const uint16_t *a, const double *b, size_t n)
{
    double se = 0, sr = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double x = h3_bf16_to_f32(a[i]), e = x - b[i];
        se += e * e;
        sr += b[i] * b[i];
        mx = fmax(mx, fabs(e));
    }
    return (errfig){sqrt(se / sr), sqrt(se / n), mx};
}

/* q, k, v bf16 [S][H*D]: N(0,1), or FA3's stress mix N(0,1) + N(0,100) x
 * Bernoulli(0.001) (N(0,100): variance 100, std 10). */
static void gen_qkv(int S, int H, int stress, uint16_t *q, uint16_t *k, uint16_t *v)
{
    const size_t n = (size_t)S * H * D;
    uint16_t *t[3] = {q, k, v};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < n; i++) {
            double x = nrm();
            if (stress && h3_rng_uniform(&g_rng) < 0.001) x += 10.0 * nrm();
            t[a][i] = h3_f32_to_bf16((float)x);
        }
}

/* Lossless quantisation: values (e4m3 code) * 2^-6 with one +-7 = 448 * 2^-6
 * per (head, group), so s = 2^-6 exactly and x * (448/amax) = x * 2^6 is the
 * code again (a scale of exactly 1 would need amax = 448 and logits ~ 1e5;
 * a power of two is just as lossless). Then quant = 0 emulation == exact. */
static void test_lossless(void)
{
    printf("emulated FP8 (quant=0) on losslessly quantised inputs == exact path\n");
    const int Ss[] = {1, 2, 63, 65, 113, 1000};
    for (int si = 0; si < 6; si++)
        for (int H = 1; H <= 3; H += 2) {
            const int S = Ss[si], S_pad = h3_pad_tokens(S), G = h3_groups(S);
            const size_t n = (size_t)S * H * D, n8 = (size_t)H * S_pad * D;
            uint16_t *t[3];
            for (int a = 0; a < 3; a++) {
                t[a] = malloc(n * 2);
                for (size_t i = 0; i < n; i++) {
                    float c = h3_round_e4m3((float)(nrm() * 40.0));
                    if (fabsf(c) > 440) c = 0; /* keep amax at the planted 448 */
                    t[a][i] = h3_f32_to_bf16(c * 0x1p-6f);
                }
                for (int h = 0; h < H; h++)
                    for (int g = 0; g < G; g++) {
                        int tok = g * H3_QGROUP + (int)(h3_rng_next(&g_rng) % (uint64_t)(S - g * H3_QGROUP < 128 ? S - g * H3_QGROUP : 128));
                        t[a][(size_t)tok * H * D + h * D + (int)(h3_rng_next(&g_rng) % D)] =
                            h3_f32_to_bf16((h3_rng_next(&g_rng) & 1) ? 7.0f : -7.0f);
                    }
            }
            uint8_t *q8 = malloc(n8), *k8 = malloc(n8), *vt8 = malloc(n8);
            float *sc = malloc((size_t)3 * H * G * 4);
            cpu_quant_fp8(S, H, t[0], t[1], t[2], NULL, 0, NULL, 0, q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G);
            int scale_ok = 1;
            for (int i = 0; i < 3 * H * G; i++) scale_ok &= sc[i] == 0x1p-6f;
            uint16_t *Oe = malloc(n * 2), *Of = malloc(n * 2);
            float *le = malloc((size_t)S * H * 4), *lf = malloc((size_t)S * H * 4);
            cpu_attention_exact(t[0], t[1], t[2], S, H, NULL, S, Oe, le);
            h3t_stats so = {0}, sl = {0};
            static const int kts[] = {16, 32, 64, 128, 192};
            for (int ki = 0; ki < 5; ki++) {
                const int kt = kts[ki];
                cpu_attention_fp8(q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G, NULL, S, H, kt, NULL, 0, NULL, S, Of,
                                  lf);
                /* Both are FP32 evaluations of the same softmax; they differ
                 * by FP32 rounding only (~1e-6 relative, logits up to ~10),
                 * so after each rounds to BF16 they agree to 1 BF16 ulp
                 * (<= 2^-7 |O|) + 1e-5 max|v| (|v| <= 7). */
                for (size_t i = 0; i < n; i++) {
                    double e = h3_bf16_to_f32(Oe[i]);
                    h3t_acc(&so, h3_bf16_to_f32(Of[i]), e, 0x1p-7 * fabs(e) + 7e-5);
                }
                for (int i = 0; i < S * H; i++) h3t_acc(&sl, lf[i], le[i], 1e-5 * (1 + fabs(le[i])));
            }
            char what[128];
            snprintf(what, sizeof what, "lossless S=%d H=%d tiles 16..192 O%s", S, H, scale_ok ? "" : " (SCALES WRONG)");
            if (!scale_ok) g_fail = 1;
            report(what, &so, "(tol: 1 bf16 ulp + FP32 rounding)");
            snprintf(what, sizeof what, "lossless S=%d H=%d tiles 16..192 LSE", S, H);
            report(what, &sl, "(tol: 1e-5 relative)");
            for (int a = 0; a < 3; a++) free(t[a]);
            free(q8); free(k8); free(vt8); free(sc); free(Oe); free(Of); free(le); free(lf);
        }
}

/* Quantised FP8 attention vs exact: reported, with a sanity bound. */
static void test_fp8_error(void)
{
    printf("emulated FP8 attention (quant on) vs exact, reported\n");
    const int S = 1000, H = 3, S_pad = h3_pad_tokens(S), G = h3_groups(S);
    const size_t n = (size_t)S * H * D, n8 = (size_t)H * S_pad * D;
    uint16_t *q = malloc(n * 2), *k = malloc(n * 2), *v = malloc(n * 2), *Oe = malloc(n * 2), *Of = malloc(n * 2);
    uint8_t *q8 = malloc(n8), *k8 = malloc(n8), *vt8 = malloc(n8);
    float *sc = malloc((size_t)3 * H * G * 4);
    for (int stress = 0; stress < 2; stress++) {
        gen_qkv(S, H, stress, q, k, v);
        cpu_quant_fp8(S, H, q, k, v, NULL, 0, NULL, 0, q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G);
        cpu_attention_exact(q, k, v, S, H, NULL, S, Oe, NULL);
        for (int kt = 32; kt <= 128; kt *= 4) {
            cpu_attention_fp8(q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G, NULL, S, H, kt, NULL, 1, NULL, S, Of, NULL);
            errfig e = err_bf16(Of, Oe, n);
            /* Sanity bound: e4m3 has a 2^-4 relative step, so Q, K, V, P each
             * carry ~2-3% relative RMS error; combined they stay well under
             * 10% on N(0,1) (FA3's per-head FP8: 5.4%). Outliers of the
             * stress mix widen the group scales; bound 20% (FA3: 11.1%). */
            const double bound = stress ? 0.20 : 0.10;
            int ok = isfinite(e.rel_rms) && e.rel_rms < bound;
            printf("  %-30s S=%d H=%d tile %3d: rel RMS %.4f  RMSE %.3e  max abs %.3e  (< %.2f) %s\n",
                   stress ? "FA3 stress mix" : "N(0,1)", S, H, kt, e.rel_rms, e.rmse, e.max_abs, bound,
                   ok ? "ok" : "FAIL");
            if (!ok) g_fail = 1;
        }
        /* Q/K rotation: on the stress mix it spreads the outlier channels
         * and must cut the error (rotated / plain measured 0.61-0.69 with
         * tools/attn_error's seeds 1-6 at this size; over 70 of this test's
         * random seeds 0.58-0.77, mean ~0.69, and one draw reached 0.800,
         * which failed the first bound of 0.8: bound 0.9, ~4.5 standard
         * deviations out, still a clear cut); on N(0,1) it changes nothing
         * but the draw of roundings (0.998-1.007: bound 1.05). */
        const double plain = err_bf16(Of, Oe, n).rel_rms; /* tile 128, the last of the loop */
        cpu_quant_fp8(S, H, q, k, v, NULL, 0, NULL, 1, q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G);
        cpu_attention_fp8(q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G, NULL, S, H, 128, NULL, 1, NULL, S, Of, NULL);
        const double rot = err_bf16(Of, Oe, n).rel_rms, rbound = stress ? 0.9 : 1.05;
        const int rok = isfinite(rot) && rot < rbound * plain;
        printf("  %-30s S=%d H=%d Q/K rotated: rel RMS %.4f, %.3f of unrotated (< %.2f) %s\n",
               stress ? "FA3 stress mix" : "N(0,1)", S, H, rot, rot / plain, rbound, rok ? "ok" : "FAIL");
        if (!rok) g_fail = 1;
    }
    /* row sampling of the emulated path returns the same bits */
    int rows[3] = {S - 1, 0, 500};
    uint16_t Os[3 * 3 * D];
    float ls[9], lf_full[3000];
    cpu_attention_fp8(q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G, NULL, S, H, 32, NULL, 1, NULL, S, Of, lf_full);
    cpu_attention_fp8(q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G, NULL, S, H, 32, NULL, 1, rows, 3, Os, ls);
    int same = 1;
    for (int r = 0; r < 3; r++) {
        same &= !memcmp(Os + (size_t)r * H * D, Of + (size_t)rows[r] * H * D, (size_t)H * D * 2);
        for (int h = 0; h < H; h++) same &= ls[h * 3 + r] == lf_full[h * S + rows[r]];
    }
    printf("  %-58s %s\n", "fp8 row sampling == full rows", same ? "ok" : "FAIL");
    if (!same) g_fail = 1;
    /* an invalid key_tile poisons the output instead of aborting */
    cpu_attention_fp8(q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G, NULL, S, H, 48, NULL, 1, rows, 3, Os, ls);
    int poisoned = isnan(h3_bf16_to_f32(Os[0])) && isnan(ls[0]);
    printf("  %-58s %s\n", "key_tile 48 (no divisor of 128, no multiple of 64) -> NaN", poisoned ? "ok" : "FAIL");
    if (!poisoned) g_fail = 1;
    free(q); free(k); free(v); free(Oe); free(Of); free(q8); free(k8); free(vt8); free(sc);
}

/* V smoothing (cpu_ref.h): on V with per-channel means (as a GEMM output
 * has), quantising V less its mean and adding the mean to O must cut the
 * FP8 error against exact attention; and cpu_v_mean must be the mean. */
static void test_v_smoothing(void)
{
    printf("V smoothing: emulated FP8 with and without, vs exact, V with per-channel means\n");
    const int S = 1000, H = 3, S_pad = h3_pad_tokens(S), G = h3_groups(S), I = H * D;
    const size_t n = (size_t)S * I, n8 = (size_t)H * S_pad * D;
    uint16_t *q = malloc(n * 2), *k = malloc(n * 2), *v = malloc(n * 2), *Oe = malloc(n * 2), *Of = malloc(n * 2);
    uint8_t *q8 = malloc(n8), *k8 = malloc(n8), *vt8 = malloc(n8);
    float *sc = malloc((size_t)3 * H * G * 4), *mu = malloc((size_t)I * 4);
    double off[3 * D];
    for (int c = 0; c < I; c++) off[c] = 8.0 * h3_rng_uniform(&g_rng) - 4.0;
    for (size_t i = 0; i < n; i++) {
        q[i] = h3_f32_to_bf16((float)nrm());
        k[i] = h3_f32_to_bf16((float)nrm());
        v[i] = h3_f32_to_bf16((float)(off[i % I] + 0.5 * nrm()));
    }
    cpu_v_mean(v, I, D, S, H, mu);
    double worst = 0.0; /* against a plain double sum */
    for (int c = 0; c < I; c++) {
        double sum = 0.0;
        for (int t = 0; t < S; t++) sum += h3_bf16_to_f32(v[(size_t)t * I + c]);
        const double d = fabs(mu[c] - sum / S) / (fabs(sum / S) + 1e-30);
        if (d > worst) worst = d;
    }
    const int mean_ok = worst <= 0x1p-24;
    printf("  cpu_v_mean vs a plain double mean: worst relative difference %.2e (<= 2^-24) %s\n", worst,
           mean_ok ? "ok" : "FAIL");
    cpu_attention_exact(q, k, v, S, H, NULL, S, Oe, NULL);
    double e[2];
    for (int sm = 0; sm < 2; sm++) {
        cpu_quant_fp8(S, H, q, k, v, NULL, 0, sm ? mu : NULL, 0, q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G);
        cpu_attention_fp8(q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G, sm ? mu : NULL, S, H, 128, NULL, 1, NULL, S, Of,
                          NULL);
        e[sm] = err_bf16(Of, Oe, n).rel_rms;
        printf("  %-12s S=%d H=%d: rel RMS vs exact %.4e\n", sm ? "smoothed" : "not smoothed", S, H, e[sm]);
    }
    /* The mean (|offset| ~2) dominates O; without smoothing e4m3's step acts
     * on |v| ~ 2-4.5, smoothed only on the 0.5-sized rest, and what remains
     * is mostly O's own BF16 rounding (~1.5e-3 here). Measured ratio
     * 0.44-0.46 over seeds 1-6; the bound 0.6 fails if smoothing is lost. */
    const int ok = mean_ok && isfinite(e[1]) && e[1] < 0.6 * e[0];
    printf("  smoothed / not smoothed = %.3f (< 0.6) %s\n", e[1] / e[0], ok ? "ok" : "FAIL");
    if (!ok) g_fail = 1;
    free(q); free(k); free(v); free(Oe); free(Of); free(q8); free(k8); free(vt8); free(sc); free(mu);
}

/* ---- split rows (cpu_attn_split: the Hopper kernel's split CTAs) ---- */

static int split_none(const void *ctx, int h, int i) { return (void)ctx, (void)h, (void)i, 0; }
static int split_all(const void *ctx, int h, int i) { return (void)ctx, (void)h, (void)i, 1; }

/* Sharp rows: per head a direction u shared by q and k (as q/k-norm gains
 * and massive-activation channels make them), q = 1.5 u + N(0,1), k = a u +
 * N(0,1) with a per-key strength a ~ 0.3 N(0,1): logits ~ 5 a' (a' ~
 * N(0,1)) spread over ~30, a few keys carry most of a row. V with
 * per-channel means, as a GEMM output has. */
static void gen_sharp(int S, int H, uint16_t *q, uint16_t *k, uint16_t *v)
{
    const int I = H * D;
    double *u = malloc(sizeof(double) * I), *mv = malloc(sizeof(double) * I);
    for (int c = 0; c < I; c++) u[c] = nrm(), mv[c] = nrm();
    for (int t = 0; t < S; t++)
        for (int h = 0; h < H; h++) {
            const double a = 0.3 * nrm();
            for (int d = 0; d < D; d++) {
                const size_t o = (size_t)t * I + h * D + d;
                q[o] = h3_f32_to_bf16((float)(1.5 * u[h * D + d] + nrm()));
                k[o] = h3_f32_to_bf16((float)(a * u[h * D + d] + nrm()));
                v[o] = h3_f32_to_bf16((float)(mv[h * D + d] + 0.5 * nrm()));
            }
        }
    free(u);
    free(mv);
}

/* Split rows: (a) a description that splits no row (the plain grid's, and a
 * predicate that says no) gives the bytes of split = NULL; (b) with the P
 * rounding off, every row split equals the unsplit emulation up to FP32
 * reassociation (the same softmax, rescaled in another order); (c) with it
 * on, on sharp rows, the split moves O (P8 rounded against each part's own
 * running max: the test is not vacuous) and stays within the contract's
 * bound of exact attention, as the unsplit emulation does; (d) a real plan
 * (sm90_grid.h) on sampled rows splits exactly its split rows: each row has
 * the bytes of the all-split or the unsplit run; (e) a split description
 * with another key tile, or without a predicate, is refused (NaN). */
static void test_split_rows(void)
{
    printf("split rows (the Hopper kernel's split CTAs): three parts of the key tiles, merged\n");
    const int S = 1000, H = 3, S_pad = h3_pad_tokens(S), G = h3_groups(S), I = H * D;
    const size_t n = (size_t)S * I, n8 = (size_t)H * S_pad * D;
    uint16_t *q = malloc(n * 2), *k = malloc(n * 2), *v = malloc(n * 2), *Ox = malloc(n * 2);
    uint16_t *Ou = malloc(n * 2), *Os = malloc(n * 2), *Ot = malloc(n * 2);
    uint8_t *q8 = malloc(n8), *k8 = malloc(n8), *vt8 = malloc(n8);
    float *sc = malloc((size_t)3 * H * G * 4), *mu = malloc((size_t)I * 4);
    float *lu = malloc((size_t)H * S * 4), *ls = malloc((size_t)H * S * 4), *lt = malloc((size_t)H * S * 4);
    gen_sharp(S, H, q, k, v);
    cpu_v_mean(v, I, D, S, H, mu);
    cpu_quant_fp8(S, H, q, k, v, NULL, 0, mu, 0, q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G);
    const float *sq = sc, *sk = sc + H * G, *sv = sc + 2 * H * G;
    const h3_sm90_grid plain = h3_sm90_grid_plan(S, H, 7, 0);
    const cpu_attn_split none = {split_none, NULL}, all = {split_all, NULL}, plain_rows = {h3_sm90_grid_row_split_ctx, &plain};

    /* (a) */
    int same = 1;
    for (int quant = 0; quant < 2; quant++) {
        cpu_attention_fp8(q8, k8, vt8, sq, sk, sv, mu, S, H, 128, NULL, quant, NULL, S, Ou, lu);
        for (int w = 0; w < 2; w++) {
            cpu_attention_fp8(q8, k8, vt8, sq, sk, sv, mu, S, H, 128, w ? &plain_rows : &none, quant, NULL, S, Os, ls);
            same &= !memcmp(Ou, Os, n * 2) && !memcmp(lu, ls, (size_t)H * S * 4);
        }
    }
    printf("  %-58s %s\n", "no split rows == split NULL (bytes, quant 0 and 1)", same ? "ok" : "FAIL");
    if (!same) g_fail = 1;

    /* (b) Both sides evaluate the same softmax in FP32; they differ by a
     * few roundings of p and the rescales (~1e-7 relative), which flip the
     * BF16 rounding of O in rare elements (one ulp, <= 2^-7 |O|), and
     * where O = fma(acc, fin, mu) cancels to near 0 they stay ~1e-7 of
     * acc fin ~ max |O|. Measured rel RMS ~6e-6; bound 1e-4, every element
     * within one BF16 ulp + 1e-6 max |O|, LSE within 1e-5 relative. */
    cpu_attention_fp8(q8, k8, vt8, sq, sk, sv, mu, S, H, 128, NULL, 0, NULL, S, Ou, lu);
    cpu_attention_fp8(q8, k8, vt8, sq, sk, sv, mu, S, H, 128, &all, 0, NULL, S, Os, ls);
    h3t_stats so = {0}, sl = {0};
    double omax = 0.0;
    for (size_t i = 0; i < n; i++) omax = fmax(omax, fabs(h3_bf16_to_f32(Ou[i])));
    for (size_t i = 0; i < n; i++) {
        const double r = h3_bf16_to_f32(Ou[i]);
        h3t_acc(&so, h3_bf16_to_f32(Os[i]), r, 0x1p-7 * fabs(r) + 1e-6 * omax);
    }
    for (int i = 0; i < H * S; i++) h3t_acc(&sl, ls[i], lu[i], 1e-5 * (1 + fabs(lu[i])));
    so.n_bad += !(h3t_rel_rms(&so) <= 1e-4);
    report("quant=0 all rows split vs unsplit O", &so, "(tol: 1 bf16 ulp each, rel RMS <= 1e-4)");
    report("quant=0 all rows split vs unsplit LSE", &sl, "(tol: 1e-5 relative)");

    /* (c) The bound is test_gpu_attention's for model-like data (8%); the
     * split must not cost more than a tenth of the unsplit emulation's
     * error on top (measured: it costs nothing, each part's P8 is rounded
     * against a running max at least as close to its keys). */
    cpu_attention_exact(q, k, v, S, H, NULL, S, Ox, NULL);
    cpu_attention_fp8(q8, k8, vt8, sq, sk, sv, mu, S, H, 128, NULL, 1, NULL, S, Ou, lu);
    cpu_attention_fp8(q8, k8, vt8, sq, sk, sv, mu, S, H, 128, &all, 1, NULL, S, Os, ls);
    const errfig su = err_bf16(Os, Ou, n), ux = err_bf16(Ou, Ox, n), sx = err_bf16(Os, Ox, n);
    double worst = 0.0; /* the (row, head) pair the split moves most */
    for (int i = 0; i < S; i++)
        for (int h = 0; h < H; h++) {
            const size_t o = (size_t)i * I + h * D;
            worst = fmax(worst, err_bf16(Os + o, Ou + o, D).rel_rms);
        }
    const int cok = isfinite(sx.rel_rms) && su.rel_rms > 1e-3 && sx.rel_rms < 0.08 && sx.rel_rms <= 1.1 * ux.rel_rms;
    printf("  quant=1 sharp rows S=%d H=%d: split vs unsplit rel RMS %.3e (> 1e-3), worst (row, head) %.3e, max abs "
           "%.3e; vs exact: split %.4f, unsplit %.4f (< 0.08, split <= 1.1 x unsplit) %s\n",
           S, H, su.rel_rms, worst, su.max_abs, sx.rel_rms, ux.rel_rms, cok ? "ok" : "FAIL");
    if (!cok) g_fail = 1;

    /* (d) */
    const h3_sm90_grid plan = h3_sm90_grid_plan(S, H, 7, 1);
    const cpu_attn_split plan_rows = {h3_sm90_grid_row_split_ctx, &plan};
    int rows[64], nr = 0, nsplit = 0;
    for (int i = 0; i < 64; i++) rows[nr++] = i < 32 ? (int)(h3_rng_uniform(&g_rng) * S) : S - 64 + i;
    cpu_attention_fp8(q8, k8, vt8, sq, sk, sv, mu, S, H, 128, &plan_rows, 1, rows, nr, Ot, lt);
    same = 1;
    for (int r = 0; r < nr; r++)
        for (int h = 0; h < H; h++) {
            const int sp = h3_sm90_grid_row_split(&plan, h, rows[r]);
            const uint16_t *ref = (sp ? Os : Ou) + (size_t)rows[r] * I + h * D;
            nsplit += sp;
            same &= !memcmp(Ot + (size_t)r * I + h * D, ref, D * 2) &&
                    lt[(size_t)h * nr + r] == (sp ? ls : lu)[(size_t)h * S + rows[r]];
        }
    char what[128];
    snprintf(what, sizeof what, "a plan's split rows (%d of %d sampled) as all-split, the rest as unsplit", nsplit,
             nr * H);
    same &= nsplit > 0 && nsplit < nr * H;
    printf("  %-58s %s\n", what, same ? "ok" : "FAIL");
    if (!same) g_fail = 1;

    /* (e) */
    const cpu_attn_split no_pred = {NULL, NULL};
    int refused = cpu_attention_fp8(q8, k8, vt8, sq, sk, sv, mu, S, H, 64, &all, 1, rows, 3, Ot, lt) == -1 &&
                  isnan(h3_bf16_to_f32(Ot[0])) && isnan(lt[0]);
    refused &= cpu_attention_fp8(q8, k8, vt8, sq, sk, sv, mu, S, H, 128, &no_pred, 1, rows, 3, Ot, lt) == -1 &&
               isnan(h3_bf16_to_f32(Ot[0])) && isnan(lt[0]);
    printf("  %-58s %s\n", "split with key_tile 64, or no predicate -> -1, NaN", refused ? "ok" : "FAIL");
    if (!refused) g_fail = 1;
    free(q); free(k); free(v); free(Ox); free(Ou); free(Os); free(Ot); free(q8); free(k8); free(vt8); free(sc);
    free(mu); free(lu); free(ls); free(lt);
}

/* The attention's fast e4m3 rounding equals numerics.h's encoder. */
static void test_round_e4m3(void)
{
    int bad = 0;
    for (int i = 0; i < 2000000; i++) {
        float a;
        if (i < 65536) {
            /* every FP32 pattern around the e4m3 grid: midpoints and neighbours */
            float g = h3_e4m3_to_f32((uint8_t)(i >> 8 & 0x7f));
            a = nextafterf(g, 1000.0f);
            for (int s = 0; s < (i & 7); s++) a = nextafterf(a, 0.0f);
            if (i & 8) a = 0.5f * (g + h3_e4m3_to_f32((uint8_t)((i >> 8 & 0x7f) + 1)));
        } else {
            a = (float)ldexp(h3_rng_uniform(&g_rng), (int)(h3_rng_next(&g_rng) % 22) - 12);
        }
        if (!(a >= 0) || isinf(a) || isnan(a)) continue;
        if (cpu_round_e4m3_pos(a) != h3_round_e4m3(a)) {
            if (bad < 5) printf("    round_e4m3(%a): %a vs %a\n", a, cpu_round_e4m3_pos(a), h3_round_e4m3(a));
            bad++;
        }
    }
    printf("  %-58s %s\n", "fast e4m3 rounding (P tile) == h3_round_e4m3", bad ? "FAIL" : "ok");
    if (bad) g_fail = 1;
}

/* --report: the figures of docs/accuracy.md. */
static void run_report(void)
{
    const int S = 4096, H = 8, S_pad = h3_pad_tokens(S), G = h3_groups(S);
    const size_t n = (size_t)S * H * D, n8 = (size_t)H * S_pad * D;
    uint16_t *q = malloc(n * 2), *k = malloc(n * 2), *v = malloc(n * 2), *Oe = malloc(n * 2), *Of = malloc(n * 2);
    uint8_t *q8 = malloc(n8), *k8 = malloc(n8), *vt8 = malloc(n8);
    float *sc = malloc((size_t)3 * H * G * 4);
    double *ref = malloc(n * 8);
    fp8_ops f;
    fp8_alloc(&f, S, H);
    printf("accuracy report: S = %d, H = %d, D = 128, %d threads\n", S, H, omp_get_max_threads());
    printf("| inputs | path | vs | rel RMS | RMSE | max abs |\n|---|---|---|---|---|---|\n");
    for (int stress = 0; stress < 2; stress++) {
        const char *in = stress ? "FA3 stress mix" : "N(0,1)";
        gen_qkv(S, H, stress, q, k, v);
        from_bf16(&f, q, k, v);
#pragma omp parallel for schedule(dynamic, 8) collapse(2)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < S; i++) {
                double o[D], L;
                ref_row(f.qd, f.kd, f.vd, S, h, i, o, &L, NULL, NULL);
                for (int d = 0; d < D; d++) ref[(size_t)i * H * D + h * D + d] = o[d];
            }
        cpu_quant_fp8(S, H, q, k, v, NULL, 0, NULL, 0, q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G);
        cpu_attention_exact(q, k, v, S, H, NULL, S, Oe, NULL);
        errfig e = err_f64(Oe, ref, n);
        printf("| %s | exact FP32 (BF16 out) | float64 | %.3f%% | %.3e | %.3e |\n", in, 100 * e.rel_rms, e.rmse,
               e.max_abs);
        for (int kt = 32; kt <= 128; kt *= 4) {
            cpu_attention_fp8(q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G, NULL, S, H, kt, NULL, 1, NULL, S, Of, NULL);
            e = err_bf16(Of, Oe, n);
            printf("| %s | emulated FP8, key tile %d | exact FP32 | %.3f%% | %.3e | %.3e |\n", in, kt,
                   100 * e.rel_rms, e.rmse, e.max_abs);
            e = err_f64(Of, ref, n);
            printf("| %s | emulated FP8, key tile %d | float64 | %.3f%% | %.3e | %.3e |\n", in, kt, 100 * e.rel_rms,
                   e.rmse, e.max_abs);
        }
        fflush(stdout);
    }
    fp8_free(&f);
    free(q); free(k); free(v); free(Oe); free(Of); free(q8); free(k8); free(vt8); free(sc); free(ref);
}

int main(int argc, char **argv)
{
    const uint64_t seed = h3t_seed("test_cpu_attention");
    g_rng.s = seed;
    if (argc > 1 && !strcmp(argv[1], "--report")) {
        run_report();
        return 0;
    }
    test_round_e4m3();
    test_adversarial();
    test_exact_random();
    test_lossless();
    test_fp8_error();
    test_v_smoothing();
    test_split_rows();
    printf("test_cpu_attention: %s\n", g_fail ? "FAILED" : "passed");
    return g_fail;
}
