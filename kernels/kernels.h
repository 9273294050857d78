/* kernels.h — plain-C launchers of h3block's CUDA kernels.
 *
 * All pointers are device pointers; shapes as in cpu_ref/cpu_ref.h, whose
 * functions are the CPU twins (same numerics; mostly the same argument
 * order). Exceptions: h3k_rope_table has no twin (the CPU computes its angles
 * where it rotates), so h3k_qk_norm_rope_quant takes the table where
 * cpu_qk_norm_rope_quant takes the positions.
 * Every launcher enqueues on `stream` and returns 0, or a non-zero
 * cudaError_t (as int) from the launch; it never synchronises. The kernels
 * know nothing of files, JSON or the CLI. */
#ifndef H3_KERNELS_H
#define H3_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *h3_stream; /* = cudaStream_t */
typedef struct h3_sm90_grid h3_sm90_grid; /* the Hopper kernel's grid (attn/sm90_grid.h) */

/* 1 when this build has machine code for the current device (build_info.cu). */
int h3k_device_supported(void);

/* mod [M*6*C] bf16 = W [M*6*C][T] bf16 . silu(temb [T] f32) + b */
int h3k_adaln(const float *temb, const uint16_t *W, const uint16_t *b, int N, int T, uint16_t *mod,
              h3_stream stream);

/* out [S][C] = bf16(rmsnorm(x) * w * (1 + mod[tag][slot_scale]) + mod[tag][slot_shift]) */
int h3k_rmsnorm_mod(const uint16_t *x, const uint16_t *w, const uint16_t *mod, const int32_t *tags, int S, int C,
                    float eps, int slot_shift, int slot_scale, uint16_t *out, h3_stream stream);

/* out [S][C] = bf16(x + mod[tag][slot_gate] * y) */
int h3k_gate_residual(const uint16_t *x, const uint16_t *y, const uint16_t *mod, const int32_t *tags, int S, int C,
                      int slot_gate, uint16_t *out, h3_stream stream);

/* Fused gate_res1 + norm2_mod: xo = bf16(x + gate * y) (the residual, kept),
 * b = rmsnorm_mod(xo) with w2 and (slot_shift, slot_scale). */
int h3k_gate_residual_norm_mod(const uint16_t *x, const uint16_t *y, const uint16_t *mod, const int32_t *tags, int S,
                               int C, int slot_gate, uint16_t *xo, const uint16_t *w2, float eps, int slot_shift,
                               int slot_scale, uint16_t *b, h3_stream stream);

/* u [S][F] = bf16(silu(g[:, :F]) * g[:, F:]), g [S][2F] */
int h3k_swiglu(const uint16_t *g, int S, int F, uint16_t *u, h3_stream stream);

/* ---- FP8 GEMM mode (--gemm fp8): per-row e4m3 operands for cuBLASLt ----
 * Convention (cpu_ref.h quant_rows): per row, s = amax / 448 (1 if amax == 0),
 * code = e4m3_satfinite_rne(x * (448 / amax)). */

/* q [rows][cols] e4m3, s [rows] f32 from x [rows][cols] bf16 (weights: rows =
 * output channels; activations: rows = tokens). */
int h3k_quant_rows_e4m3(const uint16_t *x, int rows, int cols, uint8_t *q, float *s, h3_stream stream);

/* Block scales (--gemm-scales blocks; cpu_quant_blocks_e4m3's numerics, one
 * scale per block of brows x 128): brows = 1, activations, s [ceil(cols /
 * 128)][rows] (one 128-column block's rows contiguous: cuBLASLt's
 * VEC128_32F), needs cols a multiple of 8, x 16-byte and q 8-byte aligned;
 * brows = 128, weights, s [ceil(rows / 128)][ld], ld = ceil(cols / 128)
 * rounded up to 4 (cuBLASLt's BLK128x128_32F; the padding holds 1). */
int h3k_quant_blocks_e4m3(const uint16_t *x, int rows, int cols, int brows, uint8_t *q, float *s, h3_stream stream);

/* h3k_rmsnorm_mod / h3k_gate_residual_norm_mod that also write the output
 * row-quantised: out8 [S][C] e4m3, s8 [S] (blk = 0), or with 1 x 128 block
 * scales s8 [ceil(C / 128)][S] (blk = 1, h3k_quant_blocks_e4m3's brows = 1);
 * the BF16 out may be NULL (not written). Need C a multiple of 8 and <= 32768. */
int h3k_rmsnorm_mod_q8(const uint16_t *x, const uint16_t *w, const uint16_t *mod, const int32_t *tags, int S, int C,
                       float eps, int slot_shift, int slot_scale, uint16_t *out, uint8_t *out8, float *s8, int blk,
                       h3_stream stream);
int h3k_gate_residual_norm_mod_q8(const uint16_t *x, const uint16_t *y, const uint16_t *mod, const int32_t *tags,
                                  int S, int C, int slot_gate, uint16_t *xo, const uint16_t *w2, float eps,
                                  int slot_shift, int slot_scale, uint16_t *b, uint8_t *b8, float *sb, int blk,
                                  h3_stream stream);

/* h3k_swiglu that also writes u row-quantised: u8 [S][F] e4m3, su [S] (blk
 * = 0) or [ceil(F / 128)][S] (blk = 1); u may be NULL. Needs F a multiple of
 * 8 and <= 65536. */
