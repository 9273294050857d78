/* block.c — one H3 DiT block's weights from a safetensors file (block.h).
 *
 * Steps: open (st_open validates the container), find the one "blocks.N."
 * prefix (or none), infer the config from five shapes, validate it, then
 * check all ten tensors against h3_tensor_specs(). Every error names the file
 * and tensor, and says where each expected size came from, so a wrong shape
 * points at the tensor that disagrees with the others. Names from the file
 * are printed through st_quote (escaped, one line). */
#define _POSIX_C_SOURCE 200809L
#include "block.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Length of a "blocks.<digits>." prefix at the start of name, 0 if none;
 * *n receives the block number (digits beyond int range count as no prefix).
 * Leading zeros are the file's spelling ("blocks.007." is block 7): the
 * tensors are looked up with the prefix as written. */
static size_t block_prefix(const char *name, int *n)
{
    static const char pre[] = "blocks.";
    const size_t lp = sizeof pre - 1;
    if (strncmp(name, pre, lp) != 0) return 0;
    size_t i = lp;
    long v = 0;
    while (name[i] >= '0' && name[i] <= '9') {
        v = v * 10 + (name[i] - '0');
        if (v > 1000000000L) return 0;
        i++;
    }
    if (i == lp || name[i] != '.') return 0;
    *n = (int)v;
    return i + 1;
}

