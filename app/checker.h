/* checker.h — compares GPU stage outputs with the CPU reference.
 *
 * Each stage is checked given the GPU's own input to that stage (so an error
 * is located where it arises) on sampled rows; the attention also against
 * exact FP32 attention (the FP8 error, reported). Tolerances live in one
 * table (checker.c) with the reason for each. */
#ifndef H3_CHECKER_H
#define H3_CHECKER_H

#include <stdint.h>

#include "block.h"
#include "cpu_ref.h"
#include "inputs.h"
#include "report.h"

typedef struct {
    const char *stage;
    double tol_rms;  /* relative RMS error bound */
    double tol_max;  /* max abs error bound, relative to max |ref| */
    const char *why;
} h3_tolerance;

const h3_tolerance *h3_tolerance_for(const char *stage);
extern const h3_tolerance h3_tolerances[];

/* Up to `want` rows spread over [0, S): evenly spaced, the first and last
 * token of every modality run, and the ragged tail (the last rows and the
 * last 128-token group). Sorted, unique. Returns the count. */
int h3_sample_rows(const h3_inputs *in, int want, int *rows);

/* Compares got (nrows x row_len, compact) with ref (same) and fills c:
 * NaN/Inf first, then relative RMS and max abs; pass by the stage's tolerance;
 * the first mismatches (row index mapped through rows[] when given) go to
 * c->detail. asserted = 0 only reports. */
void h3_compare_bf16(report_check *c, const uint16_t *got, const uint16_t *ref, long nrows, long row_len,
                     const int *rows, int asserted);
void h3_compare_f32(report_check *c, const float *got, const float *ref, long nrows, long row_len, const int *rows,
                    int asserted);
/* FP8 codes: pass when no code differs by more than 1 step and at most
 * tol_rms of them differ at all (rel_rms holds the fraction that differ). */
void h3_compare_e4m3(report_check *c, const uint8_t *got, const uint8_t *ref, long n);

/* Copies rows[] of a full [S][row_len] bf16 buffer into a compact one. */
void h3_gather_rows_bf16(const uint16_t *full, long row_len, const int *rows, int nrows, uint16_t *out);

/* The stage checks. Every *_gpu buffer is the GPU's full-size output copied
 * to the host; inputs are the GPU's own full-size stage inputs. */
typedef struct {
    const h3_config *cfg;
    const h3_block *blk;
    const h3_inputs *in;
    int S;
    const int *rows;
    int nrows;
    const int *att_rows; /* attention is costlier: fewer rows */
    int natt;
    int fast_accum; /* the FP8 GEMMs ran with --gemm-accum fast: their "gemm_fp8_fast" tolerance */
    int gemm_blocks; /* the FP8 GEMMs ran with block scales (H3_FP8_BLOCKS): every FP8 check below then takes
                        an activation's scales as [S][ceil(cols / 128)] and a weight's as [ceil(N / 128)][ceil(K /
                        128)] (host layouts, cpu_quant_blocks_e4m3's) instead of [S] and [N] */
} h3_check_ctx;

void h3_check_adaln(report *r, const h3_check_ctx *k, const uint16_t *mod_gpu);
void h3_check_rmsnorm_mod(report *r, const h3_check_ctx *k, const char *stage, const uint16_t *x, const uint16_t *w,
                          const uint16_t *mod, int slot_shift, int slot_scale, const uint16_t *out_gpu);
void h3_check_gemm(report *r, const h3_check_ctx *k, const char *stage, const uint16_t *x, const uint16_t *W, int N,
                   int K, const uint16_t *y_gpu);
/* vmu: the GPU's V smoothing mean [H*128] (NULL: V not smoothed); rot_qk: the
 * GPU rotated q and k (Q/K rotation) */
void h3_check_qk_quant(report *r, const h3_check_ctx *k, const uint16_t *qkv, const float *vmu, int rot_qk,
                       const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq, const float *sk,
                       const float *sv);
/* key_tile, split: the kernel's key tile and split rows, as cpu_attention_fp8 takes them (split NULL: none) */
void h3_check_attention(report *r, const h3_check_ctx *k, int key_tile, const cpu_attn_split *split,
                        const uint16_t *qkv, const float *vmu, const uint8_t *q8, const uint8_t *k8,
                        const uint8_t *vt8, const float *sq, const float *sk, const float *sv, const uint16_t *O_gpu,
                        const float *lse_gpu);
void h3_check_gate_residual(report *r, const h3_check_ctx *k, const char *stage, const uint16_t *x, const uint16_t *y,
                            const uint16_t *mod, int slot_gate, const uint16_t *out_gpu);
void h3_check_swiglu(report *r, const h3_check_ctx *k, const uint16_t *g, const uint16_t *u_gpu);
/* End to end: the CPU's own chain (BF16 GEMMs) over every row (progress bar)
 * vs out_gpu; stage "block" when the GPU ran every GEMM in BF16 (fp8_mask 0),
 * else "block_fp8" (its own tolerance), which also reports (unasserted) the
 * distance to the CPU's FP8-GEMM chain with the same mask,
 * cpu_block_forward_fp8. */
void h3_check_full(report *r, const h3_check_ctx *k, int key_tile, const uint16_t *out_gpu, int progress,
                   int fp8_mask);

/* ---- FP8 GEMM mode ----
 * A BF16 stage output that the GPU only kept row-quantised (q8 [S][cols]
 * e4m3, s [S]): the CPU output on the sampled rows from ref_rows (nrows x
 * cols, compact), quantised the same way, vs the GPU's codes and scales. */
void h3_check_rows_q8(report *r, const h3_check_ctx *k, const char *stage, const uint16_t *ref_rows, int cols,
                      const uint8_t *q8_gpu, const float *s_gpu);
/* norm*_mod and swiglu in the FP8 mode: the CPU's BF16 stage output from the
 * GPU's stage input, then h3_check_rows_q8. */
void h3_check_rmsnorm_mod_q8(report *r, const h3_check_ctx *k, const char *stage, const uint16_t *x,
                             const uint16_t *w, const uint16_t *mod, int slot_shift, int slot_scale,
                             const uint8_t *q8_gpu, const float *s_gpu);
void h3_check_swiglu_q8(report *r, const h3_check_ctx *k, const uint16_t *g, const uint8_t *u8_gpu,
                        const float *su_gpu);
/* The row quantiser on the GPU's own BF16 input x [S][cols]: bit-exact on the
 * sampled rows (stage out_quant), or on every row (weights: rows = NULL, n
 * rows; stage "<gemm>" what "weights e4m3 vs cpu"). */
void h3_check_quant_exact(report *r, const h3_check_ctx *k, const char *stage, const char *what, const uint16_t *x,
                          long n, int cols, const int *rows, const uint8_t *q8_gpu, const float *s_gpu);
/* An FP8 GEMM: x8 [S][K] with sx [S], W8 [N][K] with sw [N] (the GPU's
 * operands; block scales: see gemm_blocks) -> y_gpu [S][N] vs cpu_gemm_fp8
 * (cpu_gemm_fp8_blocks) on the sampled rows. */
void h3_check_gemm_fp8(report *r, const h3_check_ctx *k, const char *stage, const uint8_t *x8, const float *sx,
                       const uint8_t *W8, const float *sw, int N, int K, const uint16_t *y_gpu);

#endif
