/* block.c — the whole H3 block on the CPU (DESIGN.md §1 steps 1-9), every row.
 *
 * Composes the stage functions exactly (same calls, same rounding points), so
 * its output equals a hand-written chain of them bit for bit. To bound memory
 * at large S, qkv_gemm + qk_norm_rope_quant and fc1_gemm + swiglu run over
 * chunks of CHUNK rows (a multiple of the 128-token quantisation group), so
 * the [S][3*H*D] qkv and [S][2F] fc1 outputs never exist whole; the GEMM
 * result of a row does not depend on the chunking (gemm.c). Per-stage wall
 * times accumulate over chunks.
 *
 * cpu_block_forward_fp8: the GEMMs named in fp8_mask run with the FP8 GEMM
 * mode's numerics (dit_block --gemm fp8): the weight quantised once per
 * output channel, the GEMM's BF16 input quantised per token (the same
 * cpu_quant_rows_e4m3 on the same BF16 values the GPU's fused kernels
 * quantise), cpu_gemm_fp8. Every other stage is unchanged.
 *
 * Every stage's output is scanned for NaN/Inf as soon as it is written (one
 * pass over memory the stage just wrote, not timed), so a block whose output
 * is not finite names the first stage that made a non-finite value. Out of
 * memory (here or in a stage) ends the run: out all NaN, return -1. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu_internal.h"
#include "cpu_ref.h"

#define CHUNK 1024

typedef struct {
    int on, tty;
    double total, done, last;
} progress_t;

static void progress_step(progress_t *p, int stage, double work)
{
    p->done += work;
    if (!p->on || !p->tty) return;
    double now = omp_get_wtime();
    if (now - p->last < 0.2 && p->done < p->total) return;
    p->last = now;
    const int width = 30, pct = p->total > 0 ? (int)(100.0 * p->done / p->total) : 100;
    const int fill = pct * width / 100;
    fprintf(stderr, "\rcpu block [%.*s%*s] %3d%% %-20s", fill, "##############################", width - fill, "",
            pct, h3_stage_names[stage]);
    fflush(stderr);
}

/* One GEMM of the block: BF16, or FP8 when q->w8 is set (x8, sx: scratch of
 * n x K codes and n scales). */
typedef struct {
    uint8_t *w8; /* [N][K] e4m3, NULL: BF16 */
    float *ws;   /* [N], or with blocks [N / 128][K / 128] (rounded up) */
    int blocks;  /* block scales (CPU_FP8_BLOCKS) */
} gemm_w8;

static void block_gemm(const gemm_w8 *q, const uint16_t *x, const uint16_t *W, int n, int N, int K, uint16_t *y,
                       uint8_t *x8, float *sx)
{
    if (!q->w8) {
        cpu_gemm_bf16(x, W, n, N, K, NULL, n, y);
    } else if (q->blocks) {
        cpu_quant_blocks_e4m3(x, n, K, 1, x8, sx);
        cpu_gemm_fp8_blocks(x8, sx, 1, q->w8, q->ws, 128, n, N, K, NULL, n, y);
    } else {
        cpu_quant_rows_e4m3(x, n, K, x8, sx);
        cpu_gemm_fp8(x8, sx, q->w8, q->ws, n, N, K, NULL, n, y);
    }
}

/* Records stage as the first non-finite one when at >= 0 (an index found
 * by a scan) and no earlier stage was. */
static void note_nonfinite(int *first, int stage, long at)
{
    if (at >= 0 && (*first < 0 || stage < *first)) *first = stage;
}

