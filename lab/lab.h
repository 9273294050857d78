/* lab.h — the lab's Hopper attention variants (lab/attn_sm90_lab.cu), for the
 * benchmark and the tests when built with -DH3_LAB=ON. Same operands and
 * outputs as h3k_attn_fp8_sm90 (kernels.h); variant: a number of the list in
 * attn_sm90_lab.cu's header. */
#ifndef H3_LAB_H
#define H3_LAB_H

#include <stdint.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs variant (0 or a cudaError_t; cudaErrorInvalidValue for an unknown
 * variant or a vmu that does not match its mode). */
int h3lab_attn_sm90(int variant, const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq,
                    const float *sk, const float *sv, const float *vmu, int S, int H, uint16_t *O, float *lse,
                    h3_stream stream);
/* h3lab_attn_sm90 of the variant last passed to h3lab_select (0: none yet,
 * cudaErrorInvalidValue): the launcher signature of kernels.h, for the
 * kernel tables of the tests and the benchmark (--variant N). */
void h3lab_select(int variant);
int h3lab_attn_sm90_selected(const uint8_t *q8, const uint8_t *k8, const uint8_t *vt8, const float *sq,
                             const float *sk, const float *sv, const float *vmu, int S, int H, uint16_t *O,
                             float *lse, h3_stream stream);
/* The grid variant runs on for S, H on the current device (attn/sm90_grid.h):
 * the production plan for v157, the split plan for v158, v159, v161 and
 * v162, the plain grid (no split rows) for the others; for the emulation that
 * checks it (cpu_ref.h cpu_attn_split). 0, or cudaErrorInvalidValue (no such variant, S or H < 1). */
int h3lab_attn_sm90_grid(int variant, int S, int H, h3_sm90_grid *grid);
int h3lab_attn_sm90_selected_grid(int S, int H, h3_sm90_grid *grid); /* of h3lab_select's variant */
const char *h3lab_attn_sm90_name(int variant); /* "vN ...", NULL if there is no such variant */
int h3lab_attn_sm90_smoothed(int variant);     /* 1: called with V's mean, 0: without, -1: no such variant */

#ifdef __cplusplus
}
#endif
#endif
