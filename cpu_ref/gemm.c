/* gemm.c — stages qkv_gemm, out_gemm, fc1_gemm, fc2_gemm: y = x W^T, and
 * the FP8 GEMM mode's operands (per-row e4m3 quantisation).
 *
 * BF16: y[r][n] = bf16(sum_k x[rows[r]][k] * W[n][k]), operands widened to
 * FP32, FP32 accumulation, one BF16 rounding at the end.
 * FP8 (--gemm fp8): y[r][n] = bf16((sum_k e4m3(x8[r][k]) * e4m3(W8[n][k]))
 * * (sx[r] * sw[n])): every product of two e4m3 values is exact in FP32, the
 * sum is FP32, the product of the two scales is applied once to the sum (what
 * cuBLASLt's outer-vector scale mode computes, up to its summation order; the
 * scales first, so a row at the BF16 maximum does not overflow on the way).
 *
 * Goto-style blocking: tasks are MC x NC output tiles (OpenMP, dynamic); per
 * KC slice a task widens its A block (MC x KC, row-sampled) and B block
 * (KC x NC) to FP32 packed micro-panels, then a 6 x 16 register micro-kernel
 * (12 AVX2 accumulators, GCC vector extensions, no intrinsics) runs over the
 * slice. Each output element sees the same FMA chain over k = 0..K-1 whatever
 * its tile position or the thread count, so results are deterministic and a
 * row-sampled call equals the same rows of a full call bit for bit. */
#include <stdlib.h>

#include "cpu_internal.h"
#include "cpu_ref.h"

#define MR 6
#define NR 16
#define MC 96  /* multiple of MR; A block MC x KC FP32 = 96 KiB (L2) */
#define NC 256 /* multiple of NR; B block KC x NC FP32 = 256 KiB (L2) */
#define KC 256 /* B micro-panel KC x NR FP32 = 16 KiB (L1) */

typedef float v8f __attribute__((vector_size(32)));

/* The operands' element type: BF16 words or e4m3 codes (widened exactly),
 * the codes optionally times a scale per (brows x 128) block (bs [row /
 * brows][k / 128], ld ceil(K / 128): cpu_gemm_fp8_blocks). */
typedef struct {
    const void *p;
    const float *e4m3; /* NULL: BF16 words; else e4m3 codes and their [256] values */
    const float *bs;   /* block scales, or NULL */
    int brows;
} operand;

/* Row r, columns k0..k0+kc-1 of a [*][K] operand, widened to FP32. */
static void widen_row(operand a, size_t r, int K, int k0, int kc, float *dst, int stride)
{
    if (a.e4m3 && a.bs) { /* code x its block's scale, rounded to FP32 once */
        const uint8_t *src = (const uint8_t *)a.p + r * K + k0;
        const float *bs = a.bs + r / (size_t)a.brows * ((K + 127) / 128);
        for (int k = 0; k < kc; k++) dst[k * stride] = a.e4m3[src[k]] * bs[(k0 + k) / 128];
    } else if (a.e4m3) {
        const uint8_t *src = (const uint8_t *)a.p + r * K + k0;
        for (int k = 0; k < kc; k++) dst[k * stride] = a.e4m3[src[k]];
    } else {
        const uint16_t *src = (const uint16_t *)a.p + r * K + k0;
        for (int k = 0; k < kc; k++) dst[k * stride] = h3_bf16_to_f32(src[k]);
    }
}

/* Packs rows m0..m0+mc-1 of A (row-sampled), k0..k0+kc-1, into MR-row
 * micro-panels Ap[panel][k][MR], zero-padding the last panel. */
static void pack_a(operand x, int K, const int *rows, int m0, int mc, int k0, int kc, float *Ap)
{
    for (int p = 0; p < mc; p += MR) {
        float *dst = Ap + (size_t)p * kc; /* [kc][MR] */
        for (int i = 0; i < MR; i++) {
            if (p + i < mc) {
                widen_row(x, (size_t)cpu_row(rows, m0 + p + i), K, k0, kc, dst + i, MR);
            } else {
                for (int k = 0; k < kc; k++) dst[k * MR + i] = 0.0f;
            }
        }
    }
}

