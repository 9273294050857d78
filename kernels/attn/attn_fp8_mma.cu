/* attn_fp8_mma.cu — portable FP8 flash attention: mma.sync m16n8k32 e4m3 with
 * FP32 accumulate (sm_89 Ada, sm_90 Hopper, sm_120 consumer Blackwell).
 *
 * Inputs (device): q8, k8 [H][S_pad][128] e4m3 codes; vt8 [H][128][S_pad] e4m3,
 * V transposed, stored slot p of every 16-key group holding key
 * h3_v_slot_key(p) (src/config.h); sq, sk, sv [H][G] f32 (G = S_pad / 128).
 * Padding rows/keys are zero. Outputs: O [S][H*128] bf16, lse [H][S] f32; query
 * rows >= S are never written.
 *
 * CTA = 128 queries (one quantisation group) of one head, 4 warps x 32 queries
 * (two m16 tiles per warp, so every K/V fragment read from shared memory feeds
 * two MMAs). The key loop walks 32-key strips (kKeyTile, the online-softmax
 * step): K strip [32][128] and V strip [128 dims][32 slots] arrive by 16-byte
 * cp.async in a kStages-deep ring, one __syncthreads per strip. Q [128][128]
 * stays in shared memory and is re-read per strip (keeping it in registers
 * would cost 32 more registers and spill).
 *   S = Q K^T: per warp 2 m-tiles x 4 n-tiles x 4 k-steps of m16n8k32.
 *   P -> A operand in registers: the S accumulator gives a thread keys
 *     8j + 2t + {0,1} (j = 0..3) of rows g, g+8; n-tiles 0,1 go to k-slots
 *     4t..4t+3, n-tiles 2,3 to 16+4t..; V's stored key order puts the same
 *     keys in those slots, so no shuffle is needed.
 *   O += P V: 2 m-tiles x 16 n-tiles (dims) x one k32 step.
 * Shared-memory layout: 16-byte chunks XOR-swizzled within each 128-byte
 * bank period (Q, K rows are 128 B: chunk ^ (row % 8); V rows are 32 B, four
 * per period: chunk ^ ((row / 4) % 2)), so each 8-row ldmatrix matrix hits 8
 * distinct 16-byte bank groups.
 *
 * SASS (CUDA 13.0): sm_89 and sm_120 run QMMA.16832.F32.E4M3.E4M3 natively;
 * sm_90a has no FP8 mma.sync: ptxas emulates it as F2FP.F16.E4M3.UNPACK +
 * two HMMA.16816.F32 (exact: e4m3 -> f16 is lossless), so on Hopper this
 * kernel runs at FP16 mma.sync speed; attn_fp8_sm90.cu (wgmma) is the fast one.
 *
 * Numerics (cpu_ref.h `attention`, key_tile = 32, tiles never straddle a
 * scale group):
 *   c = (sq[gq] * sk[gk]) * (D^-0.5 log2 e); x = c * dot, dot the FP32 MMA sum;
 *   m_new = max(m, c * max dot) (= max x exactly: c > 0 and rounding is
 *   monotone); alpha = exp2(m - m_new), 0 while m = -inf (guards -inf - -inf);
 *   p = exp2(fma(dot, c, -m_new)) (one rounding instead of two; with ex2's
 *   2^-22 it is far below P's e4m3 step); l = l * alpha + sum p from FP32 p
 *   (per-thread partials, summed over the row's 4 threads at the end);
 *   P8 = e4m3_rne_satfinite(p * (256 sv[gk] / svmax)): p <= 1, so P8 <= 256,
 *   the top of e4m3's fine range, and V's group scale rides along for free;
 *   O = bf16(acc * ((svmax 2^-8) / l)), with V smoothed (vmu != NULL)
 *   bf16(fma(acc, (svmax 2^-8) / l, mu)); LSE = (m + log2 l) ln 2.
 *   Keys >= S: dot = -inf before the max, p = 0. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "attn_common.cuh"
#include "config.h"
#include "kernels.h"

namespace {

constexpr int kD = 128;       /* head dim = bytes per Q/K row */
constexpr int kBM = 128;      /* queries per CTA */
constexpr int kKeyTile = 32;  /* keys per strip */
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
#ifndef H3_MMA_KK_UNROLL
#define H3_MMA_KK_UNROLL 1 /* a rolled k-step loop stops ptxas hoisting every Q/K fragment (and spilling) */
#endif
constexpr int kKkUnroll = H3_MMA_KK_UNROLL;
#ifndef H3_MMA_STAGES
#define H3_MMA_STAGES 3
#endif
#ifndef H3_MMA_KK_UNROLL
#define H3_MMA_KK_UNROLL 1 /* a rolled k-step loop stops ptxas hoisting every Q/K fragment (and spilling) */
#endif
constexpr int kStages = H3_MMA_STAGES; /* K/V ring depth (>= 2) */
constexpr int kQBytes = kBM * kD;              /* 16 KB */
constexpr int kKBytes = kKeyTile * kD;         /* 4 KB per stage */
constexpr int kVBytes = kD * kKeyTile;         /* 4 KB per stage */
constexpr int kStageBytes = kKBytes + kVBytes;
constexpr int kSmemBytes = kQBytes + kStages * kStageBytes; /* + 8 G bytes of per-group scalars */

