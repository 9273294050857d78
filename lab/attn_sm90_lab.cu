/* attn_sm90_lab.cu — experiments on the Hopper attention kernel that are
 * still worth running, built only with -DH3_LAB=ON (lab/CMakeLists.txt) and
 * never used by the production code in kernels/. It reuses the production
 * pieces (kernels/attn/sm90_*.cuh) and adds one generalised three-consumer
 * loop whose compile-time options switch the experiments on:
 *
 *   v73   O kept in the tensor cores' accumulator and folded to an FP32 copy
 *         in shared memory every 8 tiles (no V mean)
 *   v78   O never folded (kept in the tensor cores for the whole row), V's
 *         mean added -- the default before it drifted on sharp rows
 *   v147  v78 with each tile's softmax scalars in a table (v78 past 376k)
 *   v148  v147 with the running max started finite (no -inf guards)
 *   v130  v78 with S summed in FP16 and the softmax on f16x2 (kS16 below);
 *         v136 / v137 its f16 exponent bias not / always compensated
 *   v160  v130 with each Q row shifted by its own 2^-k (not 2^-9), and
 *         v78's FP32 loop for a warpgroup whose logits may pass 64 in log2
 *         units (kFS16Row below; issue 35 item 2)
 *   v150  the production kernel (kernels/attn/sm90_wg3.cuh), for A/B runs
 *   v151  v150 without V's mean (for unsmoothed V)
 *   v152  v150 with the running max started finite
 *   v155  v147 with O folded to FP32 in shared memory every 8 tiles
 *   v156  the production kernel itself on the plain grid (no split CTAs,
 *         sm90_grid.h): the grid's A/B on the same code
 *   v157  the production launch itself (h3k_attn_fp8_sm90, smoothed V), so
 *         that lab/sm90_ab.sh times it in the same rounds as the variants
 *   v158  the production kernel with kFinite (running max started at
 *         -FLT_MAX, as v152 does for v150) on the split grid
 *   v159  the production kernel on the split grid (sm90_grid.h's plan for
 *         this device, as the launch runs it with kSplitGrid on)
 *   v161  v159 with its whole CTAs persistent: items from a counter, the
 *         next item's Q and K/V loading under the current one's end
 *   v162  v161 with each item's softmax-scalar table and V's scale maximum
 *         computed ahead by the producer warpgroup's idle warps
 *
 * Results of every variant, and of those retired to git history, are in
 * docs/perf.md ("Tried, did not pay") and docs/journal/. Entry points
 * (lab.h): h3lab_attn_sm90(variant, ...), h3lab_attn_sm90_name(variant),
 * h3lab_attn_sm90_smoothed(variant), h3lab_attn_sm90_grid(variant, ...)
 * (which rows run split, for the emulation); tools/bench/bench_attn
 * --variant N and tests/test_gpu_attention --variant N use them when built
 * with H3_LAB. */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "kernels.h"
#include "lab.h"
#include "sm90_epilogue.cuh"
#include "sm90_lab_utils.cuh"
#include "sm90_layout.cuh"
#include "sm90_pipeline.cuh"
#include "sm90_softmax.cuh"
#include "sm90_tmap.cuh"
#include "sm90_wg3.cuh"
#include "sm90_wgmma.cuh"

/* The loop's options (bits of the lab kernel's kF template parameter). */
enum : unsigned {
    kFTcO = 1u,     /* O accumulated in the tensor cores (never folded, or folded to shared memory every kFlush tiles) */
    kFFoldS = 2u,   /* each tile's P V into the S registers, O = fma(O, alpha, PV) in FP32 registers (production) */
    kFVMean = 4u,   /* V smoothed: its mean added in the epilogue */
    kFTab = 8u,     /* each tile's softmax scalars computed once per CTA into shared memory */
    kFFinite = 16u, /* the running max starts at -FLT_MAX: no -inf guards in the softmax */
    kFS16 = 32u,    /* S = Q K^T in an FP16 accumulator, softmax on f16x2 (Consumer16) */
    kFS16NC = 64u,  /* with kFS16: the exponent's f16 bias not compensated (softmax16) */
    kFS16AC = 128u, /* with kFS16: the bias compensated in every tile (softmax16) */
    kFS16Row = 256u, /* with kFS16: Q's rows shifted by their own 2^-k, FP32 loop for WGs with large logits (v160) */
};

/* The production layout plus, with kO32, the FP32 copy of O in shared memory
 * (64 floats per consumer thread) that the kFlush folds use. */
template <int St, bool kO32> struct LabLayout3 {
    using P = SmemLayout3<St>;
    static constexpr uint32_t kOffK = P::kOffK, kOffV = P::kOffV, kOffO = P::kOffBar,
                              kOffBar = kOffO + (kO32 ? kWg3Consumers * 128 * 64 * 4 : 0), kOffTab = kOffBar + 128;
    static constexpr int kBytes = (int)kOffBar + 128 + 1024;
    static_assert(kBytes <= kSmemMax, "over the sm_90 shared-memory limit per block");
};

/* ---- kS16 (v130, v136, v137): S = Q K^T summed in FP16 ----
 * The question: does an FP16 accumulator for Q K^T (wgmma .f16.e4m3.e4m3,
 * 32 registers instead of 64) with the softmax on f16x2 pairs (max.f16x2,
 * fma.rn.f16x2, ex2.approx.f16x2, a tree of add.f16x2 for the row sums, P8
 * converted from f16x2) make the loop faster? Half the S registers; in the
 * SASS 372 instructions per key tile against v78's 421 (no MUFU saved:
 * ex2.approx.f16x2 is two MUFU.EX2.F16, plus PRMTs to pair the halves).
 * FP16 overflows at 65504: with Q and K codes up to 448, 128 products reach
 * 25.7M. So each consumer warpgroup first scales its Q codes in shared memory
 * by 2^-9 (e4m3 -> f16 -> x 2^-9 -> e4m3 satfinite RNE; codes below 2^-6 of
 * the new range lose precision, below 2^-10 become 0), which bounds every
 * partial sum by 128 x 0.875 x 448 = 50176, and multiplies the tile scalar by
 * 2^9. Not the contract's arithmetic: the exponents are f16 fmas (their
 * bias compensated, see softmax16), the row sums FP16 trees, P8 rounded
 * from f16 exps. First run 2026-12-06 (H100): 6.6% faster than v78, as
 * accurate against FP64; the f16x2 register layout checked by the tests. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace {
struct Consumer16 {
    uint32_t s[32];   /* S as f16x2: s[2j] row g keys 8j + 2t, +1; s[2j + 1] the same keys of row g + 8; then p */
    float o[64];      /* O accumulator (tensor cores, never folded) */
    uint32_t p[4][4]; /* P8 as wgmma A fragments */
    float m0, m1, l0, l1;
    float lz0 = 0.f, lz1 = 0.f; /* the LSE's row sums (softmax16's kBiasLazy); l0, l1 normalise O */
};

/* store_output's LSE sums: lz (reduced over the row's four threads) */
static __device__ __forceinline__ void lse_sums(Consumer16 &c, float &z0, float &z1)
{
    c.lz0 += __shfl_xor_sync(0xffffffffu, c.lz0, 1);
    c.lz1 += __shfl_xor_sync(0xffffffffu, c.lz1, 1);
    c.lz0 += __shfl_xor_sync(0xffffffffu, c.lz0, 2);
    c.lz1 += __shfl_xor_sync(0xffffffffu, c.lz1, 2);
    z0 = c.lz0;
    z1 = c.lz1;
}

