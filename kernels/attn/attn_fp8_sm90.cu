/* attn_fp8_sm90.cu — FP8 flash attention for Hopper (sm_90a): wgmma + TMA +
 * warp specialisation. Same interface and numerics as attn_fp8_mma.cu.
 *
 * Inputs (device): q8, k8 [H][S_pad][128] e4m3; vt8 [H][128][S_pad] e4m3, V
 * transposed with the keys of every 16-key group permuted (stored slot p holds
 * key h3_v_slot_key(p), config.h); sq, sk, sv [H][G] f32 (G = S_pad/128);
 * vmu [H*128] f32 or NULL. Outputs: O [S][H*128] bf16, lse [H][S] f32. Rows
 * >= S are never written.
 *
 * Two kernels, one per mode:
 *   V smoothed (vmu != NULL, dit_block's default): the three-consumer kernel
 *     (sm90_wg3.cuh), with its per-tile softmax scalars in shared memory
 *     while the table fits (S_pad <= 376,448), without them beyond, on the
 *     grid of sm90_grid.h: whole 192-query CTAs, and with kSplitGrid
 *     split 64-query ones that fill the last wave (with the table up to
 *     S_pad = 188,416); h3k_attn_fp8_sm90_grid gives the plan, to the
 *     launch and to the checks whose emulation must know the split rows.
 *   V as it is (vmu == NULL): the two-consumer warp-specialised kernel
 *     (sm90_ws.cuh).
 * Both fold every key tile's P V into FP32 O, so both keep the contract on
 * sharp rows (docs/DESIGN.md "The Hopper kernels" says why and what the
 * alternatives measured). The pieces: sm90_layout.cuh (tiles, shared memory,
 * a consumer's registers), sm90_pipeline.cuh (mbarriers, TMA, the K/V ring),
 * sm90_wgmma.cuh (the GEMMs), sm90_softmax.cuh (the online softmax, P8),
 * sm90_epilogue.cuh (O and LSE out). The launch only encodes the tensor maps
 * and launches on the caller's stream: no synchronisation, no environment. */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"
#include "sm90_layout.cuh"
#include "sm90_tmap.cuh"
#include "sm90_wg3.cuh"
#include "sm90_ws.cuh"

extern "C" int h3k_attn_fp8_sm90_key_tile(void) { return kBN; }

namespace {
constexpr int kStages = 2; /* K/V ring depth (3 or 4 stages measured no faster: docs/perf.md) */

typedef void (*WsFn)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const float *, const float *,
                     const float *, const float *, int, int, int, int, uint16_t *, float *);
typedef void (*Wg3Fn)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const float *, const float *,
                      const float *, const float *, int, int, int, const h3_sm90_grid, uint16_t *, float *);

/* Split CTAs (sm90_grid.h) in the production launch, checked on the CPU
 * (the plan in test_sm90_grid, the split rows' numerics in
 * test_cpu_attention) and by the GPU suite. Which rows run split depends on
 * the launch's head count and the SM count, and a split row's P is rounded
 * against its part's max: results are as accurate but not bit-identical
 * across head counts (sequence-parallel ranks). A build configured with
 * -DH3_SM90_SPLIT_GRID=OFF runs the plain grid, which rounds every row alike. */
#ifndef H3_SM90_SPLIT_GRID
#define H3_SM90_SPLIT_GRID 1
#endif
constexpr bool kSplitGrid = H3_SM90_SPLIT_GRID != 0;

/* The three-consumer kernel for this S_pad and its shared memory: with the
 * per-tile table while it fits, and, with split_ok (the launch passes
 * kSplitGrid), room for split CTAs (sm90_grid.h) where their layout fits
 * too (with the table: up to 1,472 key tiles). */
struct Wg3Launch {
    Wg3Fn fn;
    long long smem;
    int may_split;
};
Wg3Launch choose_wg3(int S_pad, bool split_ok)
{
    using L = SmemLayout3<kStages>;
    using LS = SmemLayout3Split<kStages>;
    const long long nkt = S_pad / kBN;
    const long long whole = L::kBytes + (long long)L::kTabBytesPerTile * nkt;
    const long long split = LS::kBytes + (long long)LS::kTabBytesPerTile * nkt;
    if (whole <= kSmemMax) {
        if (split_ok && split <= kSmemMax)
            return Wg3Launch{h3k_attn_fp8_sm90_wg3_kernel<kStages, true, true>, whole > split ? whole : split, 1};
        return Wg3Launch{h3k_attn_fp8_sm90_wg3_kernel<kStages, true, true>, whole, 0};
    }
    if (!split_ok) return Wg3Launch{h3k_attn_fp8_sm90_wg3_kernel<kStages, true, false>, L::kBytes, 0};
    return Wg3Launch{h3k_attn_fp8_sm90_wg3_kernel<kStages, true, false>, LS::kBytes > L::kBytes ? LS::kBytes : L::kBytes,
                     1};
}

/* SMs of the current device (one CTA of either kernel per SM), cached per
 * ordinal like h3k_attn_fp8_sm90_available; 0 when unknown. */
