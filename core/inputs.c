/* inputs.c — the block's inputs (inputs.h): the default packed layout, and
 * load/save as safetensors.
 *
 * Default layout, for S = 30272 (an 864x480, 243-frame clip):
 *   tokens     0 ..   301  text,  tag 1, position (t, 0, 0) with t = 0..301;
 *   tokens   302 ..  1111  audio, tag 2, t = i * 72 / 810 (float, i = 0..809):
 *                          the 810 audio tokens spread over the 72 video
 *                          latent frames, so audio shares the video time line;
 *   tokens  1112 .. 30271  video, tag 0, a 72 x 15 x 27 latent grid, t-major
 *                          then h then w, position (t, h * a, w * a) with
 *                          a = sqrt(576 / (15 * 27)).
 * The area normalisation a is our choice: it scales h and w so that the grid's
 * area equals a 24x24 (= 576) reference latent, the way resolution-independent
 * RoPE positions are usually made; the checkpoint's own choice is unknown here.
 * Other S keep the proportions: text = max(1, round(S * 302 / 30272)) and
 * audio = max(1, round(S * 810 / 30272)) (for S < 3 plain round(), so tiny S
 * may have no text or audio), video = the rest, laid frame by frame on the
 * 15 x 27 grid (the last frame partial); audio t = i * frames / audio with
 * frames = ceil(video / 405).
 * x ~ N(0,1) rounded to BF16 (value i of stream 0), temb ~ N(0,1) in F32
 * (stream 1), from the counter-based rng: the same seed gives the same bytes. */
#define _POSIX_C_SOURCE 200809L
#include "inputs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "numerics.h"
#include "rng.h"
#include "safetensors.h"

#define REF_S 30272
#define REF_TEXT 302
#define REF_AUDIO 810
#define GRID_H 15
#define GRID_W 27
#define REF_AREA 576.0 /* 24 x 24 */

void h3_inputs_free(h3_inputs *in)
{
    if (!in) return;
    free(in->x);
    free(in->temb);
    free(in->tags);
    free(in->pos);
    memset(in, 0, sizeof *in);
}

static int alloc_inputs(const h3_config *cfg, int S, h3_inputs *in, const char *who, char *err, size_t errlen)
{
    memset(in, 0, sizeof *in);
    in->S = S;
    in->x = malloc((size_t)S * cfg->hidden * sizeof *in->x);
    in->temb = malloc((size_t)cfg->temb * sizeof *in->temb);
    in->tags = malloc((size_t)S * sizeof *in->tags);
    in->pos = malloc((size_t)S * 3 * sizeof *in->pos);
    if (!in->x || !in->temb || !in->tags || !in->pos) {
        h3_seterr(err, errlen, "%s: out of host memory for %d tokens", who, S);
        h3_inputs_free(in);
        return ST_ERR_RESOURCE;
    }
    return 0;
}

static void count_tags(h3_inputs *in)
{
    in->count[0] = in->count[1] = in->count[2] = 0;
    for (int i = 0; i < in->S; i++)
        if (in->tags[i] >= 0 && in->tags[i] < 3) in->count[in->tags[i]]++;
}

/* H3_PROFILE_MODEL's hidden states: every channel c carries a mean m_c =
 * 0.5 N(0,1) (stream 2), and H3_MASSIVE_PER_5376 channels per 5376 (at least
 * one; indices and signs from stream 3) a massive activation +-(40 + 4 N(0,1))
 * in every token -- few fixed channels, ~40x the typical magnitude, of one
 * sign across tokens (docs/DESIGN.md "Synthetic data"). */
#define H3_MASSIVE_PER_5376 8
#define H3_MASSIVE_VALUE 40.0
static int model_hidden_states(const h3_config *cfg, int S, uint64_t seed, uint16_t *x)
{
    const int C = cfg->hidden;
    int nm = C * H3_MASSIVE_PER_5376 / 5376;
    if (nm < 1) nm = 1;
    double *mean = malloc(sizeof(double) * C); /* [C]: the channel's mean, or its massive value */
    char *massive = calloc((size_t)C, 1);
    if (!mean || !massive) {
        free(mean);
        free(massive);
        return -1;
    }
    for (int c = 0; c < C; c++) mean[c] = 0.5 * h3_normal(seed, 2, (uint64_t)c);
    for (int j = 0; j < nm; j++) {
        int c = (int)(h3_uniform(seed, 3, 2 * (uint64_t)j) * C);
        while (massive[c]) c = (c + 1) % C; /* nm distinct channels */
        massive[c] = 1;
        mean[c] = h3_uniform(seed, 3, 2 * (uint64_t)j + 1) < 0.5 ? -H3_MASSIVE_VALUE : H3_MASSIVE_VALUE;
    }
    const int64_t nx = (int64_t)S * C;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int64_t e = 0; e < nx; e++) {
        const int c = (int)(e % C);
        const double z = h3_normal(seed, 0, (uint64_t)e);
        x[e] = h3_f32_to_bf16((float)(mean[c] + (massive[c] ? 0.1 * fabs(mean[c]) * z : z)));
    }
    free(mean);
    free(massive);
    return 0;
}

