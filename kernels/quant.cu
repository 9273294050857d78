/* quant.cu — stage qk_norm_rope_quant: q/k RMSNorm + RoPE + FP8 quantisation
 * of Q, K and V in one pass over the qkv GEMM output (DESIGN.md §1 step 4, §3).
 *
 * In:  qkv [S][3*H*128] bf16 (grouped: qkv[s][384h + {0,128,256} + d]),
 *      rope [S][H3_ROPE_TAB] f32 (the cos and sin of every token's 48 angles,
 *      h3k_rope_table below, once per sequence), qw, kw [128] bf16.
 * Out: q8, k8 [H][S_pad][128] e4m3, vt8 [H][128][S_pad] e4m3 (transposed,
 *      keys permuted: vt8[h][d][128g + p] = code of key 128g + slot_key(p),
 *      config.h), sq, sk, sv [H][G] f32. Padding tokens (>= S) are code 0.
 *
 * Numerics (cpu_ref.h, cpu_ref/rope_quant.c): t = bf16(x * rs * w),
 * rs = 1 / sqrtf(sum(x^2) / 128 + eps); RoPE on dims 0..95 with
 * f = pos[axis] * omega[j] (one FP32 product), sincosf (the precise one,
 * <= 2 ulp), y = bf16(t cos f -/+ t' sin f); dims 96..127 pass. Per (head,
 * 128-token group): amax over the group's valid tokens x 128 dims (exact, any
 * order), s = amax / 448 (1 if amax == 0), code = cvt.rn.satfinite.e4m3(x *
 * (448 / amax)) with an IEEE division — identical to h3_f32_to_e4m3, so codes
 * and scales match the CPU bit for bit whenever the BF16 q/k values do; those
 * differ only where the 16-lane sum-of-squares order or sincosf's last bit
 * moves a BF16 rounding (then by 1 ulp, and a code by at most 1).
 *
 * One CTA per (tensor, head h, group g), 8 warps: the q, k and v tiles of a
 * (group, head) are independent (each has its own scale), so each gets its
 * own CTA and 32 KiB of shared memory (BF16), 3 CTAs and 24 warps per SM
 * where one CTA holding all three (96 KiB) allowed 2 and 16 warps; the grid
 * runs (tensor, head) fastest, so the CTAs in flight read whole qkv rows.
 * faster than one CTA holding all three, with the same arithmetic per value
 * (dit_block's output bit for bit the same; figures in the journal).
 * Q or K (qk_rows): each warp owns 16 tokens, two at a time (one per 16-lane
 * half, lane c holding dims 8c..8c+7: 16-byte loads), the RMS is a 16-lane
 * shuffle sum and the RoPE partner chunk (c +- 6) comes by shuffle. The
 * angles' cos and sin come from the table (64 bytes per lane and token,
 * L2-resident: 11.6 MB at S = 30272); computing them here, as this kernel did
 * before, repeated the same sincosf in all H heads' CTAs. The kernel is
 * issue- and latency-bound, not bandwidth-bound, so this phase is written for
 * few instructions and loads in flight: t is rounded to BF16 two values per
 * cvt (the packed words are the partner's payload), all lanes run one RoPE
 * path (the sign folded into sin, dims 96..127 selected), the amax is taken
 * on the unrounded y and rounded once (rounding is monotone), and the next
 * batch of 4 token pairs is loaded before this one's arithmetic. Then the
 * block amax, and the codes written as coalesced 16-byte rows.
 * V: the raw tile is loaded (8 loads per thread in flight), its amax taken
 * (of v - mu when smoothed), and it is transposed through shared memory (a
 * warp reads one key row, 32 consecutive words: conflict-free) so every lane
 * writes 32 contiguous bytes of two vt8 rows.
 *
 * Q/K rotation (rot_qk, config.h; a template flag, so the default kernel's
 * code is unchanged): after RoPE each q/k token vector, rounded to BF16, is
 * rotated in registers (rotate_row: signs, the butterflies of dim bits 0-2
 * within a lane and 3-6 across lanes by shuffle, the scale) and then rounded
 * to BF16 again; the amax and codes follow as before. 80 registers, no
 * spills (the next batch is then not prefetched: with it, 28 bytes
 * spilled). The rotation costs about what its ~150 more instructions per
 * token pair and lane cost at one issue per SMSP per clock; an exchange of
 * half the values per stage, a prefetch with 2 CTAs per SM and the spilling
 * prefetch all measured slower (docs/perf.md, "Tried, did not pay").
 *
 * V smoothing (vmu != NULL, cpu_ref.h): V is quantised as the FP32
 * difference v - mu[h][d] (amax over the group's valid tokens, padding keys
 * code 0); mu comes from h3k_v_mean (below), which sums each column in
 * double in the fixed order of config.h's H3_VMEAN_LANES so that the CPU's
 * cpu_v_mean gets the same bits (under --gpus P: h3k_v_colsum per rank and
 * h3k_v_mean_parts over the ranks, sp.c). */
