/* gemm_lt.c — cuBLASLt wrapper (gemm_lt.h): handle, workspace, per-shape
 * descriptor/layout/algorithm cache. Status strings come from
 * cublasLtGetStatusString (libcublasLt; cublasGetStatusString lives in libcublas). */
#include "gemm_lt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#define LT_WORKSPACE (32u << 20) /* 32 MiB, what cuBLAS recommends for Hopper */
#define LT_CACHE 64

/* LT_FP8_FAST: LT_FP8 with CUBLASLT_MATMUL_DESC_FAST_ACCUM (its own cache
 * entries: the attribute is part of the descriptor the heuristic sees);
 * LT_FP8_BLK: block scales (h3_lt_gemm_fp8_blocks). */
enum { LT_BF16 = 0, LT_FP8 = 1, LT_FP8_FAST = 2, LT_FP8_BLK = 3 };

typedef struct {
    int kind, m, n, k, align; /* align: common power-of-two alignment of the pointers (16..256) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} lt_entry;

struct h3_lt {
    cublasLtHandle_t handle;
    void *workspace; /* [32 MiB] device */
    lt_entry e[LT_CACHE];
    int n;
    int fast_accum; /* h3_lt_set_fast_accum */
};

static const char *kind_types(int kind)
{
    return kind == LT_FP8_FAST ? "A=e4m3 B=e4m3 C=bf16, outer-vector scales, fast accumulation"
           : kind == LT_FP8    ? "A=e4m3 B=e4m3 C=bf16, outer-vector scales"
           : kind == LT_FP8_BLK ? "A=e4m3 B=e4m3 C=bf16, 128x128 weight and 1x128 input block scales"
                               : "A=bf16 B=bf16 C=bf16";
}

h3_lt *h3_lt_create_err(char *err, size_t errlen)
{
    h3_lt *lt = calloc(1, sizeof *lt);
    if (!lt) {
        snprintf(err, errlen, "cuBLASLt: out of host memory");
        return NULL;
    }
    cublasStatus_t s = cublasLtCreate(&lt->handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasLtCreate: %s", cublasLtGetStatusString(s));
        free(lt);
        return NULL;
    }
    cudaError_t e = cudaMalloc(&lt->workspace, LT_WORKSPACE);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cuBLASLt: workspace cudaMalloc(32 MiB): %s", cudaGetErrorString(e));
        cublasLtDestroy(lt->handle);
        free(lt);
        return NULL;
    }
    return lt;
}

h3_lt *h3_lt_create(void)
{
    char err[256];
    h3_lt *lt = h3_lt_create_err(err, sizeof err);
    if (!lt) fprintf(stderr, "%s\n", err);
    return lt;
}

static void entry_destroy(lt_entry *t)
{
    /* reverse of creation order */
    if (t->c) cublasLtMatrixLayoutDestroy(t->c);
    if (t->b) cublasLtMatrixLayoutDestroy(t->b);
    if (t->a) cublasLtMatrixLayoutDestroy(t->a);
    if (t->op) cublasLtMatmulDescDestroy(t->op);
    memset(t, 0, sizeof *t);
}

void h3_lt_destroy(h3_lt *lt)
{
    if (!lt) return;
    for (int i = lt->n - 1; i >= 0; i--) entry_destroy(&lt->e[i]);
    if (lt->workspace) cudaFree(lt->workspace);
    cublasLtDestroy(lt->handle);
    free(lt);
}

/* Largest power of two (16..256) dividing every address. */
static int common_align(const void *p0, const void *p1, const void *p2)
{
    uintptr_t u = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2;
    int a = 256;
    while (a > 16 && (u & (uintptr_t)(a - 1))) a >>= 1;
    return a;
}

#define LT_TRY(call, what)                                                                                    \
    do {                                                                                                      \
        cublasStatus_t s_ = (call);                                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                    \
            snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): %s: %s", m, n, k, kind_types(kind), what, \
                     cublasLtGetStatusString(s_));                                                              \
            goto fail;                                                                                        \
        }                                                                                                     \
    } while (0)

