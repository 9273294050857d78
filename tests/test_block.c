/* test_block — the block-weights loader (src/block.c) on files made by
 * gen_weights and on edited copies of them.
 *
 * Run alone: ctest --test-dir build -R '^test_block$'
 *   or: build/tests/test_block build/tools/gen_weights   (H3_TEST_SEED=N fixes the seed)
 * Fixtures are written into the current directory (the build's tests dir). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "block.h"
#include "numerics.h"

#include "test_util.h"

static const char *gen;
static unsigned long long seed;

static void run_gen(const char *args, const char *out)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --config tiny --force %s --out %s 2>/dev/null", gen, args, out);
    if (system(cmd) != 0) {
        printf("FAIL: %s\n", cmd);
        exit(1);
    }
}

/* An editable copy of a file's tensors (data still points into f). */
typedef struct {
    int n;
    st_write_tensor t[32];
    char names[32][128];
    const char *meta[16];
    int n_meta;
} copy;

static void take(const st_file *f, copy *c)
{
    memset(c, 0, sizeof *c);
    c->n = f->n_tensors;
    for (int i = 0; i < f->n_tensors; i++) {
        const st_tensor *s = &f->tensors[i];
        snprintf(c->names[i], sizeof c->names[i], "%s", s->name);
        c->t[i].decl.name = c->names[i];
        c->t[i].decl.dtype = s->dtype;
        c->t[i].decl.rank = s->rank;
        memcpy(c->t[i].decl.shape, s->shape, sizeof s->shape);
        c->t[i].data = s->data;
    }
    for (int i = 0; i < f->n_meta && i < 8; i++) {
        c->meta[2 * i] = f->meta_keys[i];
        c->meta[2 * i + 1] = f->meta_vals[i];
        c->n_meta = i + 1;
    }
}

static int find(const copy *c, const char *suffix)
{
    for (int i = 0; i < c->n; i++) {
        size_t a = strlen(c->names[i]), b = strlen(suffix);
        if (a >= b && !strcmp(c->names[i] + a - b, suffix)) return i;
    }
    printf("FAIL: no tensor *%s in the copy\n", suffix);
    exit(1);
}

/* u = c with u's names pointing at u's own copies. */
static void dup(const copy *c, copy *u)
{
    *u = *c;
    for (int i = 0; i < u->n; i++) u->t[i].decl.name = u->names[i];
}

static void drop(copy *u, int k)
{
    for (int i = k; i + 1 < u->n; i++) {
        memcpy(u->names[i], u->names[i + 1], sizeof u->names[i]);
        u->t[i] = u->t[i + 1];
        u->t[i].decl.name = u->names[i];
    }
    u->n--;
}

static void put(const copy *c, const char *out)
{
    char err[512];
    if (st_write(out, c->t, c->n, c->meta, c->n_meta, err, sizeof err) != 0) {
        printf("FAIL: writing %s: %s\n", out, err);
        exit(1);
    }
}

/* Loading must fail and the message must contain every given fragment. */
static void expect_fail(const char *path, const char *what, const char *frag1, const char *frag2)
{
    h3_block b;
    char err[1024] = "";
    int rc = h3_block_load(path, &b, NULL, err, sizeof err);
    EXPECT(rc != 0, "%s: loaded, expected an error", what);
    if (rc == 0) {
        h3_block_free(&b);
        return;
    }
    printf("  %-22s -> %s\n", what, err);
    EXPECT(strstr(err, path) != NULL, "%s: error does not name the file: %s", what, err);
    EXPECT(!frag1 || strstr(err, frag1), "%s: error lacks '%s': %s", what, frag1, err);
    EXPECT(!frag2 || strstr(err, frag2), "%s: error lacks '%s': %s", what, frag2, err);
}

static int n_warn;
static char last_warn[512];
static void on_warn(const char *m)
{
    n_warn++;
    snprintf(last_warn, sizeof last_warn, "%s", m);
}

