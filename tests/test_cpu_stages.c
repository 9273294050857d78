/* test_cpu_stages.c — every non-attention stage of the CPU reference against a
 * float64 implementation written here, layout checks (grouped QKV, FP8 code
 * layout and V permutation), hand-computed RoPE, and cpu_block_forward equal
 * to the composition of the stage functions.
 *
 * Run alone:   ctest --test-dir build -R test_cpu_stages --output-on-failure
 *   or         build/tests/test_cpu_stages              (H3_TEST_SEED=n fixes the inputs)
 * GEMM timing (2048 x 5376 x 5376, not a test): build/tests/test_cpu_stages --bench-gemm
 *
 * Tolerances: an output rounded once to BF16 is within half a BF16 ulp
 * (<= 2^-8 relative) of its FP32 value, so we allow 2^-8 |ref|, plus the FP32
 * accumulation error of the stage before rounding (n terms summed: gamma_n ~
 * n 2^-24 times the sum of the terms' magnitudes). Per stage below. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "cpu_ref.h"
#include "numerics.h"
#include "rng.h"
#include "test_stats.h"

static int g_fail = 0;
static h3_rng g_rng;
#define U 0x1p-24 /* FP32 unit roundoff */
#define B 0x1p-8  /* BF16 half-ulp bound, relative */

static void report(const char *what, const h3t_stats *s)
{
    int ok = s->n_bad == 0 && s->nonfinite == 0;
    printf("  %-52s max abs %.3e  rel RMS %.3e  %s\n", what, s->max_abs, h3t_rel_rms(s),
           ok ? "ok" : "FAIL");
    if (!ok) {
        printf("    %.0f of %.0f over tolerance, %d non-finite\n", s->n_bad, s->n + s->nonfinite, s->nonfinite);
        g_fail = 1;
    }
}
static void expect(const char *what, int ok)
{
    printf("  %-52s %s\n", what, ok ? "ok" : "FAIL");
    if (!ok) g_fail = 1;
}
static double nrm(void) { return h3_rng_normal(&g_rng); }
static double bf(uint16_t h) { return h3_bf16_to_f32(h); }
static uint16_t *rand_bf16(size_t n, double sigma, double mean)
{
    uint16_t *p = malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++) p[i] = h3_f32_to_bf16((float)(mean + sigma * nrm()));
    return p;
}
static int32_t *rand_tags(int S, int M)
{
    int32_t *t = malloc((size_t)S * 4);
    for (int s = 0; s < S; s++) t[s] = (int32_t)(h3_rng_next(&g_rng) % (uint64_t)M);
    return t;
}
static double silu64(double x) { return x / (1 + exp(-x)); }
static const int SIZES[] = {1, 2, 63, 65, 113, 1000};
#define NSIZES 6

/* Row sample: a few rows incl. first, last, middle (compact outputs). */
static int sample_rows(int S, int *rows)
{
    int n = 0;
    rows[n++] = S - 1;
    if (S > 1) rows[n++] = 0;
    if (S > 2) rows[n++] = S / 2;
    if (S > 3) rows[n++] = S / 3;
    return n;
}

/* ---- adaln: mod = W silu(temb) + b; T-term FP32 dot + silu (a few ulps) ---- */
static void test_adaln(void)
{
    h3_config c = h3_config_tiny();
    for (int v = 0; v < 2; v++) {
        if (v) c.temb = 40, c.hidden = 136;
        const int T = c.temb, R = h3_mod_width(&c);
        float *temb = malloc((size_t)T * 4);
        for (int k = 0; k < T; k++) temb[k] = (float)(3 * nrm());
        uint16_t *W = rand_bf16((size_t)R * T, 0.2, 0), *b = rand_bf16((size_t)R, 0.5, 0), *mod = malloc((size_t)R * 2);
        cpu_adaln(&c, temb, W, b, mod);
        h3t_stats s = {0};
        for (int j = 0; j < R; j++) {
            double sum = bf(b[j]), mag = fabs(bf(b[j]));
            for (int k = 0; k < T; k++) {
                double t = bf(W[(size_t)j * T + k]) * silu64(temb[k]);
                sum += t;
                mag += fabs(t);
            }
            h3t_acc(&s, bf(mod[j]), sum, B * fabs(sum) + (T + 8) * U * mag);
        }
        char w[96];
        snprintf(w, sizeof w, "adaln T=%d C=%d (%d rows)", T, c.hidden, R);
        report(w, &s);
        free(temb); free(W); free(b); free(mod);
    }
}

/* ---- rmsnorm_mod: C-term FP32 sum of squares, then 4 ops ---- */
static void test_rmsnorm_mod(void)
{
    const int Cs[2] = {256, 136};
    for (int ci = 0; ci < 2; ci++)
        for (int si = 0; si < NSIZES; si++) {
            const int S = SIZES[si], C = Cs[ci], M = 3;
            uint16_t *x = rand_bf16((size_t)S * C, 2, 0.3), *w = rand_bf16(C, 0.3, 1),
                     *mod = rand_bf16((size_t)M * 6 * C, 0.5, 0), *out = malloc((size_t)S * C * 2),
                     *outs = malloc((size_t)4 * C * 2);
            int32_t *tags = rand_tags(S, M);
            const int sh = H3_SLOT_SHIFT_MLP, sc = H3_SLOT_SCALE_MLP;
            cpu_rmsnorm_mod(x, w, mod, tags, S, C, 1e-5f, sh, sc, NULL, S, out);
            h3t_stats s = {0};
            for (int r = 0; r < S; r++) {
                double ss = 0;
                for (int k = 0; k < C; k++) ss += bf(x[(size_t)r * C + k]) * bf(x[(size_t)r * C + k]);
                double rs = 1 / sqrt(ss / C + 1e-5);
                for (int k = 0; k < C; k++) {
                    const uint16_t *m = mod + (size_t)tags[r] * 6 * C;
                    double t = bf(x[(size_t)r * C + k]) * rs * bf(w[k]) * (1 + bf(m[sc * C + k]));
                    double ref = t + bf(m[sh * C + k]);
                    h3t_acc(&s, bf(out[(size_t)r * C + k]), ref, B * fabs(ref) + (C + 8) * U * (fabs(t) + fabs(ref)));
                }
            }
            int rows[4], nr = sample_rows(S, rows);
            cpu_rmsnorm_mod(x, w, mod, tags, S, C, 1e-5f, sh, sc, rows, nr, outs);
            int same = 1;
            for (int r = 0; r < nr; r++) same &= !memcmp(outs + (size_t)r * C, out + (size_t)rows[r] * C, C * 2);
            char wd[96];
            snprintf(wd, sizeof wd, "rmsnorm_mod S=%d C=%d%s", S, C, same ? "" : " (ROW SAMPLING DIFFERS)");
            if (!same) g_fail = 1;
            report(wd, &s);
            free(x); free(w); free(mod); free(out); free(outs); free(tags);
        }
}

