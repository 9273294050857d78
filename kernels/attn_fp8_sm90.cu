/* attn_fp8_sm90.cu — FP8 flash attention for Hopper (sm_90a): wgmma + TMA +
 * warp specialisation. Same interface and numerics as attn_fp8_mma.cu.
 *
 * Inputs (device): q8, k8 [H][S_pad][128] e4m3; vt8 [H][128][S_pad] e4m3, V
 * transposed with the keys of every 16-key group permuted (stored slot p holds
 * key h3_v_slot_key(p), src/config.h); sq, sk, sv [H][G] f32 (G = S_pad/128).
 * Outputs: O [S][H*128] bf16, lse [H][S] f32. Rows >= S are never written.
 *
 * CTA = 128 queries of one head, 384 threads = 3 warpgroups:
 *   WG0      producer: setmaxnreg 24; one thread issues TMA loads of Q (once)
 *            and of the K and V tiles (128 keys x 128 dims = 16 KB) into two
 *            rings of 2 or 3 stages, each stage with a full (TMA tx bytes)
 *            and an empty (8 consumer warps arrive) mbarrier.
 *   WG1, WG2 consumers: setmaxnreg 240; each owns 64 query rows.
 *            S = Q K^T: 4 x wgmma m64n128k32 e4m3, A = Q and B = K from
 *            shared memory (K-major, 128-byte swizzle as TMA wrote them).
 *            O += P V: 4 x wgmma m64n128k32 e4m3, A = P from registers, B = V^T
 *            tile [128 dims][128 key slots] (K-major). The accumulator of S
 *            gives a thread keys 8j + 2t + {0,1} of rows g, g+8; the A operand
 *            wants k-slots 4t..4t+3 and 16+4t..16+4t+3 (same rows); n-chunks
 *            (4kk, 4kk+1) fill the first, (4kk+2, 4kk+3) the second, which is
 *            exactly V's stored key order, so P needs no shuffle.
 *   Variants (template parameters, picked at run time by the environment
 *   variable H3_SM90_VARIANT=N, the entry named "vN", read once; unset =
 *   H3_SM90_DEFAULT_VARIANT, 16):
 *     0  in-order loop: QK^T(n), softmax(n), PV(n), each waited for; 2 stages.
 *     1  intra-warpgroup overlap: QK^T(n) and PV(n-1) issued together,
 *        softmax(n) while PV(n-1) runs on the tensor cores (FA3); 2 stages.
 *     16 1 with P8's multiplier folded into the exponent (kFExpScale): the
 *        default, 4.5% faster than 1 (docs/perf.md, 2026-12-03 third run).
 *     2..41 1 with the options of the kF* flags below (ping-pong, P through
 *        shared memory, ordered O update, rescale without the vote, ones
 *        column for l, kept-live P8 fragments, one-FMA O update, exp turns,
 *        3 stages), two experiments that accumulate O in the tensor cores
 *        (fail the accuracy contract) and timing-only ABLATIONs (no loads /
 *        no softmax / no wgmma; wrong output); names in variants(), figures
 *        in docs/perf.md (2026-12-03).
 *   The variants without kFExpScale / kFOnesL / kFFmaO / experiments do the
 *   same arithmetic in the same order per thread, so their outputs are
 *   expected to be bit-identical; those options change FP32 rounding only
 *   (kFOnesL: l from the sums of the rounded P8, which moves LSE by up to
 *   ~0.05 at S <= 1000 and fails test_gpu_attention's LSE bound).
 *
 * Extra export (the lead adds it to kernels.h):
 *   extern "C" const char *h3k_attn_fp8_sm90_variant_name(void);
 *   -- the variant h3k_attn_fp8_sm90 runs, e.g. "v2 overlap+pingpong, 2 stages".
 *
 * Numerics (cpu_ref.h `attention`, key tile 128 = one scale group per tile):
 *   c = (sq[gq] * sk[gk]) * (D^-0.5 log2 e); x = c * dot (FP32 wgmma sum);
 *   m_new = max(m, max x) (= c * max dot exactly: c > 0, rounding monotone);
 *   alpha = exp2(m - m_new), 0 when m = -inf; p = exp2(x - m_new) computed as
 *   ex2.approx(fma(dot, c, -m_new)) (one rounding instead of two, and ex2's
 *   ~2 ulp: well below the e4m3 rounding of P); l = l * alpha + sum p (per
 *   thread partial sums, reduced over the 4 threads of a row at the end);
 *   P8 = e4m3_satfinite_rne(p * (256 sv[gk] / svmax)) — p <= 1 so P8 <= 256,
 *   the top of e4m3's fine range (kFExpScale, the default: p * mult as one
 *   ex2.approx(fma(dot, c, log2(mult) - m_new)), and l += sum / mult: the
 *   same values up to FP32 rounding, 64 multiplies per tile less; the
 *   emulation's e4m3 tie handling in test_gpu_attention covers the rare
 *   code that lands on the other side of a rounding midpoint);
 *   O = bf16(acc * ((svmax 2^-8) / l));
 *   LSE = (m + log2 l) ln 2. Keys >= S get x = -inf (only the last tile). */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* build_info.cu: cuTensorMapEncodeTiled fetched through the runtime, so no
 * binary links libcuda (it must start on machines without the driver). */
