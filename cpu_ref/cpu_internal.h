/* cpu_internal.h — helpers shared by the cpu_ref/ stage files (not part of the API).
 *
 * Row mapping, silu, the fast e4m3 rounding used in the attention inner loop,
 * and the per-head / per-group pieces that cpu_block_forward drives directly
 * so that it can chunk its work and report progress. */
#ifndef H3_CPU_INTERNAL_H
#define H3_CPU_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "cpu_ref.h"
#include "numerics.h"

/* Output row r belongs to token rows[r] (rows == NULL: token r). */
static inline int cpu_row(const int *rows, int r) { return rows ? rows[r] : r; }

/* silu(x) = x * sigmoid(x) = x / (1 + e^-x) in FP32; e^-x = inf for very
 * negative x gives -0, the right limit. */
static inline float cpu_silu(float x) { return x / (1.0f + expf(-x)); }

/* D^-0.5 * log2(e) for D = 128, the base-2 softmax scale, computed in double
 * and rounded once to FP32 (the GPU uses the same constant). */
#define CPU_ATTN_SCALE_LOG2E ((float)(0.08838834764831845 * 1.4426950408889634))
#define CPU_LN2 0.69314718055994531f

/* Round a non-negative finite float to the nearest e4m3 value (RNE,
 * satfinite), staying in float: the same result as h3_round_e4m3 for a >= 0,
 * without frexp/ldexp, for the attention's P tile. Normal range (a >= 2^-6):
 * keep 3 mantissa bits by RNE on the FP32 bit pattern; subnormal range: the
 * grid is 2^-9, and adding 2^14 (whose FP32 ulp is 2^-9) rounds to it by RNE. */
static inline float cpu_round_e4m3_pos(float a)
{
    if (a >= 0.015625f) {
        uint32_t u = h3_f32_bits(a);
        u += 0x7ffffu + ((u >> 20) & 1u);
        u &= ~0xfffffu;
        float r = h3_bits_f32(u);
        return r > H3_E4M3_MAX ? H3_E4M3_MAX : r;
    }
    return (a + 16384.0f) - 16384.0f; /* not folded: no -ffast-math */
}

/* qk_norm_rope for one token: qkv_row [3*H*D] bf16 grouped -> q, k, v [H*D]
 * bf16. omega [rope_freqs]. */
void cpu_qk_norm_rope_row(const h3_config *cfg, const uint16_t *qkv_row, const float *pos3, const float *omega,
                          const uint16_t *qw, const uint16_t *kw, uint16_t *q, uint16_t *k, uint16_t *v);

/* Quantise one (head h, group g) of one tensor. x points at token 128g of a
 * [n][H*D] bf16 array (n = valid tokens of the group, <= 128); writes the
 * group's 128 padded tokens: direct layout codes8 [S_pad][D] of head h (vt = 0)
 * or transposed+permuted [D][S_pad] (vt = 1). mu_h [D] (NULL: none): the
 * values quantised are x - mu_h[d] (V smoothing). rot: each token's vector
 * goes through cpu_rotate_qk first (Q/K rotation; not with vt or mu_h).
 * Returns the scale. */
float cpu_quant_group(const uint16_t *x, int n, int H, int h, int g, int S_pad, int vt, int rot, const float *mu_h,
                      uint8_t *codes_h);

/* qk_norm_rope + quantisation of groups g0..g1-1. qkv points at token 128*g0
 * ([(min(S,128 g1) - 128 g0)][3*H*D] bf16, the chunk's rows). 0, or -1 out
 * of memory (those groups' scales are NaN). */
int cpu_qk_norm_rope_quant_groups(const h3_config *cfg, const uint16_t *qkv, const float *pos, const uint16_t *qw,
                                  const uint16_t *kw, int S, int g0, int g1, const float *vmu, int rot_qk, uint8_t *q8,
                                  uint8_t *k8, uint8_t *vt8, float *sq, float *sk, float *sv);

/* Key tiles the emulation supports: a divisor of 128 (one scale group per
 * tile), or a multiple of 64 (each 64-key chunk in one group: the wide sm90
 * kernel's 192). */
static inline int cpu_key_tile_ok(int key_tile)
{
    return key_tile > 0 && (H3_QGROUP % key_tile == 0 || key_tile % 64 == 0);
}

/* Attention of one head h for the given rows (parallel over rows inside).
 * 0, or -1 out of memory (the head's rows are NaN). */
int cpu_attention_fp8_head(const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq,
                           const float *sk, const float *sv, const float *vmu, int S, int H, int h, int key_tile,
                           const cpu_attn_split *split, int quant, const int *rows, int nrows, uint16_t *O,
                           float *lse);
int cpu_attention_exact_head(const uint16_t *q, const uint16_t *k, const uint16_t *v, int S, int H, int h,
                             const int *rows, int nrows, uint16_t *O, float *lse);

#endif
