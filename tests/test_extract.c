/* test_extract — extract_block on a small fake sharded checkpoint: two tiny
 * blocks (gen_weights, different seeds) spread over two shards plus a
 * non-block tensor, an index json; the extracted file must hold exactly the
 * block's tensors, byte for byte, and say it is grouped, given the folder,
 * the index or a snapshot root above it. Then the error cases. (Every
 * published layout, written by the official safetensors library:
 * tests/python/test_layouts.py.)
 *
 * Run alone: ctest --test-dir build -R '^test_extract$'
 *   or: build/tests/test_extract build/tools/gen_weights build/tools/extract_block
 * (H3_TEST_SEED=N fixes the seed.) Files go to the current directory. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "block.h"
#include "safetensors.h"

#include "test_util.h"
#include "test_stats.h"

static const char *gen, *ext;

static int sh(const char *cmd)
{
    int rc = system(cmd);
    return rc == -1 ? -1 : (rc >> 8) & 255;
}

static char *slurp(const char *path)
{
    static char buf[8192];
    buf[0] = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = 0;
    fclose(fp);
    return buf;
}

/* Runs extract_block with args; expects exit status want_rc and, if frag, that
 * stderr contains it. */
static void run_ext(const char *args, int want_rc, const char *frag, const char *what)
{
    char cmd[2048];
    remove("te_out.safetensors");
    snprintf(cmd, sizeof cmd, "'%s' %s > te_stdout.log 2> te_stderr.log", ext, args);
    int rc = sh(cmd);
    const char *e = slurp("te_stderr.log");
    EXPECT(rc == want_rc, "%s: exit %d, expected %d (%s)", what, rc, want_rc, e);
    if (want_rc) {
        printf("  %-24s -> %s", what, e);
        EXPECT(!frag || strstr(e, frag), "%s: stderr lacks '%s': %s", what, frag, e);
        struct stat st;
        EXPECT(stat("te_out.safetensors", &st) != 0, "%s: an output file was left", what);
    }
}