#include "common.cuh"
#include "config.h"
#include "kernels.h"

#define QK_THREADS 256
/* Q, K or V of one (group, head): 128 x 128 BF16 = 32 KiB of shared memory
 * (under the 48 KiB default: no attribute to set). 3 CTAs per SM at 80
 * registers, no spills. A cap of 64 registers (4 CTAs) spills 56 bytes for
 * a gain too small to be worth the spills (the journal has the figures). */
#define QK_TILE_BYTES (128 * 128 * 2)
#define QK_MIN_BLOCKS 3

struct h3_omega16 {
    float w[16];
};

/* h3_v_slot_key (config.h) for device code; the test checks the layout against the CPU. */
__host__ __device__ constexpr int slot_key(int s)
{
    return (s & ~15) + (((s & 15) & 3) >> 1) * 8 + ((s & 15) >> 2) * 2 + ((s & 15) & 1);
}

/* Q/K rotation (config.h, cpu_rotate_qk) of one token's vector, held by the
 * 16 lanes of a half, lane c with dims 8c..8c+7 in y: y is rounded to BF16
 * (the contract rotates the BF16 q/k), its signs flipped, the butterflies of
 * dim bits 0-2 run in registers and those of bits 3-6 across lanes c ^ 1, 2,
 * 4, 8 (the lower dim of a pair gets a + b, the upper a - b, as the CPU
 * computes them), and the result is scaled by 128^-1/2; the caller rounds it
 * to BF16. Every lane of both halves must call it (shuffles). */
static __device__ __forceinline__ void rotate_row(float (&y)[8], uint32_t sig, int c)
{
    float r[8];
    h3d_unpack8(h3d_pack8(y), r);
#pragma unroll
    for (int j = 0; j < 8; j++) r[j] = __int_as_float(__float_as_int(r[j]) ^ (int)((sig >> j & 1u) << 31));
#pragma unroll
    for (int len = 1; len < 8; len *= 2)
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (!(j & len)) {
                const float a = r[j], b = r[j + len];
                r[j] = __fadd_rn(a, b);
                r[j + len] = __fsub_rn(a, b);
            }
#pragma unroll
    for (int m = 1; m < 16; m *= 2) {
        const bool upper = c & m;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float p = __shfl_xor_sync(0xffffffffu, r[j], m);
            r[j] = upper ? __fsub_rn(p, r[j]) : __fadd_rn(r[j], p);
        }
    }
#pragma unroll
    for (int j = 0; j < 8; j++) y[j] = __fmul_rn(r[j], H3_ROT_SCALE);
}

/* Phase 1 of a Q or K CTA: RMSNorm and RoPE of the group's tokens into the
 * BF16 tile T [128 tokens][16 chunks]; returns the thread's amax (rounded to
 * BF16). Each warp owns 16 tokens, two at a time: lanes 0-15 one token, lanes
 * 16-31 the next, lane c of a half holding dims 8c..8c+7 (16-byte loads). The
 * RMS is a 16-lane shuffle sum and the RoPE partner chunk (c +- 6) comes by
 * shuffle, both within the half. Padding tokens (>= n) load zeros and run
 * the same path, so the halves never diverge around the shuffles; their
 * table rows are not read and their rows are stored as +0. */
