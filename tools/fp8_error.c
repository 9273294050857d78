/* fp8_error.c — where the FP8 GEMM mode's error comes from, on the CPU.
 *
 *   fp8_error --weights FILE [--tokens N] [--seed N]
 *
 * Runs the CPU reference chain (emulated FP8 attention, key tile 32) with
 * BF16 GEMMs, then with each GEMM alone in the FP8 GEMM mode's numerics
 * (cpu_block_forward_fp8: weights e4m3 per output channel, inputs e4m3 per
 * token), then with all four, and prints each output's relative RMS against
 * the BF16 chain. Deterministic (synthetic inputs from --seed, the inputs of
 * dit_block --tokens N --seed N). Costs 6 CPU block runs: a few hundred
 * tokens of the full block take seconds to minutes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "cpu_ref.h"
#include "inputs.h"
#include "numerics.h"

static int usage(const char *why)
{
    fprintf(stderr, "fp8_error: %s\nusage: fp8_error --weights FILE [--tokens N (1..65536, default 256)] [--seed N] [--profile model|uniform]\n", why);
    return 2;
}

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
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(argv[i], "--weights") && v) {
            weights = argv[++i];
        } else if (!strcmp(argv[i], "--tokens") && v) {
            errno = 0;
            tokens = strtol(v, &end, 10);
            if (errno || *end || end == v || tokens < 1 || tokens > 65536) return usage("--tokens needs 1..65536");
            i++;
        } else if (!strcmp(argv[i], "--profile") && v) {
            if (h3_profile_parse(argv[++i], &profile)) return usage("--profile needs model or uniform");
        } else if (!strcmp(argv[i], "--seed") && v) {
            errno = 0;
            seed = strtoull(v, &end, 10);
            if (errno || *end || end == v || v[0] == '-') return usage("--seed needs a non-negative integer");
            i++;
        } else {
            return usage(!strcmp(argv[i], "--help") ? "the FP8 GEMM error, GEMM by GEMM" : "unknown flag or missing value");
        }
    }
    if (!weights) return usage("--weights FILE is required");
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
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        fprintf(stderr, "fp8_error: %s...\n", runs[r].what);
        if (cpu_block_forward_fp8(&blk.cfg, &wt, in.S, in.x, in.temb, in.tags, in.pos, 32, runs[r].mask, 0, out, NULL)) {
            fprintf(stderr, "fp8_error: out of host memory running the block at %d tokens\n", in.S);
            return 1;
        }
        printf("  %-32s %.4f%%\n", runs[r].what, 100.0 * rel_rms(out, ref, n));
        fflush(stdout);
    }
    free(ref);
    free(out);
    h3_inputs_free(&in);
    h3_block_free(&blk);
    return 0;
}