extern "C" CUresult h3k_tensor_map_encode_tiled(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                                const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                                const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "sm90_utils.cuh"

#endif

#ifndef H3_SM90_DEFAULT_VARIANT
#define H3_SM90_DEFAULT_VARIANT 16
#endif

namespace {

constexpr int kD = 128;          /* head dim = bytes per row of Q/K tiles */
constexpr int kBM = 128;         /* queries per CTA (2 consumer warpgroups x 64) */
constexpr int kBN = 128;         /* keys per tile = online-softmax step = scale group */
constexpr int kThreads = 384;    /* producer WG + 2 consumer WGs */
constexpr uint32_t kTile = 16384; /* 128 x 128 e4m3 */

/* Shared memory for a ring of St stages: Q | K[St] | V[St] | mbarriers,
 * 1024-aligned tiles (the 128-byte swizzle pattern repeats every 8 rows x
 * 128 B). */
template <int St> struct SmemLayout { /* K at kTile, V at kTile * (1 + St), P after V */
    /* Each V stage is followed by 1 KB (8 rows of 128 keys) that TMA never
     * writes: a row of e4m3 ones and 7 zero rows, the 8 extra B columns of
     * the m64n136 PV GEMM of the kFOnesL variants (unused by the others). */
    static constexpr uint32_t kVStride = kTile + 1024;
    static constexpr uint32_t kOffV = kTile * (1 + St);
    static constexpr uint32_t kOffP = kOffV + St * kVStride; /* 2 x 8 KB: each consumer WG's P8 */
    static constexpr uint32_t kOffBar = kOffP + kTile;
    static constexpr int kBytes = (int)kOffBar + 128 + 1024; /* + barriers + alignment slack */
    static_assert(8 * (1 + 4 * St) <= 128, "mbarriers overflow their 128 bytes");
    static_assert(kBytes <= 227 * 1024, "over the sm_90 shared-memory limit per block");
};

static_assert(kD == 128 && kBN == 128 && kBM == 128, "tile shapes are baked into the fragment code");

} // namespace

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace {

constexpr float kScaleLog2 = 0.12751743082459868f; /* 128^-0.5 * log2(e) */
constexpr int kConsumerWarps = 8;                  /* arrivals on an empty barrier */
/* Ping-pong turn barriers: consumer warpgroup i waits on barrier 1 + i; its
 * 128 threads sync, the other warpgroup's 128 arrive (count 256). */
static __device__ __forceinline__ void turn_wait(int wgi)
{
    if (wgi == 0)
        sm90::named_bar_sync<1, 256>();
    else
        sm90::named_bar_sync<2, 256>();
}
static __device__ __forceinline__ void turn_give(int to_wgi)
{
    if (to_wgi == 0)
        sm90::named_bar_arrive<1, 256>();
    else
        sm90::named_bar_arrive<2, 256>();
}

/* 1/x to ~1 ulp (rcp.approx.ftz): enough for l's per-tile 1/multiplier,
 * where __frcp_rn's IEEE rounding compiles to a call in the loop. */
static __device__ __forceinline__ float rcp_approx(float x)
{
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* e4m3 codes of (x0, x1, x2, x3) in bytes 0..3, satfinite RNE. cvt puts its
 * first source in the upper byte. */
static __device__ __forceinline__ uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3)
{
    /* one asm block with the 16-bit halves joined by mov: ptxas then writes
     * the second cvt into the first's register (F2FP ... MERGE_C) instead of
     * a PRMT per pair, whatever the surrounding code */
    uint32_t r;
    asm("{\n.reg .b16 lo, hi;\n"
        "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
        "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
        "mov.b32 %0, {lo, hi};\n}"
        : "=r"(r)
        : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
    return r;
}

static __device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x = lo = lower address */
    return *reinterpret_cast<uint32_t *>(&v);
}

template <int St> struct Bars {
    uint32_t base;
    __device__ uint32_t qfull() const { return base; }
    __device__ uint32_t kfull(int s) const { return base + 8 * (1 + s); }
    __device__ uint32_t kempty(int s) const { return base + 8 * (1 + St + s); }
    __device__ uint32_t vfull(int s) const { return base + 8 * (1 + 2 * St + s); }
    __device__ uint32_t vempty(int s) const { return base + 8 * (1 + 3 * St + s); }
};

/* Per consumer thread: the online-softmax state of its two rows. */
struct Consumer {
    float s[64];        /* S accumulator (raw dots), then p */
    float o[64];        /* O accumulator, FP32 in registers */
    float pv[68];       /* P V of one key tile, from the tensor cores (64..67: kFOnesL's row sums) */
    uint32_t p[4][4];   /* P8 as wgmma A fragments, one [4] per 32-key k-step */
    float m0, m1, l0, l1;
    float sum0, sum1;   /* the last softmax's row sums (partial, this thread) */
};

static __device__ __forceinline__ void release(uint32_t bar, int lane)
{
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(bar);
}

/* S = Q K^T for the K tile in stage st (async; commit group). kSkip: the
 * kFXNoGemm ablation, an empty group. */
template <bool kSkip = false> static __device__ __forceinline__ void issue_qk(Consumer &c, uint64_t dq, uint32_t sk_addr)
{
    const uint64_t dk = sm90::desc_k128_sw128(sk_addr);
#pragma unroll
    for (int i = 0; i < 64; ++i) sm90::fence_reg(c.s[i]);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4 && !kSkip; ++kk) /* k-step of 32 bytes = +2 in the address field */
        sm90::wgmma_ss_m64n128k32(c.s, dq + 2 * kk, dk + 2 * kk, kk > 0);
    sm90::wgmma_commit();
#pragma unroll
    for (int i = 0; i < 64; ++i) sm90::fence_reg(c.s[i]);
}

/* pv = P V for the V^T tile at sv_addr (async; commit group). Each tile
 * starts from a zeroed accumulator and add_pv() folds it into O in FP32:
 * Hopper's FP8 wgmma keeps only ~13 mantissa bits of its accumulator input
 * (truncating), so accumulating O over hundreds of tiles inside the tensor
 * cores loses a steady fraction of every addition -- 27% of O at S = 30272
 * when V has a mean, as a GEMM output does (SageAttention2 saw the same and
 * promotes the same way). Within one tile (4 k-steps of 32 keys) the loss is
 * ~2^-13 relative. */
template <bool kToO = false, bool kOnes = false, bool kSkip = false>
static __device__ __forceinline__ void issue_pv(Consumer &c, uint32_t sv_addr)
{
    /* kToO (experiment kFTcAcc only): accumulate into O inside the tensor
     * cores, as FA3 does -- loses the low bits described above. */
    /* kOnes: N = 136, the ones row after the V tile gives pv[64] / pv[66]
     * (thread t = 0) = the row sums of P8 over the tile. */
    static_assert(!(kToO && kOnes), "the TC-accumulation experiment has no row-sum columns");
    constexpr int kN = kOnes ? 68 : 64;
    float *acc = kToO ? c.o : c.pv;
    const uint64_t dv = sm90::desc_k128_sw128(sv_addr);
#pragma unroll
    for (int i = 0; i < kN; ++i) sm90::fence_reg(acc[i]);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) sm90::fence_reg(c.p[kk][r]);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4 && !kSkip; ++kk) {
        if constexpr (kOnes)
            sm90::wgmma_rs_m64n136k32(c.pv, c.p[kk], dv + 2 * kk, kk > 0);
        else
            sm90::wgmma_rs_m64n128k32(*reinterpret_cast<float(*)[64]>(acc), c.p[kk], dv + 2 * kk, kToO || kk > 0);
    }
    sm90::wgmma_commit();
#pragma unroll
    for (int i = 0; i < kN; ++i) sm90::fence_reg(acc[i]);
}

/* Same with P8 from shared memory (dp: this warpgroup's 64 x 128 P tile,
 * K-major, 128-byte swizzle, written by store_p): no A registers held while
 * the GEMM runs, which is what lets the softmax of the next tile overlap it
 * (with P in registers the consumer needs s + o + pv + p = 208 live registers
 * and ptxas hoists the wait for PV above the softmax to reuse p's). */
static __device__ __forceinline__ void issue_pv_ss(Consumer &c, uint64_t dp, uint32_t sv_addr)
{
    const uint64_t dv = sm90::desc_k128_sw128(sv_addr);
#pragma unroll
    for (int i = 0; i < 68; ++i) sm90::fence_reg(c.pv[i]); /* 64..67: kFOnesL row sums */
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
        sm90::wgmma_ss_m64n128k32(*reinterpret_cast<float(*)[64]>(c.pv), dp + 2 * kk, dv + 2 * kk, kk > 0);
    sm90::wgmma_commit();
#pragma unroll
    for (int i = 0; i < 68; ++i) sm90::fence_reg(c.pv[i]); /* 64..67: kFOnesL row sums */
}