int device_sms()
{
    static int cache[64];
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (dev >= 0 && dev < 64 && cache[dev] > 0) return cache[dev];
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (dev >= 0 && dev < 64) cache[dev] = n;
    return n;
}

/* The grid the launch runs kernel v on: one definition for the launch and
 * for h3k_attn_fp8_sm90_grid, so the checks see the plan that ran. */
h3_sm90_grid wg3_grid(int S, int H, const Wg3Launch &v) { return h3_sm90_grid_plan(S, H, device_sms(), v.may_split); }
} // namespace

extern "C" int h3k_attn_fp8_sm90_grid(int S, int H, h3_sm90_grid *grid)
{
    if (S < 1 || H < 1 || !grid) return (int)cudaErrorInvalidValue;
    const int S_pad = (S + kBN - 1) / kBN * kBN;
    *grid = wg3_grid(S, H, choose_wg3(S_pad, kSplitGrid));
    return 0;
}

extern "C" const char *h3k_attn_fp8_sm90_variant_name(int smoothed)
{
    return smoothed ? (kSplitGrid ? "wg3: three consumer warpgroups, each tile's P V folded into FP32 O, V's mean "
                                    "added; split CTAs fill the last wave"
                                  : "wg3: three consumer warpgroups, each tile's P V folded into FP32 O, V's mean added")
                    : "ws: two consumer warpgroups, QK^T(n) overlapped with PV(n-1), P V folded into FP32 O";
}

static int probe_device(int dev)
{
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (major != 9 || minor != 0) return 0;
    cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, h3k_attn_fp8_sm90_ws_kernel<kStages>) != cudaSuccess) {
        (void)cudaGetLastError(); /* no sm_90a image in this build */
        return 0;
    }
    /* A plain sm_90 (non-"a") image would be the empty stub: it uses a
     * handful of registers, the real kernel is capped at 168 per thread. */
    return attr.numRegs >= 64;
}

extern "C" int h3k_attn_fp8_sm90_available(void)
{
    static signed char cache[64]; /* per device ordinal: 0 unknown, 1 yes, -1 no (idempotent, race-benign) */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (dev < 0 || dev >= 64) return probe_device(dev);
    if (cache[dev] == 0) cache[dev] = probe_device(dev) ? 1 : -1;
    return cache[dev] > 0;
}

extern "C" int h3k_attn_fp8_sm90(const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq,
                                 const float *sk, const float *sv, const float *vmu, int S, int H, uint16_t *O,
                                 float *lse, h3_stream stream)
{
    if (S < 1 || H < 1) return (int)cudaErrorInvalidValue;
    if (((uintptr_t)q8 | (uintptr_t)k8 | (uintptr_t)vt8) & 15u) return (int)cudaErrorInvalidValue; /* TMA */
    if ((uintptr_t)vmu & 7u) return (int)cudaErrorMisalignedAddress;                            /* float2 loads */
    if (!h3k_attn_fp8_sm90_available()) return (int)cudaErrorNoKernelImageForDevice;
    const int S_pad = (S + kBN - 1) / kBN * kBN; /* the layout of q8/k8/vt8 (128-token groups) */
    const bool smoothed = vmu != nullptr;
    const int rows = smoothed ? kWg3Rows : kBM;
    if ((long long)H * ((S + rows - 1) / rows) > 0x7fffffffLL / 3) return (int)cudaErrorInvalidValue;

    CUtensorMap tq, tk, tv;
    int e;
    if ((e = make_tmap(&tq, q8, kD, (uint64_t)H * S_pad, smoothed ? 64u : 128u)) != 0) return e;
    if ((e = make_tmap(&tk, k8, kD, (uint64_t)H * S_pad, 128u)) != 0) return e;
    if ((e = make_tmap(&tv, vt8, (uint64_t)S_pad, (uint64_t)H * kD, 128u)) != 0) return e;

    cudaStream_t st = (cudaStream_t)stream;
    if (!smoothed) {
        const WsFn fn = h3k_attn_fp8_sm90_ws_kernel<kStages>;
        const int smem = SmemLayout<kStages>::kBytes, nqt = (S + kBM - 1) / kBM;
        cudaError_t ce = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (ce != cudaSuccess) return (int)ce;
        fn<<<H * nqt, kThreads, (size_t)smem, st>>>(tq, tk, tv, sq, sk, sv, vmu, S, H, S_pad, nqt, O, lse);
        return (int)cudaGetLastError();
    }
    const Wg3Launch v = choose_wg3(S_pad, kSplitGrid);
    const h3_sm90_grid grid = wg3_grid(S, H, v);
    cudaError_t ce = cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)v.smem);
    if (ce != cudaSuccess) return (int)ce;
    v.fn<<<grid.full + grid.split, kWg3Threads, (size_t)v.smem, st>>>(tq, tk, tv, sq, sk, sv, vmu, S, H, S_pad, grid, O,
                                                                      lse);
    return (int)cudaGetLastError();
}
