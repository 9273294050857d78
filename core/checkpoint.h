/* checkpoint.h — where one H3 block's tensors are in a published checkpoint,
 * and in which order their rows are stored there.
 *
 * A source is a .safetensors file, an index (*.safetensors.index.json, whose
 * "weight_map" names the shard beside it that holds each tensor), or a
 * directory holding one of those, itself or in its transformer/ folder (a
 * snapshot root). Only headers are read (st_open_header), and only those of
 * the shards that hold the chosen block; h3_ckpt_read reads its bytes.
 *
 * Per-block names follow any leading prefix ("model.diffusion_model.") and
 * "blocks.N." or "transformer_blocks.N." (or no block number at all):
 *   ours: h3_tensor_specs (the MiniMaxAI shards, single-file checkpoints such
 *     as Comfy-Org's, the files of gen_weights and extract_block);
 *   diffusers' (MiniMaxH3Transformer3DModel.save_pretrained; diffusers'
 *     transformer_minimax_h3.py and scripts/convert_minimax_h3_to_diffusers.py):
 *     norm1.weight, norm2.weight, attn.to_q.weight, attn.to_k.weight,
 *     attn.to_v.weight (three [H*D][C] tensors, no biases), attn.norm_q.weight,
 *     attn.norm_k.weight, attn.to_out.0.weight, ff.net.0.proj.weight ([2F][C],
 *     rows [up; gate]: diffusers' SwiGLU multiplies the first half by silu of
 *     the second), ff.net.2.weight, adaln_proj.linear.weight and .bias.
 * The block stack is the set of names with an adaln_proj (the token
 * refiner's blocks have none). Library-style: 0 or -1 and one error line
 * naming the file or index and the tensor. */
#ifndef H3_CHECKPOINT_H
#define H3_CHECKPOINT_H

#include "config.h"
#include "safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* QKV row order of the source: grouped per head [q_h k_h v_h] (ours, the
 * MiniMaxAI shards), stacked [q_all; k_all; v_all] (single-file
 * checkpoints), or split into three tensors (diffusers). */
typedef enum { H3_QKV_UNSTATED = 0, H3_QKV_GROUPED, H3_QKV_STACKED, H3_QKV_SPLIT } h3_qkv_order;

#define H3_CKPT_STACK 160 /* longest name prefix with "blocks." */
#define H3_CKPT_NAME 256

typedef struct {
    char *path;          /* as given */
    char *index;         /* the index read, NULL when the source is one file */
    char *file;          /* the one file, NULL when there is an index */
    int n_names;         /* every tensor name of the source */
    char **names;
    int *shard_of;       /* names[k] is in shard shard_of[k] */
    int n_shards;
    char **shard_path;
    st_file *shards;     /* header only; opened when the block needs them */
    unsigned char *opened;
    /* the block */
    int diffusers;                          /* names are diffusers' */
    char stack[H3_CKPT_STACK];              /* prefix and "blocks." or "transformer_blocks."; "" without numbers */
    int block;                              /* N, -1 when the names carry none */
    char digits[16];                        /* N as the names spell it ("7", "007") */
    int n_blocks, first_block, last_block;  /* of the stack */
    const st_file *src_file[H3_T_COUNT][3]; /* where each of our tensors comes from (3 parts: to_q/to_k/to_v) */
    const st_tensor *src[H3_T_COUNT][3];    /* NULL where missing */
    st_tensor view[H3_T_COUNT];             /* each of our tensors as the source has it: dtype, rank, shape (QKV
                                               of diffusers: the three stacked) and name for messages */
    char name[H3_T_COUNT][H3_CKPT_NAME];    /* the source's name of each ("...attn.to_{q,k,v}.weight" for the three) */
    char similar[H3_T_COUNT][H3_CKPT_NAME]; /* a name outside the block with the same ending, for messages; "" if none */
    int n_extra;                            /* tensors of the block that are none of ours */
    int *extra;                             /* their indices into names */
} h3_ckpt;

/* Resolves path, lists the source's names and finds the block: block >= 0
 * picks block N, -1 the only one (several: an error naming --block). */
int h3_ckpt_open(const char *path, int block, h3_ckpt *c, char *err, size_t errlen);
void h3_ckpt_close(h3_ckpt *c);

/* The QKV row order, and why, in that precedence: stated by the source
 * (diffusers' names, or __metadata__ qkv_layout of the file holding QKV; a
 * contradicting given order is an error), given (--qkv-layout), inferred
 * from an index file with our names (the MiniMaxAI shards: grouped). Where
 * none applies: an error naming --qkv-layout. */
int h3_ckpt_qkv(const h3_ckpt *c, h3_qkv_order given, h3_qkv_order *order, char *why, size_t whylen, char *err,
                size_t errlen);

/* Reads the block into dst[i] (shapes from h3_tensor_specs(cfg), checked
 * against view[] by the caller) in our layout: QKV grouped, fc1 [gate; up]. */
int h3_ckpt_read(const h3_ckpt *c, const h3_config *cfg, h3_qkv_order order, uint16_t *const dst[H3_T_COUNT],
                 char *err, size_t errlen);

/* "single file", "original shards (index ..., 2 of 13 shards read)" or
 * "diffusers (...)", and the prefix if any. */
void h3_ckpt_describe(const h3_ckpt *c, char *buf, size_t len);

const char *h3_qkv_order_name(h3_qkv_order o); /* "grouped", "stacked", "split", "unstated" */

/* Diffusers' per-block name of part p of our tensor t (QKV: p = 0, 1, 2 for
 * to_q, to_k, to_v; the others have part 0 only), NULL for no such part. */
const char *h3_diffusers_name(int t, int part);

#ifdef __cplusplus
}
#endif
#endif