/* c.p (the A fragments convert_p made) -> this warpgroup's P tile in shared
 * memory at sp: register a[kk][r] holds row 16w + g + 8(r & 1), k bytes
 * 32kk + 16(r >> 1) + 4t .. +3; the 128-byte swizzle puts 16-byte chunk c of
 * row r at chunk c ^ (r % 8) (= c ^ g). The 32 lanes of a store hit 32
 * distinct banks. Then every thread fences its writes to the async proxy and
 * the warpgroup synchronises (named barrier 3 + wgi), so the next PV reads
 * the whole tile. */
template <bool kWarpOnly>
static __device__ __forceinline__ void store_p(const Consumer &c, uint32_t sp, int wgi, int w, int g, int t)
{
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const uint32_t row = 16 * w + g + 8 * (r & 1), chunk = (uint32_t)((2 * kk + (r >> 1)) ^ g);
            sm90::sts32(sp + row * 128 + chunk * 16 + 4 * t, c.p[kk][r]);
        }
    sm90::fence_proxy_async_smem();
    /* Warp w's rows of the PV result depend only on its own rows of P, which
     * is what FA3 relies on when it hands P over with __syncwarp alone. */
    if constexpr (kWarpOnly)
        __syncwarp();
    else if (wgi == 0)
        sm90::named_bar_sync<3, 128>();
    else
        sm90::named_bar_sync<4, 128>();
}

/* O += pv, in FP32 (after the PV group has completed). */
static __device__ __forceinline__ void add_pv(Consumer &c)
{
#pragma unroll
    for (int i = 0; i < 64; ++i) c.o[i] += c.pv[i];
}

/* O += pv * one (one = 1 exactly, but data-dependent: kFLateWait). */
static __device__ __forceinline__ void add_pv_times(Consumer &c, float one)
{
#pragma unroll
    for (int i = 0; i < 64; ++i) c.o[i] = fmaf(c.pv[i], one, c.o[i]);
}

/* The same sums, made to wait for the softmax that precedes them. ptxas
 * schedules the O += pv adds into the softmax's exp2 stream to fill its
 * latencies, which moves the wait for PV(n-1) above the softmax and so
 * serialises the PV GEMM with the softmax it was meant to overlap. Here the
 * adds are fma(pv, one, o) with one = 1 + sum * zf, zf = 0 at run time but
 * unknown to the compiler, so no add can issue before the row sums (the last
 * softmax results) exist. one is exactly 1: the sums are bit-identical. */
static __device__ __forceinline__ void add_pv_after_softmax(Consumer &c, float zf)
{
    const float one0 = fmaf(c.sum0, zf, 1.f), one1 = fmaf(c.sum1, zf, 1.f);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        c.o[4 * j + 0] = fmaf(c.pv[4 * j + 0], one0, c.o[4 * j + 0]);
        c.o[4 * j + 1] = fmaf(c.pv[4 * j + 1], one0, c.o[4 * j + 1]);
        c.o[4 * j + 2] = fmaf(c.pv[4 * j + 2], one1, c.o[4 * j + 2]);
        c.o[4 * j + 3] = fmaf(c.pv[4 * j + 3], one1, c.o[4 * j + 3]);
    }
}

/* kFFmaO: O kept one frame behind -- after tile n's update it holds the
 * P V of tiles < n in tile n-1's max m(n-1) -- so folding PV(n-1) in and
 * changing frames is one FMA per element, O = O * alpha(n-1) + pv, with
 * alpha(n-1) = 2^(m(n-2) - m(n-1)) from the previous softmax: the CPU
 * emulation's own order (acc = acc * alpha + P V), no rescale pass, no
 * warp vote. a0/a1 carry alpha(n-1) times one = 1 + sum * zf (exactly 1):
 * the FMAs wait for this tile's row sums, so the wait for PV(n-1) stays
 * after the softmax (see add_pv_after_softmax). */
static __device__ __forceinline__ void fma_pv(Consumer &c, float a0, float a1)
{
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        c.o[4 * j + 0] = fmaf(c.o[4 * j + 0], a0, c.pv[4 * j + 0]);
        c.o[4 * j + 1] = fmaf(c.o[4 * j + 1], a0, c.pv[4 * j + 1]);
        c.o[4 * j + 2] = fmaf(c.o[4 * j + 2], a1, c.pv[4 * j + 2]);
        c.o[4 * j + 3] = fmaf(c.o[4 * j + 3], a1, c.pv[4 * j + 3]);
    }
}

/* Online softmax on the raw dots in c.s (tile with scalar cs); leaves p in
 * c.s and returns the O rescale factors. kvalid: keys of this tile < S
 * (128 unless it is the ragged last tile). */
template <bool kExpScale = false, bool kNoSum = false, bool kTurn = false>
static __device__ __forceinline__ void softmax(Consumer &c, float cs, int kvalid, int t, float &alpha0,
                                               float &alpha1, float lmult = 0.f, float imult = 1.f, int wgi = 0,
                                               bool give = false)
{
    if (kvalid < kBN) {
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (8 * j + 2 * t + (e & 1) >= kvalid) c.s[4 * j + e] = -INFINITY;
    }
    /* Row maxima as a tree (depth 5, not a chain of 16): max is exact, so
     * the order changes no bit, only the latency before the exps can start. */
    float a0[8], a1[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        a0[j] = fmaxf(fmaxf(c.s[8 * j + 0], c.s[8 * j + 1]), fmaxf(c.s[8 * j + 4], c.s[8 * j + 5]));
        a1[j] = fmaxf(fmaxf(c.s[8 * j + 2], c.s[8 * j + 3]), fmaxf(c.s[8 * j + 6], c.s[8 * j + 7]));
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        a0[j] = fmaxf(a0[j], a0[j + 4]);
        a1[j] = fmaxf(a1[j], a1[j + 4]);
    }
    float mx0 = fmaxf(fmaxf(a0[0], a0[2]), fmaxf(a0[1], a0[3]));
    float mx1 = fmaxf(fmaxf(a1[0], a1[2]), fmaxf(a1[1], a1[3]));
    /* the 4 threads of a quad hold one row */
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(c.m0, mx0 * cs), mn1 = fmaxf(c.m1, mx1 * cs);
    /* -inf - -inf guard: a row with no valid key yet keeps p = 0, alpha = 0 */
    const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
    alpha0 = c.m0 == -INFINITY ? 0.f : ex2(c.m0 - mu0);
    alpha1 = c.m1 == -INFINITY ? 0.f : ex2(c.m1 - mu1);
    /* kExpScale: the P8 multiplier enters as a bias of the exponent,
     * p * mult = 2^(x - m + log2 mult), so P8 needs no multiply (64 FMULs per
     * tile less); the row sums are then of p * mult, and l takes them times
     * 1 / mult (two multiplies per row). */
    const float b0 = kExpScale ? lmult - mu0 : -mu0, b1 = kExpScale ? lmult - mu1 : -mu1;
    float sum0 = 0.f, sum1 = 0.f;
    /* kTurn (kFExpTurn): the two consumer warpgroups take turns at their
     * exp2 streams, so the exp unit runs one warp's exps while the other
     * does its max, shuffles, conversion and O update, instead of both
     * waiting through the same phases at the same time. */
    if constexpr (kTurn) turn_wait(wgi);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        c.s[4 * j + 0] = ex2(fmaf(c.s[4 * j + 0], cs, b0));
        c.s[4 * j + 1] = ex2(fmaf(c.s[4 * j + 1], cs, b0));
        c.s[4 * j + 2] = ex2(fmaf(c.s[4 * j + 2], cs, b1));
        c.s[4 * j + 3] = ex2(fmaf(c.s[4 * j + 3], cs, b1));
        if constexpr (!kNoSum) {
            sum0 += c.s[4 * j + 0] + c.s[4 * j + 1];
            sum1 += c.s[4 * j + 2] + c.s[4 * j + 3];
        }
    }
    if constexpr (kTurn)
        if (give) turn_give(1 - wgi);
    c.m0 = mn0;
    c.m1 = mn1;
    if constexpr (kNoSum) return; /* kFOnesL: l comes from the PV GEMM (add_l) */
    /* c.sum0/1 stay the plain sums of exps (of p * mult under kExpScale):
     * the ordered variants wait for PV(n-1) on a predicate of them, and
     * ptxas makes that wait unconditional only when it can see the value
     * is a sum of exponentials (>= 0); a product with 1/mult hides it and
     * every wgmma is then serialised (C7514). */
    c.sum0 = sum0;
    c.sum1 = sum1;
    if constexpr (kExpScale) {
        sum0 *= imult;
        sum1 *= imult;
    }
    c.l0 = c.l0 * alpha0 + sum0;
    c.l1 = c.l1 * alpha1 + sum1;
}