int h3k_swiglu_q8(const uint16_t *g, int S, int F, uint16_t *u, uint8_t *u8, float *su, int blk, h3_stream stream);

/* V smoothing's mean (cpu_ref.h, config.h H3_VMEAN_LANES; bit-identical to
 * cpu_v_mean): element (s, h, d) of V at v[s * ld + h * stride_h + d] -> mu
 * [H*128] f32. Needs v 4-byte aligned, ld and stride_h even. */
int h3k_v_mean(const uint16_t *v, long ld, int stride_h, int S, int H, float *mu, h3_stream stream);
/* The same column sums before the division, as double [H*128] (h3k_v_mean's
 * order); and the mean from P such sums (a rank's tokens each, --gpus P):
 * mu = (sum over p in order of parts[p]) / S. For P = 1 that is h3k_v_mean's
 * mean bit for bit. */
int h3k_v_colsum(const uint16_t *v, long ld, int stride_h, int S, int H, double *sums, h3_stream stream);
int h3k_v_mean_parts(const double *parts, int P, int H, int S, float *mu, h3_stream stream);

/* The RoPE table of a sequence: rope [S][H3_ROPE_TAB] f32; row s holds, for
 * each rotary chunk rc = 0..5, cos then sin of the 8 angles pos[s][rc / 2] *
 * omega[8 (rc % 2) + j] (omega: the 16 frequencies, cpu_rope_omega; the
 * precise sincosf). Depends on the positions only: once per sequence. */
int h3k_rope_table(const float *pos, int S, const float *omega_host16, float *rope, h3_stream stream);

/* qkv [S][3*H*128] (grouped per head) -> q8, k8 [H][S_pad][128], vt8
 * [H][128][S_pad] (keys permuted, config.h), sq, sk, sv [H][G]. rope: the
 * table of h3k_rope_table. vmu [H*128] (device, or NULL): V is quantised less
 * this mean (V smoothing). rot_qk: q and k rotated before quantisation
 * (Q/K rotation, config.h). Padding rows/keys are written as 0. */
int h3k_qk_norm_rope_quant(const uint16_t *qkv, const float *rope, const uint16_t *qw, const uint16_t *kw, int S,
                           int H, float eps, const float *vmu, int rot_qk, uint8_t *q8, uint8_t *k8, uint8_t *vt8,
                           float *sq, float *sk, float *sv, h3_stream stream);

/* Q, K and V as given, BF16, quantised to the attention's operands as
 * h3k_qk_norm_rope_quant does (without the norm and RoPE): element (s, h, d)
 * of q at q[s * q_ld + h * q_hs + d] (likewise k, v); the outputs and vmu as
 * there. Needs the three pointers 16-byte aligned and every stride a
 * multiple of 8 (cudaErrorMisalignedAddress otherwise). */
int h3k_qkv_quant(const uint16_t *q, long q_ld, long q_hs, const uint16_t *k, long k_ld, long k_hs, const uint16_t *v,
                  long v_ld, long v_hs, int S, int H, const float *vmu, uint8_t *q8, uint8_t *k8, uint8_t *vt8,
                  float *sq, float *sk, float *sv, h3_stream stream);

/* FP8 flash attention, portable (mma.sync.m16n8k32 e4m3; sm_89, sm_90, sm_120).
 * -> O [S][H*128] bf16, lse [H][S] f32. vmu [H*128] (device, or NULL): the
 * mean V was smoothed by, added to O (cpu_ref.h). */
int h3k_attn_fp8_mma(const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq, const float *sk,
                     const float *sv, const float *vmu, int S, int H, uint16_t *O, float *lse, h3_stream stream);
int h3k_attn_fp8_mma_key_tile(void); /* keys per online-softmax step (for the emulated reference) */

/* FP8 flash attention for Hopper (wgmma + TMA, sm_90a). Same interface; with
 * vmu != NULL its default variant is the faster one that needs smoothed V.
 * Returns non-zero (cudaErrorNoKernelImageForDevice) when not built for the device. */
int h3k_attn_fp8_sm90(const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq, const float *sk,
                      const float *sv, const float *vmu, int S, int H, uint16_t *O, float *lse, h3_stream stream);
int h3k_attn_fp8_sm90_key_tile(void);
int h3k_attn_fp8_sm90_available(void); /* 1 if compiled for sm_90a and the device is sm_90 */
/* The grid h3k_attn_fp8_sm90 runs its V-smoothed kernel on for S, H on the
 * current device (attn/sm90_grid.h; the launch asks this function): which
 * rows run in split CTAs, for the emulation that checks it (cpu_ref.h
 * cpu_attn_split, with h3_sm90_grid_row_split). 0, or cudaErrorInvalidValue
 * (S or H < 1). Without a device (SM count unknown): the plain grid, as the
 * launch would run. */
int h3k_attn_fp8_sm90_grid(int S, int H, h3_sm90_grid *grid);
/* variant h3k_attn_fp8_sm90 runs without (0) or with (1) a V mean (env H3_SM90_VARIANT overrides both) */
const char *h3k_attn_fp8_sm90_variant_name(int smoothed);

#ifdef __cplusplus
}
#endif
#endif
