/* sm90_layout.cuh — the shapes of the Hopper attention kernels: tile sizes,
 * each kernel's shared-memory layout, and the registers of one consumer
 * thread. Host and device code both use it (the launch sizes shared memory
 * from these layouts).
 *
 * Tiles: a key tile is 128 keys = one online-softmax step = one scale group
 * of the FP8 contract; Q, K and V^T tiles are 128 rows x 128 bytes (e4m3),
 * 1024-byte aligned for the 128-byte swizzle TMA writes (the pattern repeats
 * every 8 rows x 128 B). */
#ifndef H3_SM90_LAYOUT_CUH
#define H3_SM90_LAYOUT_CUH

#include <stdint.h>

namespace {

constexpr int kD = 128;           /* head dim = bytes per row of Q/K tiles */
constexpr int kBM = 128;          /* queries per CTA of the two-consumer kernel (2 consumer WGs x 64) */
constexpr int kBN = 128;          /* keys per tile = online-softmax step = scale group */
constexpr int kThreads = 384;     /* the two-consumer kernel: producer WG + 2 consumer WGs */
constexpr uint32_t kTile = 16384; /* 128 x 128 e4m3 */
constexpr long long kSmemMax = 227 * 1024; /* sm_90's dynamic shared memory per block, at most */

/* The two-consumer kernel, a ring of St stages: Q | K[St] | V[St] | mbarriers. */
template <int St> struct SmemLayout {
    static constexpr uint32_t kOffK = kTile, kOffV = kTile * (1 + St), kOffBar = kTile * (1 + 2 * St);
    /* (also a use of kOffK and kOffV in passes for GPUs without the kernel) */
    static_assert(kOffV == kOffK + St * kTile && kOffBar == kOffV + St * kTile, "Q | K[St] | V[St] back to back");
    static constexpr int kBytes = (int)kOffBar + 128 + 1024; /* + barriers + alignment slack */
    static_assert(8 * (1 + 4 * St) <= 128, "mbarriers overflow their 128 bytes");
    static_assert(kBytes <= kSmemMax, "over the sm_90 shared-memory limit per block");
};

/* The three-consumer kernel: 192 queries per CTA, 64 per consumer WG, Q as
 * three 64-row boxes (24 KB) | K[St] | V[St] | mbarriers | the per-tile
 * softmax scalars (16 bytes per key tile and consumer WG, when the kernel
 * keeps that table; the launch adds its size, so it is beyond kBytes). */
constexpr int kWg3Rows = 192, kWg3Threads = 512, kWg3Consumers = 3;
template <int St> struct SmemLayout3 {
    static constexpr uint32_t kOffK = 3 * (kTile / 2), kOffV = kOffK + St * kTile, kOffBar = kOffV + St * kTile,
                              kOffTab = kOffBar + 128;
    static constexpr int kBytes = (int)kOffBar + 128 + 1024;
    static constexpr int kTabBytesPerTile = 16 * kWg3Consumers;
    static_assert(kBytes <= kSmemMax, "over the sm_90 shared-memory limit per block");
};

/* The same kernel's split CTAs (sm90_grid.h): 64 queries (one 64-row box,
 * 8 KB) | per consumer WG its own ring, K[St] | V[St] | its mbarriers, each
 * ring kRing bytes apart (1024-aligned) | one softmax-scalar table of 16
 * bytes per key tile (all three WGs share the query rows, so the scalars),
 * beyond kBytes. As in SmemLayout3, a ring's mbarriers are 2 St tiles past
 * its K, so that a consumer derives both from one address. After its loop
 * a WG's ring holds its partial (O, m, l) for the merge: kPartBytes. */
template <int St> struct SmemLayout3Split {
    static constexpr uint32_t kOffK = kTile / 2, kRing = 2 * St * kTile + 1024,
                              kOffTab = kOffK + kWg3Consumers * kRing;
    static constexpr int kBytes = (int)kOffTab + 1024;
    static constexpr int kTabBytesPerTile = 16;
    static constexpr uint32_t kPartBytes = 17 * 128 * 16; /* 16 float4 of O and one of (m0, m1, l0, l1) per thread */
    static_assert(kPartBytes <= 2 * St * kTile, "a WG's partial fits its ring");
    static_assert(8 * (1 + 4 * St) <= 1024, "a ring's mbarriers fit behind it");
    static_assert(kBytes <= kSmemMax, "over the sm_90 shared-memory limit per block");
};
static_assert(SmemLayout3<2>::kOffBar == SmemLayout3<2>::kOffK + 2 * 2 * kTile, "mbarriers 2 St tiles past K");

static_assert(kD == 128 && kBN == 128 && kBM == 128, "tile shapes are baked into the fragment code");

/* Per consumer thread: its two rows' online-softmax state and fragments. */
struct Consumer {
    float s[64];      /* S accumulator (raw dots), then p; the three-consumer kernel's P V after that */
    float o[64];      /* O, FP32 in registers: never a tensor-core accumulator */
    float pv[64];     /* the two-consumer kernel's P V of one key tile, from the tensor cores */
    uint32_t p[4][4]; /* P8 as wgmma A fragments, one [4] per 32-key k-step */
    float m0, m1, l0, l1;
};

} // namespace

#endif