/* kFOnesL: l += (row sums of P8 from the PV GEMM) / mult of that tile, then
 * x alpha like O. Thread t = 0 holds the sums (column 128), the others add
 * exact zeros (the zero rows), so the end's reduction over the quad is
 * unchanged. */
static __device__ __forceinline__ void add_l(Consumer &c, float imult, float alpha0, float alpha1)
{
    /* pv[65] / pv[67] (the zero rows' columns) are exact zeros; adding them
     * keeps their registers live until here, so ptxas cannot reuse them for
     * softmax temporaries while PV(n-1) still writes them -- a reuse that
     * forces the wait for PV(n-1) above the softmax. */
    c.l0 = fmaf(c.pv[64], imult, fmaf(c.pv[65], imult, c.l0)) * alpha0;
    c.l1 = fmaf(c.pv[66], imult, fmaf(c.pv[67], imult, c.l1)) * alpha1;
}

template <bool kAlways = false>
static __device__ __forceinline__ void rescale_o(Consumer &c, float alpha0, float alpha1)
{
    /* Once the running max settles alpha is exactly 1 for a whole warp; the
     * multiply by 1 is exact, so skipping it changes no bit. kAlways drops
     * the test: no branch, so ptxas may spread the multiplies into the gaps
     * of the exp2 stream. */
    if constexpr (!kAlways)
        if (!__any_sync(0xffffffffu, alpha0 != 1.f || alpha1 != 1.f)) return;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        c.o[4 * j + 0] *= alpha0;
        c.o[4 * j + 1] *= alpha0;
        c.o[4 * j + 2] *= alpha1;
        c.o[4 * j + 3] *= alpha1;
    }
}

/* p (in c.s) -> P8 A fragments. k-step kk covers n-chunks 4kk..4kk+3;
 * a[0]/a[1]: chunks 4kk, 4kk+1 of rows g / g+8, a[2]/a[3]: chunks 4kk+2, 4kk+3. */
template <bool kExpScale = false>
static __device__ __forceinline__ void convert_p_to(const Consumer &c, uint32_t (&p)[4][4], float mult)
{
    if constexpr (kExpScale) mult = 1.f; /* already in the exponent; x 1 folds away */
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const float *x = c.s + 16 * kk;
        p[kk][0] = pack_e4m3x4(x[0] * mult, x[1] * mult, x[4] * mult, x[5] * mult);
        p[kk][1] = pack_e4m3x4(x[2] * mult, x[3] * mult, x[6] * mult, x[7] * mult);
        p[kk][2] = pack_e4m3x4(x[8] * mult, x[9] * mult, x[12] * mult, x[13] * mult);
        p[kk][3] = pack_e4m3x4(x[10] * mult, x[11] * mult, x[14] * mult, x[15] * mult);
    }
}
template <bool kExpScale = false> static __device__ __forceinline__ void convert_p(Consumer &c, float mult)
{
    convert_p_to<kExpScale>(c, c.p, mult);
}

/* The same, the new fragments merged as new | (old & zmask) with zmask = 0
 * at run time but unknown to the compiler (kFKeepA): the old fragments --
 * the A operand PV(n-1) is still reading -- stay live until the conversion,
 * so ptxas cannot hand their registers to softmax temporaries, a reuse that
 * forces the wait for PV(n-1) above the softmax. One LOP3 per register. */
template <bool kExpScale = false>
static __device__ __forceinline__ void convert_p_keep(Consumer &c, float mult, uint32_t zmask)
{
    uint32_t np[4][4];
    convert_p_to<kExpScale>(c, np, mult);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) c.p[kk][r] = np[kk][r] | (c.p[kk][r] & zmask);
}


} // namespace
#endif

/* Loop options (bits of the kernel's kF template parameter). */
enum : unsigned {
    kFOverlap = 1u,  /* intra-warpgroup overlap: QK^T(n) with PV(n-1) */
    kFPingPong = 2u, /* turn-taking between the consumer warpgroups (needs overlap) */
    kFPSmem = 4u,    /* P8 through shared memory, PV as an SS wgmma (needs overlap) */
    kFOrder = 8u,    /* O += PV made to depend on the softmax's row sums (needs overlap) */
    kFPWarp = 16u,   /* with kFPSmem: P handed over with __syncwarp, not a warpgroup barrier */
    kFRescaleAll = 64u, /* O rescaled every tile, without the warp vote and branch */
    kFTcAcc = 32u,   /* EXPERIMENT, fails the accuracy contract: O accumulated in the tensor cores */
    kFExpScale = 128u, /* P8's multiplier as a bias of the exponent: no FMUL per p */
    kFOnesL = 256u,    /* l from a ones column of the PV GEMM (N = 136): no FADD per p (needs kFExpScale) */
    kFLateWait = 512u, /* with kFOnesL: the O and l updates wait for tile n's exps (so does the wait for PV(n-1)) */
    /* Timing-only ablations (wrong output; bench_attn only): which resource
     * bounds the loop, by removing one at a time. */
    kFExpTurn = 32768u,   /* the consumer warpgroups' exp2 streams take turns (named barriers 1, 2) */
    kFFmaO = 16384u,      /* O = O * alpha(n-1) + pv, one FMA, O one frame behind (fma_pv) */
    kFKeepA = 8192u,      /* the in-flight P8 fragments kept live until the next conversion (convert_p_keep) */
    kFXNoLoad = 1024u,    /* K/V loaded by TMA for the first kStages tiles only, then reused: no L2 traffic */
    kFXNoSoftmax = 2048u, /* no max / exp2 / sums: P8 converted from the raw dots */
    kFXNoGemm = 4096u,    /* no wgmma issued (the waits and the softmax stay) */
};

