/* gen_weights — a deterministic synthetic H3 block as safetensors.
 *
 *   gen_weights [--config full|tiny] [--seed N] [--block N] [--out FILE]
 *               [--profile model|uniform] [--qkv-layout grouped|stacked] [--progress]
 *               [--layout original|single-file|diffusers] [--force]
 *
 * An existing FILE (or --layout folder) is kept (exit 2) unless --force.
 *
 * --layout writes the same block as a published checkpoint holds it
 * (README "Use the official weights"; write_layout), so that the loaders
 * can be tested without a download: original: --out is a folder with two
 * shards and model.safetensors.index.json, our names, QKV grouped, no
 * qkv_layout entry (as the MiniMaxAI shards); single-file: --out is one
 * file, names under "model.diffusion_model.", QKV stacked, no qkv_layout
 * entry (as Comfy-Org's); diffusers: --out is a folder with two shards and
 * diffusion_pytorch_model.safetensors.index.json, diffusers' names, to_q/
 * to_k/to_v and fc1 [up; gate] (as save_pretrained writes them).
 *
 * Element e of tensor k (in the official grouped layout) is drawn from the
 * counter-based h3_normal / h3_uniform(seed, stream, e), so the bytes depend
 * only on the seed, the config and the profile, never on the thread count or
 * chunking. Distributions (fan_in = dim 1; docs/DESIGN.md "Synthetic data"
 * says what the model profile follows):
 *                            uniform                model (default)
 *   qkv, out, fc1, fc2       N(0, 1/fan_in)         z1 exp(z2/2 - 1/4) / sqrt(fan_in):
 *                                                   the same variance, heavy tails
 *                                                   (a normal scale mixture, kurtosis 3e)
 *   adaln weight             N(0, 1/temb)           as the projections, fan_in = temb
 *   adaln bias               0.02 N(0,1)            0.4 N(0,1): scale, shift, gate matter
 *   norm1, norm2             1 + 0.05 N(0,1)        1 + 0.2 N(0,1)
 *   q_norm, k_norm           1 + 0.05 N(0,1)        0.5 * 6^u, u ~ U(0,1): log-uniform over
 *                                                   [0.5, 3], sharp attention rows
 * All rounded to BF16 (RNE). The file is streamed chunk by chunk (never the
 * whole 1.29 GB in memory); chunks are generated with OpenMP. */
#define _POSIX_C_SOURCE 200809L
#include <json-c/json.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "config.h"
#include "numerics.h"
#include "opts.h"
#include "out_guard.h"
#include "rng.h"
#include "safetensors.h"

#define PROG "gen_weights"
#define DEFAULT_OUT "weights/block0.safetensors"
#define CHUNK_ELEMS ((size_t)1 << 22) /* 4 Mi elements = 8 MB per chunk */

static const char usage_text[] =
    "usage: gen_weights [--config full|tiny] [--seed N] [--block N] [--out FILE]\n"
    "                   [--profile model|uniform] [--qkv-layout grouped|stacked] [--progress]\n"
    "                   [--layout original|single-file|diffusers] [--force] [--help] [--version]\n"
    "  writes a deterministic synthetic H3 block (default " DEFAULT_OUT ", names blocks.N.*, N = 0, seed 0);\n"
    "  an existing file is kept unless --force;\n"
    "  profile model (default): a trained DiT's statistics (q/k-norm gains over [0.5, 3], heavy-tailed\n"
    "  weights, adaLN biases that matter); uniform: N(0, 1/fan_in) weights, near-identity norms;\n"
    "  --layout: the same block as a published checkpoint holds it (original, diffusers: --out is\n"
    "  a folder with two shards and an index; single-file: one file, stacked QKV, a name prefix);\n"
    "  --progress: a progress bar (default when stderr is a terminal)\n"
    "  A value follows its flag as the next word or after '=' (--seed 3, --seed=3).\n";

