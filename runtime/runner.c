/* runner.c — the GPU path of dit_block.
 *
 * Every stage writes its own buffer, so after the last timed run each stage's
 * input and output are still on the device and can be checked one by one.
 * gate_res1 and norm2_mod run as one fused kernel (one pass over x); its
 * timing row names both stages and both are checked at its two outputs.
 * The adaLN projection depends only on temb: it runs once per timestep
 * (before the timed runs) and its output is reused, so it has its own row
 * and is not part of the block total; so does the RoPE table (cos, sin of
 * every token's angles), which depends only on the positions: once per
 * sequence, read by qk_norm_rope_quant in every block.
 *
 * --gemm fp8: the four GEMM weights are quantised on the device at load
 * (e4m3, one scale per output channel; the BF16 copies are then freed), the
 * GEMM inputs are written as e4m3 with one scale per token by the kernel
 * before each GEMM (norm1_mod, gate_res1+norm2_mod and swiglu fused with
 * it; the attention output by its own row-quantiser pass, out_quant, since a
 * token's 56 heads come from 56 different attention CTAs), and cuBLASLt runs
 * FP8 GEMMs with outer-vector scales and BF16 output. Those three kernels
 * then never write their BF16 output.
 *
 * --gemm-scales blocks (H3_FP8_BLOCKS in the mask): weights one scale per
 * 128 x 128 tile, GEMM inputs one per token per 128 channels (the same
 * producers), cuBLASLt's block-scaled FP8 GEMMs.
 *
 * --gemm fp8:LIST: the same per GEMM (br->fp8_mask). Each producer writes
 * the one form its consumer GEMM reads, exactly as in the all-BF16 or the
 * all-FP8 mode for that op (norm1_mod for qkv, gate_res1+norm2_mod for fc1,
 * swiglu for fc2; out_quant runs only when out_gemm is FP8), so those two
 * modes are masks 0 and H3_FP8_ALL with their kernels unchanged. */
#include "runner_internal.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_check.h"
#include "errmsg.h"
#include "gemm_lt.h"
#include "kernels.h"
#include "numerics.h"

/* The kernel driver's version from /proc/driver/nvidia/version: its first
 * word of the form N.N[.N] ("NVRM version: NVIDIA UNIX x86_64 Kernel Module
 * 570.86.15 ..."; the open module's line has "for x86_64" before it). */
static void driver_version(char *buf, size_t len)
{
    buf[0] = 0;
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (!f) return;
    char line[512];
    if (fgets(line, sizeof line, f))
        for (char *w = strtok(line, " \t\n"); w; w = strtok(NULL, " \t\n"))
            if (w[0] >= '0' && w[0] <= '9' && strchr(w, '.') && strspn(w, "0123456789.") == strlen(w)) {
                snprintf(buf, len, "%s", w);
                break;
            }
    fclose(f);
}

void gpu_lib_versions(gpu_libs *v)
{
    memset(v, 0, sizeof *v);
    if (cudaRuntimeGetVersion(&v->runtime) != cudaSuccess) v->runtime = 0;
    if (cudaDriverGetVersion(&v->driver_cuda) != cudaSuccess) v->driver_cuda = 0; /* 0 also: no driver */
    v->cublaslt = cublasLtGetVersion();
    driver_version(v->driver, sizeof v->driver);
}

void gpu_libs_describe(const gpu_libs *v, char *buf, size_t len)
{
    int n = snprintf(buf, len, "CUDA runtime %d.%d, cuBLASLt %zu.%zu.%zu, ", v->runtime / 1000, v->runtime % 1000 / 10,
                     v->cublaslt / 10000, v->cublaslt / 100 % 100, v->cublaslt % 100);
    if (n < 0 || (size_t)n >= len) return;
    if (v->driver_cuda)
        snprintf(buf + n, len - (size_t)n, "NVIDIA driver %s (CUDA %d.%d)",
                 v->driver[0] ? v->driver : "(version unknown)", v->driver_cuda / 1000, v->driver_cuda % 1000 / 10);
    else
        snprintf(buf + n, len - (size_t)n, "no NVIDIA driver");
}

int gpu_probe(gpu_info *g)
{
    memset(g, 0, sizeof *g);
    gpu_lib_versions(&g->libs);
    const gpu_libs *l = &g->libs;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        /* each cause its own message: a machine without a driver is not told to update it */
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        if (!l->driver_cuda) {
            g->status = H3_GPU_NO_DRIVER;
            snprintf(g->name, sizeof g->name, "no NVIDIA driver on this machine (libcuda.so.1 not found)");
        } else if (e == cudaErrorInsufficientDriver) {
            g->status = H3_GPU_OLD_DRIVER;
            snprintf(g->name, sizeof g->name,
                     "the NVIDIA driver %s supports CUDA %d.%d, older than this build's CUDA %d.%d (update the driver)",
                     l->driver[0] ? l->driver : "here", l->driver_cuda / 1000, l->driver_cuda % 1000 / 10,
                     l->runtime / 1000, l->runtime % 1000 / 10);
        } else if (e == cudaErrorNoDevice || n == 0) {
            g->status = H3_GPU_NONE;
            snprintf(g->name, sizeof g->name, "the NVIDIA driver %s finds no CUDA GPU%s%.40s%s",
                     l->driver[0] ? l->driver : "here",
                     vis ? " (CUDA_VISIBLE_DEVICES='" : "", vis ? vis : "", vis ? "')" : "");
        } else {
            g->status = H3_GPU_ERROR;
            snprintf(g->name, sizeof g->name, "no usable CUDA GPU (%s)", cudaGetErrorString(e));
        }
        (void)cudaGetLastError();
        return 0;
    }
    struct cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    snprintf(g->name, sizeof g->name, "%.80s (sm_%d%d, %d SMs, %.0f GB)", p.name, p.major, p.minor,
             p.multiProcessorCount, p.totalGlobalMem / 1e9);
    snprintf(g->model, sizeof g->model, "%s", p.name);
    g->cc_major = p.major;
    g->cc_minor = p.minor;
    g->sms = p.multiProcessorCount;
    g->mem_bytes = p.totalGlobalMem;
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) == cudaSuccess) g->sm_clock_mhz = khz / 1000;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, 0) == cudaSuccess) g->mem_clock_mhz = khz / 1000;
    (void)cudaGetLastError();
    g->supported = h3k_device_supported();
    g->status = g->supported ? H3_GPU_OK : H3_GPU_NO_KERNEL;
    return 1;
}

