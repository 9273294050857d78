/* sp.c — dit_block --gpus P: the block sequence-parallel over P ranks
 * (Ulysses), one process, one host thread driving every GPU.
 *
 * Rank r holds a contiguous run of whole 128-token groups (groups
 * [r G / P, (r+1) G / P), the ragged last group on the last rank) for every
 * stage but attention: norm1_mod, qkv_gemm and qk_norm_rope_quant run on its
 * S_r tokens exactly as on one GPU (a group never straddles two ranks, so
 * every per-(head, group) FP8 scale is the one the single GPU computes). An
 * all-to-all then turns the sequence-sharded FP8 q8/k8/vt8 and their scales
 * into head-sharded ones: rank j receives heads [j H/P, (j+1) H/P) of every
 * token, in FP8 (half the bytes of BF16). Attention runs on H/P heads over
 * all S tokens; the inverse all-to-all returns each rank the O rows of its
 * tokens for every head; the rest of the block is local again.
 *
 * V smoothing (on unless --smooth-v off): V's mean is over all S tokens, and
 * each rank quantises only its own, so before qk_norm_rope_quant every rank
 * takes the column sums of its tokens (h3k_v_colsum, double), sends them to
 * every rank (P x 56 KB at H = 56), and adds them up in rank order
 * (h3k_v_mean_parts): all ranks get the same mean. It equals --gpus 1's
 * except where splitting a column's double sum at the rank boundaries
 * changes its rounding (rare: double sums of BF16 values; test_gpu_ops
 * allows 1 ulp in 1% of the means, test_gpu_sp.sh compares the outputs
 * within its tolerance).
 *
 * Every message is a contiguous slice of the sender's buffer (heads are the
 * outer dimension of q8/k8/vt8/scales, tokens of O); the receiver lands it
 * in a staging buffer and places it with one 2D copy (cudaMemcpy2DAsync).
 * Transport: NCCL ncclSend/ncclRecv in one group per exchange (NCCL loaded
 * at run time with dlopen, so dit_block links and runs without it), or, with
 * --sp-one-device, plain device copies: every rank then lives on GPU 0 and
 * runs after the other on one stream, which checks the sharding and the
 * layouts on one GPU (its times are sums over ranks, not a speed-up).
 *
 * Timing: each phase bracketed by events on every rank's stream; a phase's
 * time is the slowest rank's. Block total: the slowest rank's start to end. */
#include <dlfcn.h>
#include <string.h>

#include "kernels.h"
#include "numerics.h"
#include "runner_internal.h"

#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
#define H3_HAVE_NCCL_H 1
#endif
#endif

#define SP_MAX 8

