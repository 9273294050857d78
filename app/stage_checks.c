/* stage_checks.c — the GPU run's stage checks (the runtime calls
 * h3_stage_checks through its check hook after the timed runs): every
 * stage's device output on sampled rows against the CPU reference given the
 * GPU's own input to that stage (checker.h), then with --check full the
 * CPU's own chain end to end. */
#include "stage_checks.h"

#include <stdio.h>
#include <stdlib.h>

#include "attn/sm90_grid.h"
#include "check.h"
#include "checker.h"
#include "config.h"
#include "kernels.h"
#include "numerics.h"

/* The weight tensor of each GEMM (config.h's H3_GEMM_* order). */
static const int gemm_tensor[H3_GEMMS] = {H3_T_QKV, H3_T_OUT, H3_T_FC1, H3_T_FC2};

static int is_fp8(const h3_run_info *ri, int g) { return ri->fp8_mask >> g & 1; }

/* A GEMM's input as the GEMM read it, on the host: BF16 (x), or e4m3 rows
 * with their per-token scales (x8, s) when that GEMM is FP8; with block
 * scales s is [S][ceil(cols / 128)] (the device's [ceil(cols / 128)][S]
 * transposed: checker.h's host layout). */
typedef struct {
    uint16_t *x;
    uint8_t *x8;
    float *s;
} gemm_in;

static gemm_in fetch_gemm_in(const h3_run_view *v, int g, h3_buf bx, h3_buf bx8, h3_buf bs, int cols)
{
    const h3_run_info ri = h3_run_view_info(v);
    gemm_in in = {0};
    if (is_fp8(&ri, g)) {
        const size_t S = (size_t)ri.S, nb = h3_fp8_in_scales(1, (size_t)cols, ri.fp8_mask);
        in.x8 = h3_run_fetch(v, bx8, S * cols);
        in.s = h3_run_fetch(v, bs, S * nb * 4);
        if (nb > 1) {
            float *t = malloc(S * nb * 4);
            CHECK(t, "out of host memory");
            h3_transpose_f32(in.s, nb, S, t);
            free(in.s);
            in.s = t;
        }
    } else {
        in.x = h3_run_fetch(v, bx, (size_t)ri.S * cols * 2);
    }
    return in;
}

static void free_gemm_in(gemm_in *in)
{
    free(in->x);
    free(in->x8);
    free(in->s);
}

/* The GEMM stage check of either precision, plus (FP8) the check of its
 * quantised weight against the CPU's quantisation of the BF16 file weight. */
static void check_gemm(report *r, const h3_check_ctx *k, const h3_run_view *v, int g, const char *stage,
                       const gemm_in *in, int N, int K, const uint16_t *y)
{
    const h3_run_info ri = h3_run_view_info(v);
    const uint16_t *W = k->blk->w[gemm_tensor[g]];
    if (!is_fp8(&ri, g)) {
        h3_check_gemm(r, k, stage, in->x, W, N, K, y);
        return;
    }
    uint8_t *w8;
    float *ws;
    h3_run_fetch_w8(v, g, N, K, &w8, &ws);
    h3_check_quant_exact(r, k, stage, "weights e4m3", W, N, K, NULL, w8, ws);
    h3_check_gemm_fp8(r, k, stage, in->x8, in->s, w8, ws, N, K, y);
    free(w8);
    free(ws);
}

/* norm*_mod (its BF16 output, or the e4m3 rows it wrote) and the GEMM it feeds. */
static void check_norm_gemm(report *r, const h3_check_ctx *k, const h3_run_view *v, const char *norm,
                            const uint16_t *x, int wt, const uint16_t *mod, int slot_shift, int slot_scale, h3_buf bx,
                            h3_buf bx8, h3_buf bs, int g, const char *gemm, int N, const uint16_t *y)
{
    const h3_run_info ri = h3_run_view_info(v);
    const int C = k->cfg->hidden;
    gemm_in in = fetch_gemm_in(v, g, bx, bx8, bs, C);
    if (is_fp8(&ri, g))
        h3_check_rmsnorm_mod_q8(r, k, norm, x, k->blk->w[wt], mod, slot_shift, slot_scale, in.x8, in.s);
    else
        h3_check_rmsnorm_mod(r, k, norm, x, k->blk->w[wt], mod, slot_shift, slot_scale, in.x);
    check_gemm(r, k, v, g, gemm, &in, N, C, y);
    free_gemm_in(&in);
}

