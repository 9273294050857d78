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

enum { LT_BF16 = 0, LT_FP8 = 1 };

typedef struct {
    int kind, m, n, k, align; /* align: common power-of-two alignment of the pointers (16..256) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;                  /* the one every call runs */
    cublasLtMatmulAlgo_t cand[H3_LT_MAX_CAND]; /* the heuristic's candidates, best estimate first */
    float cand_ms[H3_LT_MAX_CAND];             /* measured at first use when tuning; < 0 failed/not timed */
    int ncand, pick, tuned;
} lt_entry;

struct h3_lt {
    cublasLtHandle_t handle;
    void *workspace; /* [32 MiB] device */
    lt_entry e[LT_CACHE];
    int n;
    int tune, tune_reps; /* h3_lt_set_tune */
};

static const char *kind_types(int kind)
{
    return kind == LT_FP8 ? "A=e4m3 B=e4m3 C=bf16, outer-vector scales" : "A=bf16 B=bf16 C=bf16";
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
    const cudaDataType_t ab = kind == LT_FP8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescCreate(&t->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT), "TRANSA");
    LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN), "TRANSB");
    if (kind == LT_FP8) {
        /* The scale pointers are set per call; the heuristic must know they exist. */
        const float *dummy = (const float *)lt->workspace;
        LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dummy, sizeof dummy),
               "A_SCALE_POINTER");
        LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dummy, sizeof dummy),
               "B_SCALE_POINTER");
        /* One FP32 scale per output channel (A = W: m scales) and per token
         * (B = x: n scales), cuBLAS >= 12.9 on sm_90 and later. */
        const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, sizeof outer),
               "A_SCALE_MODE outer vector");
        LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof outer),
               "B_SCALE_MODE outer vector");
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
    cublasLtMatmulHeuristicResult_t res[H3_LT_MAX_CAND];
    int count = 0;
    const int want = lt->tune > 1 ? lt->tune : 1;
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(lt->handle, t->op, t->a, t->b, t->c, t->c, pref, want, res, &count),
           "AlgoGetHeuristic");
    if (count < 1) {
        snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): no algorithm for this shape", m, n, k,
                 kind_types(kind));
        goto fail;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    t->ncand = 0;
    for (int i = 0; i < count; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS) {
            t->cand[t->ncand] = res[i].algo;
            t->cand_ms[t->ncand++] = -1.0f;
        }
    if (t->ncand < 1) {
        snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): no usable algorithm for this shape", m, n, k,
                 kind_types(kind));
        goto fail;
    }
    t->algo = t->cand[0];
    t->pick = 0;
    t->tuned = t->ncand < 2; /* nothing to choose between */
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

static cublasStatus_t lt_matmul(h3_lt *lt, const lt_entry *t, const cublasLtMatmulAlgo_t *algo, const void *x,
                                const void *W, uint16_t *y, cudaStream_t stream)
{
    const float alpha = 1.0f, beta = 0.0f;
    return cublasLtMatmul(lt->handle, t->op, &alpha, W, t->a, x, t->b, &beta, y, t->c, y, t->c, algo, lt->workspace,
                          LT_WORKSPACE, stream);
}

/* h3_lt_set_tune: times each candidate on this call's own operands (one
 * warm-up, then tune_reps runs between two events; y is overwritten, which
 * the call that follows does anyway) and keeps the fastest. Not while the
 * stream is being captured into a graph (no synchronising there): the entry
 * then stays on the heuristic's first choice until an uncaptured call. */
static int lt_tune_entry(h3_lt *lt, lt_entry *t, const void *x, const void *W, uint16_t *y, cudaStream_t stream,
                         char *err, size_t errlen)
{
    const int m = t->m, n = t->n, k = t->k, kind = t->kind;
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (lt->tune < 2 || cudaStreamIsCapturing(stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone)
        return 0;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): tuning: cudaEventCreate failed", m, n, k,
                 kind_types(kind));
        if (e0) cudaEventDestroy(e0);
        return -1;
    }
    int best = 0;
    for (int i = 0; i < t->ncand; i++) {
        t->cand_ms[i] = -1.0f;
        if (lt_matmul(lt, t, &t->cand[i], x, W, y, stream) != CUBLAS_STATUS_SUCCESS) continue; /* skip it */
        cudaEventRecord(e0, stream);
        int ok = 1;
        for (int r = 0; r < lt->tune_reps && ok; r++)
            ok = lt_matmul(lt, t, &t->cand[i], x, W, y, stream) == CUBLAS_STATUS_SUCCESS;
        cudaEventRecord(e1, stream);
        float ms = 0.0f;
        if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
            snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): tuning: %s", m, n, k, kind_types(kind),
                     cudaGetErrorString(cudaGetLastError()));
            return -1;
        }
        if (!ok) continue;
        t->cand_ms[i] = ms / (float)lt->tune_reps;
        if (t->cand_ms[best] < 0.0f || t->cand_ms[i] < t->cand_ms[best]) best = i;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (t->cand_ms[best] < 0.0f) {
        snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): tuning: no candidate ran", m, n, k,
                 kind_types(kind));
        return -1;
    }
    t->pick = best;
    t->algo = t->cand[best];
    t->tuned = 1;
    return 0;
}