static int is_gemm_weight(int t)
{
    for (int g = 0; g < G_N; g++)
        if (gemm_tensor[g] == t) return g;
    return -1;
}

int h3r_plan_allocs(const h3_config *c, int S, int fp8_mask, dev_bufs *d, dev_alloc_t *t)
{
    const size_t C = c->hidden, H = c->heads, I = h3_attn_width(c), F = c->ffn, Sp = h3_pad_tokens(S),
                 G = h3_groups(S), Su = (size_t)S;
    h3_tensor_spec specs[H3_T_COUNT];
    h3_tensor_specs(c, specs);
    int n = 0;
#define A(ptr, sz, w) t[n++] = (dev_alloc_t){(void **)&(ptr), (size_t)(sz), (w)}
    for (int i = 0; i < H3_T_COUNT; i++) {
        const size_t rows = (size_t)specs[i].shape[0], cols = specs[i].rank == 2 ? (size_t)specs[i].shape[1] : 1;
        const int g = is_gemm_weight(i);
        if (g >= 0 && (fp8_mask >> g & 1)) {
            A(d->w8[g], rows * cols, 1);
            A(d->ws[g], h3_fp8_w_scales(rows, cols, fp8_mask) * 4, 1);
        } else {
            A(d->w[i], rows * cols * 2, 1);
        }
    }
    A(d->x, Su * C * 2, 0);
    A(d->temb, (size_t)c->temb * 4, 0);
    A(d->tags, Su * 4, 0);
    A(d->pos, Su * 12, 0);
    A(d->rope, Su * H3_ROPE_TAB * 4, 0);
    A(d->mod, (size_t)h3_mod_width(c) * 2, 0);
    A(d->qkv, Su * 3 * I * 2, 0);
    A(d->q8, H * Sp * 128, 0);
    A(d->k8, H * Sp * 128, 0);
    A(d->vt8, H * Sp * 128, 0);
    A(d->sq, H * G * 4, 0);
    A(d->sk, H * G * 4, 0);
    A(d->sv, H * G * 4, 0);
    A(d->vmu, H * 128 * 4, 0);
    A(d->O, Su * I * 2, 0);
    A(d->lse, H * Su * 4, 0);
    A(d->y1, Su * C * 2, 0);
    A(d->x1, Su * C * 2, 0);
    A(d->g, Su * 2 * F * 2, 0);
    A(d->y2, Su * C * 2, 0);
    A(d->out, Su * C * 2, 0);
    /* each GEMM input in the form its GEMM reads: the e4m3 ones first, then
     * the BF16 ones (the order of the all-FP8 and all-BF16 layouts) */
    const int q = fp8_mask >> G_QKV & 1, o = fp8_mask >> G_OUT & 1, f1 = fp8_mask >> G_FC1 & 1,
              f2 = fp8_mask >> G_FC2 & 1;
    if (q) {
        A(d->a8, Su * C, 0);
        A(d->sa, h3_fp8_in_scales(Su, C, fp8_mask) * 4, 0);
    }
    if (o) { /* else out_gemm reads O itself */
        A(d->O8, Su * I, 0);
        A(d->sO, h3_fp8_in_scales(Su, I, fp8_mask) * 4, 0);
    }
    if (f1) {
        A(d->b8, Su * C, 0);
        A(d->sb, h3_fp8_in_scales(Su, C, fp8_mask) * 4, 0);
    }
    if (f2) {
        A(d->u8, Su * F, 0);
        A(d->su, h3_fp8_in_scales(Su, F, fp8_mask) * 4, 0);
    }
    if (!q) A(d->a, Su * C * 2, 0);
    if (!f1) A(d->b, Su * C * 2, 0);
    if (!f2) A(d->u, Su * F * 2, 0);
#undef A
    return n;
}

/* cudaMalloc rounds every buffer up; 2 MiB covers its granularity. */
static size_t rounded(size_t b) { return (b + (2u << 20) - 1) / (2u << 20) * (2u << 20); }