/* kStages: K/V ring depth; kF: kF* options. */
template <int kStages, unsigned kF>
__global__ void __launch_bounds__(kThreads, 1)
    h3k_attn_fp8_sm90_kernel(const __grid_constant__ CUtensorMap tmQ, /* q8 as [H*S_pad][128] */
                             const __grid_constant__ CUtensorMap tmK, /* k8 as [H*S_pad][128] */
                             const __grid_constant__ CUtensorMap tmV, /* vt8 as [H*128][S_pad] */
                             const float *__restrict__ sq,            /* [H][G] */
                             const float *__restrict__ sk,            /* [H][G] */
                             const float *__restrict__ sv,            /* [H][G] */
                             int S, int H, int S_pad, int nqt,
                             uint16_t *__restrict__ O, /* [S][H*128] bf16 */
                             float *__restrict__ lse)  /* [H][S] */
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool kOverlap = kF & kFOverlap, kPingPong = kF & kFPingPong, kPSmem = kF & kFPSmem,
                   kOrder = kF & kFOrder, kPWarp = kF & kFPWarp, kTcAcc = kF & kFTcAcc,
                   kRescaleAll = kF & kFRescaleAll, kExpScale = kF & kFExpScale, kOnesL = kF & kFOnesL,
                   kLateWait = kF & kFLateWait, kXNoLoad = kF & kFXNoLoad, kXNoSoftmax = kF & kFXNoSoftmax,
                   kXNoGemm = kF & kFXNoGemm, kKeepA = kF & kFKeepA, kFmaO = kF & kFFmaO;
    static_assert(!kFmaO || !(kTcAcc || kOnesL || kLateWait || kPSmem), "kFFmaO is for the register-P loops");
    constexpr bool kExpTurn = kF & kFExpTurn;
    static_assert(!(kExpTurn && kPingPong), "exp turns and ping-pong use the same named barriers");
    static_assert(!kLateWait || kOnesL, "kFLateWait is built on v17");
    static_assert(!kOnesL || (kExpScale && !kPSmem && !kTcAcc && !kOrder), "kFOnesL is built on v16");
    static_assert(!kTcAcc || !kPSmem, "the TC-accumulation experiment keeps P in registers");
    static_assert(kOverlap || !(kF & ~kFOverlap), "the other options are built on the overlapped loop");
    static_assert(!(kXNoSoftmax && (kOnesL || kOrder)), "the no-softmax ablation is for the plain loops");
    using L = SmemLayout<kStages>;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (sm90::smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = base + kTile, sV = base + L::kOffV, sP = base + L::kOffP;
    const Bars<kStages> bars{base + L::kOffBar};

    /* q tiles inner: the CTAs resident at once share one head's K/V in L2 */
    const int qt = blockIdx.x % nqt, h = blockIdx.x / nqt;
    const int G = S_pad / kBN, nkt = (S + kBN - 1) / kBN;
    const int lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        sm90::mbar_init(bars.qfull(), 1);
        for (int st = 0; st < kStages; ++st) {
            sm90::mbar_init(bars.kfull(st), 1);
            sm90::mbar_init(bars.vfull(st), 1);
            sm90::mbar_init(bars.kempty(st), kConsumerWarps);
            sm90::mbar_init(bars.vempty(st), kConsumerWarps);
        }
        sm90::fence_barrier_init();
    }
    if constexpr (kOnesL) { /* the ones blocks after the V stages: row 0 = e4m3 1.0 (0x38), rows 1..7 = 0 */
        for (int i = threadIdx.x; i < kStages * 256; i += kThreads)
            sm90::sts32(sV + (i / 256) * L::kVStride + kTile + (i % 256) * 4, i % 256 < 32 ? 0x38383838u : 0u);
        sm90::fence_proxy_async_smem();
    }
    __syncthreads();

    /* warp-uniform by construction; the shuffle tells the compiler so, which
     * lets it keep the wgmma descriptors in uniform registers instead of
     * moving them there before every wgmma (CUTLASS does the same) */
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    if (wg == 0) {
        /* ---------------- producer ---------------- */
        sm90::setmaxnreg_dec<24>();
        if (threadIdx.x == 0) {
            sm90::prefetch_tmap(&tmQ);
            sm90::prefetch_tmap(&tmK);
            sm90::prefetch_tmap(&tmV);
            const int row0 = h * S_pad;
            sm90::mbar_arrive_expect_tx(bars.qfull(), kTile);
            sm90::tma_load_2d(sQ, &tmQ, bars.qfull(), 0, row0 + qt * kBM);
            for (int n = 0; n < nkt; ++n) {
                const int st = n % kStages;
                const uint32_t ph = (uint32_t)(n / kStages) & 1u;
                sm90::mbar_wait(bars.kempty(st), ph ^ 1u);
                if (kXNoLoad && n >= kStages) {
                    sm90::mbar_arrive(bars.kfull(st));
                } else {
                    sm90::mbar_arrive_expect_tx(bars.kfull(st), kTile);
                    sm90::tma_load_2d(sK + st * kTile, &tmK, bars.kfull(st), 0, row0 + n * kBN);
                }
                sm90::mbar_wait(bars.vempty(st), ph ^ 1u);
                if (kXNoLoad && n >= kStages) {
                    sm90::mbar_arrive(bars.vfull(st));
                } else {
                    sm90::mbar_arrive_expect_tx(bars.vfull(st), kTile);
                    sm90::tma_load_2d(sV + st * L::kVStride, &tmV, bars.vfull(st), n * kBN, h * kD);
                }
            }
        }
    } else {
        /* ---------------- consumers ---------------- */
        sm90::setmaxnreg_inc<240>();
        const int wgi = wg - 1;
        const int tw = threadIdx.x % 128, w = tw / 32, g = lane / 4, t = lane % 4;
        const float *sk_h = sk + (size_t)h * G, *sv_h = sv + (size_t)h * G;

        float svmax = 0.f; /* max_g sv[h][g], per warp */
        for (int i = lane; i < G; i += 32) svmax = fmaxf(svmax, sv_h[i]);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) svmax = fmaxf(svmax, __shfl_xor_sync(0xffffffffu, svmax, off));
        const float sqq = sq[(size_t)h * G + qt];
        const float r256 = 256.f / svmax; /* kExpScale: mult = sv[g] * r256 (P8's multiplier, 256 sv[g] / svmax) */

        Consumer c;
