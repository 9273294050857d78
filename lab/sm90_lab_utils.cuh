/* sm90_lab_utils.cuh — PTX wrappers only the lab uses: the FP16-accumulator
 * FP8 wgmma (the lab's FP16-S loop, the overlap probe) and the proxy fence
 * for wgmma operands written by threads. Production wrappers:
 * kernels/attn/sm90_pipeline.cuh, sm90_wgmma.cuh. */
#ifndef H3_SM90_LAB_UTILS_CUH
#define H3_SM90_LAB_UTILS_CUH

#include <stdint.h>

#include "sm90_pipeline.cuh"
#include "sm90_wgmma.cuh"

namespace sm90 {

/* Generic-proxy shared-memory writes made visible to the async proxy
 * (wgmma operands written by threads). */
static __device__ __forceinline__ void fence_proxy_async_smem()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* As wgmma_ss_m64n128k32 with an FP16 accumulator, 32 registers: d[j]
 * holds as f16x2 the pair the f32 layout keeps in d32[2j], d32[2j + 1]
 * (two adjacent columns of one row). */
static __device__ __forceinline__ void wgmma_ss_m64n128k32_f16(uint32_t (&d)[32], uint64_t da, uint64_t db, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f16.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
        :
          "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
        : "l"(da), "l"(db), "r"(accumulate));
}

/* wgmma_ss_m64n128k32_f16 with no accumulator input (D's old values dead). */
static __device__ __forceinline__ void wgmma_ss_m64n128k32_f16_zero(uint32_t (&d)[32], uint64_t da, uint64_t db)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f16.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]), "=r"(d[4]), "=r"(d[5]), "=r"(d[6]), "=r"(d[7]),
          "=r"(d[8]), "=r"(d[9]), "=r"(d[10]), "=r"(d[11]), "=r"(d[12]), "=r"(d[13]), "=r"(d[14]), "=r"(d[15]),
          "=r"(d[16]), "=r"(d[17]), "=r"(d[18]), "=r"(d[19]), "=r"(d[20]), "=r"(d[21]), "=r"(d[22]), "=r"(d[23]),
          "=r"(d[24]), "=r"(d[25]), "=r"(d[26]), "=r"(d[27]), "=r"(d[28]), "=r"(d[29]), "=r"(d[30]), "=r"(d[31])
        : "l"(da), "l"(db));
}

} // namespace sm90

#endif