size_t gpu_block_bytes(const h3_config *c, int S, int fp8_mask, size_t *weights)
{
    dev_bufs d;
    dev_alloc_t t[MAX_ALLOCS];
    const int n = h3r_plan_allocs(c, S, fp8_mask, &d, t);
    size_t w = 0, a = 0, stage = 0;
    for (int i = 0; i < n; i++) *(t[i].weight ? &w : &a) += rounded(t[i].bytes);
    if (fp8_mask) { /* the BF16 copy of the largest FP8 GEMM weight while it is quantised at load */
        h3_tensor_spec specs[H3_T_COUNT];
        h3_tensor_specs(c, specs);
        for (int g = 0; g < G_N; g++) {
            if (!(fp8_mask >> g & 1)) continue;
            const h3_tensor_spec *sp = &specs[gemm_tensor[g]];
            const size_t b = rounded((size_t)sp->shape[0] * sp->shape[1] * 2);
            if (b > stage) stage = b;
        }
    }
    if (weights) *weights = w;
    return w + (a > stage ? a : stage) + (32u << 20) /* cuBLASLt workspace */;
}

int gpu_check_fits(const h3_config *c, int S, int fp8_mask, char *err, size_t errlen)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0; /* cannot tell: the allocations will say */
    }
    size_t w = 0;
    const size_t need = gpu_block_bytes(c, S, fp8_mask, &w);
    if (need <= fr) return 0;
    int lo = 0, hi = S; /* the largest S that fits: need() grows with S */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (gpu_block_bytes(c, mid, fp8_mask, NULL) <= fr) lo = mid;
        else hi = mid - 1;
    }
    if (fp8_mask & H3_FP8_BLOCKS) lo -= lo % 8; /* block scales take multiples of 8 only */
    snprintf(err, errlen,
             "out of device memory: %d tokens need %.2f GB (%zu bytes: %.2f GB weights + %.2f GB activations and "
             "workspace), the GPU has %.2f GB free of %.2f GB; at most %d tokens fit",
             S, need / 1e9, need, w / 1e9, (need - w) / 1e9, fr / 1e9, tot / 1e9, lo);
    return -1;
}

h3_op_row *h3r_add_row(h3_run_result *r, const char *name, double ms, double flops, double bytes)
{
    CHECK(r->n_rows < H3_RUN_MAX_ROWS, "more than %d timing rows", H3_RUN_MAX_ROWS);
    h3_op_row *row = &r->rows[r->n_rows++];
    h3_op_row_init(row, name, ms, flops, bytes);
    return row;
}

void h3r_gemm_desc(int fp8_mask, int fast_accum, char *buf, size_t len)
{
    const char *fa = fast_accum ? ", fast accumulation" : "";
    const char *sc = fp8_mask & H3_FP8_BLOCKS ? "block scales 128x128 weights x 1x128 inputs"
                                              : "scales per output channel x per token";
    const int mask = fp8_mask & H3_FP8_ALL;
    if (mask == 0) {
        snprintf(buf, len, "bf16");
        return;
    }
    if (mask == H3_FP8_ALL) {
        snprintf(buf, len, "fp8 (e4m3; %s%s)", sc, fa);
        return;
    }
    char f[H3_GEMM_LIST_LEN], b[H3_GEMM_LIST_LEN];
    h3_gemm_list(mask, f, sizeof f);
    h3_gemm_list(H3_FP8_ALL & ~mask, b, sizeof b);
    snprintf(buf, len, "fp8 %s (e4m3; %s%s), bf16 %s", f, sc, fa, b);
}

int h3r_dev_alloc(void **p, size_t bytes, size_t *total, char *err, size_t errlen)
{
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        snprintf(err, errlen, "out of device memory: %zu bytes (%.2f GB) more needed (allocated %.2f GB so far, %.2f GB free of %.2f GB); try a smaller --tokens",
                 bytes, bytes / 1e9, *total / 1e9, fr / 1e9, tot / 1e9);
        return -1;
    }
    *total += bytes;
    return 0;
}

/* One of the four GEMMs: x [S][K] . W_g^T -> y [S][N], BF16 or (g in the
 * mask) FP8 operands. 0, or -1 with err. */
static int gemm(block_run *br, int g, const uint16_t *x, const uint8_t *x8, const float *sx, uint16_t *y, int N, int K,
                char *err, size_t errlen)
{
    dev_bufs *d = &br->d;
    if (!h3r_fp8(br, g)) return h3_lt_gemm_bf16(br->lt, x, d->w[gemm_tensor[g]], y, br->S, N, K, br->st, err, errlen);
    return h3r_blocks(br) ? h3_lt_gemm_fp8_blocks(br->lt, x8, d->w8[g], sx, d->ws[g], y, br->S, N, K, br->st, err, errlen)
                          : h3_lt_gemm_fp8(br->lt, x8, d->w8[g], sx, d->ws[g], y, br->S, N, K, br->st, err, errlen);
}

/* A kernel launch of h3r_enqueue_op: on failure the launch named in err, -1. */
#define TRY(call)                                                                                        \
    do {                                                                                                 \
        const int rc_ = (call);                                                                          \
        if (rc_) return h3_seterr(err, errlen, "%s: %s", op_names[op], cudaGetErrorString((cudaError_t)rc_)); \
    } while (0)