int h3_inputs_default(const h3_config *cfg, int S, uint64_t seed, h3_profile profile, h3_inputs *in, char *err,
                      size_t errlen)
{
    memset(in, 0, sizeof *in);
    if (err && errlen) err[0] = 0;
    if (h3_config_validate(cfg, err, errlen) != 0) return -1;
    if (S < 1) {
        h3_seterr(err, errlen, "default inputs: %d tokens, need at least 1", S);
        return -1;
    }
    if (cfg->modalities < 3) {
        h3_seterr(err, errlen, "default inputs: need 3 modalities (video, text, audio), config has %d",
                  cfg->modalities);
        return -1;
    }
    int n_text = (int)lround((double)S * REF_TEXT / REF_S), n_audio = (int)lround((double)S * REF_AUDIO / REF_S);
    if (S >= 3) {
        if (n_text < 1) n_text = 1;
        if (n_audio < 1) n_audio = 1;
    }
    int n_video = S - n_text - n_audio; /* >= 1 for S >= 3: text + audio is about 3.7% of S */
    const int rc = alloc_inputs(cfg, S, in, "default inputs", err, errlen);
    if (rc != 0) return rc;

    const int frame = GRID_H * GRID_W;
    const int frames = (n_video + frame - 1) / frame;
    const double a = sqrt(REF_AREA / frame);
    int i = 0;
    for (int k = 0; k < n_text; k++, i++) {
        in->tags[i] = H3_TAG_TEXT;
        in->pos[3 * i + 0] = (float)k;
        in->pos[3 * i + 1] = in->pos[3 * i + 2] = 0.0f;
    }
    for (int k = 0; k < n_audio; k++, i++) {
        in->tags[i] = H3_TAG_AUDIO;
        in->pos[3 * i + 0] = (float)((double)k * frames / n_audio);
        in->pos[3 * i + 1] = in->pos[3 * i + 2] = 0.0f;
    }
    for (int k = 0; k < n_video; k++, i++) {
        int f = k / frame, r = k % frame;
        in->tags[i] = H3_TAG_VIDEO;
        in->pos[3 * i + 0] = (float)f;
        in->pos[3 * i + 1] = (float)((r / GRID_W) * a);
        in->pos[3 * i + 2] = (float)((r % GRID_W) * a);
    }
    const int64_t nx = (int64_t)S * cfg->hidden;
    if (profile == H3_PROFILE_MODEL) {
        if (model_hidden_states(cfg, S, seed, in->x) != 0) {
            h3_inputs_free(in);
            h3_seterr(err, errlen, "default inputs: out of host memory for the channel statistics");
            return ST_ERR_RESOURCE;
        }
    } else {
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (int64_t e = 0; e < nx; e++) in->x[e] = h3_f32_to_bf16((float)h3_normal(seed, 0, (uint64_t)e));
    }
    for (int j = 0; j < cfg->temb; j++) in->temb[j] = (float)h3_normal(seed, 1, (uint64_t)j);
    count_tags(in);
    return 0;
}

static const st_tensor *need(const st_file *f, const char *name, char *err, size_t errlen)
{
    const st_tensor *t = st_find(f, name);
    if (!t) h3_seterr(err, errlen, "%s: tensor '%s' is missing", f->path, name);
    return t;
}

static int check_shape(const st_file *f, const st_tensor *t, int rank, const int64_t *shape, const char *why,
                       char *err, size_t errlen)
{
    int ok = t->rank == rank;
    for (int d = 0; ok && d < rank; d++) ok = t->shape[d] == shape[d];
    if (ok) return 0;
    h3_seterr(err, errlen, "%s: tensor '%s': shape %s, expected %s (%s)", f->path, t->name,
              st_shape_text(t->rank, t->shape).s, st_shape_text(rank, shape).s, why);
    return -1;
}

static int check_dtype(const st_file *f, const st_tensor *t, st_dtype want, char *err, size_t errlen)
{
    if (t->dtype == want) return 0;
    h3_seterr(err, errlen, "%s: tensor '%s': dtype %s, expected %s", f->path, t->name, st_dtype_name(t->dtype),
              st_dtype_name(want));
    return -1;
}

