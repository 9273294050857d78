/* block.c — one H3 DiT block's weights, from a published checkpoint (block.h).
 *
 * Steps: find the block and map its tensors to ours (checkpoint.c), infer
 * the config from five shapes, validate it, check all ten tensors against
 * h3_tensor_specs(), decide the QKV row order, then read the block into
 * memory it owns, in our layout. Every error names the file and tensor (in
 * the source's own names), and says where each expected size came from, so
 * a wrong shape points at the tensor that disagrees with the others. */
#define _POSIX_C_SOURCE 200809L
#include "block.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"

/* Where each config field was read from, for error messages. */
typedef struct {
    char hidden[160], head_dim[160], heads[200], ffn[160], temb[160], modalities[200];
} provenance;

void h3_block_free(h3_block *b)
{
    if (!b) return;
    free(b->store);
    memset(b, 0, sizeof *b);
}

int h3_block_load(const char *path, h3_block *b, h3_warn_fn warn, char *err, size_t errlen)
{
    const h3_load_options o = {.block = -1, .qkv = H3_QKV_UNSTATED};
    return h3_block_load_with(path, &o, b, warn, err, errlen);
}

int h3_block_load_with(const char *path, const h3_load_options *opt, h3_block *b, h3_warn_fn warn, char *err,
                       size_t errlen)
{
    memset(b, 0, sizeof *b);
    b->block_index = -1;
    if (err && errlen) err[0] = 0;
    h3_ckpt ck;
    int rc = h3_ckpt_open(path, opt->block, &ck, err, errlen);
    if (rc != 0) return rc;
    rc = ST_ERR_FILE; /* the failures below are the file's, but for memory */
    b->block_index = ck.block;
    b->n_blocks = ck.n_blocks;
    b->n_source_tensors = ck.n_names;

    /* 1. Our ten tensors as the source has them (NULL: missing), with the
     * file and the name to report, and for a missing one a name outside the
     * block with the same ending (a prefix or block number gone wrong). */
    const st_tensor *t[H3_T_COUNT];
    const char *full[H3_T_COUNT], *where[H3_T_COUNT], *sim[H3_T_COUNT];
    for (int i = 0; i < H3_T_COUNT; i++) {
        t[i] = ck.src[i][0] ? &ck.view[i] : NULL;
        full[i] = ck.name[i];
        where[i] = ck.src[i][0] ? ck.src_file[i][0]->path : path;
        sim[i] = ck.similar[i];
    }

    /* 2. Infer the config from the shapes. */
    h3_config cfg = h3_config_full();
    h3_tensor_spec spec[H3_T_COUNT];
    static const struct {
        int idx, rank;
        const char *what;
    } need[] = {
        {H3_T_NORM1, 1, "hidden"},       {H3_T_QNORM, 1, "head_dim"}, {H3_T_QKV, 2, "heads"},
        {H3_T_FC2, 2, "ffn"},            {H3_T_ADALN_W, 2, "temb and modalities"},
    };
    for (size_t k = 0; k < sizeof need / sizeof need[0]; k++) {
        const int i = need[k].idx;
        const st_tensor *x = t[i];
        if (!x) {
            h3_seterr(err, errlen, "%s: tensor '%s' is missing (needed to infer %s%s%s%s)", path, full[i], need[k].what,
                      sim[i][0] ? "; the source has '" : "", sim[i], sim[i][0] ? "'" : "");
            goto fail;
        }
        if (x->rank != need[k].rank) {
            h3_seterr(err, errlen, "%s: tensor '%s': shape %s has rank %d, expected rank %d", where[i], full[i],
                      st_shape_text(x->rank, x->shape).s, x->rank, need[k].rank);
            goto fail;
        }
        for (int d = 0; d < x->rank; d++)
            if (x->shape[d] <= 0 || x->shape[d] > INT32_MAX) {
                h3_seterr(err, errlen, "%s: tensor '%s': shape %s has a zero or too large dimension", where[i], full[i],
                          st_shape_text(x->rank, x->shape).s);
                goto fail;
            }
    }
    provenance pv;
    cfg.hidden = (int)t[H3_T_NORM1]->shape[0];
    snprintf(pv.hidden, sizeof pv.hidden, "hidden %d from '%s'", cfg.hidden, full[H3_T_NORM1]);
    cfg.head_dim = (int)t[H3_T_QNORM]->shape[0];
    snprintf(pv.head_dim, sizeof pv.head_dim, "head_dim %d from '%s'", cfg.head_dim, full[H3_T_QNORM]);
    int64_t qrows = t[H3_T_QKV]->shape[0];
    if (qrows % (3 * (int64_t)cfg.head_dim)) {
        h3_seterr(err, errlen, "%s: tensor '%s': %lld rows is not a multiple of 3 x head_dim = %d (%s)", path,
                  full[H3_T_QKV], (long long)qrows, 3 * cfg.head_dim, pv.head_dim);
        goto fail;
    }
    cfg.heads = (int)(qrows / (3 * cfg.head_dim));
    snprintf(pv.heads, sizeof pv.heads, "heads %d from '%s' rows / (3 x head_dim)", cfg.heads, full[H3_T_QKV]);
    cfg.ffn = (int)t[H3_T_FC2]->shape[1];
    snprintf(pv.ffn, sizeof pv.ffn, "ffn %d from '%s' cols", cfg.ffn, full[H3_T_FC2]);
    cfg.temb = (int)t[H3_T_ADALN_W]->shape[1];
    snprintf(pv.temb, sizeof pv.temb, "temb %d from '%s' cols", cfg.temb, full[H3_T_ADALN_W]);
    int64_t arows = t[H3_T_ADALN_W]->shape[0];
    if (arows % ((int64_t)H3_SLOTS * cfg.hidden)) {
        h3_seterr(err, errlen, "%s: tensor '%s': %lld rows is not a multiple of 6 x hidden = %lld (%s)", path,
                  full[H3_T_ADALN_W], (long long)arows, (long long)H3_SLOTS * cfg.hidden, pv.hidden);
        goto fail;
    }
    cfg.modalities = (int)(arows / ((int64_t)H3_SLOTS * cfg.hidden));
    snprintf(pv.modalities, sizeof pv.modalities, "modalities %d from '%s' rows / (6 x hidden)", cfg.modalities,
             full[H3_T_ADALN_W]);
    char verr[256];
    if (h3_config_validate(&cfg, verr, sizeof verr) != 0) {
        h3_seterr(err, errlen, "%s: the shapes give an unsupported %s (%s, %s, %s, %s, %s, %s)", path, verr, pv.hidden,
                  pv.head_dim, pv.heads, pv.ffn, pv.temb, pv.modalities);
        goto fail;
    }
    b->cfg = cfg;

    /* 3. Every tensor: present, BF16, right shape. */
    h3_tensor_specs(&cfg, spec);
    for (int i = 0; i < H3_T_COUNT; i++) {
        if (!t[i]) {
            h3_seterr(err, errlen, "%s: tensor '%s' is missing%s%s%s", path, full[i],
                      sim[i][0] ? " (the source has '" : "", sim[i], sim[i][0] ? "')" : "");
            goto fail;
        }
        if (t[i]->dtype != ST_BF16) {
            h3_seterr(err, errlen, "%s: tensor '%s': dtype %s, expected BF16", where[i], full[i],
                      st_dtype_name(t[i]->dtype));
            goto fail;
        }
        int ok = t[i]->rank == spec[i].rank;
        for (int d = 0; ok && d < spec[i].rank; d++) ok = t[i]->shape[d] == spec[i].shape[d];
        if (!ok) {
            /* Which config fields this tensor's shape depends on. */
            const char *why[4] = {0};
            switch (i) {
            case H3_T_NORM1: case H3_T_NORM2: why[0] = pv.hidden; break;
            case H3_T_QKV: case H3_T_OUT: why[0] = pv.heads; why[1] = pv.head_dim; why[2] = pv.hidden; break;
            case H3_T_QNORM: case H3_T_KNORM: why[0] = pv.head_dim; break;
            case H3_T_FC1: case H3_T_FC2: why[0] = pv.ffn; why[1] = pv.hidden; break;
            case H3_T_ADALN_W: why[0] = pv.modalities; why[1] = pv.hidden; why[2] = pv.temb; break;
            case H3_T_ADALN_B: why[0] = pv.modalities; why[1] = pv.hidden; break;
            }
            char because[700] = "";
            for (int k = 0; k < 4 && why[k]; k++) {
                size_t o = strlen(because);
                snprintf(because + o, sizeof because - o, "%s%s", k ? ", " : "", why[k]);
            }
            h3_seterr(err, errlen, "%s: tensor '%s': shape %s, expected %s (%s)", where[i], full[i],
                      st_shape_text(t[i]->rank, t[i]->shape).s, st_shape_text(spec[i].rank, spec[i].shape).s, because);
            goto fail;
        }
    }

    /* 4. The QKV row order, then the bytes, in our layout. */
    char why[320], src[480];
    if (h3_ckpt_qkv(&ck, opt->qkv, &b->qkv_order, why, sizeof why, err, errlen)) goto fail;
    const st_file *qf = ck.src_file[H3_T_QKV][0];
    const char *prof = qf ? st_meta(qf, "profile") : NULL;
    h3_profile pp;
    if (prof && h3_profile_parse(prof, &pp) == 0) snprintf(b->profile, sizeof b->profile, "%s", h3_profile_name(pp));
    size_t total = 0, at[H3_T_COUNT];
    for (int i = 0; i < H3_T_COUNT; i++) {
        at[i] = total;
        total += (size_t)spec[i].shape[0] * (spec[i].rank == 2 ? (size_t)spec[i].shape[1] : 1);
    }
    b->store = malloc(total * sizeof(uint16_t)); // the ten tensors, bf16, in enum order
    if (!b->store) {
        h3_seterr(err, errlen, "%s: out of memory for the block (%zu bytes)", path, total * sizeof(uint16_t));
        rc = ST_ERR_RESOURCE;
        goto fail;
    }
    uint16_t *dst[H3_T_COUNT];
    for (int i = 0; i < H3_T_COUNT; i++) b->w[i] = dst[i] = b->store + at[i];
    if (h3_ckpt_read(&ck, &cfg, b->qkv_order, dst, err, errlen)) goto fail;
    h3_ckpt_describe(&ck, src, sizeof src);
    snprintf(b->layout, sizeof b->layout, "%s; QKV %s%s", src, why,
             ck.diffusers ? "; fc1 [up; gate] (diffusers' SwiGLU) swapped to [gate; up]" : "");
    snprintf(b->source, sizeof b->source, "%s", ck.index ? ck.index : ck.file ? ck.file : path);

    /* 5. The block's extra tensors: warn, count. */
    for (int k = 0; k < ck.n_extra; k++) {
        b->n_extra++;
        if (warn) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s: ignoring unexpected tensor '%s'", path, ck.names[ck.extra[k]]);
            warn(msg);
        }
    }
    h3_ckpt_close(&ck);
    return 0;
fail:
    h3_ckpt_close(&ck);
    h3_block_free(b);
    b->block_index = -1;
    return rc;
}
