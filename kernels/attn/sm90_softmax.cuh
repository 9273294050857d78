/* sm90_softmax.cuh — the FP8 contract's online softmax on one thread's two
 * rows of a wgmma accumulator (cpu_ref.h `attention`, key tile 128 = one
 * scale group per tile), and P's conversion to e4m3 A fragments.
 *
 * Numerics: c = (sq[gq] sk[gk]) (D^-0.5 log2 e); x = c dot (the FP32 wgmma
 * sum); m_new = max(m, max x); alpha = 2^(m - m_new), 0 when m = -inf;
 * p mult = ex2.approx(fma(dot, c, log2 mult - m_new)) (one rounding, and
 * ex2's ~2 ulp: far below the e4m3 rounding of P); l = l alpha + sum(p
 * mult) / mult; P8 = e4m3_satfinite_rne(p mult), mult = 256 sv[gk] / svmax
 * (p <= 1, so P8 <= 256: the top of e4m3's fine range); the emulation's
 * e4m3 tie handling in test_gpu_attention covers the rare code that lands on
 * the other side of a rounding midpoint. Device code for sm_90a (the
 * includer guards it). */
#ifndef H3_SM90_SOFTMAX_CUH
#define H3_SM90_SOFTMAX_CUH

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "sm90_layout.cuh"

namespace {

constexpr float kScaleLog2 = 0.12751743082459868f; /* 128^-0.5 * log2(e) */

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
    /* one asm block with the 16-bit halves joined by mov: ptxas can then
     * write the second cvt into the first's register (F2FP ... MERGE_C)
     * instead of a PRMT per pair, where its schedule allows */
    uint32_t r;
    asm("{\n.reg .b16 lo, hi;\n"
        "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
        "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
        "mov.b32 %0, {lo, hi};\n}"
        : "=r"(r)
        : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
    return r;
}

/* Keys 8j + 2t + {0,1} of the thread's N accumulator values (N/2 keys of
 * two rows) that are >= kvalid (past S) get x = -inf. */
template <int N = 64> static __device__ __forceinline__ void mask_keys(float *s, int kvalid, int t)
{
#pragma unroll
    for (int j = 0; j < N / 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (8 * j + 2 * t + (e & 1) >= kvalid) s[4 * j + e] = -INFINITY;
}

/* The thread's maxima of its two rows over N accumulator values, as a tree
 * (depth 5 for N = 64, not a chain of 16): max is exact, so the order
 * changes no bit, only the latency before the exps can start. */
template <int N = 64> static __device__ __forceinline__ void row_max(const float *s, float &mx0, float &mx1)
{
    static_assert(N == 32 || N == 64, "tree for 4 or 8 leaves of 8 values");
    float a0[N / 8], a1[N / 8];
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
        a0[j] = fmaxf(fmaxf(s[8 * j + 0], s[8 * j + 1]), fmaxf(s[8 * j + 4], s[8 * j + 5]));
        a1[j] = fmaxf(fmaxf(s[8 * j + 2], s[8 * j + 3]), fmaxf(s[8 * j + 6], s[8 * j + 7]));
    }
#pragma unroll
    for (int j = 0; j < N / 8 - 4; ++j) {
        a0[j] = fmaxf(a0[j], a0[j + 4]);
        a1[j] = fmaxf(a1[j], a1[j + 4]);
    }
    mx0 = fmaxf(fmaxf(a0[0], a0[2]), fmaxf(a0[1], a0[3]));
    mx1 = fmaxf(fmaxf(a1[0], a1[2]), fmaxf(a1[1], a1[3]));
}

/* p = ex2(x * cs + b) in place for the two rows (biases b0, b1), added to
 * the per-thread sums */
template <int N = 64>
static __device__ __forceinline__ void exps(float *s, float cs, float b0, float b1, float &sum0, float &sum1)
{
#pragma unroll
    for (int j = 0; j < N / 4; ++j) {
        s[4 * j + 0] = ex2(fmaf(s[4 * j + 0], cs, b0));
        s[4 * j + 1] = ex2(fmaf(s[4 * j + 1], cs, b0));
        s[4 * j + 2] = ex2(fmaf(s[4 * j + 2], cs, b1));
        s[4 * j + 3] = ex2(fmaf(s[4 * j + 3], cs, b1));
        sum0 += s[4 * j + 0] + s[4 * j + 1];
        sum1 += s[4 * j + 2] + s[4 * j + 3];
    }
}

/* Online softmax on the raw dots in c.s of one key tile: leaves p * mult in
 * c.s (P8's multiplier mult = 256 sv / svmax enters as a bias of the
 * exponent, p * mult = 2^(x - m + log2 mult): no multiply per p; lmult =
 * log2 mult, imult = 1 / mult) and returns the factors alpha0, alpha1 that
 * take O and l from the old running max to the new one. x = dot * cs (cs =
 * (sq sk) D^-0.5 log2 e > 0, so m_new = max(m, cs * max dot) exactly). The
 * row sums are of p * mult; l takes them times imult. kvalid: keys of this
 * tile < S (128 unless it is the ragged last tile). kFinite: the caller
 * starts m at -FLT_MAX instead of -inf and every tile has a valid key, so
 * m_new is finite and ex2(-FLT_MAX - mu) = 0 is the first tile's alpha: the
 * same values without the -inf guards. */
template <bool kFinite = false>
static __device__ __forceinline__ void softmax(Consumer &c, float cs, int kvalid, int t, float &alpha0, float &alpha1,
                                               float lmult, float imult)
{
    if (kvalid < kBN) mask_keys(c.s, kvalid, t);
    float mx0, mx1;
    row_max(c.s, mx0, mx1);
    /* the 4 threads of a quad hold one row */
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(c.m0, mx0 * cs), mn1 = fmaxf(c.m1, mx1 * cs);
    /* -inf - -inf guard: a row with no valid key yet keeps p = 0, alpha = 0 */
    float mu0 = mn0, mu1 = mn1;
    if constexpr (!kFinite) mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
    if constexpr (kFinite) {
        alpha0 = ex2(c.m0 - mu0);
        alpha1 = ex2(c.m1 - mu1);
    } else {
        alpha0 = c.m0 == -INFINITY ? 0.f : ex2(c.m0 - mu0);
        alpha1 = c.m1 == -INFINITY ? 0.f : ex2(c.m1 - mu1);
    }
    const float b0 = lmult - mu0, b1 = lmult - mu1;
    float sum0 = 0.f, sum1 = 0.f;
    exps(c.s, cs, b0, b1, sum0, sum1);
    c.m0 = mn0;
    c.m1 = mn1;
    sum0 *= imult;
    sum1 *= imult;
    c.l0 = c.l0 * alpha0 + sum0;
    c.l1 = c.l1 * alpha1 + sum1;
}

template <class C> static __device__ __forceinline__ void rescale_o(C &c, float alpha0, float alpha1)
{
    /* Once the running max settles alpha is exactly 1 for a whole warp; the
     * multiply by 1 is exact, so skipping it changes no bit. */
    if (!__any_sync(0xffffffffu, alpha0 != 1.f || alpha1 != 1.f)) return;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        c.o[4 * j + 0] *= alpha0;
        c.o[4 * j + 1] *= alpha0;
        c.o[4 * j + 2] *= alpha1;
        c.o[4 * j + 3] *= alpha1;
    }
}

