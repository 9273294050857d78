/* h3block.c — the library's C API (include/h3block.h) over the runtime and
 * the kernels: handles, argument checks, error messages.
 *
 * Every argument is checked before the first CUDA call, so that a machine
 * without a GPU (or a build without CUDA) reports the same argument errors
 * as one with. Attention runs, per batch item, V's mean (h3k_v_mean), the
 * quantisation of the caller's q, k, v (h3k_qkv_quant: the block's
 * quantisation without the q/k norm and RoPE) and the attention kernel of
 * the device, in a workspace of one batch item. The block is runtime's
 * block_run, the same op sequence dit_block times (runtime/runner.c),
 * with the caller's input and output buffers in place of its own. */
#include "h3block.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "config.h"
#include "safetensors.h"
#include "version.h"

#ifdef H3_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels.h"
#include "runner_internal.h"
#endif

#define H3B_API __attribute__((visibility("default")))

/* The handle's message; returns st. */
static h3b_status fail(char *buf, size_t len, h3b_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static h3b_status fail(char *buf, size_t len, h3b_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return st;
}

H3B_API const char *h3b_version(void)
{
    static char v[192];
    if (!v[0]) {
        if (h3_cuda_compiler[0])
            snprintf(v, sizeof v, "%s (commit %s, CUDA %s, %s)", h3_version, h3_commit, h3_cuda_compiler,
                     h3_cuda_targets);
        else
            snprintf(v, sizeof v, "%s (commit %s, built without CUDA)", h3_version, h3_commit);
    }
    return v;
}

H3B_API const char *h3b_status_name(h3b_status s)
{
    switch (s) {
    case H3B_OK: return "H3B_OK";
    case H3B_ERR_ARGUMENT: return "H3B_ERR_ARGUMENT";
    case H3B_ERR_UNSUPPORTED: return "H3B_ERR_UNSUPPORTED";
    case H3B_ERR_CUDA: return "H3B_ERR_CUDA";
    case H3B_ERR_MEMORY: return "H3B_ERR_MEMORY";
    case H3B_ERR_FILE: return "H3B_ERR_FILE";
    }
    return "H3B_ERR_UNKNOWN";
}

/* ---- device selection, shared by both handles ---- */

#ifdef H3_HAVE_CUDA
/* Makes device current for the duration of a create; *prev gets the
 * caller's device to restore. */
static h3b_status enter_device(int device, int *prev, char *err, size_t len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return fail(err, len, H3B_ERR_CUDA, "no usable CUDA GPU (%s)",
                    e != cudaSuccess ? cudaGetErrorString(e) : "the driver finds none");
    }
    if (device < 0 || device >= n)
        return fail(err, len, H3B_ERR_ARGUMENT, "device = %d: this machine has CUDA devices 0..%d", device, n - 1);
    if ((e = cudaGetDevice(prev)) != cudaSuccess || (e = cudaSetDevice(device)) != cudaSuccess)
        return fail(err, len, H3B_ERR_CUDA, "selecting CUDA device %d: %s", device, cudaGetErrorString(e));
    return H3B_OK;
}

/* The caller's current device must be the handle's: a kernel launched on
 * another device's buffers would fail or, worse, read another context. */
static h3b_status on_device(int device, char *err, size_t len)
{
    int cur = -1;
    cudaError_t e = cudaGetDevice(&cur);
    if (e != cudaSuccess) return fail(err, len, H3B_ERR_CUDA, "cudaGetDevice: %s", cudaGetErrorString(e));
    if (cur != device)
        return fail(err, len, H3B_ERR_ARGUMENT,
                    "the current CUDA device is %d, this handle's is %d (call cudaSetDevice(%d) first)", cur, device,
                    device);
    return H3B_OK;
}
#endif

/* ======================================================================== */
/* attention                                                                 */
/* ======================================================================== */

struct h3b_attn {
    int device;
    unsigned options;
    int use_sm90;
    char kernel[96];
    char err[512];
    void *ws; /* the handle's own workspace (h3b_attention), ws_bytes long */
    size_t ws_bytes;
};

