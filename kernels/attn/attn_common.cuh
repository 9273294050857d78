/* attn_common.cuh — device helpers shared by the FP8 attention kernels
 * (attn_fp8_mma.cu, attn_fp8_sm90.cu): the softmax constant, exp2, the P and O
 * conversions, and the sm_80+ warp-level PTX (cp.async, ldmatrix, mma.sync
 * e4m3). Everything is __forceinline__ and side-effect free apart from the
 * named memory operation; nothing here depends on a tile shape.
 *
 * Numerics (cpu_ref.h `attention`):
 *   H3A_SCALE_LOG2E = float(D^-0.5 * log2 e), the same float as the CPU's
 *     CPU_ATTN_SCALE_LOG2E, so c = (sq * sk) * H3A_SCALE_LOG2E rounds alike.
 *   h3a_exp2: ex2.approx.ftz.f32 — max rel. error 2^-22 (PTX ISA), -inf -> +0,
 *     far below the e4m3 rounding (2^-4) that P goes through next.
 *   h3a_e4m3x4: cvt.rn.satfinite.e4m3x2.f32, RNE with finite saturation, the
 *     rounding of h3_f32_to_e4m3 (numerics.h).
 *   h3a_bf16x2: cvt.rn.bf16x2.f32, RNE, as h3_f32_to_bf16. */
#ifndef H3_ATTN_COMMON_CUH
#define H3_ATTN_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#define H3A_SCALE_LOG2E ((float)(0.08838834764831845 * 1.4426950408889634)) /* D^-0.5 log2 e, D = 128 */
#define H3A_LN2 0.69314718055994531f

__device__ __forceinline__ float h3a_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Four floats -> four e4m3 codes in one word, f0 in byte 0 (the lowest
 * k-slot of an mma operand register). The PTX puts its first source in the
 * upper byte of each pair. */
__device__ __forceinline__ uint32_t h3a_e4m3x4(float f0, float f1, float f2, float f3)
{
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(f1), "f"(f0));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(f3), "f"(f2));
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* Two floats -> two BF16 (lo in the low half), RNE. */
__device__ __forceinline__ uint32_t h3a_bf16x2(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ uint32_t h3a_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* ---- cp.async (sm_80+): 16-byte global -> shared, L2 only (.cg) ---- */
__device__ __forceinline__ void h3a_cp_async16(uint32_t smem, const void *gmem)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ __forceinline__ void h3a_cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void h3a_cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* ---- ldmatrix: four 8x16-byte matrices; lanes 8i..8i+7 give the row
 * addresses of matrix i; lane l receives bytes 4(l%4)..4(l%4)+3 of row l/4 of
 * each matrix, in r[0..3]. For 8-bit data this is exactly the m16n8k32 A/B
 * fragment of one 16-byte k-chunk (PTX ISA, mma.m16n8k32 .e4m3 fragments). */
__device__ __forceinline__ void h3a_ldsm_x4(uint32_t smem, uint32_t r[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem));
}

/* ---- mma.sync m16n8k32 e4m3 x e4m3 -> f32 (sm_89+), d += a b.
 * g = lane / 4, t = lane % 4:
 *   a[0] row g,   k 4t..4t+3     a[1] row g+8, k 4t..4t+3
 *   a[2] row g,   k 16+4t..      a[3] row g+8, k 16+4t..
 *   b[0] k 4t..4t+3 of column g  b[1] k 16+4t.. of column g
 *   d[0], d[1] (g, 2t), (g, 2t+1);  d[2], d[3] (g+8, 2t), (g+8, 2t+1) */
__device__ __forceinline__ void h3a_mma_e4m3(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)d; (void)a; (void)b0; (void)b1;
#endif
}

#endif