/* mean and standard deviation of a BF16 tensor; -1 in *sd if any value is not finite */
static void stats(const uint16_t *w, int64_t n, double *mean, double *sd)
{
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = h3_bf16_to_f32(w[i]);
        if (!isfinite(v)) {
            *mean = 0;
            *sd = -1;
            return;
        }
        s += v;
        s2 += v * v;
    }
    *mean = s / n;
    *sd = sqrt(s2 / n - *mean * *mean);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: test_block PATH/gen_weights\n");
        return 2;
    }
    gen = argv[1];
    const char *es = getenv("H3_TEST_SEED");
    seed = es ? strtoull(es, NULL, 10) : (unsigned long long)time(NULL) % 1000000;
    printf("test_block: seed %llu (H3_TEST_SEED to fix)\n", seed);
    char args[256];
    char err[1024];

    /* 1. A generated tiny block loads and gives the tiny config. */
    snprintf(args, sizeof args, "--seed %llu", seed);
    run_gen(args, "tb_grouped.safetensors");
    h3_block g;
    if (h3_block_load("tb_grouped.safetensors", &g, on_warn, err, sizeof err) != 0) {
        printf("FAIL: loading the generated block: %s\n", err);
        return 1;
    }
    h3_config tiny = h3_config_tiny();
    EXPECT(g.cfg.hidden == tiny.hidden && g.cfg.heads == tiny.heads && g.cfg.head_dim == tiny.head_dim &&
               g.cfg.ffn == tiny.ffn && g.cfg.temb == tiny.temb && g.cfg.modalities == tiny.modalities &&
               g.cfg.eps == tiny.eps && g.cfg.rope_dims == tiny.rope_dims && g.cfg.rope_freqs == tiny.rope_freqs &&
               g.cfg.rope_theta == tiny.rope_theta,
           "inferred config hidden %d heads %d head_dim %d ffn %d temb %d modalities %d is not the tiny one",
           g.cfg.hidden, g.cfg.heads, g.cfg.head_dim, g.cfg.ffn, g.cfg.temb, g.cfg.modalities);
    EXPECT(g.block_index == 0, "block_index %d, expected 0", g.block_index);
    EXPECT(g.n_extra == 0 && n_warn == 0, "n_extra %d warnings %d on a clean file", g.n_extra, n_warn);
    EXPECT(g.qkv_regrouped == NULL, "grouped file was copied");
    for (int i = 0; i < H3_T_COUNT; i++) EXPECT(g.w[i] != NULL, "w[%d] is NULL", i);

    /* The generator's distributions (gen_weights.c header). Tolerances: 5
     * standard errors of the estimate for these sizes, and the BF16 rounding
     * of 1 + 0.05 N (step 2^-7 = 0.0078 near 1) inflates that sd by < 1%. */
    h3_tensor_spec sp[H3_T_COUNT];
    h3_tensor_specs(&g.cfg, sp);
    for (int i = 0; i < H3_T_COUNT; i++) {
        int64_t n = sp[i].rank == 1 ? sp[i].shape[0] : sp[i].shape[0] * sp[i].shape[1];
        double mu, sd, want_mu = 0, want_sd;
        if (i == H3_T_NORM1 || i == H3_T_NORM2 || i == H3_T_QNORM || i == H3_T_KNORM)
            want_mu = 1, want_sd = 0.05;
        else if (i == H3_T_ADALN_B)
            want_sd = 0.02;
        else
            want_sd = 1 / sqrt((double)sp[i].shape[1]);
        stats(g.w[i], n, &mu, &sd);
        EXPECT(sd >= 0, "%s has non-finite values", sp[i].name);
        double se_mu = want_sd / sqrt((double)n), se_sd = want_sd / sqrt(2.0 * n);
        EXPECT(fabs(mu - want_mu) < 5 * se_mu + 1e-3 * want_mu, "%s mean %.5f, expected %.5f", sp[i].name, mu, want_mu);
        EXPECT(fabs(sd - want_sd) < 5 * se_sd + 0.01 * want_sd, "%s sd %.5f, expected %.5f", sp[i].name, sd, want_sd);
    }

    /* 2. --block 7 names. */
    snprintf(args, sizeof args, "--seed %llu --block 7", seed);
    run_gen(args, "tb_block7.safetensors");
    h3_block b7;
    if (h3_block_load("tb_block7.safetensors", &b7, NULL, err, sizeof err) != 0) {
        fails++;
        printf("FAIL: block 7: %s\n", err);
    } else {
        EXPECT(b7.block_index == 7, "block_index %d, expected 7", b7.block_index);
        h3_block_free(&b7);
    }

    copy c;
    take(&g.file, &c);

    /* 3. No prefix: loads, same bytes. */
    {
        copy u;
        dup(&c, &u);
        for (int i = 0; i < u.n; i++) {
            memmove(u.names[i], u.names[i] + strlen("blocks.0."), strlen(u.names[i]) - strlen("blocks.0.") + 1);
            u.t[i].decl.name = u.names[i];
        }
        put(&u, "tb_noprefix.safetensors");
        h3_block b;
        if (h3_block_load("tb_noprefix.safetensors", &b, NULL, err, sizeof err) != 0) {
            fails++;
            printf("FAIL: unprefixed: %s\n", err);
        } else {
            EXPECT(b.block_index == -1, "block_index %d, expected -1", b.block_index);
            EXPECT(b.cfg.hidden == tiny.hidden && b.cfg.ffn == tiny.ffn, "unprefixed config differs");
            for (int i = 0; i < H3_T_COUNT; i++) {
                int64_t n = sp[i].rank == 1 ? sp[i].shape[0] : sp[i].shape[0] * sp[i].shape[1];
                EXPECT(!memcmp(b.w[i], g.w[i], (size_t)n * 2), "unprefixed %s differs", sp[i].name);
            }
            h3_block_free(&b);
        }
    }
    /* 4. Two blocks; prefixed and unprefixed mixed. */
    {
        copy u;
        dup(&c, &u);
        int k = find(&u, "mlp.fc2.weight");
        snprintf(u.names[k], sizeof u.names[k], "blocks.1.mlp.fc2.weight");
        put(&u, "tb_twoblocks.safetensors");
        expect_fail("tb_twoblocks.safetensors", "two prefixes", "'blocks.1.mlp.fc2.weight' (block 1)", "(block 0)");
        dup(&c, &u);
        snprintf(u.names[k], sizeof u.names[k], "mlp.fc2.weight");
        put(&u, "tb_mixed.safetensors");
        expect_fail("tb_mixed.safetensors", "mixed prefixes", "'mlp.fc2.weight' has none", "blocks.0.");
    }
    /* 5. Missing tensors: one the config comes from and one it does not. */
    {
        copy u;
        dup(&c, &u);
        int k = find(&u, "attn.k_norm.weight");
        drop(&u, k);
        put(&u, "tb_missing.safetensors");
        expect_fail("tb_missing.safetensors", "missing k_norm", "tensor 'blocks.0.attn.k_norm.weight' is missing", NULL);
        dup(&c, &u);
        k = find(&u, "mlp.fc2.weight");
        drop(&u, k);
        put(&u, "tb_missing2.safetensors");
        expect_fail("tb_missing2.safetensors", "missing fc2", "'blocks.0.mlp.fc2.weight' is missing", "infer ffn");
    }
    /* 6. Wrong dtype (same byte size). */
    {
        copy u;
        dup(&c, &u);
        u.t[find(&u, "norm2.weight")].decl.dtype = ST_F16;
        put(&u, "tb_dtype.safetensors");
        expect_fail("tb_dtype.safetensors", "F16 norm2", "'blocks.0.norm2.weight': dtype F16, expected BF16", NULL);
    }
    /* 7. Wrong shapes. */
    {
        static uint16_t zeros[1 << 20];
        copy u;
        dup(&c, &u);
        int k = find(&u, "mlp.fc1.weight");
        u.t[k].decl.shape[0] = 1000;
        u.t[k].data = zeros;
        put(&u, "tb_shape.safetensors");
        expect_fail("tb_shape.safetensors", "fc1 rows", "'blocks.0.mlp.fc1.weight': shape [1000, 256], expected [1024, 256]",
                    "ffn 512 from 'blocks.0.mlp.fc2.weight'");
        dup(&c, &u);
        k = find(&u, "attn.out_proj.weight");
        u.t[k].decl.shape[1] = 248;
        u.t[k].data = zeros;
        put(&u, "tb_shape2.safetensors");
        expect_fail("tb_shape2.safetensors", "out_proj cols", "shape [256, 248], expected [256, 256]", "heads 2 from");
        dup(&c, &u);
        k = find(&u, "norm2.weight");
        u.t[k].decl.rank = 2;
        u.t[k].decl.shape[1] = 1;
        put(&u, "tb_rank.safetensors");
        expect_fail("tb_rank.safetensors", "norm2 rank 2", "'blocks.0.norm2.weight': shape [256, 1], expected [256]", NULL);
        dup(&c, &u);
        k = find(&u, "mlp.fc2.weight"); /* ffn 511 is not a multiple of 8 */
        u.t[k].decl.shape[1] = 511;
        u.t[k].data = zeros;
        put(&u, "tb_badcfg.safetensors");
        expect_fail("tb_badcfg.safetensors", "ffn 511", "ffn 511 from 'blocks.0.mlp.fc2.weight'", "multiples of 8");
    }
    /* 8. Extra tensor: warned about, counted, still loads. */
    {
        copy u;
        dup(&c, &u);
        snprintf(u.names[u.n], sizeof u.names[u.n], "blocks.0.attn.extra.bias");
        u.t[u.n] = (st_write_tensor){{u.names[u.n], ST_F32, 1, {4}}, (const float[4]){0}};
        u.n++;
        put(&u, "tb_extra.safetensors");
        h3_block b;
        n_warn = 0;
        if (h3_block_load("tb_extra.safetensors", &b, on_warn, err, sizeof err) != 0) {
            fails++;
            printf("FAIL: extra tensor: %s\n", err);
        } else {
            EXPECT(b.n_extra == 1 && n_warn == 1, "n_extra %d, warnings %d, expected 1 and 1", b.n_extra, n_warn);
            EXPECT(strstr(last_warn, "'blocks.0.attn.extra.bias'"), "warning does not name the tensor: %s", last_warn);
            printf("  %-22s -> warning: %s\n", "extra tensor", last_warn);
            h3_block_free(&b);
        }
    }
    /* 9. Stacked QKV from the same seed re-groups to the grouped file's bytes. */
    {
        snprintf(args, sizeof args, "--seed %llu --qkv-layout stacked", seed);
        run_gen(args, "tb_stacked.safetensors");
        h3_block s;
        if (h3_block_load("tb_stacked.safetensors", &s, NULL, err, sizeof err) != 0) {
            fails++;
            printf("FAIL: stacked: %s\n", err);
        } else {
            const int C = tiny.hidden, D = tiny.head_dim, H = tiny.heads;
            const size_t qkv_bytes = (size_t)3 * H * D * C * 2;
            const st_tensor *raw = st_find(&s.file, "blocks.0.attn.qkv_proj.weight");
            EXPECT(s.qkv_regrouped != NULL && s.w[H3_T_QKV] == s.qkv_regrouped, "stacked file not re-grouped");
            EXPECT(memcmp(raw->data, g.w[H3_T_QKV], qkv_bytes) != 0, "stacked file bytes equal the grouped ones");
            EXPECT(!memcmp(s.w[H3_T_QKV], g.w[H3_T_QKV], qkv_bytes), "re-grouped QKV differs from the grouped file");
            /* Spot check straight from the definition: k of head 1, dim 5 is
             * stacked row I + D + 5 and grouped row 3D + D + 5. */
            const uint16_t *rs = (const uint16_t *)raw->data, *gg = g.w[H3_T_QKV];
            EXPECT(!memcmp(rs + (size_t)(H * D + D + 5) * C, gg + (size_t)(3 * D + D + 5) * C, (size_t)C * 2),
                   "stacked k_1[5] row is not grouped row 3D + D + 5");
            for (int i = 0; i < H3_T_COUNT; i++) {
                int64_t n = sp[i].rank == 1 ? sp[i].shape[0] : sp[i].shape[0] * sp[i].shape[1];
                if (i != H3_T_QKV) EXPECT(!memcmp(s.w[i], g.w[i], (size_t)n * 2), "stacked file's %s differs", sp[i].name);
            }
            h3_block_free(&s);
        }
        copy u;
        dup(&c, &u);
        for (int i = 0; i < u.n_meta; i++)
            if (!strcmp(u.meta[2 * i], "qkv_layout")) u.meta[2 * i + 1] = "interleaved";
        put(&u, "tb_layout.safetensors");
        expect_fail("tb_layout.safetensors", "unknown qkv_layout", "qkv_layout 'interleaved' is unknown", NULL);
    }
    /* 10. A file that is not a valid container fails in st_open, with the path. */
    {
        FILE *fp = fopen("tb_garbage.safetensors", "wb");
        fputs("not a safetensors file", fp);
        fclose(fp);
        expect_fail("tb_garbage.safetensors", "garbage file", NULL, NULL);
    }
    h3_block_free(&g);
    const char *files[] = {"tb_grouped", "tb_block7", "tb_noprefix", "tb_twoblocks", "tb_mixed", "tb_missing",
                           "tb_missing2", "tb_dtype", "tb_shape", "tb_shape2", "tb_rank", "tb_badcfg", "tb_extra",
                           "tb_stacked", "tb_layout", "tb_garbage"};
    if (!fails)
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            char p[64];
            snprintf(p, sizeof p, "%s.safetensors", files[i]);
            remove(p);
        }
    printf(fails ? "test_block: %d FAILED\n" : "test_block: all passed\n", fails);
    return fails ? 1 : 0;
}