int h3r_enqueue_op(block_run *br, int op, char *err, size_t errlen)
{
    const h3_config *c = br->cfg;
    const int S = br->S, C = c->hidden, H = c->heads, I = h3_attn_width(c), F = c->ffn;
    dev_bufs *d = &br->d;
    switch (op) {
    case OP_ADALN:
        TRY(h3k_adaln(d->temb, d->w[H3_T_ADALN_W], d->w[H3_T_ADALN_B], h3_mod_width(c), c->temb, d->mod, br->st));
        break;
    case OP_ROPE: TRY(h3k_rope_table(d->pos, S, br->omega, d->rope, br->st)); break;
    case OP_NORM1:
        if (h3r_fp8(br, G_QKV))
            TRY(h3k_rmsnorm_mod_q8(d->x, d->w[H3_T_NORM1], d->mod, d->tags, S, C, c->eps, H3_SLOT_SHIFT_MSA,
                                      H3_SLOT_SCALE_MSA, NULL, d->a8, d->sa, h3r_blocks(br), br->st));
        else
            TRY(h3k_rmsnorm_mod(d->x, d->w[H3_T_NORM1], d->mod, d->tags, S, C, c->eps, H3_SLOT_SHIFT_MSA,
                                   H3_SLOT_SCALE_MSA, d->a, br->st));
        break;
    case OP_QKV: return gemm(br, G_QKV, d->a, d->a8, d->sa, d->qkv, 3 * I, C, err, errlen);
    case OP_QUANT: {
        const float *vmu = br->smooth_v ? d->vmu : NULL;
        if (vmu && !br->vmu_given)
            TRY(h3k_v_mean(d->qkv + H3_QKV_V_OFFSET, 3L * I, H3_QKV_HEAD_STRIDE, S, H, d->vmu, br->st));
        TRY(h3k_qk_norm_rope_quant(d->qkv, d->rope, d->w[H3_T_QNORM], d->w[H3_T_KNORM], S, H, c->eps, vmu,
                                      br->rotate_qk, d->q8, d->k8, d->vt8, d->sq, d->sk, d->sv, br->st));
        break;
    }
    case OP_ATTN: {
        const float *vmu = br->smooth_v ? d->vmu : NULL;
        if (br->use_sm90)
            TRY(h3k_attn_fp8_sm90(d->q8, d->k8, d->vt8, d->sq, d->sk, d->sv, vmu, S, H, d->O, d->lse, br->st));
        else
            TRY(h3k_attn_fp8_mma(d->q8, d->k8, d->vt8, d->sq, d->sk, d->sv, vmu, S, H, d->O, d->lse, br->st));
        break;
    }
    case OP_OUTQ:
        if (h3r_blocks(br))
            TRY(h3k_quant_blocks_e4m3(d->O, S, I, 1, d->O8, d->sO, br->st));
        else
            TRY(h3k_quant_rows_e4m3(d->O, S, I, d->O8, d->sO, br->st));
        break;
    case OP_OUT: return gemm(br, G_OUT, d->O, d->O8, d->sO, d->y1, C, I, err, errlen);
    case OP_RES1_NORM2:
        if (h3r_fp8(br, G_FC1))
            TRY(h3k_gate_residual_norm_mod_q8(d->x, d->y1, d->mod, d->tags, S, C, H3_SLOT_GATE_MSA, d->x1,
                                                 d->w[H3_T_NORM2], c->eps, H3_SLOT_SHIFT_MLP, H3_SLOT_SCALE_MLP,
                                                 NULL, d->b8, d->sb, h3r_blocks(br), br->st));
        else
            TRY(h3k_gate_residual_norm_mod(d->x, d->y1, d->mod, d->tags, S, C, H3_SLOT_GATE_MSA, d->x1,
                                              d->w[H3_T_NORM2], c->eps, H3_SLOT_SHIFT_MLP, H3_SLOT_SCALE_MLP, d->b,
                                              br->st));
        break;
    case OP_FC1: return gemm(br, G_FC1, d->b, d->b8, d->sb, d->g, 2 * F, C, err, errlen);
    case OP_SWIGLU:
        if (h3r_fp8(br, G_FC2))
            TRY(h3k_swiglu_q8(d->g, S, F, NULL, d->u8, d->su, h3r_blocks(br), br->st));
        else
            TRY(h3k_swiglu(d->g, S, F, d->u, br->st));
        break;
    case OP_FC2: return gemm(br, G_FC2, d->u, d->u8, d->su, d->y2, C, F, err, errlen);
    case OP_RES2:
        TRY(h3k_gate_residual(d->x1, d->y2, d->mod, d->tags, S, C, H3_SLOT_GATE_MLP, d->out, br->st));
        break;
    }
    return 0;
}
#undef TRY

int h3r_block_ops(const block_run *br, int first, int last, int ops[OP_N])
{
    int n = 0;
    for (int op = first; op < last; op++)
        if (op != OP_OUTQ || h3r_fp8(br, G_OUT)) ops[n++] = op;
    return n;
}

void h3r_run_op(block_run *br, int op)
{
    char err[512];
    if (h3r_enqueue_op(br, op, err, sizeof err)) {
        fprintf(stderr, "dit_block: %s\n", err);
        exit(1);
    }
}

/* Work per op, for the rate column: FLOPs of GEMMs and attention
 * (config.c), minimum bytes moved (each input read once, each output written
 * once) for the memory-bound ones; and the device's ceiling for that rate. */
static const int op_stage[OP_N] = {H3_STAGE_ADALN,     -1 /* rope_table */, H3_STAGE_NORM1_MOD,
                                   H3_STAGE_QKV_GEMM,  H3_STAGE_QK_NORM_ROPE_QUANT, H3_STAGE_ATTENTION,
                                   -1 /* out_quant */, H3_STAGE_OUT_GEMM,   H3_STAGE_GATE_RES1,
                                   H3_STAGE_FC1_GEMM,  H3_STAGE_SWIGLU,     H3_STAGE_FC2_GEMM,
                                   H3_STAGE_GATE_RES2};
