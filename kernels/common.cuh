/* common.cuh — device helpers shared by the memory-bound kernels (adaln.cu,
 * norm.cu, residual.cu, swiglu.cu, quant.cu): BF16 pack/unpack, 16-byte
 * vector access, warp/block reductions, and the e4m3 conversion.
 *
 * Numerics: BF16 -> FP32 is exact (bits << 16); FP32 -> BF16 is RNE
 * (cvt.rn.bf16x2.f32, the same rounding as h3_f32_to_bf16 for every finite
 * value and inf; NaN becomes the canonical 0x7fff instead of a quieted copy).
 * FP32 -> e4m3 is cvt.rn.satfinite.e4m3x2.f32: RNE, finite overflow and +-inf
 * saturate to +-448, NaN stays NaN — exactly h3_f32_to_e4m3 (numerics.h). The
 * kernels are built without fast-math, so expf, sqrtf, sincosf and '/' are
 * the precise (IEEE for sqrt and division) versions; the one exception is
 * swiglu's silu (h3d_silu_fast below). */
#ifndef H3_COMMON_CUH
#define H3_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* ---- BF16 ---- */
__device__ __forceinline__ float h3d_bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float h3d_bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float h3d_bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* Two floats -> one word of two BF16 (lo in the low half), RNE each. */
__device__ __forceinline__ uint32_t h3d_pack_bf16x2(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ uint16_t h3d_to_bf16(float f) { return (uint16_t)(h3d_pack_bf16x2(f, 0.0f) & 0xffffu); }
/* Round to the nearest BF16 value, staying in FP32. */
__device__ __forceinline__ float h3d_round_bf16(float f) { return h3d_bf16_lo(h3d_pack_bf16x2(f, 0.0f)); }

/* 8 BF16 in a uint4 <-> 8 floats. */
__device__ __forceinline__ void h3d_unpack8(uint4 v, float f[8])
{
    f[0] = h3d_bf16_lo(v.x); f[1] = h3d_bf16_hi(v.x);
    f[2] = h3d_bf16_lo(v.y); f[3] = h3d_bf16_hi(v.y);
    f[4] = h3d_bf16_lo(v.z); f[5] = h3d_bf16_hi(v.z);
    f[6] = h3d_bf16_lo(v.w); f[7] = h3d_bf16_hi(v.w);
}
__device__ __forceinline__ uint4 h3d_pack8(const float f[8])
{
    uint4 v;
    v.x = h3d_pack_bf16x2(f[0], f[1]);
    v.y = h3d_pack_bf16x2(f[2], f[3]);
    v.z = h3d_pack_bf16x2(f[4], f[5]);
    v.w = h3d_pack_bf16x2(f[6], f[7]);
    return v;
}

/* 16-byte global access. ld_stream: read-once data (weights, activations
 * consumed once) — evict-first so it does not push reused data out of L2. */
__device__ __forceinline__ uint4 h3d_ld16(const void *p) { return *(const uint4 *)p; }
__device__ __forceinline__ uint4 h3d_ld16_stream(const void *p) { return __ldcs((const uint4 *)p); }
__device__ __forceinline__ void h3d_st16(void *p, uint4 v) { *(uint4 *)p = v; }

/* ---- e4m3 ---- */
/* Two floats -> two e4m3 codes in the low 16 bits (lo in byte 0), RNE satfinite.
 * The PTX puts its first source in the upper byte. */
__device__ __forceinline__ uint32_t h3d_e4m3x2(float lo, float hi)
{
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return (uint32_t)r;
}
/* Four floats -> four e4m3 codes, f0 in byte 0. */
__device__ __forceinline__ uint32_t h3d_e4m3x4(float f0, float f1, float f2, float f3)
{
    return h3d_e4m3x2(f0, f1) | (h3d_e4m3x2(f2, f3) << 16);
}

/* ---- reductions (FP32) ---- */
__device__ __forceinline__ float h3d_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float h3d_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. scratch: 32 floats of shared memory. The order is fixed
 * (lane tree, then warps 0..n-1), so results are reproducible run to run. */
__device__ __forceinline__ float h3d_block_sum(float v, float *scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = h3d_warp_sum(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = lane < nw ? scratch[lane] : 0.0f;
    return h3d_warp_sum(t);
}

/* Max over the block, same shape and contract as h3d_block_sum. */
__device__ __forceinline__ float h3d_block_max(float v, float *scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = h3d_warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = lane < nw ? scratch[lane] : 0.0f;
    return h3d_warp_max(t);
}

/* ---- per-row FP8 (the FP8 GEMM mode's activations and weights) ----
 * s = amax / 448 (1 if amax == 0), code = e4m3(v * (448 / amax)): the
 * convention of the attention operands (quant.cu), per row instead of per
 * (head, group). The multiplier is an IEEE division, as on the CPU. */
__device__ __forceinline__ float h3d_row_inv(float amax) { return amax > 0.0f ? 448.0f / amax : 1.0f; }
__device__ __forceinline__ float h3d_row_scale(float amax) { return amax > 0.0f ? amax / 448.0f : 1.0f; }
/* 8 floats times m -> 8 e4m3 codes, f[0] in byte 0. */
__device__ __forceinline__ uint2 h3d_e4m3x8(const float f[8], float m)
{
    uint2 r;
    r.x = h3d_e4m3x4(f[0] * m, f[1] * m, f[2] * m, f[3] * m);
    r.y = h3d_e4m3x4(f[4] * m, f[5] * m, f[6] * m, f[7] * m);
    return r;
}

/* ---- 1 x 128 block scales (the FP8 GEMM mode with --gemm-scales blocks) ----
 * With chunk c = threadIdx.x + i * blockDim.x (blockDim.x a multiple of 32)
 * and 8 values per chunk, the 16 chunks of a row's 128-column block are held
 * by one half-warp: its max is the block's amax. Every lane of the warp must
 * call this (a lane past the row passes 0). Max is exact in any order, so the
 * scale and codes equal cpu_quant_blocks_e4m3's bit for bit. */
__device__ __forceinline__ float h3d_blk128_max(float m)
{
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
}
/* Chunk c (8 values, 0 past the row: c >= nch) of row `row` -> its e4m3
 * codes at row8 + 8c with its 128-column block's scale, which the block's
 * first chunk writes to s [ceil(cols / 128)][ld] (the rows of one block
 * contiguous: cuBLASLt's VEC128_32F layout, ld = the number of rows). Every
 * lane of the warp must call it (h3d_blk128_max). */
__device__ __forceinline__ void h3d_store_e4m3x8_blk128(const float v[8], int c, int nch, uint8_t *row8, float *s,
                                                        long ld, long row)
{
    float bm = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) bm = fmaxf(bm, fabsf(v[j]));
    bm = h3d_blk128_max(bm);
    if (c < nch) {
        *(uint2 *)(row8 + 8 * c) = h3d_e4m3x8(v, h3d_row_inv(bm));
        if ((c & 15) == 0) s[(long)(c >> 4) * ld + row] = h3d_row_scale(bm);
    }
}

/* silu(x) = x / (1 + e^-x) in FP32, the CPU's formula (cpu_internal.h);
 * expf(-x) = inf for very negative x gives -0, the right limit. */
__device__ __forceinline__ float h3d_silu(float x) { return x / (1.0f + expf(-x)); }

/* silu for the swiglu stage, on every element of fc1's output: e^-x as
 * __expf (ex2.approx of x log2 e: relative error below 2^-21 for |x| < 88)
 * and the quotient as __fdividef (rcp.approx times x, ~2 ulp) -- a few
 * instructions where expf and the IEEE division take ~18, and the
 * division's slow-path call made ptxas spill; with them swiglu_q8 runs near
 * its DRAM floor (the journal has the figures). Against the CPU's expf and '/' the FP32 result moves by a
 * few ulp, so the BF16 output differs in rare 1-ulp flips (the swiglu
 * tolerance). Ends: x < -88.7 gives e^-x = inf and -0, as the CPU does; for
 * x in (-88.7, -87.3), 1 + e^-x > 2^126 and __fdividef returns 0 where the
 * exact value is about -1e-36. */
__device__ __forceinline__ float h3d_silu_fast(float x) { return __fdividef(x, 1.0f + __expf(-x)); }

/* The launchers' alignment test for 16-byte vector access. */
static inline int h3_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

#endif
