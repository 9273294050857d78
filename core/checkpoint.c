/* checkpoint.c — where one H3 block's tensors are in a published checkpoint
 * (checkpoint.h).
 *
 * Steps: resolve the path to one file or one index; list every tensor name
 * (the index's weight_map, or the file's header); find the block stack (the
 * prefix whose names end in our or diffusers' per-block names, the one with
 * adaln_proj when there are several); pick the block; open the shards that
 * hold it, header only, and map its tensors to ours. h3_ckpt_qkv decides the
 * QKV row order, h3_ckpt_read reads the bytes in our layout. */
#define _POSIX_C_SOURCE 200809L
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "errmsg.h"

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

const char *h3_qkv_order_name(h3_qkv_order o)
{
    static const char *const n[] = {"unstated", "grouped", "stacked", "split"};
    return (unsigned)o < 4 ? n[o] : "?";
}

/* ------------------------------------------------------------ names */

/* Diffusers' per-block names, part 0..2 of our tensor t (QKV has three). */
static const struct {
    int t, part;
    const char *name;
} diffusers_names[] = {
    {H3_T_NORM1, 0, "norm1.weight"},           {H3_T_NORM2, 0, "norm2.weight"},
    {H3_T_QKV, 0, "attn.to_q.weight"},         {H3_T_QKV, 1, "attn.to_k.weight"},
    {H3_T_QKV, 2, "attn.to_v.weight"},         {H3_T_QNORM, 0, "attn.norm_q.weight"},
    {H3_T_KNORM, 0, "attn.norm_k.weight"},     {H3_T_OUT, 0, "attn.to_out.0.weight"},
    {H3_T_FC1, 0, "ff.net.0.proj.weight"},     {H3_T_FC2, 0, "ff.net.2.weight"},
    {H3_T_ADALN_W, 0, "adaln_proj.linear.weight"}, {H3_T_ADALN_B, 0, "adaln_proj.linear.bias"},
};
#define N_DIFFUSERS_NAMES ((int)(sizeof diffusers_names / sizeof diffusers_names[0]))

const char *h3_diffusers_name(int t, int part)
{
    for (int k = 0; k < N_DIFFUSERS_NAMES; k++)
        if (diffusers_names[k].t == t && diffusers_names[k].part == part) return diffusers_names[k].name;
    return NULL;
}

/* Our per-block names (the config does not change them). */
static const char *our_name(int t)
{
    static h3_tensor_spec s[H3_T_COUNT];
    if (!s[0].name) {
        h3_config cfg = h3_config_full();
        h3_tensor_specs(&cfg, s);
    }
    return s[t].name;
}

/* Is rest one of the per-block names? Sets *ours / *diff when only ours or
 * only diffusers' has it (norm1, norm2 and adaln_proj are both). */
static int known_suffix(const char *rest, int *ours, int *diff)
{
    int o = 0, d = 0;
    for (int t = 0; t < H3_T_COUNT; t++) o |= !strcmp(rest, our_name(t));
    for (int k = 0; k < N_DIFFUSERS_NAMES; k++) d |= !strcmp(rest, diffusers_names[k].name);
    if (ours) *ours = o && !d;
    if (diff) *diff = d && !o;
    return o || d;
}

/* name = stack + N + "." + rest, stack = P + "blocks." or P +
 * "transformer_blocks.", P empty or ending in '.'. Returns rest (NULL when
 * name has no such part), *slen = strlen(stack), *n = N (its digits as
 * spelt, "7" or "007", are name[*slen .. rest - 1)). */
static const char *split_block(const char *name, size_t *slen, long *n)
{
    for (const char *p = name; (p = strstr(p, "blocks.")) != NULL; p++) {
        const size_t at = (size_t)(p - name);
        int word = at == 0 || name[at - 1] == '.';
        if (!word && at >= 12 && !strncmp(p - 12, "transformer_", 12)) word = at == 12 || name[at - 13] == '.';
        if (!word) continue;
        const char *d = p + 7;
        long v = 0;
        int nd = 0;
        while (*d >= '0' && *d <= '9' && nd < 9) v = v * 10 + (*d++ - '0'), nd++;
        if (!nd || *d != '.') continue;
        *slen = (size_t)(p + 7 - name);
        *n = v;
        return d + 1;
    }
    return NULL;
}