#define WS_ALIGN 256
static size_t ws_round(size_t b) { return (b + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN; }

/* One batch item's workspace: q8, k8, vt8 [H][S_pad][128] e4m3, sq, sk, sv
 * [H][G], vmu [H*128], an LSE [H][S] for when the caller asks for none. */
typedef struct {
    uint8_t *q8, *k8, *vt8;
    float *sq, *sk, *sv, *vmu, *lse;
} attn_ws;

static size_t attn_ws_layout(int S, int H, char *base, attn_ws *w)
{
    const size_t Sp = (size_t)h3_pad_tokens(S), G = (size_t)h3_groups(S), Hs = (size_t)H;
    const size_t sizes[8] = {Hs * Sp * 128, Hs * Sp * 128, Hs * Sp * 128, Hs * G * 4,
                             Hs * G * 4,    Hs * G * 4,    Hs * 128 * 4,  Hs * (size_t)S * 4};
    void **slots[8] = {(void **)&w->q8, (void **)&w->k8, (void **)&w->vt8, (void **)&w->sq,
                       (void **)&w->sk, (void **)&w->sv, (void **)&w->vmu, (void **)&w->lse};
    size_t off = 0;
    for (int i = 0; i < 8; i++) {
        if (base) *slots[i] = base + off;
        off += ws_round(sizes[i]);
    }
    return off;
}

#define ATTN_MAX_S (65535 * H3_QGROUP) /* the quantiser's grid: one y-block per 128-token group */
#define ATTN_MAX_H 65535

H3B_API size_t h3b_attention_workspace_size(int S, int H)
{
    if (S < 1 || S > ATTN_MAX_S || H < 1 || H > ATTN_MAX_H) return 0;
    return attn_ws_layout(S, H, NULL, &(attn_ws){0});
}

H3B_API h3b_status h3b_attn_create(h3b_attn **out, int device, unsigned options)
{
    if (!out) return H3B_ERR_ARGUMENT;
    h3b_attn *a = calloc(1, sizeof *a);
    *out = a;
    if (!a) return H3B_ERR_MEMORY;
    a->device = device;
    a->options = options;
    if (options & ~(unsigned)(H3B_ATTN_NO_SMOOTH_V | H3B_ATTN_PORTABLE))
        return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT, "options = 0x%x: unknown bits 0x%x", options,
                    options & ~(unsigned)(H3B_ATTN_NO_SMOOTH_V | H3B_ATTN_PORTABLE));
#ifdef H3_HAVE_CUDA
    int prev = 0;
    h3b_status st = enter_device(device, &prev, a->err, sizeof a->err);
    if (st) return st;
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess) st = fail(a->err, sizeof a->err, H3B_ERR_CUDA, "device %d: %s", device, cudaGetErrorString(e));
    else if (!h3k_device_supported())
        st = fail(a->err, sizeof a->err, H3B_ERR_UNSUPPORTED,
                  "device %d (%s, sm_%d%d): this h3block has no kernel for it (built for %s; the kernels need sm_89, "
                  "sm_90 or sm_120)", device, p.name, p.major, p.minor, h3_cuda_targets);
    else {
        a->use_sm90 = !(options & H3B_ATTN_PORTABLE) && h3k_attn_fp8_sm90_available();
        snprintf(a->kernel, sizeof a->kernel, "%s%s",
                 a->use_sm90 ? "attn_fp8_sm90 (wgmma+TMA)" : "attn_fp8_mma (mma.sync m16n8k32)",
                 options & H3B_ATTN_NO_SMOOTH_V ? "" : ", V smoothed");
    }
    (void)cudaSetDevice(prev);
    return st;
#else
    return fail(a->err, sizeof a->err, H3B_ERR_UNSUPPORTED, "this h3block was built without CUDA (no nvcc at build time)");
#endif
}

H3B_API void h3b_attn_destroy(h3b_attn *a)
{
    if (!a) return;
#ifdef H3_HAVE_CUDA
    if (a->ws) {
        int prev = 0;
        if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(a->device) == cudaSuccess) {
            (void)cudaFree(a->ws);
            (void)cudaSetDevice(prev);
        }
    }
#endif
    free(a);
}

H3B_API const char *h3b_attn_error(const h3b_attn *a) { return a ? a->err : "h3b_attn: NULL handle"; }
H3B_API const char *h3b_attn_kernel(const h3b_attn *a) { return a ? a->kernel : ""; }

