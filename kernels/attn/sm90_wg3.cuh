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
 * the table does not fit and the launch runs the kernel without it.
 * kFinite: the running max starts at -FLT_MAX, so the softmax needs no
 * -inf guards (sm90_softmax.cuh); same values.
 * Split CTAs (sm90_grid.h says which CTAs and why): 64 queries, the three
 * consumers each on a third of the key tiles from a ring of their own
 * (SmemLayout3Split), the same loop; then WGs 1 and 2 leave their (O, m, l)
 * in their rings and WG 0 merges the three, rescaled to one running max as
 * the loop rescales from tile to tile, and writes the rows. The sums then
 * run in another order than a whole CTA's: the FP32 rounding differs, the
 * contract does not. */
#ifndef H3_SM90_WG3_CUH
#define H3_SM90_WG3_CUH

#include <cuda.h>
#include <float.h>

#include "sm90_epilogue.cuh"
#include "sm90_grid.h"
#include "sm90_layout.cuh"
#include "sm90_pipeline.cuh"
#include "sm90_softmax.cuh"
#include "sm90_wgmma.cuh"

/* Consumer WG 0 of a split CTA: its (O, m, l) merged with WG 1's and WG 2's
 * partials, this thread's slots at p1 and p2 (partial_out's layout): one
 * running max M over the three, each part scaled by 2^(m - M), as the loop
 * rescales O from one key tile to the next. */
static __device__ __forceinline__ void merge_partials(Consumer &c, uint32_t p1, uint32_t p2)
{
    float4 a, b;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(a.x), "=f"(a.y), "=f"(a.z), "=f"(a.w) : "r"(p1 + 16u * 2048u) : "memory");
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(b.x), "=f"(b.y), "=f"(b.z), "=f"(b.w) : "r"(p2 + 16u * 2048u) : "memory");
    const float M0 = fmaxf(c.m0, fmaxf(a.x, b.x)), M1 = fmaxf(c.m1, fmaxf(a.y, b.y));
    const float e0 = ex2(c.m0 - M0), e1 = ex2(c.m1 - M1);
    const float f0 = ex2(a.x - M0), f1 = ex2(a.y - M1), g0 = ex2(b.x - M0), g1 = ex2(b.y - M1);
    c.l0 = c.l0 * e0 + a.z * f0 + b.z * g0;
    c.l1 = c.l1 * e1 + a.w * f1 + b.w * g1;
    c.m0 = M0;
    c.m1 = M1;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(a.x), "=f"(a.y), "=f"(a.z), "=f"(a.w)
                     : "r"(p1 + 2048u * (uint32_t)j)
                     : "memory");
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(b.x), "=f"(b.y), "=f"(b.z), "=f"(b.w)
                     : "r"(p2 + 2048u * (uint32_t)j)
                     : "memory");
        c.o[4 * j + 0] = c.o[4 * j + 0] * e0 + a.x * f0 + b.x * g0;
        c.o[4 * j + 1] = c.o[4 * j + 1] * e0 + a.y * f0 + b.y * g0;
        c.o[4 * j + 2] = c.o[4 * j + 2] * e1 + a.z * f1 + b.z * g1;
        c.o[4 * j + 3] = c.o[4 * j + 3] * e1 + a.w * f1 + b.w * g1;
    }
}

/* Consumer WG 1 or 2 of a split CTA: its (O, m, l) into its own ring (free
 * once its loop is done) at p: O as 16 float4 2048 bytes apart (the 128
 * threads' float4 side by side), then (m0, m1, l0, l1). */
static __device__ __forceinline__ void partial_out(const Consumer &c, uint32_t p)
{
#pragma unroll
    for (int j = 0; j < 16; ++j)
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(p + 2048u * (uint32_t)j), "f"(c.o[4 * j + 0]),
                     "f"(c.o[4 * j + 1]), "f"(c.o[4 * j + 2]), "f"(c.o[4 * j + 3])
                     : "memory");
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(p + 16u * 2048u), "f"(c.m0), "f"(c.m1), "f"(c.l0),
                 "f"(c.l1)
                 : "memory");
}

/* One consumer warpgroup's share of a CTA (or of a persistent CTA's item):
 * what its key-tile loop reads. */
struct Wg3Rows {
    uint64_t dq;              /* its 64 query rows in shared memory, as a wgmma descriptor */
    uint32_t sK;              /* its ring: K[St], V[St], then the mbarriers (Bars) */
    uint32_t tb;              /* with kTab: its key tiles' entries of the scalar table */
    const float *sk, *sv;     /* the scales of its key tiles, from its first */
    float sqq, r256;          /* its queries' scale; 256 / max sv of the head */
    int len, ilast, klast;    /* its key tiles; the ragged one's index (-1: none of its); valid keys there */
};