#pragma unroll
        for (int i = 0; i < 64; ++i) c.o[i] = 0.f;
        c.m0 = c.m1 = -INFINITY;
        c.l0 = c.l1 = 0.f;

        const uint64_t dq = sm90::desc_k128_sw128(sQ + wgi * (kTile / 2)); /* this WG's 64 rows */
        const uint32_t sPw = sP + wgi * (kTile / 2);                       /* this WG's P8 tile */
        const uint64_t dp = sm90::desc_k128_sw128(sPw);
        const int klast = S - (nkt - 1) * kBN;                             /* valid keys of the last tile */
        const float zf = (float)(S < 0); /* 0 (S >= 1), opaque to the compiler: add_pv_after_softmax */
        float alpha0, alpha1;
        float aprev0 = 0.f, aprev1 = 0.f; /* kFFmaO: alpha of the previous softmax (O = 0 before the first) */
        float wprev = 1.f; /* kFOnesL: 1 / mult of the tile whose PV is in flight */

        sm90::mbar_wait(bars.qfull(), 0);
        if constexpr (kOverlap) {
            {
                const float cs = (sqq * sk_h[0]) * kScaleLog2;
                const float mult = (256.f * sv_h[0]) / svmax;
                sm90::mbar_wait(bars.kfull(0), 0);
                issue_qk<kXNoGemm>(c, dq, sK);
                sm90::wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < 64; ++i) sm90::fence_reg(c.s[i]);
                release(bars.kempty(0), lane);
                const float em = sv_h[0] * r256; /* kExpScale: the multiplier, then its log2 and inverse */
                wprev = rcp_approx(em);
                if constexpr (kXNoSoftmax)
                    alpha0 = alpha1 = 1.f;
                else {
                    /* exp turns: warpgroup 0 goes first; warpgroup 1 gives no turn after its last tile */
                    if constexpr (kExpTurn)
                        if (wgi == 0) turn_give(0);
                    softmax<kExpScale, kOnesL, kExpTurn>(c, cs, nkt == 1 ? klast : kBN, t, alpha0, alpha1,
                                                         __log2f(em), wprev, wgi,
                                                         wgi == 0 || nkt > 1); /* O = 0: no rescale */
                }
                convert_p<kExpScale>(c, mult);
                if constexpr (kPSmem) store_p<kPWarp>(c, sPw, wgi, w, g, t);
            }
            /* Ping-pong (FA3's warp-scheduler barriers): in step n warpgroup i
             * waits for its turn on barrier 1 + i, issues QK^T(n) and
             * PV(n-1), then hands the turn to the other warpgroup, so the
             * tensor cores get the GEMMs of the two warpgroups alternately and
             * each one's softmax runs under the other's GEMMs. Warpgroup 0
             * gives itself the first turn (its arrive plus its own sync make
             * the 256). Warpgroup 1 skips the hand-over of the last step (no
             * one waits for it), so no barrier is left part-arrived at exit.
             * The prologue QK^T(0) and the final PV are not turn-ordered. */
            if constexpr (kPingPong)
                if (wgi == 0 && nkt > 1) turn_give(0);
            for (int n = 1; n < nkt; ++n) {
                const int st = n % kStages, sp = (n - 1) % kStages;
                const float skn = sk_h[n], svn = sv_h[n];
                sm90::mbar_wait(bars.kfull(st), (uint32_t)(n / kStages) & 1u);
                if constexpr (kPingPong) {
                    /* both tiles present before taking the turn: a turn is
                     * never held while waiting for a load */
                    sm90::mbar_wait(bars.vfull(sp), (uint32_t)((n - 1) / kStages) & 1u);
                    turn_wait(wgi);
                }
                issue_qk<kXNoGemm>(c, dq, sK + st * kTile);
                if constexpr (!kPingPong) sm90::mbar_wait(bars.vfull(sp), (uint32_t)((n - 1) / kStages) & 1u);
                if constexpr (kPSmem)
                    issue_pv_ss(c, dp, sV + sp * L::kVStride);
                else
                    issue_pv<kTcAcc, kOnesL, kXNoGemm>(c, sV + sp * L::kVStride);
                if constexpr (kPingPong)
                    if (wgi == 0 || n < nkt - 1) turn_give(1 - wgi);
                sm90::wgmma_wait<1>(); /* S(n) done, PV(n-1) may still run */
#pragma unroll
                for (int i = 0; i < 64; ++i) sm90::fence_reg(c.s[i]);
                release(bars.kempty(st), lane);
                const float em = svn * r256, imult = rcp_approx(em);
                if constexpr (kXNoSoftmax)
                    alpha0 = alpha1 = 1.f;
                else
                    softmax<kExpScale, kOnesL, kExpTurn>(c, (sqq * skn) * kScaleLog2, n == nkt - 1 ? klast : kBN,
                                                         t, alpha0, alpha1, __log2f(em), imult, wgi,
                                                         wgi == 0 || n < nkt - 1);
                /* kLateWait: every use of PV(n-1) takes a factor one = 1 +
                 * key * zf (exactly 1), key a sum of exps spread through
                 * tile n's softmax, so no use -- and so not the wait, which
                 * ptxas puts before the first use -- can move above them. */
                float one = 1.f;
                if constexpr (kLateWait) {
                    float key = c.s[7];
#pragma unroll
                    for (int i = 15; i < 64; i += 8) key += c.s[i];
                    one = fmaf(key, zf, 1.f);
                    /* key >= 0: always waits. A max instead of the sum lets
                     * ptxas prove the predicate and hoist the wait again;
                     * an integer predicate makes it serialise every wgmma. */
                    sm90::wgmma_wait_after<0>(key);
                } else if constexpr (kOrder)
                    sm90::wgmma_wait_after<0>(c.sum0 + c.sum1); /* not before the softmax's last exps */
                else
                    sm90::wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < 68; ++i) sm90::fence_reg(c.pv[i]); /* 64..67: kFOnesL row sums */
                release(bars.vempty(sp), lane);
                if constexpr (kTcAcc) {
                    /* PV(n-1) is already in O */
                } else if constexpr (kFmaO) {
                    if constexpr (kOrder)
                        fma_pv(c, aprev0 * fmaf(c.sum0, zf, 1.f), aprev1 * fmaf(c.sum1, zf, 1.f));
                    else
                        fma_pv(c, aprev0, aprev1);
                    aprev0 = alpha0;
                    aprev1 = alpha1;
                } else if constexpr (kOrder) /* PV(n-1) was computed with m(n-1), like O */
                    add_pv_after_softmax(c, zf);
                else if constexpr (kLateWait)
                    add_pv_times(c, one);
                else
                    add_pv(c);
                if constexpr (kLateWait) {
                    alpha0 *= one;
                    alpha1 *= one;
                }
                if constexpr (kOnesL) {
                    add_l(c, wprev * one, alpha0, alpha1); /* tile n-1's sums, in m(n) like O */
                    wprev = imult;
                }
                if constexpr (kOrder && !kFmaO) { /* the multiplies wait for the row sums too (exact: x 1) */
                    alpha0 *= fmaf(c.sum0, zf, 1.f);
                    alpha1 *= fmaf(c.sum1, zf, 1.f);
                }
                if constexpr (!kFmaO) rescale_o<kRescaleAll>(c, alpha0, alpha1);
                if constexpr (kKeepA)
                    convert_p_keep<kExpScale>(c, kExpScale ? 1.f : (256.f * svn) / svmax, __float_as_uint(zf));
                else
                    convert_p<kExpScale>(c, kExpScale ? 1.f : (256.f * svn) / svmax);
                if constexpr (kPSmem) store_p<kPWarp>(c, sPw, wgi, w, g, t);
            }
            {
                const int sp = (nkt - 1) % kStages;
                sm90::mbar_wait(bars.vfull(sp), (uint32_t)((nkt - 1) / kStages) & 1u);
                if constexpr (kPSmem)
                    issue_pv_ss(c, dp, sV + sp * L::kVStride);
                else
                    issue_pv<kTcAcc, kOnesL, kXNoGemm>(c, sV + sp * L::kVStride);
                sm90::wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < 68; ++i) sm90::fence_reg(c.pv[i]); /* 64..67: kFOnesL row sums */
                release(bars.vempty(sp), lane);
                if constexpr (kFmaO)
                    fma_pv(c, aprev0, aprev1); /* O in the final frame m(nkt-1) */
                else if constexpr (!kTcAcc)
                    add_pv(c);
                if constexpr (kOnesL) add_l(c, wprev, 1.f, 1.f);
            }
        } else {
            for (int n = 0; n < nkt; ++n) {
                const int st = n % kStages;
                const uint32_t ph = (uint32_t)(n / kStages) & 1u;
                const float skn = sk_h[n], svn = sv_h[n];
                sm90::mbar_wait(bars.kfull(st), ph);
                issue_qk(c, dq, sK + st * kTile);
                sm90::wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < 64; ++i) sm90::fence_reg(c.s[i]);
                release(bars.kempty(st), lane);
                softmax(c, (sqq * skn) * kScaleLog2, n == nkt - 1 ? klast : kBN, t, alpha0, alpha1);
                rescale_o(c, alpha0, alpha1);
                convert_p(c, (256.f * svn) / svmax);
                sm90::mbar_wait(bars.vfull(st), ph);
                issue_pv(c, sV + st * L::kVStride);
                sm90::wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < 68; ++i) sm90::fence_reg(c.pv[i]); /* 64..67: kFOnesL row sums */
                release(bars.vempty(st), lane);
                add_pv(c);
            }
        }
        /* ---------------- epilogue ---------------- */
        c.l0 += __shfl_xor_sync(0xffffffffu, c.l0, 1);
        c.l1 += __shfl_xor_sync(0xffffffffu, c.l1, 1);
        c.l0 += __shfl_xor_sync(0xffffffffu, c.l0, 2);
        c.l1 += __shfl_xor_sync(0xffffffffu, c.l1, 2);
        const float f0 = (svmax * 0.00390625f) / c.l0, f1 = (svmax * 0.00390625f) / c.l1;
        const int row0 = qt * kBM + wgi * 64 + w * 16 + g, row1 = row0 + 8;
        const size_t ld = (size_t)H * kD;
        if (row0 < S) {
            uint16_t *op = O + (size_t)row0 * ld + (size_t)h * kD + 2 * t;
#pragma unroll
            for (int j = 0; j < 16; ++j)
                *reinterpret_cast<uint32_t *>(op + 8 * j) = pack_bf16x2(c.o[4 * j + 0] * f0, c.o[4 * j + 1] * f0);
            if (t == 0) lse[(size_t)h * S + row0] = (c.m0 + log2f(c.l0)) * 0.6931471805599453f;
        }
        if (row1 < S) {
            uint16_t *op = O + (size_t)row1 * ld + (size_t)h * kD + 2 * t;
#pragma unroll
            for (int j = 0; j < 16; ++j)
                *reinterpret_cast<uint32_t *>(op + 8 * j) = pack_bf16x2(c.o[4 * j + 2] * f1, c.o[4 * j + 3] * f1);
            if (t == 0) lse[(size_t)h * S + row1] = (c.m1 + log2f(c.l1)) * 0.6931471805599453f;
        }
    }
