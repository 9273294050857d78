/* swiglu.cu — stage swiglu: u = silu(gate) * up on fc1's output (DESIGN.md §1
 * step 8).
 *
 * g [S][2F] bf16 (rows: gate | up), u [S][F] bf16:
 * u[s][f] = bf16(silu(g[s][f]) * g[s][F + f]), silu(x) = x / (1 + e^-x) in
 * FP32 with __expf and __fdividef (h3d_silu_fast, common.cuh: a few ulp from
 * the CPU's expf and IEEE division), so a result differs from
 * cpu_ref/swiglu.c only when that difference crosses a BF16 rounding
 * boundary (rare 1-ulp flips). swiglu_q8 (fp8_rows.cu) uses the same silu, so
 * its BF16 output equals this kernel's bit for bit.
 * Elementwise, 16-byte chunks in a grid-stride loop; a scalar kernel covers F
 * not a multiple of 8 or unaligned pointers. */
#include "common.cuh"
#include "kernels.h"

__global__ void __launch_bounds__(256)
    swiglu_vec_kernel(const uint16_t *__restrict__ g,  // [S][2F] bf16
                      int S, int F,
                      uint16_t *__restrict__ u)        // [S][F] bf16
{
    const int cpr = F >> 3;
    const size_t n = (size_t)S * cpr;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t s = i / cpr;
        const int c = (int)(i - s * cpr);
        const uint16_t *gr = g + s * 2 * F; /* [2F] bf16 */
        float a[8], b[8];
        h3d_unpack8(h3d_ld16_stream(gr + 8 * c), a);
        h3d_unpack8(h3d_ld16_stream(gr + F + 8 * c), b);
#pragma unroll
        for (int j = 0; j < 8; j++) a[j] = h3d_silu_fast(a[j]) * b[j];
        h3d_st16(u + 8 * i, h3d_pack8(a));
    }
}

__global__ void __launch_bounds__(256)
    swiglu_scalar_kernel(const uint16_t *__restrict__ g, int S, int F, uint16_t *__restrict__ u)
{
    const size_t n = (size_t)S * F;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t s = i / F;
        const size_t f = i - s * F;
        const uint16_t *gr = g + s * 2 * F;
        u[i] = h3d_to_bf16(h3d_silu_fast(h3d_bf16(gr[f])) * h3d_bf16(gr[F + f]));
    }
}

extern "C" int h3k_swiglu(const uint16_t *g, int S, int F, uint16_t *u, h3_stream stream)
{
    if (S <= 0) return 0;
    if (F <= 0) return (int)cudaErrorInvalidValue;
    const bool vec = F % 8 == 0 && h3_aligned16(g) && h3_aligned16(u);
    const size_t work = (size_t)S * (vec ? F / 8 : F);
    size_t blocks = (work + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    if (vec)
        swiglu_vec_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(g, S, F, u);
    else
        swiglu_scalar_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(g, S, F, u);
    return (int)cudaGetLastError();
}