static __device__ __forceinline__ uint32_t hmax2(uint32_t a, uint32_t b)
{
    uint32_t r;
    asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
static __device__ __forceinline__ uint32_t hadd2(uint32_t a, uint32_t b)
{
    uint32_t r;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
static __device__ __forceinline__ uint32_t hexp2_fma(uint32_t x, uint32_t c, uint32_t b)
{
    uint32_t r;
    asm("{\n.reg .b32 y;\nfma.rn.f16x2 y, %1, %2, %3;\nex2.approx.f16x2 %0, y;\n}" : "=r"(r) : "r"(x), "r"(c), "r"(b));
    return r;
}
static __device__ __forceinline__ uint32_t f2h2(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
static __device__ __forceinline__ float2 h2f(uint32_t a)
{
    float2 r;
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.f32.f16 %0, lo;\ncvt.f32.f16 %1, hi;\n}"
        : "=f"(r.x), "=f"(r.y)
        : "r"(a));
    return r;
}
/* e4m3 codes of the pairs a (bytes 0, 1) and b (bytes 2, 3), satfinite RNE */
static __device__ __forceinline__ uint32_t e4m3x4_from_h2(uint32_t a, uint32_t b)
{
    uint32_t r;
    asm("{\n.reg .b16 lo, hi;\n"
        "cvt.rn.satfinite.e4m3x2.f16x2 lo, %1;\n"
        "cvt.rn.satfinite.e4m3x2.f16x2 hi, %2;\n"
        "mov.b32 %0, {lo, hi};\n}"
        : "=r"(r)
        : "r"(a), "r"(b));
    return r;
}
/* four e4m3 codes times 2^-k (0 <= k <= 14), back to e4m3 (satfinite RNE) */
static __device__ __forceinline__ uint32_t e4m3x4_scale_pow2(uint32_t w, int k)
{
    const uint32_t m = (uint32_t)(15 - k) << 10, m2 = m | (m << 16);
    uint32_t r;
    asm("{\n.reg .b16 a, b, ra, rb;\n.reg .b32 ha, hb;\n"
        "mov.b32 {a, b}, %1;\n"
        "cvt.rn.f16x2.e4m3x2 ha, a;\n"
        "cvt.rn.f16x2.e4m3x2 hb, b;\n"
        "mul.rn.f16x2 ha, ha, %2;\n"
        "mul.rn.f16x2 hb, hb, %2;\n"
        "cvt.rn.satfinite.e4m3x2.f16x2 ra, ha;\n"
        "cvt.rn.satfinite.e4m3x2.f16x2 rb, hb;\n"
        "mov.b32 %0, {ra, rb};\n}"
        : "=r"(r)
        : "r"(w), "r"(m2));
    return r;
}

/* Consumer warpgroup wgi's 64 Q rows (8 KB at qb, thread tw's words tw +
 * 128 i) times 2^-9, then made visible to wgmma (async proxy) and waited
 * for by the whole warpgroup (named barrier 1 + wgi). */
static __device__ __forceinline__ void scale_q_2m9(uint32_t qb, int tw, int wgi)
{
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const uint32_t addr = qb + (uint32_t)(tw + 128 * i) * 4u;
        uint32_t v;
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
        v = e4m3x4_scale_pow2(v, 9);
        asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
    }
    sm90::fence_proxy_async_smem();
    sm90::named_bar_sync(1 + wgi, 128);
}

/* ---- kFS16Row (v160): Q's rows shifted each by its own power of two ----
 * v130's fixed 2^-9 is what its LSE errors came from, more than the FP16
 * sums: it pushes most Q codes into e4m3's subnormals, where the re-rounding
 * moves a whole row's logits alike (a CPU model on the model-like block's
 * q, k at S = 4096: 1e-3 B of logit error, B the tile's Cauchy-Schwarz bound
 * in log2 units, against 3.6e-4 B with a shift per row; docs/journal,
 * 2026-12-07). So each row r takes the least k >= 0 with
 *   ||q8_r|| max_j ||k8_j|| 2^-k <= 65504 / 1.1,
 * which by Cauchy-Schwarz keeps every partial sum of its dots in f16's range
 * (the margin covers the re-rounding: at most 1/16 up for a normal code, and
 * codes re-rounded into subnormals add at most sqrt(128) 2^-10 to a norm that
 * is over 5 wherever k > 0), and its tile scalar is multiplied by 2^k. The
 * f16x2 exponent fma takes that scalar in f16 (softmax16), so k is also at
 * least the k0 that keeps the least one, sq 2^k log2(e) / sqrt(128) min_j
 * sk_j, at or over f16's least normal 2^-14. And where the FP16 sums
 * themselves would cost too much (their error grows as B, ~4e-4 B per
 * score), the warpgroup keeps Q as it came and runs v78's FP32 loop: when
 * any of its 64 rows has
 *   B_r = ||q8_r|| sq log2(e) / sqrt(128) max_j ||k8_j|| sk_j > kRowLimit,
 * or k0 > 14. The head's max_j ||k8_j||, max_j ||k8_j|| sk_j and max_j 1 /
 * sk_j come from key_norms, a pass before the kernel. */
constexpr float kRowLimit = 64.f;

static __device__ __forceinline__ float e4m3x4_sumsq(uint32_t w)
{
    uint32_t a, b;
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\n"
        "cvt.rn.f16x2.e4m3x2 %0, lo;\ncvt.rn.f16x2.e4m3x2 %1, hi;\n}"
        : "=r"(a), "=r"(b)
        : "r"(w));
    const float2 x = h2f(a), y = h2f(b); /* squares in FP32: 448^2 is past f16's range */
    return fmaf(x.x, x.x, fmaf(x.y, x.y, fmaf(y.x, y.x, y.y * y.y)));
}

/* the least k with 2^k >= x, for x > 1 */
static __device__ __forceinline__ int ceil_log2(float x)
{
    const uint32_t b = __float_as_uint(x);
    const int e = (int)(b >> 23) - 127;
    return (b & 0x7FFFFFu) ? e + 1 : e;
}

/* whether p holds in any of the nthreads threads at named barrier id (all wait) */
static __device__ __forceinline__ bool bar_red_or(uint32_t id, uint32_t nthreads, bool p)
{
    uint32_t r;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}"
                 : "=r"(r)
                 : "r"((uint32_t)p), "r"(id), "r"(nthreads)
                 : "memory");
    return r != 0;
}

/* kFS16Row: this WG's 64 Q rows at qb (8 KB, 128 bytes a row; SW128 keeps a
 * row's bytes in its row) shifted per row, or left as they are if one row's
 * bound is over kRowLimit. Warp w takes its own wgmma rows 16w..16w+15, a
 * word per lane. Rows r and r + 8 share a thread's S registers, so they
 * take one shift, the larger of theirs: one more register in the loop would
 * spill. kcode: max_j ||k8_j||, kb: sq log2(e)/sqrt(128) max_j ||k8_j|| sk_j,
 * cs0: sq log2(e)/sqrt(128) min_j sk_j, the least tile scalar before the
 * shift (k0 above). Returns whether the WG runs the f16 loop; f: 2^k of this thread's
 * rows g and g + 8. */
static __device__ __forceinline__ bool scale_q_rows(uint32_t qb, int w, int lane, int wgi, float kcode, float kb,
                                                    float cs0, float &f)
{
    const int g = lane / 4;
    const uint32_t at = qb + (uint32_t)(16 * w * 32 + lane) * 4u; /* + 128 r: row 16w + r's word */
    int k[16];
    bool big = false;
#pragma unroll
    for (int r = 0; r < 16; ++r) {
        uint32_t v;
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(at + 128u * r) : "memory");
        float n2 = e4m3x4_sumsq(v);
#pragma unroll
        for (int o = 16; o; o >>= 1) n2 += __shfl_xor_sync(0xffffffffu, n2, o);
        const float n = sqrtf(n2), need = n * kcode * (1.1f / 65504.f);
        big |= !(n * kb <= kRowLimit); /* NaN bounds too */
        k[r] = need <= 1.f ? 0 : min(ceil_log2(need), 14);
    }
    /* k0: the least scalar's shift to f16's least normal (zero rows too: all k >= k0) */
    const float lift = 0x1p-14f / cs0; /* +inf or NaN if cs0 is 0 or NaN: the FP32 loop */
    const int k0 = lift <= 1.f ? 0 : lift <= 0x1p14f ? ceil_log2(lift) : 15;
    big |= k0 > 14;
    if (bar_red_or(1 + wgi, 128, big)) return false;
    f = 1.f;
#pragma unroll
    for (int r = 0; r < 16; ++r) {
        const int kp = max(max(k[r % 8], k[r % 8 + 8]), k0);
        if (kp != 0) { /* read again: keeping the 16 words would spill */
            uint32_t v;
            asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(at + 128u * r) : "memory");
            asm volatile("st.shared.u32 [%0], %1;" ::"r"(at + 128u * r), "r"(e4m3x4_scale_pow2(v, kp)) : "memory");
        }
        f = r == g ? __uint_as_float((uint32_t)(127 + kp) << 23) : f;
    }
    sm90::fence_proxy_async_smem();
    sm90::named_bar_sync(1 + wgi, 128);
    return true;
}

static __device__ __forceinline__ void issue_qk16(uint32_t (&s16)[32], uint64_t dq, uint32_t sk_addr)
{
    const uint64_t dk = sm90::desc_k128_sw128(sk_addr);
    sm90::wgmma_fence();
    sm90::wgmma_ss_m64n128k32_f16_zero(s16, dq, dk);
#pragma unroll
    for (int kk = 1; kk < 4; ++kk) sm90::wgmma_ss_m64n128k32_f16(s16, dq + 2 * kk, dk + 2 * kk, 1);
    sm90::wgmma_commit();
    sm90::fence_regs(s16);
}