/* The extracted file must equal ref tensor for tensor (any order). */
static void compare(const char *path, const char *refpath)
{
    st_file a, r;
    char err[512];
    if (st_open(path, &a, err, sizeof err)) {
        fails++;
        printf("FAIL: %s\n", err);
        return;
    }
    if (st_open(refpath, &r, err, sizeof err)) {
        fails++;
        printf("FAIL: %s\n", err);
        st_close(&a);
        return;
    }
    EXPECT(a.n_tensors == r.n_tensors, "%s: %d tensors, expected %d", path, a.n_tensors, r.n_tensors);
    for (int i = 0; i < r.n_tensors; i++) {
        const st_tensor *x = &r.tensors[i], *y = st_find(&a, x->name);
        EXPECT(y != NULL, "%s: tensor '%s' missing", path, x->name);
        if (!y) continue;
        EXPECT(y->dtype == x->dtype && y->rank == x->rank && !memcmp(y->shape, x->shape, sizeof x->shape),
               "%s: '%s' dtype or shape differs", path, x->name);
        EXPECT(y->end - y->begin == x->end - x->begin && !memcmp(y->data, x->data, x->end - x->begin),
               "%s: '%s' bytes differ", path, x->name);
    }
    st_close(&a);
    st_close(&r);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        printf("usage: test_extract PATH/gen_weights PATH/extract_block\n");
        return 2;
    }
    gen = argv[1];
    ext = argv[2];
    const unsigned long long seed = (unsigned long long)h3t_seed("test_extract");
    char cmd[2048], err[512];
    for (int b = 0; b < 2; b++) {
        snprintf(cmd, sizeof cmd, "'%s' --config tiny --force --block %d --seed %llu --out te_b%d.safetensors 2>/dev/null", gen,
                 b, seed + (unsigned long long)b, b);
        if (sh(cmd) != 0) return printf("FAIL: %s\n", cmd), 1;
    }
    mkdir("te_ckpt", 0777);
    mkdir("te_empty", 0777);
    remove("te_empty/model.safetensors.index.json");

    /* Shard 1: block 0's first 7 tensors, block 1's first 3 and a non-block
     * tensor; shard 2: the rest. */
    st_file f[2];
    for (int b = 0; b < 2; b++) {
        snprintf(cmd, sizeof cmd, "te_b%d.safetensors", b);
        if (st_open(cmd, &f[b], err, sizeof err)) return printf("FAIL: %s\n", err), 1;
    }
    static const float fin[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    st_write_tensor s1[16], s2[16];
    int n1 = 0, n2 = 0;
    const char *shard_of[2][16];
    const char *shard_name[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < f[b].n_tensors; i++) {
            const st_tensor *t = &f[b].tensors[i];
            st_write_tensor w = {{t->name, t->dtype, t->rank, {0}}, t->data};
            memcpy(w.decl.shape, t->shape, sizeof t->shape);
            int first = i < (b == 0 ? 7 : 3);
            if (first)
                s1[n1++] = w;
            else
                s2[n2++] = w;
            shard_of[b][i] = shard_name[first ? 0 : 1];
        }
    s1[n1++] = (st_write_tensor){{"final_norm.weight", ST_F32, 1, {8}}, fin};
    const char *meta[] = {"format", "pt"};
    if (st_write("te_ckpt/model-00001-of-00002.safetensors", s1, n1, meta, 1, err, sizeof err) ||
        st_write("te_ckpt/model-00002-of-00002.safetensors", s2, n2, meta, 1, err, sizeof err))
        return printf("FAIL: %s\n", err), 1;

    /* The index; variants for the error cases. */
    for (int v = 0; v < 3; v++) {
        const char *path[3] = {"te_ckpt/model.safetensors.index.json", "te_ckpt/missing_shard.json",
                               "te_ckpt/missing_tensor.json"};
        FILE *fp = fopen(path[v], "w");
        fprintf(fp, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {\n");
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < f[b].n_tensors; i++) {
                const char *s = shard_of[b][i];
                if (v == 1 && b == 1 && i == 4) s = "model-00003-of-00002.safetensors";
                fprintf(fp, "  \"%s\": \"%s\",\n", f[b].tensors[i].name, s);
            }
        if (v == 2) fprintf(fp, "  \"blocks.1.attn.extra.weight\": \"%s\",\n", shard_name[0]);
        fprintf(fp, "  \"final_norm.weight\": \"%s\"\n}}\n", shard_name[0]);
        fclose(fp);
    }

    /* Round trip for both blocks. */
    for (int b = 0; b < 2; b++) {
        snprintf(cmd, sizeof cmd, "--checkpoint te_ckpt --block %d --out te_out.safetensors", b);
        char what[32];
        snprintf(what, sizeof what, "extract block %d", b);
        run_ext(cmd, 0, NULL, what);
        snprintf(cmd, sizeof cmd, "te_b%d.safetensors", b);
        compare("te_out.safetensors", cmd);
        h3_block blk;
        if (h3_block_load("te_out.safetensors", &blk, NULL, err, sizeof err)) {
            fails++;
            printf("FAIL: loading the extracted block %d: %s\n", b, err);
        } else {
            EXPECT(blk.block_index == b && blk.cfg.hidden == 256, "extracted block %d: index %d hidden %d", b,
                   blk.block_index, blk.cfg.hidden);
            EXPECT(strstr(blk.layout, "QKV grouped (__metadata__ qkv_layout)"), "extracted block %d: layout %s", b,
                   blk.layout);
            h3_block_free(&blk);
        }
        const char *out = slurp("te_stdout.log");
        EXPECT(strstr(out, "original shards (index te_ckpt/model.safetensors.index.json, 2 of 2 shards read)") &&
                   strstr(out, "QKV grouped (an index file"),
               "extract block %d: stdout does not say what it read: %s", b, out);
    }
    /* The index itself, and a snapshot root holding it in transformer/. */
    mkdir("te_root", 0777);
    rename("te_ckpt", "te_root/transformer");
    run_ext("--checkpoint te_root --block 1 --out te_out.safetensors", 0, NULL, "snapshot root");
    compare("te_out.safetensors", "te_b1.safetensors");
    rename("te_root/transformer", "te_ckpt");
    rmdir("te_root");
    run_ext("--checkpoint te_ckpt/model.safetensors.index.json --block 0 --out te_out.safetensors", 0, NULL,
            "index file");
    compare("te_out.safetensors", "te_b0.safetensors");
    /* The two blocks really differ (so the comparison can tell them apart). */
    EXPECT(memcmp(f[0].tensors[2].data, f[1].tensors[2].data, f[0].tensors[2].end - f[0].tensors[2].begin),
           "blocks 0 and 1 have the same bytes");

    /* Errors. Swapping an index variant in place of the real one. */
    run_ext("--checkpoint te_empty --block 0 --out te_out.safetensors", 1,
            "te_empty: no *.safetensors.index.json or .safetensors file in it or in te_empty/transformer",
            "missing index");
    run_ext("--checkpoint te_ckpt --block 5 --out te_out.safetensors", 1, "no tensors for block 5 (found 2 blocks",
            "no block 5");
    rename("te_ckpt/model.safetensors.index.json", "te_ckpt/good.json");
    rename("te_ckpt/missing_shard.json", "te_ckpt/model.safetensors.index.json");
    run_ext("--checkpoint te_ckpt --block 1 --out te_out.safetensors", 1, "model-00003-of-00002.safetensors",
            "missing shard");
    run_ext("--checkpoint te_ckpt --block 0 --out te_out.safetensors", 0, NULL, "block 0 unaffected");
    rename("te_ckpt/model.safetensors.index.json", "te_ckpt/missing_shard.json");
    rename("te_ckpt/missing_tensor.json", "te_ckpt/model.safetensors.index.json");
    run_ext("--checkpoint te_ckpt --block 1 --out te_out.safetensors", 1,
            "'blocks.1.attn.extra.weight' is listed in te_ckpt/model.safetensors.index.json but missing",
            "tensor not in shard");
    rename("te_ckpt/model.safetensors.index.json", "te_ckpt/missing_tensor.json");
    rename("te_ckpt/good.json", "te_ckpt/model.safetensors.index.json");
    run_ext("--checkpoint te_ckpt --block x --out te_out.safetensors", 2, "--block", "--block x");
    run_ext("--checkpoint te_ckpt --out te_out.safetensors", 1,
            "holds 2 blocks (numbered 0..1): pick one with --block N", "no --block");
    run_ext("--checkpoint te_ckpt --block 0", 2, "required", "no --out");
    run_ext("--checkpoint te_ckpt --block 0 --qkv-layout interleaved --out te_out.safetensors", 2, "--qkv-layout",
            "--qkv-layout interleaved");
    run_ext("--checkpoint te_ckpt --block 0 --out te_out.safetensors --frob", 2, "unknown flag", "unknown flag");

    st_close(&f[0]);
    st_close(&f[1]);
    if (!fails) {
        const char *rm[] = {"te_b0.safetensors", "te_b1.safetensors", "te_out.safetensors", "te_stdout.log",
                            "te_stderr.log", "te_ckpt/model-00001-of-00002.safetensors",
                            "te_ckpt/model-00002-of-00002.safetensors", "te_ckpt/model.safetensors.index.json",
                            "te_ckpt/missing_shard.json", "te_ckpt/missing_tensor.json"};
        for (size_t i = 0; i < sizeof rm / sizeof rm[0]; i++) remove(rm[i]);
        rmdir("te_ckpt");
        rmdir("te_empty");
    }
    printf(fails ? "test_extract: %d FAILED\n" : "test_extract: all passed\n", fails);
    return fails ? 1 : 0;
}