/* One tensor argument: non-NULL, 16-byte aligned, strides the 16-byte loads allow. */
static h3b_status check_tensor(h3b_attn *a, const char *name, h3b_tensor t, int B, int S, int H)
{
    if (!t.data) return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT, "%s: data is NULL", name);
    if ((uintptr_t)t.data & 15u)
        return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT, "%s: data %p is not 16-byte aligned", name, t.data);
    if ((S > 1 && t.stride_s <= 0) || (H > 1 && t.stride_h <= 0) || (B > 1 && t.stride_b < 0))
        return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT,
                    "%s: strides (b %lld, s %lld, h %lld) must be positive", name, (long long)t.stride_b,
                    (long long)t.stride_s, (long long)t.stride_h);
    if (t.stride_s % 8 || t.stride_h % 8)
        return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT,
                    "%s: stride_s %lld and stride_h %lld must be multiples of 8 elements (16-byte loads)", name,
                    (long long)t.stride_s, (long long)t.stride_h);
    if (t.stride_h > 0x7fffffffLL)
        return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT, "%s: stride_h %lld does not fit 31 bits", name,
                    (long long)t.stride_h);
    return H3B_OK;
}

static h3b_status check_attention(h3b_attn *a, int B, int S, int H, h3b_tensor q, h3b_tensor k, h3b_tensor v,
                                  const void *out, const float *lse)
{
    a->err[0] = 0;
    if (B < 1) return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT, "B = %d: needs at least one batch item", B);
    if (S < 1 || S > ATTN_MAX_S)
        return fail(a->err, sizeof a->err, S < 1 ? H3B_ERR_ARGUMENT : H3B_ERR_UNSUPPORTED,
                    "S = %d: the kernels take 1 to %d tokens", S, ATTN_MAX_S);
    if (H < 1 || H > ATTN_MAX_H)
        return fail(a->err, sizeof a->err, H < 1 ? H3B_ERR_ARGUMENT : H3B_ERR_UNSUPPORTED,
                    "H = %d: the kernels take 1 to %d heads", H, ATTN_MAX_H);
    h3b_status st;
    if ((st = check_tensor(a, "q", q, B, S, H)) || (st = check_tensor(a, "k", k, B, S, H)) ||
        (st = check_tensor(a, "v", v, B, S, H)))
        return st;
    if (!out) return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT, "out is NULL");
    if ((uintptr_t)out & 15u)
        return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT, "out %p is not 16-byte aligned", out);
    if ((uintptr_t)lse & 3u)
        return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT, "lse %p is not 4-byte aligned", (const void *)lse);
    return H3B_OK;
}

#ifdef H3_HAVE_CUDA
static h3b_status run_attention(h3b_attn *a, int B, int S, int H, h3b_tensor q, h3b_tensor k, h3b_tensor v,
                                void *out, float *lse, void *ws, cudaStream_t st)
{
    attn_ws w;
    attn_ws_layout(S, H, ws, &w);
    const int smooth = !(a->options & H3B_ATTN_NO_SMOOTH_V);
    const size_t per_out = (size_t)S * H * 128, per_lse = (size_t)H * S;
    for (int b = 0; b < B; b++) {
        const uint16_t *qb = (const uint16_t *)q.data + (size_t)b * q.stride_b,
                       *kb = (const uint16_t *)k.data + (size_t)b * k.stride_b,
                       *vb = (const uint16_t *)v.data + (size_t)b * v.stride_b;
        uint16_t *ob = (uint16_t *)out + (size_t)b * per_out;
        float *lb = lse ? lse + (size_t)b * per_lse : w.lse;
        int rc = 0;
        const char *what = "v mean";
        if (smooth) rc = h3k_v_mean(vb, (long)v.stride_s, (int)v.stride_h, S, H, w.vmu, st);
        if (!rc) {
            what = "quantisation";
            rc = h3k_qkv_quant(qb, (long)q.stride_s, (long)q.stride_h, kb, (long)k.stride_s, (long)k.stride_h, vb,
                               (long)v.stride_s, (long)v.stride_h, S, H, smooth ? w.vmu : NULL, w.q8, w.k8, w.vt8,
                               w.sq, w.sk, w.sv, st);
        }
        if (!rc) {
            what = a->use_sm90 ? "attn_fp8_sm90" : "attn_fp8_mma";
            rc = a->use_sm90 ? h3k_attn_fp8_sm90(w.q8, w.k8, w.vt8, w.sq, w.sk, w.sv, smooth ? w.vmu : NULL, S, H,
                                                 ob, lb, st)
                             : h3k_attn_fp8_mma(w.q8, w.k8, w.vt8, w.sq, w.sk, w.sv, smooth ? w.vmu : NULL, S, H,
                                                ob, lb, st);
        }
        if (rc)
            return fail(a->err, sizeof a->err, H3B_ERR_CUDA, "attention (batch item %d, S = %d, H = %d): %s: %s", b,
                        S, H, what, cudaGetErrorString((cudaError_t)rc));
    }
    return H3B_OK;
}
#endif

