/* gemm.c — stages qkv_gemm, out_gemm, fc1_gemm, fc2_gemm: y = x W^T.
 *
 * y[r][n] = bf16(sum_k x[rows[r]][k] * W[n][k]), BF16 operands widened to
 * FP32, FP32 accumulation, one BF16 rounding at the end.
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

/* Packs rows m0..m0+mc-1 of A (row-sampled), k0..k0+kc-1, into MR-row
 * micro-panels Ap[panel][k][MR], zero-padding the last panel. */
static void pack_a(const uint16_t *x, int K, const int *rows, int m0, int mc, int k0, int kc, float *Ap)
{
    for (int p = 0; p < mc; p += MR) {
        float *dst = Ap + (size_t)p * kc; /* [kc][MR] */
        for (int i = 0; i < MR; i++) {
            if (p + i < mc) {
                const uint16_t *src = x + (size_t)cpu_row(rows, m0 + p + i) * K + k0;
                for (int k = 0; k < kc; k++) dst[k * MR + i] = h3_bf16_to_f32(src[k]);
            } else {
                for (int k = 0; k < kc; k++) dst[k * MR + i] = 0.0f;
            }
        }
    }
}

/* Packs W rows n0..n0+nc-1, k0..k0+kc-1 into NR-column micro-panels
 * Bp[panel][k][NR], zero-padding the last panel. */
static void pack_b(const uint16_t *W, int K, int n0, int nc, int k0, int kc, float *Bp)
{
    for (int p = 0; p < nc; p += NR) {
        float *dst = Bp + (size_t)p * kc; /* [kc][NR] */
        for (int j = 0; j < NR; j++) {
            if (p + j < nc) {
                const uint16_t *src = W + (size_t)(n0 + p + j) * K + k0;
                for (int k = 0; k < kc; k++) dst[k * NR + j] = h3_bf16_to_f32(src[k]);
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

void cpu_gemm_bf16(const uint16_t *x, const uint16_t *W, int S, int N, int K, const int *rows, int nrows,
                   uint16_t *y)
{
    (void)S;
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
                    for (int j = 0; j < nc; j++) yr[j] = h3_f32_to_bf16(cr[j]);
                }
            }
        }
        free(Ap);
        free(Bp);
        free(Ct);
    }
}