template <bool kRot>
static __device__ __forceinline__ float qk_rows(const uint16_t *__restrict__ src, /* qkv + this head's q or k */
                                                size_t W3, const float *__restrict__ rope, const uint16_t *w, int g,
                                                int n, float eps, uint4 *T)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int half = lane >> 4, c = lane & 15;
    const int partner = c < 6 ? lane + 6 : (c < 12 ? lane - 6 : lane);
    const int rc = c < 12 ? c % 6 : 0; /* rotary chunk 0..5: its cos | sin in the table row (h3k_rope_table) */
    float wn[8];
    h3d_unpack8(h3d_ld16(w + 8 * c), wn);
    uint32_t sig = 0; /* Q/K rotation: the signs of dims 8c..8c+7 (byte c % 4 of word c / 4) */
    if (kRot) {
        constexpr uint32_t kSig[4] = H3_ROT_SIGNS;
#pragma unroll
        for (int k = 0; k < 4; k++) /* constant indices: kSig[c >> 2] would go to local memory */
            if (k == c >> 2) sig = kSig[k] >> (8 * (c & 3)) & 0xffu;
    }
    const uint4 zero = make_uint4(0, 0, 0, 0);
    float am = 0.0f;
    /* Batches of 4 token pairs; the next batch's loads are issued before
     * this one's arithmetic. */
    uint4 nx[4];
    const auto load_batch = [&](int bt) {
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const int i = warp * 16 + bt * 8 + 2 * t + half;
            nx[t] = i < n ? h3d_ld16_stream(src + ((size_t)g * H3_QGROUP + i) * W3 + 8 * c) : zero;
        }
    };
    load_batch(0);
#pragma unroll 1
    for (int b = 0; b < 2; b++) {
        /* with the rotation's registers the prefetch would spill (28 bytes
         * at the 80-register cap): the rotated kernel loads each batch
         * where it starts */
        if (kRot && b == 1) load_batch(1);
        const uint4 xb[4] = {nx[0], nx[1], nx[2], nx[3]};
        if (!kRot && b == 0) load_batch(1);
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const int i = warp * 16 + b * 8 + 2 * t + half;
            const size_t s = (size_t)g * H3_QGROUP + i;
            float x[8], tt[8];
            h3d_unpack8(xb[t], x);
            float ss = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) ss += x[j] * x[j];
#pragma unroll
            for (int o = 8; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o); /* within the 16-lane half */
            const float rs = 1.0f / sqrtf(ss / 128.0f + eps);
            /* t rounded to BF16 two at a time: the packed words are both the
             * partner's shuffle payload and, unpacked, the rounded values */
#pragma unroll
            for (int j = 0; j < 8; j++) tt[j] = x[j] * rs * wn[j];
            const uint4 tp4 = h3d_pack8(tt);
            h3d_unpack8(tp4, tt);
            uint4 pp;
            pp.x = __shfl_sync(0xffffffffu, tp4.x, partner);
            pp.y = __shfl_sync(0xffffffffu, tp4.y, partner);
            pp.z = __shfl_sync(0xffffffffu, tp4.z, partner);
            pp.w = __shfl_sync(0xffffffffu, tp4.w, partner);
            /* y = t cos -/+ t' sin as fma(t, cos, round(t' (-/+sin))): the
             * contraction GCC makes of the CPU twin (cpu_ref/rope_quant.c);
             * the sign folded into sin so that all lanes run one path (dims
             * 96..127, c >= 12, take t itself below) */
            float cs[8] = {0, 0, 0, 0, 0, 0, 0, 0}, sn[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (c < 12 && i < n) { /* the angles of dims 8rc..8rc+7, shared by the pair's two chunks */
                const float4 *ta = reinterpret_cast<const float4 *>(rope + s * H3_ROPE_TAB + 16 * rc);
                const float4 c0 = __ldg(ta), c1 = __ldg(ta + 1), s0 = __ldg(ta + 2), s1 = __ldg(ta + 3);
                cs[0] = c0.x, cs[1] = c0.y, cs[2] = c0.z, cs[3] = c0.w, cs[4] = c1.x, cs[5] = c1.y, cs[6] = c1.z;
                cs[7] = c1.w;
                sn[0] = s0.x, sn[1] = s0.y, sn[2] = s0.z, sn[3] = s0.w, sn[4] = s1.x, sn[5] = s1.y, sn[6] = s1.z;
                sn[7] = s1.w;
            }
            float tp[8], y[8];
            h3d_unpack8(pp, tp);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float r = __fmaf_rn(tt[j], cs[j], __fmul_rn(tp[j], c < 6 ? -sn[j] : sn[j]));
                y[j] = c < 12 ? r : tt[j];
            }
            if (kRot) rotate_row(y, sig, c);
            /* amax of the unrounded y: BF16 rounding is monotone and odd, so
             * max |bf16(y)| = bf16(max |y|), taken once at the end */