/* One 16-byte entry of the softmax-scalar table at addr: (cs, lmult, imult, 0). */
static __device__ __forceinline__ void store_table_entry(uint32_t addr, float cs, float lmult, float imult)
{
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(cs), "f"(lmult), "f"(imult), "f"(0.f)
                 : "memory");
}

/* kTab: the warpgroup's softmax scalars, one 16-byte entry per key tile,
 * computed once (then a named barrier over its 128 threads). */
static __device__ __forceinline__ void write_table(const Wg3Rows &r, int tw, int wgi)
{
    for (int i = tw; i < r.len; i += 128) {
        const TileScalars ts = tile_scalars(r.sqq, r.sk[i], r.sv[i], r.r256);
        store_table_entry(r.tb + 16u * (uint32_t)i, ts.cs, ts.lmult, ts.imult);
    }
    sm90::named_bar_sync(1 + wgi, 128);
}

/* The warpgroup's loop over its key tiles: QK^T(i), softmax(i), P V(i)
 * into the S registers, O = fma(O, alpha, PV). Tile i is the ring's use u0 +
 * i (stage and phase), so that a persistent CTA's ring runs on from item to
 * item. */
template <int kStages, bool kTab, bool kFinite>
static __device__ __forceinline__ void run_tiles(Consumer &c, const Wg3Rows &r, int t, int lane, int u0 = 0)
{
    const Bars<kStages> bars{r.sK + 2 * kStages * kTile};
    uint32_t use = (uint32_t)u0; /* unsigned: the stage and phase are a mask and a shift */
    for (int i = 0; i < r.len; ++i, ++use) {
        const int st = (int)(use % kStages);
        const uint32_t ph = (use / kStages) & 1u;
        float skn = 0.f, svn = 0.f; /* kTab: the tile's scalars ts from the table instead */
        TileScalars ts{};
        if constexpr (kTab) {
            float pad;
            asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                         : "=f"(ts.cs), "=f"(ts.lmult), "=f"(ts.imult), "=f"(pad)
                         : "r"(r.tb + 16u * (uint32_t)i)
                         : "memory");
            (void)pad;
        } else {
            skn = r.sk[i], svn = r.sv[i];
        }
        sm90::mbar_wait(bars.kfull(st), ph);
        issue_qk_fresh(c, r.dq, r.sK + st * kTile);
        sm90::wgmma_wait<0>();
        sm90::fence_regs(c.s);
        release(bars.kempty(st), lane);
        if constexpr (!kTab) ts = tile_scalars(r.sqq, skn, svn, r.r256);
        float alpha0, alpha1;
        softmax<kFinite>(c, ts.cs, i == r.ilast ? r.klast : kBN, t, alpha0, alpha1, ts.lmult, ts.imult);
        convert_p(c);
        sm90::mbar_wait(bars.vfull(st), ph);
        auto &pv = c.s; /* P V of this tile, from zero */
        issue_pv_to(pv, c.p, r.sK + (kStages + st) * kTile, false);
        sm90::wgmma_wait<0>();
        sm90::fence_regs(pv);
        release(bars.vempty(st), lane);
        fold_pv(c, pv, alpha0, alpha1);
    }
}

/* One CTA of the grid (sm90_grid.h): a whole CTA's 192 queries or a split
 * CTA's 64, from the barriers' initialisation to the stores. The kernel
 * below runs one per block; the lab's persistent variant runs its split
 * CTAs through it. */
