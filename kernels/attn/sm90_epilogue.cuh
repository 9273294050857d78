/* sm90_epilogue.cuh — the start and the end of a Hopper attention row: O
 * and the softmax state emptied, and O = acc (svmax 2^-8) / l (+ V's mean
 * with V smoothing) written as BF16 into [S][H*128], LSE = (m + log2 l) ln 2
 * into [H][S]; rows >= S are never written. svmax 2^-8 undoes P8's
 * multiplier 256 sv / svmax (P8 was scaled by sv / svmax per key tile, so
 * acc is in units of svmax / 256). Device code for sm_90a (the includer
 * guards it). */
#ifndef H3_SM90_EPILOGUE_CUH
#define H3_SM90_EPILOGUE_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "sm90_layout.cuh"

namespace {

static __device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x = lo = lower address */
    return *reinterpret_cast<uint32_t *>(&v);
}

/* Two outputs of dims 8j + 2t, +1: o * f, or with V smoothing (kMu)
 * fma(o, f, mu) (cpu_ref.h: the mean returns in one rounding). A template
 * flag, not a test of mu: a run-time branch here changed ptxas's schedule
 * of the two-consumer kernel's whole loop (2% slower). */
template <bool kMu>
static __device__ __forceinline__ uint32_t out_bf16x2(float a, float b, float f, const float *__restrict__ mu, int j)
{
    if (kMu) {
        const float2 m = *reinterpret_cast<const float2 *>(mu + 8 * j);
        return pack_bf16x2(__fmaf_rn(a, f, m.x), __fmaf_rn(b, f, m.y));
    }
    return pack_bf16x2(a * f, b * f);
}

/* The sums the LSE is built from: l itself for these kernels (a consumer
 * type whose LSE needs other sums overloads this) */
template <class C> static __device__ __forceinline__ void lse_sums(C &, float &, float &) {}

/* Epilogue: l reduced over the row's 4 threads, O = acc * (svmax 2^-8) / l
 * (+ mu with V smoothing) as BF16 into [S][H*128], LSE; rows >= S are not written. row0: this
 * thread's first row (its second is row0 + 8). */
template <bool kMu, class C>
static __device__ __forceinline__ void store_output(C &c, float svmax, int row0, int S, int H, int h,
                                                    uint16_t *__restrict__ O, float *__restrict__ lse,
                                                    const float *__restrict__ vmu)
{
    const int t = threadIdx.x % 4;
    c.l0 += __shfl_xor_sync(0xffffffffu, c.l0, 1);
    c.l1 += __shfl_xor_sync(0xffffffffu, c.l1, 1);
    c.l0 += __shfl_xor_sync(0xffffffffu, c.l0, 2);
    c.l1 += __shfl_xor_sync(0xffffffffu, c.l1, 2);
    const float f0 = (svmax * 0.00390625f) / c.l0, f1 = (svmax * 0.00390625f) / c.l1;
    float z0 = c.l0, z1 = c.l1; /* the LSE's sums: l, or another consumer's own (lse_sums) */
    lse_sums(c, z0, z1);
    const int row1 = row0 + 8;
    const size_t ld = (size_t)H * kD;
    const float *mu = kMu ? vmu + (size_t)h * kD + 2 * t : nullptr; /* this thread's dims 8j + 2t, +1 */
    if (row0 < S) {
        uint16_t *op = O + (size_t)row0 * ld + (size_t)h * kD + 2 * t;
#pragma unroll
        for (int j = 0; j < 16; ++j)
            *reinterpret_cast<uint32_t *>(op + 8 * j) = out_bf16x2<kMu>(c.o[4 * j + 0], c.o[4 * j + 1], f0, mu, j);
        if (t == 0) lse[(size_t)h * S + row0] = (c.m0 + log2f(z0)) * 0.6931471805599453f;
    }
    if (row1 < S) {
        uint16_t *op = O + (size_t)row1 * ld + (size_t)h * kD + 2 * t;
#pragma unroll
        for (int j = 0; j < 16; ++j)
            *reinterpret_cast<uint32_t *>(op + 8 * j) = out_bf16x2<kMu>(c.o[4 * j + 2], c.o[4 * j + 3], f1, mu, j);
        if (t == 0) lse[(size_t)h * S + row1] = (c.m1 + log2f(z1)) * 0.6931471805599453f;
    }
}

/* max_g sv[h][g] over the head's G scale groups, in every lane of the warp */
static __device__ __forceinline__ float sv_max(const float *sv_h, int G, int lane)
{
    float m = 0.f;
    for (int i = lane; i < G; i += 32) m = fmaxf(m, sv_h[i]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    return m;
}

/* Empty O in registers, no row seen yet (every kernel's start). */
template <class C> static __device__ __forceinline__ void start_o(C &c)
{
#pragma unroll
    for (int i = 0; i < 64; ++i) c.o[i] = 0.f;
    c.m0 = c.m1 = -INFINITY;
    c.l0 = c.l1 = 0.f;
}

} // namespace

#endif
