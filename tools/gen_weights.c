/* gen_weights — a deterministic synthetic H3 block as safetensors.
 *
 *   gen_weights [--config full|tiny] [--seed N] [--block N] [--out FILE]
 *               [--qkv-layout grouped|stacked] [--progress] [--force]
 *
 * An existing FILE is kept (exit 2) unless --force.
 *
 * Element e of tensor k (in the official grouped layout) is drawn from
 * h3_normal(seed, k, e), so the bytes depend only on the seed and the config,
 * never on the thread count or chunking. Distributions:
 *   projections (qkv, out, fc1, fc2)  N(0, 1/fan_in), fan_in = dim 1, so a
 *                                     GEMM keeps unit-variance activations;
 *   norm1, norm2, q_norm, k_norm      1 + 0.05 N(0,1) (near-identity RMSNorm);
 *   adaln weight                      N(0, 1/temb);
 *   adaln bias                        0.02 N(0,1).
 * All rounded to BF16 (RNE). The file is streamed chunk by chunk (never the
 * whole 1.29 GB in memory); chunks are generated with OpenMP. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "numerics.h"
#include "out_guard.h"
#include "rng.h"
#include "safetensors.h"

#define DEFAULT_OUT "weights/block0.safetensors"
#define CHUNK_ELEMS ((size_t)1 << 22) /* 4 Mi elements = 8 MB per chunk */

static void usage(FILE *o)
{
    fprintf(o, "usage: gen_weights [--config full|tiny] [--seed N] [--block N] [--out FILE]\n"
               "                   [--qkv-layout grouped|stacked] [--progress] [--force]\n"
               "  writes a deterministic synthetic H3 block (default %s, names blocks.N.*, N = 0, seed 0);\n"
               "  an existing file is kept unless --force\n",
            DEFAULT_OUT);
}

