/* cpu_ref.h — the OpenMP FP32 reference of every H3 block stage (DESIGN.md §1-§3, §5).
 *
 * Ground truth for the GPU path. Plain C + OpenMP, FP32 arithmetic on BF16
 * inputs, same argument order as the GPU launcher each function checks
 * (kernels/kernels.h). Never includes CUDA headers or kernels/.
 *
 * Row sampling: functions that take (rows, nrows) compute only those output
 * rows (tokens). rows == NULL means every row 0..S-1 (then nrows must be S).
 * Inputs are always full-size; outputs are compact: output row r belongs to
 * token rows[r]. Attention for a sampled query row still uses every key.
 *
 * Exact semantics (the GPU kernels implement the same):
 *   adaln        mod[j] = bf16(sum_k W[j][k] * silu(temb[k]) + b[j]), silu in FP32
 *   rmsnorm_mod  out = bf16(x * rsqrt(mean(x^2) + eps) * w * (1 + scale[tag]) + shift[tag])
 *   gemm         y[r][n] = bf16(sum_k x[r][k] * W[n][k])           (y = x W^T)
 *   gemm_fp8     y[r][n] = bf16((sum_k e4m3(x8[r][k]) e4m3(W8[n][k])) * (sx[r] * sw[n]))
 *   quant_rows   per row: s = amax / 448 (1 if 0), code = e4m3(x * (448 / amax))
 *   qk_norm_rope q, k of head h (grouped layout: qkv[s][384h + {0,128,256} + d]):
 *                t = bf16(x * rsqrt(mean_d(x^2) + eps) * w[d]), then RoPE on
 *                dims 0..95 in FP32 and rounding to BF16; dims 96..127 pass.
 *                omega_j = (float)pow(theta, -j / rope_freqs), j < 16;
 *                f[d] = pos[d / 16] * omega_{d % 16} (float product) for d < 48,
 *                f[d] = f[d - 48] for 48 <= d < 96; NeoX halves:
 *                y[d] = t[d] cos f[d] - t[d+48] sin f[d]   (d < 48)
 *                y[d] = t[d] cos f[d] + t[d-48] sin f[d]   (48 <= d < 96)
 *   quant_fp8    per (head, 128-token group g): amax over the group's valid
 *                tokens and all 128 dims; s = amax / 448 (1 if amax == 0);
 *                code = e4m3_satfinite_rne(x * (448 / amax)) (0 for padding).
 *                q8, k8: [H][S_pad][128]; vt8: [H][128][S_pad] with
 *                vt8[h][d][p] = V code of key h3_v_slot_key(p) (config.h);
 *                sq, sk, sv: [H][G] (G = S_pad / 128).
 *   V smoothing  (optional, vmu != NULL) mu[h*128+d] = (float)(sum_s v[s][h][d] / S),
 *                the sum in double in the order of H3_VMEAN_LANES (config.h);
 *                V is quantised as the FP32 difference v - mu (amax and codes
 *                of the difference; padding keys stay code 0), and the
 *                attention adds mu back: O = bf16(fma(acc, fin, mu[d])).
 *                Exact for softmax (each row of P sums to 1), and it takes
 *                V's mean out of e4m3's range and out of Hopper's truncating
 *                FP8 accumulator (docs/accuracy.md).
 *   Q/K rotation (optional, rot_qk) every q and k head vector x [128] is
 *                replaced by bf16(H3_ROT_SCALE * FWHT(sigma . x)) before the
 *                group's amax and codes (config.h says the order of the
 *                butterflies and the signs). Orthonormal and the same for q and
 *                k: QK^T, and so the attention, are unchanged up to that BF16
 *                rounding, while an outlier channel's energy is spread over all
 *                128 dims (FA3's incoherent processing; docs/accuracy.md).
 *   attention    (emulated FP8) per key tile of key_tile keys (a divisor of
 *                128, or a multiple of 64: gk is then the group of each key),
 *                base-2 online softmax:
 *                  c      = (sq[h][gq] * sk[h][gk]) * (D^-0.5 * log2 e)
 *                  x_j    = c * dot(q8_i, k8_j)  (keys >= S: -inf)
 *                  m_new  = max(m, max_j c * dot_j);  alpha = exp2(m - m_new) (0 when m = -inf)
 *                  p_j    = exp2(fma(dot_j, c, -m_new));  l = l * alpha + sum_j p_j
 *                  P8_j   = e4m3(p_j * (256 * sv[h][gk] / svmax[h]))
 *                  (attn_fp8_sm90's default forms p_j * mult as exp2 of
 *                  fma(dot_j, c, log2(mult) - m_new) and adds sum / mult
 *                  to l: equal up to FP32 rounding; a P8 code may then
 *                  land on the other side of an e4m3 midpoint)
 *                  acc[d] = acc[d] * alpha + sum_j P8_j * v8_j[d]
 *                end: O = bf16(acc * fin), fin = (svmax * 2^-8) / l (with V
 *                smoothing bf16(fma(acc, fin, mu[d]))); LSE = (m + log2 l) * ln 2
 *                (svmax = max_g sv[h][g]). The P multiplier keeps p in
 *                [0, 256], the top of e4m3's fine range, and folds V's per-group
 *                scale into one multiply; 1/256 and svmax return in the final 1/l.
 *                Split rows (cpu_attn_split, key_tile 128): the nkt =
 *                ceil(S / 128) key tiles as three parts, part j the tiles
 *                [j nkt / 3, (j + 1) nkt / 3), each the loop above from m =
 *                -inf, l = 0, acc = 0, giving (m_j, l_j, acc_j); then
 *                  M = max(m_0, max(m_1, m_2));  e_j = exp2(m_j - M) (0 when m_j = -inf)
 *                  l = l_0 e_0 + l_1 e_1 + l_2 e_2;  acc[d] likewise;  m = M
 *                and the end above. P8 is rounded against its part's running
 *                max, not the row's: e4m3 roundings differ from the unsplit
 *                row, the contract does not.
 *   attention_exact  FP32 softmax(q k^T / sqrt(D)) v on BF16 q, k, v.
 *   gate_residual    out = bf16(x + gate[tag] * y)
 *   swiglu       u[s][f] = bf16(silu(g[s][f]) * g[s][F + f]) */
