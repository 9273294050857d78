/* sm90_pipeline.cuh — the Hopper (sm_90a) attention kernels' data movement:
 * thin PTX wrappers for mbarriers, TMA (cp.async.bulk.tensor), named
 * barriers and setmaxnreg, and on top of them the K/V ring every kernel
 * uses: per stage a "full" barrier (one producer arrival plus the TMA's
 * transaction bytes) and an "empty" one (one arrival per consumer warp).
 * Device code for sm_90a only: the includer guards its use with
 * __CUDA_ARCH_FEAT_SM90_ALL. */
#ifndef H3_SM90_PIPELINE_CUH
#define H3_SM90_PIPELINE_CUH

#include <cuda.h>
#include <stdint.h>

#include "sm90_grid.h"
#include "sm90_layout.cuh"

namespace sm90 {

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* ---- mbarrier ---- */
static __device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
/* Makes the initialised barriers visible to the async proxy (TMA). */
static __device__ __forceinline__ void fence_barrier_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
static __device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
/* Waits until the phase with this parity has completed. On a fresh barrier
 * parity 1 (the "previous" phase) counts as completed: producers start there. */
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    asm volatile(
        "{\n.reg .pred p;\n"
        "LAB_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra LAB_WAIT;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}

/* Named barrier id over nthreads threads (a warpgroup: 128). */
static __device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t nthreads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

/* ---- TMA: 2D tiled load into shared memory, completing on an mbarrier ---- */
static __device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *tmap, uint32_t bar, int c0, int c1)
{
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
            dst),
        "l"((uint64_t)tmap), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
}
static __device__ __forceinline__ void prefetch_tmap(const void *tmap)
{
    asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)tmap) : "memory");
}

/* ---- register budget per warpgroup ---- */
template <int N> static __device__ __forceinline__ void setmaxnreg_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> static __device__ __forceinline__ void setmaxnreg_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

} // namespace sm90

