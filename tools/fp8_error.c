/* fp8_error.c — where the FP8 GEMM mode's error comes from, on the CPU.
 *
 *   fp8_error --weights FILE [--tokens N] [--seed N] [--profile model|uniform] [--scales rows|blocks|both]
 *
 * Runs the CPU reference chain (emulated FP8 attention, key tile 32) with
 * BF16 GEMMs, then with each GEMM alone in the FP8 GEMM mode's numerics
 * (cpu_block_forward_fp8: weights e4m3 per output channel, inputs e4m3 per
 * token), then with all four, and prints each output's relative RMS against
 * the BF16 chain. --scales blocks (or both) runs the same with block scales
 * instead (cpu_gemm_fp8_blocks: inputs per token per 128 columns, weights
 * per 128 x 128 block: cuBLASLt's VEC128 / BLK128x128 mode on Hopper), the
 * accuracy half of that mode's question (issue 35). Deterministic (synthetic inputs from --seed, the inputs of
 * dit_block --tokens N --seed N). Costs 6 CPU block runs: a few hundred
 * tokens of the full block take seconds to minutes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "cpu_ref.h"
#include "inputs.h"
#include "numerics.h"
#include "opts.h"

#define PROG "fp8_error"

static const char usage_text[] =
    "usage: fp8_error --weights FILE [--tokens N] [--seed N] [--profile model|uniform]\n"
    "                 [--scales rows|blocks|both] [--help] [--version]\n"
    "  the FP8 GEMM mode's error, GEMM by GEMM, on the CPU: the block's output with each GEMM\n"
    "  alone in FP8, then all four, against the BF16-GEMM chain (relative RMS)\n"
    "  --weights FILE   a block as dit_block --weights takes it\n"
    "  --tokens N       synthetic tokens, 1..65536 (default 256)\n"
    "  --seed N         seed of the synthetic inputs (default 1, as dit_block's)\n"
    "  --profile P      model (default) or uniform: the synthetic inputs' statistics\n"
    "  --scales S       rows (default, as dit_block's --gemm-scales rows: per token and per output channel),\n"
    "                   blocks (--gemm-scales blocks: per token per 128 columns, weights per 128 x 128) or both\n"
    "  A value follows its flag as the next word or after '=' (--tokens 64, --tokens=64).\n";

static double rel_rms(const uint16_t *a, const uint16_t *b, size_t n)
{
    double se = 0, sr = 0;
    for (size_t i = 0; i < n; i++) {
        const double u = h3_bf16_to_f32(a[i]), v = h3_bf16_to_f32(b[i]);
        se += (u - v) * (u - v);
        sr += v * v;
    }
    return sr > 0 ? sqrt(se / sr) : sqrt(se);
}

int main(int argc, char **argv)
{
    const char *weights = NULL;
    long tokens = 256;
    unsigned long long seed = 1;
    h3_profile profile = H3_PROFILE_MODEL;
    int scales = 1; /* bit 0: rows, bit 1: blocks */
    static const h3_flag flags[] = {{"weights", 1}, {"tokens", 1}, {"seed", 1}, {"profile", 1}, {"scales", 1},
                                    {NULL, 0}};
    enum { F_WEIGHTS, F_TOKENS, F_SEED, F_PROFILE, F_SCALES };
    const h3_cli cli = {PROG, usage_text, flags, NULL};
    const char *v;
    for (int f; (f = h3_cli_next(&cli, argc, argv, &v)) >= 0;) {
        switch (f) {
        case F_WEIGHTS: weights = v; break;
        case F_TOKENS: tokens = (long)h3_cli_uint(PROG, "--tokens", v, 1, 65536); break;
        case F_SEED: seed = h3_cli_uint(PROG, "--seed", v, 0, UINT64_MAX); break;
        case F_PROFILE:
            if (h3_profile_parse(v, &profile)) h3_cli_fail(PROG, "--profile: '%s' is not one of model, uniform", v);
            break;
        case F_SCALES:
            scales = !strcmp(v, "rows") ? 1 : !strcmp(v, "blocks") ? 2 : !strcmp(v, "both") ? 3 : 0;
            if (!scales) h3_cli_fail(PROG, "--scales: '%s' is not one of rows, blocks, both", v);
            break;
        }
    }
    if (!weights) h3_cli_fail(PROG, "--weights FILE is required");
    char err[1024];
    h3_block blk;
    if (h3_block_load(weights, &blk, NULL, err, sizeof err)) {
        fprintf(stderr, "fp8_error: %s\n", err);
        return 2;
    }
    h3_inputs in;
    if (h3_inputs_default(&blk.cfg, (int)tokens, seed, profile, &in, err, sizeof err)) {
        fprintf(stderr, "fp8_error: %s\n", err);
        return 2;
    }
    const size_t n = (size_t)in.S * blk.cfg.hidden;
    uint16_t *ref = malloc(n * 2), *out = malloc(n * 2);
    if (!ref || !out) {
        fprintf(stderr, "fp8_error: out of host memory for %ld tokens\n", tokens);
        return 1;
    }
    cpu_block_weights wt;
    for (int i = 0; i < H3_T_COUNT; i++) wt.w[i] = blk.w[i];
    fprintf(stderr, "fp8_error: %s, %d tokens: BF16 chain...\n", weights, in.S);
    if (cpu_block_forward(&blk.cfg, &wt, in.S, in.x, in.temb, in.tags, in.pos, 32, 0, 0, ref, NULL)) {
        fprintf(stderr, "fp8_error: out of host memory running the block at %d tokens\n", in.S);
        return 1;
    }
    static const struct { int mask; const char *what; } runs[] = {
        {1, "qkv_gemm in FP8"}, {2, "out_gemm in FP8"}, {4, "fc1_gemm in FP8"}, {8, "fc2_gemm in FP8"},
        {CPU_FP8_ALL, "all four in FP8 (--gemm fp8)"}};
    printf("block output vs the BF16-GEMM chain, %d tokens, seed %llu (relative RMS):\n", in.S, seed);
    for (int mode = 0; mode < 2; mode++) {
        if (!(scales >> mode & 1)) continue;
        if (scales == 3) printf("%s\n", mode ? "block scales (1x128 inputs, 128x128 weights):"
                                              : "row scales (per token, per output channel):");
        for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
            fprintf(stderr, "fp8_error: %s%s...\n", runs[r].what, mode ? ", block scales" : "");
            if (cpu_block_forward_fp8(&blk.cfg, &wt, in.S, in.x, in.temb, in.tags, in.pos, 32,
                                      runs[r].mask | (mode ? CPU_FP8_BLOCKS : 0), 0, out, NULL)) {
                fprintf(stderr, "fp8_error: out of host memory running the block at %d tokens\n", in.S);
                return 1;
            }
            printf("  %-32s %.4f%%\n", runs[r].what, 100.0 * rel_rms(out, ref, n));
            fflush(stdout);
        }
    }
    free(ref);
    free(out);
    h3_inputs_free(&in);
    h3_block_free(&blk);
    return 0;
}