#ifndef H3_CPU_REF_H
#define H3_CPU_REF_H

#include <stdint.h>

#include "config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* temb [T] f32, W [M*6*C][T] bf16, b [M*6*C] bf16 -> mod [M][6][C] bf16 */
void cpu_adaln(const h3_config *cfg, const float *temb, const uint16_t *W, const uint16_t *b, uint16_t *mod);

/* x [S][C] bf16, w [C] bf16, mod [M][6][C] bf16, tags [S] -> out [nrows][C] bf16 */
void cpu_rmsnorm_mod(const uint16_t *x, const uint16_t *w, const uint16_t *mod, const int32_t *tags, int S, int C,
                     float eps, int slot_shift, int slot_scale, const int *rows, int nrows, uint16_t *out);

/* x [S][K] bf16, W [N][K] bf16 -> y [nrows][N] bf16 */
void cpu_gemm_bf16(const uint16_t *x, const uint16_t *W, int S, int N, int K, const int *rows, int nrows,
                   uint16_t *y);

/* FP8 GEMM mode: x8 [S][K] e4m3 with sx [S], W8 [N][K] e4m3 with sw [N] ->
 * y [nrows][N] bf16 = bf16((sum_k x8 * W8) * (sx[row] * sw[n])) (FP32 sum of
 * exact e4m3 products). */
void cpu_gemm_fp8(const uint8_t *x8, const float *sx, const uint8_t *W8, const float *sw, int S, int N, int K,
                  const int *rows, int nrows, uint16_t *y);

/* quant_rows: x [nrows][cols] bf16 -> q [nrows][cols] e4m3, s [nrows]:
 * s = amax_row / 448 (1 if 0), code = e4m3_satfinite_rne(x * (448 / amax)). */
void cpu_quant_rows_e4m3(const uint16_t *x, long nrows, int cols, uint8_t *q, float *s);

