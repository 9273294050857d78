/* gemm_lt.h — the cuBLASLt wrapper for the block's GEMMs (y = x W^T).
 *
 * One handle, one 32 MiB workspace; per GEMM shape (m, n, k, dtypes, pointer
 * alignment) the matmul descriptor, the three layouts and the heuristic's
 * algorithm are created once and cached, and destroyed in reverse order by
 * h3_lt_destroy. Row-major y [S][N] = x [S][K] . W [N][K]^T is, in cuBLASLt's
 * column-major terms, C (N x S, ld N) = op(A)^T B with A = W (K x N, ld K,
 * transposed) and B = x (K x S, ld K): "TN", the layout FP8 needs on Hopper.
 * FP32 accumulation (CUBLAS_COMPUTE_32F), FP32 alpha = 1, beta = 0.
 * Not thread-safe: one h3_lt per host thread. H3_HAVE_CUDA builds only. */
#ifndef H3_GEMM_LT_H
#define H3_GEMM_LT_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct h3_lt h3_lt;

/* NULL on failure, with the reason in err (h3_lt_create prints it to stderr). */
h3_lt *h3_lt_create_err(char *err, size_t errlen);
h3_lt *h3_lt_create(void);
void h3_lt_destroy(h3_lt *lt); /* NULL is fine */

/* y [S][N] bf16 = x [S][K] bf16 . W [N][K]^T bf16, enqueued on stream.
 * Every pointer must be 16-byte aligned and K, N multiples of 8 (16-byte rows).
 * Returns 0, or -1 with one line in err naming m, n, k and the dtypes. */
int h3_lt_gemm_bf16(h3_lt *lt, const uint16_t *x, const uint16_t *W, uint16_t *y, int S, int N, int K,
                    cudaStream_t stream, char *err, size_t errlen);

/* The FP8 GEMM mode: y [S][N] bf16 = bf16(x_scale[s] * w_scale[n] *
 * sum_k x [S][K] e4m3 . W [N][K] e4m3): x_scale [S] (per token), w_scale [N]
 * (per output channel), device FP32 vectors (cuBLASLt's outer-vector scale
 * mode, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F). K a multiple of 16. */
/* Fast accumulation for the FP8 GEMMs enqueued after it (on: 1): the tensor
 * cores' own reduced-precision accumulator along all of K instead of FP32
 * partial sums (CUBLASLT_MATMUL_DESC_FAST_ACCUM). Faster (1.2-1.3x on the
 * block's shapes, docs/perf.md), less accurate (the checker's "gemm_fp8_fast"
 * tolerance); off by default. */
void h3_lt_set_fast_accum(h3_lt *lt, int on);

int h3_lt_gemm_fp8(h3_lt *lt, const uint8_t *x, const uint8_t *W, const float *x_scale, const float *w_scale,
                   uint16_t *y, int S, int N, int K, cudaStream_t stream, char *err, size_t errlen);

/* The FP8 GEMM with block scales (--gemm-scales blocks): y = bf16(sum over k
 * of x e4m3 * x_scale[k / 128][s] * W e4m3 * w_scale[n / 128][k / 128]):
 * x_scale [ceil(K / 128)][S] (one 128-element block's tokens contiguous,
 * CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F), w_scale [ceil(N / 128)][L4], L4
 * = ceil(K / 128) rounded up to 4 (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
 * whose rows cuBLASLt reads 16 bytes aligned). cuBLASLt adds each block's
 * product into FP32 with its scales; fast accumulation does not apply. S
 * must be a multiple of 8 (cuBLASLt's 1x128-scaled operand; an error
 * otherwise). */
int h3_lt_gemm_fp8_blocks(h3_lt *lt, const uint8_t *x, const uint8_t *W, const float *x_scale, const float *w_scale,
                          uint16_t *y, int S, int N, int K, cudaStream_t stream, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
