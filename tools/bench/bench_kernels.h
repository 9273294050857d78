/* bench_kernels.h — C launchers of bench_kernels.cu (benchmark inputs and the
 * FP64 attention reference). Shapes: q, k, v [S][H*128] bf16; q8, k8
 * [H][S_pad][128], vt8 [H][128][S_pad] e4m3; sq, sk, sv [H][G] f32;
 * inv_tmp [3][H][G] f32 scratch; out [S or nrows][H*128] f64; vmu [H*128] f32 (V
 * smoothing's mean: V quantised less it; NULL: none). Return 0 or a cudaError_t. */
#ifndef H3_BENCH_KERNELS_H
#define H3_BENCH_KERNELS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int bench_fill_bf16(uint16_t *x, size_t n, uint64_t seed, int stress, cudaStream_t st);
int bench_quant_fp8(const uint16_t *q, const uint16_t *k, const uint16_t *v, const float *vmu, int S, int H,
                    uint8_t *q8, uint8_t *k8, uint8_t *vt8, float *sq, float *sk, float *sv, float *inv_tmp,
                    cudaStream_t st);
/* the mean of each of v's H*128 columns over S tokens (FP64 sums) */
int bench_v_mean(const uint16_t *v, int S, int H, float *mu, cudaStream_t st);
/* Q/K rotation (config.h) of every 128-value row of x [rows][128] bf16 into
 * y: sign bit d of signs[d / 32] flips dim d, the Walsh-Hadamard butterflies
 * run dim bit 0 first (lower a + b, upper a - b, FP32), then times scale
 * (FP32) and rounded to BF16. */
int bench_rotate_rows(const uint16_t *x, long rows, const uint32_t signs[4], float scale, uint16_t *y,
                      cudaStream_t st);
/* exact attention in FP64 for query rows rows[0..nrows) (device array; NULL:
 * all S rows, nrows ignored) -> out [nrows or S][H*128] */
int bench_ref_attn_f64(const uint16_t *q, const uint16_t *k, const uint16_t *v, int S, int H, const int *rows,
                       int nrows, double *out, cudaStream_t st);
/* a one-thread kernel that keeps the stream busy for us microseconds: a
 * launch queued behind it starts without waiting for the host */
int bench_spin(double us, cudaStream_t st);
/* reads x [n] floats (n a multiple of 4, x 16-byte aligned) so that the L2
 * holds none of what was there; sink [1] is written only if they sum to NaN */
int bench_l2_evict(const float *x, size_t n, float *sink, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