/* ---- gemm: K-term FP32 dot, tolerance 2^-8|ref| + K 2^-24 sum|x w| ---- */
static void test_gemm(void)
{
    const int NK[][2] = {{37, 130}, {300, 1}, {16, 513}, {768, 256}, {17, 7}};
    for (int si = 0; si < NSIZES; si++)
        for (int p = 0; p < 5; p++) {
            const int S = SIZES[si], N = NK[p][0], K = NK[p][1];
            if (S == 1000 && N * K > 100000) continue; /* keep the float64 reference quick */
            uint16_t *x = rand_bf16((size_t)S * K, 1, 0), *W = rand_bf16((size_t)N * K, 0.1, 0),
                     *y = malloc((size_t)S * N * 2), *ys = malloc((size_t)4 * N * 2);
            cpu_gemm_bf16(x, W, S, N, K, NULL, S, y);
            h3t_stats s = {0};
            for (int r = 0; r < S; r++)
                for (int n = 0; n < N; n++) {
                    double sum = 0, mag = 0;
                    for (int k = 0; k < K; k++) {
                        double t = bf(x[(size_t)r * K + k]) * bf(W[(size_t)n * K + k]);
                        sum += t;
                        mag += fabs(t);
                    }
                    h3t_acc(&s, bf(y[(size_t)r * N + n]), sum, B * fabs(sum) + K * U * mag);
                }
            int rows[4], nr = sample_rows(S, rows);
            cpu_gemm_bf16(x, W, S, N, K, rows, nr, ys);
            int same = 1;
            for (int r = 0; r < nr; r++) same &= !memcmp(ys + (size_t)r * N, y + (size_t)rows[r] * N, (size_t)N * 2);
            char wd[96];
            snprintf(wd, sizeof wd, "gemm S=%d N=%d K=%d%s", S, N, K, same ? "" : " (ROW SAMPLING DIFFERS)");
            if (!same) g_fail = 1;
            report(wd, &s);
            free(x); free(W); free(y); free(ys);
        }
}

/* ---- qk_norm_rope vs float64: t = bf16(norm) as the contract rounds it,
 * RoPE in double. Tolerance per output: 2^-8 |ref| (output rounding) + the
 * BF16 rounding of t may land one ulp apart from the double one (one ulp <=
 * 2^-7 |t|: 2^-7 (|t_d| + |t_pair|)) + the FP32 angle error (|f| 2^-22, f up to ~200) ---- */
static void test_qk_norm_rope(void)
{
    for (int H = 1; H <= 3; H += 2)
        for (int si = 0; si < NSIZES; si++) {
            h3_config c = h3_config_tiny();
            c.heads = H;
            const int S = SIZES[si], D = 128, I = H * D, W3 = 3 * I;
            uint16_t *qkv = rand_bf16((size_t)S * W3, 1.5, 0.1), *qw = rand_bf16(D, 0.2, 1), *kw = rand_bf16(D, 0.2, 1);
            float *pos = malloc((size_t)S * 12);
            for (int s = 0; s < S; s++) {
                pos[3 * s] = (float)(h3_rng_next(&g_rng) % 200);
                pos[3 * s + 1] = (float)(h3_rng_uniform(&g_rng) * 40);
                pos[3 * s + 2] = (float)(h3_rng_uniform(&g_rng) * 60);
            }
            uint16_t *q = malloc((size_t)S * I * 2), *k = malloc((size_t)S * I * 2), *v = malloc((size_t)S * I * 2);
            cpu_qk_norm_rope(&c, qkv, pos, qw, kw, S, NULL, S, q, k, v);
            h3t_stats s = {0};
            int vsame = 1;
            for (int r = 0; r < S; r++)
                for (int h = 0; h < H; h++)
                    for (int part = 0; part < 2; part++) {
                        const uint16_t *x = qkv + (size_t)r * W3 + h * 384 + part * 128, *w = part ? kw : qw;
                        const uint16_t *got = (part ? k : q) + (size_t)r * I + h * D;
                        double ss = 0, t[128];
                        for (int d = 0; d < D; d++) ss += bf(x[d]) * bf(x[d]);
                        double rs = 1 / sqrt(ss / D + 1e-5);
                        for (int d = 0; d < D; d++) t[d] = h3_round_bf16((float)(bf(x[d]) * rs * bf(w[d])));
                        for (int d = 0; d < 96; d++) {
                            int dd = d % 48, axis = dd / 16, j = dd % 16;
                            double f = pos[3 * r + axis] * pow(10000.0, -j / 16.0);
                            double ref = d < 48 ? t[d] * cos(f) - t[d + 48] * sin(f) : t[d] * cos(f) + t[d - 48] * sin(f);
                            double pair = t[d < 48 ? d + 48 : d - 48];
                            h3t_acc(&s, bf(got[d]), ref, B * fabs(ref) + (2 * B + fabs(f) * 0x1p-22 + 0x1p-22) * (fabs(t[d]) + fabs(pair)));
                        }
                        for (int d = 96; d < D; d++) h3t_acc(&s, bf(got[d]), t[d], 2 * B * fabs(t[d]));
                    }
            for (int r = 0; r < S; r++)
                for (int h = 0; h < H; h++)
                    vsame &= !memcmp(v + (size_t)r * I + h * D, qkv + (size_t)r * W3 + h * 384 + 256, 256);
            int rows[4], nr = sample_rows(S, rows);
            uint16_t *qs = malloc((size_t)nr * I * 2), *ks = malloc((size_t)nr * I * 2), *vs = malloc((size_t)nr * I * 2);
            cpu_qk_norm_rope(&c, qkv, pos, qw, kw, S, rows, nr, qs, ks, vs);
            int same = 1;
            for (int r = 0; r < nr; r++) {
                same &= !memcmp(qs + (size_t)r * I, q + (size_t)rows[r] * I, (size_t)I * 2);
                same &= !memcmp(ks + (size_t)r * I, k + (size_t)rows[r] * I, (size_t)I * 2);
                same &= !memcmp(vs + (size_t)r * I, v + (size_t)rows[r] * I, (size_t)I * 2);
            }
            char wd[120];
            snprintf(wd, sizeof wd, "qk_norm_rope S=%d H=%d%s%s", S, H, vsame ? "" : " (V NOT COPIED)",
                     same ? "" : " (ROW SAMPLING DIFFERS)");
            if (!vsame || !same) g_fail = 1;
            report(wd, &s);
            free(qkv); free(qw); free(kw); free(pos); free(q); free(k); free(v); free(qs); free(ks); free(vs);
        }
}