template <int kStages, bool kMu, bool kTab, bool kFinite>
static __device__ __forceinline__ void wg3_cta(const CUtensorMap *tmQ, const CUtensorMap *tmK, const CUtensorMap *tmV,
                                               const float *__restrict__ sq, const float *__restrict__ sk,
                                               const float *__restrict__ sv, const float *__restrict__ vmu, int S,
                                               int H, int S_pad, const h3_sm90_cta cta, uint16_t *__restrict__ O,
                                               float *__restrict__ lse)
{
    using L = SmemLayout3<kStages>;
    using LS = SmemLayout3Split<kStages>;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (sm90::smem_u32(smem_raw) + 1023u) & ~1023u;
    const int h = cta.h;
    const int G = S_pad / kBN, nkt = (S + kBN - 1) / kBN;
    const int lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        if (cta.split) {
            for (int j = 0; j < kWg3Consumers; ++j)
                init_bars(Bars<kStages>{base + LS::kOffK + LS::kRing * j + 2 * kStages * kTile}, 4);
        } else {
            init_bars(Bars<kStages>{base + L::kOffBar}, 4 * kWg3Consumers);
        }
    }
    __syncthreads();

    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    if (wg == 0) {
        sm90::setmaxnreg_dec<24>();
        if (threadIdx.x == 0) {
            if (cta.split)
                produce_split<kStages>(base, base + LS::kOffK, LS::kRing, tmQ, tmK, tmV, cta.row0, h, S_pad, nkt);
            else
                produce<kStages>(Bars<kStages>{base + L::kOffBar}, base, base + L::kOffK, base + L::kOffV, tmQ, tmK,
                                 tmV, 3, 64, cta.row0, h, S_pad, nkt);
        }
    } else {
        sm90::setmaxnreg_inc<160>();
        const int wgi = wg - 1;
        const int tw = threadIdx.x % 128, w = tw / 32, g = lane / 4, t = lane % 4;
        const float *sk_h = sk + (size_t)h * G, *sv_h = sv + (size_t)h * G;
        float svmax = sv_max(sv_h, G, lane);
        /* This WG's query rows, key tiles [n0, n0 + len), ring (K at sK, V
         * and the mbarriers after it) and table: a whole CTA's WGs take 64
         * rows each and every key tile from the shared ring; a split CTA's
         * take the same 64 rows and a third of the tiles each, from a ring
         * of their own. The loop counts i from 0: the table, the scales and
         * the ragged tile's index (ilast, -1 if not this WG's) are offset. */
        int qrow0, n0, len;
        uint32_t sQw, sK, tb, qbar;
        if (cta.split) {
            qrow0 = cta.row0, n0 = h3_sm90_split_first_tile(wgi, nkt), len = h3_sm90_split_first_tile(wgi + 1, nkt) - n0;
            sQw = base, sK = base + LS::kOffK + (uint32_t)wgi * LS::kRing;
            tb = base + LS::kOffTab + 16u * (uint32_t)n0; /* one table, each WG its own range */
            qbar = base + LS::kOffK + 2 * kStages * kTile; /* WG 0's: the Q box arrives there */
        } else {
            qrow0 = cta.row0 + wgi * 64, n0 = 0, len = nkt;
            sQw = base + wgi * (kTile / 2), sK = base + L::kOffK, tb = base + L::kOffTab + (uint32_t)(wgi * nkt) * 16u;
            qbar = base + L::kOffBar;
        }
        const int gq = min(qrow0 / kBN, G - 1); /* rows past S_pad: any valid scale, never written */
        const float sqq = sq[(size_t)h * G + gq];
        const float r256 = 256.f / svmax;

        Consumer c;
        start_o(c);
        if constexpr (kFinite) c.m0 = c.m1 = -FLT_MAX; /* softmax's kFinite: each WG's every tile has a valid key */

        const Wg3Rows r{sm90::desc_k128_sw128(sQw), sK, tb, sk_h + n0, sv_h + n0, sqq, r256, len,
                        n0 + len == nkt ? len - 1 : -1, S - (nkt - 1) * kBN};
        if constexpr (kTab) write_table(r, tw, wgi);
        sm90::mbar_wait(qbar, 0);
        run_tiles<kStages, kTab, kFinite>(c, r, t, lane);
        if (cta.split) {
            const uint32_t slot = base + LS::kOffK + 16u * (uint32_t)tw; /* + ring of WG j: its partial */
            if (wgi != 0) partial_out(c, slot + (uint32_t)wgi * LS::kRing);
            sm90::named_bar_sync(4, 128 * kWg3Consumers);
            if (wgi == 0) merge_partials(c, slot + LS::kRing, slot + 2u * LS::kRing);
        }
        if (!cta.split || wgi == 0) store_output<kMu>(c, svmax, qrow0 + w * 16 + g, S, H, h, O, lse, vmu);
    }
}

template <int kStages, bool kMu, bool kTab, bool kFinite = false>
__global__ void __launch_bounds__(kWg3Threads, 1)
    h3k_attn_fp8_sm90_wg3_kernel(const __grid_constant__ CUtensorMap tmQ, /* q8 as [H*S_pad][128], 64-row boxes */
                                 const __grid_constant__ CUtensorMap tmK, const __grid_constant__ CUtensorMap tmV,
                                 const float *__restrict__ sq, const float *__restrict__ sk,
                                 const float *__restrict__ sv, const float *__restrict__ vmu, int S, int H,
                                 int S_pad, const __grid_constant__ h3_sm90_grid grid, uint16_t *__restrict__ O,
                                 float *__restrict__ lse)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    wg3_cta<kStages, kMu, kTab, kFinite>(&tmQ, &tmK, &tmV, sq, sk, sv, vmu, S, H, S_pad,
                                         h3_sm90_grid_cta(&grid, (int)blockIdx.x), O, lse);
#else
    (void)sq, (void)sk, (void)sv, (void)vmu, (void)S, (void)H, (void)S_pad, (void)grid, (void)O, (void)lse;
#endif
}

#endif
