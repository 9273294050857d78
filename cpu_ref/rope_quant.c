/* rope_quant.c — stage qk_norm_rope_quant: per-head q/k RMSNorm, BF16
 * rounding, H3 RoPE, and FP8 quantisation of Q, K, V (DESIGN.md §1 step 4, §3).
 *
 * Numerics (cpu_ref.h): t = bf16(x * rsqrt(mean_d(x^2) + eps) * w[d]); RoPE in
 * FP32 on t with f[d] = pos[d/16] * omega[d%16] (float product, d < 48, and
 * f[d] = f[d-48] above), cosf/sinf of the FP32 angle, rounded to BF16.
 * Quantisation per (head, 128-token group): s = amax/448 (1 for an all-zero
 * group, whose codes are 0 anyway), code = e4m3_satfinite_rne(x * (448/amax)).
 * Q/K rotation (rot_qk, config.h): each q and k token vector goes through
 * cpu_rotate_qk before the amax and the codes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "cpu_ref.h"

void cpu_rope_omega(const h3_config *cfg, float *omega) { h3_rope_omega(cfg, omega); }

/* Norm + RoPE of one head vector x [D] (bf16) -> y [D] bf16. */
static void norm_rope_head(const h3_config *cfg, const uint16_t *x, const uint16_t *w, const float *f, uint16_t *y)
{
    const int D = cfg->head_dim, R = cfg->rope_dims, half = R / 2;
    float t[256]; /* [D] normed, BF16-rounded; D = 128 (validated) */
    float ss = 0.0f;
    for (int d = 0; d < D; d++) {
        float v = h3_bf16_to_f32(x[d]);
        ss += v * v;
    }
    const float rs = 1.0f / sqrtf(ss / (float)D + cfg->eps);
    for (int d = 0; d < D; d++) t[d] = h3_round_bf16(h3_bf16_to_f32(x[d]) * rs * h3_bf16_to_f32(w[d]));
    for (int d = 0; d < half; d++) {
        const float c = cosf(f[d]), s = sinf(f[d]);
        y[d] = h3_f32_to_bf16(t[d] * c - t[d + half] * s);
        y[d + half] = h3_f32_to_bf16(t[d + half] * c + t[d] * s);
    }
    for (int d = R; d < D; d++) y[d] = h3_f32_to_bf16(t[d]);
}

void cpu_qk_norm_rope_row(const h3_config *cfg, const uint16_t *qkv_row, const float *pos3, const float *omega,
                          const uint16_t *qw, const uint16_t *kw, uint16_t *q, uint16_t *k, uint16_t *v)
{
    const int H = cfg->heads, D = cfg->head_dim, nf = cfg->rope_freqs, half = cfg->rope_dims / 2;
    float f[128]; /* [rope_dims / 2] angles (t, h, w axes x nf frequencies) */
    for (int d = 0; d < half; d++) f[d] = pos3[d / nf] * omega[d % nf];
    for (int h = 0; h < H; h++) {
        const uint16_t *src = qkv_row + (size_t)h * 3 * D; /* [3][D] bf16: q_h, k_h, v_h */
        norm_rope_head(cfg, src, qw, f, q + (size_t)h * D);
        norm_rope_head(cfg, src + D, kw, f, k + (size_t)h * D);
        memcpy(v + (size_t)h * D, src + 2 * D, (size_t)D * sizeof(uint16_t));
    }
}

void cpu_qk_norm_rope(const h3_config *cfg, const uint16_t *qkv, const float *pos, const uint16_t *qw,
                      const uint16_t *kw, int S, const int *rows, int nrows, uint16_t *q, uint16_t *k, uint16_t *v)
{
    (void)S;
    const size_t I = (size_t)h3_attn_width(cfg), W3 = (size_t)h3_qkv_width(cfg);
    float omega[64];
    cpu_rope_omega(cfg, omega);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < nrows; r++) {
        const int s = cpu_row(rows, r);
        cpu_qk_norm_rope_row(cfg, qkv + (size_t)s * W3, pos + (size_t)s * 3, omega, qw, kw, q + r * I, k + r * I,
                             v + r * I);
    }
}