/* ---- RoPE at known positions, values worked out here: x = 1 on every dim,
 * w = 1 on dims 0..47 and 96..127, 0.5 on 48..95, so after the norm t = 1
 * and 0.5 exactly (rsqrt(1 + 1e-5) rounds to 1 in BF16), and
 * y[d] = cos f - 0.5 sin f, y[d+48] = 0.5 cos f + sin f. ---- */
static void test_rope_known(void)
{
    h3_config c = h3_config_tiny();
    c.heads = 1;
    const int W3 = 384;
    uint16_t qkv[3 * 384], qw[128], q[128], k[128], v[128];
    for (int i = 0; i < 3 * W3; i++) qkv[i] = h3_f32_to_bf16(1.0f);
    for (int d = 0; d < 128; d++) qw[d] = h3_f32_to_bf16(d >= 48 && d < 96 ? 0.5f : 1.0f);
    /* positions (t, h, w) and dims: d = 0 (t axis, omega 1), 17 (h axis,
     * omega 10000^-1/16 = 0.5623413), 40 (w axis, omega 10000^-8/16 = 0.01),
     * 47 (w axis, omega 10000^-15/16) */
    const float P[3][3] = {{0, 0, 0}, {5, 3, 7}, {120, 17.5f, 0.25f}};
    const int dims[4] = {0, 17, 40, 47};
    const double omega[4] = {1.0, 0.56234132519034908, 0.01, 1.7782794100389228e-4};
    h3t_stats s = {0};
    for (int pi = 0; pi < 3; pi++) {
        cpu_qk_norm_rope(&c, qkv, P[pi], qw, qw, 1, NULL, 1, q, k, v);
        for (int di = 0; di < 4; di++) {
            const int d = dims[di];
            const double f = P[pi][d / 16] * omega[di];
            const double y0 = cos(f) - 0.5 * sin(f), y1 = 0.5 * cos(f) + sin(f);
            /* 1 BF16 rounding + FP32 angle error (|f| <= 120: 120 * 2^-23) */
            h3t_acc(&s, bf(q[d]), y0, B * fabs(y0) + 2e-5);
            h3t_acc(&s, bf(q[d + 48]), y1, B * fabs(y1) + 2e-5);
            h3t_acc(&s, bf(k[d]), y0, B * fabs(y0) + 2e-5);
        }
        for (int d = 96; d < 128; d++) h3t_acc(&s, bf(q[d]), 1.0, 0);
    }
    report("rope at known (t,h,w) positions, dims 0 17 40 47 (+48)", &s);
    float om[16];
    cpu_rope_omega(&c, om);
    expect("cpu_rope_omega == 10000^(-j/16)", fabs(om[1] - omega[1]) < 1e-7 && fabs(om[8] - 0.01) < 1e-9 &&
                                                  fabs(om[15] - omega[3]) < 1e-11 && om[0] == 1.0f);
}

/* ---- grouped QKV layout: W has one non-zero row per (head, part), the
 * output lands exactly at that head's q/k/v slot and nowhere else ---- */
static void test_qkv_layout(void)
{
    h3_config c = h3_config_tiny();
    c.heads = 3;
    const int C = c.hidden, H = 3, I = H * 128, W3 = 3 * I, S = 5;
    uint16_t *W = calloc((size_t)W3 * C, 2), *x = calloc((size_t)S * C, 2), *qkv = malloc((size_t)S * W3 * 2);
    uint16_t *q = malloc((size_t)S * I * 2), *k = malloc((size_t)S * I * 2), *v = malloc((size_t)S * I * 2);
    uint16_t ones[128];
    float pos[15] = {0};
    for (int d = 0; d < 128; d++) ones[d] = h3_f32_to_bf16(1.0f);
    for (int s = 0; s < S; s++) x[(size_t)s * C + 7] = h3_f32_to_bf16((float)(s + 1)); /* token s: value s+1 in column 7 */
    int want_row[3][3], want_d[3][3];
    for (int h = 0; h < H; h++)
        for (int part = 0; part < 3; part++) {
            want_d[h][part] = part == 2 ? 5 + 11 * h + 3 * part : 100 + 9 * h + part; /* q, k: pass-through dims */
            want_row[h][part] = 384 * h + 128 * part + want_d[h][part];
            W[(size_t)want_row[h][part] * C + 7] = h3_f32_to_bf16(part == 2 ? 1.0f + h : 1.0f);
        }
    cpu_gemm_bf16(x, W, S, W3, C, NULL, S, qkv);
    cpu_qk_norm_rope(&c, qkv, pos, ones, ones, S, NULL, S, q, k, v);
    int ok = 1;
    for (int s = 0; s < S; s++)
        for (int h = 0; h < H; h++)
            for (int part = 0; part < 3; part++) {
                const uint16_t *o = (part == 0 ? q : part == 1 ? k : v) + (size_t)s * I + h * 128;
                for (int d = 0; d < 128; d++) {
                    /* q, k: a single non-zero x normalises to sign * sqrt(128 / (1 + 128 eps/x^2)) */
                    double xv = s + 1.0;
                    double want = d != want_d[h][part] ? 0
                                  : part == 2          ? xv * (1 + h)
                                                       : h3_round_bf16((float)(xv / sqrt(xv * xv / 128 + 1e-5)));
                    if (bf(o[d]) != want) ok = 0;
                }
            }
    expect("grouped QKV layout: q_h, k_h, v_h at rows 384h + {0,128,256}", ok);
    free(W); free(x); free(qkv); free(q); free(k); free(v);
}

