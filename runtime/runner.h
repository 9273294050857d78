/* runner.h — the H3 block on the GPU: weights uploaded once, cuBLASLt GEMMs,
 * our kernels for everything else, per-op CUDA-event timing. It takes a
 * plain parameter struct and returns timing rows and the output; the stage
 * checks are the application's (app/stage_checks.c), which the run calls
 * through a hook after the timed runs, with a view of the run's device
 * buffers. Knows nothing of the CLI, the report or the CPU reference. */
#ifndef H3_RUNNER_H
#define H3_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "block.h"
#include "inputs.h"
#include "op_row.h"

/* The CUDA libraries this binary runs with; none of it needs a GPU. */
typedef struct {
    int runtime;     /* cudaRuntimeGetVersion: 13000 = 13.0 */
    int driver_cuda; /* the newest CUDA the driver supports (cudaDriverGetVersion), 0: no driver */
    size_t cublaslt; /* cublasLtGetVersion: 130100 = 13.1.0 */
    char driver[32]; /* the kernel driver's version ("570.86.15", /proc/driver/nvidia/version), "" unknown */
} gpu_libs;
void gpu_lib_versions(gpu_libs *v);
/* One line: "CUDA runtime 13.0, cuBLASLt 13.1.0, NVIDIA driver 570.86.15 (CUDA 12.8)". */
void gpu_libs_describe(const gpu_libs *v, char *buf, size_t len);

/* Why there is no usable GPU, each with its own message (gpu_info.name). */
typedef enum {
    H3_GPU_OK = 0,
    H3_GPU_NO_DRIVER,  /* no NVIDIA driver on this machine */
    H3_GPU_OLD_DRIVER, /* the driver is older than the CUDA runtime this build uses */
    H3_GPU_NONE,       /* a driver, but no GPU it can use */
    H3_GPU_NO_KERNEL,  /* a GPU this build has no machine code for */
    H3_GPU_ERROR,      /* another CUDA error at start-up (named in the message) */
} h3_gpu_status;

typedef struct {
    char name[256];     /* "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 85 GB)"; without a usable GPU: why not */
    char model[256];    /* the device's own name, "" without a GPU */
    int cc_major, cc_minor, sms;
    int sm_clock_mhz, mem_clock_mhz; /* the peak clocks the device reports, 0 unknown */
    size_t mem_bytes;
    int supported;      /* this build has machine code for it */
    h3_gpu_status status;
    gpu_libs libs;
} gpu_info;

/* 1 when a CUDA GPU is present (fills g; g->supported says whether this
 * build runs on it), 0 otherwise; g->status and g->name say why not. */
int gpu_probe(gpu_info *g);

/* Device bytes the block needs at S tokens (resident weights, activations,
 * cuBLASLt workspace) with the GEMMs of fp8_mask (config.h's H3_GEMM_* bits)
 * in FP8; *weights (may be NULL) gets the weights' share. */
size_t gpu_block_bytes(const h3_config *c, int S, int fp8_mask, size_t *weights);
/* 0 when the block fits the device's free memory now (or that cannot be
 * told); else -1 with one line in err: the bytes needed, the bytes free and
 * the largest token count that fits. */
int gpu_check_fits(const h3_config *c, int S, int fp8_mask, char *err, size_t errlen);

typedef enum { H3_ATTN_AUTO = 0, H3_ATTN_MMA, H3_ATTN_SM90 } h3_attn_choice;

/* What a run does. */
typedef struct {
    h3_attn_choice attn; /* auto: the Hopper kernel where it runs, else the portable one */
    int smooth_v;        /* V smoothing */
    int rotate_qk;       /* Q/K rotation before quantisation */
    int fp8_mask;        /* bit H3_GEMM_x: that GEMM in FP8; H3_FP8_BLOCKS: with block scales */
    int fast_accum;      /* the FP8 GEMMs with the tensor cores' own accumulator */
    const char *gemm;    /* the GEMM mode as the user gave it, for messages */
    int repeat, warmup;  /* timed and untimed runs */
    int gpus;            /* ranks of the sequence-parallel run (gpu_run_block_sp) */
    int sp_one_device;   /* the ranks on GPU 0, one after another */
} h3_run_params;