void cpu_rotate_qk(float *x)
{
    for (int d = 0; d < 128; d++)
        if (h3_rot_flips(d)) x[d] = -x[d];
    for (int len = 1; len < 128; len *= 2) /* the stage of dim bit log2(len) */
        for (int i = 0; i < 128; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                const float a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
    for (int d = 0; d < 128; d++) x[d] = h3_round_bf16(x[d] * H3_ROT_SCALE);
}

float cpu_quant_group(const uint16_t *x, int n, int H, int h, int g, int S_pad, int vt, int rot, const float *mu_h,
                      uint8_t *codes_h)
{
    const int D = 128;
    const size_t ld = (size_t)H * D;
    /* The values quantised, [128 tokens][D]: the BF16 input, less V's mean
     * when smoothing (one FP32 subtraction, as the GPU does it), rotated when
     * rot (q and k); padding tokens 0. On the stack (64 KB): no allocation
     * that could fail in the middle of the block. */
    float t[H3_QGROUP * 128];
    float amax = 0.0f;
    for (int i = 0; i < H3_QGROUP; i++) {
        float *ti = t + (size_t)i * D;
        for (int d = 0; d < D; d++) {
            const float v = i < n ? h3_bf16_to_f32(x[i * ld + (size_t)h * D + d]) : 0.0f;
            ti[d] = mu_h && i < n ? v - mu_h[d] : v;
        }
        if (rot && i < n) cpu_rotate_qk(ti);
        if (i < n)
            for (int d = 0; d < D; d++) amax = fmaxf(amax, fabsf(ti[d]));
    }
    /* amax == 0: every value is 0, so any finite multiplier gives code 0; use
     * scale 1 instead of 448/0 = inf (0 * inf would be NaN). */
    const float inv = amax > 0.0f ? H3_E4M3_MAX / amax : 1.0f;
    const float scale = amax > 0.0f ? amax / H3_E4M3_MAX : 1.0f;
    const int base = g * H3_QGROUP;
    if (!vt) {
        uint8_t *dst = codes_h + (size_t)base * D; /* [128][D] of [S_pad][D] */
        for (int i = 0; i < H3_QGROUP; i++)
            for (int d = 0; d < D; d++) dst[i * D + d] = i < n ? h3_f32_to_e4m3(t[(size_t)i * D + d] * inv) : 0;
    } else {
        /* vt[d][p] holds key h3_v_slot_key(p): the 16-key permutation that lets
         * the GPU feed P from the QK^T accumulator straight into the PV MMA. */
        for (int p = 0; p < H3_QGROUP; p++) {
            const int i = h3_v_slot_key(base + p) - base; /* key within the group */
            for (int d = 0; d < D; d++)
                codes_h[(size_t)d * S_pad + base + p] = i < n ? h3_f32_to_e4m3(t[(size_t)i * D + d] * inv) : 0;
        }
    }
    return scale;
}

void cpu_quant_fp8(int S, int H, const uint16_t *q, const uint16_t *k, const uint16_t *v, const int *groups,
                   int ngroups, const float *vmu, int rot_qk, uint8_t *q8, uint8_t *k8, uint8_t *vt8, float *sq,
                   float *sk, float *sv)
{
    const int D = 128, S_pad = h3_pad_tokens(S), G = h3_groups(S);
    if (!groups) ngroups = G;
    const size_t I = (size_t)H * D, plane = (size_t)S_pad * D;
#pragma omp parallel for schedule(dynamic, 1) collapse(2)
    for (int gi = 0; gi < ngroups; gi++) {
        for (int h = 0; h < H; h++) {
            const int g = groups ? groups[gi] : gi;
            const int n = S - g * H3_QGROUP < H3_QGROUP ? S - g * H3_QGROUP : H3_QGROUP;
            const size_t off = (size_t)g * H3_QGROUP * I;
            sq[h * G + g] = cpu_quant_group(q + off, n, H, h, g, S_pad, 0, rot_qk, NULL, q8 + h * plane);
            sk[h * G + g] = cpu_quant_group(k + off, n, H, h, g, S_pad, 0, rot_qk, NULL, k8 + h * plane);
            sv[h * G + g] =
                cpu_quant_group(v + off, n, H, h, g, S_pad, 1, 0, vmu ? vmu + h * D : NULL, vt8 + h * plane);
        }
    }
}

int cpu_qk_norm_rope_quant_groups(const h3_config *cfg, const uint16_t *qkv, const float *pos, const uint16_t *qw,
                                  const uint16_t *kw, int S, int g0, int g1, const float *vmu, int rot_qk, uint8_t *q8,
                                  uint8_t *k8, uint8_t *vt8, float *sq, float *sk, float *sv)
{
    const int H = cfg->heads, D = cfg->head_dim, S_pad = h3_pad_tokens(S), G = h3_groups(S);
    const size_t I = (size_t)H * D, W3 = (size_t)h3_qkv_width(cfg), plane = (size_t)S_pad * D;
    float omega[64];
    cpu_rope_omega(cfg, omega);
    int oom = 0;
#pragma omp parallel
    {
        uint16_t *tq = malloc(3 * H3_QGROUP * I * sizeof(uint16_t)); /* [3][128][I] bf16: q, k, v of one group */
        uint16_t *tk = tq + H3_QGROUP * I, *tv = tk + H3_QGROUP * I;
#pragma omp for schedule(dynamic, 1)
        for (int g = g0; g < g1; g++) {
            if (!tq) { /* out of memory: NaN scales, so nothing downstream passes */
#pragma omp atomic write
                oom = 1;
                for (int h = 0; h < H; h++) sq[h * G + g] = sk[h * G + g] = sv[h * G + g] = NAN;
                continue;
            }
            const int n = S - g * H3_QGROUP < H3_QGROUP ? S - g * H3_QGROUP : H3_QGROUP;
            for (int i = 0; i < n; i++) {
                const size_t s = (size_t)g * H3_QGROUP + i; /* token */
                cpu_qk_norm_rope_row(cfg, qkv + (s - (size_t)g0 * H3_QGROUP) * W3, pos + s * 3, omega, qw, kw,
                                     tq + i * I, tk + i * I, tv + i * I);
            }
            for (int h = 0; h < H; h++) {
                sq[h * G + g] = cpu_quant_group(tq, n, H, h, g, S_pad, 0, rot_qk, NULL, q8 + h * plane);
                sk[h * G + g] = cpu_quant_group(tk, n, H, h, g, S_pad, 0, rot_qk, NULL, k8 + h * plane);
                sv[h * G + g] = cpu_quant_group(tv, n, H, h, g, S_pad, 1, 0, vmu ? vmu + h * D : NULL, vt8 + h * plane);
            }
        }
        free(tq);
    }
    return oom ? -1 : 0;
}

int cpu_qk_norm_rope_quant(const h3_config *cfg, const uint16_t *qkv, const float *pos, const uint16_t *qw,
                           const uint16_t *kw, int S, const float *vmu, int rot_qk, uint8_t *q8, uint8_t *k8,
                           uint8_t *vt8, float *sq, float *sk, float *sv)
{
    return cpu_qk_norm_rope_quant_groups(cfg, qkv, pos, qw, kw, S, 0, h3_groups(S), vmu, rot_qk, q8, k8, vt8, sq, sk,
                                         sv);
}

void cpu_v_mean(const uint16_t *v, long ld, int stride_h, int S, int H, float *mu)
{
    const int D = 128, C = H * D;
    double *part = calloc((size_t)H3_VMEAN_LANES * C, sizeof(double)); /* [lane][C] */
    if (!part) { /* library code does not abort: a NaN mean fails every check downstream */
        fprintf(stderr, "cpu_v_mean: out of memory\n");
        for (int c = 0; c < C; c++) mu[c] = NAN;
        return;
    }
    /* One lane per thread, its tokens in order, rows read contiguously. */
#pragma omp parallel for schedule(static)
    for (int w = 0; w < H3_VMEAN_LANES; w++)
        for (int s = w; s < S; s += H3_VMEAN_LANES)
            for (int c = 0; c < C; c++)
                part[(size_t)w * C + c] += (double)h3_bf16_to_f32(v[(size_t)s * ld + (size_t)(c / D) * stride_h + c % D]);
    for (int c = 0; c < C; c++) {
        double sum = 0.0;
        for (int w = 0; w < H3_VMEAN_LANES; w++) sum += part[(size_t)w * C + c];
        mu[c] = (float)(sum / (double)S);
    }
    free(part);
}