/* The stack and block part of name when it is a per-block name of some
 * stack: rest (the per-block name), *slen, *n (-1: no block number). */
static const char *block_part(const char *name, size_t *slen, long *n)
{
    const char *rest = split_block(name, slen, n);
    if (rest && known_suffix(rest, NULL, NULL)) return rest;
    if (known_suffix(name, NULL, NULL)) {
        *slen = 0;
        *n = -1;
        return name;
    }
    return NULL;
}

static int find_name(const h3_ckpt *c, const char *name)
{
    for (int k = 0; k < c->n_names; k++)
        if (!strcmp(c->names[k], name)) return k;
    return -1;
}

/* ------------------------------------------------------------ sources */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* In dir: the one *.safetensors.index.json, else the one *.safetensors.
 * 1 found (*out malloc'd), 0 none, -1 several (an error). */
static int pick_in_dir(const char *dir, char **out, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    char **l[2] = {NULL, NULL}; /* index files, .safetensors files */
    int n[2] = {0, 0}, rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        const int k = ends_with(e->d_name, ".safetensors.index.json") ? 0
                      : ends_with(e->d_name, ".safetensors")          ? 1
                                                                      : -1;
        if (k < 0) continue;
        char **grown = realloc(l[k], (size_t)(n[k] + 1) * sizeof *grown);
        if (grown) l[k] = grown;
        if (!grown || !(l[k][n[k]] = strdup(e->d_name)))
            rc = h3_seterr(err, errlen, "%s: out of memory listing the folder", dir);
        else
            n[k]++;
    }
    closedir(d);
    const int k = n[0] ? 0 : 1;
    if (rc == 0 && n[k]) {
        qsort(l[k], (size_t)n[k], sizeof *l[k], cmp_str);
        if (n[k] == 1)
            rc = (*out = join(dir, l[k][0])) ? 1 : h3_seterr(err, errlen, "%s: out of memory", dir);
        else
            rc = h3_seterr(err, errlen, "%s: %d %s (%s, %s%s): name one of them", dir, n[k],
                           k == 0 ? "index files" : ".safetensors files and no *.safetensors.index.json", l[k][0],
                           l[k][1], n[k] > 2 ? ", ..." : "");
    }
    for (int j = 0; j < 2; j++) {
        for (int i = 0; i < n[j]; i++) free(l[j][i]);
        free(l[j]);
    }
    return rc;
}

/* path: a file, an index or a directory (with one of them in it or in its
 * transformer/ folder); *resolved is malloc'd. */
static int resolve(const char *path, char **resolved, int *is_index, char *err, size_t errlen)
{
    struct stat sb;
    char *r = NULL;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char *sub = join(path, "transformer");
        int k = pick_in_dir(path, &r, err, errlen);
        if (k == 0 && sub) k = pick_in_dir(sub, &r, err, errlen);
        free(sub);
        if (k < 0) return -1;
        if (k == 0)
            return h3_seterr(err, errlen,
                             "%s: no *.safetensors.index.json or .safetensors file in it or in %s/transformer", path,
                             path);
    } else if (!(r = strdup(path))) {
        return h3_seterr(err, errlen, "%s: out of memory", path);
    }
    *is_index = ends_with(r, ".json");
    *resolved = r;
    return 0;
}

static int add_shard(h3_ckpt *c, const char *path, char *err, size_t errlen)
{
    char **p = realloc(c->shard_path, (size_t)(c->n_shards + 1) * sizeof *p);
    if (!p) return h3_seterr(err, errlen, "%s: out of memory", path);
    c->shard_path = p;
    if (!(p[c->n_shards] = strdup(path))) return h3_seterr(err, errlen, "%s: out of memory", path);
    c->n_shards++;
    return 0;
}

