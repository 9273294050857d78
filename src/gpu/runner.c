/* runner.c — the GPU path of dit_block.
 *
 * Every stage writes its own buffer, so after the last timed run each stage's
 * input and output are still on the device and can be checked one by one.
 * gate_res1 and norm2_mod run as one fused kernel (one pass over x); its
 * timing row names both stages and both are checked at its two outputs. */
#include "runner.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "checker.h"
#include "cpu_ref.h"
#include "gemm_lt.h"
#include "kernels.h"

int gpu_probe(gpu_info *g)
{
    memset(g, 0, sizeof *g);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(g->name, sizeof g->name, "no CUDA GPU (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        (void)cudaGetLastError();
        return 0;
    }
    struct cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    snprintf(g->name, sizeof g->name, "%.80s (sm_%d%d, %d SMs, %.0f GB)", p.name, p.major, p.minor,
             p.multiProcessorCount, p.totalGlobalMem / 1e9);
    g->cc_major = p.major;
    g->cc_minor = p.minor;
    g->sms = p.multiProcessorCount;
    g->mem_bytes = p.totalGlobalMem;
    g->supported = h3k_device_supported();
    return 1;
}

/* The ops of one block, in order. */
enum { OP_ADALN, OP_NORM1, OP_QKV, OP_QUANT, OP_ATTN, OP_OUT, OP_RES1_NORM2, OP_FC1, OP_SWIGLU, OP_FC2, OP_RES2, OP_N };
static const char *op_names[OP_N] = {"adaln",    "norm1_mod", "qkv_gemm", "qk_norm_rope_quant",
                                     "attention", "out_gemm", "gate_res1+norm2_mod", "fc1_gemm",
                                     "swiglu",   "fc2_gemm",  "gate_res2"};

typedef struct {
    /* weights, [H3_T_*] */
    uint16_t *w[H3_T_COUNT];
    /* inputs */
    uint16_t *x;    // [S][C]
    float *temb;    // [T]
    int32_t *tags;  // [S]
    float *pos;     // [S][3]
    /* activations */
    uint16_t *mod;  // [M][6][C]
    uint16_t *a;    // [S][C]
    uint16_t *qkv;  // [S][3I]
    uint8_t *q8, *k8; // [H][S_pad][128]
    uint8_t *vt8;   // [H][128][S_pad]
    float *sq, *sk, *sv; // [H][G]
    uint16_t *O;    // [S][I]
    float *lse;     // [H][S]
    uint16_t *y1;   // [S][C]
    uint16_t *x1;   // [S][C]
    uint16_t *b;    // [S][C]
    uint16_t *g;    // [S][2F]
    uint16_t *u;    // [S][F]
    uint16_t *y2;   // [S][C]
    uint16_t *out;  // [S][C]
} dev_bufs;

static int dev_alloc(void **p, size_t bytes, size_t *total, char *err, size_t errlen)
{
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        snprintf(err, errlen, "out of device memory: %.2f GB more needed (allocated %.2f GB so far, %.2f GB free of %.2f GB); try a smaller --tokens",
                 bytes / 1e9, *total / 1e9, fr / 1e9, tot / 1e9);
        return -1;
    }
    *total += bytes;
    return 0;
}