static_assert(kStages >= 2, "the ring needs two stages");
static_assert(H3_QGROUP % kKeyTile == 0 && kBM == H3_QGROUP, "a CTA is one query group; strips never straddle a key group");

/* Byte offset of 16-byte chunk c of a 128-byte row r (Q, K). */
__device__ __forceinline__ uint32_t swz128(int r, int c) { return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4)); }
/* Byte offset of chunk c (0, 1) of a 32-byte V row d. */
__device__ __forceinline__ uint32_t swz32(int d, int c) { return (uint32_t)(d * 32 + ((c ^ ((d >> 2) & 1)) << 4)); }

/* One strip's K and V into stage buffers (2 + 2 chunks per thread). */
__device__ __forceinline__ void load_strip(uint32_t sK, uint32_t sV, const uint8_t *kh, const uint8_t *vh, int S_pad,
                                           int key0, int tid)
{
#pragma unroll
    for (int it = 0; it < kKBytes / 16 / kThreads; it++) {
        const int idx = tid + it * kThreads, r = idx >> 3, c = idx & 7;
        h3a_cp_async16(sK + swz128(r, c), kh + (size_t)(key0 + r) * kD + c * 16);
    }
    /* V: thread d copies both 16-byte chunks of dim row d (one pointer). */
    static_assert(kD == kThreads, "one V row per thread");
    const uint8_t *vrow = vh + (size_t)tid * S_pad + key0;
#pragma unroll
    for (int c = 0; c < 2; c++) h3a_cp_async16(sV + swz32(tid, c), vrow + c * 16);
}

/* kMu: V smoothing's mean added in the epilogue. A template flag, not a
 * test of vmu: the run-time branch cost the sm_90a build 4 bytes of spills. */