/* keys >= kvalid (past S, last tile only) -> -inf in both rows */
static __device__ __forceinline__ void mask_keys16(uint32_t *s, int kvalid, int t)
{
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int k0 = 8 * j + 2 * t;
        const uint32_t m = k0 >= kvalid ? 0xFFFFFFFFu : (k0 + 1 >= kvalid ? 0xFFFF0000u : 0u);
        s[2 * j] = (s[2 * j] & ~m) | (0xFC00FC00u & m);
        s[2 * j + 1] = (s[2 * j + 1] & ~m) | (0xFC00FC00u & m);
    }
}

/* The thread's 16 pairs of row g (s[2j]) and of row g + 8 (s[2j + 1])
 * combined by Op as two trees of depth 4; each result is still a pair (its
 * halves not combined). Max and the row sums use the same shape. */
template <uint32_t (*Op)(uint32_t, uint32_t)>
static __device__ __forceinline__ void row_trees16(const uint32_t *s, uint32_t &row_g, uint32_t &row_g8)
{
    uint32_t a[8], b[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        a[j] = Op(s[4 * j], s[4 * j + 2]);
        b[j] = Op(s[4 * j + 1], s[4 * j + 3]);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        a[j] = Op(a[j], a[j + 4]);
        b[j] = Op(b[j], b[j + 4]);
    }
    row_g = Op(Op(a[0], a[2]), Op(a[1], a[3]));
    row_g8 = Op(Op(b[0], b[2]), Op(b[1], b[3]));
}

/* The new running maxima of a packed S tile's two rows (max on f16x2 is
 * exact, so the maxima equal those of the unpacked values): mn = max(m,
 * cs max s), and mu, the exponents' bias (0 while a row has no valid key). */
static __device__ __forceinline__ void row_max16(const uint32_t (&s)[32], const Consumer16 &c, float cs0, float cs1,
                                                 float &mn0, float &mn1, float &mu0, float &mu1)
{
    uint32_t ma, mb;
    row_trees16<hmax2>(s, ma, mb);
    /* (row g, row g + 8) in one pair: lo halves, hi halves, their max */
    uint32_t m2 = hmax2(__byte_perm(ma, mb, 0x5410), __byte_perm(ma, mb, 0x7632));
    m2 = hmax2(m2, __shfl_xor_sync(0xffffffffu, m2, 1));
    m2 = hmax2(m2, __shfl_xor_sync(0xffffffffu, m2, 2));
    const float2 mx = h2f(m2);
    mn0 = fmaxf(c.m0, mx.x * cs0);
    mn1 = fmaxf(c.m1, mx.y * cs1);
    mu0 = mn0 == -INFINITY ? 0.f : mn0;
    mu1 = mn1 == -INFINITY ? 0.f : mn1;
}

/* softmax on the f16x2 S c.s (as softmax() with kExpScale), P8 fragments
 * into c.p; keys >= kvalid masked (the ragged last tile). kBias: how the f16 bias of the exponents is made consistent with the
 * FP32 reference maximum (see the comment inside); kBiasOff the first v130
 * (v136), kBiasAlways compensated in every tile (v137), kBiasLazy (v130)
 * compensated only where the maximum moves or the rounding is large. */
enum { kBiasOff = 0, kBiasAlways = 1, kBiasLazy = 2 };
template <int kBias = kBiasLazy>
static __device__ __forceinline__ void softmax16(Consumer16 &c, float cs0, float cs1, int kvalid, int t, float &alpha0,
                                                 float &alpha1, float lmult, float imult)
{
    uint32_t(&s)[32] = c.s;
    if (kvalid < kBN) mask_keys16(s, kvalid, t);
    float mn0, mn1, mu0, mu1;
    row_max16(s, c, cs0, cs1, mn0, mn1, mu0, mu1);
    /* The exponent x = s cs + b is one fma.rn.f16x2, so cs and the bias b
     * are f16 values. Rounding them as they are (kBiasOff, the first v130)
     * shifted every p of a row by b's rounding error -- up to |b| 2^-11,
     * 2.8e-3 on the LSE of N(0,1) scores, 5e-2 on FA3's stress mix -- and
     * scaled the scores by cs's. With csr = f16(cs), rho = csr / cs,
     * b = f16(lmult - rho mu) and r = (lmult - rho mu) - b (FP32):
     *   x = lmult - (mu + r) + s cs + (rho - 1)(s cs - mu)   exactly,
     * so cs's rounding costs at most 2^-12 of a score's distance from the
     * maximum (nothing for the largest p; 3e-8 of it in s units where cs is
     * an f16 subnormal), and b's is a shift r of the row's reference.
     * kBiasAlways takes mu + r as the new reference (kept in FP32 for alpha
     * and the LSE), exact, but then alpha != 1 in every tile and rescale_o
     * never skips its 64 multiplies. kBiasLazy keeps the old reference where
     * the row maximum did not move and |r| <= 2^-9 (always so while |b| < 8):
     * alpha stays exactly 1, the tile's p carry a factor 2^-r (<= 0.14%, the
     * same for the whole tile, so O weighs this tile by 2^-r against the
     * others, as l does), and a second row sum lz, each tile's sum times
     * 2^r, gives the LSE exactly. Elsewhere it compensates as kBiasAlways. */
    const uint32_t csg = f2h2(cs0, cs0), csh = f2h2(cs1, cs1);
    /* b: the exponents' bias; me: the row's new reference maximum (kBiasOff: mu) */
    const float rho0 = kBias == kBiasOff ? 1.f : h2f(csg).x * rcp_approx(cs0);
    const float rho1 = kBias == kBiasOff ? 1.f : h2f(csh).x * rcp_approx(cs1);
    const float b0 = fmaf(-rho0, mu0, lmult), b1 = fmaf(-rho1, mu1, lmult);
    const uint32_t bg = f2h2(b0, b0), bh = f2h2(b1, b1);
    float me0 = mu0, me1 = mu1, corr0 = 1.f, corr1 = 1.f;
    if constexpr (kBias != kBiasOff) {
        const float r0 = b0 - h2f(bg).x, r1 = b1 - h2f(bh).x;
        me0 = mu0 + r0;
        me1 = mu1 + r1;
        if constexpr (kBias == kBiasLazy) {
            const bool keep0 = mn0 == c.m0 && fabsf(r0) <= 0.001953125f; /* also false while m = -inf */
            const bool keep1 = mn1 == c.m1 && fabsf(r1) <= 0.001953125f;
            me0 = keep0 ? c.m0 : me0;
            me1 = keep1 ? c.m1 : me1;
            corr0 = keep0 ? fmaf(r0, 0.6931471805599453f, 1.f) : 1.f; /* 2^r to first order: |r| <= 2^-9 */
            corr1 = keep1 ? fmaf(r1, 0.6931471805599453f, 1.f) : 1.f;
        }
    }
    alpha0 = c.m0 == -INFINITY ? 0.f : ex2(c.m0 - me0); /* kBiasLazy, kept: ex2(0) = 1 exactly */
    alpha1 = c.m1 == -INFINITY ? 0.f : ex2(c.m1 - me1);
    mn0 = mn0 == -INFINITY ? mn0 : me0; /* a row with no valid key yet keeps m = -inf */
    mn1 = mn1 == -INFINITY ? mn1 : me1;
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = (i & 1) ? hexp2_fma(s[i], csh, bh) : hexp2_fma(s[i], csg, bg);
    /* row sums as trees of f16x2 adds (p * mult <= 256: 32 of them <= 8192) */
    uint32_t la, lb;
    row_trees16<hadd2>(s, la, lb);
    const float2 sa = h2f(la), sb = h2f(lb);
    c.m0 = mn0;
    c.m1 = mn1;
    const float sum0 = (sa.x + sa.y) * imult, sum1 = (sb.x + sb.y) * imult;
    c.l0 = c.l0 * alpha0 + sum0;
    c.l1 = c.l1 * alpha1 + sum1;
    c.lz0 = c.lz0 * alpha0 + sum0 * corr0; /* kBiasLazy: the LSE's row sum, each tile's p times 2^r */
    c.lz1 = c.lz1 * alpha1 + sum1 * corr1;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const uint32_t *x = s + 8 * kk;
        c.p[kk][0] = e4m3x4_from_h2(x[0], x[2]);
        c.p[kk][1] = e4m3x4_from_h2(x[1], x[3]);
        c.p[kk][2] = e4m3x4_from_h2(x[4], x[6]);
        c.p[kk][3] = e4m3x4_from_h2(x[5], x[7]);
    }
}

} // namespace
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace {
/* wg3: folds the tensor-core partial sum O (relative to the row maxima
 * m0, m1) into the FP32 copy in shared memory (thread's float4 j at o32 +
 * j * kStride * 16, kStride = threads of the consumers): o32 = o32 * 2^(mf - m) + O, then mf = m (mf = -inf while
 * o32 is still empty: factor 0). The next P V starts O afresh. */
template <int kStride = 384, class C>
static __device__ __forceinline__ void fold_o(C &c, uint32_t o32, float &mf0, float &mf1, float m0, float m1)
{
    const float f0 = ex2(mf0 - m0), f1 = ex2(mf1 - m1);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        float4 v;
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "r"(o32 + j * kStride * 16)
                     : "memory");
        v.x = fmaf(v.x, f0, c.o[4 * j + 0]);
        v.y = fmaf(v.y, f0, c.o[4 * j + 1]);
        v.z = fmaf(v.z, f1, c.o[4 * j + 2]);
        v.w = fmaf(v.w, f1, c.o[4 * j + 3]);
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(o32 + j * kStride * 16), "f"(v.x), "f"(v.y),
                     "f"(v.z), "f"(v.w)
                     : "memory");
    }
    mf0 = m0;
    mf1 = m1;
}