#else
    (void)sq, (void)sk, (void)sv, (void)S, (void)H, (void)S_pad, (void)nqt, (void)O, (void)lse;
#endif
}

/* ------------------------------------------------------------------ host */

/* 2D tensor map over a row-major byte matrix [rows][inner], 128 x 128 boxes,
 * 128-byte swizzle (the box's inner extent is exactly 128 bytes). */
static int make_tmap(CUtensorMap *m, const void *ptr, uint64_t inner, uint64_t rows)
{
    const cuuint64_t dims[2] = {inner, rows};
    const cuuint64_t strides[1] = {inner}; /* bytes, dims 1.. */
    const cuuint32_t box[2] = {128, 128};
    const cuuint32_t estr[2] = {1, 1};
    CUresult r = h3k_tensor_map_encode_tiled(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void *>(ptr), dims, strides,
                                        box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : (int)cudaErrorInvalidValue;
}

extern "C" int h3k_attn_fp8_sm90_key_tile(void) { return kBN; }

/* ---- variants: one entry per template instance, indexed by H3_SM90_VARIANT */

typedef void (*KernelFn)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const float *, const float *,
                         const float *, int, int, int, int, uint16_t *, float *);

struct Variant {
    KernelFn fn;
    int smem; /* dynamic shared memory bytes */
    const char *name;
};

template <int St, unsigned F> static Variant make_variant(const char *name)
{
    return Variant{h3k_attn_fp8_sm90_kernel<St, F>, SmemLayout<St>::kBytes, name};
}

