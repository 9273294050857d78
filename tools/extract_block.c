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
#include "opts.h"
#include "safetensors.h"

#define PROG "extract_block"

static const char usage_text[] =
    "usage: extract_block --checkpoint PATH [--block N] [--qkv-layout grouped|stacked] --out FILE\n"
    "                     [--help] [--version]\n"
    "  PATH: a .safetensors file, an index (*.safetensors.index.json) or a directory holding one\n"
    "  (or a snapshot root, in its transformer/), in any published layout; writes block N in our\n"
    "  layout (grouped QKV, blocks.N. names, __metadata__ saying so) to FILE.\n"
    "  --block N: the block to take where PATH holds several (default: its only one)\n"
    "  --qkv-layout: the QKV row order of a source that does not state it (see dit_block --help)\n"
    "  A value follows its flag as the next word or after '=' (--block 7, --block=7).\n"
    "Exit: 0 written; 1 an error in the checkpoint or writing FILE; 2 a usage error.\n";

static void warn_cb(const char *msg) { fprintf(stderr, PROG ": warning: %s\n", msg); }

int main(int argc, char **argv)
{
    const char *path = NULL, *out = NULL;
    h3_load_options lo = {.block = -1, .qkv = H3_QKV_UNSTATED};
    static const h3_flag flags[] = {{"checkpoint", 1}, {"block", 1}, {"qkv-layout", 1}, {"out", 1}, {NULL, 0}};
    enum { F_CHECKPOINT, F_BLOCK, F_QKV_LAYOUT, F_OUT };
    static const char *const orders[] = {"grouped", "stacked", NULL};
    const h3_cli cli = {PROG, usage_text, flags, NULL};
    const char *v;
    for (int f; (f = h3_cli_next(&cli, argc, argv, &v)) >= 0;) {
        switch (f) {
        case F_CHECKPOINT: path = v; break;
        case F_BLOCK: lo.block = (int)h3_cli_uint(PROG, "--block", v, 0, 999999999); break;
        case F_QKV_LAYOUT:
            lo.qkv = h3_cli_choice(PROG, "--qkv-layout", v, orders) ? H3_QKV_STACKED : H3_QKV_GROUPED;
            break;
        case F_OUT: out = v; break;
        }
    }
    if (!path || !out) h3_cli_fail(PROG, "--checkpoint and --out are required");

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