/* End of the loop: O += o32 * 2^(mf - m), the FP32 copy brought to the
 * final row maxima and added to the tensor cores' last partial sum. */
template <int kStride = 384, class C>
static __device__ __forceinline__ void unfold_o(C &c, uint32_t o32, float mf0, float mf1)
{
    const float f0 = ex2(mf0 - c.m0), f1 = ex2(mf1 - c.m1);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        float4 v;
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                     : "r"(o32 + j * kStride * 16)
                     : "memory");
        c.o[4 * j + 0] = fmaf(v.x, f0, c.o[4 * j + 0]);
        c.o[4 * j + 1] = fmaf(v.y, f0, c.o[4 * j + 1]);
        c.o[4 * j + 2] = fmaf(v.z, f1, c.o[4 * j + 2]);
        c.o[4 * j + 3] = fmaf(v.w, f1, c.o[4 * j + 3]);
    }
}

/* start_o and the FP32 copy o32 emptied too */
template <int kStride = 384, class C>
static __device__ __forceinline__ void start_folded(C &c, uint32_t o32, float &mf0, float &mf1)
{
#pragma unroll
    for (int j = 0; j < 16; ++j)
        asm volatile("st.shared.v4.f32 [%0], {%1, %1, %1, %1};" ::"r"(o32 + j * kStride * 16), "f"(0.f) : "memory");
    start_o(c);
    mf0 = mf1 = -INFINITY;
}
} // namespace
#endif

template <int kStages, int kFlush, unsigned kF>
__global__ void __launch_bounds__(kWg3Threads, 1)
    h3lab_attn_sm90_wg3_kernel(const __grid_constant__ CUtensorMap tmQ, /* q8 as [H*S_pad][128], 64-row boxes */
                                 const __grid_constant__ CUtensorMap tmK, const __grid_constant__ CUtensorMap tmV,
                                 const float *__restrict__ sq, const float *__restrict__ sk,
                                 const float *__restrict__ sv, const float *__restrict__ vmu, int S, int H,
                                 int S_pad, int nqt, uint16_t *__restrict__ O, float *__restrict__ lse,
                                 const float *__restrict__ kn /* kFS16Row: key_norms' three bounds per head */)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool kQ16 = kF & kFS16; /* Q K^T in FP16, Q's codes scaled by 2^-9 (kFS16Row: per row) */
    constexpr bool kRow = kF & kFS16Row;
    static_assert(!kRow || kQ16, "kFS16Row is built on v130");
    static_assert(!kQ16 || (kFlush == 0 && (kF & kFVMean) && (kF & kFTcO)), "kFS16 is built on v78");
    static_assert(((kF & kFTcO) != 0) != ((kF & kFFoldS) != 0), "O in the tensor cores or folded per tile, one of them");
    /* kTab: a tile's softmax scalars (cs, log2 and inverse of P8's
     * multiplier) computed once per CTA by the WG's threads into a table in
     * shared memory (the launch adds 48 bytes per key tile), the loop reads
     * them with one 16-byte load instead of two global loads, their address
     * arithmetic, a MUFU.LG2 and a MUFU.RCP per tile. Same arithmetic. */
    constexpr bool kTab = kF & kFTab;
    static_assert(!kTab || !kQ16, "kFTab is built on the FP32 softmax");
    static_assert(!(kF & kFFinite) || kTab, "kFFinite is built on v147");
    /* kFoldS: O stays in FP32 registers and never enters the tensor cores'
     * truncating accumulator (see issue_pv): each tile's P V starts afresh in
     * the S registers, free once P8 is packed, and is added to O after the
     * wait, O = fma(O, alpha, PV) -- the rescale by alpha comes with it. The
     * same accumulation as the two-consumer kernel's (4 k-steps per tensor-core
     * sum), without its 64 extra registers. */
    constexpr bool kFoldS = kF & kFFoldS;
    static_assert(!kFoldS || (kFlush == 0 && !kQ16), "kFFoldS replaces the shared-memory fold; FP32 S only");
    using L = LabLayout3<kStages, kFlush != 0>;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (sm90::smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = base + L::kOffK, sV = base + L::kOffV, sO = base + L::kOffO;
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
        /* kQ16: Q's codes are scaled by 2^-9 below (kRow: per row, in the tile scalars of each row) */
        const float sqq = sq[(size_t)h * G + gq] * (kQ16 && !kRow ? 512.f : 1.f);
        const float r256 = 256.f / svmax;

        /* o32: thread tw of WG wgi keeps float4 j at (j * 384 + wgi * 128 + tw) * 16 */
        const uint32_t o32 = sO + (uint32_t)(wgi * 128 + tw) * 16u;
        const uint64_t dq = sm90::desc_k128_sw128(sQ + wgi * (kTile / 2));
        const int klast = S - (nkt - 1) * kBN;
        const uint32_t tb = base + L::kOffTab + (uint32_t)(wgi * nkt) * 16u; /* kTab: this WG's table */
        if constexpr (kTab) {
            for (int n = tw; n < nkt; n += 128) {
                const TileScalars ts = tile_scalars(sqq, sk_h[n], sv_h[n], r256);
                store_table_entry(tb + 16u * (uint32_t)n, ts.cs, ts.lmult, ts.imult);
            }
            sm90::named_bar_sync(1 + wgi, 128);
        }
        sm90::mbar_wait(bars.qfull(), 0);
        float f = 1.f; /* kRow: 2^k of rows g and g + 8, their tile scalars' factor */
        bool use16 = kQ16;
        if constexpr (kRow)
            use16 = scale_q_rows(sQ + wgi * (kTile / 2), w, lane, wgi, kn[3 * h], sqq * kScaleLog2 * kn[3 * h + 1],
                                 sqq * kScaleLog2 / kn[3 * h + 2], f);
        else if constexpr (kQ16)
            scale_q_2m9(sQ + wgi * (kTile / 2), tw, wgi);
        const float sqf = sqq * f; /* kRow: the tile scalars of rows g and g + 8 from it (FP32 loop: f = 1) */
        /* the loop and the epilogue on c, a Consumer16 (f16 S) or a Consumer */
        auto run = [&](auto &c, auto q16) {
            constexpr bool Q16 = decltype(q16)::value;
            float mf0, mf1; /* the max o32 is relative to */
            if constexpr (kFlush != 0) {
                start_folded(c, o32, mf0, mf1);
            } else {
                start_o(c);
                (void)o32, (void)mf0, (void)mf1;
            }
            if constexpr ((kF & kFFinite) != 0) c.m0 = c.m1 = -FLT_MAX; /* softmax's kFinite */
            for (int n = 0; n < nkt; ++n) {
                const int st = n % kStages;
                const uint32_t ph = (uint32_t)(n / kStages) & 1u;
                [[maybe_unused]] float skn = 0.f, svn = 0.f; /* kTab: the tile's scalars ts from the table instead */
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
                if constexpr (Q16)
                    issue_qk16(c.s, dq, sK + st * kTile);
                else
                    issue_qk_fresh(c, dq, sK + st * kTile);
                sm90::wgmma_wait<0>();
                sm90::fence_regs(c.s);
                release(bars.kempty(st), lane);
                if constexpr (!kTab) ts = tile_scalars(sqf, skn, svn, r256);
                float alpha0, alpha1;
                if constexpr (Q16) /* P8 converted inside */
                    softmax16<(kF & kFS16NC) ? kBiasOff : (kF & kFS16AC) ? kBiasAlways : kBiasLazy>(
                        c, ts.cs, ts.cs, n == nkt - 1 ? klast : kBN, t, alpha0, alpha1, ts.lmult, ts.imult);
                else
                    softmax<(kF & kFFinite) != 0>(c, ts.cs, n == nkt - 1 ? klast : kBN, t, alpha0, alpha1, ts.lmult,
                                                  ts.imult);
                if constexpr (!kFoldS) rescale_o(c, alpha0, alpha1);
                if constexpr (!Q16) convert_p(c);
                sm90::mbar_wait(bars.vfull(st), ph);
                if constexpr (kFoldS) {
                    auto &pv = c.s; /* P V of this tile, from zero */
                    issue_pv_to(pv, c.p, sV + st * kTile, false);
                    sm90::wgmma_wait<0>();
                    sm90::fence_regs(pv);
                    release(bars.vempty(st), lane);
                    fold_pv(c, pv, alpha0, alpha1);
                } else {
                    /* kFlush 0: only n = 0 starts afresh */
                    issue_pv_to(c.o, c.p, sV + st * kTile, n % (kFlush ? kFlush : 1 << 30) != 0);
                    sm90::wgmma_wait<0>();
                    sm90::fence_regs(c.o);
                    release(bars.vempty(st), lane);
                }
                if constexpr (kFlush != 0)
                    if (n % kFlush == kFlush - 1 && n + 1 < nkt) fold_o(c, o32, mf0, mf1, c.m0, c.m1);
            }
            if constexpr (kFlush != 0) unfold_o(c, o32, mf0, mf1);
            store_output<(kF & kFVMean) != 0>(c, svmax, qrow0 + w * 16 + g, S, H, h, O, lse, vmu);
        };
        if constexpr (kRow) {
            /* use16 is the same in the whole WG (bar.red); a broadcast lets
             * the compiler see it, so that the loops keep the uniform datapath */
            if (__shfl_sync(0xffffffffu, (int)use16, 0)) {
                Consumer16 c;
                run(c, std::true_type{});
            } else { /* Q as it came: v78's loop, the contract's arithmetic */
                Consumer c;
                run(c, std::false_type{});
            }
        } else {
            (void)use16, (void)kn;
            std::conditional_t<kQ16, Consumer16, Consumer> c;
            run(c, std::integral_constant<bool, kQ16>{});
        }
    }
