/* inputs.h — the block's inputs: tokens x, the timestep embedding, a modality
 * tag and a (t, h, w) position per token (DESIGN.md §1).
 *
 * File layout (inputs.safetensors): x [S][C] BF16, temb [T] F32,
 * tags [S] I32 (U8 and I64 accepted on read), positions [S][3] F32. */
#ifndef H3_INPUTS_H
#define H3_INPUTS_H

#include "config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define H3_DEFAULT_TOKENS 30272

typedef struct {
    int S;
    uint16_t *x;     /* [S][C] bf16 */
    float *temb;     /* [T] f32 */
    int32_t *tags;   /* [S] 0 video, 1 text, 2 audio */
    float *pos;      /* [S][3] f32: t, h, w */
    int count[3];    /* tokens per modality */
} h3_inputs;

/* The packed H3 layout of an 864x480, 243-frame clip for S = 30272 (302 text,
 * 810 audio, 29160 video tokens on a 72x15x27 latent grid); other S keep the
 * same proportions. temb ~ N(0,1); x in BF16 from seed: N(0,1) (uniform
 * profile), or N(0,1) plus per-channel means and a few massive-activation
 * channels (model profile, inputs.c). */
/* Both return 0, ST_ERR_FILE (bad arguments or a refused file: a user
 * error) or ST_ERR_RESOURCE (out of host memory), err one line. */
int h3_inputs_default(const h3_config *cfg, int S, uint64_t seed, h3_profile profile, h3_inputs *in, char *err,
                      size_t errlen);int h3_inputs_load(const char *path, const h3_config *cfg, h3_inputs *in, char *err, size_t errlen);
int h3_inputs_save(const char *path, const h3_config *cfg, const h3_inputs *in, char *err, size_t errlen);
void h3_inputs_free(h3_inputs *in);

#ifdef __cplusplus
}
#endif
#endif