/* The GEMM an op is (G_*), or -1. */
static int op_gemm(int op)
{
    switch (op) {
    case OP_QKV: return G_QKV;
    case OP_OUT: return G_OUT;
    case OP_FC1: return G_FC1;
    case OP_FC2: return G_FC2;
    default: return -1;
    }
}
/* Bytes per element of GEMM g's K-wide input: BF16, or e4m3 plus its share
 * of the scales (one per row, or per 128 columns). */
static double in_bytes(int fp8_mask, int g, double K)
{
    return fp8_mask >> g & 1 ? 1.0 + 4.0 * (double)h3_fp8_in_scales(1, (size_t)K, fp8_mask) / K : 2.0;
}
static void op_work(const h3_config *c, int S, int fp8_mask, int op, double *flops, double *bytes)
{
    const double C = c->hidden, I = h3_attn_width(c), F = c->ffn, T = c->temb, MOD = h3_mod_width(c),
                 Sp = h3_pad_tokens(S);
    /* bytes per element of the GEMM input a producer writes, by its GEMM's precision */
    const double act_qkv = in_bytes(fp8_mask, G_QKV, C), act_fc1 = in_bytes(fp8_mask, G_FC1, C),
                 act_fc2 = in_bytes(fp8_mask, G_FC2, F);
    *flops = op_stage[op] >= 0 ? h3_stage_flops(c, S, op_stage[op]) : 0;
    *bytes = 0;
    switch (op) {
    case OP_ADALN: *flops = 0; *bytes = MOD * T * 2 + MOD * 2 * 2; break; /* a GEMV: memory-bound */
    case OP_ROPE: *bytes = S * (12.0 + H3_ROPE_TAB * 4); break;
    case OP_NORM1: *bytes = S * C * (2 + act_qkv); break;
    case OP_QUANT: *bytes = S * 3 * I * 2 + S * H3_ROPE_TAB * 4.0 + 3 * Sp * I; break;
    case OP_OUTQ: *bytes = S * I * (2 + in_bytes(fp8_mask, G_OUT, I)); break;
    case OP_RES1_NORM2: *bytes = S * C * (2 * 3 + act_fc1); break;
    case OP_SWIGLU: *bytes = S * F * (2 * 2 + act_fc2); break;
    case OP_RES2: *bytes = S * C * 2 * 3; break;
    default: break;
    }
}

/* Peak rates of the devices we have measured (DESIGN.md §6): H200 dense
 * BF16 989 and FP8 1979 TFLOPS, 4.3 TB/s measured copy bandwidth. Elsewhere
 * the column stays empty rather than guess. */
static double op_ceiling(const gpu_info *gi, int fp8_mask, double flops, int op)
{
    if (!(gi->cc_major == 9 && strstr(gi->name, "H200"))) return 0;
    if (flops <= 0) return 4300.0;
    if (op == OP_ATTN) return 1979.0;
    const int g = op_gemm(op); /* each GEMM against the peak of its own precision */
    return g >= 0 && (fp8_mask >> g & 1) ? 1979.0 : 989.0;
}

static void *host_copy(const void *dptr, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    CHECK(h, "out of host memory copying %zu bytes back from the GPU", bytes);
    CUDA_CHECK(cudaMemcpy(h, dptr, bytes, cudaMemcpyDeviceToHost));
    return h;
}

/* ---- the view the stage checks get (runner.h) ---- */
struct h3_run_view {
    const block_run *br;
    int key_tile;
};

h3_run_info h3_run_view_info(const h3_run_view *v)
{
    const block_run *br = v->br;
    return (h3_run_info){br->S, br->fp8_mask, br->smooth_v, br->rotate_qk, br->fast_accum, v->key_tile, br->use_sm90};
}

void *h3_run_fetch(const h3_run_view *v, h3_buf b, size_t bytes)
{
    const dev_bufs *d = &v->br->d;
    const void *const p[H3_BUF_COUNT] = {
        [H3_BUF_MOD] = d->mod, [H3_BUF_QKV] = d->qkv, [H3_BUF_Q8] = d->q8, [H3_BUF_K8] = d->k8,
        [H3_BUF_VT8] = d->vt8, [H3_BUF_SQ] = d->sq,   [H3_BUF_SK] = d->sk, [H3_BUF_SV] = d->sv,
        [H3_BUF_VMU] = d->vmu, [H3_BUF_O] = d->O,     [H3_BUF_LSE] = d->lse, [H3_BUF_Y1] = d->y1,
        [H3_BUF_X1] = d->x1,   [H3_BUF_G] = d->g,     [H3_BUF_Y2] = d->y2, [H3_BUF_OUT] = d->out,
        [H3_BUF_A] = d->a,     [H3_BUF_A8] = d->a8,   [H3_BUF_SA] = d->sa, [H3_BUF_O8] = d->O8,
        [H3_BUF_SO] = d->sO,   [H3_BUF_B] = d->b,     [H3_BUF_B8] = d->b8, [H3_BUF_SB] = d->sb,
        [H3_BUF_U] = d->u,     [H3_BUF_U8] = d->u8,   [H3_BUF_SU] = d->su,
    };
    return (unsigned)b < H3_BUF_COUNT && p[b] ? host_copy(p[b], bytes) : NULL;
}