#pragma unroll
            for (int j = 0; j < 8; j++) am = fmaxf(am, fabsf(y[j]));
            /* padding tokens: +0 codes (x = 0 gives y = -0 where w < 0) */
            T[i * 16 + c] = i < n ? h3d_pack8(y) : zero;
        }
    }
    return h3d_round_bf16(am);
}

/* The codes of a Q or K tile from the BF16 tile T [128 tokens][16 chunks]
 * and its amax, as coalesced 16-byte rows from dst (the tile's first row);
 * the scale into *s. Not inlined: inlined into qk_norm_rope_quant_kernel,
 * ptxas spills 12-28 bytes there at the 80-register cap; a call per CTA
 * costs nothing measurable. */
static __device__ __noinline__ void qk_tile_codes(const uint4 *tile, float amax, uint8_t *dst, float *s)
{
    const float inv = h3d_row_inv(amax); /* the per-row convention, per (head, group) here */
    if (threadIdx.x == 0) *s = h3d_row_scale(amax);
#pragma unroll
    for (int idx = threadIdx.x; idx < 128 * 8; idx += QK_THREADS) {
        const int r = idx >> 3, c16 = idx & 7;
        float a[8], bb[8];
        h3d_unpack8(tile[r * 16 + 2 * c16], a);
        h3d_unpack8(tile[r * 16 + 2 * c16 + 1], bb);
        const uint2 lo = h3d_e4m3x8(a, inv), hi = h3d_e4m3x8(bb, inv);
        h3d_st16(dst + r * 128 + 16 * c16, make_uint4(lo.x, lo.y, hi.x, hi.y));
    }
}

/* A thread's 8 rows of a group's 128-token tile: tokens i0 + 16k (k < 8) of
 * group g, dims 8c..8c+7, all 8 loads in flight at once; tokens >= n load 0. */
static __device__ __forceinline__ void load_tile_rows(const uint16_t *src, size_t ld, int g, int n, int c, int i0,
                                                      uint4 (&x)[8])
{
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int i = i0 + 16 * k;
        x[k] = i < n ? h3d_ld16_stream(src + ((size_t)g * H3_QGROUP + i) * ld + 8 * c) : make_uint4(0, 0, 0, 0);
    }
}

/* A V tile of one (head h, group g): the raw BF16 tile into shared memory
 * (all 8 loads of a thread in flight at once), the amax of v - mu over the
 * valid tokens, then the transposed codes (vt8) and the scale. src: this
 * head's V, token i at src + i * ld. */
static __device__ __forceinline__ void v_tile_codes(const uint16_t *src, size_t ld, int h, int g, int G,
                                                    int n, const float *vmu, uint4 *tile, float *scratch,
                                                    uint8_t *vt8, float *sv)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, S_pad = G * H3_QGROUP;
    const int c = threadIdx.x & 15, i0 = threadIdx.x >> 4; /* chunk (dims 8c..8c+7), first token */
    float vm[8] = {0, 0, 0, 0, 0, 0, 0, 0}; /* V's mean at dims 8c..8c+7 (0: not smoothed) */
    if (vmu)
#pragma unroll
        for (int j = 0; j < 8; j++) vm[j] = vmu[128 * h + 8 * c + j];
    uint4 xv[8];
    load_tile_rows(src, ld, g, n, c, i0, xv);
    float am = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int i = i0 + 16 * k;
        float v[8];
        h3d_unpack8(xv[k], v);
        if (i < n)