/* ---------------- NCCL, resolved at run time ---------------- */
#ifdef H3_HAVE_NCCL_H
typedef struct {
    void *lib;
    ncclResult_t (*init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*destroy)(ncclComm_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    const char *(*error_string)(ncclResult_t);
} nccl_api;

static int nccl_load(nccl_api *n, char *err, size_t errlen)
{
    const char *env = getenv("H3_NCCL_LIB");
    const char *names[] = {env, "libnccl.so.2", "libnccl.so"};
    for (int i = 0; i < 3 && !n->lib; i++)
        if (names[i] && *names[i]) n->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        snprintf(err, errlen, "--gpus: cannot load NCCL (libnccl.so.2: %s); put it on LD_LIBRARY_PATH or set H3_NCCL_LIB",
                 dlerror());
        return -1;
    }
#define SYM(field, name)                                                                               \
    if (!(*(void **)&n->field = dlsym(n->lib, name))) {                                              \
        snprintf(err, errlen, "--gpus: NCCL library has no %s", name);                                \
        return -1;                                                                                    \
    }
    SYM(init_all, "ncclCommInitAll");
    SYM(destroy, "ncclCommDestroy");
    SYM(group_start, "ncclGroupStart");
    SYM(group_end, "ncclGroupEnd");
    SYM(send, "ncclSend");
    SYM(recv, "ncclRecv");
    SYM(error_string, "ncclGetErrorString");
#undef SYM
    return 0;
}
#define NCCL_CHECK(n, call)                                                                            \
    do {                                                                                               \
        ncclResult_t r_ = (call);                                                                      \
        if (r_ != ncclSuccess) {                                                                       \
            fprintf(stderr, "dit_block: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, (n)->error_string(r_)); \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)
#endif

/* ---------------- ranks ---------------- */
typedef struct {
    int dev, tok0, S_r, g0, ng;
    block_run br;
    dev_alloc_t allocs[MAX_ALLOCS];
    int nalloc;
    /* head-sharded attention operands and outputs: heads [rank Hl, (rank+1) Hl) */
    uint8_t *aq8, *ak8, *avt8; // [Hl][S_pad][128], [Hl][S_pad][128], [Hl][128][S_pad]
    float *asq, *ask, *asv;    // [Hl][G]
    uint16_t *aO;              // [S][Hl*128]
    float *alse;               // [Hl][S]
    uint8_t *stage_qkv;        // from each peer: its q8 | k8 | vt8 | sq | sk | sv pieces for our heads
    uint16_t *stage_o;         // from each peer: its O rows for our tokens, [S_r][Hl*128]
    double *vsum;              // V smoothing: our tokens' column sums of V [H*128]
    double *vsums;             // every rank's vsum, in rank order [P][H*128]
    size_t off_qkv[SP_MAX], off_o[SP_MAX]; /* byte offsets of each peer's region */
    cudaEvent_t ev[8];
#ifdef H3_HAVE_NCCL_H
    ncclComm_t comm;
#endif
} sp_rank;

typedef struct {
    const h3_config *cfg;
    int P, Hl, S, G, one_device, smooth_v;
    sp_rank rk[SP_MAX];
#ifdef H3_HAVE_NCCL_H
    nccl_api nccl;
#endif
    double bytes_a2a_qkv, bytes_a2a_o; /* bytes each rank sends to others, per exchange (the largest rank) */
} sp_ctx;

/* QKV message from rank r to rank j: the six pieces, sizes in bytes. */
static void qkv_pieces(const sp_ctx *x, int r, int j, const void *src[6], size_t bytes[6])
{
    const sp_rank *a = &x->rk[r];
    const dev_bufs *d = &a->br.d;
    const size_t Hl = x->Hl, Sp = (size_t)a->ng * 128, ng = a->ng;
    bytes[0] = bytes[1] = bytes[2] = Hl * Sp * 128;
    bytes[3] = bytes[4] = bytes[5] = Hl * ng * 4;
    src[0] = d->q8 + j * bytes[0];
    src[1] = d->k8 + j * bytes[1];
    src[2] = d->vt8 + j * bytes[2];
    src[3] = d->sq + j * Hl * ng;
    src[4] = d->sk + j * Hl * ng;
    src[5] = d->sv + j * Hl * ng;
}

/* Bytes of the QKV message rank r sends to each rank (the six pieces). */
static size_t qkv_msg_bytes(const sp_ctx *x, int r)
{
    const void *src[6];
    size_t bytes[6], n = 0;
    qkv_pieces(x, r, 0, src, bytes);
    for (int k = 0; k < 6; k++) n += bytes[k];
    return n;
}

/* Bytes of the O message rank j sends to rank r: r's rows of j's heads. */
static size_t o_msg_bytes(const sp_ctx *x, int r) { return (size_t)x->rk[r].S_r * x->Hl * 128 * 2; }

/* One message: a device copy (same GPU) or an NCCL send/recv pair (inside a group). */
static void xfer(sp_ctx *x, int from, const void *src, int to, void *dst, size_t bytes)
{
    sp_rank *a = &x->rk[from], *b = &x->rk[to];
    if (x->one_device || from == to) {
        CUDA_CHECK(cudaSetDevice(b->dev));
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->br.st));
        return;
    }
#ifdef H3_HAVE_NCCL_H
    NCCL_CHECK(&x->nccl, x->nccl.send(src, bytes, ncclUint8, to, a->comm, a->br.st));
    NCCL_CHECK(&x->nccl, x->nccl.recv(dst, bytes, ncclUint8, from, b->comm, b->br.st));
#else
    (void)a;
    fprintf(stderr, "dit_block: --gpus: built without nccl.h\n");
    exit(1);
#endif
}

static void group(sp_ctx *x, int start)
{
#ifdef H3_HAVE_NCCL_H
    if (!x->one_device && x->P > 1) NCCL_CHECK(&x->nccl, start ? x->nccl.group_start() : x->nccl.group_end());
#else
    (void)x, (void)start;
#endif
}

/* Sequence-sharded FP8 q/k/v -> head-sharded, then placed. */
static void a2a_qkv(sp_ctx *x)
{
    group(x, 1);
    for (int r = 0; r < x->P; r++)
        for (int j = 0; j < x->P; j++) {
            const void *src[6];
            size_t bytes[6];
            qkv_pieces(x, r, j, src, bytes);
            size_t off = x->rk[j].off_qkv[r];
            for (int k = 0; k < 6; k++) {
                xfer(x, r, src[k], j, x->rk[j].stage_qkv + off, bytes[k]);
                off += bytes[k];
            }
        }
    group(x, 0);
    const size_t Sp = (size_t)x->G * 128, Hl = x->Hl;
    for (int j = 0; j < x->P; j++) {
        sp_rank *b = &x->rk[j];
        CUDA_CHECK(cudaSetDevice(b->dev));
        for (int r = 0; r < x->P; r++) {
            const sp_rank *a = &x->rk[r];
            const size_t sp_r = (size_t)a->ng * 128;
            const uint8_t *s = b->stage_qkv + b->off_qkv[r];
            cudaStream_t st = b->br.st;
            /* q8, k8: Hl rows (heads) of sp_r * 128 bytes into [Hl][S_pad][128] at token tok0 */
            CUDA_CHECK(cudaMemcpy2DAsync(b->aq8 + (size_t)a->tok0 * 128, Sp * 128, s, sp_r * 128, sp_r * 128, Hl,
                                         cudaMemcpyDeviceToDevice, st));
            s += Hl * sp_r * 128;
            CUDA_CHECK(cudaMemcpy2DAsync(b->ak8 + (size_t)a->tok0 * 128, Sp * 128, s, sp_r * 128, sp_r * 128, Hl,
                                         cudaMemcpyDeviceToDevice, st));
            s += Hl * sp_r * 128;
            /* vt8: Hl * 128 rows (head, dim) of sp_r bytes into [Hl][128][S_pad] at column tok0 */
            CUDA_CHECK(cudaMemcpy2DAsync(b->avt8 + a->tok0, Sp, s, sp_r, sp_r, Hl * 128, cudaMemcpyDeviceToDevice, st));
            s += Hl * 128 * sp_r;
            float *dsc[3] = {b->asq, b->ask, b->asv};
            for (int k = 0; k < 3; k++) { /* scales: Hl rows of ng floats into [Hl][G] at column g0 */
                CUDA_CHECK(cudaMemcpy2DAsync(dsc[k] + a->g0, (size_t)x->G * 4, s, (size_t)a->ng * 4, (size_t)a->ng * 4, Hl,
                                             cudaMemcpyDeviceToDevice, st));
                s += Hl * a->ng * 4;
            }
        }
    }
}

/* Head-sharded O -> each rank's tokens, every head, in [S_r][H*128]. */
static void a2a_o(sp_ctx *x)
{
    const size_t Hl = x->Hl, H = (size_t)x->cfg->heads;
    group(x, 1);
    for (int j = 0; j < x->P; j++)
        for (int r = 0; r < x->P; r++) {
            const sp_rank *b = &x->rk[r];
            xfer(x, j, x->rk[j].aO + (size_t)b->tok0 * Hl * 128, r, x->rk[r].stage_o + x->rk[r].off_o[j] / 2,
                 o_msg_bytes(x, r));
        }
    group(x, 0);
    for (int r = 0; r < x->P; r++) {
        sp_rank *b = &x->rk[r];
        CUDA_CHECK(cudaSetDevice(b->dev));
        for (int j = 0; j < x->P; j++)
            CUDA_CHECK(cudaMemcpy2DAsync(b->br.d.O + (size_t)j * Hl * 128, H * 128 * 2, b->stage_o + b->off_o[j] / 2,
                                         Hl * 128 * 2, Hl * 128 * 2, (size_t)b->S_r, cudaMemcpyDeviceToDevice,
                                         b->br.st));
    }
}

/* V smoothing: the mean over all ranks' tokens into every rank's vmu. */
static void vmean_all(sp_ctx *x)
{
    const int H = x->cfg->heads, I = H * 128;
    for (int r = 0; r < x->P; r++) {
        sp_rank *a = &x->rk[r];
        CUDA_CHECK(cudaSetDevice(a->dev));
        LAUNCH(h3k_v_colsum(a->br.d.qkv + H3_QKV_V_OFFSET, 3L * I, H3_QKV_HEAD_STRIDE, a->S_r, H, a->vsum, a->br.st));
    }
    group(x, 1);
    for (int r = 0; r < x->P; r++)
        for (int j = 0; j < x->P; j++) xfer(x, r, x->rk[r].vsum, j, x->rk[j].vsums + (size_t)r * I, (size_t)I * 8);
    group(x, 0);
    for (int j = 0; j < x->P; j++) {
        sp_rank *b = &x->rk[j];
        CUDA_CHECK(cudaSetDevice(b->dev));
        LAUNCH(h3k_v_mean_parts(b->vsums, x->P, H, x->S, b->br.d.vmu, b->br.st));
    }
}

/* The phases of one block run. */
enum { PH_PRE, PH_A2A_QKV, PH_ATTN, PH_A2A_O, PH_POST, PH_N };
static const char *const ph_names[PH_N] = {"norm1_mod+qkv_gemm+qk_norm_rope_quant", "all_to_all_qkv (fp8)",
                                           "attention", "all_to_all_o (bf16)",
                                           "out_gemm+gate_res1+norm2_mod+fc1_gemm+swiglu+fc2_gemm+gate_res2"};

static void mark(sp_ctx *x, int k)
{
    for (int r = 0; r < x->P; r++) {
        CUDA_CHECK(cudaSetDevice(x->rk[r].dev));
        CUDA_CHECK(cudaEventRecord(x->rk[r].ev[k], x->rk[r].br.st));
    }
}

static void run_block(sp_ctx *x)
{
    mark(x, 0);
    for (int r = 0; r < x->P; r++) {
        CUDA_CHECK(cudaSetDevice(x->rk[r].dev));
        h3r_run_op(&x->rk[r].br, OP_NORM1);
        h3r_run_op(&x->rk[r].br, OP_QKV);
    }
    if (x->smooth_v) vmean_all(x);
    for (int r = 0; r < x->P; r++) {
        CUDA_CHECK(cudaSetDevice(x->rk[r].dev));
        h3r_run_op(&x->rk[r].br, OP_QUANT);
    }
    mark(x, 1);
    a2a_qkv(x);
    mark(x, 2);
    for (int j = 0; j < x->P; j++) {
        sp_rank *b = &x->rk[j];
        CUDA_CHECK(cudaSetDevice(b->dev));
        /* our heads' part of V's mean (the same on every rank) */
        const float *vmu = x->smooth_v ? b->br.d.vmu + (size_t)j * x->Hl * 128 : NULL;
        int rc = b->br.use_sm90 ? h3k_attn_fp8_sm90(b->aq8, b->ak8, b->avt8, b->asq, b->ask, b->asv, vmu, x->S,
                                                    x->Hl, b->aO, b->alse, b->br.st)
                                : h3k_attn_fp8_mma(b->aq8, b->ak8, b->avt8, b->asq, b->ask, b->asv, vmu, x->S,
                                                   x->Hl, b->aO, b->alse, b->br.st);
        if (rc) {
            fprintf(stderr, "dit_block: attention launch failed on rank %d: %s\n", j, cudaGetErrorString((cudaError_t)rc));
            exit(1);
        }
    }
    mark(x, 3);
    a2a_o(x);
    mark(x, 4);
    for (int r = 0; r < x->P; r++) {
        CUDA_CHECK(cudaSetDevice(x->rk[r].dev));
        int ops[OP_N];
        const int nops = h3r_block_ops(&x->rk[r].br, OP_OUTQ, OP_N, ops);
        for (int j = 0; j < nops; j++) h3r_run_op(&x->rk[r].br, ops[j]);
    }
    mark(x, 5);
}

int gpu_run_block_sp(const h3_run_params *o, const gpu_info *gi, const h3_block *blk, const h3_inputs *in,
                     h3_run_result *r, uint16_t *out_host, int *user_error, char *err, size_t errlen)
{
    const h3_config *c = &blk->cfg;
    const int P = o->gpus, S = in->S, C = c->hidden, H = c->heads, G = h3_groups(S);
    *user_error = 1;
    if (P < 1 || P > SP_MAX || H % P) {
        snprintf(err, errlen, "--gpus %d: must divide the head count %d (and be 1..%d)", P, H, SP_MAX);
        return -1;
    }
    if (G < P) {
        snprintf(err, errlen, "--gpus %d: %d tokens are only %d groups of 128; each rank needs at least one", P, S, G);
        return -1;
    }
    int ndev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&ndev));
    if (!o->sp_one_device && ndev < P) {
        snprintf(err, errlen, "--gpus %d: only %d GPU(s) visible (--sp-one-device runs the %d ranks on one GPU)", P, ndev, P);
        return -1;
    }
    if (o->attn == H3_ATTN_SM90 && !h3k_attn_fp8_sm90_available()) {
        snprintf(err, errlen, "--attn sm90: the Hopper kernel needs an sm_90 GPU and a build with sm_90a (device: %s)",
                 gi->name);
        return -1;
    }
    if (o->fp8_mask & H3_FP8_BLOCKS) {
        snprintf(err, errlen, "--gpus %d: the FP8 GEMMs' block scales are not yet tested sequence parallel", P);
        return -1;
    }
    *user_error = 0;

    sp_ctx *x = calloc(1, sizeof *x);
    CHECK(x, "out of host memory");
    x->cfg = c;
    x->P = P;
    x->Hl = H / P;
    x->S = S;
    x->G = G;
    x->one_device = o->sp_one_device;
    x->smooth_v = o->smooth_v != 0;
    const int fp8_mask = o->fp8_mask; /* every rank runs the same GEMM precisions */
    const int use_sm90 = o->attn == H3_ATTN_SM90 || (o->attn == H3_ATTN_AUTO && h3k_attn_fp8_sm90_available());
    const size_t Sp = (size_t)G * 128, Hl = x->Hl;