void h3_stage_checks(void *ctx, const h3_run_view *v)
{
    const h3_stage_check_ctx *x = ctx;
    const cli_options *o = x->o;
    const h3_block *blk = x->blk;
    const h3_inputs *in = x->in;
    report *r = x->r;
    const h3_run_info ri = h3_run_view_info(v);
    const int key_tile = ri.key_tile;
    const h3_config *c = &blk->cfg;
    const int S = ri.S, C = c->hidden, I = h3_attn_width(c), F = c->ffn, H = c->heads;
    const size_t Sp = h3_pad_tokens(S), G = h3_groups(S);
    int *rows = malloc(sizeof(int) * (size_t)(o->sample < S ? o->sample : S) + 64);
    int want_att = o->sample / 2 > 16 ? o->sample / 2 : (o->sample < 16 ? o->sample : 16);
    int *att_rows = malloc(sizeof(int) * (size_t)(want_att < S ? want_att : S) + 64);
    CHECK(rows && att_rows, "out of host memory");
    h3_check_ctx k = {.cfg = c, .blk = blk, .in = in, .S = S, .fast_accum = o->fast_accum,
                      .gemm_blocks = (ri.fp8_mask & H3_FP8_BLOCKS) != 0};
    k.rows = rows;
    k.nrows = h3_sample_rows(in, o->sample, rows);
    k.att_rows = att_rows;
    k.natt = h3_sample_rows(in, want_att, att_rows);
    fprintf(stderr, "checking every stage against the CPU reference (%d sampled rows, %d for attention)...\n",
            k.nrows, k.natt);

    uint16_t *mod = h3_run_fetch(v, H3_BUF_MOD, (size_t)h3_mod_width(c) * 2);
    h3_check_adaln(r, &k, mod);
    uint16_t *qkv = h3_run_fetch(v, H3_BUF_QKV, (size_t)S * 3 * I * 2);
    check_norm_gemm(r, &k, v, "norm1_mod", in->x, H3_T_NORM1, mod, H3_SLOT_SHIFT_MSA, H3_SLOT_SCALE_MSA, H3_BUF_A,
                    H3_BUF_A8, H3_BUF_SA, H3_GEMM_QKV, "qkv_gemm", 3 * I, qkv);
    uint8_t *q8 = h3_run_fetch(v, H3_BUF_Q8, (size_t)H * Sp * 128), *k8 = h3_run_fetch(v, H3_BUF_K8, (size_t)H * Sp * 128),
            *vt8 = h3_run_fetch(v, H3_BUF_VT8, (size_t)H * Sp * 128);
    float *sq = h3_run_fetch(v, H3_BUF_SQ, H * G * 4), *sk = h3_run_fetch(v, H3_BUF_SK, H * G * 4), *sv = h3_run_fetch(v, H3_BUF_SV, H * G * 4);
    float *vmu = ri.smooth_v ? h3_run_fetch(v, H3_BUF_VMU, (size_t)H * 128 * 4) : NULL;
    h3_check_qk_quant(r, &k, qkv, vmu, ri.rotate_qk, q8, k8, vt8, sq, sk, sv);
    uint16_t *O = h3_run_fetch(v, H3_BUF_O, (size_t)S * I * 2);
    float *lse = h3_run_fetch(v, H3_BUF_LSE, (size_t)H * S * 4);
    /* The Hopper kernel with V smoothed runs some rows in split CTAs (sm90_grid.h): the emulation runs them
     * the same way, from the plan the launch used on this device. */
    h3_sm90_grid grid;
    const cpu_attn_split grid_split = {h3_sm90_grid_row_split_ctx, &grid}, *split = NULL;
    if (ri.attn_sm90 && ri.smooth_v) {
        const int rc = h3k_attn_fp8_sm90_grid(S, H, &grid);
        CHECK(rc == 0, "h3k_attn_fp8_sm90_grid(%d, %d) returned %d", S, H, rc);
        split = &grid_split;
    }
    h3_check_attention(r, &k, key_tile, split, qkv, vmu, q8, k8, vt8, sq, sk, sv, O, lse);
    free(vmu);
    free(qkv);
    free(q8);
    free(k8);
    free(vt8);
    free(sq);
    free(sk);
    free(sv);
    free(lse);
    uint16_t *y1 = h3_run_fetch(v, H3_BUF_Y1, (size_t)S * C * 2);
    if (is_fp8(&ri, H3_GEMM_OUT)) {
        gemm_in o8 = fetch_gemm_in(v, H3_GEMM_OUT, H3_BUF_O, H3_BUF_O8, H3_BUF_SO, I);
        h3_check_quant_exact(r, &k, "out_quant", "O", O, k.nrows, I, k.rows, o8.x8, o8.s);
        check_gemm(r, &k, v, H3_GEMM_OUT, "out_gemm", &o8, C, I, y1);
        free_gemm_in(&o8);
    } else {
        const gemm_in ob = {O, NULL, NULL}; /* the BF16 O already fetched */
        check_gemm(r, &k, v, H3_GEMM_OUT, "out_gemm", &ob, C, I, y1);
    }
    free(O);
    uint16_t *x1 = h3_run_fetch(v, H3_BUF_X1, (size_t)S * C * 2);
    h3_check_gate_residual(r, &k, "gate_res1", in->x, y1, mod, H3_SLOT_GATE_MSA, x1);
    free(y1);
    uint16_t *g = h3_run_fetch(v, H3_BUF_G, (size_t)S * 2 * F * 2);
    check_norm_gemm(r, &k, v, "norm2_mod", x1, H3_T_NORM2, mod, H3_SLOT_SHIFT_MLP, H3_SLOT_SCALE_MLP, H3_BUF_B,
                    H3_BUF_B8, H3_BUF_SB, H3_GEMM_FC1, "fc1_gemm", 2 * F, g);
    uint16_t *y2 = h3_run_fetch(v, H3_BUF_Y2, (size_t)S * C * 2);
    gemm_in u = fetch_gemm_in(v, H3_GEMM_FC2, H3_BUF_U, H3_BUF_U8, H3_BUF_SU, F);
    if (is_fp8(&ri, H3_GEMM_FC2))
        h3_check_swiglu_q8(r, &k, g, u.x8, u.s);
    else
        h3_check_swiglu(r, &k, g, u.x);
    check_gemm(r, &k, v, H3_GEMM_FC2, "fc2_gemm", &u, C, F, y2);
    free_gemm_in(&u);
    free(g);
    uint16_t *out = h3_run_fetch(v, H3_BUF_OUT, (size_t)S * C * 2);
    h3_check_gate_residual(r, &k, "gate_res2", x1, y2, mod, H3_SLOT_GATE_MLP, out);
    free(x1);
    free(y2);
    if (o->check == CHECK_FULL) {
        fprintf(stderr, "running the CPU's own chain over all %d rows...\n", S);
        h3_check_full(r, &k, key_tile, out, !o->quiet, ri.fp8_mask);
    }
    free(out);
    free(mod);
    free(rows);
    free(att_rows);
}

