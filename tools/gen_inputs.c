/* gen_inputs — the default H3 block inputs (core/inputs.c has the layout).
 *
 *   gen_inputs [--config full|tiny] [--tokens N] [--seed N] [--profile model|uniform] [--out FILE] [--force]
 *
 * Writes x [S][hidden] BF16, temb [T] F32, tags [S] I32, positions [S][3] F32
 * (default weights/inputs.safetensors, S = 30272, seed 0, profile model: see
 * h3_inputs_default). An existing FILE is kept (exit 2) unless --force. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "inputs.h"
#include "opts.h"
#include "out_guard.h"

#define PROG "gen_inputs"
#define DEFAULT_OUT "weights/inputs.safetensors"

#define STR_(x) #x
#define STR(x) STR_(x)
static const char usage_text[] =
    "usage: gen_inputs [--config full|tiny] [--tokens N] [--seed N] [--profile model|uniform] [--out FILE]\n"
    "                  [--force] [--help] [--version]\n"
    "  writes the default packed inputs (default " DEFAULT_OUT ", " STR(H3_DEFAULT_TOKENS) " tokens, seed 0, profile\n"
    "  model: massive-activation channels and channel means in x; uniform: x ~ N(0,1)); an existing\n"
    "  file is kept unless --force. dit_block's own synthetic inputs default to seed 1: gen_inputs\n"
    "  --seed 1 --tokens N writes the inputs dit_block --tokens N runs on.\n"
    "  A value follows its flag as the next word or after '=' (--tokens 32, --tokens=32).\n";

int main(int argc, char **argv)
{
    const char *config = "full", *out = DEFAULT_OUT;
    unsigned long long seed = 0, tokens = H3_DEFAULT_TOKENS;
    h3_profile profile = H3_PROFILE_MODEL;
    int force = 0;
    static const h3_flag flags[] = {{"config", 1}, {"tokens", 1}, {"seed", 1}, {"profile", 1},
                                    {"out", 1},    {"force", 0},  {NULL, 0}};
    enum { F_CONFIG, F_TOKENS, F_SEED, F_PROFILE, F_OUT, F_FORCE };
    static const char *const configs[] = {"full", "tiny", NULL};
    const h3_cli cli = {PROG, usage_text, flags, NULL};
    const char *v;
    for (int f; (f = h3_cli_next(&cli, argc, argv, &v)) >= 0;) {
        switch (f) {
        case F_CONFIG: config = configs[h3_cli_choice(PROG, "--config", v, configs)]; break;
        case F_TOKENS: tokens = h3_cli_uint(PROG, "--tokens", v, 1, 1u << 24); break;
        case F_SEED: seed = h3_cli_uint(PROG, "--seed", v, 0, UINT64_MAX); break;
        case F_PROFILE:
            if (h3_profile_parse(v, &profile)) h3_cli_fail(PROG, "--profile: '%s' is not one of model, uniform", v);
            break;
        case F_OUT:
            if (!*v) h3_cli_fail(PROG, "--out needs a file name");
            out = v;
            break;
        case F_FORCE: force = 1; break;
        }
    }
    if (refuse_existing("gen_inputs", out, force)) return 2;
    if (!strcmp(out, DEFAULT_OUT)) mkdir("weights", 0777);
    h3_config cfg = !strcmp(config, "tiny") ? h3_config_tiny() : h3_config_full();
    h3_inputs in;
    char err[512];
    if (h3_inputs_default(&cfg, (int)tokens, seed, profile, &in, err, sizeof err) != 0 ||
        h3_inputs_save(out, &cfg, &in, err, sizeof err) != 0) {
        fprintf(stderr, "gen_inputs: %s\n", err);
        h3_inputs_free(&in);
        return 1;
    }
    printf("gen_inputs: wrote %s: config %s, profile %s, seed %llu, %d tokens = %d text + %d audio + %d video\n", out,
           config, h3_profile_name(profile), seed, in.S, in.count[H3_TAG_TEXT], in.count[H3_TAG_AUDIO], in.count[H3_TAG_VIDEO]);
    h3_inputs_free(&in);
    return 0;
}