/* ---- quant_fp8: codes exact against numerics.h's encoder ---- */
static const int KEY_OF_SLOT[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
static void test_quant(void)
{
    int perm_ok = 1;
    for (int s = 0; s < 256; s++) {
        perm_ok &= h3_v_slot_key(s) == (s & ~15) + KEY_OF_SLOT[s & 15];
        perm_ok &= h3_v_key_slot(h3_v_slot_key(s)) == s;
    }
    expect("V permutation table (slot -> key 0,1,8,9,2,3,10,11,...)", perm_ok);
    for (int H = 1; H <= 3; H += 2)
        for (int si = 0; si < NSIZES; si++) {
            const int S = SIZES[si], D = 128, I = H * D, S_pad = h3_pad_tokens(S), G = h3_groups(S);
            const size_t n = (size_t)S * I, n8 = (size_t)H * S_pad * D;
            uint16_t *t[3];
            for (int a = 0; a < 3; a++) {
                t[a] = malloc(n * 2);
                for (int s = 0; s < S; s++) {
                    double mag = exp(3 * nrm()); /* per-token magnitudes spread e^+-9 */
                    for (int i = 0; i < I; i++) t[a][(size_t)s * I + i] = h3_f32_to_bf16((float)(mag * nrm()));
                }
            }
            /* head H-1, group 0 of K all zero: scale 1, codes 0 */
            for (int s = 0; s < (S < 128 ? S : 128); s++)
                for (int d = 0; d < D; d++) t[1][(size_t)s * I + (H - 1) * D + d] = 0;
            uint8_t *c8[3];
            for (int a = 0; a < 3; a++) c8[a] = malloc(n8), memset(c8[a], 0xAA, n8);
            float *sc = malloc((size_t)3 * H * G * 4);
            cpu_quant_fp8(S, H, t[0], t[1], t[2], NULL, 0, NULL, 0, c8[0], c8[1], c8[2], sc, sc + H * G, sc + 2 * H * G);
            int codes_ok = 1, scales_ok = 1, pad_ok = 1, sat_ok = 1;
            for (int a = 0; a < 3; a++)
                for (int h = 0; h < H; h++)
                    for (int g = 0; g < G; g++) {
                        float amax = 0;
                        for (int s = g * 128; s < S && s < g * 128 + 128; s++)
                            for (int d = 0; d < D; d++) amax = fmaxf(amax, fabsf((float)bf(t[a][(size_t)s * I + h * D + d])));
                        const float want_s = amax > 0 ? amax / 448.0f : 1.0f;
                        scales_ok &= sc[(size_t)a * H * G + h * G + g] == want_s;
                        for (int p = g * 128; p < g * 128 + 128; p++)
                            for (int d = 0; d < D; d++) {
                                /* token p in direct layout; in V's layout slot p holds key_of_slot(p) */
                                int tok = a == 2 ? (p & ~15) + KEY_OF_SLOT[p & 15] : p;
                                uint8_t got = a == 2 ? c8[a][(size_t)h * S_pad * D + (size_t)d * S_pad + p]
                                                     : c8[a][(size_t)h * S_pad * D + (size_t)p * D + d];
                                if (tok >= S) {
                                    pad_ok &= got == 0;
                                    continue;
                                }
                                float xv = (float)bf(t[a][(size_t)tok * I + h * D + d]);
                                uint8_t want = amax > 0 ? h3_f32_to_e4m3(xv * (448.0f / amax)) : 0;
                                codes_ok &= got == want;
                                if (fabsf(xv) == amax && amax > 0) sat_ok &= (got & 0x7f) == 0x7e; /* +-448 */
                            }
                    }
            /* the all-zero group */
            scales_ok &= sc[(size_t)H * G + (H - 1) * G] == 1.0f;
            char wd[120];
            snprintf(wd, sizeof wd, "quant_fp8 S=%d H=%d: scales, codes, amax->448, padding", S, H);
            expect(wd, codes_ok && scales_ok && pad_ok && sat_ok);
            if (!(codes_ok && scales_ok && pad_ok && sat_ok))
                printf("    codes %d scales %d padding %d amax %d\n", codes_ok, scales_ok, pad_ok, sat_ok);
            /* explicit V permutation for group 0, head 0, dim 3: slot 2 holds key 8 */
            if (S > 8) {
                float am = 0; /* amax of V, head 0, group 0 */
                for (int s = 0; s < (S < 128 ? S : 128); s++)
                    for (int d = 0; d < D; d++) am = fmaxf(am, fabsf((float)bf(t[2][(size_t)s * I + d])));
                const uint8_t *row3 = c8[2] + (size_t)3 * S_pad; /* vt8[0][3][.] */
                int ok = row3[2] == h3_f32_to_e4m3((float)bf(t[2][(size_t)8 * I + 3]) * (448.0f / am)) &&
                         row3[4] == h3_f32_to_e4m3((float)bf(t[2][(size_t)2 * I + 3]) * (448.0f / am));
                expect("  vt8[0][3][slot 2] = key 8, [slot 4] = key 2", ok);
            }
            /* groups subset: only group G-1 recomputed, others untouched */
            uint8_t *d8 = malloc(3 * n8); /* q8, k8, vt8 */
            memset(d8, 0xAA, 3 * n8);
            float *sc2 = malloc((size_t)3 * H * G * 4);
            for (int i = 0; i < 3 * H * G; i++) sc2[i] = -1;
            int grp = G - 1;
            cpu_quant_fp8(S, H, t[0], t[1], t[2], &grp, 1, NULL, 0, d8, d8 + n8, d8 + 2 * n8, sc2, sc2 + H * G, sc2 + 2 * H * G);
            int sub_ok = 1;
            for (int h = 0; h < H; h++)
                for (int g = 0; g < G; g++) {
                    sub_ok &= (g == grp) ? sc2[h * G + g] == sc[h * G + g] : sc2[h * G + g] == -1;
                    for (int p = g * 128; p < g * 128 + 128 && g != grp; p++)
                        for (int a = 0; a < 3; a++)
                            sub_ok &= d8[a * n8 + (size_t)h * S_pad * D + (a == 2 ? (size_t)p : (size_t)p * D)] == 0xAA;
                }
            expect("  groups subset leaves other groups untouched", sub_ok);
            free(d8); free(sc2);
            for (int a = 0; a < 3; a++) free(t[a]), free(c8[a]);
            free(sc);
        }
}

/* ---- Q/K rotation (config.h): the butterflies against the Hadamard matrix
 * written as H[i][j] = (-1)^popcount(i & j) / sqrt(128) in float64; then
 * cpu_quant_fp8's rot_qk == quantising the rotated q, k without it. ---- */
static void test_rotate(void)
{
    int nneg = 0;
    for (int d = 0; d < 128; d++) nneg += h3_rot_flips(d);
    expect("rotation signs: both signs present", nneg > 16 && nneg < 112);
    h3t_stats st = {0};
    double worst_dot = 0.0;
    for (int trial = 0; trial < 200; trial++) {
        float x[128], y[128], xk[128], yk[128];
        double sabs = 0.0;
        for (int d = 0; d < 128; d++) {
            double v = nrm();
            if (trial % 4 == 1 && d == trial % 128) v *= 50.0; /* an outlier channel */
            if (trial % 4 == 2) v = d == trial % 128 ? 3.0 : 0.0; /* a unit-like vector */
            x[d] = y[d] = (float)bf(h3_f32_to_bf16((float)v));
            xk[d] = yk[d] = (float)bf(h3_f32_to_bf16((float)nrm()));
            sabs += fabs(x[d]);
        }
        cpu_rotate_qk(y);
        cpu_rotate_qk(yk);
        double dx = 0.0, dy = 0.0, nx = 0.0, nk = 0.0;
        for (int i = 0; i < 128; i++) {
            double ref = 0.0;
            for (int j = 0; j < 128; j++) {
                const double sgn = h3_rot_flips(j) ? -1.0 : 1.0;
                ref += (__builtin_popcount((unsigned)(i & j)) & 1 ? -1.0 : 1.0) * sgn * x[j];
            }
            ref /= sqrt(128.0);
            /* one BF16 rounding of the result, 7 FP32 butterfly stages and
             * the scaling multiply before it */
            h3t_acc(&st, y[i], ref, B * fabs(ref) + 9 * U * sabs);
            dx += (double)x[i] * xk[i];
            dy += (double)y[i] * yk[i];
            nx += (double)x[i] * x[i];
            nk += (double)xk[i] * xk[i];
        }
        /* QK^T is kept up to the BF16 rounding of the 2 x 128 rotated values */
        const double e = fabs(dy - dx) / sqrt(nx * nk);
        if (e > worst_dot) worst_dot = e;
    }
    report("cpu_rotate_qk vs the Hadamard matrix (float64)", &st);
    char wd[120];
    snprintf(wd, sizeof wd, "rotation keeps q.k: worst |dq.k| / (|q||k|) %.2e (<= 2^-7)", worst_dot);
    expect(wd, worst_dot <= 0x1p-7);
    for (int H = 1; H <= 3; H += 2)
        for (int si = 0; si < NSIZES; si++) {
            const int S = SIZES[si], I = H * 128, S_pad = h3_pad_tokens(S), G = h3_groups(S);
            const size_t n = (size_t)S * I, n8 = (size_t)H * S_pad * 128;
            uint16_t *t[3], *r[2];
            for (int a = 0; a < 3; a++) t[a] = rand_bf16(n, 1, 0);
            for (int s = 0; s < S; s++) t[0][(size_t)s * I + 7] = h3_f32_to_bf16(40.0f); /* q's outlier channel */
            for (int a = 0; a < 2; a++) { /* q, k rotated token by token, as BF16 */
                r[a] = malloc(n * 2);
                for (size_t row = 0; row < (size_t)S * H; row++) {
                    float v[128];
                    for (int d = 0; d < 128; d++) v[d] = (float)bf(t[a][row * 128 + d]);
                    cpu_rotate_qk(v);
                    for (int d = 0; d < 128; d++) r[a][row * 128 + d] = h3_f32_to_bf16(v[d]);
                }
            }
            uint8_t *a8 = malloc(3 * n8), *b8 = malloc(3 * n8), *c8 = malloc(3 * n8);
            float *sa = malloc((size_t)3 * H * G * 4), *sb = malloc((size_t)3 * H * G * 4), *sc = malloc((size_t)3 * H * G * 4);
            cpu_quant_fp8(S, H, t[0], t[1], t[2], NULL, 0, NULL, 1, a8, a8 + n8, a8 + 2 * n8, sa, sa + H * G, sa + 2 * H * G);
            cpu_quant_fp8(S, H, r[0], r[1], t[2], NULL, 0, NULL, 0, b8, b8 + n8, b8 + 2 * n8, sb, sb + H * G, sb + 2 * H * G);
            cpu_quant_fp8(S, H, t[0], t[1], t[2], NULL, 0, NULL, 0, c8, c8 + n8, c8 + 2 * n8, sc, sc + H * G, sc + 2 * H * G);
            /* the outlier channel: rotation must shrink q's group amax (about 40 -> 40 / sqrt(128) + noise) */
            int shrunk = 1;
            for (int h = 0; h < H; h++)
                for (int g = 0; g < G; g++) shrunk &= h > 0 || sa[g] < 0.5f * sc[g];
            snprintf(wd, sizeof wd, "quant_fp8 rot_qk == quant of rotated q, k; outlier spread, S=%d H=%d", S, H);
            expect(wd, !memcmp(a8, b8, 3 * n8) && !memcmp(sa, sb, (size_t)3 * H * G * 4) && shrunk);
            for (int a = 0; a < 3; a++) free(t[a]);
            free(r[0]); free(r[1]); free(a8); free(b8); free(c8); free(sa); free(sb); free(sc);
        }
}

/* ---- fused qk_norm_rope_quant == qk_norm_rope then quant_fp8 ---- */
static void test_fused_quant(void)
{
    for (int H = 1; H <= 3; H += 2)
        for (int si = 0; si < NSIZES; si++) {
            h3_config c = h3_config_tiny();
            c.heads = H;
            const int S = SIZES[si], I = H * 128, S_pad = h3_pad_tokens(S), G = h3_groups(S);
            const size_t n8 = (size_t)H * S_pad * 128;
            uint16_t *qkv = rand_bf16((size_t)S * 3 * I, 1, 0), *qw = rand_bf16(128, 0.2, 1), *kw = rand_bf16(128, 0.2, 1);
            float *pos = malloc((size_t)S * 12);
            for (int i = 0; i < 3 * S; i++) pos[i] = (float)(h3_rng_uniform(&g_rng) * 50);
            uint16_t *q = malloc((size_t)S * I * 2), *k = malloc((size_t)S * I * 2), *v = malloc((size_t)S * I * 2);
            uint8_t *a8 = malloc(3 * n8), *b8 = malloc(3 * n8);
            float *sa = malloc((size_t)3 * H * G * 4), *sb = malloc((size_t)3 * H * G * 4);
            cpu_qk_norm_rope(&c, qkv, pos, qw, kw, S, NULL, S, q, k, v);
            for (int rot = 0; rot < 2; rot++) {
                cpu_quant_fp8(S, H, q, k, v, NULL, 0, NULL, rot, a8, a8 + n8, a8 + 2 * n8, sa, sa + H * G, sa + 2 * H * G);
                cpu_qk_norm_rope_quant(&c, qkv, pos, qw, kw, S, NULL, rot, b8, b8 + n8, b8 + 2 * n8, sb, sb + H * G,
                                       sb + 2 * H * G);
                char wd[96];
                snprintf(wd, sizeof wd, "qk_norm_rope_quant == rope + quant, S=%d H=%d%s", S, H, rot ? " rot_qk" : "");
                expect(wd, !memcmp(a8, b8, 3 * n8) && !memcmp(sa, sb, (size_t)3 * H * G * 4));
            }
            free(qkv); free(qw); free(kw); free(pos); free(q); free(k); free(v); free(a8); free(b8); free(sa); free(sb);
        }
}

/* ---- gate_residual (one FMA: 2 roundings) and swiglu (expf, a division,
 * a product: ~8 ulps) ---- */
static void test_residual_swiglu(void)
{
    for (int si = 0; si < NSIZES; si++) {
        const int S = SIZES[si], C = 136, F = 200, M = 3;
        uint16_t *x = rand_bf16((size_t)S * C, 1, 0), *y = rand_bf16((size_t)S * C, 2, 0),
                 *mod = rand_bf16((size_t)M * 6 * C, 0.7, 0), *out = malloc((size_t)S * C * 2),
                 *outs = malloc((size_t)4 * C * 2);
        int32_t *tags = rand_tags(S, M);
        cpu_gate_residual(x, y, mod, tags, S, C, H3_SLOT_GATE_MSA, NULL, S, out);
        h3t_stats s = {0};
        for (int r = 0; r < S; r++)
            for (int c = 0; c < C; c++) {
                double gy = bf(mod[((size_t)tags[r] * 6 + H3_SLOT_GATE_MSA) * C + c]) * bf(y[(size_t)r * C + c]);
                double ref = bf(x[(size_t)r * C + c]) + gy;
                h3t_acc(&s, bf(out[(size_t)r * C + c]), ref, B * fabs(ref) + 2 * U * (fabs(gy) + fabs(ref)));
            }
        int rows[4], nr = sample_rows(S, rows), same = 1;
        cpu_gate_residual(x, y, mod, tags, S, C, H3_SLOT_GATE_MSA, rows, nr, outs);
        for (int r = 0; r < nr; r++) same &= !memcmp(outs + (size_t)r * C, out + (size_t)rows[r] * C, C * 2);
        char wd[96];
        snprintf(wd, sizeof wd, "gate_residual S=%d C=%d%s", S, C, same ? "" : " (ROW SAMPLING DIFFERS)");
        if (!same) g_fail = 1;
        report(wd, &s);

        uint16_t *g = rand_bf16((size_t)S * 2 * F, 3, 0), *u = malloc((size_t)S * F * 2), *us = malloc((size_t)4 * F * 2);
        g[0] = h3_f32_to_bf16(-120.0f); /* e^120 overflows FP32: silu must give -0, not NaN */
        cpu_swiglu(g, S, F, NULL, S, u);
        h3t_stats s2 = {0};
        for (int r = 0; r < S; r++)
            for (int f = 0; f < F; f++) {
                double ref = silu64(bf(g[(size_t)r * 2 * F + f])) * bf(g[(size_t)r * 2 * F + F + f]);
                h3t_acc(&s2, bf(u[(size_t)r * F + f]), ref, B * fabs(ref) + 8 * U * fabs(ref) + 1e-37);
            }
        cpu_swiglu(g, S, F, rows, nr, us);
        same = 1;
        for (int r = 0; r < nr; r++) same &= !memcmp(us + (size_t)r * F, u + (size_t)rows[r] * F, F * 2);
        snprintf(wd, sizeof wd, "swiglu S=%d F=%d%s", S, F, same ? "" : " (ROW SAMPLING DIFFERS)");
        if (!same) g_fail = 1;
        report(wd, &s2);
        free(x); free(y); free(mod); free(out); free(outs); free(tags); free(g); free(u); free(us);
    }
}

/* ---- FP8 GEMM mode: quant_rows against its definition, gemm_fp8 against
 * an FP64 sum of the decoded codes (bound: the BF16 half ulp, K U of the
 * summed magnitudes for the FP32 sum, and the two scale multiplies) ---- */
static void test_fp8_gemm(void)
{
    const int S = 37, N = 45, K = 200;
    uint16_t *x = rand_bf16((size_t)S * K, 2, 0), *W = rand_bf16((size_t)N * K, 0.05, 0);
    memset(x + K, 0, (size_t)K * 2); /* row 1 all zero: scale 1, codes 0 */
    x[2 * K] = h3_f32_to_bf16(3.0e38f); /* a huge element: the row's scale follows it */
    uint8_t *x8 = malloc((size_t)S * K), *w8 = malloc((size_t)N * K);
    float *sx = malloc(sizeof(float) * S), *sw = malloc(sizeof(float) * N);
    cpu_quant_rows_e4m3(x, S, K, x8, sx);
    cpu_quant_rows_e4m3(W, N, K, w8, sw);
    int ok = 1;
    for (int r = 0; r < S; r++) {
        float amax = 0;
        for (int k = 0; k < K; k++) amax = fmaxf(amax, (float)fabs(bf(x[(size_t)r * K + k])));
        ok &= sx[r] == (amax > 0 ? amax / 448.0f : 1.0f);
        for (int k = 0; k < K; k++)
            ok &= x8[(size_t)r * K + k] == h3_f32_to_e4m3(bf(x[(size_t)r * K + k]) * (amax > 0 ? 448.0f / amax : 1.0f));
    }
    for (int k = 0; k < K; k++) ok &= x8[K + k] == 0;
    expect("quant_rows_e4m3 == its definition (zero row, huge element)", ok && sx[1] == 1.0f);
    uint16_t *y = malloc((size_t)S * N * 2);
    cpu_gemm_fp8(x8, sx, w8, sw, S, N, K, NULL, S, y);
    int rows[3] = {0, 5, S - 1};
    uint16_t *ys = malloc((size_t)3 * N * 2);
    cpu_gemm_fp8(x8, sx, w8, sw, S, N, K, rows, 3, ys);
    h3t_stats st = {0};
    for (int r = 0; r < S; r++)
        for (int n = 0; n < N; n++) {
            double d = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double t = (double)h3_e4m3_to_f32(x8[(size_t)r * K + k]) * h3_e4m3_to_f32(w8[(size_t)n * K + k]);
                d += t;
                mag += fabs(t);
            }
            const double sc = (double)sx[r] * sw[n], ref = d * sc;
            /* BF16 rounding, the FP32 sum (K U of the magnitudes), two scale roundings */
            h3t_acc(&st, bf(y[(size_t)r * N + n]), ref, B * fabs(ref) + K * U * mag * sc + 4 * U * fabs(ref) + 1e-37);
        }
    int same = 1;
    for (int i = 0; i < 3; i++) same &= !memcmp(ys + (size_t)i * N, y + (size_t)rows[i] * N, (size_t)N * 2);
    char wd[96];
    snprintf(wd, sizeof wd, "gemm_fp8 S=%d N=%d K=%d%s", S, N, K, same ? "" : " (ROW SAMPLING DIFFERS)");
    if (!same) g_fail = 1;
    report(wd, &st);
    free(x); free(W); free(x8); free(w8); free(sx); free(sw); free(y); free(ys);
}

