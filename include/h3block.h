/* h3block.h — the h3block library: FP8 flash attention for head dim 128 and
 * the MiniMax-H3 DiT block, on CUDA device pointers.
 *
 *   h3b_attn *a;
 *   if (h3b_attn_create(&a, 0, 0) != H3B_OK) { fprintf(stderr, "%s\n", h3b_attn_error(a)); ... }
 *   h3b_attention(a, B, S, H, q, k, v, out, NULL, stream);   // BF16 in, BF16 out
 *   h3b_attn_destroy(a);
 *
 * Conventions
 * - Every function returns an h3b_status; on failure the handle's message
 *   (h3b_attn_error, h3b_block_error) says what, naming the argument. As in
 *   sqlite3_open, a create that fails still returns a handle (unless out of
 *   host memory: then NULL) whose message tells why; destroy it. No global
 *   state beyond what a handle owns; a handle is used by one thread at a time.
 * - Arguments are checked before any CUDA call, so every argument error is
 *   reported the same way on a machine without a GPU.
 * - Work is enqueued on the caller's stream (NULL: the legacy default stream)
 *   and not synchronised, except where a function says so (a handle growing
 *   its own workspace allocates and frees device memory, which synchronises).
 * - The numerics are docs/DESIGN.md's FP8 contract: Q, K and V quantised to
 *   e4m3 with one scale per (head, 128-token group), V smoothed by its
 *   per-(head, dim) mean (on by default), FP32 softmax, softmax scale 1/sqrt(128),
 *   full (non-causal) attention without a mask. */
#ifndef H3BLOCK_H
#define H3BLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; h3b_version() gives the library's. */
#define H3BLOCK_VERSION_MAJOR 0
#define H3BLOCK_VERSION_MINOR 1
#define H3BLOCK_VERSION_PATCH 0

typedef enum {
    H3B_OK = 0,
    H3B_ERR_ARGUMENT = 1,    /* a bad argument: NULL, a shape, a stride or an alignment (the message names it) */
    H3B_ERR_UNSUPPORTED = 2, /* a device or shape this build cannot run (never a wrong answer instead) */
    H3B_ERR_CUDA = 3,        /* a CUDA or cuBLASLt call failed (the message names it) */
    H3B_ERR_MEMORY = 4,      /* out of host or device memory */
    H3B_ERR_FILE = 5,        /* a weights file could not be read or is not a valid H3 block */
} h3b_status;

/* "0.1.0 (commit abc123, CUDA 13.0, sm_89 sm_90a sm_120)": the library's version and build. */
const char *h3b_version(void);
/* The status's name: "H3B_ERR_ARGUMENT". */
const char *h3b_status_name(h3b_status s);

/* ---- attention ----------------------------------------------------------- */

typedef struct h3b_attn h3b_attn;

/* Options of h3b_attn_create (bits). */
enum {
    H3B_ATTN_NO_SMOOTH_V = 1, /* V quantised as it is, not less its mean (a larger error: docs/accuracy.md) */
    H3B_ATTN_PORTABLE = 2,    /* the portable mma.sync kernel even on sm_90 (for comparisons) */
};

/* A handle for attention on CUDA device `device` (the caller makes it the
 * current device when calling h3b_attention). Fails with H3B_ERR_UNSUPPORTED
 * on a device this build has no kernel for (sm_90 runs the wgmma kernel,
 * sm_89 and sm_120 the mma.sync one), with H3B_ERR_CUDA without a usable GPU. */
h3b_status h3b_attn_create(h3b_attn **out, int device, unsigned options);
void h3b_attn_destroy(h3b_attn *a);
/* The last failure's message, "" after success; valid until the next call on a. */
const char *h3b_attn_error(const h3b_attn *a);
/* "attn_fp8_sm90 (wgmma+TMA), V smoothed": the kernel h3b_attention runs. */
const char *h3b_attn_kernel(const h3b_attn *a);