int h3_inputs_load(const char *path, const h3_config *cfg, h3_inputs *in, char *err, size_t errlen)
{
    memset(in, 0, sizeof *in);
    if (err && errlen) err[0] = 0;
    st_file f;
    int rc = st_open(path, &f, err, errlen);
    if (rc != 0) return rc;
    rc = ST_ERR_FILE;
    const st_tensor *tx, *tt, *tg, *tp;
    char why[128];
    if (!(tx = need(&f, "x", err, errlen)) || !(tt = need(&f, "temb", err, errlen)) ||
        !(tg = need(&f, "tags", err, errlen)) || !(tp = need(&f, "positions", err, errlen)))
        goto fail;
    if (check_dtype(&f, tx, ST_BF16, err, errlen)) goto fail;
    if (tx->rank != 2 || tx->shape[0] < 1 || tx->shape[0] > INT32_MAX) {
        h3_seterr(err, errlen, "%s: tensor 'x': rank %d%s, expected [S][%d] with 1 <= S < 2^31", path, tx->rank,
                  tx->rank == 2 ? " with a token count out of range" : "", cfg->hidden);
        goto fail;
    }
    const int S = (int)tx->shape[0];
    snprintf(why, sizeof why, "hidden %d of the config", cfg->hidden);
    if (check_shape(&f, tx, 2, (int64_t[]){S, cfg->hidden}, why, err, errlen)) goto fail;
    snprintf(why, sizeof why, "temb %d of the config", cfg->temb);
    if (check_dtype(&f, tt, ST_F32, err, errlen) || check_shape(&f, tt, 1, (int64_t[]){cfg->temb}, why, err, errlen))
        goto fail;
    snprintf(why, sizeof why, "S = %d from 'x'", S);
    if (check_shape(&f, tg, 1, (int64_t[]){S}, why, err, errlen)) goto fail;
    if (tg->dtype != ST_I32 && tg->dtype != ST_U8 && tg->dtype != ST_I64) {
        h3_seterr(err, errlen, "%s: tensor 'tags': dtype %s, expected I32 (or U8, I64)", path,
                  st_dtype_name(tg->dtype));
        goto fail;
    }
    if (check_dtype(&f, tp, ST_F32, err, errlen) || check_shape(&f, tp, 2, (int64_t[]){S, 3}, why, err, errlen))
        goto fail;
    if ((rc = alloc_inputs(cfg, S, in, path, err, errlen)) != 0) goto fail;
    rc = ST_ERR_FILE;
    memcpy(in->x, tx->data, (size_t)S * cfg->hidden * sizeof *in->x);
    memcpy(in->temb, tt->data, (size_t)cfg->temb * sizeof *in->temb);
    memcpy(in->pos, tp->data, (size_t)S * 3 * sizeof *in->pos);
    for (int i = 0; i < S; i++) { /* memcpy per element: the data need not be aligned */
        int64_t v;
        if (tg->dtype == ST_U8) {
            v = ((const uint8_t *)tg->data)[i];
        } else if (tg->dtype == ST_I32) {
            int32_t t32;
            memcpy(&t32, (const uint8_t *)tg->data + 4 * (size_t)i, 4);
            v = t32;
        } else {
            memcpy(&v, (const uint8_t *)tg->data + 8 * (size_t)i, 8);
        }
        if (v < 0 || v >= cfg->modalities) {
            h3_seterr(err, errlen,
                      "%s: tensor 'tags': token %d has tag %lld, expected 0..%d (0 video, 1 text, 2 audio)", path, i,
                      (long long)v, cfg->modalities - 1);
            goto fail_free;
        }
        in->tags[i] = (int32_t)v;
    }
    for (int j = 0; j < cfg->temb; j++)
        if (!isfinite(in->temb[j])) {
            h3_seterr(err, errlen, "%s: tensor 'temb': element %d is %g", path, j, (double)in->temb[j]);
            goto fail_free;
        }
    for (int i = 0; i < S; i++)
        for (int d = 0; d < 3; d++)
            if (!isfinite(in->pos[3 * i + d])) {
                h3_seterr(err, errlen, "%s: tensor 'positions': token %d, axis %d is %g", path, i, d,
                          (double)in->pos[3 * i + d]);
                goto fail_free;
            }
    count_tags(in);
    st_close(&f);
    return 0;
fail_free:
    h3_inputs_free(in);
fail:
    st_close(&f);
    return rc;
}

int h3_inputs_save(const char *path, const h3_config *cfg, const h3_inputs *in, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if (in->S < 1 || !in->x || !in->temb || !in->tags || !in->pos) {
        h3_seterr(err, errlen, "%s: inputs are empty", path);
        return -1;
    }
    const int64_t S = in->S;
    st_decl d[4] = {
        {"x", ST_BF16, 2, {S, cfg->hidden}},
        {"temb", ST_F32, 1, {cfg->temb}},
        {"tags", ST_I32, 1, {S}},
        {"positions", ST_F32, 2, {S, 3}},
    };
    char tok[32];
    snprintf(tok, sizeof tok, "%d", in->S);
    const char *meta[] = {"format", "h3block inputs", "tokens", tok};
    st_writer *w = st_writer_open(path, d, 4, meta, 2, err, errlen);
    if (!w) return -1;
    if (st_writer_write(w, in->x, (size_t)S * cfg->hidden * sizeof *in->x, err, errlen) ||
        st_writer_write(w, in->temb, (size_t)cfg->temb * sizeof *in->temb, err, errlen) ||
        st_writer_write(w, in->tags, (size_t)S * sizeof *in->tags, err, errlen) ||
        st_writer_write(w, in->pos, (size_t)S * 3 * sizeof *in->pos, err, errlen)) {
        st_writer_abort(w);
        return -1;
    }
    return st_writer_close(w, err, errlen);
}