#pragma unroll
            for (int j = 0; j < 8; j++) am = fmaxf(am, fabsf(v[j] - vm[j]));
        tile[i * 16 + c] = xv[k]; /* raw BF16 (the mean comes off below); padding tokens are zero */
    }
    const float amax = h3d_block_max(am, scratch);
    if (threadIdx.x == 0) sv[(size_t)h * G + g] = h3d_row_scale(amax);
    /* ---- vt8: warp = 32 slots (jp) x 64 dims (half); lane: dims 2dp, 2dp+1 ---- */
    const int jp = warp & 3, dp = 32 * (warp >> 2) + lane;
    const uint32_t *V32 = (const uint32_t *)tile; /* [128 keys][64 words] */
    const float m = h3d_row_inv(amax);
    const float mlo = vmu ? vmu[128 * h + 2 * dp] : 0.0f, mhi = vmu ? vmu[128 * h + 2 * dp + 1] : 0.0f;
    uint32_t lo[8], hi[8]; /* codes of rows 2dp and 2dp+1, slots 32jp..32jp+31 */
#pragma unroll
    for (int q = 0; q < 8; q++) {
        float l4[4], h4[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int key = 32 * jp + slot_key(4 * q + e); /* slot_key(32jp + r) = 32jp + slot_key(r) */
            const uint32_t wv = V32[key * 64 + dp];
            /* v - 0 is v: unsmoothed codes are unchanged; padding keys stay 0 */
            l4[e] = key < n ? (h3d_bf16_lo(wv) - mlo) * m : 0.0f;
            h4[e] = key < n ? (h3d_bf16_hi(wv) - mhi) * m : 0.0f;
        }
        lo[q] = h3d_e4m3x4(l4[0], l4[1], l4[2], l4[3]);
        hi[q] = h3d_e4m3x4(h4[0], h4[1], h4[2], h4[3]);
    }
    uint8_t *r0 = vt8 + ((size_t)h * 128 + 2 * dp) * S_pad + (size_t)g * H3_QGROUP + 32 * jp;
    uint8_t *r1 = r0 + S_pad;
    h3d_st16(r0, make_uint4(lo[0], lo[1], lo[2], lo[3]));
    h3d_st16(r0 + 16, make_uint4(lo[4], lo[5], lo[6], lo[7]));
    h3d_st16(r1, make_uint4(hi[0], hi[1], hi[2], hi[3]));
    h3d_st16(r1 + 16, make_uint4(hi[4], hi[5], hi[6], hi[7]));
}

template <bool kRot>
__global__ void __launch_bounds__(QK_THREADS, QK_MIN_BLOCKS)
    qk_norm_rope_quant_kernel(const uint16_t *__restrict__ qkv,  // [S][3*H*128] bf16
                              const float *__restrict__ rope,    // [S][H3_ROPE_TAB] f32 (h3k_rope_table)
                              const uint16_t *__restrict__ qw,   // [128] bf16
                              const uint16_t *__restrict__ kw,   // [128] bf16
                              int S, int H, float eps,
                              const float *__restrict__ vmu,     // [H*128] f32 or NULL
                              uint8_t *__restrict__ q8,          // [H][S_pad][128] e4m3
                              uint8_t *__restrict__ k8,          // [H][S_pad][128] e4m3
                              uint8_t *__restrict__ vt8,         // [H][128][S_pad] e4m3
                              float *__restrict__ sq, float *__restrict__ sk,
                              float *__restrict__ sv)            // [H][G] f32
{
    extern __shared__ uint4 tile[]; /* [128 tokens][16 chunks] uint4 = [128][128] bf16 */
    __shared__ float scratch[32];

    const int which = blockIdx.x % 3, h = blockIdx.x / 3, g = blockIdx.y; /* which: 0 q, 1 k, 2 v */
    const int G = gridDim.y, S_pad = G * H3_QGROUP;
    const int n = min(H3_QGROUP, S - g * H3_QGROUP); /* valid tokens of this group */
    const size_t W3 = (size_t)H3_QKV_HEAD_STRIDE * H;
    const uint16_t *src = qkv + (size_t)H3_QKV_HEAD_STRIDE * h + (which == 2 ? H3_QKV_V_OFFSET : 128 * which);

    if (which < 2) {
        /* ---- Q or K: norm, rope, amax, codes as coalesced 16-byte rows ---- */
        const float amax = h3d_block_max(qk_rows<kRot>(src, W3, rope, which ? kw : qw, g, n, eps, tile), scratch);
        qk_tile_codes(tile, amax, (which ? k8 : q8) + ((size_t)h * S_pad + (size_t)g * H3_QGROUP) * 128,
                      (which ? sk : sq) + (size_t)h * G + g);
        return;
    }

    v_tile_codes(src, W3, h, g, G, n, vmu, tile, scratch, vt8, sv);
}

