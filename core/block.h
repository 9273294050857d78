/* block.h — one H3 DiT block's weights, from a published checkpoint.
 *
 * The source is a file, an index or a directory in any of the layouts of
 * checkpoint.h (ours, the MiniMaxAI shards, single-file checkpoints,
 * diffusers), with any leading name prefix. The config is inferred from the
 * shapes (hidden from norm1, head_dim from q_norm, heads from qkv, ffn from
 * fc2, temb and modalities from adaln) and then every expected tensor is
 * checked against h3_tensor_specs(): present, BF16, right shape. The block's
 * unexpected extra tensors are reported through warn (may be NULL). The ten
 * tensors are read once into memory the block owns, in our layout: QKV
 * grouped per head (re-grouped from stacked rows or diffusers' to_q/to_k/
 * to_v), fc1 [gate; up] (diffusers' [up; gate] swapped). How the QKV rows
 * are ordered is never guessed: see h3_ckpt_qkv. */
#ifndef H3_BLOCK_H
#define H3_BLOCK_H

#include "checkpoint.h"
#include "config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    h3_config cfg;
    int block_index;               /* N of "blocks.N.", -1 if the names carry none */
    int n_blocks;                  /* blocks in the source (1 for a one-block file) */
    const uint16_t *w[H3_T_COUNT]; /* BF16 in our layout, shapes from h3_tensor_specs; point into store */
    uint16_t *store;               /* owned: the ten tensors */
    int n_extra;                   /* unexpected tensors of the block (warned about) */
    int n_source_tensors;          /* tensors in the source, every block and file */
    h3_qkv_order qkv_order;        /* QKV rows in the source */
    char layout[1024];             /* the source's layout and QKV row order, and why (for the summary) */
    char source[4096];             /* the file or index read: the path as given, or the one found in a directory */
    char profile[16];              /* gen_weights' synthetic data profile (__metadata__ profile), "" if none */
} h3_block;

typedef struct {
    int block;            /* N of blocks.N. to load; -1: the source's only block */
    h3_qkv_order qkv;     /* --qkv-layout: the row order where the source does not state it */
} h3_load_options;

typedef void (*h3_warn_fn)(const char *msg);

/* h3_block_load_with with no block chosen and no QKV order given. Both
 * return 0, ST_ERR_FILE (the source is refused: a user error) or
 * ST_ERR_RESOURCE (out of memory), err one line. */
int h3_block_load(const char *path, h3_block *b, h3_warn_fn warn, char *err, size_t errlen);
int h3_block_load_with(const char *path, const h3_load_options *o, h3_block *b, h3_warn_fn warn, char *err,
                       size_t errlen);
void h3_block_free(h3_block *b);

#ifdef __cplusplus
}
#endif
#endif