#else
    (void)sq, (void)sk, (void)sv, (void)vmu, (void)S, (void)H, (void)S_pad, (void)nqt, (void)O, (void)lse, (void)kn;
#endif
}

/* kFS16Row's pass before the kernel: per head h, kn[3h] = max_j ||k8_j||
 * over the codes of its S_pad key rows, kn[3h + 1] = max_j ||k8_j|| sk_j and
 * kn[3h + 2] = max_j 1 / sk_j (kn zeroed before; rows past S only make the
 * bounds larger). A thread a row, the maxima by atomicMax on the bits
 * (non-negative floats order as their bits do). */
__global__ void __launch_bounds__(256) h3lab_key_norms(const uint8_t *__restrict__ k8, const float *__restrict__ sk,
                                                       int S_pad, float *__restrict__ kn)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const int h = blockIdx.y, row = blockIdx.x * blockDim.x + threadIdx.x;
    float n = 0.f, nv = 0.f, is = 0.f;
    if (row < S_pad) {
        const uint4 *p = reinterpret_cast<const uint4 *>(k8 + ((size_t)h * S_pad + row) * kD);
        float n2 = 0.f;
#pragma unroll
        for (int i = 0; i < kD / 16; ++i) {
            const uint4 x = p[i];
            n2 += e4m3x4_sumsq(x.x) + e4m3x4_sumsq(x.y) + e4m3x4_sumsq(x.z) + e4m3x4_sumsq(x.w);
        }
        const float skr = sk[(size_t)h * (S_pad / kBN) + row / kBN];
        n = sqrtf(n2);
        nv = n * skr;
        is = 1.f / skr;
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) {
        n = fmaxf(n, __shfl_xor_sync(0xffffffffu, n, o));
        nv = fmaxf(nv, __shfl_xor_sync(0xffffffffu, nv, o));
        is = fmaxf(is, __shfl_xor_sync(0xffffffffu, is, o));
    }
    if (threadIdx.x % 32 == 0) {
        atomicMax(reinterpret_cast<int *>(kn + 3 * h), __float_as_int(n));
        atomicMax(reinterpret_cast<int *>(kn + 3 * h + 1), __float_as_int(nv));
        atomicMax(reinterpret_cast<int *>(kn + 3 * h + 2), __float_as_int(is));
    }
#else
    (void)k8, (void)sk, (void)S_pad, (void)kn;
#endif
}

/* ---- v161: the production kernel with persistent whole CTAs (issue 35 item 1) ----
 * The split grid's work (sm90_grid.h), but its `full` whole items (192-query
 * tiles) run on P = min(full, SMs) persistent CTAs that take them from a
 * counter, and its split CTAs follow as blocks P.. of the same launch,
 * through the production code (wg3_cta): they start as the persistent CTAs
 * run out of items, as the split grid's CTAs fill its last wave. The K/V
 * ring runs on from item to item, and Q has two buffers (the second past
 * the table: PersistLayout::q2), so the producer loads the next item's Q,
 * and its first K/V tiles as the ring frees, while the consumers finish the
 * current item and write its rows: the start a whole CTA pays once per 32
 * key tiles at S = 4096 overlaps the work. Per buffer b a Q barrier (the
 * TMA's bytes and the producer's arrival, which publishes the item it wrote
 * to item slot b; an item >= full ends the loop) and an empty barrier (each
 * consumer warp after its item's loop); nothing is added to the key-tile
 * loop but the ring's use offset: 583 SASS instructions a tile against the
 * production loop's 575, once the per-item values the loop reads are made
 * opaque to ptxas (else it recomputes them in every tile: 591). No local
 * memory: the producer takes 32 registers (24 spills), and the consumers
 * read their thread indices anew for each item. The counter (sched[0]:
 * items handed out past the first P, sched[1]: CTAs done) is reset by the
 * last CTA to finish. Same arithmetic and rows as v159. v110 (retired;
 * docs/journal/2026-12-04.md) did this on the plain grid: a counter, not a
 * static order (5-8% slower).
 *
 * v162 (kPre): at an item's start each consumer warpgroup of v161 still
 * runs a chain of dependent global loads before its first key tile (V's
 * scale maximum, its queries' scale, then the table's key scales), and
 * the three reach it within a tile or two of each other, so the SM's
 * tensor cores and exp unit wait with them. Here the producer
 * warpgroup's warps 1-3, idle in v161, make item k's table (the key
 * tiles dealt among them, one load of a tile's scales for its three
 * consumers' entries, the next tile's loading while one is stored) and
 * its sv max into table k & 1, and publish them on tfull[k & 1]; a
 * consumer only waits on that barrier. The producer thread names item
 * k + 1 to them (slot (k + 1) & 3: nitem and ifull) right after item
 * k's first K/V load, not two key tiles before item k's end, where its
 * loop reaches item k + 1, so each table is made a whole item ahead;
 * they write table b once its previous item is done (qempty[b]). Four
 * slots keep the producer from refilling one before they read it: it
 * fills slot (k + 4) & 3 after qempty for item k + 1, when they are
 * past item k + 1. A consumer's work outside the key-tile loop drops
 * from ~730 to ~435 SASS instructions an item; the loop is 585 (v161:
 * 583). The table warps have the producer's 32 registers, so their
 * loops are kept rolled (unrolled, they spill), and the producer thread
 * names the next item after the first K/V load, outside that loop (in
 * it, the slots' addresses spill).
 * The layout (two tables) fits up to 1,213 key tiles (S_pad = 155,264;
 * v161 188,416). */
template <int St, bool kPre> struct PersistLayout {
    using L = SmemLayout3<St>;
    static constexpr uint32_t kBar = L::kOffBar + 8 * (1 + 4 * St); /* past the ring's barriers: */
    static constexpr uint32_t kQFull2 = kBar, kQEmpty = kBar + 8, kItem = kBar + 24; /* qempty[2], sitem[2] */
    static constexpr uint32_t kTFull = kItem + 8; /* kPre: tfull[2]; ifull[4], nitem[4] past the tables */
    static_assert(kTFull + (kPre ? 16 : 0) <= L::kOffBar + 128,
                  "the extra barriers fit the layout's 128 bytes of barriers");
    /* the second Q buffer, past the table of nkt key tiles */
    static __host__ __device__ uint32_t q2(int nkt) { return (L::kOffTab + 16u * kWg3Consumers * nkt + 1023u) & ~1023u; }
    /* kPre: table b (table 0 is the layout's), then each buffer's sv max,
     * then the item slots' barriers ifull[4] and numbers nitem[4] */
    static __host__ __device__ uint32_t tab(int nkt, int b)
    {
        return b ? q2(nkt) + 3 * (kTile / 2) : (uint32_t)L::kOffTab;
    }
    static __host__ __device__ uint32_t svm(int nkt, int b) { return tab(nkt, 1) + 16u * kWg3Consumers * nkt + 16u * b; }
    static __host__ __device__ uint32_t ifull(int nkt, int s) { return svm(nkt, 2) + 8u * s; }
    static __host__ __device__ uint32_t nitem(int nkt, int s) { return ifull(nkt, 4) + 4u * s; }
    static __host__ __device__ int bytes(int nkt)
    {
        return (int)(kPre ? nitem(nkt, 4) : q2(nkt) + 3 * (kTile / 2)) + 1024;
    }
};