/* The handle can run now: it was created, and its device is the current one
 * (in a build without CUDA it never can: the message says so). */
static h3b_status attn_ready(h3b_attn *a)
{
#ifdef H3_HAVE_CUDA
    if (!a->kernel[0])
        return fail(a->err, sizeof a->err, H3B_ERR_UNSUPPORTED, "the handle was not created (see its create's status)");
    return on_device(a->device, a->err, sizeof a->err);
#else
    return fail(a->err, sizeof a->err, H3B_ERR_UNSUPPORTED, "this h3block was built without CUDA");
#endif
}

H3B_API h3b_status h3b_attention_ws(h3b_attn *a, int B, int S, int H, h3b_tensor q, h3b_tensor k, h3b_tensor v,
                                    void *out, float *lse, void *workspace, size_t workspace_bytes, void *stream)
{
    if (!a) return H3B_ERR_ARGUMENT;
    h3b_status st = check_attention(a, B, S, H, q, k, v, out, lse);
    if (st) return st;
    const size_t need = h3b_attention_workspace_size(S, H);
    if (!workspace) return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT, "workspace is NULL");
    if ((uintptr_t)workspace % WS_ALIGN)
        return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT, "workspace %p is not %d-byte aligned", workspace,
                    WS_ALIGN);
    if (workspace_bytes < need)
        return fail(a->err, sizeof a->err, H3B_ERR_ARGUMENT,
                    "workspace_bytes = %zu: S = %d, H = %d need %zu (h3b_attention_workspace_size)", workspace_bytes,
                    S, H, need);
    if ((st = attn_ready(a))) return st;
#ifdef H3_HAVE_CUDA
    return run_attention(a, B, S, H, q, k, v, out, lse, workspace, (cudaStream_t)stream);
#else
    (void)stream;
    return H3B_ERR_UNSUPPORTED; /* not reached: attn_ready failed */
#endif
}

H3B_API h3b_status h3b_attention(h3b_attn *a, int B, int S, int H, h3b_tensor q, h3b_tensor k, h3b_tensor v, void *out,
                                 float *lse, void *stream)
{
    if (!a) return H3B_ERR_ARGUMENT;
    h3b_status st = check_attention(a, B, S, H, q, k, v, out, lse);
    if (st || (st = attn_ready(a))) return st;
#ifdef H3_HAVE_CUDA
    const size_t need = h3b_attention_workspace_size(S, H);
    if (a->ws_bytes < need) {
        /* grow: the old workspace may still be read by work in flight */
        cudaError_t e = cudaDeviceSynchronize();
        if (e == cudaSuccess && a->ws) e = cudaFree(a->ws);
        a->ws = NULL;
        a->ws_bytes = 0;
        if (e == cudaSuccess) e = cudaMalloc(&a->ws, need);
        if (e != cudaSuccess) {
            a->ws = NULL;
            (void)cudaGetLastError();
            return fail(a->err, sizeof a->err, e == cudaErrorMemoryAllocation ? H3B_ERR_MEMORY : H3B_ERR_CUDA,
                        "attention workspace of %zu bytes (S = %d, H = %d): %s", need, S, H, cudaGetErrorString(e));
        }
        a->ws_bytes = need;
    }
#endif
    return h3b_attention_ws(a, B, S, H, q, k, v, out, lse, a->ws, a->ws_bytes, stream);
}

/* ======================================================================== */
/* the block                                                                 */
/* ======================================================================== */

