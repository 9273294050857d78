/* sm90_ws.cuh — the two-consumer, warp-specialised Hopper attention kernel:
 * what runs for V without a mean (--smooth-v off).
 *
 * CTA = 128 queries of one head, 384 threads = 3 warpgroups:
 *   WG0      producer: setmaxnreg 24; one thread issues the TMA loads of Q
 *            (once) and of the K and V tiles into a ring of St stages
 *            (sm90_pipeline.cuh).
 *   WG1, WG2 consumers: setmaxnreg 240; each owns 64 query rows.
 *            S = Q K^T: 4 x wgmma m64n128k32 e4m3, A = Q and B = K from
 *            shared memory (K-major, 128-byte swizzle as TMA wrote them).
 *            O += P V: 4 x wgmma m64n128k32 e4m3, A = P from registers, B =
 *            the V^T tile [128 dims][128 key slots] (K-major). The
 *            accumulator of S gives a thread keys 8j + 2t + {0,1} of rows g,
 *            g+8; the A operand wants k-slots 4t..4t+3 and 16+4t..16+4t+3
 *            (same rows); n-chunks (4kk, 4kk+1) fill the first, (4kk+2,
 *            4kk+3) the second, which is exactly V's stored key order, so P
 *            needs no shuffle.
 * Each consumer overlaps inside its warpgroup: QK^T(n) and PV(n-1) are
 * issued together and the softmax of tile n runs while PV(n-1) is on the
 * tensor cores (FlashAttention-3's intra-warpgroup overlap). Every tile's
 * P V starts from zero in its own 64 registers and is added to O in FP32
 * (issue_pv_to explains why). */
#ifndef H3_SM90_WS_CUH
#define H3_SM90_WS_CUH

#include <cuda.h>

#include "sm90_epilogue.cuh"
#include "sm90_layout.cuh"
#include "sm90_pipeline.cuh"
#include "sm90_softmax.cuh"
#include "sm90_wgmma.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace {
/* O += pv, in FP32 (after the PV group has completed). */
static __device__ __forceinline__ void add_pv(Consumer &c)
{
#pragma unroll
    for (int i = 0; i < 64; ++i) c.o[i] += c.pv[i];
}
} // namespace
#endif

template <int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    h3k_attn_fp8_sm90_ws_kernel(const __grid_constant__ CUtensorMap tmQ, /* q8 as [H*S_pad][128] */
                                const __grid_constant__ CUtensorMap tmK, /* k8 as [H*S_pad][128] */
                                const __grid_constant__ CUtensorMap tmV, /* vt8 as [H*128][S_pad] */
                                const float *__restrict__ sq,            /* [H][G] */
                                const float *__restrict__ sk,            /* [H][G] */
                                const float *__restrict__ sv,            /* [H][G] */
                                const float *__restrict__ vmu,           /* unused: V is not smoothed here */
                                int S, int H, int S_pad, int nqt,
                                uint16_t *__restrict__ O, /* [S][H*128] bf16 */
                                float *__restrict__ lse)  /* [H][S] */
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int kConsumerWarps = 8; /* arrivals on an empty barrier */
    using L = SmemLayout<kStages>;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (sm90::smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = base + L::kOffK, sV = base + L::kOffV;
    const Bars<kStages> bars{base + L::kOffBar};

    /* q tiles inner: the CTAs resident at once share one head's K/V in L2 */
    const int qt = blockIdx.x % nqt, h = blockIdx.x / nqt;
    const int G = S_pad / kBN, nkt = (S + kBN - 1) / kBN;
    const int lane = threadIdx.x % 32;

    if (threadIdx.x == 0) init_bars(bars, kConsumerWarps);
    __syncthreads();

    /* warp-uniform by construction; the shuffle tells the compiler so, which
     * lets it keep the wgmma descriptors in uniform registers instead of
     * moving them there before every wgmma (CUTLASS does the same) */
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    if (wg == 0) {
        /* ---------------- producer ---------------- */
        sm90::setmaxnreg_dec<24>();
        if (threadIdx.x == 0)
            produce<kStages>(bars, sQ, sK, sV, &tmQ, &tmK, &tmV, 1, kBM, qt * kBM, h, S_pad, nkt);
    } else {
        /* ---------------- consumers ---------------- */
        sm90::setmaxnreg_inc<240>();
        const int wgi = wg - 1;
        const int tw = threadIdx.x % 128, w = tw / 32, g = lane / 4, t = lane % 4;
        const float *sk_h = sk + (size_t)h * G, *sv_h = sv + (size_t)h * G;

        float svmax = sv_max(sv_h, G, lane);
        const float sqq = sq[(size_t)h * G + qt];
        const float r256 = 256.f / svmax; /* P8's multiplier is sv[g] * r256 = 256 sv[g] / svmax */

        Consumer c;
        start_o(c);

        const uint64_t dq = sm90::desc_k128_sw128(sQ + wgi * (kTile / 2)); /* this WG's 64 rows */
        const int klast = S - (nkt - 1) * kBN;                             /* valid keys of the last tile */
        float alpha0, alpha1;

        sm90::mbar_wait(bars.qfull(), 0);
        {
            const float cs = (sqq * sk_h[0]) * kScaleLog2;
            sm90::mbar_wait(bars.kfull(0), 0);
            issue_qk(c, dq, sK);
            sm90::wgmma_wait<0>();
            sm90::fence_regs(c.s);
            release(bars.kempty(0), lane);
            const float em = sv_h[0] * r256; /* the multiplier, then its log2 and inverse */
            softmax(c, cs, nkt == 1 ? klast : kBN, t, alpha0, alpha1, __log2f(em), rcp_approx(em)); /* O = 0: no rescale */
            convert_p(c);
        }
        for (int n = 1; n < nkt; ++n) {
            const int st = n % kStages, sp = (n - 1) % kStages;
            const float skn = sk_h[n], svn = sv_h[n];
            sm90::mbar_wait(bars.kfull(st), (uint32_t)(n / kStages) & 1u);
            issue_qk(c, dq, sK + st * kTile);
            sm90::mbar_wait(bars.vfull(sp), (uint32_t)((n - 1) / kStages) & 1u);
            issue_pv_to(c.pv, c.p, sV + sp * kTile, false);
            sm90::wgmma_wait<1>(); /* S(n) done, PV(n-1) may still run */
            sm90::fence_regs(c.s);
            release(bars.kempty(st), lane);
            const float em = svn * r256;
            softmax(c, (sqq * skn) * kScaleLog2, n == nkt - 1 ? klast : kBN, t, alpha0, alpha1, __log2f(em),
                    rcp_approx(em));
            sm90::wgmma_wait<0>();
            sm90::fence_regs(c.pv);
            release(bars.vempty(sp), lane);
            add_pv(c); /* O += PV(n-1), both relative to the old max */
            rescale_o(c, alpha0, alpha1);
            convert_p(c);
        }
        {
            const int sp = (nkt - 1) % kStages;
            sm90::mbar_wait(bars.vfull(sp), (uint32_t)((nkt - 1) / kStages) & 1u);
            issue_pv_to(c.pv, c.p, sV + sp * kTile, false);
            sm90::wgmma_wait<0>();
            sm90::fence_regs(c.pv);
            release(bars.vempty(sp), lane);
            add_pv(c);
        }
        store_output<false>(c, svmax, qt * kBM + wgi * 64 + w * 16 + g, S, H, h, O, lse, vmu);
    }
#else
    (void)sq, (void)sk, (void)sv, (void)vmu, (void)S, (void)H, (void)S_pad, (void)nqt, (void)O, (void)lse;
#endif
}

#endif