/* kPre: the producer warpgroup's warps 1..3 make the tables (tfull counts them) */
constexpr int kTableWarps = 3;

/* kPre, the producer thread: item k's number into slot k & 3, for the table
 * warps (persist_tables). */
template <int St> static __device__ __forceinline__ void publish_item(uint32_t base, int nkt, int k, int item)
{
    using PL = PersistLayout<St, true>;
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(base + PL::nitem(nkt, k & 3)), "r"(item) : "memory");
    sm90::mbar_arrive(base + PL::ifull(nkt, k & 3));
}

/* kPre: producer warps 1..3 of a persistent CTA make each item's table,
 * all three consumers' entries of the key tiles i = 32 (w - 1) + lane +
 * 96 j, and its sv max, as wg3_cta's consumers do for themselves
 * (write_table, sv_max), then each arrives on tfull[b]. */
template <int St>
static __device__ __forceinline__ void persist_tables(const h3_sm90_grid &grid, const float *__restrict__ sq,
                                                      const float *__restrict__ sk, const float *__restrict__ sv,
                                                      int S_pad, int nkt, uint32_t base, uint32_t qempty)
{
    using PL = PersistLayout<St, true>;
    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32 - 1, G = S_pad / kBN;
    for (int k = 0;; ++k) {
        const int b = k & 1;
        sm90::mbar_wait(base + PL::ifull(nkt, k & 3), (uint32_t)(k >> 2) & 1u); /* the producer named item k */
        int item;
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(item) : "r"(base + PL::nitem(nkt, k & 3)) : "memory");
        if (item >= grid.full) break;
        const h3_sm90_cta c = h3_sm90_grid_cta(&grid, item);
        const float *sk_h = sk + (size_t)c.h * G, *sv_h = sv + (size_t)c.h * G, *sq_h = sq + (size_t)c.h * G;
        /* sv_max's value, its loop kept rolled (32 registers): G / 32 dependent
         * loads, made a whole item ahead but for a CTA's first item */
        float svmax = 0.f;
#pragma unroll 1
        for (int i = lane; i < G; i += 32) svmax = fmaxf(svmax, sv_h[i]);
        for (int off = 16; off > 0; off >>= 1) svmax = fmaxf(svmax, __shfl_xor_sync(0xffffffffu, svmax, off));
        /* the three consumers' query scales (rows past S_pad: any valid one) */
        const float sq0 = sq_h[min(c.row0 / kBN, G - 1)], sq1 = sq_h[min((c.row0 + 64) / kBN, G - 1)],
                    sq2 = sq_h[min((c.row0 + 128) / kBN, G - 1)];
        const float r256 = 256.f / svmax;
        const uint32_t tb = base + PL::tab(nkt, b);
        int i = 32 * warp + lane; /* this lane's first key tile */
        float skn = 0.f, svn = 0.f;
        if (i < nkt) skn = sk_h[i], svn = sv_h[i];
        if (k >= 2) sm90::mbar_wait(qempty + 8u * b, (uint32_t)((k - 2) >> 1) & 1u); /* table b's item is done */
#pragma unroll 1 /* 32 registers here: one key tile at a time, the next one's scales loading */
        for (; i < nkt; i += 32 * kTableWarps) {
            float skx = 0.f, svx = 0.f;
            if (i + 32 * kTableWarps < nkt) skx = sk_h[i + 32 * kTableWarps], svx = sv_h[i + 32 * kTableWarps];
            const TileScalars t0 = tile_scalars(sq0, skn, svn, r256);
            const float cs1 = tile_scalars(sq1, skn, svn, r256).cs, cs2 = tile_scalars(sq2, skn, svn, r256).cs;
            const uint32_t e = tb + 16u * (uint32_t)i, row = 16u * (uint32_t)nkt; /* consumer j's entry: e + j row */
            store_table_entry(e, t0.cs, t0.lmult, t0.imult);
            store_table_entry(e + row, cs1, t0.lmult, t0.imult);
            store_table_entry(e + 2u * row, cs2, t0.lmult, t0.imult);
            skn = skx, svn = svx;
        }
        if (warp == 0 && lane == 0) /* after the qempty wait, as the table's stores */
            asm volatile("st.shared.f32 [%0], %1;" ::"r"(base + PL::svm(nkt, b)), "f"(svmax) : "memory");
        release(base + PL::kTFull + 8u * b, lane); /* the warp's stores, then one arrival */
    }
}

