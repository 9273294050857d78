/* sm90_wgmma.cuh — FP8 wgmma for the Hopper attention kernels: operand
 * descriptors, the fence / commit / wait protocol, the two GEMM shapes
 * (S = Q K^T from shared memory, O += P V with P from registers), and the
 * issue helpers the kernels call. Device code for sm_90a only (the includer
 * guards it). Layout facts (PTX ISA, checked against CUTLASS
 * cute/arch/mma_sm90_desc.hpp and mma_traits_sm90_gmma.hpp):
 *   descriptor  bits 0-13 start address >> 4, 16-29 LBO >> 4 (unused for
 *               swizzled K-major, 1 by convention), 32-45 SBO >> 4, 49-51
 *               base offset (0: tiles 1024-byte aligned), 62-63 layout
 *               (1 = 128-byte swizzle).
 *   accumulator m64nN f32: warp w of the warpgroup owns rows 16w..16w+15;
 *               d[4j + e]: row 16w + g + 8*(e >> 1), column 8j + 2t + (e & 1)
 *               (g = lane / 4, t = lane % 4).
 *   A registers m64nNk32 8-bit: a[r] byte b: row 16w + g + 8*(r & 1),
 *               k = 4t + b + 16*(r >> 1) (the mma.sync m16n8k32 A fragment). */
#ifndef H3_SM90_WGMMA_CUH
#define H3_SM90_WGMMA_CUH

#include <stdint.h>

#include "sm90_layout.cuh"

namespace sm90 {

/* ---- wgmma ---- */
/* K-major operand, 128-byte swizzle, rows of 128 bytes: 8-row atoms of 1024
 * bytes (SBO). The tile must start 1024-byte aligned; a k offset inside the
 * 128-byte row is added to the start address (the swizzle is applied to the
 * absolute address bits, as TMA wrote them). */
static __device__ __forceinline__ uint64_t desc_k128_sw128(uint32_t saddr)
{
    uint64_t d = 0;
    d |= (uint64_t)((saddr & 0x3FFFF) >> 4);
    d |= (uint64_t)1 << 16;             /* LBO: unused for swizzled K-major */
    d |= (uint64_t)(1024 >> 4) << 32;   /* SBO: 8 rows x 128 B */
    d |= (uint64_t)1 << 62;             /* 128-byte swizzle */
    return d;
}
static __device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> static __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accesses of in-flight accumulator registers
 * across wgmma issue / wait points (CUTLASS's warpgroup_fence_operand). */
static __device__ __forceinline__ void fence_reg(float &r) { asm volatile("" : "+f"(r)::"memory"); }
static __device__ __forceinline__ void fence_reg(uint32_t &r) { asm volatile("" : "+r"(r)::"memory"); }
template <typename T, int N> static __device__ __forceinline__ void fence_regs(T (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i) fence_reg(r[i]);
}

/* D[64x128] (+)= A[64x32] . B[128x32]^T, A and B from shared memory (descriptors). */
static __device__ __forceinline__ void wgmma_ss_m64n128k32(float (&d)[64], uint64_t da, uint64_t db, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
        :
          "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(accumulate));
}

/* D[64x128] = A[64x32] . B[128x32]^T (no accumulator input), A and B from
 * shared memory. The outputs-only constraints tell the compiler D's old
 * values are dead, so D's registers need not stay live before the GEMM. */
static __device__ __forceinline__ void wgmma_ss_m64n128k32_zero(float (&d)[64], uint64_t da, uint64_t db)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]),
          "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]),
          "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]),
          "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]),
          "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]),
          "=f"(d[40]), "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]),
          "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]),
          "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63])
        : "l"(da), "l"(db));
}

/* D[64x128] (+)= A[64x32] . B[128x32]^T, A from registers (ALayout_64x32), B from shared memory. */
static __device__ __forceinline__ void wgmma_rs_m64n128k32(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                                           int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        :
          "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

} // namespace sm90

namespace {

/* S = Q K^T for the K tile at sk_addr (async; commit group), accumulating
 * over the 4 k-steps of 32 bytes (+2 in the descriptor's address field);
 * the fences keep S's registers live across the issue (the two-consumer
 * kernel overlaps this GEMM with the previous tile's P V). */
static __device__ __forceinline__ void issue_qk(Consumer &c, uint64_t dq, uint32_t sk_addr)
{
    const uint64_t dk = sm90::desc_k128_sw128(sk_addr);
    sm90::fence_regs(c.s);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) sm90::wgmma_ss_m64n128k32(c.s, dq + 2 * kk, dk + 2 * kk, kk > 0);
    sm90::wgmma_commit();
    sm90::fence_regs(c.s);
}

/* S = Q K^T as issue_qk, without the fences that keep S's old values live
 * (the wg3 loop has no registers to spare for them between tiles). */
static __device__ __forceinline__ void issue_qk_fresh(Consumer &c, uint64_t dq, uint32_t sk_addr)
{
    const uint64_t dk = sm90::desc_k128_sw128(sk_addr);
    sm90::wgmma_fence();
    sm90::wgmma_ss_m64n128k32_zero(c.s, dq, dk);
#pragma unroll
    for (int kk = 1; kk < 4; ++kk) sm90::wgmma_ss_m64n128k32(c.s, dq + 2 * kk, dk + 2 * kk, 1);
    sm90::wgmma_commit();
    sm90::fence_regs(c.s);
}

/* acc (+)= P V for the V^T tile at sv_addr (async; commit group);
 * accumulate = 0 starts acc afresh. The production kernels start every
 * tile's P V from zero and add it to O in FP32 themselves: Hopper's FP8
 * wgmma adds into its accumulator keeping ~13 mantissa bits, truncating
 * (DeepSeek-V3 §3.5.2; SageAttention2 measured the same), so an O summed
 * over hundreds of key tiles inside the tensor cores loses every small
 * contribution that follows a large one -- on V with a mean, or on sharp
 * rows, several percent of O. Within one tile (4 k-steps) the loss is
 * ~2^-13 relative. */
static __device__ __forceinline__ void issue_pv_to(float (&acc)[64], uint32_t (&p)[4][4], uint32_t sv_addr,
                                                   bool accumulate)
{
    const uint64_t dv = sm90::desc_k128_sw128(sv_addr);
    sm90::fence_regs(acc);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) sm90::fence_reg(p[kk][r]);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) sm90::wgmma_rs_m64n128k32(acc, p[kk], dv + 2 * kk, accumulate || kk > 0);
    sm90::wgmma_commit();
    sm90::fence_regs(acc);
}

} // namespace

#endif