extern "C" int h3k_qk_norm_rope_quant(const uint16_t *qkv, const float *rope, const uint16_t *qw, const uint16_t *kw,
                                      int S, int H, float eps, const float *vmu, int rot_qk, uint8_t *q8, uint8_t *k8,
                                      uint8_t *vt8, float *sq, float *sk, float *sv, h3_stream stream)
{
    if (S <= 0 || H <= 0) return S == 0 && H > 0 ? 0 : (int)cudaErrorInvalidValue;
    /* grid: x = 3 H (q, k, v of each head), y = the groups */
    if (H > 65535 || h3_groups(S) > 65535) return (int)cudaErrorInvalidValue;
    if (!h3_aligned16(qkv) || !h3_aligned16(rope) || !h3_aligned16(qw) || !h3_aligned16(kw) || !h3_aligned16(q8) ||
        !h3_aligned16(k8) || !h3_aligned16(vt8))
        return (int)cudaErrorMisalignedAddress;
    /* x = (head, tensor) fastest: the CTAs in flight read whole qkv rows
     * (all heads' q, k, v of a token are adjacent) */
    const dim3 grid((unsigned)(3 * H), (unsigned)h3_groups(S));
    /* the rotation is a template flag: the default kernel's code stays as it was */
    if (rot_qk)
        qk_norm_rope_quant_kernel<true><<<grid, QK_THREADS, QK_TILE_BYTES, (cudaStream_t)stream>>>(
            qkv, rope, qw, kw, S, H, eps, vmu, q8, k8, vt8, sq, sk, sv);
    else
        qk_norm_rope_quant_kernel<false><<<grid, QK_THREADS, QK_TILE_BYTES, (cudaStream_t)stream>>>(
            qkv, rope, qw, kw, S, H, eps, vmu, q8, k8, vt8, sq, sk, sv);
    return (int)cudaGetLastError();
}

/* ---- Q, K and V as given (the library's attention, include/h3block.h):
 * the block's quantisation without the q/k norm and RoPE. Each tensor has
 * its own layout: element (s, h, d) of q at q[s * ld + h * hs + d]. One CTA
 * per (tensor, head, group) as above; a Q or K CTA loads its raw BF16 tile
 * (8 16-byte loads per thread in flight), takes the amax (exact: the values
 * are BF16 already) and writes the codes as qk_norm_rope_quant does. */
struct qkv_src {
    const uint16_t *p[3]; /* q, k, v */
    long ld[3], hs[3];    /* token and head strides, elements */
};

__global__ void __launch_bounds__(QK_THREADS, QK_MIN_BLOCKS)
    qkv_quant_kernel(qkv_src in, int S, const float *__restrict__ vmu, uint8_t *__restrict__ q8,
                     uint8_t *__restrict__ k8, uint8_t *__restrict__ vt8, float *__restrict__ sq,
                     float *__restrict__ sk, float *__restrict__ sv)
{
    extern __shared__ uint4 tile[];
    __shared__ float scratch[32];
    const int which = blockIdx.x % 3, h = blockIdx.x / 3, g = blockIdx.y;
    const int G = gridDim.y, n = min(H3_QGROUP, S - g * H3_QGROUP);
    const uint16_t *src = which == 0 ? in.p[0] : which == 1 ? in.p[1] : in.p[2];
    const long ld = which == 0 ? in.ld[0] : which == 1 ? in.ld[1] : in.ld[2];
    src += (size_t)h * (which == 0 ? in.hs[0] : which == 1 ? in.hs[1] : in.hs[2]);
    if (which == 2) {
        v_tile_codes(src, (size_t)ld, h, g, G, n, vmu, tile, scratch, vt8, sv);
        return;
    }
    const int c = threadIdx.x & 15, i0 = threadIdx.x >> 4;
    uint4 x[8];
    load_tile_rows(src, (size_t)ld, g, n, c, i0, x);
    float am = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        float f[8];
        h3d_unpack8(x[k], f);
#pragma unroll
        for (int j = 0; j < 8; j++) am = fmaxf(am, fabsf(f[j])); /* padding tokens are 0 */
        tile[(i0 + 16 * k) * 16 + c] = x[k];
    }
    const float amax = h3d_block_max(am, scratch); /* synchronises: the tile is complete */
    qk_tile_codes(tile, amax, (which ? k8 : q8) + ((size_t)h * G + g) * H3_QGROUP * 128,
                  (which ? sk : sq) + (size_t)h * G + g);
}