/* O = fma(O, alpha, pv): one key tile's P V (its own FP32 sum, from zero)
 * added to O rescaled to the new running max, in one rounding per value. */
template <class C> static __device__ __forceinline__ void fold_pv(C &c, const float *pv, float alpha0, float alpha1)
{
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        c.o[4 * j + 0] = fmaf(c.o[4 * j + 0], alpha0, pv[4 * j + 0]);
        c.o[4 * j + 1] = fmaf(c.o[4 * j + 1], alpha0, pv[4 * j + 1]);
        c.o[4 * j + 2] = fmaf(c.o[4 * j + 2], alpha1, pv[4 * j + 2]);
        c.o[4 * j + 3] = fmaf(c.o[4 * j + 3], alpha1, pv[4 * j + 3]);
    }
}

/* N values of p (times mult) -> P8 A fragments of N/16 k-steps, laid out
 * as convert_p describes */
template <int N = 64> static __device__ __forceinline__ void pack_p(const float *s, uint32_t (*p)[4], float mult)
{
#pragma unroll
    for (int kk = 0; kk < N / 16; ++kk) {
        const float *x = s + 16 * kk;
        p[kk][0] = pack_e4m3x4(x[0] * mult, x[1] * mult, x[4] * mult, x[5] * mult);
        p[kk][1] = pack_e4m3x4(x[2] * mult, x[3] * mult, x[6] * mult, x[7] * mult);
        p[kk][2] = pack_e4m3x4(x[8] * mult, x[9] * mult, x[12] * mult, x[13] * mult);
        p[kk][3] = pack_e4m3x4(x[10] * mult, x[11] * mult, x[14] * mult, x[15] * mult);
    }
}

/* p * mult (in c.s, from softmax) -> P8 A fragments. k-step kk covers
 * n-chunks 4kk..4kk+3; a[0]/a[1]: chunks 4kk, 4kk+1 of rows g / g+8,
 * a[2]/a[3]: chunks 4kk+2, 4kk+3 -- V's stored key order (config.h
 * h3_v_slot_key), so P needs no shuffle. */
static __device__ __forceinline__ void convert_p(Consumer &c) { pack_p(c.s, c.p, 1.f); }

/* A key tile's softmax scalars: cs = (sq sk) D^-0.5 log2 e, and the log2
 * and inverse of P8's multiplier em = sv r256 (r256 = 256 / svmax) -- in the
 * loop, or once per CTA into the three-consumer kernel's table: the same
 * operations either way. */
struct TileScalars {
    float cs, lmult, imult;
};
static __device__ __forceinline__ TileScalars tile_scalars(float sqq, float skn, float svn, float r256)
{
    const float em = svn * r256;
    return TileScalars{(sqq * skn) * kScaleLog2, __log2f(em), rcp_approx(em)};
}

} // namespace

#endif