template <int St, bool kPre>
__global__ void __launch_bounds__(kWg3Threads, 1)
    h3lab_wg3_persist_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                             const __grid_constant__ CUtensorMap tmV, const float *__restrict__ sq,
                             const float *__restrict__ sk, const float *__restrict__ sv,
                             const float *__restrict__ vmu, int S, int H, int S_pad,
                             const __grid_constant__ h3_sm90_grid grid, int P, int *__restrict__ sched,
                             uint16_t *__restrict__ O, float *__restrict__ lse)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if ((int)blockIdx.x >= P) { /* a split CTA, as the production launch runs it */
        wg3_cta<St, true, true, false>(&tmQ, &tmK, &tmV, sq, sk, sv, vmu, S, H, S_pad,
                                       h3_sm90_grid_cta(&grid, grid.full + (int)blockIdx.x - P), O, lse);
        return;
    }
    using L = SmemLayout3<St>;
    using PL = PersistLayout<St, kPre>;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (sm90::smem_u32(smem_raw) + 1023u) & ~1023u;
    const Bars<St> bars{base + L::kOffBar};
    const int G = S_pad / kBN, nkt = (S + kBN - 1) / kBN;
    const uint32_t sQ1 = base + PL::q2(nkt), qfull1 = base + PL::kQFull2; /* Q buffer 1 (0: the layout's) */
    const uint32_t qempty = base + PL::kQEmpty, sitem = base + PL::kItem; /* + 8 b, + 4 b */
    if (threadIdx.x == 0) {
        sm90::mbar_init(qfull1, 1);
        sm90::mbar_init(qempty, 4 * kWg3Consumers);
        sm90::mbar_init(qempty + 8, 4 * kWg3Consumers);
        if (kPre) {
            sm90::mbar_init(base + PL::kTFull, kTableWarps);
            sm90::mbar_init(base + PL::kTFull + 8, kTableWarps);
            for (int j = 0; j < 4; ++j) sm90::mbar_init(base + PL::ifull(nkt, j), 1);
        }
        init_bars(bars, 4 * kWg3Consumers); /* its fence covers the ones above */
    }
    __syncthreads();

    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    if (wg == 0) {
        sm90::setmaxnreg_dec<32>(); /* 24 spills here; 32 + 3 x 160 is the whole register file */
        if (threadIdx.x == 0) {
            sm90::prefetch_tmap(&tmQ);
            sm90::prefetch_tmap(&tmK);
            sm90::prefetch_tmap(&tmV);
            int item = (int)blockIdx.x, u = 0;
            if (kPre) publish_item<St>(base, nkt, 0, item);
            for (int k = 0;; ++k) {
                const int b = k & 1;
                const uint32_t qfull = b ? qfull1 : bars.qfull(), sQ = b ? sQ1 : base;
                if (k >= 2) sm90::mbar_wait(qempty + 8u * b, (uint32_t)((k - 2) >> 1) & 1u); /* buffer b is free */
                asm volatile("st.shared.u32 [%0], %1;" ::"r"(sitem + 4u * b), "r"(item) : "memory");
                if (item >= grid.full) {
                    sm90::mbar_arrive(qfull); /* no Q: the consumers read the end */
                    break;
                }
                const h3_sm90_cta c = h3_sm90_grid_cta(&grid, item);
                const int row0 = c.h * S_pad;
                sm90::mbar_arrive_expect_tx(qfull, 3u * 64u * kD);
                for (int j = 0; j < 3; ++j)
                    sm90::tma_load_2d(sQ + (uint32_t)(j * 64 * kD), &tmQ, qfull, 0, row0 + c.row0 + 64 * j);
                const int next = P + atomicAdd(sched, 1); /* read after this item's first K/V load */
                int n = 0;
                if (kPre) { /* item k + 1's table: made under this item */
                    load_kv<St>(bars, base + L::kOffK, base + L::kOffV, &tmK, &tmV, row0, c.h, n++, u++);
                    publish_item<St>(base, nkt, k + 1, next);
                }
                for (; n < nkt; ++n, ++u)
                    load_kv<St>(bars, base + L::kOffK, base + L::kOffV, &tmK, &tmV, row0, c.h, n, u);
                item = next;
            }
            __threadfence(); /* this CTA's fetches before its count */
            if (atomicAdd(sched + 1, 1) == P - 1) { /* the last CTA: every fetch is done */
                atomicExch(sched, 0);
                atomicExch(sched + 1, 0);
            }
        } else if (kPre && threadIdx.x >= 32) {
            persist_tables<St>(grid, sq, sk, sv, S_pad, nkt, base, qempty);
        }
    } else {
        sm90::setmaxnreg_inc<160>();
        const int wgi = wg - 1;
        for (int k = 0;; ++k) {
            /* the thread's indices read anew for each item (a volatile read
             * ptxas cannot hoist): kept live across the item loop they spill */
            uint32_t tx;
            asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tx));
            const int lane = (int)(tx & 31u), tw = (int)(tx & 127u), w = tw >> 5, g = lane >> 2, t = lane & 3;
            const int b = k & 1;
            sm90::mbar_wait(b ? qfull1 : bars.qfull(), (uint32_t)(k >> 1) & 1u);
            int item;
            asm volatile("ld.shared.u32 %0, [%1];" : "=r"(item) : "r"(sitem + 4u * b) : "memory");
            if (item >= grid.full) break;
            const h3_sm90_cta c = h3_sm90_grid_cta(&grid, item);
            const int qrow0 = c.row0 + wgi * 64;
            const float *sk_h = sk + (size_t)c.h * G, *sv_h = sv + (size_t)c.h * G;
            float svmax = 0.f, sqq = 0.f; /* kPre: sqq and the key scales unread (the table has them) */
            if (kPre) { /* the producer's warps 1-3 wrote the table and the sv max */
                sm90::mbar_wait(base + PL::kTFull + 8u * b, (uint32_t)(k >> 1) & 1u);
                asm volatile("ld.shared.f32 %0, [%1];" : "=f"(svmax) : "r"(base + PL::svm(nkt, b)) : "memory");
            } else {
                svmax = sv_max(sv_h, G, lane);
                sqq = sq[(size_t)c.h * G + min(qrow0 / kBN, G - 1)];
            }
            Wg3Rows r{sm90::desc_k128_sw128((b ? sQ1 : base) + (uint32_t)wgi * (kTile / 2)), base + L::kOffK,
                      base + PL::tab(nkt, kPre ? b : 0) + (uint32_t)(wgi * nkt) * 16u, sk_h, sv_h, sqq,
                      256.f / svmax, nkt, nkt - 1, S - (nkt - 1) * kBN};
            /* opaque to ptxas, so that it keeps them in registers rather than
             * recomputing them in every key tile */
            asm volatile("" : "+l"(r.dq), "+r"(r.sK), "+r"(r.tb), "+r"(r.ilast), "+r"(r.klast));
            if (!kPre) {
                if (k > 0) sm90::named_bar_sync(1 + wgi, 128); /* every warp of the WG is past the last item's table */
                write_table(r, tw, wgi);
            }
            Consumer cs;
            start_o(cs);
            run_tiles<St, true, false>(cs, r, t, lane, k * nkt);
            release(qempty + 8u * b, lane); /* Q, table and sv max read (the sv max is in a register) */
            store_output<true>(cs, svmax, qrow0 + w * 16 + g, S, H, c.h, O, lse, vmu);
        }
    }
#else
    (void)sq, (void)sk, (void)sv, (void)vmu, (void)S, (void)H, (void)S_pad, (void)grid, (void)P, (void)sched, (void)O,
        (void)lse;
#endif
}

/* ------------------------------------------------------------------ host */

namespace {
typedef void (*KernelFn)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const float *, const float *,
                         const float *, const float *, int, int, int, int, uint16_t *, float *, const float *);

struct LabVariant {
    int number;
    KernelFn fn;
    int smem;  /* dynamic shared memory bytes, without the table */
    int tab;   /* kFTab: bytes per key tile beyond smem */
    int vmean; /* adds V's mean: called with one */
    int untab; /* kFTab: the variant (same loop, no table) where the table does not fit; 0: none */
    const char *name;
    int knorms; /* kFS16Row: key_norms runs first */
};

template <int Flush, unsigned F> LabVariant make(int number, const char *name, int untab = 0)
{
    return LabVariant{number,
                      h3lab_attn_sm90_wg3_kernel<2, Flush, F>,
                      LabLayout3<2, Flush != 0>::kBytes,
                      (F & kFTab) ? 16 * kWg3Consumers : 0,
                      (F & kFVMean) != 0,
                      untab,
                      name,
                      (F & kFS16Row) != 0};
}

const LabVariant *table(int *count)
{
    static const LabVariant v[] = {
        make<8, kFTcO>(73, "v73 O in the tensor cores, folded to FP32 in shared memory every 8 tiles"),
        make<0, kFTcO | kFVMean>(78, "v78 O never folded (in the tensor cores for the whole row), V's mean added"),
        make<0, kFTcO | kFVMean | kFTab>(147, "v147 v78 with each tile's softmax scalars in a table", 78),
        make<0, kFTcO | kFVMean | kFTab | kFFinite>(148, "v148 v147 with the running max started at -FLT_MAX", 78),
        make<0, kFTcO | kFVMean | kFS16>(130, "v130 v78 with Q K^T summed in FP16 and the softmax on f16x2"),
        make<0, kFTcO | kFVMean | kFS16 | kFS16NC>(136, "v136 v130 without the exponent bias compensation"),
        make<0, kFTcO | kFVMean | kFS16 | kFS16AC>(137, "v137 v130 with the bias compensated in every tile"),
        make<0, kFTcO | kFVMean | kFS16 | kFS16Row>(
            160, "v160 v130 with Q shifted per row, v78's FP32 loop where a WG's logits may pass 64"),
        make<0, kFFoldS | kFVMean | kFTab>(150, "v150 the production kernel: P V folded into FP32 O per tile", 153),
        make<0, kFFoldS | kFVMean>(153, "v153 v150 without the table"),
        make<0, kFFoldS | kFTab>(151, "v151 v150 without V's mean (unsmoothed V)", 154),
        make<0, kFFoldS>(154, "v154 v151 without the table"),
        make<0, kFFoldS | kFVMean | kFTab | kFFinite>(152, "v152 v150 with the running max started at -FLT_MAX", 153),
        make<8, kFTcO | kFVMean | kFTab>(155, "v155 v147 with O folded to FP32 in shared memory every 8 tiles"),
    };
    *count = (int)(sizeof v / sizeof v[0]);
    return v;
}

const LabVariant *find(int number)
{
    int n = 0;
    const LabVariant *v = table(&n);
    for (int i = 0; i < n; ++i)
        if (v[i].number == number) return &v[i];
    return nullptr;
}

constexpr int kPlainGrid = 156; /* the production kernel on the plain grid */
constexpr int kProduction = 157; /* the production launch */
constexpr int kProdFinite = 158; /* the production kernel with kFinite, split grid */
constexpr int kProdSplit = 159;  /* the production kernel on the split grid */
constexpr int kPersist = 161;    /* v159 with persistent whole CTAs */
constexpr int kPersistPre = 162; /* v161 with each item's table computed ahead */
bool persist_variant(int variant) { return variant == kPersist || variant == kPersistPre; }
bool split_variant(int variant) { return variant == kProdFinite || variant == kProdSplit || persist_variant(variant); }
bool prod_variant(int variant) { return variant == kPlainGrid || variant == kProduction || split_variant(variant); }

/* The current device's SM count (0 if it cannot be read). */
int device_sms()
{
    int sms = 0, dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) (void)cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return sms;
}

/* The grid prod_kernel runs variant on: v158, v159, v161 and v162 the split
 * plan on this device's SMs, every other variant the plain grid. */
h3_sm90_grid prod_grid(int variant, int S, int H)
{
    const bool split = split_variant(variant);
    return h3_sm90_grid_plan(S, H, split ? device_sms() : 0, split);
}

/* v161's and v162's launch (pre: v162): min(full, SMs) persistent CTAs,
 * then the split CTAs; its counter (two ints, zero between launches) is the
 * lab's own. */