template <bool kMu>
__global__ void __launch_bounds__(kThreads, 2)
attn_fp8_mma_kernel(const uint8_t *__restrict__ q8,  // [H][S_pad][128] e4m3
                    const uint8_t *__restrict__ k8,  // [H][S_pad][128] e4m3
                    const uint8_t *__restrict__ vt8, // [H][128][S_pad] e4m3, keys permuted
                    const float *__restrict__ sq,    // [H][G]
                    const float *__restrict__ sk,    // [H][G]
                    const float *__restrict__ sv,    // [H][G]
                    const float *__restrict__ vmu,   // [H*128] V smoothing's mean, or NULL
                    int S, int H, uint16_t *__restrict__ O, // [S][H*128] bf16
                    float *__restrict__ lse)                // [H][S] f32
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    extern __shared__ __align__(1024) uint8_t smem[]; /* Q | stages | scal [G] | red [4] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int qt = blockIdx.x, h = blockIdx.y;
    const int G = (S + H3_QGROUP - 1) / H3_QGROUP, S_pad = G * H3_QGROUP;
    const size_t plane = (size_t)S_pad * kD;
    const uint8_t *qh = q8 + h * plane, *kh = k8 + h * plane, *vh = vt8 + h * plane;
    const float *sqh = sq + (size_t)h * G, *skh = sk + (size_t)h * G, *svh = sv + (size_t)h * G;

    const uint32_t sQ = h3a_smem_addr(smem);
    const uint32_t sKV = sQ + kQBytes; /* stage s: K at sKV + s*kStageBytes, V after it */
    const int nstrips = (S + kKeyTile - 1) / kKeyTile;

    /* Q tile (group with strip 0), then strips 1..kStages-2. */
#pragma unroll
    for (int it = 0; it < kQBytes / 16 / kThreads; it++) {
        const int idx = tid + it * kThreads, r = idx >> 3, c = idx & 7;
        h3a_cp_async16(sQ + swz128(r, c), qh + (size_t)(qt * kBM + r) * kD + c * 16);
    }
#pragma unroll
    for (int s = 0; s < kStages - 1; s++) {
        if (s < nstrips) load_strip(sKV + s * kStageBytes, sKV + s * kStageBytes + kKBytes, kh, vh, S_pad, s * kKeyTile, tid);
        h3a_cp_async_commit();
    }

    /* svmax = max_g sv[h][g] (block reduction while the copies fly), then the
     * per-key-group scalars c and mult into shared memory: the strip loop
     * reads them with no global pointer or division of its own. */
    float2 *scal = (float2 *)(smem + kSmemBytes); /* [G] (c, mult) */
    float *red = (float *)(scal + G);             /* [kWarps] */
    float vmax = 0.0f;
    for (int i = tid; i < G; i += kThreads) vmax = fmaxf(vmax, svh[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, o));
    if (lane == 0) red[warp] = vmax;
    __syncthreads();
    const float svmax = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
    {
        const float sqv = sqh[qt];
        for (int i = tid; i < G; i += kThreads)
            scal[i] = make_float2((sqv * skh[i]) * H3A_SCALE_LOG2E, 256.0f * svh[i] / svmax);
    }
    /* (the loop's first barrier publishes scal) */

    /* Per-lane ldmatrix offsets. Lane l addresses row (l % 8) of matrix l / 8. */
    const int li = lane & 7, mi = lane >> 3;
    /* Q (A operand): matrix mi = rows +8*(mi&1), k-chunk +(mi>>1) of a 32-byte k-step. */
    /* Chunk 2kk + h of a row r is (2kk + h) ^ (r % 8) = chunk(h) ^ 2kk (bit 0 of
     * 2kk is clear), so the k-step moves an offset by XOR with kk << 5: one
     * register per operand instead of one per k-step. */
    const uint32_t qoff = swz128(warp * 32 + li + 8 * (mi & 1), mi >> 1);
    /* K (B operand, 2 n-tiles per x4): key +8*(mi>>1), k-chunk +(mi&1). */
    const uint32_t koff = swz128(li + 8 * (mi >> 1), mi & 1);
    /* V (B operand, 2 dim-tiles per x4): dim +8*(mi>>1), slot chunk (mi&1). */
    const uint32_t voff = swz32(li + 8 * (mi >> 1), mi & 1);

    float acc[2][16][4]; /* O: [m-tile][dim n-tile][frag] */
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int n = 0; n < 16; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[a][n][e] = 0.0f;
    float m_run[4], l_run[4]; /* rows (m-tile, g / g+8): index 2*mt + half */