extern "C" int h3k_qkv_quant(const uint16_t *q, long q_ld, long q_hs, const uint16_t *k, long k_ld, long k_hs,
                             const uint16_t *v, long v_ld, long v_hs, int S, int H, const float *vmu, uint8_t *q8,
                             uint8_t *k8, uint8_t *vt8, float *sq, float *sk, float *sv, h3_stream stream)
{
    if (S < 1 || H < 1 || 3L * H > 0x7fffffffL || h3_groups(S) > 65535) return (int)cudaErrorInvalidValue;
    const qkv_src in = {{q, k, v}, {q_ld, k_ld, v_ld}, {q_hs, k_hs, v_hs}};
    for (int t = 0; t < 3; t++)
        if (!h3_aligned16(in.p[t]) || in.ld[t] % 8 || in.hs[t] % 8) return (int)cudaErrorMisalignedAddress;
    if (!h3_aligned16(q8) || !h3_aligned16(k8) || !h3_aligned16(vt8)) return (int)cudaErrorMisalignedAddress;
    const dim3 grid((unsigned)(3 * H), (unsigned)h3_groups(S));
    qkv_quant_kernel<<<grid, QK_THREADS, QK_TILE_BYTES, (cudaStream_t)stream>>>(in, S, vmu, q8, k8, vt8, sq, sk, sv);
    return (int)cudaGetLastError();
}

/* ---- the RoPE table: one thread per (token, angle a = 8 rc + j of 48);
 * f = pos[s][rc / 2] * omega[8 (rc % 2) + j] rounded to FP32 (__fmul_rn: the
 * CPU's f[a] = pos[a / 16] * omega[a % 16] exactly, which nvcc could
 * otherwise fuse into sincosf's range reduction) and the precise sincosf.
 * Not bit-identical to the angles the quant kernel computed itself before
 * (at S = 30272 its q8 / k8 codes then differed from the CPU's in 7.48e-6 /
 * 1.2e-6 of cases, with this table 7.44e-6 / 1.12e-6: docs/perf.md). */
__global__ void rope_table_kernel(const float *__restrict__ pos, int S, h3_omega16 om, float *__restrict__ tab)
{
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)S * 48) return;
    const long s = idx / 48;
    const int a = (int)(idx % 48), rc = a >> 3, j = a & 7;
    const int oi = 8 * (rc & 1) + j;
    float w = 0.0f;
#pragma unroll
    for (int k = 0; k < 16; k++) /* constant indices: om.w[oi] would copy om to local memory */
        if (k == oi) w = om.w[k];
    float sn, cs;
    sincosf(__fmul_rn(pos[s * 3 + (rc >> 1)], w), &sn, &cs);
    tab[s * H3_ROPE_TAB + 16 * rc + j] = cs;
    tab[s * H3_ROPE_TAB + 16 * rc + 8 + j] = sn;
}

extern "C" int h3k_rope_table(const float *pos, int S, const float *omega_host16, float *tab, h3_stream stream)
{
    if (S < 0 || !omega_host16) return (int)cudaErrorInvalidValue;
    if (S == 0) return 0;
    if (!h3_aligned16(tab)) return (int)cudaErrorMisalignedAddress;
    h3_omega16 om;
    for (int j = 0; j < 16; j++) om.w[j] = omega_host16[j];
    const long n = (long)S * 48;
    rope_table_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(pos, S, om, tab);
    return (int)cudaGetLastError();
}

