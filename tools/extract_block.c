/* extract_block — one block of a checkpoint into its own file, in our layout.
 *
 *   extract_block --checkpoint PATH [--block N] [--qkv-layout grouped|stacked] --out FILE
 *
 * PATH is whatever dit_block --weights takes (block.h, checkpoint.h): a
 * .safetensors file, an index (*.safetensors.index.json) or a directory
 * holding one (a snapshot root: its transformer/), in any published layout
 * (the MiniMaxAI shards, a single-file checkpoint, diffusers), with any name
 * prefix. Only the shards holding block N are opened, and only its tensors
 * read. FILE gets our canonical block: the ten tensors named "blocks.N." +
 * ours (no prefix if the source's names carry no block number), QKV grouped
 * per head, fc1 [gate; up], and __metadata__ saying so (qkv_layout grouped,
 * block, the source's layout). --block may be left out when PATH holds one
 * block; --qkv-layout is needed only where the source does not state its QKV
 * row order (see dit_block --help).
 * Exit 2 for bad flags, 1 for any error in the checkpoint. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "safetensors.h"

static void usage(FILE *o)
{
    fprintf(o, "usage: extract_block --checkpoint PATH [--block N] [--qkv-layout grouped|stacked] --out FILE\n"
               "  PATH: a .safetensors file, an index (*.safetensors.index.json) or a directory holding one\n"
               "  (or a snapshot root, in its transformer/); writes block N in our layout (grouped QKV)\n");
}

static void warn_cb(const char *msg) { fprintf(stderr, "extract_block: warning: %s\n", msg); }

int main(int argc, char **argv)
{
    const char *path = NULL, *out = NULL, *block_s = NULL, *qkv_s = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        const char **dst = !strcmp(a, "--checkpoint") ? &path
                           : !strcmp(a, "--block")    ? &block_s
                           : !strcmp(a, "--out")      ? &out
                           : !strcmp(a, "--qkv-layout") ? &qkv_s
                                                        : NULL;
        if (!dst) {
            fprintf(stderr, "extract_block: unknown flag '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "extract_block: %s needs a value\n", a);
            usage(stderr);
            return 2;
        }
        *dst = argv[++i];
    }
    if (!path || !out) {
        fprintf(stderr, "extract_block: --checkpoint and --out are required\n");
        usage(stderr);
        return 2;
    }
    h3_load_options lo = {.block = -1, .qkv = H3_QKV_UNSTATED};
    if (block_s) {
        const char *p = block_s;
        int nd = 0;
        long block = 0;
        while (*p >= '0' && *p <= '9' && nd < 9) block = block * 10 + (*p++ - '0'), nd++;
        if (!nd || *p) {
            fprintf(stderr, "extract_block: --block needs a non-negative integer, not '%s'\n", block_s);
            return 2;
        }
        lo.block = (int)block;
    }
    if (qkv_s) {
        if (!strcmp(qkv_s, "grouped")) lo.qkv = H3_QKV_GROUPED;
        else if (!strcmp(qkv_s, "stacked")) lo.qkv = H3_QKV_STACKED;
        else {
            fprintf(stderr, "extract_block: --qkv-layout must be grouped or stacked, not '%s'\n", qkv_s);
            return 2;
        }
    }

    h3_block b;
    char err[1024];
    if (h3_block_load_with(path, &lo, &b, warn_cb, err, sizeof err)) {
        fprintf(stderr, "extract_block: %s\n", err);
        return 1;
    }
    h3_tensor_spec spec[H3_T_COUNT];
    h3_tensor_specs(&b.cfg, spec);
    st_write_tensor t[H3_T_COUNT];
    char names[H3_T_COUNT][96], bs[32];
    snprintf(bs, sizeof bs, "%d", b.block_index);
    for (int i = 0; i < H3_T_COUNT; i++) {
        if (b.block_index >= 0)
            snprintf(names[i], sizeof names[i], "blocks.%d.%s", b.block_index, spec[i].name);
        else
            snprintf(names[i], sizeof names[i], "%s", spec[i].name);
        t[i] = (st_write_tensor){{names[i], ST_BF16, spec[i].rank, {spec[i].shape[0], spec[i].shape[1]}}, b.w[i]};
    }
    const char *meta[] = {"format", "pt", "generator", "h3block extract_block", "block", bs, "qkv_layout", "grouped",
                          "source_layout", b.layout};
    if (st_write(out, t, H3_T_COUNT, meta, 5, err, sizeof err)) {
        fprintf(stderr, "extract_block: %s\n", err);
        h3_block_free(&b);
        return 1;
    }
    printf("extract_block: wrote %s: block %d, %.1f MB, from %s\n", out, b.block_index,
           h3_param_count(&b.cfg) * 2 / 1e6, b.layout);
    h3_block_free(&b);
    return 0;
}