void h3_run_fetch_w8(const h3_run_view *v, int g, int N, int K, uint8_t **w8, float **ws)
{
    CHECK(g >= 0 && g < G_N && v->br->d.w8[g], "GEMM %d has no FP8 weight in this run", g);
    *w8 = host_copy(v->br->d.w8[g], (size_t)N * K);
    *ws = host_copy(v->br->d.ws[g], h3_fp8_w_scales((size_t)N, (size_t)K, v->br->fp8_mask) * 4);
    if (h3r_blocks(v->br)) { /* [N / 128][L4] -> [N / 128][L]: the padding dropped */
        const size_t L = h3_fp8_kblocks((size_t)K), L4 = h3_fp8_w_scale_ld((size_t)K), nr = h3_fp8_kblocks((size_t)N);
        for (size_t r = 0; r < nr; r++) memmove(*ws + r * L, *ws + r * L4, L * 4);
    }
}

int h3r_upload_weights(block_run *br, const h3_block *blk, char *err, size_t errlen)
{
    h3_tensor_spec specs[H3_T_COUNT];
    h3_tensor_specs(br->cfg, specs);
    dev_bufs *d = &br->d;
    for (int i = 0; i < H3_T_COUNT; i++) {
        const size_t rows = (size_t)specs[i].shape[0], cols = specs[i].rank == 2 ? (size_t)specs[i].shape[1] : 1;
        const int g = is_gemm_weight(i);
        cudaError_t e;
        if (g >= 0 && h3r_fp8(br, g)) {
            uint16_t *stage = NULL;
            size_t tmp = 0;
            if (h3r_dev_alloc((void **)&stage, rows * cols * 2, &tmp, err, errlen)) return -1;
            e = cudaMemcpy(stage, blk->w[i], rows * cols * 2, cudaMemcpyHostToDevice);
            if (e == cudaSuccess)
                e = (cudaError_t)(h3r_blocks(br) ? h3k_quant_blocks_e4m3(stage, (int)rows, (int)cols, 128, d->w8[g],
                                                                          d->ws[g], br->st)
                                                 : h3k_quant_rows_e4m3(stage, (int)rows, (int)cols, d->w8[g], d->ws[g],
                                                                       br->st));
            if (e == cudaSuccess) e = cudaStreamSynchronize(br->st);
            const cudaError_t f = cudaFree(stage);
            if (e == cudaSuccess) e = f;
        } else {
            e = cudaMemcpy(d->w[i], blk->w[i], rows * cols * 2, cudaMemcpyHostToDevice);
        }
        if (e != cudaSuccess)
            return h3_seterr(err, errlen, "uploading %s: %s", specs[i].name, cudaGetErrorString(e));
    }
    return 0;
}

/* Whether n elements of a device buffer hold a NaN or Inf (e4m3: a NaN code),
 * copied back 16 Mi elements at a time. */
enum { NF_BF16, NF_F32, NF_E4M3 };
static int dev_nonfinite(const void *d, size_t n, int kind)
{
    const size_t esz = kind == NF_F32 ? 4 : kind == NF_BF16 ? 2 : 1, slice = (size_t)1 << 24;
    if (!d || !n) return 0;
    void *h = malloc((n < slice ? n : slice) * esz);
    CHECK(h, "out of host memory scanning a device buffer");
    long at = -1;
    for (size_t i = 0; i < n && at < 0; i += slice) {
        const size_t m = n - i < slice ? n - i : slice;
        CUDA_CHECK(cudaMemcpy(h, (const char *)d + i * esz, m * esz, cudaMemcpyDeviceToHost));
        at = kind == NF_BF16 ? h3_bf16_first_nonfinite(h, m)
             : kind == NF_F32 ? h3_f32_first_nonfinite(h, m)
                              : h3_e4m3_first_nan(h, m);
    }
    free(h);
    return at >= 0;
}

int h3r_first_nonfinite(const block_run *br)
{
    const h3_config *c = br->cfg;
    const size_t S = (size_t)br->S, C = c->hidden, I = h3_attn_width(c), F = c->ffn, H = c->heads,
                 G = h3_groups(br->S), Sp = h3_pad_tokens(br->S);
    const dev_bufs *d = &br->d;
    const int m = br->fp8_mask;
    /* every op's outputs in block order; a buffer the mask did not allocate is NULL */
    const struct {
        int op;
        const void *p;
        size_t n;
        int kind;
    } outs[] = {
        {OP_ADALN, d->mod, (size_t)h3_mod_width(c), NF_BF16},
        {OP_NORM1, d->a, S * C, NF_BF16},           {OP_NORM1, d->a8, S * C, NF_E4M3},
        {OP_NORM1, d->sa, h3_fp8_in_scales(S, C, m), NF_F32},               {OP_QKV, d->qkv, S * 3 * I, NF_BF16},
        {OP_QUANT, d->sq, H * G, NF_F32},           {OP_QUANT, d->sk, H * G, NF_F32},
        {OP_QUANT, d->sv, H * G, NF_F32},           {OP_QUANT, d->q8, H * Sp * 128, NF_E4M3},
        {OP_QUANT, d->k8, H * Sp * 128, NF_E4M3},   {OP_QUANT, d->vt8, H * Sp * 128, NF_E4M3},
        {OP_ATTN, d->O, S * I, NF_BF16},            {OP_OUTQ, d->O8, S * I, NF_E4M3},
        {OP_OUTQ, d->sO, h3_fp8_in_scales(S, I, m), NF_F32},                {OP_OUT, d->y1, S * C, NF_BF16},
        {OP_RES1_NORM2, d->x1, S * C, NF_BF16},     {OP_RES1_NORM2, d->b, S * C, NF_BF16},
        {OP_RES1_NORM2, d->b8, S * C, NF_E4M3},     {OP_RES1_NORM2, d->sb, h3_fp8_in_scales(S, C, m), NF_F32},
        {OP_FC1, d->g, S * 2 * F, NF_BF16},         {OP_SWIGLU, d->u, S * F, NF_BF16},
        {OP_SWIGLU, d->u8, S * F, NF_E4M3},         {OP_SWIGLU, d->su, h3_fp8_in_scales(S, F, m), NF_F32},
        {OP_FC2, d->y2, S * C, NF_BF16},            {OP_RES2, d->out, S * C, NF_BF16},
    };
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        if (dev_nonfinite(outs[i].p, outs[i].n, outs[i].kind)) return outs[i].op;
    return -1;
}