static const Variant *variants(int *count)
{
    static const Variant v[] = {
        make_variant<2, 0>("v0 in-order, 2 stages"),
        make_variant<2, kFOverlap>("v1 overlap, 2 stages"),
        make_variant<2, kFOverlap | kFPingPong>("v2 overlap+pingpong, 2 stages"),
        make_variant<3, kFOverlap | kFPingPong>("v3 overlap+pingpong, 3 stages"),
        make_variant<2, kFOverlap | kFPSmem>("v4 overlap, P via smem, 2 stages"),
        make_variant<2, kFOverlap | kFOrder>("v5 overlap, ordered O update, 2 stages"),
        make_variant<2, kFOverlap | kFPSmem | kFOrder>("v6 overlap, P via smem, ordered, 2 stages"),
        make_variant<2, kFOverlap | kFPSmem | kFOrder | kFPingPong>("v7 overlap+pingpong, P via smem, ordered, 2 stages"),
        make_variant<3, kFOverlap | kFPSmem | kFOrder>("v8 overlap, P via smem, ordered, 3 stages"),
        make_variant<2, kFOverlap | kFPSmem | kFOrder | kFPWarp>("v9 overlap, P via smem (warp sync), ordered, 2 stages"),
        make_variant<2, kFOverlap | kFPSmem | kFOrder | kFPWarp | kFPingPong>(
            "v10 overlap+pingpong, P via smem (warp sync), ordered, 2 stages"),
        make_variant<2, kFOverlap | kFTcAcc>("v11 EXPERIMENT overlap, O accumulated in the tensor cores"),
        make_variant<2, kFOverlap | kFTcAcc | kFPingPong>("v12 EXPERIMENT overlap+pingpong, O in the tensor cores"),
        make_variant<2, kFOverlap | kFRescaleAll>("v13 overlap, O rescaled every tile, 2 stages"),
        make_variant<2, kFOverlap | kFPSmem | kFOrder | kFRescaleAll>(
            "v14 overlap, P via smem, ordered, O rescaled every tile, 2 stages"),
        make_variant<2, kFOverlap | kFPSmem | kFOrder | kFRescaleAll | kFPingPong>(
            "v15 overlap+pingpong, P via smem, ordered, O rescaled every tile, 2 stages"),
        make_variant<2, kFOverlap | kFExpScale>("v16 overlap, P8 multiplier in the exponent, 2 stages"),
        make_variant<2, kFOverlap | kFExpScale | kFOnesL>("v17 v16 + l from a ones column of the PV GEMM, 2 stages"),
        make_variant<2, kFOverlap | kFExpScale | kFOnesL | kFLateWait>("v18 v17 + wait for PV(n-1) after P8(n), 2 stages"),
        make_variant<2, kFOverlap | kFExpScale | kFOnesL | kFPingPong>("v19 v17 + pingpong, 2 stages"),
        make_variant<2, kFOverlap | kFExpScale | kFOnesL | kFLateWait | kFPingPong>("v20 v18 + pingpong, 2 stages"),
        make_variant<3, kFOverlap | kFExpScale | kFOnesL | kFLateWait>("v21 v18, 3 stages"),
        make_variant<2, kFOverlap | kFXNoLoad>("v22 ABLATION v1 without K/V loads after the first two (wrong output)"),
        make_variant<2, kFOverlap | kFXNoSoftmax>("v23 ABLATION v1 without softmax (wrong output)"),
        make_variant<2, kFOverlap | kFXNoGemm>("v24 ABLATION v1 without wgmma (wrong output)"),
        make_variant<2, kFOverlap | kFExpScale | kFOnesL | kFLateWait | kFXNoLoad>(
            "v25 ABLATION v18 without K/V loads after the first two (wrong output)"),
        make_variant<2, kFOverlap | kFPingPong | kFXNoLoad>("v26 ABLATION v2 without K/V loads after the first two (wrong output)"),
        make_variant<2, kFOverlap | kFXNoSoftmax | kFXNoLoad>("v27 ABLATION v1 without softmax and loads (wrong output)"),
        make_variant<2, kFOverlap | kFExpScale | kFOnesL | kFLateWait | kFKeepA>("v28 v18 + P8 fragments kept live, 2 stages"),
        make_variant<2, kFOverlap | kFOrder | kFKeepA>("v29 v5 + P8 fragments kept live, 2 stages"),
        make_variant<2, kFOverlap | kFOrder | kFKeepA | kFPingPong>("v31 v29 + pingpong, 2 stages"),
        make_variant<3, kFOverlap | kFOrder | kFKeepA>("v32 v29, 3 stages"),
        make_variant<2, kFOverlap | kFOrder | kFKeepA | kFFmaO>("v34 v29 + O = O alpha + pv in one FMA, 2 stages"),
        make_variant<2, kFOverlap | kFOrder | kFKeepA | kFFmaO | kFExpScale>("v35 v34 + P8 multiplier in the exponent, 2 stages"),
        make_variant<2, kFOverlap | kFOrder | kFKeepA | kFFmaO | kFPingPong>("v36 v34 + pingpong, 2 stages"),
        make_variant<2, kFOverlap | kFExpTurn>("v37 v1 + exp turns, 2 stages"),
        make_variant<2, kFOverlap | kFOrder | kFKeepA | kFFmaO | kFExpTurn>("v38 v34 + exp turns, 2 stages"),
        make_variant<2, kFOverlap | kFExpScale | kFOnesL | kFExpTurn>("v39 v17 + exp turns, 2 stages"),
        make_variant<2, kFOverlap | kFExpScale | kFExpTurn>("v40 v16 + exp turns, 2 stages"),
        make_variant<2, kFOverlap | kFExpScale | kFFmaO>("v41 v16 + O = O alpha + pv in one FMA, 2 stages"),
        make_variant<2, kFOverlap | kFOrder | kFKeepA | kFXNoLoad>("v33 ABLATION v29 without K/V loads after the first two (wrong output)"),
    };
    *count = (int)(sizeof v / sizeof v[0]);
    return v;
}

/* H3_SM90_VARIANT, parsed once (unset or empty: the default; anything but a
 * listed index: one warning, then the default). Race-benign: every caller
 * computes the same value. */
/* The entry whose name reads "vN ..." (names, not array positions, carry
 * the numbers, so entries can be added or retired without renumbering). */
static int variant_index(const Variant *v, int n, long number)
{
    for (int i = 0; i < n; ++i)
        if (v[i].name[0] == 'v' && strtol(v[i].name + 1, NULL, 10) == number) return i;
    return -1;
}

/* H3_SM90_VARIANT=N, parsed once (unset or empty: the default; a number no
 * entry carries: one warning, then the default). Race-benign: every caller
 * computes the same value. */
static int selected_variant(void)
{
    static int cached = -1;
    if (cached >= 0) return cached;
    int n = 0;
    const Variant *v = variants(&n);
    int sel = variant_index(v, n, H3_SM90_DEFAULT_VARIANT);
    const char *env = getenv("H3_SM90_VARIANT");
    if (env && *env) {
        char *end = NULL;
        const long x = strtol(env, &end, 10);
        const int i = *end == '\0' ? variant_index(v, n, x) : -1;
        if (i >= 0)
            sel = i;
        else
            fprintf(stderr, "h3block: H3_SM90_VARIANT=%s names no variant; using %s\n", env, v[sel].name);
    }
    cached = sel;
    return sel;
}

extern "C" const char *h3k_attn_fp8_sm90_variant_name(void)
{
    int n = 0;
    return variants(&n)[selected_variant()].name;
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
    int n = 0;
    const Variant *v = variants(&n);
    cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, v[selected_variant()].fn) != cudaSuccess) {
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
                                 const float *sk, const float *sv, int S, int H, uint16_t *O, float *lse,
                                 h3_stream stream)
{
    if (S < 1 || H < 1) return (int)cudaErrorInvalidValue;
    if (((uintptr_t)q8 | (uintptr_t)k8 | (uintptr_t)vt8) & 15u) return (int)cudaErrorInvalidValue; /* TMA */
    if (!h3k_attn_fp8_sm90_available()) return (int)cudaErrorNoKernelImageForDevice;
    const int nqt = (S + kBM - 1) / kBM;
    const int S_pad = nqt * kBM;
    if ((long long)H * nqt > 0x7fffffffLL) return (int)cudaErrorInvalidValue;

    CUtensorMap tq, tk, tv;
    int e;
    if ((e = make_tmap(&tq, q8, kD, (uint64_t)H * S_pad)) != 0) return e;
    if ((e = make_tmap(&tk, k8, kD, (uint64_t)H * S_pad)) != 0) return e;
    if ((e = make_tmap(&tv, vt8, (uint64_t)S_pad, (uint64_t)H * kD)) != 0) return e;

    int n = 0;
    const Variant &v = variants(&n)[selected_variant()];
    cudaError_t ce = cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem);
    if (ce != cudaSuccess) return (int)ce;
    v.fn<<<H * nqt, kThreads, v.smem, (cudaStream_t)stream>>>(tq, tk, tv, sq, sk, sv, S, H, S_pad, nqt, O, lse);
    return (int)cudaGetLastError();
}