struct h3b_block {
    int device;
    h3_config cfg;
    h3b_gemm gemm;
    char err[1024];
    int ready; /* weights on the device */
#ifdef H3_HAVE_CUDA
    block_run br;
    dev_alloc_t allocs[MAX_ALLOCS];
    int nalloc;
    int S_alloc; /* the activations' size, 0: none yet */
#endif
};

static h3b_block *block_new(h3b_block **out, int device, h3b_gemm gemm)
{
    h3b_block *b = calloc(1, sizeof *b);
    *out = b;
    if (b) {
        b->device = device;
        b->gemm = gemm;
    }
    return b;
}

H3B_API const char *h3b_block_error(const h3b_block *b) { return b ? b->err : "h3b_block: NULL handle"; }

H3B_API h3b_status h3b_block_get_info(const h3b_block *b, h3b_block_info *info)
{
    if (!b || !info) return H3B_ERR_ARGUMENT;
    if (!b->ready) return H3B_ERR_ARGUMENT;
    *info = (h3b_block_info){b->cfg.hidden, b->cfg.heads, b->cfg.head_dim, b->cfg.ffn, b->cfg.temb,
                             b->cfg.modalities};
    return H3B_OK;
}

#ifdef H3_HAVE_CUDA
/* The io buffers are the caller's: never allocated by the handle. */
static int is_io(const block_run *br, void **p)
{
    const dev_bufs *d = &br->d;
    return p == (void **)&d->x || p == (void **)&d->temb || p == (void **)&d->tags || p == (void **)&d->pos ||
           p == (void **)&d->out;
}

static void free_allocs(h3b_block *b, int weights)
{
    for (int i = b->nalloc - 1; i >= 0; i--)
        if (b->allocs[i].weight == weights && !is_io(&b->br, b->allocs[i].p) && *b->allocs[i].p) {
            (void)cudaFree(*b->allocs[i].p);
            *b->allocs[i].p = NULL;
        }
}

/* Uploads blk's weights: the handle's block_run with the device's kernel. */
static h3b_status block_upload(h3b_block *b, const h3_block *blk)
{
    char *err = b->err;
    const size_t len = sizeof b->err;
    const h3_config *c = &b->cfg;
    if (b->gemm == H3B_GEMM_FP8 && (c->hidden % 8 || c->hidden > 32768 || c->ffn % 8 || c->ffn > 65536))
        return fail(err, len, H3B_ERR_UNSUPPORTED, "H3B_GEMM_FP8 needs hidden and ffn multiples of 8, hidden <= "
                    "32768, ffn <= 65536 (this block: hidden %d, ffn %d)", c->hidden, c->ffn);
    int prev = 0;
    h3b_status st = enter_device(b->device, &prev, err, len);
    if (st) return st;
    block_run *br = &b->br;
    *br = (block_run){.cfg = c, .S = 1, .fp8_mask = b->gemm == H3B_GEMM_FP8 ? H3_FP8_ALL : 0, .smooth_v = 1};
    if (!h3k_device_supported()) {
        st = fail(err, len, H3B_ERR_UNSUPPORTED, "device %d: this h3block has no kernel for it (built for %s)",
                  b->device, h3_cuda_targets);
        goto out;
    }
    br->use_sm90 = h3k_attn_fp8_sm90_available();
    h3_rope_omega(c, br->omega);
    b->nalloc = h3r_plan_allocs(c, 1, br->fp8_mask, &br->d, b->allocs);
    size_t total = 0;
    for (int i = 0; i < b->nalloc; i++)
        if (b->allocs[i].weight && h3r_dev_alloc(b->allocs[i].p, b->allocs[i].bytes, &total, err, len)) {
            st = H3B_ERR_MEMORY;
            goto out;
        }
    cudaError_t e = cudaStreamCreateWithFlags(&br->st, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        st = fail(err, len, H3B_ERR_CUDA, "cudaStreamCreate: %s", cudaGetErrorString(e));
        goto out;
    }
    if (h3r_upload_weights(br, blk, err, len)) st = H3B_ERR_CUDA;
    (void)cudaStreamDestroy(br->st);
    br->st = NULL;
    if (st) goto out;
    if (!(br->lt = h3_lt_create_err(err, len))) {
        st = H3B_ERR_CUDA;
        goto out;
    }
    b->ready = 1;
out:
    (void)cudaSetDevice(prev);
    return st;
}
#endif