/* The FP8 GEMM with block scales (cuBLASLt's 1x128 activation and 128x128
 * weight scales on Hopper; dit_block --gemm-scales blocks, tools/fp8_error
 * --scales blocks): x [rows][K] quantised per (brows x 128) block, s
 * [ceil(rows / brows)][ceil(K / 128)] = amax / 448 (1 if 0), code =
 * e4m3(x * (448 / amax)), the last blocks ragged. */
void cpu_quant_blocks_e4m3(const uint16_t *x, long nrows, int cols, int brows, uint8_t *q, float *s);
/* y [nrows][N] bf16 = bf16(sum_k (x8 * sx_block) (W8 * sw_block)): each code
 * times its block's scale in FP32, FP32 sum; bx, bw: the block heights of x's
 * and W's scales (1 and 128 for cuBLASLt's mode). */
void cpu_gemm_fp8_blocks(const uint8_t *x8, const float *sx, int bx, const uint8_t *W8, const float *sw, int bw, int S,
                         int N, int K, const int *rows, int nrows, uint16_t *y);

/* qkv [S][3*H*D] bf16 grouped, pos [S][3] f32, qw, kw [D] bf16 ->
 * q, k, v [nrows][H*D] bf16 (q, k normed + RoPE'd; v copied). */
void cpu_qk_norm_rope(const h3_config *cfg, const uint16_t *qkv, const float *pos, const uint16_t *qw,
                      const uint16_t *kw, int S, const int *rows, int nrows, uint16_t *q, uint16_t *k, uint16_t *v);

/* q, k, v [S][H*D] bf16 (all rows) -> q8, k8 [H][S_pad][D], vt8 [H][D][S_pad]
 * e4m3 codes, sq, sk, sv [H][G]. groups/ngroups: only these 128-token groups
 * (NULL: all); the others are left untouched. vmu: V smoothing's mean (NULL:
 * none); rot_qk: Q/K rotation. */
void cpu_quant_fp8(int S, int H, const uint16_t *q, const uint16_t *k, const uint16_t *v, const int *groups,
                   int ngroups, const float *vmu, int rot_qk, uint8_t *q8, uint8_t *k8, uint8_t *vt8, float *sq,
                   float *sk, float *sv);

/* Q/K rotation of one head vector, in place: x [128] holds BF16 values (as
 * floats) and gets bf16(H3_ROT_SCALE * FWHT(sigma . x)) (config.h). */
void cpu_rotate_qk(float *x);

/* V smoothing's mean (the contract above): element (s, h, d) of V at
 * v[s * ld + h * stride_h + d] (v of a [S][H*D] array: ld = H*D, stride_h =
 * D; of the grouped qkv: v = qkv + 256, ld = 3*H*D, stride_h = 384) ->
 * mu [H*D] f32. S >= 1. */
void cpu_v_mean(const uint16_t *v, long ld, int stride_h, int S, int H, float *mu);

/* The fused stage qk_norm_rope_quant, as the GPU runs it: qkv -> FP8 operands.
 * Full sequence (scales need whole groups). vmu: V smoothing's mean (NULL:
 * none); rot_qk: Q/K rotation. 0, or -1 out of memory (the scales are NaN). */
int cpu_qk_norm_rope_quant(const h3_config *cfg, const uint16_t *qkv, const float *pos, const uint16_t *qw,
                           const uint16_t *kw, int S, const float *vmu, int rot_qk, uint8_t *q8, uint8_t *k8,
                           uint8_t *vt8, float *sq, float *sk, float *sv);

/* Which query rows the attention kernel runs as split rows (the contract
 * above): row(ctx, h, i) != 0 for row i of head h. The Hopper three-consumer
 * kernel's split CTAs (kernels/attn/sm90_grid.h) are what it describes; the
 * caller, which knows the kernel's grid, answers for it. */
typedef struct {
    int (*row)(const void *ctx, int h, int i);
    const void *ctx;
} cpu_attn_split;