static void fmt_shape(char *buf, size_t n, int rank, const int64_t *shape)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int k = 0; k < rank && o < n; k++) o += (size_t)snprintf(buf + o, n - o, k ? ", %lld" : "%lld", (long long)shape[k]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* Where each config field was read from, for error messages. */
typedef struct {
    char hidden[160], head_dim[160], heads[200], ffn[160], temb[160], modalities[200];
} provenance;

void h3_block_free(h3_block *b)
{
    if (!b) return;
    st_close(&b->file);
    free(b->qkv_regrouped);
    for (int i = 0; i < H3_T_COUNT; i++) free(b->aligned[i]);
    memset(b, 0, sizeof *b);
}

int h3_block_load(const char *path, h3_block *b, h3_warn_fn warn, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    b->block_index = -1;
    if (err && errlen) err[0] = 0;
    int rc = st_open(path, &b->file, err, errlen);
    if (rc != 0) return rc;
    rc = ST_ERR_FILE;
    const st_file *f = &b->file;

    /* 1. One prefix for all tensors, or none. */
    size_t plen = 0;
    const char *first = NULL; /* first tensor seen, to name in a mismatch */
    for (int i = 0; i < f->n_tensors; i++) {
        const char *nm = f->tensors[i].name;
        int n = -1;
        size_t l = block_prefix(nm, &n);
        if (!first) {
            first = nm;
            plen = l;
            b->block_index = l ? n : -1;
            continue;
        }
        if ((l != 0) != (plen != 0)) {
            const char *with = l ? nm : first, *without = l ? first : nm;
            seterr(err, errlen, "%s: mixed names: tensor '%s' has a 'blocks.N.' prefix but '%s' has none", path,
                   st_quote(with).s, st_quote(without).s);
            goto fail;
        }
        if (l && n != b->block_index) {
            seterr(err, errlen, "%s: tensors of two blocks: '%s' (block %d) and '%s' (block %d); give one block per file",
                   path, st_quote(first).s, b->block_index, st_quote(nm).s, n);
            goto fail;
        }
        if (l != plen || strncmp(nm, first, l) != 0) {
            seterr(err, errlen, "%s: block %d's prefix spelt two ways: '%s' and '%s'; give one spelling per file", path,
                   n, st_quote(first).s, st_quote(nm).s);
            goto fail;
        }
    }
    char prefix[32] = ""; /* as the file spells it */
    if (plen >= sizeof prefix) {
        seterr(err, errlen, "%s: tensor '%s': block prefix of %zu characters (leading zeros?), at most %zu", path,
               st_quote(first).s, plen, sizeof prefix - 1);
        goto fail;
    }
    if (plen) snprintf(prefix, sizeof prefix, "%.*s", (int)plen, first);

    /* 2. Infer the config from the shapes. */
    h3_config cfg = h3_config_full();
    h3_tensor_spec spec[H3_T_COUNT];
    h3_tensor_specs(&cfg, spec); /* names only at this point */
    const st_tensor *t[H3_T_COUNT];
    char full[H3_T_COUNT][96];
    for (int i = 0; i < H3_T_COUNT; i++) {
        snprintf(full[i], sizeof full[i], "%s%s", prefix, spec[i].name);
        t[i] = st_find(f, full[i]);
    }
    static const struct {
        int idx, rank;
        const char *what;
    } need[] = {
        {H3_T_NORM1, 1, "hidden"},       {H3_T_QNORM, 1, "head_dim"}, {H3_T_QKV, 2, "heads"},
        {H3_T_FC2, 2, "ffn"},            {H3_T_ADALN_W, 2, "temb and modalities"},
    };
    for (size_t k = 0; k < sizeof need / sizeof need[0]; k++) {
        const st_tensor *x = t[need[k].idx];
        if (!x) {
            seterr(err, errlen, "%s: tensor '%s' is missing (needed to infer %s)", path, full[need[k].idx], need[k].what);
            goto fail;
        }
        if (x->rank != need[k].rank) {
            char sh[96];
            fmt_shape(sh, sizeof sh, x->rank, x->shape);
            seterr(err, errlen, "%s: tensor '%s': shape %s has rank %d, expected rank %d", path, full[need[k].idx], sh,
                   x->rank, need[k].rank);
            goto fail;
        }
        for (int d = 0; d < x->rank; d++)
            if (x->shape[d] <= 0 || x->shape[d] > INT32_MAX) {
                char sh[96];
                fmt_shape(sh, sizeof sh, x->rank, x->shape);
                seterr(err, errlen, "%s: tensor '%s': shape %s has a zero or too large dimension", path,
                       full[need[k].idx], sh);
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
        seterr(err, errlen, "%s: tensor '%s': %lld rows is not a multiple of 3 x head_dim = %d (%s)", path,
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
        seterr(err, errlen, "%s: tensor '%s': %lld rows is not a multiple of 6 x hidden = %lld (%s)", path,
               full[H3_T_ADALN_W], (long long)arows, (long long)H3_SLOTS * cfg.hidden, pv.hidden);
        goto fail;
    }
    cfg.modalities = (int)(arows / ((int64_t)H3_SLOTS * cfg.hidden));
    snprintf(pv.modalities, sizeof pv.modalities, "modalities %d from '%s' rows / (6 x hidden)", cfg.modalities,
             full[H3_T_ADALN_W]);
    char verr[256];
    if (h3_config_validate(&cfg, verr, sizeof verr) != 0) {
        seterr(err, errlen, "%s: the shapes give an unsupported %s (%s, %s, %s, %s, %s, %s)", path, verr, pv.hidden,
               pv.head_dim, pv.heads, pv.ffn, pv.temb, pv.modalities);
        goto fail;
    }
    b->cfg = cfg;

    /* 3. Every tensor: present, BF16, right shape. */
    h3_tensor_specs(&cfg, spec);
    for (int i = 0; i < H3_T_COUNT; i++) {
        if (!t[i]) {
            seterr(err, errlen, "%s: tensor '%s' is missing", path, full[i]);
            goto fail;
        }
        if (t[i]->dtype != ST_BF16) {
            seterr(err, errlen, "%s: tensor '%s': dtype %s, expected BF16", path, full[i], st_dtype_name(t[i]->dtype));
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
            char got[96], want[96], because[700] = "";
            fmt_shape(got, sizeof got, t[i]->rank, t[i]->shape);
            fmt_shape(want, sizeof want, spec[i].rank, spec[i].shape);
            for (int k = 0; k < 4 && why[k]; k++) {
                size_t o = strlen(because);
                snprintf(because + o, sizeof because - o, "%s%s", k ? ", " : "", why[k]);
            }
            seterr(err, errlen, "%s: tensor '%s': shape %s, expected %s (%s)", path, full[i], got, want, because);
            goto fail;
        }
        if ((uintptr_t)t[i]->data % 2) {
            /* an odd-sized tensor before it (the format allows it): read
             * from an aligned copy */
            const size_t bytes = (size_t)(t[i]->end - t[i]->begin);
            if (!(b->aligned[i] = malloc(bytes ? bytes : 2))) {
                seterr(err, errlen, "%s: out of memory copying tensor '%s' (%zu bytes)", path, full[i], bytes);
                rc = ST_ERR_RESOURCE;
                goto fail;
            }
            memcpy(b->aligned[i], t[i]->data, bytes);
            b->w[i] = b->aligned[i];
        } else {
            b->w[i] = (const uint16_t *)t[i]->data;
        }
    }

    /* 4. Extra tensors: warn, count. */
    for (int i = 0; i < f->n_tensors; i++) {
        int known = 0;
        for (int k = 0; k < H3_T_COUNT && !known; k++) known = t[k] == &f->tensors[i];
        if (known) continue;
        b->n_extra++;
        if (warn) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s: ignoring unexpected tensor '%s' (%s)", path, st_quote(f->tensors[i].name).s,
                     st_dtype_name(f->tensors[i].dtype));
            warn(msg);
        }
    }

    /* 5. QKV layout. stacked: row j*I + h*D + d (j = 0 q, 1 k, 2 v; I = H*D)
     * goes to the grouped row h*3D + j*D + d. */
    const char *lay = st_meta(f, "qkv_layout");
    if (lay && strcmp(lay, "stacked") == 0) {
        const size_t C = (size_t)cfg.hidden, D = (size_t)cfg.head_dim, H = (size_t)cfg.heads, I = H * D;
        b->qkv_regrouped = malloc(3 * I * C * sizeof(uint16_t)); // [3*H*D][C] bf16, grouped
        if (!b->qkv_regrouped) {
            seterr(err, errlen, "%s: out of memory re-grouping '%s' (%zu bytes)", path, full[H3_T_QKV],
                   3 * I * C * sizeof(uint16_t));
            rc = ST_ERR_RESOURCE;
            goto fail;
        }
        const uint16_t *src = b->w[H3_T_QKV]; // [3*H*D][C] bf16, stacked
        for (size_t j = 0; j < 3; j++)
            for (size_t h = 0; h < H; h++)
                memcpy(b->qkv_regrouped + (h * 3 * D + j * D) * C, src + (j * I + h * D) * C, D * C * sizeof(uint16_t));
        b->w[H3_T_QKV] = b->qkv_regrouped;
    } else if (lay && strcmp(lay, "grouped") != 0) {
        seterr(err, errlen, "%s: __metadata__ qkv_layout '%s' is unknown (expected 'grouped' or 'stacked')", path,
               st_quote(lay).s);
        goto fail;
    }
    return 0;
fail:
    h3_block_free(b);
    b->block_index = -1;
    return rc;
}
