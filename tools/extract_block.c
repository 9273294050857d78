/* extract_block — one block of a sharded checkpoint into its own file.
 *
 *   extract_block --checkpoint DIR --block N --out FILE
 *
 * Reads DIR/model.safetensors.index.json ({"weight_map": {name: shard}}),
 * opens only the shards holding "blocks.N.*" tensors, and streams those
 * tensors (names, dtypes, shapes and bytes unchanged, sorted by name) into
 * FILE. A shard's __metadata__ qkv_layout, if any, is carried over.
 * Exit 2 for bad flags, 1 for any error in the checkpoint. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

static void usage(FILE *o) { fprintf(o, "usage: extract_block --checkpoint DIR --block N --out FILE\n"); }

typedef struct {
    const char *name, *shard; /* owned by the json tree */
    int shard_idx;
} entry;

static int cmp_entry(const void *a, const void *b) { return strcmp(((const entry *)a)->name, ((const entry *)b)->name); }

/* Block number of a "blocks.<digits>." name, -1 if none. */
static long block_of(const char *name)
{
    if (strncmp(name, "blocks.", 7) != 0) return -1;
    const char *p = name + 7;
    long v = 0;
    int nd = 0;
    while (*p >= '0' && *p <= '9' && nd < 9) v = v * 10 + (*p++ - '0'), nd++;
    return nd && *p == '.' ? v : -1;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL, *block_s = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        const char **dst = !strcmp(a, "--checkpoint") ? &dir : !strcmp(a, "--block") ? &block_s : !strcmp(a, "--out") ? &out : NULL;
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
    if (!dir || !out || !block_s) {
        fprintf(stderr, "extract_block: --checkpoint, --block and --out are all required\n");
        usage(stderr);
        return 2;
    }
    long block = 0;
    {
        const char *p = block_s;
        int nd = 0;
        while (*p >= '0' && *p <= '9' && nd < 9) block = block * 10 + (*p++ - '0'), nd++;
        if (!nd || *p) {
            fprintf(stderr, "extract_block: --block needs a non-negative integer, not '%s'\n", block_s);
            return 2;
        }
    }

    size_t dl = strlen(dir);
    char *index_path = malloc(dl + 64);
    snprintf(index_path, dl + 64, "%s/model.safetensors.index.json", dir);
    FILE *fp = fopen(index_path, "rb");
    if (!fp) {
        fprintf(stderr, "extract_block: cannot open the index %s: %s\n", index_path, strerror(errno));
        return 1;
    }
    fclose(fp);
    json_object *root = json_object_from_file(index_path);
    json_object *wm = NULL;
    if (!root || !json_object_is_type(root, json_type_object) || !json_object_object_get_ex(root, "weight_map", &wm) ||
        !json_object_is_type(wm, json_type_object)) {
        fprintf(stderr, "extract_block: %s: not JSON with a \"weight_map\" object (%s)\n", index_path,
                root ? "no weight_map" : json_util_get_last_err());
        return 1;
    }

    /* The tensors of block N, and the set of blocks present for the error. */
    int n_all = json_object_object_length(wm), n = 0, n_blocks = 0;
    long bmin = -1, bmax = -1;
    entry *e = calloc((size_t)n_all + 1, sizeof *e);
    unsigned char *seen = calloc(1u << 20, 1); /* block numbers below 2^20 */
    json_object_object_foreach(wm, key, val)
    {
        long b = block_of(key);
        if (b >= 0 && b < (1 << 20) && !seen[b]) {
            seen[b] = 1;
            n_blocks++;
            if (bmin < 0 || b < bmin) bmin = b;
            if (b > bmax) bmax = b;
        }
        if (b != block) continue;
        if (!json_object_is_type(val, json_type_string)) {
            fprintf(stderr, "extract_block: %s: weight_map entry '%s' is not a string\n", index_path, key);
            return 1;
        }
        e[n].name = key;
        e[n].shard = json_object_get_string(val);
        if (strstr(e[n].shard, "..") || strchr(e[n].shard, '/')) {
            fprintf(stderr, "extract_block: %s: shard name '%s' of tensor '%s' is not a plain file name\n", index_path,
                    e[n].shard, key);
            return 1;
        }
        n++;
    }
    free(seen);
    if (n == 0) {
        if (n_blocks)
            fprintf(stderr, "extract_block: %s: no tensors for block %ld (found %d blocks, numbered %ld..%ld)\n",
                    index_path, block, n_blocks, bmin, bmax);
        else
            fprintf(stderr, "extract_block: %s: no tensors for block %ld (found no 'blocks.N.' tensors at all)\n",
                    index_path, block);
        return 1;
    }
    qsort(e, (size_t)n, sizeof *e, cmp_entry);

    /* Open each needed shard once. */
    st_file *sh = calloc((size_t)n, sizeof *sh);
    const char **sh_name = calloc((size_t)n, sizeof *sh_name);
    int n_sh = 0;
    char err[1024];
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < n_sh && strcmp(sh_name[k], e[i].shard)) k++;
        if (k == n_sh) {
            char *p = malloc(dl + strlen(e[i].shard) + 2);
            sprintf(p, "%s/%s", dir, e[i].shard);
            if (st_open(p, &sh[k], err, sizeof err) != 0) {
                fprintf(stderr, "extract_block: shard '%s' of tensor '%s' (from %s): %s\n", e[i].shard, e[i].name,
                        index_path, err);
                return 1;
            }
            free(p);
            sh_name[n_sh++] = e[i].shard;
        }
        e[i].shard_idx = k;
    }

    st_decl *decl = calloc((size_t)n, sizeof *decl);
    const st_tensor **src = calloc((size_t)n, sizeof *src);
    for (int i = 0; i < n; i++) {
        const st_file *f = &sh[e[i].shard_idx];
        if (!(src[i] = st_find(f, e[i].name))) {
            fprintf(stderr, "extract_block: %s: tensor '%s' is listed in %s but missing from the shard\n", f->path,
                    e[i].name, index_path);
            return 1;
        }
        decl[i].name = e[i].name;
        decl[i].dtype = src[i]->dtype;
        decl[i].rank = src[i]->rank;
        memcpy(decl[i].shape, src[i]->shape, sizeof decl[i].shape);
    }
    const char *layout = NULL;
    for (int k = 0; k < n_sh; k++) {
        const char *l = st_meta(&sh[k], "qkv_layout");
        if (!l) continue;
        if (layout && strcmp(layout, l)) {
            fprintf(stderr, "extract_block: shards disagree on __metadata__ qkv_layout ('%s' vs '%s' in %s)\n", layout,
                    l, sh[k].path);
            return 1;
        }
        layout = l;
    }
    char bs[32];
    snprintf(bs, sizeof bs, "%ld", block);
    const char *meta[] = {"format", "pt", "generator", "h3block extract_block", "block", bs, "qkv_layout", layout};
    st_writer *w = st_writer_open(out, decl, n, meta, layout ? 4 : 3, err, sizeof err);
    if (!w) {
        fprintf(stderr, "extract_block: %s\n", err);
        return 1;
    }
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        size_t nb = (size_t)(src[i]->end - src[i]->begin);
        if (st_writer_write(w, src[i]->data, nb, err, sizeof err) != 0) {
            fprintf(stderr, "extract_block: %s\n", err);
            st_writer_abort(w);
            return 1;
        }
        bytes += nb;
    }
    if (st_writer_close(w, err, sizeof err) != 0) {
        fprintf(stderr, "extract_block: %s\n", err);
        return 1;
    }
    printf("extract_block: wrote %s: block %ld, %d tensors, %.1f MB from %d shard%s\n", out, block, n, bytes / 1e6,
           n_sh, n_sh == 1 ? "" : "s");
    for (int k = 0; k < n_sh; k++) st_close(&sh[k]);
    free(sh);
    free(sh_name);
    free(decl);
    free(src);
    free(e);
    free(index_path);
    json_object_put(root);
    return 0;
}