/* Packs W rows n0..n0+nc-1, k0..k0+kc-1 into NR-column micro-panels
 * Bp[panel][k][NR], zero-padding the last panel. */
static void pack_b(operand W, int K, int n0, int nc, int k0, int kc, float *Bp)
{
    for (int p = 0; p < nc; p += NR) {
        float *dst = Bp + (size_t)p * kc; /* [kc][NR] */
        for (int j = 0; j < NR; j++) {
            if (p + j < nc) {
                widen_row(W, (size_t)(n0 + p + j), K, k0, kc, dst + j, NR);
            } else {
                for (int k = 0; k < kc; k++) dst[k * NR + j] = 0.0f;
            }
        }
    }
}

/* C[MR][NR] (+)= Ap[kc][MR] * Bp[kc][NR]; ldc = row stride of C. The 12
 * accumulators are named scalars of vector type so they stay in registers. */
static inline v8f load8(const float *p)
{
    v8f v;
    memcpy(&v, p, 32);
    return v;
}
static inline void store8(float *p, v8f v) { memcpy(p, &v, 32); }

static __attribute__((noinline)) void micro_kernel(int kc, const float *restrict Ap, const float *restrict Bp, float *restrict C,
                                int ldc, int first)
{
    v8f a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0}, a40 = {0},
        a41 = {0}, a50 = {0}, a51 = {0};
    if (!first) {
#define LD(i) a##i##0 = load8(C + (size_t)i * ldc), a##i##1 = load8(C + (size_t)i * ldc + 8)
        LD(0); LD(1); LD(2); LD(3); LD(4); LD(5);
#undef LD
    }
    for (int k = 0; k < kc; k++) {
        const v8f b0 = load8(Bp + k * NR), b1 = load8(Bp + k * NR + 8);
        const float *a = Ap + k * MR;
#define FMA(i) a##i##0 += a[i] * b0, a##i##1 += a[i] * b1
        FMA(0); FMA(1); FMA(2); FMA(3); FMA(4); FMA(5);
#undef FMA
    }
#define ST(i) store8(C + (size_t)i * ldc, a##i##0), store8(C + (size_t)i * ldc + 8, a##i##1)
    ST(0); ST(1); ST(2); ST(3); ST(4); ST(5);
#undef ST
}

/* y [nrows][N] bf16 = bf16(acc * sx[r] * sw[n]) (sx, sw NULL: 1). */
static void gemm_core(operand x, operand W, const float *sx, const float *sw, int N, int K, const int *rows,
                      int nrows, uint16_t *y)
{
    if (nrows <= 0 || N <= 0) return;
    const int mt = (nrows + MC - 1) / MC, nt = (N + NC - 1) / NC;
    if (K <= 0) {
        for (size_t i = 0; i < (size_t)nrows * N; i++) y[i] = 0;
        return;
    }
#pragma omp parallel
    {
        float *Ap = aligned_alloc(64, (size_t)MC * KC * sizeof(float)); /* [MC/MR][KC][MR] */
        float *Bp = aligned_alloc(64, (size_t)NC * KC * sizeof(float)); /* [NC/NR][KC][NR] */
        float *Ct = aligned_alloc(64, (size_t)MC * NC * sizeof(float)); /* [MC][NC] accumulators */
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int tn = 0; tn < nt; tn++) {
            for (int tm = 0; tm < mt; tm++) {
                const int m0 = tm * MC, n0 = tn * NC;
                const int mc = nrows - m0 < MC ? nrows - m0 : MC, nc = N - n0 < NC ? N - n0 : NC;
                const int mcp = (mc + MR - 1) / MR * MR, ncp = (nc + NR - 1) / NR * NR;
                for (int k0 = 0; k0 < K; k0 += KC) {
                    const int kc = K - k0 < KC ? K - k0 : KC;
                    pack_a(x, K, rows, m0, mc, k0, kc, Ap);
                    pack_b(W, K, n0, nc, k0, kc, Bp);
                    for (int jn = 0; jn < ncp; jn += NR)
                        for (int im = 0; im < mcp; im += MR)
                            micro_kernel(kc, Ap + (size_t)im * kc, Bp + (size_t)jn * kc, Ct + (size_t)im * NC + jn,
                                         NC, k0 == 0);
                }
                for (int i = 0; i < mc; i++) {
                    uint16_t *yr = y + (size_t)(m0 + i) * N + n0; /* [nc] of [nrows][N] bf16 */
                    const float *cr = Ct + (size_t)i * NC;
                    const float rs = sx ? sx[cpu_row(rows, m0 + i)] : 1.0f;
                    if (sx || sw)
                        for (int j = 0; j < nc; j++) yr[j] = h3_f32_to_bf16(cr[j] * (rs * (sw ? sw[n0 + j] : 1.0f)));
                    else
                        for (int j = 0; j < nc; j++) yr[j] = h3_f32_to_bf16(cr[j]);
                }
            }
        }
        free(Ap);
        free(Bp);
        free(Ct);
    }
}

