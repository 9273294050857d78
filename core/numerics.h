/* numerics.h — scalar number formats shared by the host, the CPU reference and
 * the tests: BF16, F16 and FP8 (e4m3fn, e5m2) encode/decode.
 *
 * Rounding is round-to-nearest-even everywhere, as the GPU's cvt.rn does.
 * The FP8 encoders saturate like cvt.rn.satfinite (the instruction the
 * kernels use): finite values beyond the largest normal and +-inf become
 * +-max, NaN stays NaN. The "_nonsat" variants follow ml_dtypes' astype
 * instead (overflow -> NaN for e4m3fn, -> inf for e5m2) and exist for the
 * interop tests. Header-only, static inline, no dependencies. */
#ifndef H3_NUMERICS_H
#define H3_NUMERICS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline uint32_t h3_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float h3_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- BF16 ---- */
static inline float h3_bf16_to_f32(uint16_t h) { return h3_bits_f32((uint32_t)h << 16); }

static inline uint16_t h3_f32_to_bf16(float f)
{
    uint32_t u = h3_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* RNE; overflow carries into inf correctly */
    return (uint16_t)(u >> 16);
}
/* Round a float to the nearest BF16 value, staying in float. */
static inline float h3_round_bf16(float f) { return h3_bf16_to_f32(h3_f32_to_bf16(f)); }

/* ---- F16 (for the loader's dtype coverage and tests) ---- */
static inline float h3_f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
    if (e == 0) return (s ? -1.0f : 1.0f) * ldexpf((float)m, -24);
    if (e == 31) return h3_bits_f32(s | 0x7f800000u | (m << 13));
    return h3_bits_f32(s | ((e + 112) << 23) | (m << 13));
}

/* ---- FP8 ----
 * A generic minifloat encoder: ebits exponent bits, mbits mantissa bits,
 * bias 2^(ebits-1)-1. e4m3fn has no infinities and one NaN code per sign
 * (S.1111.111), so its largest finite value is 448 = 1.75 * 2^8; e5m2 is IEEE
 * like (inf and NaNs), largest finite 57344. */
static inline float h3_fp8_decode(uint8_t v, int ebits, int mbits, int fn)
{
    int s = v >> 7, e = (v >> mbits) & ((1 << ebits) - 1), m = v & ((1 << mbits) - 1);
    int bias = (1 << (ebits - 1)) - 1;
    float r;
    if (fn) {
        if (e == (1 << ebits) - 1 && m == (1 << mbits) - 1) return NAN;
    } else if (e == (1 << ebits) - 1) {
        return m ? NAN : (s ? -INFINITY : INFINITY);
    }
    if (e == 0)
        r = ldexpf((float)m, 1 - bias - mbits);
    else
        r = ldexpf((float)((1 << mbits) + m), e - bias - mbits);
    return s ? -r : r;
}

/* Encode with RNE. sat: saturate overflow to +-max (satfinite); otherwise
 * overflow gives NaN (fn) or inf (IEEE-like), as ml_dtypes does. */
static inline uint8_t h3_fp8_encode(float f, int ebits, int mbits, int fn, int sat)
{
    const int bias = (1 << (ebits - 1)) - 1;
    const uint8_t nan_code = fn ? 0x7f : (uint8_t)(((1 << ebits) - 1) << mbits | 1 << (mbits - 1));
    const int emax_field = fn ? (1 << ebits) - 1 : (1 << ebits) - 2;
    const int mmax_at_emax = fn ? (1 << mbits) - 2 : (1 << mbits) - 1;
    const uint8_t max_code = (uint8_t)(emax_field << mbits | mmax_at_emax);
    uint32_t u = h3_f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    if (isnan(f)) return (uint8_t)(sign | nan_code);
    float a = fabsf(f);
    if (isinf(a)) {
        if (sat) return (uint8_t)(sign | max_code);
        return fn ? (uint8_t)(sign | nan_code) : (uint8_t)(sign | ((1 << ebits) - 1) << mbits);
    }
    /* Scale to an integer grid in units of the smallest subnormal, then RNE
     * via nearbyint (default rounding mode is to-nearest-even). Values below
     * 2^-(bias-1) are subnormal and share the smallest exponent's spacing. */
    int ex;
    frexpf(a, &ex); /* a = m * 2^ex, m in [0.5, 1) */
    int e_unb = ex - 1; /* a in [2^e_unb, 2^(e_unb+1)) */
    int emin = 1 - bias;
    if (e_unb < emin) e_unb = emin;
    float q = nearbyintf(ldexpf(a, mbits - e_unb)); /* mantissa incl. hidden bit, in [0, 2^(mbits+1)] */
    int qi = (int)q;
    if (qi >= (2 << mbits)) { /* rounded up to the next binade */
        qi >>= 1;
        e_unb++;
    }
    int efield = (qi >= (1 << mbits)) ? e_unb + bias : 0;
    int mfield = qi & ((1 << mbits) - 1);
    if (efield == 0 && qi >= (1 << mbits)) efield = 1; /* subnormal rounded up to the smallest normal */
    if (efield > emax_field || (efield == emax_field && mfield > mmax_at_emax)) {
        if (sat) return (uint8_t)(sign | max_code);
        return fn ? (uint8_t)(sign | nan_code) : (uint8_t)(sign | ((1 << ebits) - 1) << mbits);
    }
    return (uint8_t)(sign | efield << mbits | mfield);
}