/* The block-scaled FP8 GEMM (cpu_gemm_fp8_blocks, fp8_error --scales blocks):
 * the quantiser against its definition per (brows x 128) block, ragged last
 * blocks in both directions, an all-zero block; the GEMM against the same
 * sum in double of each code times its block's scale. */
static void test_fp8_gemm_blocks(void)
{
    const int S = 9, N = 150, K = 300; /* K: 2 full column blocks and a ragged one; N: 128 + 22 rows */
    uint16_t *x = rand_bf16((size_t)S * K, 2, 0), *W = rand_bf16((size_t)N * K, 0.05, 0);
    for (int k = 128; k < 256; k++) x[3 * K + k] = 0; /* row 3, column block 1: scale 1, codes 0 */
    W[140 * K + 290] = h3_f32_to_bf16(40.0f);         /* an outlier: only its 128x128 (ragged) block follows it */
    const int nb = (K + 127) / 128;
    uint8_t *x8 = malloc((size_t)S * K), *w8 = malloc((size_t)N * K);
    float *sx = malloc(sizeof(float) * S * nb), *sw = malloc(sizeof(float) * 2 * nb);
    cpu_quant_blocks_e4m3(x, S, K, 1, x8, sx);
    cpu_quant_blocks_e4m3(W, N, K, 128, w8, sw);
    int ok = 1;
    for (int pass = 0; pass < 2; pass++) {
        const uint16_t *a = pass ? W : x;
        const uint8_t *a8 = pass ? w8 : x8;
        const float *as = pass ? sw : sx;
        const int rows = pass ? N : S, br = pass ? 128 : 1;
        for (int b = 0; b * br < rows; b++)
            for (int kb = 0; kb < nb; kb++) {
                float amax = 0;
                for (int r = b * br; r < rows && r < (b + 1) * br; r++)
                    for (int k = kb * 128; k < K && k < kb * 128 + 128; k++)
                        amax = fmaxf(amax, (float)fabs(bf(a[(size_t)r * K + k])));
                ok &= as[b * nb + kb] == (amax > 0 ? amax / 448.0f : 1.0f);
                for (int r = b * br; r < rows && r < (b + 1) * br; r++)
                    for (int k = kb * 128; k < K && k < kb * 128 + 128; k++)
                        ok &= a8[(size_t)r * K + k] ==
                              h3_f32_to_e4m3(bf(a[(size_t)r * K + k]) * (amax > 0 ? 448.0f / amax : 1.0f));
            }
    }
    expect("quant_blocks_e4m3 == its definition (1x128 and 128x128 blocks, ragged, a zero block)",
           ok && sx[3 * nb + 1] == 1.0f && sw[nb + 2] == 40.0f / 448.0f && sw[2] != sw[nb + 2]);
    uint16_t *y = malloc((size_t)S * N * 2);
    cpu_gemm_fp8_blocks(x8, sx, 1, w8, sw, 128, S, N, K, NULL, S, y);
    h3t_stats st = {0};
    for (int r = 0; r < S; r++)
        for (int n = 0; n < N; n++) {
            double d = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                const double t = (double)h3_e4m3_to_f32(x8[(size_t)r * K + k]) * sx[r * nb + k / 128] *
                                 h3_e4m3_to_f32(w8[(size_t)n * K + k]) * sw[(n / 128) * nb + k / 128];
                d += t;
                mag += fabs(t);
            }
            /* BF16 rounding, the FP32 sum, each dequantised operand rounded to FP32 */
            h3t_acc(&st, bf(y[(size_t)r * N + n]), d, B * fabs(d) + (K + 2) * U * mag + 1e-37);
        }
    char wd[96];
    snprintf(wd, sizeof wd, "gemm_fp8_blocks S=%d N=%d K=%d", S, N, K);
    report(wd, &st);
    free(x); free(W); free(x8); free(w8); free(sx); free(sw); free(y);
}