static int lt_gemm(h3_lt *lt, int kind, const void *x, const void *W, const float *x_scale, const float *w_scale,
                   uint16_t *y, int S, int N, int K, cudaStream_t stream, char *err, size_t errlen)
{
    const int m = N, n = S, k = K;
    const size_t esz = kind == LT_FP8 ? 1 : 2;
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
    if (kind == LT_FP8) {
        LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale),
               "A_SCALE_POINTER");
        LT_TRY(cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof x_scale),
               "B_SCALE_POINTER");
    }
    if (!t->tuned && lt_tune_entry(lt, t, x, W, y, stream, err, errlen)) return -1;
    LT_TRY(lt_matmul(lt, t, &t->algo, x, W, y, stream), "cublasLtMatmul");
    return 0;
fail:
    return -1;
}

int h3_lt_gemm_bf16(h3_lt *lt, const uint16_t *x, const uint16_t *W, uint16_t *y, int S, int N, int K,
                    cudaStream_t stream, char *err, size_t errlen)
{
    return lt_gemm(lt, LT_BF16, x, W, NULL, NULL, y, S, N, K, stream, err, errlen);
}

int h3_lt_gemm_fp8(h3_lt *lt, const uint8_t *x, const uint8_t *W, const float *x_scale, const float *w_scale,
                   uint16_t *y, int S, int N, int K, cudaStream_t stream, char *err, size_t errlen)
{
    if (!x_scale || !w_scale) {
        snprintf(err, errlen, "cuBLASLt gemm m=%d n=%d k=%d (%s): scale pointers required", N, S, K,
                 kind_types(LT_FP8));
        return -1;
    }
    return lt_gemm(lt, LT_FP8, x, W, x_scale, w_scale, y, S, N, K, stream, err, errlen);
}

void h3_lt_set_tune(h3_lt *lt, int candidates, int reps)
{
    if (!lt) return;
    lt->tune = candidates < 1 ? 1 : candidates > H3_LT_MAX_CAND ? H3_LT_MAX_CAND : candidates;
    lt->tune_reps = reps < 1 ? 1 : reps;
}

static int algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t what)
{
    int32_t v = -1;
    size_t got = 0;
    uint32_t u = 0;
    /* the attributes are int32 or uint32/uint16 in cuBLASLt; read 4 bytes, zero-extended */
    if (cublasLtMatmulAlgoConfigGetAttribute(a, what, &u, sizeof u, &got) == CUBLAS_STATUS_SUCCESS && got <= 4) {
        v = (int32_t)u;
        if (got == 2) v = (int32_t)(u & 0xffffu);
    }
    return v;
}

int h3_lt_describe(const h3_lt *lt, int i, char *buf, size_t len)
{
    if (!lt || i < 0 || i >= lt->n) return -1;
    const lt_entry *t = &lt->e[i];
    const cublasLtMatmulAlgo_t *a = &t->algo;
    int o = snprintf(buf, len, "m=%d n=%d k=%d %s: algo %d tile %d stages %d split-k %d swizzle %d cluster %d",
                     t->m, t->n, t->k, t->kind == LT_FP8 ? "e4m3" : "bf16", algo_attr(a, CUBLASLT_ALGO_CONFIG_ID),
                     algo_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID), algo_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                     algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), algo_attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                     algo_attr(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
    if (!t->tuned || t->ncand < 2 || t->cand_ms[0] < 0.0f || o < 0 || (size_t)o >= len) return 0;
    o += snprintf(buf + o, len - (size_t)o, "; tuned: candidate %d of %d, %.3f ms vs the heuristic's first %.3f (%+.1f%%);",
                  t->pick + 1, t->ncand, t->cand_ms[t->pick], t->cand_ms[0],
                  100.0 * (t->cand_ms[t->pick] / t->cand_ms[0] - 1.0));
    for (int c = 0; c < t->ncand && o > 0 && (size_t)o < len; c++)
        o += snprintf(buf + o, len - (size_t)o, " %.3f", t->cand_ms[c]);
    return 0;
}