#pragma unroll
    for (int r = 0; r < 4; r++) {
        m_run[r] = -INFINITY;
        l_run[r] = 0.0f;
    }

    for (int kt = 0; kt < nstrips; kt++) {
        const int stage = kt % kStages;
        /* Strip kt has landed (this thread's copies); the barrier makes every
         * thread's copies visible and proves strip kt-1 is finished, so its
         * stage may be refilled. */
        h3a_cp_async_wait<kStages - 2>();
        __syncthreads();
        {
            const int nk = kt + kStages - 1;
            const int ns = nk % kStages;
            if (nk < nstrips) load_strip(sKV + ns * kStageBytes, sKV + ns * kStageBytes + kKBytes, kh, vh, S_pad, nk * kKeyTile, tid);
            h3a_cp_async_commit(); /* possibly empty: keeps the group count uniform */
        }
        const uint32_t sK = sKV + stage * kStageBytes, sV = sK + kKBytes;

        /* ---- S = Q K^T (raw FP32 dots) ---- */
        float s[2][4][4];
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[a][j][e] = 0.0f;
#pragma unroll kKkUnroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t qa[2][4], kb[2][4];
#pragma unroll
            for (int a = 0; a < 2; a++) h3a_ldsm_x4(sQ + (qoff ^ (kk << 5)) + a * 16 * 128, qa[a]);
#pragma unroll
            for (int jp = 0; jp < 2; jp++) h3a_ldsm_x4(sK + (koff ^ (kk << 5)) + jp * 16 * 128, kb[jp]);
#pragma unroll
            for (int a = 0; a < 2; a++)
#pragma unroll
                for (int j = 0; j < 4; j++) h3a_mma_e4m3(s[a][j], qa[a], kb[j >> 1][2 * (j & 1)], kb[j >> 1][2 * (j & 1) + 1]);
        }

        /* Keys >= S (last strip only): -inf before the max. */
        if (kt * kKeyTile + kKeyTile > S) {
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kt * kKeyTile + 8 * j + 2 * t + (e & 1);
                    if (key >= S) {
                        s[0][j][e] = -INFINITY;
                        s[1][j][e] = -INFINITY;
                    }
                }
        }

        const float2 cm = scal[kt * kKeyTile / H3_QGROUP];
        const float c = cm.x, mult = cm.y;

        /* ---- online softmax, rows r = 2*mt + half ---- */
        uint32_t pa[2][4]; /* P as the PV A operand */
#pragma unroll
        for (int a = 0; a < 2; a++) {
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int r = 2 * a + half;
                float dmax = -INFINITY;
#pragma unroll
                for (int j = 0; j < 4; j++) dmax = fmaxf(dmax, fmaxf(s[a][j][2 * half], s[a][j][2 * half + 1]));
                dmax = fmaxf(dmax, __shfl_xor_sync(0xffffffffu, dmax, 1));
                dmax = fmaxf(dmax, __shfl_xor_sync(0xffffffffu, dmax, 2));
                const float m_new = fmaxf(m_run[r], c * dmax);
                /* m = -inf: exp2(-inf - m_new) would be NaN when m_new is -inf too. */
                const float alpha = m_run[r] == -INFINITY ? 0.0f : h3a_exp2(m_run[r] - m_new);
                const float neg_m = m_new == -INFINITY ? 0.0f : -m_new;
                float psum = 0.0f;
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        /* masked: fma(-inf, c, finite) = -inf -> ex2 = +0 */
                        const float p = h3a_exp2(fmaf(s[a][j][2 * half + e], c, neg_m));
                        psum += p;
                        s[a][j][2 * half + e] = p * mult;
                    }
                l_run[r] = l_run[r] * alpha + psum;
                m_run[r] = m_new;