/* Element e (grouped layout) of tensor k of a block with fan-in cols. */
static double weight_value(h3_profile profile, uint64_t seed, int k, int64_t e, int64_t cols)
{
    const double z = h3_normal(seed, (uint64_t)k, (uint64_t)e);
    if (profile == H3_PROFILE_UNIFORM) {
        switch (k) {
        case H3_T_NORM1: case H3_T_NORM2: case H3_T_QNORM: case H3_T_KNORM: return 1.0 + 0.05 * z;
        case H3_T_ADALN_B: return 0.02 * z;
        default: return z / sqrt((double)cols); /* projections and adaln weight: 1/sqrt(fan_in) */
        }
    }
    switch (k) {
    case H3_T_NORM1: case H3_T_NORM2: return 1.0 + 0.2 * z;
    case H3_T_QNORM: case H3_T_KNORM: return 0.5 * pow(6.0, h3_uniform(seed, (uint64_t)k, (uint64_t)e));
    case H3_T_ADALN_B: return 0.4 * z;
    default: /* z1 exp(0.5 z2 - 0.25): E[x^2] = E[exp(z2 - 0.5)] = 1, kurtosis 3 e */
        return z * exp(0.5 * h3_normal(seed, 64 + (uint64_t)k, (uint64_t)e) - 0.25) / sqrt((double)cols);
    }
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

/* ------------------------------------------------ --layout: published forms */

/* From grouped QKV rows w ([3*H*D][C] bf16): part j (0 q, 1 k, 2 v; rows
 * h*D + d are grouped row h*3D + j*D + d), or all three stacked for j < 0.
 * From fc1 [gate; up] ([2F][C]): [up; gate]. Both malloc'd, NULL if out of memory. */
static uint16_t *qkv_rows(const uint16_t *w, int64_t H, int64_t D, int64_t C, int j)
{
    const int j0 = j < 0 ? 0 : j, j1 = j < 0 ? 3 : j + 1;
    uint16_t *o = malloc((size_t)((j1 - j0) * H * D * C) * sizeof *o);
    for (int jj = j0, at = 0; o && jj < j1; jj++)
        for (int64_t h = 0; h < H; h++, at++)
            memcpy(o + at * D * C, w + (h * 3 * D + jj * D) * C, (size_t)(D * C) * sizeof *o);
    return o;
}
static uint16_t *up_gate(const uint16_t *w, int64_t F, int64_t C)
{
    uint16_t *o = malloc((size_t)(2 * F * C) * sizeof *o);
    if (o) {
        memcpy(o, w + F * C, (size_t)(F * C) * sizeof *o);
        memcpy(o + F * C, w, (size_t)(F * C) * sizeof *o);
    }
    return o;
}

/* Writes tensors [lo, hi) of t as shard `name` in dir, recording them in the weight map. */
static int write_shard(const char *dir, const char *name, const st_write_tensor *t, int lo, int hi,
                       json_object *wm, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const char *meta[] = {"format", "pt"};
    if (st_write(path, t + lo, hi - lo, meta, 1, err, errlen)) return -1;
    for (int i = lo; i < hi; i++) json_object_object_add(wm, t[i].decl.name, json_object_new_string(name));
    return 0;
}

/* Re-writes the canonical block in `canonical` (grouped, names blocks.N.,
 * made by main) as layout in out, then removes canonical. */
static int write_layout(const char *canonical, const char *layout, const char *out, unsigned long long block)
{
    char err[1024];
    st_file f;
    if (st_open(canonical, &f, err, sizeof err)) {
        fprintf(stderr, "gen_weights: %s\n", err);
        return 1;
    }
    remove(canonical);
    h3_config names_only = h3_config_full();
    h3_tensor_spec spec[H3_T_COUNT];
    h3_tensor_specs(&names_only, spec);
    const st_tensor *src[H3_T_COUNT];
    for (int i = 0; i < H3_T_COUNT; i++) {
        char nm[160];
        snprintf(nm, sizeof nm, "blocks.%llu.%s", block, spec[i].name);
        src[i] = st_find(&f, nm); /* main wrote them all */
    }
    const int64_t D = src[H3_T_QNORM]->shape[0], C = src[H3_T_NORM1]->shape[0], F = src[H3_T_FC2]->shape[1],
                  H = src[H3_T_QKV]->shape[0] / (3 * D);
    const int diffusers = !strcmp(layout, "diffusers"), single = !strcmp(layout, "single-file");
    st_write_tensor t[H3_T_COUNT + 2];
    char names[H3_T_COUNT + 2][192];
    uint16_t *own[4] = {NULL, NULL, NULL, NULL};
    int n = 0, n_own = 0, rc = 1;
    for (int i = 0; i < H3_T_COUNT; i++) {
        const uint16_t *w = src[i]->data; // [rows][cols] bf16, grouped QKV, fc1 [gate; up]
        for (int p = 0; p < (diffusers && i == H3_T_QKV ? 3 : 1); p++, n++) {
            if (diffusers)
                snprintf(names[n], sizeof names[n], "transformer_blocks.%llu.%s", block, h3_diffusers_name(i, p));
            else
                snprintf(names[n], sizeof names[n], "%sblocks.%llu.%s", single ? "model.diffusion_model." : "",
                         block, spec[i].name);
            t[n] = (st_write_tensor){{names[n], ST_BF16, src[i]->rank, {src[i]->shape[0], src[i]->shape[1]}}, w};
            uint16_t *moved = NULL;
            if (i == H3_T_QKV && (diffusers || single)) {
                moved = qkv_rows(w, H, D, C, diffusers ? p : -1);
                if (diffusers) t[n].decl.shape[0] = H * D;
            } else if (i == H3_T_FC1 && diffusers) {
                moved = up_gate(w, F, C);
            } else {
                continue;
            }
            if (!moved) {
                fprintf(stderr, "gen_weights: out of memory\n");
                goto out;
            }
            t[n].data = own[n_own++] = moved;
        }
    }
    if (single) {
        const char *meta[] = {"format", "pt"};
        if (st_write(out, t, n, meta, 1, err, sizeof err)) {
            fprintf(stderr, "gen_weights: %s\n", err);
            goto out;
        }
    } else {
        /* two shards (tensors split in the middle of the list) and the index */
        const char *stem = diffusers ? "diffusion_pytorch_model" : "model";
        char s1[96], s2[96], idx[4096];
        snprintf(s1, sizeof s1, "%s-00001-of-00002.safetensors", stem);
        snprintf(s2, sizeof s2, "%s-00002-of-00002.safetensors", stem);
        snprintf(idx, sizeof idx, "%s/%s.safetensors.index.json", out, stem);
        mkdir(out, 0777); /* an error shows up when a shard is written */
        json_object *root = json_object_new_object(), *wm = json_object_new_object(),
                    *meta = json_object_new_object();
        uint64_t total = 0;
        for (int i = 0; i < n; i++)
            total += (uint64_t)t[i].decl.shape[0] * (uint64_t)(t[i].decl.rank == 2 ? t[i].decl.shape[1] : 1) * 2;
        json_object_object_add(meta, "total_size", json_object_new_int64((int64_t)total));
        json_object_object_add(root, "metadata", meta);
        json_object_object_add(root, "weight_map", wm);
        if (write_shard(out, s1, t, 0, n / 2, wm, err, sizeof err) ||
            write_shard(out, s2, t, n / 2, n, wm, err, sizeof err)) {
            fprintf(stderr, "gen_weights: %s\n", err);
            json_object_put(root);
            goto out;
        }
        if (json_object_to_file_ext(idx, root, JSON_C_TO_STRING_PRETTY)) {
            fprintf(stderr, "gen_weights: %s: cannot write the index: %s\n", idx, json_util_get_last_err());
            json_object_put(root);
            goto out;
        }
        json_object_put(root);
    }
    fprintf(stderr, "gen_weights: wrote it as %s: %s (%d tensors)\n", layout, out, n);
    rc = 0;
out:
    for (int i = 0; i < n_own; i++) free(own[i]);
    st_close(&f);
    return rc;
}

int main(int argc, char **argv)
{
    const char *config = "full", *out = DEFAULT_OUT, *layout = "grouped", *pub = NULL, *pub_out = NULL;
    char pub_tmp[4096];
    h3_profile profile = H3_PROFILE_MODEL;
    unsigned long long seed = 0, block = 0;
    int want_progress = isatty(2), force = 0;
    static const h3_flag flags[] = {{"config", 1}, {"seed", 1},       {"block", 1},    {"out", 1},   {"profile", 1},
                                    {"qkv-layout", 1}, {"progress", 0}, {"layout", 1}, {"force", 0}, {NULL, 0}};
    enum { F_CONFIG, F_SEED, F_BLOCK, F_OUT, F_PROFILE, F_QKV_LAYOUT, F_PROGRESS, F_LAYOUT, F_FORCE };
    static const char *const configs[] = {"full", "tiny", NULL}, *const layouts[] = {"grouped", "stacked", NULL},
                             *const pubs[] = {"original", "single-file", "diffusers", NULL};
    const h3_cli cli = {PROG, usage_text, flags, NULL};
    const char *v;
    for (int f; (f = h3_cli_next(&cli, argc, argv, &v)) >= 0;) {
        switch (f) {
        case F_CONFIG: config = configs[h3_cli_choice(PROG, "--config", v, configs)]; break;
        case F_SEED: seed = h3_cli_uint(PROG, "--seed", v, 0, UINT64_MAX); break;
        case F_BLOCK: block = h3_cli_uint(PROG, "--block", v, 0, 1000000); break;
        case F_OUT:
            if (!*v) h3_cli_fail(PROG, "--out needs a file name");
            out = v;
            break;
        case F_PROFILE:
            if (h3_profile_parse(v, &profile)) h3_cli_fail(PROG, "--profile: '%s' is not one of model, uniform", v);
            break;
        case F_QKV_LAYOUT: layout = layouts[h3_cli_choice(PROG, "--qkv-layout", v, layouts)]; break;
        case F_PROGRESS: want_progress = 1; break;
        case F_LAYOUT: /* the canonical file goes to a temporary, then write_layout */
            pub = pubs[h3_cli_choice(PROG, "--layout", v, pubs)];
            break;
        case F_FORCE: force = 1; break;
        }
    }
    if (pub) {
        if (strcmp(layout, "grouped")) h3_cli_fail(PROG, "--qkv-layout: --layout %s fixes the QKV row order", pub);
        if (!strcmp(out, DEFAULT_OUT)) h3_cli_fail(PROG, "--layout %s needs --out", pub);
        pub_out = out;
        snprintf(pub_tmp, sizeof pub_tmp, "%s.canonical.tmp", out);
        out = pub_tmp;
    }
    if (refuse_existing("gen_weights", pub_out ? pub_out : out, force)) return 2;
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
                          "block", block_s, "qkv_layout", layout, "profile", h3_profile_name(profile)};
    char err[512];
    st_writer *w = st_writer_open(out, decl, H3_T_COUNT, meta, 7, err, sizeof err);
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
                buf[j] = h3_f32_to_bf16((float)weight_value(profile, seed, k, e, cols));
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
    fprintf(stderr, "gen_weights: wrote %s: config %s, profile %s, block %llu, seed %llu, qkv %s, %lld params, %.1f MB "
                    "in %.1f s (%.0f MB/s, %d threads)\n",
            out, config, h3_profile_name(profile), block, seed, layout, (long long)h3_param_count(&cfg), total / 1e6, el,
            el > 0 ? total / 1e6 / el : 0.0, omp_get_max_threads());
    return pub ? write_layout(out, pub, pub_out, block) : 0;
}