/* A BF16 tensor [B][S][H][128] on the device: element (b, s, h, d) at
 * data + b * stride_b + s * stride_s + h * stride_h + d (strides in elements;
 * the head dim is contiguous). Views of a fused QKV buffer are fine. The
 * kernels load 16 bytes at a time: data must be 16-byte aligned and
 * stride_s, stride_h multiples of 8 (stride_b: any). */
typedef struct {
    const void *data;
    int64_t stride_b, stride_s, stride_h;
} h3b_tensor;

/* Workspace bytes h3b_attention_ws needs for S tokens and H heads (per batch
 * item: the batch items run one after another in it). */
size_t h3b_attention_workspace_size(int S, int H);

/* out [B][S][H][128] BF16, contiguous = softmax(q k^T / sqrt(128)) v per
 * batch item and head; lse (may be NULL) [B][H][S] FP32, the natural-log
 * log-sum-exp of each row's scaled logits. 1 <= S <= 8,388,480 (65535 groups of
 * 128), 1 <= H <= 65535, B >= 1. The workspace is the handle's own, grown as
 * needed (the growth synchronises the device). */
h3b_status h3b_attention(h3b_attn *a, int B, int S, int H, h3b_tensor q, h3b_tensor k, h3b_tensor v, void *out,
                         float *lse, void *stream);
/* The same with the caller's workspace (>= h3b_attention_workspace_size(S, H)
 * bytes, 256-byte aligned, on the handle's device); never synchronises. */
h3b_status h3b_attention_ws(h3b_attn *a, int B, int S, int H, h3b_tensor q, h3b_tensor k, h3b_tensor v, void *out,
                            float *lse, void *workspace, size_t workspace_bytes, void *stream);

/* ---- the H3 block ---------------------------------------------------------- */

typedef struct h3b_block h3b_block;

typedef enum {
    H3B_GEMM_BF16 = 0, /* BF16 GEMMs, FP32 accumulation */
    H3B_GEMM_FP8 = 1,  /* e4m3 GEMM operands, per-token and per-channel scales, FP32 accumulation */
} h3b_gemm;

/* The block's dimensions (the published H3 block: 5376, 56, 128, 14336, 512). */
typedef struct {
    int hidden, heads, head_dim, ffn, temb, modalities;
} h3b_block_info;

/* One block from a safetensors file, an index (.safetensors.index.json) or a
 * directory, in any layout dit_block reads (README "Use the official
 * weights"); block_index -1: the file's only block. The weights are uploaded
 * to `device` (the current device during the call), quantised there for
 * H3B_GEMM_FP8. */
h3b_status h3b_block_open(h3b_block **out, const char *path, int block_index, h3b_gemm gemm, int device);

/* A named host tensor for h3b_block_create: our canonical names and layout
 * (docs/DESIGN.md §1: "norm1.weight", "attn.qkv_proj.weight" with its rows
 * grouped per head, "mlp.fc1.weight" as [gate; up], "adaln_proj.linear.bias",
 * ...), BF16, row-major. */
typedef struct {
    const char *name;
    const uint16_t *data;
    int64_t shape[2]; /* a vector: shape[1] = 0 */
} h3b_host_tensor;
/* The same block from the caller's host tensors (all ten, the published H3
 * block's shapes); they are copied and need not outlive the call. */
h3b_status h3b_block_create(h3b_block **out, const h3b_host_tensor *tensors, int n, h3b_gemm gemm, int device);

void h3b_block_destroy(h3b_block *b);
const char *h3b_block_error(const h3b_block *b);
h3b_status h3b_block_get_info(const h3b_block *b, h3b_block_info *info);

/* out [S][hidden] BF16 = the block applied to x [S][hidden] BF16, with temb
 * [temb] FP32 (the timestep embedding), tags [S] int32 (modality 0..2 of each
 * token) and positions [S][3] FP32 (t, h, w of each token, for RoPE). All
 * device pointers, 16-byte aligned; out must not overlap x. Activations for S
 * tokens are the handle's own, grown as needed (the growth synchronises). */
h3b_status h3b_block_forward(h3b_block *b, int S, const void *x, const float *temb, const int32_t *tags,
                             const float *positions, void *out, void *stream);

#ifdef __cplusplus
}
#endif
#endif