/* y = x W^T through the FP8 GEMM mode: both quantised per row, then gemm_fp8. */
static void chain_gemm(int fp8, const uint16_t *x, const uint16_t *W, int S, int N, int K, uint16_t *y)
{
    if (!fp8) {
        cpu_gemm_bf16(x, W, S, N, K, NULL, S, y);
        return;
    }
    uint8_t *x8 = malloc((size_t)S * K), *w8 = malloc((size_t)N * K);
    float *sx = malloc(sizeof(float) * S), *sw = malloc(sizeof(float) * N);
    cpu_quant_rows_e4m3(x, S, K, x8, sx);
    cpu_quant_rows_e4m3(W, N, K, w8, sw);
    cpu_gemm_fp8(x8, sx, w8, sw, S, N, K, NULL, S, y);
    free(x8); free(w8); free(sx); free(sw);
}

/* ---- cpu_block_forward(_fp8) == the stage chain written out here ---- */
static void test_block(void)
{
    h3_config c = h3_config_tiny();
    const int S = 65, C = c.hidden, H = c.heads, I = h3_attn_width(&c), W3 = h3_qkv_width(&c), F = c.ffn,
              T = c.temb, MW = h3_mod_width(&c), S_pad = h3_pad_tokens(S), G = h3_groups(S);
    h3_tensor_spec sp[H3_T_COUNT];
    h3_tensor_specs(&c, sp);
    cpu_block_weights wt;
    uint16_t *wbuf[H3_T_COUNT];
    for (int t = 0; t < H3_T_COUNT; t++) {
        size_t n = sp[t].rank == 1 ? (size_t)sp[t].shape[0] : (size_t)(sp[t].shape[0] * sp[t].shape[1]);
        int vec = sp[t].rank == 1;
        double fan = sp[t].rank == 2 ? (double)sp[t].shape[1] : 1;
        wbuf[t] = rand_bf16(n, vec ? 0.1 : 1 / sqrt(fan), vec && t != H3_T_ADALN_B ? 1 : 0);
        wt.w[t] = wbuf[t];
    }
    uint16_t *x = rand_bf16((size_t)S * C, 1, 0);
    float temb[64], *pos = malloc((size_t)S * 12);
    for (int i = 0; i < T; i++) temb[i] = (float)nrm();
    for (int i = 0; i < 3 * S; i++) pos[i] = (float)(h3_rng_uniform(&g_rng) * 30);
    int32_t *tags = rand_tags(S, c.modalities);
    for (int mode = 0; mode < 3; mode++) { /* 0 emulated FP8 attention, 1 exact attention, 2 + FP8 GEMMs */
        const int exact = mode == 1, fp8 = mode == 2;
        uint16_t *out = malloc((size_t)S * C * 2);
        cpu_block_stats st;
        const int rc = fp8 ? cpu_block_forward_fp8(&c, &wt, S, x, temb, tags, pos, 32, CPU_FP8_ALL, 0, out, &st)
                           : cpu_block_forward(&c, &wt, S, x, temb, tags, pos, 32, exact, 0, out, &st);
        const double *ms = st.ms;
        /* the chain, stage by stage */
        uint16_t *mod = malloc((size_t)MW * 2), *a = malloc((size_t)S * C * 2), *qkv = malloc((size_t)S * W3 * 2),
                 *o = malloc((size_t)S * I * 2), *y = malloc((size_t)S * C * 2), *x1 = malloc((size_t)S * C * 2),
                 *g = malloc((size_t)S * 2 * F * 2), *u = malloc((size_t)S * F * 2), *ref = malloc((size_t)S * C * 2);
        cpu_adaln(&c, temb, wt.w[H3_T_ADALN_W], wt.w[H3_T_ADALN_B], mod);
        cpu_rmsnorm_mod(x, wt.w[H3_T_NORM1], mod, tags, S, C, c.eps, H3_SLOT_SHIFT_MSA, H3_SLOT_SCALE_MSA, NULL, S, a);
        chain_gemm(fp8, a, wt.w[H3_T_QKV], S, W3, C, qkv);
        if (exact) {
            uint16_t *q = malloc((size_t)S * I * 2), *k = malloc((size_t)S * I * 2), *v = malloc((size_t)S * I * 2);
            cpu_qk_norm_rope(&c, qkv, pos, wt.w[H3_T_QNORM], wt.w[H3_T_KNORM], S, NULL, S, q, k, v);
            cpu_attention_exact(q, k, v, S, H, NULL, S, o, NULL);
            free(q); free(k); free(v);
        } else {
            const size_t n8 = (size_t)H * S_pad * 128;
            uint8_t *q8 = malloc(3 * n8);
            float *sc = malloc((size_t)3 * H * G * 4);
            cpu_qk_norm_rope_quant(&c, qkv, pos, wt.w[H3_T_QNORM], wt.w[H3_T_KNORM], S, NULL, 0, q8, q8 + n8, q8 + 2 * n8, sc,
                                   sc + H * G, sc + 2 * H * G);
            cpu_attention_fp8(q8, q8 + n8, q8 + 2 * n8, sc, sc + H * G, sc + 2 * H * G, NULL, S, H, 32, NULL, 1, NULL,
                              S, o, NULL);
            free(q8); free(sc);
        }
        chain_gemm(fp8, o, wt.w[H3_T_OUT], S, C, I, y);
        cpu_gate_residual(x, y, mod, tags, S, C, H3_SLOT_GATE_MSA, NULL, S, x1);
        cpu_rmsnorm_mod(x1, wt.w[H3_T_NORM2], mod, tags, S, C, c.eps, H3_SLOT_SHIFT_MLP, H3_SLOT_SCALE_MLP, NULL, S, a);
        chain_gemm(fp8, a, wt.w[H3_T_FC1], S, 2 * F, C, g);
        cpu_swiglu(g, S, F, NULL, S, u);
        chain_gemm(fp8, u, wt.w[H3_T_FC2], S, C, F, y);
        cpu_gate_residual(x1, y, mod, tags, S, C, H3_SLOT_GATE_MLP, NULL, S, ref);
        int finite = 1;
        double msum = 0;
        for (size_t i = 0; i < (size_t)S * C; i++) finite &= isfinite(bf(out[i]));
        for (int s = 0; s < H3_STAGE_COUNT; s++) msum += ms[s] >= 0 ? ms[s] : -1e9;
        char wd[96];
        const char *mname = exact ? "exact" : fp8 ? "fp8 tile 32, fp8 GEMMs" : "fp8 tile 32";
        snprintf(wd, sizeof wd, "block_forward S=%d (%s) finite, no stage reported non-finite", S, mname);
        expect(wd, rc == 0 && finite && msum >= 0 && st.first_nonfinite == -1);
        snprintf(wd, sizeof wd, "block_forward S=%d (%s) == stage chain, bitwise", S, mname);
        expect(wd, !memcmp(out, ref, (size_t)S * C * 2));
        free(out); free(mod); free(a); free(qkv); free(o); free(y); free(x1); free(g); free(u); free(ref);
    }
    for (int t = 0; t < H3_T_COUNT; t++) free(wbuf[t]);
    free(x); free(pos); free(tags);
}