int persist_launch(bool pre, const CUtensorMap &tq, const CUtensorMap &tk, const CUtensorMap &tv, const float *sq,
                   const float *sk, const float *sv, const float *vmu, int S, int H, int S_pad,
                   const h3_sm90_grid &grid, int smem, uint16_t *O, float *lse, h3_stream stream)
{
    static int *sched; /* the lab's: one device, one stream at a time; never freed */
    cudaError_t ce;
    if (!sched) {
        if ((ce = cudaMalloc(&sched, 2 * sizeof(int))) != cudaSuccess) return (int)ce;
        if ((ce = cudaMemset(sched, 0, 2 * sizeof(int))) != cudaSuccess) return (int)ce;
    }
    const int sms = device_sms();
    if (sms < 1) return (int)cudaErrorInvalidDevice;
    const int P = grid.full < sms ? grid.full : sms;
    auto fn = pre ? h3lab_wg3_persist_kernel<2, true> : h3lab_wg3_persist_kernel<2, false>;
    if ((ce = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) != cudaSuccess)
        return (int)ce;
    fn<<<P + grid.split, kWg3Threads, (size_t)smem, (cudaStream_t)stream>>>(tq, tk, tv, sq, sk, sv, vmu, S, H, S_pad,
                                                                             grid, P, sched, O, lse);
    return (int)cudaGetLastError();
}

/* v156: the production three-consumer kernel launched as attn_fp8_sm90.cu
 * does, on the plain grid (H ceil(S / 192) whole CTAs); v159: on the split
 * grid, v158: with kFinite too (the split layout needs S_pad <= 188,416
 * here). */
int prod_kernel(int variant, const CUtensorMap &tq, const CUtensorMap &tk, const CUtensorMap &tv, const float *sq,
                const float *sk, const float *sv, const float *vmu, int S, int H, int S_pad, uint16_t *O, float *lse,
                h3_stream stream)
{
    using L = SmemLayout3<2>;
    using LS = SmemLayout3Split<2>;
    const long long nkt = S_pad / kBN;
    long long smem = L::kBytes + (long long)L::kTabBytesPerTile * nkt;
    auto fn = variant == kProdFinite ? h3k_attn_fp8_sm90_wg3_kernel<2, true, true, true>
                                     : h3k_attn_fp8_sm90_wg3_kernel<2, true, true>;
    if (smem > kSmemMax) smem = L::kBytes, fn = h3k_attn_fp8_sm90_wg3_kernel<2, true, false>;
    if (split_variant(variant)) {
        const long long split = LS::kBytes + (long long)LS::kTabBytesPerTile * nkt;
        if (smem != L::kBytes + (long long)L::kTabBytesPerTile * nkt || split > kSmemMax)
            return (int)cudaErrorInvalidValue;
        smem = split > smem ? split : smem;
    }
    const h3_sm90_grid grid = prod_grid(variant, S, H);
    if (persist_variant(variant)) {
        const bool pre = variant == kPersistPre;
        const long long whole = pre ? PersistLayout<2, true>::bytes((int)nkt) : PersistLayout<2, false>::bytes((int)nkt);
        if (whole > kSmemMax) return (int)cudaErrorInvalidValue;
        return persist_launch(pre, tq, tk, tv, sq, sk, sv, vmu, S, H, S_pad, grid, (int)(whole > smem ? whole : smem),
                              O, lse, stream);
    }
    cudaError_t ce = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (ce != cudaSuccess) return (int)ce;
    fn<<<grid.full + grid.split, kWg3Threads, (size_t)smem, (cudaStream_t)stream>>>(tq, tk, tv, sq, sk, sv, vmu, S, H,
                                                                                     S_pad, grid, O, lse);
    return (int)cudaGetLastError();
}

} // namespace

extern "C" const char *h3lab_attn_sm90_name(int variant)
{
    if (variant == kPlainGrid) return "v156 the production kernel on the plain grid (no split CTAs)";
    if (variant == kProduction) return "v157 the production launch (h3k_attn_fp8_sm90, smoothed V)";
    if (variant == kProdFinite) return "v158 the production kernel, running max started at -FLT_MAX, split grid";
    if (variant == kProdSplit) return "v159 the production kernel on the split grid";
    if (variant == kPersist) return "v161 v159 with persistent whole CTAs (items from a counter)";
    if (variant == kPersistPre) return "v162 v161 with each item's table and sv max computed by the producer's warps";
    const LabVariant *v = find(variant);
    return v ? v->name : nullptr;
}

extern "C" int h3lab_attn_sm90_smoothed(int variant)
{
    if (prod_variant(variant)) return 1;
    const LabVariant *v = find(variant);
    return v ? v->vmean : -1;
}

extern "C" int h3lab_attn_sm90_grid(int variant, int S, int H, h3_sm90_grid *grid)
{
    if (h3lab_attn_sm90_smoothed(variant) < 0 || S < 1 || H < 1 || !grid) return (int)cudaErrorInvalidValue;
    if (variant == kProduction) return h3k_attn_fp8_sm90_grid(S, H, grid);
    *grid = prod_grid(variant, S, H); /* the plain grid for every variant but the split ones */
    return 0;
}

extern "C" int h3lab_attn_sm90(int variant, const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq,
                               const float *sk, const float *sv, const float *vmu, int S, int H, uint16_t *O,
                               float *lse, h3_stream stream)
{
    const LabVariant *v = find(variant);
    if ((!v && !prod_variant(variant)) || S < 1 || H < 1 || h3lab_attn_sm90_smoothed(variant) != (vmu != nullptr))
        return (int)cudaErrorInvalidValue;
    if (!h3k_attn_fp8_sm90_available()) return (int)cudaErrorNoKernelImageForDevice;
    if (variant == kProduction) return h3k_attn_fp8_sm90(q8, k8, vt8, sq, sk, sv, vmu, S, H, O, lse, stream);
    const int S_pad = (S + kBN - 1) / kBN * kBN;
    CUtensorMap tq, tk, tv;
    int e;
    if ((e = make_tmap(&tq, q8, kD, (uint64_t)H * S_pad, 64u)) != 0) return e;
    if ((e = make_tmap(&tk, k8, kD, (uint64_t)H * S_pad, 128u)) != 0) return e;
    if ((e = make_tmap(&tv, vt8, (uint64_t)S_pad, (uint64_t)H * kD, 128u)) != 0) return e;
    if (prod_variant(variant))
        return prod_kernel(variant, tq, tk, tv, sq, sk, sv, vmu, S, H, S_pad, O, lse, stream);
    if (v->tab && v->smem + (long long)v->tab * (S_pad / kBN) > kSmemMax) {
        v = v->untab ? find(v->untab) : nullptr;
        if (!v) return (int)cudaErrorInvalidValue;
    }
    const long long smem = v->smem + (long long)v->tab * (S_pad / kBN);
    const int nqt = (S + kWg3Rows - 1) / kWg3Rows;
    cudaError_t ce = cudaFuncSetAttribute(v->fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (ce != cudaSuccess) return (int)ce;
    float *kn = nullptr;
    if (v->knorms) {
        static float *buf; /* the lab's: grown, never freed; one device, one stream at a time */
        static int cap;
        if (H > cap) {
            if (buf) (void)cudaFree(buf);
            buf = nullptr, cap = 0;
            if ((ce = cudaMalloc(&buf, sizeof(float) * 3 * (size_t)H)) != cudaSuccess) return (int)ce;
            cap = H;
        }
        kn = buf;
        if ((ce = cudaMemsetAsync(kn, 0, sizeof(float) * 3 * (size_t)H, (cudaStream_t)stream)) != cudaSuccess)
            return (int)ce;
        h3lab_key_norms<<<dim3((unsigned)((S_pad + 255) / 256), (unsigned)H), 256, 0, (cudaStream_t)stream>>>(
            k8, sk, S_pad, kn);
    }
    v->fn<<<H * nqt, kWg3Threads, (size_t)smem, (cudaStream_t)stream>>>(tq, tk, tv, sq, sk, sv, vmu, S, H, S_pad, nqt, O,
                                                                         lse, kn);
    return (int)cudaGetLastError();
}

static int g_selected; /* h3lab_select's variant */

extern "C" void h3lab_select(int variant) { g_selected = variant; }

extern "C" int h3lab_attn_sm90_selected_grid(int S, int H, h3_sm90_grid *grid)
{
    return h3lab_attn_sm90_grid(g_selected, S, H, grid);
}

extern "C" int h3lab_attn_sm90_selected(const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq,
                                        const float *sk, const float *sv, const float *vmu, int S, int H, uint16_t *O,
                                        float *lse, h3_stream stream)
{
    return h3lab_attn_sm90(g_selected, q8, k8, vt8, sq, sk, sv, vmu, S, H, O, lse, stream);
}