/* What a run measured: one row per op (stage names of config.h, "a+b" for a
 * fused kernel covering two), the block totals, the device and kernels. */
#define H3_RUN_MAX_ROWS 24
typedef struct {
    char device[128], attn_kernel[128], gemm[128];
    h3_op_row rows[H3_RUN_MAX_ROWS];
    int n_rows;
    double total_ms, graph_ms; /* the block, op by op with events between, and as one CUDA graph (0: not run) */
    double peak_mem_gb;        /* device memory in use beyond the weights, 0 if unknown */
    char nonfinite_stage[48];  /* with a non-finite output: the first op whose output held one ("" if none found) */
} h3_run_result;

/* A finished run's device buffers, for the stage checks. */
typedef struct h3_run_view h3_run_view;
typedef enum {
    H3_BUF_MOD, H3_BUF_QKV, H3_BUF_Q8, H3_BUF_K8, H3_BUF_VT8, H3_BUF_SQ, H3_BUF_SK, H3_BUF_SV, H3_BUF_VMU, H3_BUF_O,
    H3_BUF_LSE, H3_BUF_Y1, H3_BUF_X1, H3_BUF_G, H3_BUF_Y2, H3_BUF_OUT,
    /* each GEMM's input as its GEMM read it: BF16, or e4m3 rows and their scales */
    H3_BUF_A, H3_BUF_A8, H3_BUF_SA, H3_BUF_O8, H3_BUF_SO, H3_BUF_B, H3_BUF_B8, H3_BUF_SB, H3_BUF_U, H3_BUF_U8,
    H3_BUF_SU,
    H3_BUF_COUNT
} h3_buf;
typedef struct {
    int S, fp8_mask, smooth_v, rotate_qk, fast_accum;
    int key_tile;  /* the attention kernel's online-softmax step */
    int attn_sm90; /* the attention ran on attn_fp8_sm90 (with smooth_v: on h3k_attn_fp8_sm90_grid's grid) */
} h3_run_info;
h3_run_info h3_run_view_info(const h3_run_view *v);
/* A host copy (malloc) of the first bytes of buffer b; NULL when the run has
 * no such buffer (e.g. a8 with a BF16 qkv GEMM). */
void *h3_run_fetch(const h3_run_view *v, h3_buf b, size_t bytes);
/* GEMM g's e4m3 weight [N][K] and its per-channel scales [N] (FP8 GEMMs
 * only; block scales: [ceil(N / 128)][ceil(K / 128)], the device's padding
 * dropped), malloc'd. */
void h3_run_fetch_w8(const h3_run_view *v, int g, int N, int K, uint8_t **w8, float **ws);

/* Called once after the timed runs, before the output is copied back. */
typedef struct {
    void (*fn)(void *ctx, const h3_run_view *v);
    void *ctx;
} h3_check_hook;

/* Runs and times the block (hook: NULL for no checks). out_host [S][C]
 * receives the output. Returns 0, or -1 with err (a user error, exit 2, when
 * *user_error). */
int gpu_run_block(const h3_run_params *p, const gpu_info *g, const h3_block *b, const h3_inputs *in,
                  const h3_check_hook *hook, h3_run_result *res, uint16_t *out_host, int *user_error, char *err,
                  size_t errlen);

/* The same block sequence parallel over p->gpus ranks (sp.c): same contract,
 * no stage checks (the output is compared with the one-GPU run instead). */
int gpu_run_block_sp(const h3_run_params *p, const gpu_info *g, const h3_block *b, const h3_inputs *in,
                     h3_run_result *res, uint16_t *out_host, int *user_error, char *err, size_t errlen);

#endif