H3B_API h3b_status h3b_block_open(h3b_block **out, const char *path, int block_index, h3b_gemm gemm, int device)
{
    if (!out) return H3B_ERR_ARGUMENT;
    h3b_block *b = block_new(out, device, gemm);
    if (!b) return H3B_ERR_MEMORY;
    if (!path) return fail(b->err, sizeof b->err, H3B_ERR_ARGUMENT, "path is NULL");
    if (gemm != H3B_GEMM_BF16 && gemm != H3B_GEMM_FP8)
        return fail(b->err, sizeof b->err, H3B_ERR_ARGUMENT, "gemm = %d: H3B_GEMM_BF16 (0) or H3B_GEMM_FP8 (1)", gemm);
    if (block_index < -1)
        return fail(b->err, sizeof b->err, H3B_ERR_ARGUMENT, "block_index = %d: a block number, or -1", block_index);
    h3_block blk;
    const h3_load_options o = {.block = block_index, .qkv = H3_QKV_UNSTATED};
    char lerr[1024];
    const int rc = h3_block_load_with(path, &o, &blk, NULL, lerr, sizeof lerr);
    if (rc) return fail(b->err, sizeof b->err, rc == ST_ERR_RESOURCE ? H3B_ERR_MEMORY : H3B_ERR_FILE, "%s", lerr);
    b->cfg = blk.cfg;
#ifdef H3_HAVE_CUDA
    const h3b_status st = block_upload(b, &blk);
#else
    const h3b_status st = fail(b->err, sizeof b->err, H3B_ERR_UNSUPPORTED, "this h3block was built without CUDA");
#endif
    h3_block_free(&blk);
    return st;
}

H3B_API h3b_status h3b_block_create(h3b_block **out, const h3b_host_tensor *tensors, int n, h3b_gemm gemm, int device)
{
    if (!out) return H3B_ERR_ARGUMENT;
    h3b_block *b = block_new(out, device, gemm);
    if (!b) return H3B_ERR_MEMORY;
    if (gemm != H3B_GEMM_BF16 && gemm != H3B_GEMM_FP8)
        return fail(b->err, sizeof b->err, H3B_ERR_ARGUMENT, "gemm = %d: H3B_GEMM_BF16 (0) or H3B_GEMM_FP8 (1)", gemm);
    if (!tensors || n < 1) return fail(b->err, sizeof b->err, H3B_ERR_ARGUMENT, "no tensors (n = %d)", n);
    b->cfg = h3_config_full();
    h3_tensor_spec specs[H3_T_COUNT];
    h3_tensor_specs(&b->cfg, specs);
    h3_block blk;
    memset(&blk, 0, sizeof blk);
    blk.cfg = b->cfg;
    for (int i = 0; i < n; i++) {
        const h3b_host_tensor *t = &tensors[i];
        if (!t->name) return fail(b->err, sizeof b->err, H3B_ERR_ARGUMENT, "tensors[%d]: name is NULL", i);
        int k = 0;
        while (k < H3_T_COUNT && strcmp(specs[k].name, t->name)) k++;
        if (k == H3_T_COUNT)
            return fail(b->err, sizeof b->err, H3B_ERR_ARGUMENT, "tensors[%d]: '%.200s' is not a tensor of the H3 block",
                        i, t->name);
        if (blk.w[k]) return fail(b->err, sizeof b->err, H3B_ERR_ARGUMENT, "tensor '%s' given twice", t->name);
        const int64_t want1 = specs[k].rank == 2 ? specs[k].shape[1] : 0;
        if (t->shape[0] != specs[k].shape[0] || t->shape[1] != want1)
            return fail(b->err, sizeof b->err, H3B_ERR_ARGUMENT, "tensor '%s': shape [%lld, %lld], the H3 block's is [%lld, %lld]",
                        t->name, (long long)t->shape[0], (long long)t->shape[1], (long long)specs[k].shape[0],
                        (long long)want1);
        if (!t->data) return fail(b->err, sizeof b->err, H3B_ERR_ARGUMENT, "tensor '%s': data is NULL", t->name);
        blk.w[k] = t->data;
    }
    for (int k = 0; k < H3_T_COUNT; k++)
        if (!blk.w[k]) return fail(b->err, sizeof b->err, H3B_ERR_ARGUMENT, "tensor '%s' is missing", specs[k].name);
#ifdef H3_HAVE_CUDA
    return block_upload(b, &blk);
#else
    (void)device;
    return fail(b->err, sizeof b->err, H3B_ERR_UNSUPPORTED, "this h3block was built without CUDA");
#endif
}