/* Finds or builds the cache entry of (kind, m, n, k, align). */
static lt_entry *lt_get(h3_lt *lt, int kind, int m, int n, int k, int align, char *err, size_t errlen)
{
    for (int i = 0; i < lt->n; i++) {
        lt_entry *t = &lt->e[i];
        if (t->kind == kind && t->m == m && t->n == n && t->k == k && t->align == align) return t;
    }
    if (lt->n == LT_CACHE) {
        snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): shape cache full (%d shapes)", m, n, k,
                 kind_types(kind), LT_CACHE);
        return NULL;
    }
    lt_entry *t = &lt->e[lt->n];
    memset(t, 0, sizeof *t);
    cublasLtMatmulPreference_t pref = NULL;
    const cudaDataType_t ab = kind != LT_BF16 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescCreate(&t->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT), "TRANSA");
    LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN), "TRANSB");
    if (kind != LT_BF16) {
        /* The scale pointers are set per call; the heuristic must know they exist. */
        const float *dummy = (const float *)lt->workspace;
        LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dummy, sizeof dummy),
               "A_SCALE_POINTER");
        LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dummy, sizeof dummy),
               "B_SCALE_POINTER");
        /* One FP32 scale per output channel (A = W: m scales) and per token
         * (B = x: n scales), cuBLAS >= 12.9 on sm_90 and later; or block
         * scales: one per 128 x 128 block of W and one per token per 128
         * elements of k of x. */
        const int32_t amode = kind == LT_FP8_BLK ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                 : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
                      bmode = kind == LT_FP8_BLK ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                 : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &amode, sizeof amode),
               "A_SCALE_MODE");
        LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bmode, sizeof bmode),
               "B_SCALE_MODE");
        /* Fast accumulation: the tensor cores' own accumulator along all of
         * k; by default cuBLASLt adds each k-chunk's partial sum into FP32
         * registers (the wgmma accumulator keeps only ~14 significant bits
         * of a running sum, DeepSeek-V3 report §3.3.2). */
        if (kind == LT_FP8_FAST) {
            const int8_t fast = 1;
            LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast),
                   "FAST_ACCUM");
        }
    }
    LT_TRY(cublasLtMatrixLayoutCreate(&t->a, ab, (uint64_t)k, (uint64_t)m, (int64_t)k), "layout A");
    LT_TRY(cublasLtMatrixLayoutCreate(&t->b, ab, (uint64_t)k, (uint64_t)n, (int64_t)k), "layout B");
    LT_TRY(cublasLtMatrixLayoutCreate(&t->c, CUDA_R_16BF, (uint64_t)m, (uint64_t)n, (int64_t)m), "layout C");

    LT_TRY(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    const size_t ws = LT_WORKSPACE;
    const uint32_t al = (uint32_t)align;
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
           "PREF_MAX_WORKSPACE_BYTES");
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al),
           "PREF_MIN_ALIGNMENT_A");
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al),
           "PREF_MIN_ALIGNMENT_B");
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al),
           "PREF_MIN_ALIGNMENT_C");
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al),
           "PREF_MIN_ALIGNMENT_D");
    cublasLtMatmulHeuristicResult_t res;
    int count = 0;
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(lt->handle, t->op, t->a, t->b, t->c, t->c, pref, 1, &res, &count),
           "AlgoGetHeuristic");
    if (count < 1) {
        snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): no algorithm for this shape", m, n, k,
                 kind_types(kind));
        goto fail;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    t->algo = res.algo;
    t->kind = kind;
    t->m = m;
    t->n = n;
    t->k = k;
    t->align = align;
    lt->n++;
    return t;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    entry_destroy(t);
    return NULL;
}