static int block_forward(const h3_config *cfg, const cpu_block_weights *wt, int S, const uint16_t *x,
                         const float *temb, const int32_t *tags, const float *pos, int key_tile, int exact,
                         int fp8_mask, int progress, uint16_t *out, cpu_block_stats *st)
{
    const int C = cfg->hidden, H = cfg->heads, D = cfg->head_dim, F = cfg->ffn, I = h3_attn_width(cfg),
              W3 = h3_qkv_width(cfg), S_pad = h3_pad_tokens(S), G = h3_groups(S);
    const float eps = cfg->eps;
    double t_stage[H3_STAGE_COUNT] = {0};
    int first_nf = -1, oom = 0;
    progress_t pr = {progress, isatty(2), 0, 0, 0};
    pr.total = 2.0 * S * ((double)W3 * C + (double)C * I + 2.0 * F * C + (double)C * F) + 4.0 * S * (double)S * D * H +
               (double)h3_mod_width(cfg) * cfg->temb;

    uint16_t *mod = malloc((size_t)h3_mod_width(cfg) * 2); /* [M][6][C] bf16 */
    uint16_t *a = malloc((size_t)S * C * 2);               /* [S][C] bf16: norm1_mod, later norm2_mod */
    uint16_t *y = malloc((size_t)S * C * 2);               /* [S][C] bf16: out_gemm, later fc2_gemm */
    uint16_t *x1 = malloc((size_t)S * C * 2);              /* [S][C] bf16: after gate_res1 */
    uint16_t *o = malloc((size_t)S * I * 2);               /* [S][I] bf16 attention output */
    uint16_t *buf = malloc((size_t)CHUNK * (W3 > 2 * F ? W3 : 2 * F) * 2); /* [CHUNK][3I or 2F] bf16 */
    uint16_t *u = malloc((size_t)S * F * 2);               /* [S][F] bf16 swiglu output */
    uint8_t *q8 = NULL, *k8 = NULL, *vt8 = NULL;
    float *sc = NULL;
    uint16_t *qb = NULL, *kb = NULL, *vb = NULL;
    if (exact) {
        qb = malloc((size_t)S * I * 2); /* [S][I] bf16 */
        kb = malloc((size_t)S * I * 2);
        vb = malloc((size_t)S * I * 2);
    } else {
        q8 = malloc((size_t)H * S_pad * D); /* [H][S_pad][D] e4m3 */
        k8 = malloc((size_t)H * S_pad * D); /* [H][S_pad][D] e4m3 */
        vt8 = malloc((size_t)H * S_pad * D); /* [H][D][S_pad] e4m3, keys permuted */
        sc = malloc((size_t)3 * H * G * sizeof(float)); /* sq, sk, sv [H][G] */
    }
    /* FP8 GEMMs: quantised weights (qkv, out, fc1, fc2) and the input scratch */
    static const int gemm_t[4] = {H3_T_QKV, H3_T_OUT, H3_T_FC1, H3_T_FC2};
    const int gemm_n[4] = {W3, C, 2 * F, C}, gemm_k[4] = {C, I, C, F};
    gemm_w8 qw[4] = {{0}};
    uint8_t *x8 = NULL;
    float *sx = NULL;
    int fp8_ok = 1;
    const int blocks = (fp8_mask & CPU_FP8_BLOCKS) != 0;
    if (fp8_mask & CPU_FP8_ALL) {
        const int kmax = F > I ? (F > C ? F : C) : (I > C ? I : C);
        x8 = malloc((size_t)CHUNK * kmax);
        sx = malloc(sizeof(float) * CHUNK * (blocks ? (kmax + 127) / 128 : 1));
        fp8_ok = x8 && sx;
        for (int g = 0; g < 4 && fp8_ok; g++)
            if (fp8_mask & (1 << g)) {
                const int nb = blocks ? (gemm_n[g] + 127) / 128 * ((gemm_k[g] + 127) / 128) : gemm_n[g];
                qw[g].w8 = malloc((size_t)gemm_n[g] * gemm_k[g]);
                qw[g].ws = malloc(sizeof(float) * nb);
                qw[g].blocks = blocks;
                fp8_ok = qw[g].w8 && qw[g].ws;
                if (fp8_ok && blocks)
                    cpu_quant_blocks_e4m3(wt->w[gemm_t[g]], gemm_n[g], gemm_k[g], 128, qw[g].w8, qw[g].ws);
                else if (fp8_ok)
                    cpu_quant_rows_e4m3(wt->w[gemm_t[g]], gemm_n[g], gemm_k[g], qw[g].w8, qw[g].ws);
            }
    }
    if (!fp8_ok || !mod || !a || !y || !x1 || !o || !buf || !u || (exact ? !qb || !kb || !vb : !q8 || !k8 || !vt8 || !sc)) {
        oom = 1;
        goto done;
    }
    if (progress && !pr.tty) fprintf(stderr, "cpu block: S = %d, running ...\n", S);

    double t0 = omp_get_wtime(), t1;
#define LAP(stage)                                                                                                 \
    do {                                                                                                           \
        t1 = omp_get_wtime();                                                                                      \
        t_stage[stage] += (t1 - t0) * 1e3;                                                                         \
        t0 = t1;                                                                                                   \
    } while (0)
    /* the stage's output p[n] (BF16), scanned outside the timed laps */
#define SCAN(stage, p, n)                                                                                          \
    do {                                                                                                           \
        note_nonfinite(&first_nf, stage, h3_bf16_first_nonfinite(p, (size_t)(n)));                                 \
        t0 = omp_get_wtime();                                                                                      \
    } while (0)

    /* 1-2: adaln, norm1_mod */
    cpu_adaln(cfg, temb, wt->w[H3_T_ADALN_W], wt->w[H3_T_ADALN_B], mod);
    LAP(H3_STAGE_ADALN);
    SCAN(H3_STAGE_ADALN, mod, h3_mod_width(cfg));
    progress_step(&pr, H3_STAGE_ADALN, (double)h3_mod_width(cfg) * cfg->temb);
    cpu_rmsnorm_mod(x, wt->w[H3_T_NORM1], mod, tags, S, C, eps, H3_SLOT_SHIFT_MSA, H3_SLOT_SCALE_MSA, NULL, S, a);
    LAP(H3_STAGE_NORM1_MOD);
    SCAN(H3_STAGE_NORM1_MOD, a, (size_t)S * C);

    /* 3-4: qkv_gemm and qk_norm_rope(_quant), per chunk of whole groups */
    for (int r0 = 0; r0 < S; r0 += CHUNK) {
        const int n = S - r0 < CHUNK ? S - r0 : CHUNK;
        block_gemm(&qw[0], a + (size_t)r0 * C, wt->w[H3_T_QKV], n, W3, C, buf, x8, sx);
        LAP(H3_STAGE_QKV_GEMM);
        SCAN(H3_STAGE_QKV_GEMM, buf, (size_t)n * W3);
        progress_step(&pr, H3_STAGE_QKV_GEMM, 2.0 * n * W3 * C);
        if (exact) {
            cpu_qk_norm_rope(cfg, buf, pos + (size_t)r0 * 3, wt->w[H3_T_QNORM], wt->w[H3_T_KNORM], n, NULL, n,
                             qb + (size_t)r0 * I, kb + (size_t)r0 * I, vb + (size_t)r0 * I);
            LAP(H3_STAGE_QK_NORM_ROPE_QUANT);
            SCAN(H3_STAGE_QK_NORM_ROPE_QUANT, qb + (size_t)r0 * I, (size_t)n * I);
            SCAN(H3_STAGE_QK_NORM_ROPE_QUANT, kb + (size_t)r0 * I, (size_t)n * I);
        } else {
            if (cpu_qk_norm_rope_quant_groups(cfg, buf, pos, wt->w[H3_T_QNORM], wt->w[H3_T_KNORM], S, r0 / H3_QGROUP,
                                              (r0 + n + H3_QGROUP - 1) / H3_QGROUP, NULL, 0, q8, k8, vt8, sc,
                                              sc + H * G, sc + 2 * H * G)) {
                oom = 1;
                goto done;
            }
            LAP(H3_STAGE_QK_NORM_ROPE_QUANT);
        }
    }
    /* the FP8 operands: a group's scale is non-finite when its amax was
     * (the codes saturate, so the scales carry it) */
    if (!exact) {
        note_nonfinite(&first_nf, H3_STAGE_QK_NORM_ROPE_QUANT, h3_f32_first_nonfinite(sc, (size_t)3 * H * G));
        t0 = omp_get_wtime();
    }

    /* 5: attention, per head */
    if (!exact && !cpu_key_tile_ok(key_tile)) {
        cpu_attention_fp8(q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G, NULL, S, H, key_tile, NULL, 1, NULL, S, o, NULL);
    } else {
        for (int h = 0; h < H; h++) {
            const int rc = exact ? cpu_attention_exact_head(qb, kb, vb, S, H, h, NULL, S, o, NULL)
                                 : cpu_attention_fp8_head(q8, k8, vt8, sc, sc + H * G, sc + 2 * H * G, NULL, S, H, h,
                                                          key_tile, NULL, 1, NULL, S, o, NULL);
            if (rc) {
                oom = 1;
                goto done;
            }
            progress_step(&pr, H3_STAGE_ATTENTION, 4.0 * S * (double)S * D);
        }
    }
    LAP(H3_STAGE_ATTENTION);
    SCAN(H3_STAGE_ATTENTION, o, (size_t)S * I);

    /* 6: out_gemm, gate_res1 */
    for (int r0 = 0; r0 < S; r0 += CHUNK) {
        const int n = S - r0 < CHUNK ? S - r0 : CHUNK;
        block_gemm(&qw[1], o + (size_t)r0 * I, wt->w[H3_T_OUT], n, C, I, y + (size_t)r0 * C, x8, sx);
        progress_step(&pr, H3_STAGE_OUT_GEMM, 2.0 * n * C * I);
    }
    LAP(H3_STAGE_OUT_GEMM);
    SCAN(H3_STAGE_OUT_GEMM, y, (size_t)S * C);
    cpu_gate_residual(x, y, mod, tags, S, C, H3_SLOT_GATE_MSA, NULL, S, x1);
    LAP(H3_STAGE_GATE_RES1);
    SCAN(H3_STAGE_GATE_RES1, x1, (size_t)S * C);

    /* 7-8: norm2_mod, fc1_gemm + swiglu per chunk */
    cpu_rmsnorm_mod(x1, wt->w[H3_T_NORM2], mod, tags, S, C, eps, H3_SLOT_SHIFT_MLP, H3_SLOT_SCALE_MLP, NULL, S, a);
    LAP(H3_STAGE_NORM2_MOD);
    SCAN(H3_STAGE_NORM2_MOD, a, (size_t)S * C);
    for (int r0 = 0; r0 < S; r0 += CHUNK) {
        const int n = S - r0 < CHUNK ? S - r0 : CHUNK;
        block_gemm(&qw[2], a + (size_t)r0 * C, wt->w[H3_T_FC1], n, 2 * F, C, buf, x8, sx);
        LAP(H3_STAGE_FC1_GEMM);
        SCAN(H3_STAGE_FC1_GEMM, buf, (size_t)n * 2 * F);
        progress_step(&pr, H3_STAGE_FC1_GEMM, 2.0 * n * 2 * F * C);
        cpu_swiglu(buf, n, F, NULL, n, u + (size_t)r0 * F);
        LAP(H3_STAGE_SWIGLU);
        SCAN(H3_STAGE_SWIGLU, u + (size_t)r0 * F, (size_t)n * F);
    }

    /* 9: fc2_gemm, gate_res2 */
    for (int r0 = 0; r0 < S; r0 += CHUNK) {
        const int n = S - r0 < CHUNK ? S - r0 : CHUNK;
        block_gemm(&qw[3], u + (size_t)r0 * F, wt->w[H3_T_FC2], n, C, F, y + (size_t)r0 * C, x8, sx);
        progress_step(&pr, H3_STAGE_FC2_GEMM, 2.0 * n * C * F);
    }
    LAP(H3_STAGE_FC2_GEMM);
    SCAN(H3_STAGE_FC2_GEMM, y, (size_t)S * C);
    cpu_gate_residual(x1, y, mod, tags, S, C, H3_SLOT_GATE_MLP, NULL, S, out);
    LAP(H3_STAGE_GATE_RES2);
    SCAN(H3_STAGE_GATE_RES2, out, (size_t)S * C);
#undef SCAN
#undef LAP
    if (progress && pr.tty) {
        pr.last = -1e9;
        progress_step(&pr, H3_STAGE_GATE_RES2, 0);
        fputc('\n', stderr);
    }

done:
    if (oom)
        for (size_t i = 0; i < (size_t)S * C; i++) out[i] = 0x7fc0;
    if (st) {
        for (int s = 0; s < H3_STAGE_COUNT; s++) st->ms[s] = t_stage[s];
        st->first_nonfinite = oom ? -1 : first_nf;
    }
    free(mod);
    free(a);
    free(y);
    free(x1);
    free(o);
    free(buf);
    free(u);
    free(q8);
    free(k8);
    free(vt8);
    free(sc);
    free(qb);
    free(kb);
    free(vb);
    free(x8);
    free(sx);
    for (int g = 0; g < 4; g++) {
        free(qw[g].w8);
        free(qw[g].ws);
    }
    return oom ? -1 : 0;
}

int cpu_block_forward(const h3_config *cfg, const cpu_block_weights *wt, int S, const uint16_t *x,
                      const float *temb, const int32_t *tags, const float *pos, int key_tile, int exact,
                      int progress, uint16_t *out, cpu_block_stats *st)
{
    return block_forward(cfg, wt, S, x, temb, tags, pos, key_tile, exact, 0, progress, out, st);
}

int cpu_block_forward_fp8(const h3_config *cfg, const cpu_block_weights *wt, int S, const uint16_t *x,
                          const float *temb, const int32_t *tags, const float *pos, int key_tile, int fp8_mask,
                          int progress, uint16_t *out, cpu_block_stats *st)
{
    return block_forward(cfg, wt, S, x, temb, tags, pos, key_tile, 0, fp8_mask & (CPU_FP8_ALL | CPU_FP8_BLOCKS),
                         progress, out, st);
}