namespace {

template <int St> struct Bars {
    uint32_t base;
    __device__ uint32_t qfull() const { return base; }
    __device__ uint32_t kfull(int s) const { return base + 8 * (1 + s); }
    __device__ uint32_t kempty(int s) const { return base + 8 * (1 + St + s); }
    __device__ uint32_t vfull(int s) const { return base + 8 * (1 + 2 * St + s); }
    __device__ uint32_t vempty(int s) const { return base + 8 * (1 + 3 * St + s); }
};

/* Thread 0: the ring's mbarriers (full: one arrival plus TMA bytes; empty:
 * one arrival per consumer warp). */
template <int St> static __device__ __forceinline__ void init_bars(const Bars<St> &bars, uint32_t consumer_warps)
{
    sm90::mbar_init(bars.qfull(), 1);
    for (int st = 0; st < St; ++st) {
        sm90::mbar_init(bars.kfull(st), 1);
        sm90::mbar_init(bars.vfull(st), 1);
        sm90::mbar_init(bars.kempty(st), consumer_warps);
        sm90::mbar_init(bars.vempty(st), consumer_warps);
    }
    sm90::fence_barrier_init();
}

/* Key tile n of head h (K rows row0 + 128 n.., V^T columns 128 n..) into
 * stage st of a ring, on its use number i (phase (i / St) & 1), once the
 * consumers have released the stage. */
template <int St>
static __device__ __forceinline__ void load_kv(const Bars<St> &bars, uint32_t sK, uint32_t sV, const CUtensorMap *tmK,
                                               const CUtensorMap *tmV, int row0, int h, int n, int i)
{
    const int st = i % St;
    const uint32_t ph = (uint32_t)(i / St) & 1u;
    sm90::mbar_wait(bars.kempty(st), ph ^ 1u);
    sm90::mbar_arrive_expect_tx(bars.kfull(st), kTile);
    sm90::tma_load_2d(sK + st * kTile, tmK, bars.kfull(st), 0, row0 + n * kBN);
    sm90::mbar_wait(bars.vempty(st), ph ^ 1u);
    sm90::mbar_arrive_expect_tx(bars.vfull(st), kTile);
    sm90::tma_load_2d(sV + st * kTile, tmV, bars.vfull(st), n * kBN, h * kD);
}

/* The producer thread's K/V loop: tile n into stage n % St. */
template <int St>
static __device__ __forceinline__ void produce_kv(const Bars<St> &bars, uint32_t sK, uint32_t sV, const CUtensorMap *tmK,
                                                  const CUtensorMap *tmV, int row0, int h, int nkt)
{
    for (int n = 0; n < nkt; ++n) load_kv<St>(bars, sK, sV, tmK, tmV, row0, h, n, n);
}

/* The producer thread's whole work for one CTA: the tensor maps prefetched,
 * the CTA's queries (rows q0.. of head h) as nbox boxes of box_rows rows
 * into sQ, then the K/V ring. Rows past the head's S_pad (only the
 * three-consumer kernel's 192-row tiles reach them) are the next head's
 * (loaded, their output rows never stored) or, for the last head, outside
 * the map: zero-filled. */
template <int St>
static __device__ __forceinline__ void produce(const Bars<St> &bars, uint32_t sQ, uint32_t sK, uint32_t sV,
                                               const CUtensorMap *tmQ, const CUtensorMap *tmK, const CUtensorMap *tmV,
                                               int nbox, int box_rows, int q0, int h, int S_pad, int nkt)
{
    sm90::prefetch_tmap(tmQ);
    sm90::prefetch_tmap(tmK);
    sm90::prefetch_tmap(tmV);
    const int row0 = h * S_pad;
    sm90::mbar_arrive_expect_tx(bars.qfull(), (uint32_t)(nbox * box_rows * kD));
    for (int i = 0; i < nbox; ++i)
        sm90::tma_load_2d(sQ + (uint32_t)(i * box_rows * kD), tmQ, bars.qfull(), 0, row0 + q0 + box_rows * i);
    produce_kv<St>(bars, sK, sV, tmK, tmV, row0, h, nkt);
}

/* The producer thread's whole work for a split CTA of the three-consumer
 * kernel: its 64 queries (rows q0.. of head h) as one box into sQ on WG 0's
 * qfull, then the three WGs' key ranges round robin, each into its own ring
 * (WG j's: K[St] at sK + j ring, then V[St], then its mbarriers). */
template <int St>
static __device__ __forceinline__ void produce_split(uint32_t sQ, uint32_t sK, uint32_t ring, const CUtensorMap *tmQ,
                                                     const CUtensorMap *tmK, const CUtensorMap *tmV, int q0, int h,
                                                     int S_pad, int nkt)
{
    sm90::prefetch_tmap(tmQ);
    sm90::prefetch_tmap(tmK);
    sm90::prefetch_tmap(tmV);
    const int row0 = h * S_pad;
    const Bars<St> b0{sK + 2 * St * kTile};
    sm90::mbar_arrive_expect_tx(b0.qfull(), 64u * kD);
    sm90::tma_load_2d(sQ, tmQ, b0.qfull(), 0, row0 + q0);
    const int len = (nkt + 2) / 3; /* the longest range */
    for (int i = 0; i < len; ++i)
        for (int j = 0; j < 3; ++j) {
            const int n = h3_sm90_split_first_tile(j, nkt) + i;
            if (n >= h3_sm90_split_first_tile(j + 1, nkt)) continue;
            const uint32_t k = sK + (uint32_t)j * ring;
            load_kv<St>(Bars<St>{k + 2 * St * kTile}, k, k + St * kTile, tmK, tmV, row0, h, n, i);
        }
}

/* A consumer warp is done with a stage: one arrival on its empty barrier. */
static __device__ __forceinline__ void release(uint32_t bar, int lane)
{
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(bar);
}

} // namespace

#endif