void cpu_gemm_bf16(const uint16_t *x, const uint16_t *W, int S, int N, int K, const int *rows, int nrows,
                   uint16_t *y)
{
    (void)S;
    gemm_core((operand){x, NULL, NULL, 0}, (operand){W, NULL, NULL, 0}, NULL, NULL, N, K, rows, nrows, y);
}

void cpu_gemm_fp8(const uint8_t *x8, const float *sx, const uint8_t *W8, const float *sw, int S, int N, int K,
                  const int *rows, int nrows, uint16_t *y)
{
    (void)S;
    float lut[256];
    for (int c = 0; c < 256; c++) lut[c] = h3_e4m3_to_f32((uint8_t)c);
    gemm_core((operand){x8, lut, NULL, 0}, (operand){W8, lut, NULL, 0}, sx, sw, N, K, rows, nrows, y);
}

void cpu_gemm_fp8_blocks(const uint8_t *x8, const float *sx, int bx, const uint8_t *W8, const float *sw, int bw, int S,
                         int N, int K, const int *rows, int nrows, uint16_t *y)
{
    (void)S;
    float lut[256];
    for (int c = 0; c < 256; c++) lut[c] = h3_e4m3_to_f32((uint8_t)c);
    gemm_core((operand){x8, lut, sx, bx}, (operand){W8, lut, sw, bw}, NULL, NULL, N, K, rows, nrows, y);
}

void cpu_quant_blocks_e4m3(const uint16_t *x, long nrows, int cols, int brows, uint8_t *q, float *s)
{
    const int nb = (cols + 127) / 128;
    const long nbr = (nrows + brows - 1) / brows;
#pragma omp parallel for schedule(static) collapse(2)
    for (long br = 0; br < nbr; br++)
        for (int kb = 0; kb < nb; kb++) {
            const long r0 = br * brows, r1 = r0 + brows < nrows ? r0 + brows : nrows;
            const int c0 = kb * 128, c1 = c0 + 128 < cols ? c0 + 128 : cols;
            float amax = 0.0f;
            for (long r = r0; r < r1; r++)
                for (int c = c0; c < c1; c++) {
                    const float a = fabsf(h3_bf16_to_f32(x[(size_t)r * cols + c]));
                    if (a > amax) amax = a;
                }
            const float inv = amax > 0.0f ? 448.0f / amax : 1.0f;
            s[br * nb + kb] = amax > 0.0f ? amax / 448.0f : 1.0f;
            for (long r = r0; r < r1; r++)
                for (int c = c0; c < c1; c++)
                    q[(size_t)r * cols + c] = h3_f32_to_e4m3(h3_bf16_to_f32(x[(size_t)r * cols + c]) * inv);
        }
}

void cpu_quant_rows_e4m3(const uint16_t *x, long nrows, int cols, uint8_t *q, float *s)
{
#pragma omp parallel for schedule(static)
    for (long r = 0; r < nrows; r++) {
        const uint16_t *xr = x + (size_t)r * cols;
        float amax = 0.0f;
        for (int c = 0; c < cols; c++) {
            float a = fabsf(h3_bf16_to_f32(xr[c]));
            if (a > amax) amax = a;
        }
        const float inv = amax > 0.0f ? 448.0f / amax : 1.0f;
        s[r] = amax > 0.0f ? amax / 448.0f : 1.0f;
        for (int c = 0; c < cols; c++) q[(size_t)r * cols + c] = h3_f32_to_e4m3(h3_bf16_to_f32(xr[c]) * inv);
    }
}