static int lt_gemm(h3_lt *lt, int kind, const void *x, const void *W, const float *x_scale, const float *w_scale,
                   uint16_t *y, int S, int N, int K, cudaStream_t stream, char *err, size_t errlen)
{
    const int m = N, n = S, k = K;
    const size_t esz = kind != LT_BF16 ? 1 : 2;
    if (!lt || S < 0 || N <= 0 || K <= 0) {
        snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): %s", m, n, k, kind_types(kind),
                 lt ? "bad shape" : "no handle");
        return -1;
    }
    if (S == 0) return 0;
    if (((uintptr_t)x | (uintptr_t)W | (uintptr_t)y) & 15u) {
        snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): pointers must be 16-byte aligned (x=%p W=%p y=%p)",
                 m, n, k, kind_types(kind), x, W, (void *)y);
        return -1;
    }
    if (((size_t)K * esz) % 16 || ((size_t)N * 2) % 16) {
        snprintf(err, errlen,
                 "cuBLASLt gemm m=%d n=%d k=%d (%s): leading dimensions must be multiples of 16 bytes "
                 "(lda=ldb=%zu B, ldc=%zu B)",
                 m, n, k, kind_types(kind), (size_t)K * esz, (size_t)N * 2);
        return -1;
    }
    lt_entry *t = lt_get(lt, kind, m, n, k, common_align(x, W, y), err, errlen);
    if (!t) return -1;
    if (kind != LT_BF16) {
        LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale),
               "A_SCALE_POINTER");
        LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof x_scale),
               "B_SCALE_POINTER");
    }
    const float alpha = 1.0f, beta = 0.0f;
    LT_TRY(cublasLtMatmul(lt->handle, t->op, &alpha, W, t->a, x, t->b, &beta, y, t->c, y, t->c, &t->algo,
                          lt->workspace, LT_WORKSPACE, stream),
           "cublasLtMatmul");
    return 0;
fail:
    return -1;
}

int h3_lt_gemm_bf16(h3_lt *lt, const uint16_t *x, const uint16_t *W, uint16_t *y, int S, int N, int K,
                    cudaStream_t stream, char *err, size_t errlen)
{
    return lt_gemm(lt, LT_BF16, x, W, NULL, NULL, y, S, N, K, stream, err, errlen);
}

void h3_lt_set_fast_accum(h3_lt *lt, int on)
{
    if (lt) lt->fast_accum = on != 0;
}

static int gemm_fp8(h3_lt *lt, int kind, const uint8_t *x, const uint8_t *W, const float *x_scale,
                    const float *w_scale, uint16_t *y, int S, int N, int K, cudaStream_t stream, char *err,
                    size_t errlen)
{
    if (kind == LT_FP8_BLK && S % 8) {
        snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): the token count must be a multiple of 8", N, S, K,
                 kind_types(kind));
        return -1;
    }
    if (!x_scale || !w_scale) {
        snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): scale pointers required", N, S, K,
                 kind_types(kind));
        return -1;
    }
    return lt_gemm(lt, kind, x, W, x_scale, w_scale, y, S, N, K, stream, err, errlen);
}

int h3_lt_gemm_fp8(h3_lt *lt, const uint8_t *x, const uint8_t *W, const float *x_scale, const float *w_scale,
                   uint16_t *y, int S, int N, int K, cudaStream_t stream, char *err, size_t errlen)
{
    return gemm_fp8(lt, lt && lt->fast_accum ? LT_FP8_FAST : LT_FP8, x, W, x_scale, w_scale, y, S, N, K, stream, err,
                    errlen);
}

int h3_lt_gemm_fp8_blocks(h3_lt *lt, const uint8_t *x, const uint8_t *W, const float *x_scale, const float *w_scale,
                          uint16_t *y, int S, int N, int K, cudaStream_t stream, char *err, size_t errlen)
{
    return gemm_fp8(lt, LT_FP8_BLK, x, W, x_scale, w_scale, y, S, N, K, stream, err, errlen);
}
