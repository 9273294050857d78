/* gen_inputs — the default H3 block inputs (src/inputs.c has the layout).
 *
 *   gen_inputs [--config full|tiny] [--tokens N] [--seed N] [--profile model|uniform] [--out FILE] [--force]
 *
 * Writes x [S][hidden] BF16, temb [T] F32, tags [S] I32, positions [S][3] F32
 * (default weights/inputs.safetensors, S = 30272, seed 0, profile model: see
 * h3_inputs_default). An existing FILE is kept (exit 2) unless --force. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "inputs.h"
#include "out_guard.h"

#define DEFAULT_OUT "weights/inputs.safetensors"

static void usage(FILE *o)
{
    fprintf(o, "usage: gen_inputs [--config full|tiny] [--tokens N] [--seed N] [--profile model|uniform] [--out FILE]\n"
               "                  [--force]\n"
               "  writes the default packed inputs (default %s, %d tokens, seed 0, profile model:\n"
               "  massive-activation channels and channel means in x; uniform: x ~ N(0,1)); an existing\n"
               "  file is kept unless --force\n",
            DEFAULT_OUT, H3_DEFAULT_TOKENS);
}

static int bad(const char *fmt, const char *a)
{
    fprintf(stderr, "gen_inputs: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    usage(stderr);
    return 2;
}

static int parse_u64(const char *s, unsigned long long max, unsigned long long *v)
{
    if (!s || !*s) return -1;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9') return -1;
    errno = 0;
    unsigned long long x = strtoull(s, NULL, 10);
    if (errno || x > max) return -1;
    *v = x;
    return 0;
}

int main(int argc, char **argv)
{
    const char *config = "full", *out = DEFAULT_OUT;
    unsigned long long seed = 0, tokens = H3_DEFAULT_TOKENS;
    h3_profile profile = H3_PROFILE_MODEL;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--force")) {
            force = 1;
            continue;
        }
        if (strcmp(a, "--config") && strcmp(a, "--tokens") && strcmp(a, "--seed") && strcmp(a, "--out") &&
            strcmp(a, "--profile"))
            return bad("unknown flag '%s'", a);
        if (i + 1 >= argc) return bad("%s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--config")) {
            if (strcmp(v, "full") && strcmp(v, "tiny")) return bad("--config must be full or tiny, not '%s'", v);
            config = v;
        } else if (!strcmp(a, "--tokens")) {
            if (parse_u64(v, 1u << 24, &tokens) || tokens < 1)
                return bad("--tokens needs an integer 1..16777216, not '%s'", v);
        } else if (!strcmp(a, "--seed")) {
            if (parse_u64(v, UINT64_MAX, &seed)) return bad("--seed needs a non-negative integer, not '%s'", v);
        } else if (!strcmp(a, "--profile")) {
            if (h3_profile_parse(v, &profile)) return bad("--profile must be model or uniform, not '%s'", v);
        } else {
            if (!*v) return bad("--out needs a file name%s", "");
            out = v;
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