/* ---- V smoothing's mean: one CTA per 64 columns (within one head), warp w
 * of H3_VMEAN_LANES (config.h) sums tokens w, w + LANES, ... of its lane's
 * two columns in double, then the partial sums are added in warp order.
 * 32 warps per CTA: with 16 the 112 CTAs of H = 56 kept too few loads in
 * flight (1.2 TB/s). kSum: the column sums themselves (double), for the
 * ranks of --gpus P, whose means add them up over ranks (h3k_v_mean_parts). */
#define VMEAN_COLS 64
static_assert(H3_VMEAN_LANES >= 1 && H3_VMEAN_LANES <= 32, "one warp per lane, at most 1024 threads per CTA");
template <bool kSum>
__global__ void __launch_bounds__(32 * H3_VMEAN_LANES)
    v_mean_kernel(const uint16_t *__restrict__ v, long ld, int stride_h, int S, float *__restrict__ mu,
                  double *__restrict__ sums)
{
    __shared__ double part[H3_VMEAN_LANES][VMEAN_COLS];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int c0 = blockIdx.x * VMEAN_COLS, h = c0 / 128, d = c0 % 128 + 2 * lane;
    const uint16_t *col = v + (size_t)h * stride_h + d;
    double a0 = 0.0, a1 = 0.0;
#pragma unroll 8
    for (int s = w; s < S; s += H3_VMEAN_LANES) {
        const uint32_t x = __ldg(reinterpret_cast<const unsigned int *>(col + (size_t)s * ld));
        a0 += (double)h3d_bf16_lo(x);
        a1 += (double)h3d_bf16_hi(x);
    }
    part[w][2 * lane] = a0;
    part[w][2 * lane + 1] = a1;
    __syncthreads();
    if (threadIdx.x < VMEAN_COLS) {
        double sum = 0.0;
        for (int k = 0; k < H3_VMEAN_LANES; k++) sum += part[k][threadIdx.x];
        if (kSum)
            sums[c0 + threadIdx.x] = sum;
        else
            mu[c0 + threadIdx.x] = (float)(sum / (double)S);
    }
}

/* the mean into mu, or (mu NULL) the column sums into sums */
static int v_mean_launch(const uint16_t *v, long ld, int stride_h, int S, int H, float *mu, double *sums,
                         h3_stream stream)
{
    if (S < 1 || H < 1 || !v || !(mu || sums)) return (int)cudaErrorInvalidValue;
    if (((uintptr_t)v & 3u) || (ld & 1) || (stride_h & 1)) return (int)cudaErrorMisalignedAddress;
    const unsigned grid = (unsigned)(H * 128 / VMEAN_COLS), threads = 32 * H3_VMEAN_LANES;
    if (mu)
        v_mean_kernel<false><<<grid, threads, 0, (cudaStream_t)stream>>>(v, ld, stride_h, S, mu, NULL);
    else
        v_mean_kernel<true><<<grid, threads, 0, (cudaStream_t)stream>>>(v, ld, stride_h, S, NULL, sums);
    return (int)cudaGetLastError();
}

extern "C" int h3k_v_mean(const uint16_t *v, long ld, int stride_h, int S, int H, float *mu, h3_stream stream)
{
    return v_mean_launch(v, ld, stride_h, S, H, mu, NULL, stream);
}

extern "C" int h3k_v_colsum(const uint16_t *v, long ld, int stride_h, int S, int H, double *sums, h3_stream stream)
{
    return v_mean_launch(v, ld, stride_h, S, H, NULL, sums, stream);
}

/* mu[c] = (sum over p = 0..P-1, in that order, of parts[p][c]) / S */
__global__ void v_mean_parts_kernel(const double *__restrict__ parts, int P, int n, int S, float *__restrict__ mu)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n) return;
    double sum = 0.0;
    for (int p = 0; p < P; p++) sum += parts[(size_t)p * n + c];
    mu[c] = (float)(sum / (double)S);
}

extern "C" int h3k_v_mean_parts(const double *parts, int P, int H, int S, float *mu, h3_stream stream)
{
    if (P < 1 || H < 1 || S < 1 || !parts || !mu) return (int)cudaErrorInvalidValue;
    const int n = H * 128;
    v_mean_parts_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(parts, P, n, S, mu);
    return (int)cudaGetLastError();
}