/* Median of n event-timed launches of op alone (the cached adaLN). */
static double time_op_alone(block_run *br, int op, int n, cudaEvent_t e0, cudaEvent_t e1, double *t)
{
    for (int i = 0; i < n; i++) {
        CUDA_CHECK(cudaEventRecord(e0, br->st));
        h3r_run_op(br, op);
        CUDA_CHECK(cudaEventRecord(e1, br->st));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        t[i] = ms;
    }
    return h3_median(t, n);
}

int gpu_run_block(const h3_run_params *o, const gpu_info *gi, const h3_block *blk, const h3_inputs *in,
                  const h3_check_hook *hook, h3_run_result *r, uint16_t *out_host, int *user_error, char *err,
                  size_t errlen)
{
    const h3_config *c = &blk->cfg;
    const int S = in->S, C = c->hidden, F = c->ffn;
    *user_error = 0;

    block_run br = {.cfg = c, .S = S, .fp8_mask = o->fp8_mask};
    int sm90_ok = h3k_attn_fp8_sm90_available();
    if (o->attn == H3_ATTN_SM90 && !sm90_ok) {
        snprintf(err, errlen, "--attn sm90: the Hopper kernel needs an sm_90 GPU and a build with sm_90a (device: %s)",
                 gi->name);
        *user_error = 1;
        return -1;
    }
    /* the e4m3 row producers' limits (kernels.h), asked of any FP8 mode */
    if (br.fp8_mask && (C % 8 || C > 32768 || F % 8 || F > 65536)) {
        snprintf(err, errlen, "--gemm %s: needs hidden and ffn multiples of 8, hidden <= 32768, ffn <= 65536 (this "
                 "block: hidden %d, ffn %d)", o->gemm, C, F);
        *user_error = 1;
        return -1;
    }
    br.use_sm90 = o->attn == H3_ATTN_SM90 || (o->attn == H3_ATTN_AUTO && sm90_ok);
    br.smooth_v = o->smooth_v != 0;
    br.rotate_qk = o->rotate_qk == 1;
    br.fast_accum = o->fast_accum;
    int key_tile = br.use_sm90 ? h3k_attn_fp8_sm90_key_tile() : h3k_attn_fp8_mma_key_tile();
    h3_rope_omega(c, br.omega);

    memset(r, 0, sizeof *r);
    snprintf(r->device, sizeof r->device, "%.120s", gi->name); /* a found GPU's name is short */
    char kernel[16] = "";
    if (br.use_sm90) { /* the name's first word: which of the two Hopper kernels */
        const char *vn = h3k_attn_fp8_sm90_variant_name(br.smooth_v);
        snprintf(kernel, sizeof kernel, " %.*s", (int)strcspn(vn, ":"), vn);
    }
    snprintf(r->attn_kernel, sizeof r->attn_kernel, "%s%s (key tile %d)%s%s",
             br.use_sm90 ? "attn_fp8_sm90 (wgmma+TMA)" : "attn_fp8_mma (mma.sync m16n8k32)", kernel, key_tile,
             br.smooth_v ? ", V smoothed" : "", br.rotate_qk ? ", Q/K rotated" : "");
    h3r_gemm_desc(br.fp8_mask, o->fast_accum, r->gemm, sizeof r->gemm);

    if (gpu_check_fits(c, S, br.fp8_mask, err, errlen)) return -1;

    dev_bufs *d = &br.d;
    memset(d, 0, sizeof *d);
    dev_alloc_t allocs[MAX_ALLOCS];
    const int nalloc = h3r_plan_allocs(c, S, br.fp8_mask, d, allocs);
    size_t wbytes = 0, abytes = 0;
    CUDA_CHECK(cudaStreamCreate(&br.st));

    /* weights, once (FP8: each GEMM weight staged in BF16, quantised, freed) */
    char quant[96] = "", fp8_list[H3_GEMM_LIST_LEN];
    h3_gemm_list(br.fp8_mask, fp8_list, sizeof fp8_list);
    const int all8 = (br.fp8_mask & H3_FP8_ALL) == H3_FP8_ALL;
    if (br.fp8_mask)
        snprintf(quant, sizeof quant, " (%s%sGEMM weights quantised to e4m3 on the device%s)", all8 ? "" : fp8_list,
                 all8 ? "" : " ", h3r_blocks(&br) ? ", per 128x128 block" : "");
    fprintf(stderr, "uploading %.2f GB of weights to %s%s...\n", h3_param_count(c) * 2 / 1e9, gi->name, quant);
    for (int i = 0; i < nalloc; i++)
        if (allocs[i].weight && h3r_dev_alloc(allocs[i].p, allocs[i].bytes, &wbytes, err, errlen)) return -1;
    if (h3r_upload_weights(&br, blk, err, errlen)) return -1;
    size_t free0 = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&free0, &tot));

    /* inputs and activations */
    for (int i = 0; i < nalloc; i++)
        if (!allocs[i].weight && h3r_dev_alloc(allocs[i].p, allocs[i].bytes, &abytes, err, errlen)) return -1;
    CUDA_CHECK(cudaMemcpy(d->x, in->x, (size_t)S * C * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d->temb, in->temb, (size_t)c->temb * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d->tags, in->tags, (size_t)S * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d->pos, in->pos, (size_t)S * 12, cudaMemcpyHostToDevice));

    br.lt = h3_lt_create();
    CHECK(br.lt, "cuBLASLt initialisation failed");
    h3_lt_set_fast_accum(br.lt, o->fast_accum);

    /* The ops of one block run, in order (adaLN apart: once per timestep; the RoPE table: once per sequence). */
    int ops[OP_N];
    const int nops = h3r_block_ops(&br, OP_NORM1, OP_N, ops);

    cudaEvent_t ev[OP_N + 1];
    for (int i = 0; i <= OP_N; i++) CUDA_CHECK(cudaEventCreate(&ev[i]));
    const int R = o->repeat;
    double *t = calloc((size_t)R * (OP_N + 1), sizeof(double));
    CHECK(t, "out of host memory");
    /* the cached ops, timed alone: adaLN once per timestep, the RoPE table once per sequence */
    static const struct {
        int op, once;
    } cached[2] = {{OP_ADALN, H3_ONCE_TIMESTEP}, {OP_ROPE, H3_ONCE_SEQUENCE}};
    double cached_ms[2];
    for (int i = 0; i < 2; i++) cached_ms[i] = time_op_alone(&br, cached[i].op, R, ev[0], ev[1], t);
    fprintf(stderr, "running the block: %d warm-up + %d timed runs at %d tokens...\n", o->warmup, R, S);
    for (int it = 0; it < o->warmup + R; it++) {
        CUDA_CHECK(cudaEventRecord(ev[0], br.st));
        for (int j = 0; j < nops; j++) {
            h3r_run_op(&br, ops[j]);
            CUDA_CHECK(cudaEventRecord(ev[j + 1], br.st));
        }
        CUDA_CHECK(cudaStreamSynchronize(br.st));
        if (it < o->warmup) continue;
        float ms;
        for (int j = 0; j < nops; j++) {
            CUDA_CHECK(cudaEventElapsedTime(&ms, ev[j], ev[j + 1]));
            t[(size_t)j * R + (it - o->warmup)] = ms;
        }
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[nops]));
        t[(size_t)OP_N * R + (it - o->warmup)] = ms;
    }
    size_t free1 = 0;
    CUDA_CHECK(cudaMemGetInfo(&free1, &tot));
    r->peak_mem_gb = (double)(free0 - free1) / 1e9;
    double fl, by;
    h3_op_row *row;
    for (int i = 0; i < 2; i++) {
        op_work(c, S, br.fp8_mask, cached[i].op, &fl, &by);
        row = h3r_add_row(r, op_names[cached[i].op], cached_ms[i], fl, by);
        row->once = cached[i].once;
        row->ceiling = op_ceiling(gi, br.fp8_mask, fl, cached[i].op);
    }
    for (int j = 0; j < nops; j++) {
        op_work(c, S, br.fp8_mask, ops[j], &fl, &by);
        row = h3r_add_row(r, op_names[ops[j]], h3_median(t + (size_t)j * R, R), fl, by);
        row->ceiling = op_ceiling(gi, br.fp8_mask, fl, ops[j]);
    }
    r->total_ms = h3_median(t + (size_t)OP_N * R, R);

    /* The same block captured once as a CUDA graph and replayed: no launch
     * gaps between the ops, the figure a serving loop would see. */
    cudaGraph_t graph;
    cudaGraphExec_t gexec;
    CUDA_CHECK(cudaStreamBeginCapture(br.st, cudaStreamCaptureModeThreadLocal));
    for (int j = 0; j < nops; j++) h3r_run_op(&br, ops[j]);
    CUDA_CHECK(cudaStreamEndCapture(br.st, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&gexec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(gexec, br.st)); /* warm-up */
    for (int it = 0; it < R; it++) {
        CUDA_CHECK(cudaEventRecord(ev[0], br.st));
        CUDA_CHECK(cudaGraphLaunch(gexec, br.st));
        CUDA_CHECK(cudaEventRecord(ev[1], br.st));
        CUDA_CHECK(cudaEventSynchronize(ev[1]));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
        t[it] = ms;
    }
    r->graph_ms = h3_median(t, R);
    CUDA_CHECK(cudaGraphExecDestroy(gexec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    free(t);

    if (hook && hook->fn) {
        const h3_run_view view = {&br, key_tile};
        hook->fn(hook->ctx, &view);
    }
    if (out_host) {
        CUDA_CHECK(cudaMemcpy(out_host, d->out, (size_t)S * C * 2, cudaMemcpyDeviceToHost));
        if (h3_bf16_first_nonfinite(out_host, (size_t)S * C) >= 0) { /* main.c reports it: name where it began */
            const int op = h3r_first_nonfinite(&br);
            if (op >= 0) snprintf(r->nonfinite_stage, sizeof r->nonfinite_stage, "%s", op_names[op]);
        }
    }

    for (int i = OP_N; i >= 0; i--) CUDA_CHECK(cudaEventDestroy(ev[i]));
    h3_lt_destroy(br.lt);
    CUDA_CHECK(cudaStreamDestroy(br.st));
    for (int i = nalloc - 1; i >= 0; i--) CUDA_CHECK(cudaFree(*allocs[i].p));
    return 0;
}