static int bad(const char *fmt, const char *a)
{
    fprintf(stderr, "gen_weights: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    usage(stderr);
    return 2;
}

/* Non-negative decimal integer, no sign, no junk; -1 on error. */
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void progress(double done, double total, double t0)
{
    double el = now_s() - t0, rate = el > 0 ? done / el : 0, eta = rate > 0 ? (total - done) / rate : 0;
    int bar = 30, fill = (int)(bar * done / total);
    char b[64];
    for (int i = 0; i < bar; i++) b[i] = i < fill ? '#' : '.';
    b[bar] = 0;
    fprintf(stderr, "\r[%s] %5.1f%%  %7.1f / %.1f MB  %6.1f MB/s  ETA %4.0f s ", b, 100.0 * done / total, done / 1e6,
            total / 1e6, rate / 1e6, eta);
    fflush(stderr);
}

int main(int argc, char **argv)
{
    const char *config = "full", *out = DEFAULT_OUT, *layout = "grouped";
    unsigned long long seed = 0, block = 0;
    int want_progress = isatty(2), force = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--progress")) {
            want_progress = 1;
            continue;
        }
        if (!strcmp(a, "--force")) {
            force = 1;
            continue;
        }
        if (strcmp(a, "--config") && strcmp(a, "--seed") && strcmp(a, "--block") && strcmp(a, "--out") &&
            strcmp(a, "--qkv-layout"))
            return bad("unknown flag '%s'", a);
        if (i + 1 >= argc) return bad("%s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--config")) {
            if (strcmp(v, "full") && strcmp(v, "tiny")) return bad("--config must be full or tiny, not '%s'", v);
            config = v;
        } else if (!strcmp(a, "--seed")) {
            if (parse_u64(v, UINT64_MAX, &seed)) return bad("--seed needs a non-negative integer, not '%s'", v);
        } else if (!strcmp(a, "--block")) {
            if (parse_u64(v, 1000000, &block)) return bad("--block needs an integer 0..1000000, not '%s'", v);
        } else if (!strcmp(a, "--out")) {
            if (!*v) return bad("--out needs a file name%s", "");
            out = v;
        } else {
            if (strcmp(v, "grouped") && strcmp(v, "stacked"))
                return bad("--qkv-layout must be grouped or stacked, not '%s'", v);
            layout = v;
        }
    }
    if (refuse_existing("gen_weights", out, force)) return 2;
    const int stacked = !strcmp(layout, "stacked");
    if (!strcmp(out, DEFAULT_OUT)) mkdir("weights", 0777); /* the default folder; an error shows up at open */

    h3_config cfg = !strcmp(config, "tiny") ? h3_config_tiny() : h3_config_full();
    h3_tensor_spec spec[H3_T_COUNT];
    h3_tensor_specs(&cfg, spec);
    st_decl decl[H3_T_COUNT];
    char names[H3_T_COUNT][96];
    uint64_t total = 0;
    for (int k = 0; k < H3_T_COUNT; k++) {
        snprintf(names[k], sizeof names[k], "blocks.%llu.%s", block, spec[k].name);
        decl[k] = (st_decl){.name = names[k], .dtype = ST_BF16, .rank = spec[k].rank};
        decl[k].shape[0] = spec[k].shape[0];
        decl[k].shape[1] = spec[k].shape[1];
        total += 2ull * (uint64_t)(spec[k].rank == 1 ? spec[k].shape[0] : spec[k].shape[0] * spec[k].shape[1]);
    }
    char seed_s[32], block_s[32];
    snprintf(seed_s, sizeof seed_s, "%llu", seed);
    snprintf(block_s, sizeof block_s, "%llu", block);
    const char *meta[] = {"format", "pt", "generator", "h3block gen_weights", "seed", seed_s, "config", config,
                          "block", block_s, "qkv_layout", layout};
    char err[512];
    st_writer *w = st_writer_open(out, decl, H3_T_COUNT, meta, 6, err, sizeof err);
    if (!w) {
        fprintf(stderr, "gen_weights: %s\n", err);
        return 1;
    }
    uint16_t *buf = malloc(CHUNK_ELEMS * sizeof *buf); // [CHUNK_ELEMS] bf16
    if (!buf) {
        fprintf(stderr, "gen_weights: out of memory\n");
        st_writer_abort(w);
        return 1;
    }
    const double t0 = now_s();
    double last = t0; /* first bar after 0.2 s */
    uint64_t done = 0;
    const int64_t D = cfg.head_dim, I = (int64_t)cfg.heads * cfg.head_dim;
    for (int k = 0; k < H3_T_COUNT; k++) {
        const int64_t rows = spec[k].shape[0], cols = spec[k].rank == 2 ? spec[k].shape[1] : 1;
        const int64_t n = rows * cols;
        double mean = 0, sd;
        switch (k) {
        case H3_T_NORM1: case H3_T_NORM2: case H3_T_QNORM: case H3_T_KNORM: mean = 1.0; sd = 0.05; break;
        case H3_T_ADALN_B: sd = 0.02; break;
        default: sd = 1.0 / sqrt((double)cols); break; /* projections and adaln weight: 1/sqrt(fan_in) */
        }
        const int permute = stacked && k == H3_T_QKV;
        for (int64_t e0 = 0; e0 < n; e0 += (int64_t)CHUNK_ELEMS) {
            const int64_t m = n - e0 < (int64_t)CHUNK_ELEMS ? n - e0 : (int64_t)CHUNK_ELEMS;
#pragma omp parallel for schedule(static)
            for (int64_t j = 0; j < m; j++) {
                int64_t e = e0 + j; /* element in file order */
                if (permute) {       /* stacked row r = q/k/v j*I + h*D + d is grouped row h*3D + j*D + d */
                    int64_t r = e / cols, c = e % cols, jj = r / I, h = (r % I) / D, d = r % D;
                    e = (h * 3 * D + jj * D + d) * cols + c;
                }
                buf[j] = h3_f32_to_bf16((float)(mean + sd * h3_normal(seed, (uint64_t)k, (uint64_t)e)));
            }
            if (st_writer_write(w, buf, (size_t)m * sizeof *buf, err, sizeof err) != 0) {
                fprintf(stderr, "%sgen_weights: %s\n", want_progress ? "\n" : "", err);
                st_writer_abort(w);
                free(buf);
                return 1;
            }
            done += (uint64_t)m * 2;
            if (want_progress && (now_s() - last > 0.2 || done == total)) {
                last = now_s();
                progress((double)done, (double)total, t0);
            }
        }
    }
    free(buf);
    if (st_writer_close(w, err, sizeof err) != 0) {
        fprintf(stderr, "%sgen_weights: %s\n", want_progress ? "\n" : "", err);
        return 1;
    }
    double el = now_s() - t0;
    if (want_progress) fprintf(stderr, "\n");
    fprintf(stderr, "gen_weights: wrote %s: config %s, block %llu, seed %llu, qkv %s, %lld params, %.1f MB in %.1f s "
                    "(%.0f MB/s, %d threads)\n",
            out, config, block, seed, layout, (long long)h3_param_count(&cfg), total / 1e6, el,
            el > 0 ? total / 1e6 / el : 0.0, omp_get_max_threads());
    return 0;
}
