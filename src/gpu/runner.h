/* runner.h — the H3 block on the GPU: weights uploaded once, cuBLASLt GEMMs,
 * our kernels for everything else, per-op CUDA-event timing, then the stage
 * checks against the CPU reference (checker.h). */
#ifndef H3_RUNNER_H
#define H3_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "block.h"
#include "cli.h"
#include "inputs.h"
#include "report.h"

typedef struct {
    char name[128];
    int cc_major, cc_minor, sms;
    size_t mem_bytes;
    int supported; /* this build has machine code for it */
} gpu_info;

/* 1 when a CUDA GPU is present (fills g), 0 otherwise (g->name says why). */
int gpu_probe(gpu_info *g);

/* Device bytes the block needs at S tokens (resident weights, activations,
 * cuBLASLt workspace) with the GEMMs of fp8_mask (config.h's H3_GEMM_* bits)
 * in FP8; *weights (may be NULL) gets the weights' share. */
size_t gpu_block_bytes(const h3_config *c, int S, int fp8_mask, size_t *weights);
/* 0 when the block fits the device's free memory now (or that cannot be
 * told); else -1 with one line in err: the bytes needed, the bytes free and
 * the largest token count that fits. */
int gpu_check_fits(const h3_config *c, int S, int fp8_mask, char *err, size_t errlen);

/* Runs, times and checks the block. out_host [S][C] receives the output when
 * non-NULL. Returns 0, or -1 with err (a user error: exit 2 when *user_error). */
int gpu_run_block(const cli_options *o, const gpu_info *g, const h3_block *b, const h3_inputs *in, report *r,
                  uint16_t *out_host, int *user_error, char *err, size_t errlen);

/* The same block sequence parallel over o->gpus ranks (sp.c): same contract,
 * no stage checks (the output is compared with the one-GPU run instead). */
int gpu_run_block_sp(const cli_options *o, const gpu_info *g, const h3_block *b, const h3_inputs *in, report *r,
                     uint16_t *out_host, int *user_error, char *err, size_t errlen);

#endif