typedef struct {
    const h3_config *cfg;
    int S, use_sm90;
    float omega[16];
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

static void gemm(block_run *br, const uint16_t *x, const uint16_t *W, uint16_t *y, int N, int K)
{
    char err[512];
    if (h3_lt_gemm_bf16(br->lt, x, W, y, br->S, N, K, br->st, err, sizeof err)) {
        fprintf(stderr, "dit_block: %s\n", err);
        exit(1);
    }
}

/* Enqueues one op; ev (may be NULL) is recorded after it. */
static void run_op(block_run *br, int op)
{
    const h3_config *c = br->cfg;
    const int S = br->S, C = c->hidden, H = c->heads, I = h3_attn_width(c), F = c->ffn;
    dev_bufs *d = &br->d;
    switch (op) {
    case OP_ADALN:
        LAUNCH(h3k_adaln(d->temb, d->w[H3_T_ADALN_W], d->w[H3_T_ADALN_B], h3_mod_width(c), c->temb, d->mod, br->st));
        break;
    case OP_NORM1:
        LAUNCH(h3k_rmsnorm_mod(d->x, d->w[H3_T_NORM1], d->mod, d->tags, S, C, c->eps, H3_SLOT_SHIFT_MSA,
                               H3_SLOT_SCALE_MSA, d->a, br->st));
        break;
    case OP_QKV: gemm(br, d->a, d->w[H3_T_QKV], d->qkv, 3 * I, C); break;
    case OP_QUANT:
        LAUNCH(h3k_qk_norm_rope_quant(d->qkv, d->pos, d->w[H3_T_QNORM], d->w[H3_T_KNORM], S, H, c->eps, br->omega,
                                      d->q8, d->k8, d->vt8, d->sq, d->sk, d->sv, br->st));
        break;
    case OP_ATTN:
        if (br->use_sm90)
            LAUNCH(h3k_attn_fp8_sm90(d->q8, d->k8, d->vt8, d->sq, d->sk, d->sv, S, H, d->O, d->lse, br->st));
        else
            LAUNCH(h3k_attn_fp8_mma(d->q8, d->k8, d->vt8, d->sq, d->sk, d->sv, S, H, d->O, d->lse, br->st));
        break;
    case OP_OUT: gemm(br, d->O, d->w[H3_T_OUT], d->y1, C, I); break;
    case OP_RES1_NORM2:
        LAUNCH(h3k_gate_residual_norm_mod(d->x, d->y1, d->mod, d->tags, S, C, H3_SLOT_GATE_MSA, d->x1,
                                          d->w[H3_T_NORM2], c->eps, H3_SLOT_SHIFT_MLP, H3_SLOT_SCALE_MLP, d->b,
                                          br->st));
        break;
    case OP_FC1: gemm(br, d->b, d->w[H3_T_FC1], d->g, 2 * F, C); break;
    case OP_SWIGLU: LAUNCH(h3k_swiglu(d->g, S, F, d->u, br->st)); break;
    case OP_FC2: gemm(br, d->u, d->w[H3_T_FC2], d->y2, C, F); break;
    case OP_RES2:
        LAUNCH(h3k_gate_residual(d->x1, d->y2, d->mod, d->tags, S, C, H3_SLOT_GATE_MLP, d->out, br->st));
        break;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Work per op, for the rate column: FLOPs of GEMMs and attention, minimum
 * bytes moved (each input read once, each output written once) otherwise. */
/* Work per op, for the rate column: FLOPs of GEMMs and attention
 * (config.c), minimum bytes moved (each input read once, each output written
 * once) for the memory-bound ones. */
static const int op_stage[OP_N] = {H3_STAGE_ADALN,    H3_STAGE_NORM1_MOD, H3_STAGE_QKV_GEMM, H3_STAGE_QK_NORM_ROPE_QUANT,
                                   H3_STAGE_ATTENTION, H3_STAGE_OUT_GEMM, H3_STAGE_GATE_RES1, H3_STAGE_FC1_GEMM,
                                   H3_STAGE_SWIGLU,   H3_STAGE_FC2_GEMM,  H3_STAGE_GATE_RES2};
static void op_work(const h3_config *c, int S, int op, double *flops, double *bytes)
{
    const double C = c->hidden, I = h3_attn_width(c), F = c->ffn, T = c->temb, MOD = h3_mod_width(c),
                 Sp = h3_pad_tokens(S);
    *flops = h3_stage_flops(c, S, op_stage[op]);
    *bytes = 0;
    switch (op) {
    case OP_ADALN: *flops = 0; *bytes = MOD * T * 2 + MOD * 2 * 2; break; /* a GEMV: memory-bound */
    case OP_NORM1: *bytes = S * C * 2 * 2; break;
    case OP_QUANT: *bytes = S * 3 * I * 2 + 3 * Sp * I; break;
    case OP_RES1_NORM2: *bytes = S * C * 2 * 4; break;
    case OP_SWIGLU: *bytes = S * 3 * F * 2; break;
    case OP_RES2: *bytes = S * C * 2 * 3; break;
    default: break;
    }
}

static void *host_copy(const void *dptr, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    CHECK(h, "out of host memory copying %zu bytes back from the GPU", bytes);
    CUDA_CHECK(cudaMemcpy(h, dptr, bytes, cudaMemcpyDeviceToHost));
    return h;
}

static void run_checks(const cli_options *o, block_run *br, const h3_block *blk, const h3_inputs *in, report *r,
                       int key_tile)
{
    const h3_config *c = br->cfg;
    const int S = br->S, C = c->hidden, I = h3_attn_width(c), F = c->ffn, H = c->heads;
    const size_t Sp = h3_pad_tokens(S), G = h3_groups(S);
    dev_bufs *d = &br->d;
    int *rows = malloc(sizeof(int) * (size_t)(o->sample < S ? o->sample : S) + 64);
    int want_att = o->sample / 2 > 16 ? o->sample / 2 : (o->sample < 16 ? o->sample : 16);
    int *att_rows = malloc(sizeof(int) * (size_t)(want_att < S ? want_att : S) + 64);
    CHECK(rows && att_rows, "out of host memory");
    h3_check_ctx k = {.cfg = c, .blk = blk, .in = in, .S = S};
    k.rows = rows;
    k.nrows = h3_sample_rows(in, o->sample, rows);
    k.att_rows = att_rows;
    k.natt = h3_sample_rows(in, want_att, att_rows);
    fprintf(stderr, "checking every stage against the CPU reference (%d sampled rows, %d for attention)...\n",
            k.nrows, k.natt);

    uint16_t *mod = host_copy(d->mod, (size_t)h3_mod_width(c) * 2);
    h3_check_adaln(r, &k, mod);
    uint16_t *a = host_copy(d->a, (size_t)S * C * 2);
    h3_check_rmsnorm_mod(r, &k, "norm1_mod", in->x, blk->w[H3_T_NORM1], mod, H3_SLOT_SHIFT_MSA, H3_SLOT_SCALE_MSA, a);
    uint16_t *qkv = host_copy(d->qkv, (size_t)S * 3 * I * 2);
    h3_check_gemm(r, &k, "qkv_gemm", a, blk->w[H3_T_QKV], 3 * I, C, qkv);
    free(a);
    uint8_t *q8 = host_copy(d->q8, (size_t)H * Sp * 128), *k8 = host_copy(d->k8, (size_t)H * Sp * 128),
            *vt8 = host_copy(d->vt8, (size_t)H * Sp * 128);
    float *sq = host_copy(d->sq, H * G * 4), *sk = host_copy(d->sk, H * G * 4), *sv = host_copy(d->sv, H * G * 4);
    h3_check_qk_quant(r, &k, qkv, q8, k8, vt8, sq, sk, sv);
    uint16_t *O = host_copy(d->O, (size_t)S * I * 2);
    float *lse = host_copy(d->lse, (size_t)H * S * 4);
    h3_check_attention(r, &k, key_tile, qkv, q8, k8, vt8, sq, sk, sv, O, lse);
    free(qkv);
    free(q8);
    free(k8);
    free(vt8);
    free(sq);
    free(sk);
    free(sv);
    free(lse);
    uint16_t *y1 = host_copy(d->y1, (size_t)S * C * 2);
    h3_check_gemm(r, &k, "out_gemm", O, blk->w[H3_T_OUT], C, I, y1);
    free(O);
    uint16_t *x1 = host_copy(d->x1, (size_t)S * C * 2);
    h3_check_gate_residual(r, &k, "gate_res1", in->x, y1, mod, H3_SLOT_GATE_MSA, x1);
    free(y1);
    uint16_t *b = host_copy(d->b, (size_t)S * C * 2);
    h3_check_rmsnorm_mod(r, &k, "norm2_mod", x1, blk->w[H3_T_NORM2], mod, H3_SLOT_SHIFT_MLP, H3_SLOT_SCALE_MLP, b);
    uint16_t *g = host_copy(d->g, (size_t)S * 2 * F * 2);
    h3_check_gemm(r, &k, "fc1_gemm", b, blk->w[H3_T_FC1], 2 * F, C, g);
    free(b);
    uint16_t *u = host_copy(d->u, (size_t)S * F * 2);
    h3_check_swiglu(r, &k, g, u);
    free(g);
    uint16_t *y2 = host_copy(d->y2, (size_t)S * C * 2);
    h3_check_gemm(r, &k, "fc2_gemm", u, blk->w[H3_T_FC2], C, F, y2);
    free(u);
    uint16_t *out = host_copy(d->out, (size_t)S * C * 2);
    h3_check_gate_residual(r, &k, "gate_res2", x1, y2, mod, H3_SLOT_GATE_MLP, out);
    free(x1);
    free(y2);
    if (o->check == CHECK_FULL) {
        fprintf(stderr, "running the CPU's own chain over all %d rows...\n", S);
        h3_check_full(r, &k, key_tile, out, !o->quiet);
    }
    free(out);
    free(mod);
    free(rows);
    free(att_rows);
}

int gpu_run_block(const cli_options *o, const gpu_info *gi, const h3_block *blk, const h3_inputs *in, report *r,
                  uint16_t *out_host, int *user_error, char *err, size_t errlen)
{
    const h3_config *c = &blk->cfg;
    const int S = in->S, C = c->hidden, H = c->heads, I = h3_attn_width(c), F = c->ffn;
    const size_t Sp = h3_pad_tokens(S), G = h3_groups(S);
    *user_error = 0;

    block_run br = {.cfg = c, .S = S};
    int sm90_ok = h3k_attn_fp8_sm90_available();
    if (o->attn == ATTN_SM90 && !sm90_ok) {
        snprintf(err, errlen, "--attn sm90: the Hopper kernel needs an sm_90 GPU and a build with sm_90a (device: %s)",
                 gi->name);
        *user_error = 1;
        return -1;
    }
    br.use_sm90 = o->attn == ATTN_SM90 || (o->attn == ATTN_AUTO && sm90_ok);
    int key_tile = br.use_sm90 ? h3k_attn_fp8_sm90_key_tile() : h3k_attn_fp8_mma_key_tile();
    cpu_rope_omega(c, br.omega);

    snprintf(r->path, sizeof r->path, "gpu");
    snprintf(r->device, sizeof r->device, "%s", gi->name);
    snprintf(r->attn_kernel, sizeof r->attn_kernel, "%s (key tile %d)",
             br.use_sm90 ? "attn_fp8_sm90 (wgmma+TMA)" : "attn_fp8_mma (mma.sync m16n8k32)", key_tile);
    snprintf(r->gemm, sizeof r->gemm, "bf16");
    r->tokens = S;
    r->heads = H;
    r->hidden = C;
    r->repeat = o->repeat;

    /* weights, once */
    h3_tensor_spec specs[H3_T_COUNT];
    h3_tensor_specs(c, specs);
    size_t wbytes = 0, abytes = 0;
    dev_bufs *d = &br.d;
    fprintf(stderr, "uploading %.2f GB of weights to %s...\n", h3_param_count(c) * 2 / 1e9, gi->name);
    for (int i = 0; i < H3_T_COUNT; i++) {
        size_t n = (size_t)specs[i].shape[0] * (specs[i].rank == 2 ? (size_t)specs[i].shape[1] : 1);
        if (dev_alloc((void **)&d->w[i], n * 2, &wbytes, err, errlen)) return -1;
        CUDA_CHECK(cudaMemcpy(d->w[i], blk->w[i], n * 2, cudaMemcpyHostToDevice));
    }
    size_t free0 = 0, tot = 0;
    CUDA_CHECK(cudaMemGetInfo(&free0, &tot));

    /* inputs and activations */
    struct { void **p; size_t bytes; } allocs[] = {
        {(void **)&d->x, (size_t)S * C * 2},       {(void **)&d->temb, (size_t)c->temb * 4},
        {(void **)&d->tags, (size_t)S * 4},        {(void **)&d->pos, (size_t)S * 12},
        {(void **)&d->mod, (size_t)h3_mod_width(c) * 2},
        {(void **)&d->a, (size_t)S * C * 2},       {(void **)&d->qkv, (size_t)S * 3 * I * 2},
        {(void **)&d->q8, (size_t)H * Sp * 128},   {(void **)&d->k8, (size_t)H * Sp * 128},
        {(void **)&d->vt8, (size_t)H * Sp * 128},  {(void **)&d->sq, H * G * 4},
        {(void **)&d->sk, H * G * 4},              {(void **)&d->sv, H * G * 4},
        {(void **)&d->O, (size_t)S * I * 2},       {(void **)&d->lse, (size_t)H * S * 4},
        {(void **)&d->y1, (size_t)S * C * 2},      {(void **)&d->x1, (size_t)S * C * 2},
        {(void **)&d->b, (size_t)S * C * 2},       {(void **)&d->g, (size_t)S * 2 * F * 2},
        {(void **)&d->u, (size_t)S * F * 2},       {(void **)&d->y2, (size_t)S * C * 2},
        {(void **)&d->out, (size_t)S * C * 2},
    };
    const int nalloc = (int)(sizeof allocs / sizeof allocs[0]);
    for (int i = 0; i < nalloc; i++)
        if (dev_alloc(allocs[i].p, allocs[i].bytes, &abytes, err, errlen)) return -1;
    CUDA_CHECK(cudaMemcpy(d->x, in->x, (size_t)S * C * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d->temb, in->temb, (size_t)c->temb * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d->tags, in->tags, (size_t)S * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d->pos, in->pos, (size_t)S * 12, cudaMemcpyHostToDevice));

    CUDA_CHECK(cudaStreamCreate(&br.st));
    br.lt = h3_lt_create();
    CHECK(br.lt, "cuBLASLt initialisation failed");

    cudaEvent_t ev[OP_N + 1];
    for (int i = 0; i <= OP_N; i++) CUDA_CHECK(cudaEventCreate(&ev[i]));
    const int R = o->repeat;
    double *t = calloc((size_t)R * (OP_N + 1), sizeof(double));
    CHECK(t, "out of host memory");
    fprintf(stderr, "running the block: %d warm-up + %d timed runs at %d tokens...\n", o->warmup, R, S);
    for (int it = 0; it < o->warmup + R; it++) {
        CUDA_CHECK(cudaEventRecord(ev[0], br.st));
        for (int op = 0; op < OP_N; op++) {
            run_op(&br, op);
            CUDA_CHECK(cudaEventRecord(ev[op + 1], br.st));
        }
        CUDA_CHECK(cudaStreamSynchronize(br.st));
        if (it < o->warmup) continue;
        float ms;
        for (int op = 0; op < OP_N; op++) {
            CUDA_CHECK(cudaEventElapsedTime(&ms, ev[op], ev[op + 1]));
            t[(size_t)op * R + (it - o->warmup)] = ms;
        }
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[OP_N]));
        t[(size_t)OP_N * R + (it - o->warmup)] = ms;
    }
    size_t free1 = 0;
    CUDA_CHECK(cudaMemGetInfo(&free1, &tot));
    r->peak_mem_gb = (double)(free0 - free1) / 1e9;
    for (int op = 0; op < OP_N; op++) {
        double fl, by;
        op_work(c, S, op, &fl, &by);
        report_add_row(r, op_names[op], median(t + (size_t)op * R, R), fl, by);
    }
    r->total_ms = median(t + (size_t)OP_N * R, R);

    /* The same block captured once as a CUDA graph and replayed: no launch
     * gaps between the ops, the figure a serving loop would see. */
    cudaGraph_t graph;
    cudaGraphExec_t gexec;
    CUDA_CHECK(cudaStreamBeginCapture(br.st, cudaStreamCaptureModeThreadLocal));
    for (int op = 0; op < OP_N; op++) run_op(&br, op);
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
    r->graph_ms = median(t, R);
    CUDA_CHECK(cudaGraphExecDestroy(gexec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    free(t);

    if (o->check != CHECK_NONE) run_checks(o, &br, blk, in, r, key_tile);
    if (out_host) CUDA_CHECK(cudaMemcpy(out_host, d->out, (size_t)S * C * 2, cudaMemcpyDeviceToHost));

    for (int i = OP_N; i >= 0; i--) CUDA_CHECK(cudaEventDestroy(ev[i]));
    h3_lt_destroy(br.lt);
    CUDA_CHECK(cudaStreamDestroy(br.st));
    for (int i = nalloc - 1; i >= 0; i--) CUDA_CHECK(cudaFree(*allocs[i].p));
    for (int i = H3_T_COUNT - 1; i >= 0; i--) CUDA_CHECK(cudaFree(d->w[i]));
    return 0;
}
