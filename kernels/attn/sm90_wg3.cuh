/* sm90_wg3.cuh — the three-consumer Hopper attention kernel: what runs for
 * smoothed V (dit_block's default).
 *
 * CTA = 192 queries of one head, 512 threads = 4 warpgroups: WG0 the
 * producer (Q as three 64-row boxes, then the K/V ring, sm90_pipeline.cuh),
 * WG1..WG3 consumers with 64 rows each and 160 registers (setmaxnreg). Each
 * consumer runs the in-order loop QK^T(n), softmax(n), PV(n); the overlap
 * comes from three independent warpgroups sharing the tensor cores and the
 * exp unit rather than from pipelining inside one (a single warpgroup's loop
 * is a serial chain that leaves both units half idle).
 * Registers: 64 for S, 64 for O, 16 for P -- none for a separate P V tile.
 * So each tile's P V goes into the S registers, free once P8 is packed,
 * starting from zero, and is added to O in FP32 after the wait:
 * O = fma(O, alpha, PV) (the rescale to the new running max comes with the
 * add). O never enters the tensor cores' truncating accumulator (issue_pv_to
 * says why that matters).
 * kMu: V was smoothed, its mean is added in the epilogue. kTab: each key
 * tile's softmax scalars (cs, log2 and inverse of P8's multiplier) are
 * computed once per CTA into a table in shared memory (16 bytes per key tile
 * and consumer WG, beyond SmemLayout3::kBytes), which the loop reads with
 * one 16-byte load instead of two global loads, their address arithmetic, a
 * MUFU.LG2 and a MUFU.RCP per tile: the same arithmetic. Past 376,448 tokens
 * the table does not fit and the launch runs the kernel without it. */
#ifndef H3_SM90_WG3_CUH
#define H3_SM90_WG3_CUH

#include <cuda.h>

#include "sm90_epilogue.cuh"
#include "sm90_layout.cuh"
#include "sm90_pipeline.cuh"
#include "sm90_softmax.cuh"
#include "sm90_wgmma.cuh"

template <int kStages, bool kMu, bool kTab>
__global__ void __launch_bounds__(kWg3Threads, 1)
    h3k_attn_fp8_sm90_wg3_kernel(const __grid_constant__ CUtensorMap tmQ, /* q8 as [H*S_pad][128], 64-row boxes */
                                 const __grid_constant__ CUtensorMap tmK, const __grid_constant__ CUtensorMap tmV,
                                 const float *__restrict__ sq, const float *__restrict__ sk,
                                 const float *__restrict__ sv, const float *__restrict__ vmu, int S, int H,
                                 int S_pad, int nqt, uint16_t *__restrict__ O, float *__restrict__ lse)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using L = SmemLayout3<kStages>;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (sm90::smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = base + L::kOffK, sV = base + L::kOffV;
    const Bars<kStages> bars{base + L::kOffBar};

    const int qt = blockIdx.x % nqt, h = blockIdx.x / nqt;
    const int G = S_pad / kBN, nkt = (S + kBN - 1) / kBN;
    const int lane = threadIdx.x % 32;

    if (threadIdx.x == 0) init_bars(bars, 4 * kWg3Consumers);
    __syncthreads();

    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    if (wg == 0) {
        sm90::setmaxnreg_dec<24>();
        if (threadIdx.x == 0)
            produce<kStages>(bars, sQ, sK, sV, &tmQ, &tmK, &tmV, 3, 64, qt * kWg3Rows, h, S_pad, nkt);
    } else {
        sm90::setmaxnreg_inc<160>();
        const int wgi = wg - 1;
        const int tw = threadIdx.x % 128, w = tw / 32, g = lane / 4, t = lane % 4;
        const float *sk_h = sk + (size_t)h * G, *sv_h = sv + (size_t)h * G;
        float svmax = sv_max(sv_h, G, lane);
        const int qrow0 = qt * kWg3Rows + wgi * 64; /* this WG's first query */
        const int gq = min(qrow0 / kBN, G - 1);    /* rows past S_pad: any valid scale, never written */
        const float sqq = sq[(size_t)h * G + gq];
        const float r256 = 256.f / svmax;

        Consumer c;
        start_o(c);

        const uint64_t dq = sm90::desc_k128_sw128(sQ + wgi * (kTile / 2));
        const int klast = S - (nkt - 1) * kBN;
        const uint32_t tb = base + L::kOffTab + (uint32_t)(wgi * nkt) * 16u; /* kTab: this WG's table */
        if constexpr (kTab) {
            for (int n = tw; n < nkt; n += 128) {
                const TileScalars ts = tile_scalars(sqq, sk_h[n], sv_h[n], r256);
                asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(tb + 16u * (uint32_t)n), "f"(ts.cs),
                             "f"(ts.lmult), "f"(ts.imult), "f"(0.f)
                             : "memory");
            }
            sm90::named_bar_sync(1 + wgi, 128);
        }
        sm90::mbar_wait(bars.qfull(), 0);
        for (int n = 0; n < nkt; ++n) {
            const int st = n % kStages;
            const uint32_t ph = (uint32_t)(n / kStages) & 1u;
            float skn = 0.f, svn = 0.f; /* kTab: the tile's scalars ts from the table instead */
            TileScalars ts{};
            if constexpr (kTab) {
                float pad;
                asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                             : "=f"(ts.cs), "=f"(ts.lmult), "=f"(ts.imult), "=f"(pad)
                             : "r"(tb + 16u * (uint32_t)n)
                             : "memory");
                (void)pad;
            } else {
                skn = sk_h[n], svn = sv_h[n];
            }
            sm90::mbar_wait(bars.kfull(st), ph);
            issue_qk_fresh(c, dq, sK + st * kTile);
            sm90::wgmma_wait<0>();
            sm90::fence_regs(c.s);
            release(bars.kempty(st), lane);
            if constexpr (!kTab) ts = tile_scalars(sqq, skn, svn, r256);
            float alpha0, alpha1;
            softmax(c, ts.cs, n == nkt - 1 ? klast : kBN, t, alpha0, alpha1, ts.lmult, ts.imult);
            convert_p(c);
            sm90::mbar_wait(bars.vfull(st), ph);
            auto &pv = c.s; /* P V of this tile, from zero */
            issue_pv_to(pv, c.p, sV + st * kTile, false);
            sm90::wgmma_wait<0>();
            sm90::fence_regs(pv);
            release(bars.vempty(st), lane);
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                c.o[4 * j + 0] = fmaf(c.o[4 * j + 0], alpha0, pv[4 * j + 0]);
                c.o[4 * j + 1] = fmaf(c.o[4 * j + 1], alpha0, pv[4 * j + 1]);
                c.o[4 * j + 2] = fmaf(c.o[4 * j + 2], alpha1, pv[4 * j + 2]);
                c.o[4 * j + 3] = fmaf(c.o[4 * j + 3], alpha1, pv[4 * j + 3]);
            }
        }
        store_output<kMu>(c, svmax, qrow0 + w * 16 + g, S, H, h, O, lse, vmu);
    }
#else
    (void)sq, (void)sk, (void)sv, (void)vmu, (void)S, (void)H, (void)S_pad, (void)nqt, (void)O, (void)lse;
#endif
}

#endif
