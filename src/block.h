/* block.h — one H3 DiT block's weights from a safetensors file.
 *
 * Accepts names with exactly one "blocks.N." prefix or none. The config is
 * inferred from the shapes (hidden from norm1, head_dim from q_norm, heads
 * from qkv, ffn from fc2, temb and modalities from adaln) and then every
 * expected tensor is checked against h3_tensor_specs(): present, BF16, right
 * shape. Unexpected extra tensors (of any dtype the format defines) are
 * reported through warn (may be NULL) and ignored. A tensor whose data is not
 * 2-byte aligned in the file (an odd-sized tensor before it) is copied.
 * __metadata__ "qkv_layout" = "grouped" (default, the official layout) or
 * "stacked" ([q_all; k_all; v_all]); stacked files are re-grouped on load. */
#ifndef H3_BLOCK_H
#define H3_BLOCK_H

#include "config.h"
#include "safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    h3_config cfg;
    st_file file;
    int block_index;             /* N of "blocks.N.", -1 if no prefix */
    const uint16_t *w[H3_T_COUNT]; /* BF16, shapes from h3_tensor_specs */
    uint16_t *qkv_regrouped;     /* owned copy when the file was stacked, else NULL */
    uint16_t *aligned[H3_T_COUNT]; /* owned copy of a tensor whose data was not 2-byte aligned, else NULL */
    int n_extra;                 /* unexpected tensors (warned about) */
} h3_block;

typedef void (*h3_warn_fn)(const char *msg);

/* 0, or st_open's error codes: ST_ERR_FILE (the file is refused: a user
 * error) or ST_ERR_RESOURCE (out of memory); err gets one line. */
int h3_block_load(const char *path, h3_block *b, h3_warn_fn warn, char *err, size_t errlen);
void h3_block_free(h3_block *b);

#ifdef __cplusplus
}
#endif
#endif