#pragma unroll
                for (int n = 0; n < 16; n++) {
                    acc[a][n][2 * half] *= alpha;
                    acc[a][n][2 * half + 1] *= alpha;
                }
            }
            /* a0/a2: row g, a1/a3: row g+8; slots 4t.. = n-tiles 0,1, 16+4t.. = 2,3. */
            pa[a][0] = h3a_e4m3x4(s[a][0][0], s[a][0][1], s[a][1][0], s[a][1][1]);
            pa[a][1] = h3a_e4m3x4(s[a][0][2], s[a][0][3], s[a][1][2], s[a][1][3]);
            pa[a][2] = h3a_e4m3x4(s[a][2][0], s[a][2][1], s[a][3][0], s[a][3][1]);
            pa[a][3] = h3a_e4m3x4(s[a][2][2], s[a][2][3], s[a][3][2], s[a][3][3]);
        }

        /* ---- O += P V ---- */
#pragma unroll
        for (int np = 0; np < 8; np++) {
            uint32_t vb[4];
            h3a_ldsm_x4(sV + voff + np * 16 * 32, vb);
#pragma unroll
            for (int a = 0; a < 2; a++) {
                h3a_mma_e4m3(acc[a][2 * np], pa[a], vb[0], vb[1]);
                h3a_mma_e4m3(acc[a][2 * np + 1], pa[a], vb[2], vb[3]);
            }
        }
    }
    h3a_cp_async_wait<0>(); /* no copy may outlive the CTA */

    /* ---- epilogue ---- */
    const size_t I = (size_t)H * kD;
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int r = 2 * a + half;
            float l = l_run[r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int row = qt * kBM + warp * 32 + 16 * a + 8 * half + g;
            if (row < S) {
                const float fin = (svmax * 0.00390625f) / l; /* undo 256 / svmax, then 1/l */
                uint16_t *o = O + (size_t)row * I + (size_t)h * kD + 2 * t; // [S][H*128] bf16
                const float *mu = kMu ? vmu + (size_t)h * kD + 2 * t : nullptr; /* V smoothing: O = fma(acc, fin, mu) */
#pragma unroll
                for (int n = 0; n < 16; n++)
                    *(uint32_t *)(o + 8 * n) =
                        kMu ? h3a_bf16x2(__fmaf_rn(acc[a][n][2 * half], fin, mu[8 * n]),
                                         __fmaf_rn(acc[a][n][2 * half + 1], fin, mu[8 * n + 1]))
                            : h3a_bf16x2(acc[a][n][2 * half] * fin, acc[a][n][2 * half + 1] * fin);
                if (t == 0) lse[(size_t)h * S + row] = (m_run[r] + log2f(l)) * H3A_LN2;
            }
        }
#else
    (void)q8; (void)k8; (void)vt8; (void)sq; (void)sk; (void)sv; (void)vmu; (void)S; (void)H; (void)O; (void)lse;
#endif
}

} // namespace

extern "C" int h3k_attn_fp8_mma_key_tile(void) { return kKeyTile; }

extern "C" int h3k_attn_fp8_mma(const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq,
                                const float *sk, const float *sv, const float *vmu, int S, int H, uint16_t *O,
                                float *lse, h3_stream stream)
{
    if (S < 1 || H < 1 || H > 65535) return (int)cudaErrorInvalidValue;
    if ((uintptr_t)vmu & 3u) return (int)cudaErrorMisalignedAddress;
    const int G = h3_groups(S);
    const size_t smem = (size_t)kSmemBytes + (size_t)G * sizeof(float2) + kWarps * sizeof(float);
    void (*kern)(const uint8_t *, const uint8_t *, const uint8_t *, const float *, const float *, const float *,
                 const float *, int, int, uint16_t *, float *) = vmu ? attn_fp8_mma_kernel<true> : attn_fp8_mma_kernel<false>;
    if (smem > 48 * 1024) { /* opt-in beyond 48 KB: only for S > ~250k (G > 1024) */
        cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return (int)e;
    }
    dim3 grid((unsigned)G, (unsigned)H);
    kern<<<grid, kThreads, smem, (cudaStream_t)stream>>>(q8, k8, vt8, sq, sk, sv, vmu, S, H, O, lse);
    return (int)cudaGetLastError();
}