static inline float h3_e4m3_to_f32(uint8_t v) { return h3_fp8_decode(v, 4, 3, 1); }
static inline float h3_e5m2_to_f32(uint8_t v) { return h3_fp8_decode(v, 5, 2, 0); }
static inline uint8_t h3_f32_to_e4m3(float f) { return h3_fp8_encode(f, 4, 3, 1, 1); }
static inline uint8_t h3_f32_to_e5m2(float f) { return h3_fp8_encode(f, 5, 2, 0, 1); }
static inline uint8_t h3_f32_to_e4m3_nonsat(float f) { return h3_fp8_encode(f, 4, 3, 1, 0); }
static inline uint8_t h3_f32_to_e5m2_nonsat(float f) { return h3_fp8_encode(f, 5, 2, 0, 0); }
/* Round to the nearest e4m3 value, saturating, staying in float. */
static inline float h3_round_e4m3(float f) { return h3_e4m3_to_f32(h3_f32_to_e4m3(f)); }

#define H3_E4M3_MAX 448.0f

/* Whether two e4m3 codes of one quantised q/k group agree up to the rounding
 * the quantisation stage cannot avoid. Two correct computations of the
 * per-head RMSNorm may differ by one BF16 ulp (FP32 sums in another order);
 * RoPE's difference of products y = t[d] cos f - t[d+48] sin f can cancel,
 * so that ulp of a value as large as the group's amax (2^-8 .. 2^-7 of it,
 * i.e. up to 3.5 in code units where amax maps to 448) lands on a small
 * result and moves it more than one e4m3 step. Accept: equal, one step
 * apart, or dequantised values within 448 * 2^-7. */
static inline int h3_e4m3_codes_close(uint8_t a, uint8_t b)
{
    if (a == b) return 1;
    int oa = (a & 0x80) ? -(int)(a & 0x7f) : (int)a, ob = (b & 0x80) ? -(int)(b & 0x7f) : (int)b;
    if (oa - ob <= 1 && ob - oa <= 1) return 1;
    return fabsf(h3_e4m3_to_f32(a) - h3_e4m3_to_f32(b)) <= H3_E4M3_MAX / 128.0f;
}

/* ---- non-finite scans (the outputs of the block and of its stages) ----
 * Index of the first NaN or Inf, or -1. BF16: exponent all ones; e4m3fn has
 * no infinities, only the NaN codes S.1111.111. */
static inline long h3_bf16_first_nonfinite(const uint16_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((v[i] & 0x7f80) == 0x7f80) return (long)i;
    return -1;
}
static inline long h3_f32_first_nonfinite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return (long)i;
    return -1;
}
static inline long h3_e4m3_first_nan(const uint8_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((v[i] & 0x7f) == 0x7f) return (long)i;
    return -1;
}

/* dst [cols][rows] = src [rows][cols] transposed (e.g. block scales between
 * the device's [blocks][tokens] and the checks' [tokens][blocks]). */
static inline void h3_transpose_f32(const float *src, size_t rows, size_t cols, float *dst)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

/* Median of v[0..n), n >= 1 (sorts v): the timing tables' statistic. */
static inline int h3_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static inline double h3_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, h3_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
