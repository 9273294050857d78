/* adaln.cu — stage adaln: mod = W . silu(temb) + b (DESIGN.md §1 step 1).
 *
 * mod [N] bf16 = bf16(sum_k W[j][k] * silu(temb[k]) + b[j]), W [N][T] bf16,
 * temb [T] f32, b [N] bf16; N = M*6*C = 96768, T = 2688 for the full block.
 * A GEMV over 520 MB of weights: purely memory-bound. Each block computes
 * silu(temb) once into shared memory (FP32, not rounded, as the CPU), then
 * each warp owns ADALN_ROWS rows and streams them with 16-byte evict-first
 * loads; FP32 accumulation, a warp tree sum, the bias added after the sum
 * (cpu_ref/adaln.c). Only the summation order differs from the CPU. */
#include "common.cuh"
#include "kernels.h"

#define ADALN_THREADS 256
#define ADALN_ROWS 4 /* rows per warp */

template <bool VEC>
__global__ void __launch_bounds__(ADALN_THREADS)
    adaln_kernel(const float *__restrict__ temb,  // [T] f32
                 const uint16_t *__restrict__ W,  // [N][T] bf16
                 const uint16_t *__restrict__ b,  // [N] bf16
                 int N, int T,
                 uint16_t *__restrict__ mod)      // [N] bf16
{
    extern __shared__ float st[]; /* [T] silu(temb) */
    for (int k = threadIdx.x; k < T; k += blockDim.x) st[k] = h3d_silu(temb[k]);
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * (ADALN_THREADS / 32) + warp) * ADALN_ROWS;
    for (int r = 0; r < ADALN_ROWS; r++) {
        const int row = row0 + r;
        if (row >= N) break;
        const uint16_t *wr = W + (size_t)row * T; /* [T] bf16 */
        float acc = 0.0f;
        if (VEC) {
            const int nch = T >> 3;
#pragma unroll 4
            for (int c = lane; c < nch; c += 32) {
                float w[8];
                h3d_unpack8(h3d_ld16_stream(wr + 8 * c), w);
                const float4 s0 = *(const float4 *)&st[8 * c], s1 = *(const float4 *)&st[8 * c + 4];
                acc += w[0] * s0.x;
                acc += w[1] * s0.y;
                acc += w[2] * s0.z;
                acc += w[3] * s0.w;
                acc += w[4] * s1.x;
                acc += w[5] * s1.y;
                acc += w[6] * s1.z;
                acc += w[7] * s1.w;
            }
        } else {
            for (int k = lane; k < T; k += 32) acc += h3d_bf16(wr[k]) * st[k];
        }
        acc = h3d_warp_sum(acc);
        if (lane == 0) mod[row] = h3d_to_bf16(acc + h3d_bf16(b[row]));
    }
}

extern "C" int h3k_adaln(const float *temb, const uint16_t *W, const uint16_t *b, int N, int T, uint16_t *mod,
                         h3_stream stream)
{
    if (N <= 0) return 0;
    if (T <= 0 || (size_t)T * sizeof(float) > 48 * 1024) return (int)cudaErrorInvalidValue;
    const int rows_per_block = ADALN_ROWS * ADALN_THREADS / 32;
    const unsigned grid = (unsigned)((N + rows_per_block - 1) / rows_per_block);
    const size_t smem = (size_t)T * sizeof(float);
    const bool vec = T % 8 == 0 && h3_aligned16(W);
    if (vec)
        adaln_kernel<true><<<grid, ADALN_THREADS, smem, (cudaStream_t)stream>>>(temb, W, b, N, T, mod);
    else
        adaln_kernel<false><<<grid, ADALN_THREADS, smem, (cudaStream_t)stream>>>(temb, W, b, N, T, mod);
    return (int)cudaGetLastError();
}