/* Emulated FP8 attention (the contract above). -> O [nrows][H*D] bf16,
 * lse [H][nrows] f32 (may be NULL). split: the kernel's split rows (NULL:
 * none; needs key_tile 128). quant = 0 switches the P rounding off
 * (P8_j = p_j * multiplier, exact), for testing the online softmax alone.
 * vmu: the mean V was smoothed by (NULL: none), added to O. 0, or -1 (out
 * of memory, or a key_tile or split it cannot emulate): the heads that did
 * not run are NaN. */
int cpu_attention_fp8(const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq, const float *sk,
                      const float *sv, const float *vmu, int S, int H, int key_tile, const cpu_attn_split *split,
                      int quant, const int *rows, int nrows, uint16_t *O, float *lse);

/* Exact FP32 attention on BF16 q, k, v [S][H*D] -> O [nrows][H*D] bf16, lse
 * [H][nrows]. 0, or -1 out of memory (the heads that did not run are NaN). */
int cpu_attention_exact(const uint16_t *q, const uint16_t *k, const uint16_t *v, int S, int H, const int *rows,
                        int nrows, uint16_t *O, float *lse);

/* x, y [S][C] bf16, mod [M][6][C], tags [S] -> out [nrows][C] bf16 */
void cpu_gate_residual(const uint16_t *x, const uint16_t *y, const uint16_t *mod, const int32_t *tags, int S, int C,
                       int slot_gate, const int *rows, int nrows, uint16_t *out);

/* g [S][2F] bf16 -> u [nrows][F] bf16 */
void cpu_swiglu(const uint16_t *g, int S, int F, const int *rows, int nrows, uint16_t *u);

/* RoPE frequencies omega_j = (float)pow(theta, -j / nfreq). */
void cpu_rope_omega(const h3_config *cfg, float *omega /* [rope_freqs] */);

/* The whole block on the CPU over every row: x [S][C] -> out [S][C]. The
 * attention is the emulated FP8 one with key_tile (exact = 1: exact
 * attention instead). st (may be NULL) receives per-stage wall times and the
 * first stage whose output held a NaN or Inf (each stage's output is scanned
 * as it is made: one pass over memory the stage just wrote); progress != 0
 * prints a progress bar on stderr. Returns 0, or -1 when it ran out of
 * memory: out is then all NaN and nothing is printed (the caller says it). */
typedef struct {
    const uint16_t *w[10]; /* indexed by H3_T_* */
} cpu_block_weights;
typedef struct {
    double ms[H3_STAGE_COUNT]; /* wall time of each stage */
    int first_nonfinite;       /* H3_STAGE_* of the first stage (in block order) whose output held a NaN or Inf; -1: none */
} cpu_block_stats;
int cpu_block_forward(const h3_config *cfg, const cpu_block_weights *wt, int S, const uint16_t *x,
                      const float *temb, const int32_t *tags, const float *pos, int key_tile, int exact,
                      int progress, uint16_t *out, cpu_block_stats *st);

/* cpu_block_forward (emulated FP8 attention) with the GEMMs of fp8_mask in the
 * FP8 GEMM mode (dit_block --gemm fp8 or fp8:LIST): bit 0 qkv_gemm, 1
 * out_gemm, 2 fc1_gemm, 3 fc2_gemm, config.h's H3_GEMM_* order (CPU_FP8_ALL =
 * all four). Such a GEMM quantises its weight per output channel and its BF16
 * input per token (cpu_quant_rows_e4m3) and runs cpu_gemm_fp8. fp8_mask = 0
 * is cpu_block_forward. */
#define CPU_FP8_ALL H3_FP8_ALL
/* bit 4 of fp8_mask: those GEMMs with block scales instead (cpu_gemm_fp8_blocks:
 * inputs per token per 128 columns, weights per 128 x 128 block) */
#define CPU_FP8_BLOCKS H3_FP8_BLOCKS
int cpu_block_forward_fp8(const h3_config *cfg, const cpu_block_weights *wt, int S, const uint16_t *x,
                          const float *temb, const int32_t *tags, const float *pos, int key_tile, int fp8_mask,
                          int progress, uint16_t *out, cpu_block_stats *st);

#ifdef __cplusplus
}
#endif
#endif
