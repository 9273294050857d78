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
 *     while the table fits (S_pad <= 376,448), without them beyond.
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
typedef void (*KernelFn)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const float *, const float *,
                         const float *, const float *, int, int, int, int, uint16_t *, float *);

constexpr int kStages = 2; /* K/V ring depth (3 or 4 stages measured no faster: docs/perf.md) */

/* One launchable kernel and what it needs. */
struct Launch {
    KernelFn fn;
    long long smem;  /* dynamic shared memory bytes */
    int rows;        /* queries per CTA */
    int threads;     /* per CTA */
    uint32_t q_box;  /* rows of a Q box */
};

/* The kernel for this mode and S_pad (see the header). */
Launch choose(int smoothed, int S_pad)
{
    if (!smoothed)
        return Launch{h3k_attn_fp8_sm90_ws_kernel<kStages>, SmemLayout<kStages>::kBytes, kBM, kThreads, 128u};
    using L = SmemLayout3<kStages>;
    const long long tab = (long long)L::kTabBytesPerTile * (S_pad / kBN);
    if (L::kBytes + tab <= 227 * 1024)
        return Launch{h3k_attn_fp8_sm90_wg3_kernel<kStages, true, true>, L::kBytes + tab, kWg3Rows, kWg3Threads, 64u};
    return Launch{h3k_attn_fp8_sm90_wg3_kernel<kStages, true, false>, L::kBytes, kWg3Rows, kWg3Threads, 64u};
}
} // namespace

extern "C" const char *h3k_attn_fp8_sm90_variant_name(int smoothed)
{
    return smoothed ? "wg3: three consumer warpgroups, each tile's P V folded into FP32 O, V's mean added"
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
    const Launch v = choose(vmu != nullptr, S_pad);
    const int nqt = (S + v.rows - 1) / v.rows; /* CTAs per head */
    if ((long long)H * nqt > 0x7fffffffLL) return (int)cudaErrorInvalidValue;

    CUtensorMap tq, tk, tv;
    int e;
    if ((e = make_tmap(&tq, q8, kD, (uint64_t)H * S_pad, v.q_box)) != 0) return e;
    if ((e = make_tmap(&tk, k8, kD, (uint64_t)H * S_pad, 128u)) != 0) return e;
    if ((e = make_tmap(&tv, vt8, (uint64_t)S_pad, (uint64_t)H * kD, 128u)) != 0) return e;

    cudaError_t ce = cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)v.smem);
    if (ce != cudaSuccess) return (int)ce;
    v.fn<<<H * nqt, v.threads, (size_t)v.smem, (cudaStream_t)stream>>>(tq, tk, tv, sq, sk, sv, vmu, S, H, S_pad, nqt, O,
                                                                       lse);
    return (int)cudaGetLastError();
}
