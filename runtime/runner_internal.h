/* runner_internal.h — what runner.c (one GPU) and sp.c (sequence parallel
 * over P GPUs) share: the op list, the device buffers of one block run and
 * their allocation table, the op dispatcher. Not an API. */
#ifndef H3_RUNNER_INTERNAL_H
#define H3_RUNNER_INTERNAL_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "config.h"
#include "cuda_check.h"
#include "gemm_lt.h"
#include "runner.h"

/* The ops of one block, in order. */
enum {
    OP_ADALN, OP_ROPE, OP_NORM1, OP_QKV, OP_QUANT, OP_ATTN, OP_OUTQ, OP_OUT, OP_RES1_NORM2, OP_FC1, OP_SWIGLU, OP_FC2,
    OP_RES2, OP_N
};
static const char *const op_names[OP_N] = {"adaln",    "rope_table", "norm1_mod",           "qkv_gemm",
                                           "qk_norm_rope_quant", "attention", "out_quant", "out_gemm",
                                           "gate_res1+norm2_mod", "fc1_gemm", "swiglu",    "fc2_gemm",
                                           "gate_res2"};

/* The four GEMMs (config.h's order: G_x is bit x of the FP8 mask) and their
 * weight tensors. */
enum { G_QKV = H3_GEMM_QKV, G_OUT = H3_GEMM_OUT, G_FC1 = H3_GEMM_FC1, G_FC2 = H3_GEMM_FC2, G_N = H3_GEMMS };
static const int gemm_tensor[G_N] = {H3_T_QKV, H3_T_OUT, H3_T_FC1, H3_T_FC2};

typedef struct {
    /* weights, [H3_T_*] */
    uint16_t *w[H3_T_COUNT];
    /* inputs */
    uint16_t *x;    // [S][C]
    float *temb;    // [T]
    int32_t *tags;  // [S]
    float *pos;     // [S][3]
    float *rope;    // [S][H3_ROPE_TAB] cos, sin of the RoPE angles (once per sequence)
    /* activations */
    uint16_t *mod;  // [M][6][C]
    uint16_t *a;    // [S][C]
    uint16_t *qkv;  // [S][3I]
    uint8_t *q8, *k8; // [H][S_pad][128]
    uint8_t *vt8;   // [H][128][S_pad]
    float *sq, *sk, *sv; // [H][G]
    float *vmu;     // [H*128] V smoothing's mean (used when block_run.smooth_v)
    uint16_t *O;    // [S][I]
    float *lse;     // [H][S]
    uint16_t *y1;   // [S][C]
    uint16_t *x1;   // [S][C]
    uint16_t *b;    // [S][C]
    uint16_t *g;    // [S][2F]
    uint16_t *u;    // [S][F]
    uint16_t *y2;   // [S][C]
    uint16_t *out;  // [S][C]
    /* the FP8 GEMMs (--gemm fp8 or fp8:LIST): only those of the mask are
     * allocated, each GEMM's input in one form only (a or a8/sa, ...) */
    uint8_t *w8[G_N]; // [N][K] e4m3, per output channel
    float *ws[G_N];   // [N] (H3_FP8_BLOCKS: [ceil(N / 128)][h3_fp8_w_scale_ld(K)], padded)
    uint8_t *a8, *O8, *b8, *u8; // [S][C], [S][I], [S][C], [S][F] e4m3, per token
    float *sa, *sO, *sb, *su;   // [S] (H3_FP8_BLOCKS: [ceil(K / 128)][S], K the row width)
} dev_bufs;

/* Every device buffer of a run, with its size: one table serves the
 * allocation, the freeing and the up-front memory estimate. */
typedef struct {
    void **p;
    size_t bytes;
    int weight; /* part of the resident weights (else an activation) */
} dev_alloc_t;
#define MAX_ALLOCS 64

typedef struct {
    const h3_config *cfg;
    int S, use_sm90;
    int smooth_v; /* V smoothing: vmu computed and used by quant and attention */
    int rotate_qk; /* Q/K rotation before quantisation (--rotate-qk) */
    int vmu_given; /* --gpus P: vmu is the mean over every rank's tokens, set before OP_QUANT (sp.c) */
    int fp8_mask; /* bit G_x: that GEMM runs in FP8 and its producer writes e4m3 rows (0: all BF16) */
    int fast_accum; /* the FP8 GEMMs with cuBLASLt's fast accumulation */
    float omega[16]; /* the RoPE frequencies, for OP_ROPE */
    h3_lt *lt;
    dev_bufs d;
    cudaStream_t st;
} block_run;

#define LAUNCH(call)                                                                                   \
    do {                                                                                               \
        int rc_ = (call);                                                                              \
        if (rc_) {                                                                                     \
            fprintf(stderr, "%s:%d: launch failed: %s: %s\n", __FILE__, __LINE__, #call,               \
                    cudaGetErrorString((cudaError_t)rc_));                                             \
            exit(1);                                                                                   \
        }                                                                                              \
        CUDA_CHECK(cudaGetLastError());                                                                \
    } while (0)


/* GEMM g of br in FP8? */
static inline int h3r_fp8(const block_run *br, int g) { return br->fp8_mask >> g & 1; }
/* The FP8 GEMMs with block scales (H3_FP8_BLOCKS)? */
static inline int h3r_blocks(const block_run *br) { return (br->fp8_mask & H3_FP8_BLOCKS) != 0; }

/* The buffers of a block run at S tokens with the GEMMs of fp8_mask in FP8
 * into t (MAX_ALLOCS entries); returns the count. */
int h3r_plan_allocs(const h3_config *c, int S, int fp8_mask, dev_bufs *d, dev_alloc_t *t);
/* Appends a timing row to r (CHECK: at most H3_RUN_MAX_ROWS). */
h3_op_row *h3r_add_row(h3_run_result *r, const char *name, double ms, double flops, double bytes);
/* The result's gemm string for fp8_mask and --gemm-accum (the GPU's numerics). */
void h3r_gemm_desc(int fp8_mask, int fast_accum, char *buf, size_t len);
/* cudaMalloc with the "out of device memory: N bytes" message; adds to *total. */
int h3r_dev_alloc(void **p, size_t bytes, size_t *total, char *err, size_t errlen);
/* Enqueues one op of br on br->st: 0, or -1 with err naming the op and the
 * CUDA or cuBLASLt error. */
int h3r_enqueue_op(block_run *br, int op, char *err, size_t errlen);
/* The ops first..last-1 (OP_*, block order) that br runs, into ops; returns
 * their count: out_quant only when out_gemm is FP8. */
int h3r_block_ops(const block_run *br, int first, int last, int ops[OP_N]);
/* h3r_enqueue_op for dit_block: a failure is printed and exits 1. */
void h3r_run_op(block_run *br, int op);
/* Uploads the block's weights into br's already allocated weight buffers
 * (FP8: quantised on the device through a BF16 staging buffer). */
int h3r_upload_weights(block_run *br, const h3_block *blk, char *err, size_t errlen);
/* The first op (OP_*, block order) whose device output holds a NaN or Inf
 * (its BF16 output, or the e4m3 rows and scales it wrote for an FP8 GEMM), or
 * -1. Copies the buffers back in slices: for the failure path only, when the
 * block's output was not finite. */
int h3r_first_nonfinite(const block_run *br);

#endif