H3B_API void h3b_block_destroy(h3b_block *b)
{
    if (!b) return;
#ifdef H3_HAVE_CUDA
    int prev = 0;
    if (b->nalloc && cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(b->device) == cudaSuccess) {
        (void)cudaDeviceSynchronize();
        free_allocs(b, 0);
        free_allocs(b, 1);
        h3_lt_destroy(b->br.lt);
        (void)cudaSetDevice(prev);
    }
#endif
    free(b);
}

/* [p, p + n) and [q, q + m) overlap */
static int overlaps(const void *p, size_t n, const void *q, size_t m)
{
    return (uintptr_t)p < (uintptr_t)q + m && (uintptr_t)q < (uintptr_t)p + n;
}

H3B_API h3b_status h3b_block_forward(h3b_block *b, int S, const void *x, const float *temb, const int32_t *tags,
                                     const float *positions, void *out, void *stream)
{
    if (!b) return H3B_ERR_ARGUMENT;
    char *err = b->err;
    const size_t len = sizeof b->err;
    err[0] = 0;
    if (S < 1 || S > ATTN_MAX_S)
        return fail(err, len, S < 1 ? H3B_ERR_ARGUMENT : H3B_ERR_UNSUPPORTED, "S = %d: 1 to %d tokens", S,
                    ATTN_MAX_S);
    const struct {
        const char *name;
        const void *p;
    } args[] = {{"x", x}, {"temb", temb}, {"tags", tags}, {"positions", positions}, {"out", out}};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        if (!args[i].p) return fail(err, len, H3B_ERR_ARGUMENT, "%s is NULL", args[i].name);
        if ((uintptr_t)args[i].p & 15u)
            return fail(err, len, H3B_ERR_ARGUMENT, "%s %p is not 16-byte aligned", args[i].name, args[i].p);
    }
    const size_t xbytes = (size_t)S * b->cfg.hidden * 2;
    if (overlaps(x, xbytes, out, xbytes)) return fail(err, len, H3B_ERR_ARGUMENT, "out overlaps x");
    if (!b->ready) return fail(err, len, H3B_ERR_ARGUMENT, "the block was not created (see its create's status)");
#ifdef H3_HAVE_CUDA
    h3b_status st = on_device(b->device, err, len);
    if (st) return st;
    block_run *br = &b->br;
    if (S > b->S_alloc) { /* the activations for S tokens; the old ones may be in use by work in flight */
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) return fail(err, len, H3B_ERR_CUDA, "cudaDeviceSynchronize: %s", cudaGetErrorString(e));
        free_allocs(b, 0);
        b->S_alloc = 0;
        b->nalloc = h3r_plan_allocs(&b->cfg, S, br->fp8_mask, &br->d, b->allocs);
        size_t total = 0;
        for (int i = 0; i < b->nalloc; i++)
            if (!b->allocs[i].weight && !is_io(br, b->allocs[i].p) &&
                h3r_dev_alloc(b->allocs[i].p, b->allocs[i].bytes, &total, err, len)) {
                free_allocs(b, 0);
                return H3B_ERR_MEMORY;
            }
        b->S_alloc = S;
    }
    br->S = S;
    br->st = (cudaStream_t)stream;
    br->d.x = (uint16_t *)x;
    br->d.temb = (float *)temb;
    br->d.tags = (int32_t *)tags;
    br->d.pos = (float *)positions;
    br->d.out = (uint16_t *)out;
    int ops[OP_N];
    const int nops = h3r_block_ops(br, 0, OP_N, ops);
    for (int j = 0; j < nops; j++)
        if (h3r_enqueue_op(br, ops[j], err, len)) return H3B_ERR_CUDA;
    return H3B_OK;
#else
    (void)stream;
    return fail(err, len, H3B_ERR_UNSUPPORTED, "this h3block was built without CUDA");
#endif
}