/* The names and shards of an index: {"weight_map": {name: shard file}}. */
static int read_index(h3_ckpt *c, char *err, size_t errlen)
{
    const char *ip = c->index;
    json_object *root = json_object_from_file(ip), *wm = NULL;
    if (!root) return h3_seterr(err, errlen, "%s: cannot read the index: %s", ip, json_util_get_last_err());
    int rc = -1;
    if (!json_object_is_type(root, json_type_object) || !json_object_object_get_ex(root, "weight_map", &wm) ||
        !json_object_is_type(wm, json_type_object)) {
        h3_seterr(err, errlen, "%s: not an index (no \"weight_map\" object)", ip);
        goto out;
    }
    const int n = json_object_object_length(wm);
    c->names = calloc((size_t)n + 1, sizeof *c->names);
    c->shard_of = calloc((size_t)n + 1, sizeof *c->shard_of);
    if (!c->names || !c->shard_of) {
        h3_seterr(err, errlen, "%s: out of memory", ip);
        goto out;
    }
    /* shard names are relative to the index's folder */
    char *dir = strdup(ip);
    if (!dir) {
        h3_seterr(err, errlen, "%s: out of memory", ip);
        goto out;
    }
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    json_object_object_foreach(wm, key, val)
    {
        const char *s = json_object_is_type(val, json_type_string) ? json_object_get_string(val) : NULL;
        if (!s || !*s || strchr(s, '/') || !strcmp(s, "..") || !strcmp(s, ".")) {
            h3_seterr(err, errlen, "%s: tensor '%s': shard '%s' is not a plain file name", ip, key,
                      s ? s : "(not a string)");
            free(dir);
            goto out;
        }
        char *sp = slash ? join(dir, s) : strdup(s);
        int k = 0;
        while (sp && k < c->n_shards && strcmp(c->shard_path[k], sp)) k++;
        if (!sp || !(c->names[c->n_names] = strdup(key)) || (k == c->n_shards && add_shard(c, sp, err, errlen))) {
            if (!err || !err[0]) h3_seterr(err, errlen, "%s: out of memory", ip);
            free(sp);
            free(dir);
            goto out;
        }
        free(sp);
        c->shard_of[c->n_names++] = k;
    }
    free(dir);
    rc = 0;
out:
    json_object_put(root);
    return rc;
}

/* The tensor names[k], its shard opened (header only) if needed. */
static int tensor_of(h3_ckpt *c, int k, const st_file **f, const st_tensor **t, char *err, size_t errlen)
{
    const int s = c->shard_of[k];
    if (!c->opened[s]) {
        if (st_open_header(c->shard_path[s], &c->shards[s], err, errlen)) return -1;
        c->opened[s] = 1;
    }
    *f = &c->shards[s];
    if (!(*t = st_find(*f, c->names[k])))
        return h3_seterr(err, errlen, "%s: tensor '%s' is listed in %s but missing from the shard", c->shard_path[s],
                         c->names[k], c->index);
    return 0;
}

/* ------------------------------------------------------------ the block */

/* The block stack: the prefixes (with "blocks." or "transformer_blocks.")
 * under which per-block names appear; the one with adaln_proj if several. */
