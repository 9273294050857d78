/* residual.cu — stage gate_res2 (and gate_res1 when not fused with norm2_mod,
 * see norm.cu): out = bf16(x + gate[tag] * y) (DESIGN.md §1 steps 6 and 9).
 *
 * x, y, out [S][C] bf16; mod [M][6][C] bf16; tags [S]. One fma then one RNE
 * rounding, as cpu_ref/residual.c (whose "x + g * y" GCC contracts the same
 * way). Elementwise, 16-byte chunks in a grid-stride loop; a scalar kernel
 * covers C not a multiple of 8 or unaligned pointers. */
#include "common.cuh"
#include "config.h"
#include "kernels.h"

__global__ void __launch_bounds__(256)
    gate_res_vec_kernel(const uint16_t *__restrict__ x,    // [S][C] bf16
                        const uint16_t *__restrict__ y,    // [S][C] bf16
                        const uint16_t *__restrict__ mod,  // [M][6][C] bf16
                        const int32_t *__restrict__ tags,  // [S]
                        int S, int C, int slot_gate,
                        uint16_t *__restrict__ out)        // [S][C] bf16
{
    const int cpr = C >> 3; /* chunks per row */
    const size_t n = (size_t)S * cpr;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t s = i / cpr;
        const int c = (int)(i - s * cpr);
        float a[8], b[8], g[8];
        h3d_unpack8(h3d_ld16_stream(x + 8 * i), a);
        h3d_unpack8(h3d_ld16_stream(y + 8 * i), b);
        h3d_unpack8(h3d_ld16(mod + ((size_t)tags[s] * H3_SLOTS + slot_gate) * C + 8 * c), g);
#pragma unroll
        for (int j = 0; j < 8; j++) a[j] = __fmaf_rn(g[j], b[j], a[j]);
        h3d_st16(out + 8 * i, h3d_pack8(a));
    }
}

__global__ void __launch_bounds__(256)
    gate_res_scalar_kernel(const uint16_t *__restrict__ x, const uint16_t *__restrict__ y,
                           const uint16_t *__restrict__ mod, const int32_t *__restrict__ tags, int S, int C,
                           int slot_gate, uint16_t *__restrict__ out)
{
    const size_t n = (size_t)S * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t s = i / C;
        const int c = (int)(i - s * C);
        const float g = h3d_bf16(mod[((size_t)tags[s] * H3_SLOTS + slot_gate) * C + c]);
        out[i] = h3d_to_bf16(__fmaf_rn(g, h3d_bf16(y[i]), h3d_bf16(x[i])));
    }
}

extern "C" int h3k_gate_residual(const uint16_t *x, const uint16_t *y, const uint16_t *mod, const int32_t *tags, int S,
                                 int C, int slot_gate, uint16_t *out, h3_stream stream)
{
    if (S <= 0) return 0;
    if (C <= 0) return (int)cudaErrorInvalidValue;
    const bool vec = C % 8 == 0 && h3_aligned16(x) && h3_aligned16(y) && h3_aligned16(mod) && h3_aligned16(out);
    const size_t work = (size_t)S * (vec ? C / 8 : C);
    size_t blocks = (work + 255) / 256;
    if (blocks > 65536) blocks = 65536; /* grid-stride beyond this */
    if (vec)
        gate_res_vec_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(x, y, mod, tags, S, C, slot_gate, out);
    else
        gate_res_scalar_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(x, y, mod, tags, S, C, slot_gate,
                                                                                   out);
    return (int)cudaGetLastError();
}