static void bench_gemm(void)
{
    const int M = 2048, N = 5376, K = 5376;
    uint16_t *x = rand_bf16((size_t)M * K, 1, 0), *W = rand_bf16((size_t)N * K, 0.02, 0), *y = malloc((size_t)M * N * 2);
    cpu_gemm_bf16(x, W, 96, 256, K, NULL, 96, y); /* warm-up */
    double t = omp_get_wtime();
    cpu_gemm_bf16(x, W, M, N, K, NULL, M, y);
    t = omp_get_wtime() - t;
    printf("cpu_gemm_bf16 %d x %d x %d, %d threads: %.3f s, %.1f GFLOPS\n", M, N, K, omp_get_max_threads(), t,
           2.0 * M * N * K / t * 1e-9);
    free(x); free(W); free(y);
}

int main(int argc, char **argv)
{
    const uint64_t seed = h3t_seed("test_cpu_stages");
    g_rng.s = seed;
    if (argc > 1 && !strcmp(argv[1], "--bench-gemm")) {
        bench_gemm();
        return 0;
    }
    test_adaln();
    test_rmsnorm_mod();
    test_gemm();
    test_qk_norm_rope();
    test_rope_known();
    test_qkv_layout();
    test_quant();
    test_rotate();
    test_fused_quant();
    test_residual_swiglu();
    test_fp8_gemm();
    test_fp8_gemm_blocks();
    test_block();
    printf("test_cpu_stages: %s\n", g_fail ? "FAILED" : "passed");
    return g_fail;
}