static int find_stack(h3_ckpt *c, char *err, size_t errlen)
{
    enum { MAX_STACKS = 16 };
    struct {
        size_t len;
        int example, adaln;
    } st[MAX_STACKS];
    int n = 0;
    for (int k = 0; k < c->n_names; k++) {
        size_t slen;
        long b;
        const char *rest = block_part(c->names[k], &slen, &b);
        if (!rest) continue;
        int s = 0;
        while (s < n && !(st[s].len == slen && !strncmp(c->names[st[s].example], c->names[k], slen))) s++;
        if (s == n) {
            if (n == MAX_STACKS) continue; /* enough for the messages */
            st[n].len = slen;
            st[n].example = k;
            st[n++].adaln = 0;
        }
        st[s].adaln |= !strcmp(rest, "adaln_proj.linear.weight");
    }
    if (n == 0)
        return h3_seterr(err, errlen,
                         "%s: no H3 block in it (no names like 'blocks.N.attn.qkv_proj.weight' or diffusers' "
                         "'transformer_blocks.N.attn.to_q.weight', after any prefix)",
                         c->path);
    /* the stack with adaln_proj; two named in the error if that is not one */
    int pick = 0, with = 0, two[2] = {0, n > 1 ? 1 : 0};
    for (int s = 0; s < n; s++)
        if (st[s].adaln) {
            if (with < 2) two[with] = s;
            pick = s;
            with++;
        }
    if (n > 1 && with != 1)
        return h3_seterr(err, errlen, "%s: block tensors under two prefixes (%s with adaln_proj): '%s' and '%s'",
                         c->path, with ? "both" : "neither", c->names[st[two[0]].example],
                         c->names[st[two[1]].example]);
    if (st[pick].len >= sizeof c->stack)
        return h3_seterr(err, errlen, "%s: tensor '%s': a name prefix of more than %zu characters", c->path,
                         c->names[st[pick].example], sizeof c->stack - 1);
    snprintf(c->stack, sizeof c->stack, "%.*s", (int)st[pick].len, c->names[st[pick].example]);
    return 0;
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* The block numbers of the stack; picks the block. */
static int pick_block(h3_ckpt *c, int want, char *err, size_t errlen)
{
    const size_t sl = strlen(c->stack);
    if (!sl) {
        if (want >= 0)
            return h3_seterr(err, errlen, "%s: --block %d: its tensor names carry no block number (no 'blocks.N.')",
                             c->path, want);
        c->block = -1;
        c->n_blocks = 1;
        c->first_block = c->last_block = -1;
        return 0;
    }
    long *num = malloc(((size_t)c->n_names + 1) * sizeof *num);
    if (!num) return h3_seterr(err, errlen, "%s: out of memory", c->path);
    int m = 0;
    for (int k = 0; k < c->n_names; k++) {
        size_t slen;
        long b;
        if (split_block(c->names[k], &slen, &b) && slen == sl && !strncmp(c->names[k], c->stack, sl)) num[m++] = b;
    }
    qsort(num, (size_t)m, sizeof *num, cmp_long);
    const long chosen = want >= 0 ? want : (m ? num[0] : -1);
    /* the chosen block's number as spelt; two spellings of it ('blocks.7.'
     * and 'blocks.007.') would be two readings of one file: refused */
    c->digits[0] = 0;
    for (int k = 0; k < c->n_names; k++) {
        size_t slen;
        long b;
        const char *r = split_block(c->names[k], &slen, &b);
        if (!r || b != chosen || slen != sl || strncmp(c->names[k], c->stack, sl)) continue;
        const int nd = (int)(r - 1 - (c->names[k] + sl));
        if (!c->digits[0]) {
            snprintf(c->digits, sizeof c->digits, "%.*s", nd, c->names[k] + sl);
        } else if ((int)strlen(c->digits) != nd || strncmp(c->digits, c->names[k] + sl, (size_t)nd)) {
            const int bad = h3_seterr(err, errlen, "%s: block %ld is spelt two ways: '%s%s.' and '%.*s'", c->path,
                                      chosen, c->stack, c->digits, (int)(r - c->names[k]), c->names[k]);
            free(num);
            return bad;
        }
    }
    int u = 0, found = 0;
    for (int i = 0; i < m; i++)
        if (i == 0 || num[i] != num[i - 1]) num[u++] = num[i];
    for (int i = 0; i < u; i++) found |= num[i] == want;
    c->n_blocks = u;
    c->first_block = (int)num[0];
    c->last_block = (int)num[u - 1];
    free(num);
    if (want >= 0 && !found && u == 1)
        return h3_seterr(err, errlen, "%s: no tensors for block %d (found block %d only)", c->path, want,
                         c->first_block);
    if (want >= 0 && !found)
        return h3_seterr(err, errlen, "%s: no tensors for block %d (found %d blocks, numbered %d..%d)", c->path, want,
                         u, c->first_block, c->last_block);
    if (want < 0 && u > 1)
        return h3_seterr(err, errlen, "%s: holds %d blocks (numbered %d..%d): pick one with --block N", c->path, u,
                         c->first_block, c->last_block);
    c->block = want >= 0 ? want : c->first_block;
    return 0;
}

/* Is names[k] a tensor of the chosen block? *rest: its per-block name. */
static int in_block(const h3_ckpt *c, int k, const char **rest)
{
    const char *nm = c->names[k];
    if (c->block < 0) {
        *rest = nm;
        return 1;
    }
    size_t slen;
    long b;
    const char *r = split_block(nm, &slen, &b);
    if (!r || b != c->block || slen != strlen(c->stack) || strncmp(nm, c->stack, slen) ||
        strlen(c->digits) != (size_t)(r - 1 - (nm + slen)) || strncmp(nm + slen, c->digits, strlen(c->digits)))
        return 0;
    *rest = r;
    return 1;
}

/* Maps the block's tensors to ours, opening the shards that hold them. */
static int map_block(h3_ckpt *c, char *err, size_t errlen)
{
    int ours = 0, diff = 0, ex_ours = -1, ex_diff = -1;
    c->extra = calloc((size_t)c->n_names + 1, sizeof *c->extra);
    if (!c->extra) return h3_seterr(err, errlen, "%s: out of memory", c->path);
    for (int k = 0; k < c->n_names; k++) {
        const char *rest;
        if (!in_block(c, k, &rest)) continue;
        const st_file *f;
        const st_tensor *t;
        if (tensor_of(c, k, &f, &t, err, errlen)) return -1; /* every tensor of the block is where the index says */
        int o, d;
        if (!known_suffix(rest, &o, &d)) c->extra[c->n_extra++] = k;
        if (o && ex_ours < 0) ex_ours = k;
        if (d && ex_diff < 0) ex_diff = k;
        ours |= o;
        diff |= d;
    }
    if (ours && diff)
        return h3_seterr(err, errlen, "%s: block %d mixes our names ('%s') and diffusers' ('%s')", c->path, c->block,
                         c->names[ex_ours], c->names[ex_diff]);
    c->diffusers = diff;

    char pre[H3_CKPT_STACK + 16];
    if (c->block >= 0)
        snprintf(pre, sizeof pre, "%s%s.", c->stack, c->digits);
    else
        pre[0] = 0;
    for (int i = 0; i < H3_T_COUNT; i++) {
        const char *part[3] = {our_name(i), NULL, NULL};
        int np = 1;
        if (c->diffusers)
            for (np = 0; np < 3 && h3_diffusers_name(i, np); np++) part[np] = h3_diffusers_name(i, np);
        if (np == 3)
            snprintf(c->name[i], sizeof c->name[i], "%sattn.to_{q,k,v}.weight", pre);
        else
            snprintf(c->name[i], sizeof c->name[i], "%s%s", pre, part[0]);
        int missing = 0;
        for (int p = 0; p < np; p++) {
            char full[H3_CKPT_NAME];
            snprintf(full, sizeof full, "%s%s", pre, part[p]);
            int k = find_name(c, full);
            if (k < 0) {
                if (!missing) snprintf(c->name[i], sizeof c->name[i], "%s", full);
                missing = 1;
                /* a name outside the block with the same ending, for the message */
                for (int j = 0; j < c->n_names && !c->similar[i][0]; j++) {
                    const char *rest;
                    const char *nm = c->names[j];
                    size_t l = strlen(nm), lp = strlen(part[p]);
                    if (!in_block(c, j, &rest) && l >= lp && !strcmp(nm + l - lp, part[p]) &&
                        (l == lp || nm[l - lp - 1] == '.'))
                        snprintf(c->similar[i], sizeof c->similar[i], "%s", nm);
                }
                continue;
            }
            if (tensor_of(c, k, &c->src_file[i][p], &c->src[i][p], err, errlen)) return -1;
        }
        if (missing) {
            for (int p = 0; p < np; p++) c->src[i][p] = NULL;
            continue;
        }
        c->view[i] = *c->src[i][0];
        c->view[i].name = c->name[i];
        if (np == 3) {
            /* to_k and to_v as to_q; the view is the three stacked */
            const st_tensor *q = c->src[i][0];
            for (int p = 1; p < 3; p++) {
                const st_tensor *x = c->src[i][p];
                if (x->dtype != q->dtype || x->rank != q->rank || memcmp(x->shape, q->shape, sizeof q->shape)) {
                    return h3_seterr(err, errlen, "%s: tensor '%s': %s %s, but '%s' is %s %s", c->src_file[i][p]->path,
                                     x->name, st_dtype_name(x->dtype), st_shape_text(x->rank, x->shape).s, q->name,
                                     st_dtype_name(q->dtype), st_shape_text(q->rank, q->shape).s);
                }
            }
            if (q->rank >= 1 && q->shape[0] <= INT32_MAX) c->view[i].shape[0] = 3 * q->shape[0];
        }
    }
    return 0;
}

int h3_ckpt_open(const char *path, int block, h3_ckpt *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (err && errlen) err[0] = 0;
    char *r = NULL;
    int is_index = 0;
    if (!(c->path = strdup(path))) return h3_seterr(err, errlen, "%s: out of memory", path);
    if (resolve(path, &r, &is_index, err, errlen)) goto fail;
    if (is_index) {
        c->index = r;
        if (read_index(c, err, errlen)) goto fail;
    } else {
        c->file = r;
        if (add_shard(c, r, err, errlen)) goto fail;
    }
    c->shards = calloc((size_t)c->n_shards + 1, sizeof *c->shards);
    c->opened = calloc((size_t)c->n_shards + 1, 1);
    if (!c->shards || !c->opened) {
        h3_seterr(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    if (!is_index) {
        if (st_open_header(r, &c->shards[0], err, errlen)) goto fail;
        c->opened[0] = 1;
        const st_file *f = &c->shards[0];
        c->names = calloc((size_t)f->n_tensors + 1, sizeof *c->names);
        c->shard_of = calloc((size_t)f->n_tensors + 1, sizeof *c->shard_of);
        if (!c->names || !c->shard_of) {
            h3_seterr(err, errlen, "%s: out of memory", path);
            goto fail;
        }
        for (; c->n_names < f->n_tensors; c->n_names++)
            if (!(c->names[c->n_names] = strdup(f->tensors[c->n_names].name))) {
                h3_seterr(err, errlen, "%s: out of memory", path);
                goto fail;
            }
    }
    if (find_stack(c, err, errlen) || pick_block(c, block, err, errlen) || map_block(c, err, errlen)) goto fail;
    return 0;
fail:
    h3_ckpt_close(c);
    return -1;
}

void h3_ckpt_close(h3_ckpt *c)
{
    if (!c) return;
    for (int k = 0; k < c->n_names; k++) free(c->names[k]);
    for (int s = 0; s < c->n_shards; s++) {
        if (c->opened && c->opened[s]) st_close(&c->shards[s]);
        free(c->shard_path[s]);
    }
    free(c->names);
    free(c->shard_of);
    free(c->shard_path);
    free(c->shards);
    free(c->opened);
    free(c->extra);
    free(c->path);
    free(c->index);
    free(c->file);
    memset(c, 0, sizeof *c);
}

/* ------------------------------------------------------------ order and bytes */

int h3_ckpt_qkv(const h3_ckpt *c, h3_qkv_order given, h3_qkv_order *order, char *why, size_t whylen, char *err,
                size_t errlen)
{
    const char *g = h3_qkv_order_name(given);
    if (c->diffusers) {
        if (given != H3_QKV_UNSTATED)
            return h3_seterr(err, errlen,
                             "%s: --qkv-layout %s: the diffusers names state the QKV rows (separate to_q, to_k, to_v); "
                             "drop the flag",
                             c->path, g);
        *order = H3_QKV_SPLIT;
        snprintf(why, whylen, "separate to_q, to_k, to_v (diffusers names), grouped at load");
        return 0;
    }
    const st_file *f = c->src_file[H3_T_QKV][0];
    const char *lay = f ? st_meta(f, "qkv_layout") : NULL;
    if (lay) {
        h3_qkv_order m = !strcmp(lay, "grouped") ? H3_QKV_GROUPED : !strcmp(lay, "stacked") ? H3_QKV_STACKED
                                                                                              : H3_QKV_UNSTATED;
        if (m == H3_QKV_UNSTATED)
            return h3_seterr(err, errlen,
                             "%s: __metadata__ qkv_layout '%s' is unknown (expected 'grouped' or 'stacked')", f->path,
                             lay);
        if (given != H3_QKV_UNSTATED && given != m)
            return h3_seterr(err, errlen, "%s: --qkv-layout %s contradicts its __metadata__ qkv_layout '%s'", f->path,
                             g, lay);
        *order = m;
        snprintf(why, whylen, "%s (__metadata__ qkv_layout)%s", lay, m == H3_QKV_STACKED ? ", grouped at load" : "");
        return 0;
    }
    if (given != H3_QKV_UNSTATED) {
        *order = given;
        snprintf(why, whylen, "%s (--qkv-layout)%s", g, given == H3_QKV_STACKED ? ", grouped at load" : "");
        return 0;
    }
    if (c->index) {
        *order = H3_QKV_GROUPED;
        snprintf(why, whylen, "grouped (an index file with our names: the MiniMaxAI shards, grouped per head)");
        return 0;
    }
    return h3_seterr(err, errlen,
                     "%s: the row order of '%s' is not stated (no __metadata__ qkv_layout, no index file): pass "
                     "--qkv-layout grouped (MiniMaxAI shards, extract_block files) or stacked (single-file checkpoints "
                     "such as Comfy-Org's)",
                     c->path, c->name[H3_T_QKV]);
}

int h3_ckpt_read(const h3_ckpt *c, const h3_config *cfg, h3_qkv_order order, uint16_t *const dst[H3_T_COUNT],
                 char *err, size_t errlen)
{
    const size_t C = (size_t)cfg->hidden, D = (size_t)cfg->head_dim, H = (size_t)cfg->heads, I = H * D,
                 F = (size_t)cfg->ffn, row = C * sizeof(uint16_t);
    for (int i = 0; i < H3_T_COUNT; i++) {
        const st_file *f = c->src_file[i][0];
        const st_tensor *t = c->src[i][0];
        if (i == H3_T_QKV && order != H3_QKV_GROUPED) {
            /* grouped row h*3D + j*D + d is q, k or v (j = 0, 1, 2) of head h,
             * dim d: stacked row j*I + h*D + d, or row h*D + d of to_q/k/v */
            for (size_t j = 0; j < 3; j++)
                for (size_t h = 0; h < H; h++) {
                    const int p = order == H3_QKV_SPLIT ? (int)j : 0;
                    const size_t from = order == H3_QKV_SPLIT ? h * D : j * I + h * D;
                    if (st_read(c->src_file[i][p], c->src[i][p], from * row, D * row, dst[i] + (h * 3 * D + j * D) * C,
                                err, errlen))
                        return -1;
                }
        } else if (i == H3_T_FC1 && c->diffusers) {
            /* diffusers' [up; gate] to our [gate; up] */
            if (st_read(f, t, F * row, F * row, dst[i], err, errlen) ||
                st_read(f, t, 0, F * row, dst[i] + F * C, err, errlen))
                return -1;
        } else if (st_read(f, t, 0, (size_t)(t->end - t->begin), dst[i], err, errlen)) {
            return -1;
        }
    }
    return 0;
}

void h3_ckpt_describe(const h3_ckpt *c, char *buf, size_t len)
{
    int used = 0;
    for (int s = 0; s < c->n_shards; s++) used += c->opened[s];
    size_t o = 0;
    if (c->index)
        o = (size_t)snprintf(buf, len, "%s (index %s, %d of %d shard%s read)",
                             c->diffusers ? "diffusers" : "original shards", c->index, used, c->n_shards,
                             c->n_shards == 1 ? "" : "s");
    else
        o = (size_t)snprintf(buf, len, "%s", c->diffusers ? "diffusers (one file)" : "single file");
    const size_t sl = strlen(c->stack), wl = ends_with(c->stack, "transformer_blocks.") ? 19 : 7;
    if (o < len && sl > wl) snprintf(buf + o, len - o, ", prefix '%.*s'", (int)(sl - wl), c->stack);
}