#ifdef H3_HAVE_NCCL_H
    if (!x->one_device && P > 1 && nccl_load(&x->nccl, err, errlen)) {
        *user_error = 1;
        return -1;
    }
#else
    if (!x->one_device && P > 1) {
        snprintf(err, errlen, "--gpus %d: this build has no NCCL support (nccl.h not found at build time); --sp-one-device works", P);
        *user_error = 1;
        return -1;
    }
#endif
    fprintf(stderr, "sequence parallel over %d rank(s)%s: %d heads per rank, token groups per rank:", P,
            x->one_device ? " on GPU 0 (--sp-one-device: ranks run one after another)" : "", x->Hl);
    cudaStream_t shared_st = NULL;
    h3_lt *shared_lt = NULL;
    for (int rr = 0; rr < P; rr++) {
        sp_rank *a = &x->rk[rr];
        a->dev = x->one_device ? 0 : rr;
        a->g0 = (int)((long)G * rr / P);
        a->ng = (int)((long)G * (rr + 1) / P) - a->g0;
        a->tok0 = a->g0 * 128;
        a->S_r = (rr == P - 1 ? S : (a->g0 + a->ng) * 128) - a->tok0;
        fprintf(stderr, " %d", a->ng);
        CUDA_CHECK(cudaSetDevice(a->dev));
        block_run *br = &a->br;
        br->cfg = c;
        br->S = a->S_r;
        br->fp8_mask = fp8_mask;
        br->use_sm90 = use_sm90;
        br->smooth_v = x->smooth_v;
        br->rotate_qk = o->rotate_qk == 1; /* each rank rotates its own tokens' q and k: the map is per token */
        br->vmu_given = 1; /* vmean_all sets vmu before OP_QUANT */
        br->fast_accum = o->fast_accum;
        h3_rope_omega(c, br->omega);
        if (x->one_device && rr > 0) {
            br->st = shared_st;
            br->lt = shared_lt;
        } else {
            CUDA_CHECK(cudaStreamCreate(&br->st));
            br->lt = h3_lt_create();
            CHECK(br->lt, "cuBLASLt initialisation failed on device %d", a->dev);
            h3_lt_set_fast_accum(br->lt, o->fast_accum);
            shared_st = br->st;
            shared_lt = br->lt;
        }
        a->nalloc = h3r_plan_allocs(c, a->S_r, fp8_mask, &br->d, a->allocs);
        size_t wb = 0, ab = 0;
        for (int i = 0; i < a->nalloc; i++) {
            if (a->allocs[i].weight && x->one_device && rr > 0) continue; /* shares rank 0's weights */
            if (h3r_dev_alloc(a->allocs[i].p, a->allocs[i].bytes, a->allocs[i].weight ? &wb : &ab, err, errlen))
                return -1;
        }
        if (x->one_device && rr > 0) {
            const dev_bufs *d0 = &x->rk[0].br.d;
            memcpy(br->d.w, d0->w, sizeof d0->w);
            memcpy(br->d.w8, d0->w8, sizeof d0->w8);
            memcpy(br->d.ws, d0->ws, sizeof d0->ws);
        } else if (h3r_upload_weights(br, blk, err, errlen)) {
            return -1;
        }
        /* this rank's inputs */
        CUDA_CHECK(cudaMemcpy(br->d.x, in->x + (size_t)a->tok0 * C, (size_t)a->S_r * C * 2, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(br->d.temb, in->temb, (size_t)c->temb * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(br->d.tags, in->tags + a->tok0, (size_t)a->S_r * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(br->d.pos, in->pos + (size_t)a->tok0 * 3, (size_t)a->S_r * 12, cudaMemcpyHostToDevice));
        /* head-sharded attention buffers and staging */
        size_t t = 0;
        void **hb[10] = {(void **)&a->aq8, (void **)&a->ak8, (void **)&a->avt8, (void **)&a->asq,
                         (void **)&a->ask, (void **)&a->asv, (void **)&a->aO,  (void **)&a->alse,
                         (void **)&a->vsum, (void **)&a->vsums};
        const size_t hbytes[10] = {Hl * Sp * 128, Hl * Sp * 128, Hl * Sp * 128, Hl * G * 4, Hl * G * 4, Hl * G * 4,
                                   (size_t)S * Hl * 128 * 2, Hl * S * 4, (size_t)H * 128 * 8,
                                   (size_t)P * H * 128 * 8};
        for (int i = 0; i < (x->smooth_v ? 10 : 8); i++) /* the V column sums only when smoothing */
            if (h3r_dev_alloc(hb[i], hbytes[i], &t, err, errlen)) return -1;
        CUDA_CHECK(cudaMemset(a->aq8, 0, Hl * Sp * 128)); /* padding tokens stay code 0 */
        CUDA_CHECK(cudaMemset(a->ak8, 0, Hl * Sp * 128));
        CUDA_CHECK(cudaMemset(a->avt8, 0, Hl * Sp * 128));
        for (int i = 0; i < 6; i++) CUDA_CHECK(cudaEventCreate(&a->ev[i]));
    }
    fprintf(stderr, "\n");
    /* staging offsets (need every rank's group count) */
    double qkv_max = 0, o_max = 0;
    for (int j = 0; j < P; j++) {
        sp_rank *b = &x->rk[j];
        size_t oq = 0, oo = 0;
        for (int rr = 0; rr < P; rr++) {
            b->off_qkv[rr] = oq;
            oq += qkv_msg_bytes(x, rr);
            b->off_o[rr] = oo;
            oo += o_msg_bytes(x, j);
        }
        CUDA_CHECK(cudaSetDevice(b->dev));
        size_t t = 0;
        if (h3r_dev_alloc((void **)&b->stage_qkv, oq, &t, err, errlen) ||
            h3r_dev_alloc((void **)&b->stage_o, oo, &t, err, errlen))
            return -1;
        /* bytes rank j sends to the others */
        double sq = (double)(P - 1) * qkv_msg_bytes(x, j), so = 0;
        for (int rr = 0; rr < P; rr++)
            if (rr != j) so += (double)o_msg_bytes(x, rr);
        if (sq > qkv_max) qkv_max = sq;
        if (so > o_max) o_max = so;
    }
    x->bytes_a2a_qkv = qkv_max;
    x->bytes_a2a_o = o_max;
#ifdef H3_HAVE_NCCL_H
    if (!x->one_device && P > 1) {
        ncclComm_t comms[SP_MAX];
        int devs[SP_MAX];
        for (int i = 0; i < P; i++) devs[i] = x->rk[i].dev;
        NCCL_CHECK(&x->nccl, x->nccl.init_all(comms, P, devs));
        for (int i = 0; i < P; i++) x->rk[i].comm = comms[i];
    }
#endif

    memset(r, 0, sizeof *r);
    snprintf(r->device, sizeof r->device, "%d x %.90s%s", P, gi->name, x->one_device ? " (on GPU 0)" : "");
    snprintf(r->attn_kernel, sizeof r->attn_kernel, "%s, %d heads per rank%s%s",
             use_sm90 ? "attn_fp8_sm90 (wgmma+TMA)" : "attn_fp8_mma (mma.sync m16n8k32)", x->Hl,
             x->smooth_v ? ", V smoothed (mean over all ranks' tokens)" : "", o->rotate_qk == 1 ? ", Q/K rotated" : "");
    h3r_gemm_desc(fp8_mask, o->fast_accum, r->gemm, sizeof r->gemm);

    /* adaLN once per timestep and the RoPE table of the rank's tokens once per sequence, on every rank */
    for (int rr = 0; rr < P; rr++) {
        CUDA_CHECK(cudaSetDevice(x->rk[rr].dev));
        h3r_run_op(&x->rk[rr].br, OP_ADALN);
        h3r_run_op(&x->rk[rr].br, OP_ROPE);
    }
    const int R = o->repeat;
    double *t = calloc((size_t)R * (PH_N + 1), sizeof(double));
    CHECK(t, "out of host memory");
    fprintf(stderr, "running the block: %d warm-up + %d timed runs at %d tokens over %d rank(s)...\n", o->warmup, R, S, P);
    for (int it = 0; it < o->warmup + R; it++) {
        run_block(x);
        for (int rr = 0; rr < P; rr++) {
            CUDA_CHECK(cudaSetDevice(x->rk[rr].dev));
            CUDA_CHECK(cudaStreamSynchronize(x->rk[rr].br.st));
        }
        if (it < o->warmup) continue;
        for (int k = 0; k <= PH_N; k++) { /* k < PH_N: phase k; PH_N: the whole block; slowest rank */
            double worst = 0;
            for (int rr = 0; rr < P; rr++) {
                float ms;
                CUDA_CHECK(cudaSetDevice(x->rk[rr].dev));
                CUDA_CHECK(cudaEventElapsedTime(&ms, x->rk[rr].ev[k < PH_N ? k : 0], x->rk[rr].ev[k < PH_N ? k + 1 : PH_N]));
                if (ms > worst) worst = ms;
            }
            t[(size_t)k * R + (it - o->warmup)] = worst;
        }
    }
    for (int k = 0; k < PH_N; k++) {
        const double ms = h3_median(t + (size_t)k * R, R);
        double fl = 0, by = 0;
        if (k == PH_ATTN) fl = h3_stage_flops(c, S, H3_STAGE_ATTENTION) / P; /* per rank: its heads */
        if (k == PH_A2A_QKV) by = x->bytes_a2a_qkv;
        if (k == PH_A2A_O) by = x->bytes_a2a_o;
        /* with smoothing the first phase also sums V's columns and exchanges the sums (vmean_all) */
        h3r_add_row(r, k == PH_PRE && x->smooth_v ? "norm1_mod+qkv_gemm+v_mean+qk_norm_rope_quant" : ph_names[k],
                       ms, fl, by);
    }
    r->total_ms = h3_median(t + (size_t)PH_N * R, R);
    free(t);
    fprintf(stderr, "all-to-all: each rank sends %.1f MB (q8/k8/vt8 + scales) and %.1f MB (O) to the others per "
            "block; the rows' GB/s are those bytes over the time, NCCL's bus bandwidth for an all-to-all\n",
            x->bytes_a2a_qkv / 1e6, x->bytes_a2a_o / 1e6);

    if (out_host) {
        for (int rr = 0; rr < P; rr++) {
            sp_rank *a = &x->rk[rr];
            CUDA_CHECK(cudaSetDevice(a->dev));
            CUDA_CHECK(cudaMemcpy(out_host + (size_t)a->tok0 * C, a->br.d.out, (size_t)a->S_r * C * 2,
                                  cudaMemcpyDeviceToHost));
        }
        /* a non-finite output (main.c reports it): the earliest op, over the
         * ranks, whose outputs on its tokens held one (attention's are each
         * rank's O rows after the exchange back) */
        if (h3_bf16_first_nonfinite(out_host, (size_t)S * C) >= 0) {
            int first = -1;
            for (int rr = 0; rr < P; rr++) {
                CUDA_CHECK(cudaSetDevice(x->rk[rr].dev));
                const int op = h3r_first_nonfinite(&x->rk[rr].br);
                if (op >= 0 && (first < 0 || op < first)) first = op;
            }
            if (first >= 0) snprintf(r->nonfinite_stage, sizeof r->nonfinite_stage, "%s", op_names[first]);
        }
    }

    for (int rr = P - 1; rr >= 0; rr--) {
        sp_rank *a = &x->rk[rr];
        CUDA_CHECK(cudaSetDevice(a->dev));
#ifdef H3_HAVE_NCCL_H
        if (a->comm) x->nccl.destroy(a->comm);
#endif
        for (int i = 0; i < 6; i++) CUDA_CHECK(cudaEventDestroy(a->ev[i]));
        void *hb[12] = {a->aq8,  a->ak8, a->avt8,      a->asq,    a->ask,  a->asv,
                        a->aO,   a->alse, a->stage_qkv, a->stage_o, a->vsum, a->vsums};
        for (int i = 0; i < 12; i++) CUDA_CHECK(cudaFree(hb[i]));
        for (int i = a->nalloc - 1; i >= 0; i--)
            if (!(a->allocs[i].weight && x->one_device && rr > 0)) CUDA_CHECK(cudaFree(*a->allocs[i].p));
        if (!(x->one_device && rr > 0)) {
            h3_lt_destroy(a->br.lt);
            CUDA_CHECK(cudaStreamDestroy(a->br.st));
        }
    }
    free(x);
    return 0;
}
