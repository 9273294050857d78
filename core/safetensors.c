/* safetensors.c — strict .safetensors reader (mmap) and streaming writer.
 *
 * Reading happens in three passes over the header, each catching what the
 * next cannot:
 *   1. our own RFC 8259 scanner. json-c's "strict" mode still accepts single
 *      quotes, NaN, raw control characters and "1.", and it merges duplicate
 *      keys silently; the scanner rejects all of that, and records the key
 *      count of the top-level object and of each object directly inside it
 *      so that duplicates show up as a count mismatch against json-c's tree;
 *   2. json-c builds the tree (and validates UTF-8);
 *   3. the tensor entries are checked one by one (fields, dtype, shape,
 *      offsets, byte size), then sorted by offset and checked for overlaps,
 *      gaps and trailing bytes, which is what the official implementation
 *      requires too: the tensors must tile the data region exactly.
 * Every error is one line "<path>: [tensor '<name>': ]<what>"; names are
 * escaped so that a hostile header cannot break the line. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errmsg.h"

/* ------------------------------------------------------------------ dtypes */

static const struct {
    const char *name;
    size_t bits;
} dtype_info[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 8},        [ST_U8] = {"U8", 8},           [ST_I8] = {"I8", 8},
    [ST_I32] = {"I32", 32},         [ST_I64] = {"I64", 64},        [ST_F16] = {"F16", 16},
    [ST_BF16] = {"BF16", 16},       [ST_F32] = {"F32", 32},        [ST_F64] = {"F64", 64},
    [ST_F8_E4M3] = {"F8_E4M3", 8},  [ST_F8_E5M2] = {"F8_E5M2", 8}, [ST_F4] = {"F4", 4},
    [ST_F6_E2M3] = {"F6_E2M3", 6},  [ST_F6_E3M2] = {"F6_E3M2", 6}, [ST_F8_E8M0] = {"F8_E8M0", 8},
    [ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8}, [ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [ST_I16] = {"I16", 16},         [ST_U16] = {"U16", 16},        [ST_U32] = {"U32", 32},
    [ST_U64] = {"U64", 64},         [ST_C64] = {"C64", 64},
};

const char *st_dtype_name(st_dtype t) { return (unsigned)t < ST_DTYPE_COUNT ? dtype_info[t].name : "?"; }
size_t st_dtype_bits(st_dtype t) { return (unsigned)t < ST_DTYPE_COUNT ? dtype_info[t].bits : 0; }
size_t st_dtype_size(st_dtype t) { return st_dtype_bits(t) % 8 ? 0 : st_dtype_bits(t) / 8; }

int st_dtype_parse(const char *s, st_dtype *out)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (strcmp(s, dtype_info[i].name) == 0) {
            *out = (st_dtype)i;
            return 0;
        }
    return -1;
}

/* Product of the shape, or -1 on int64 overflow. Multiplied in order, as the
 * official reader's checked_mul does, so [huge, huge, 0] is rejected too. */
static int64_t numel_checked(const int64_t *shape, int rank)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] != 0 && n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

/* Bytes of a tensor of this shape and dtype into *bytes; NULL, or why not:
 * the element count or the bit count overflows, or (F4, F6_*) the bits do
 * not fill whole bytes, which the official reader refuses too. */
static const char *tensor_bytes(const int64_t *shape, int rank, st_dtype dtype, uint64_t *bytes)
{
    const int64_t n = numel_checked(shape, rank);
    const uint64_t bits = st_dtype_bits(dtype);
    if (n < 0 || !bits || (uint64_t)n > UINT64_MAX / bits) return "element count or byte size overflows 64 bits";
    if ((uint64_t)n * bits % 8) return "its bits do not fill whole bytes";
    *bytes = (uint64_t)n * bits / 8;
    return NULL;
}

int64_t st_numel(const st_tensor *t) { return numel_checked(t->shape, t->rank); }

/* ------------------------------------------------------------------ errors */

/* Length of the valid UTF-8 sequence at s (avail >= 1 bytes; 1 for ASCII),
 * or 0: strict as the official reader (serde_json) is, so no overlong forms,
 * no surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no sequence cut
 * short. *cp receives the code point. */
static size_t utf8_seq(const unsigned char *s, size_t avail, uint32_t *cp)
{
    const unsigned c = s[0];
    size_t len;
    uint32_t min, v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        len = 2, min = 0x80, v = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, min = 0x800, v = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, min = 0x10000, v = c & 0x07;
    } else {
        return 0;
    }
    if (avail < len) return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[k] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

char *st_escape(char *out, size_t outlen, const char *str, size_t len, int quoted)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        const size_t n = utf8_seq(s + i, len - i, &cp);
        /* control characters (C0, DEL, C1), bytes that are not UTF-8 and,
         * inside quotes, the quote and the escape character: as \xNN */
        const int esc = n == 0 || cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (quoted && (cp == '\'' || cp == '\\'));
        const size_t take = n ? n : 1, need = esc ? 4 * take : take;
        if (o + need + 4 > outlen) { /* room is kept for "..." and the terminator */
            if (o + 4 <= outlen) {
                memcpy(out + o, "...", 3);
                o += 3;
            }
            break;
        }
        for (size_t k = 0; k < take; k++) {
            if (esc)
                o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", s[i + k]);
            else
                out[o++] = (char)s[i + k];
        }
        i += take;
    }
    if (outlen) out[o < outlen ? o : outlen - 1] = 0;
    return out;
}

st_quoted st_quote(const char *s)
{
    st_quoted q;
    st_escape(q.s, sizeof q.s, s, strlen(s), 1);
    return q;
}

st_shape_str st_shape_text(int rank, const int64_t *shape)
{
    st_shape_str t;
    const size_t n = sizeof t.s;
    size_t o = (size_t)snprintf(t.s, n, "[");
    for (int k = 0; k < rank && o < n; k++)
        o += (size_t)snprintf(t.s + o, n - o, k ? ", %lld" : "%lld", (long long)shape[k]);
    if (o < n) snprintf(t.s + o, n - o, "]");
    return t;
}

/* ------------------------------------------------------- strict JSON scan */

#define SCAN_MAX_DEPTH 16 /* a safetensors header needs 3 */

typedef struct {
    const char *s;
    size_t n, i;
    const char *msg; /* first error, NULL if none */
    size_t at;
    /* per top-level member, in text order: offset of its key, and the key
     * count of its value if that is an object (-1 otherwise) */
    size_t *key_off;
    int *sub_count;
    int n_top, cap_top;
    bool oom; /* msg is "out of memory": a resource error, not the file's */
} jscan;

static bool scan_fail(jscan *js, const char *msg)
{
    if (!js->msg) {
        js->msg = msg;
        js->at = js->i;
    }
    return false;
}
static void scan_ws(jscan *js)
{
    while (js->i < js->n && (js->s[js->i] == ' ' || js->s[js->i] == '\t' || js->s[js->i] == '\n' || js->s[js->i] == '\r'))
        js->i++;
}
static int scan_peek(const jscan *js) { return js->i < js->n ? (unsigned char)js->s[js->i] : -1; }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_hex(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* The 4 hex digits of a \u escape at js->i (advanced past them) into *v. */
static bool scan_hex4(jscan *js, unsigned *v)
{
    *v = 0;
    for (int k = 0; k < 4; k++, js->i++) {
        const int c = scan_peek(js);
        if (!is_hex(c)) return scan_fail(js, "bad \\u escape");
        *v = *v << 4 | (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return true;
}

/* A string: raw bytes must be strict UTF-8 (utf8_seq) and a \u escape of a
 * surrogate must be a high one followed by a low one, as serde_json (the
 * official reader) requires; json-c lets overlong forms, encoded surrogates
 * and lone \ud800 escapes through. */
static bool scan_string(jscan *js)
{
    if (scan_peek(js) != '"') return scan_fail(js, "expected a string");
    js->i++;
    for (;;) {
        int c = scan_peek(js);
        if (c < 0) return scan_fail(js, "unterminated string");
        if (c == '"') {
            js->i++;
            return true;
        }
        if (c < 0x20) return scan_fail(js, "control character in string");
        if (c >= 0x80) {
            uint32_t cp;
            const size_t n = utf8_seq((const unsigned char *)js->s + js->i, js->n - js->i, &cp);
            if (!n) return scan_fail(js, "invalid utf-8 in a string (overlong, surrogate, above U+10FFFF or cut short)");
            js->i += n;
            continue;
        }
        js->i++;
        if (c == '\\') {
            c = scan_peek(js);
            if (c == 'u') {
                js->i++;
                if (js->n - js->i >= 4 && memcmp(js->s + js->i, "0000", 4) == 0)
                    return scan_fail(js, "\\u0000 in a string (names and metadata are C strings)");
                unsigned v;
                if (!scan_hex4(js, &v)) return false;
                if (v >= 0xdc00 && v <= 0xdfff) return scan_fail(js, "lone low surrogate \\u escape in a string");
                if (v >= 0xd800 && v <= 0xdbff) { /* must pair with a low surrogate */
                    if (js->n - js->i < 2 || memcmp(js->s + js->i, "\\u", 2) != 0)
                        return scan_fail(js, "lone high surrogate \\u escape in a string");
                    js->i += 2;
                    if (!scan_hex4(js, &v)) return false;
                    if (v < 0xdc00 || v > 0xdfff) return scan_fail(js, "lone high surrogate \\u escape in a string");
                }
            } else if (c >= 0 && strchr("\"\\/bfnrt", c)) {
                js->i++;
            } else {
                return scan_fail(js, "bad escape in string");
            }
        }
    }
}

static bool scan_number(jscan *js)
{
    const size_t at = js->i;
    if (scan_peek(js) == '-') js->i++;
    if (scan_peek(js) == '0') {
        js->i++;
    } else if (is_digit(scan_peek(js))) {
        while (is_digit(scan_peek(js))) js->i++;
    } else {
        return scan_fail(js, "bad number");
    }
    /* json-c reads -0 as the integer 0; the official reader sees -0.0, not a
     * size (shapes and offsets are the only numbers of a header) */
    const int next = scan_peek(js);
    if (js->i - at == 2 && js->s[at] == '-' && js->s[at + 1] == '0' && next != '.' && next != 'e' && next != 'E') {
        js->i = at;
        return scan_fail(js, "-0 is not a size or offset (a negative zero)");
    }
    if (scan_peek(js) == '.') {
        js->i++;
        if (!is_digit(scan_peek(js))) return scan_fail(js, "bad number");
        while (is_digit(scan_peek(js))) js->i++;
    }
    if (scan_peek(js) == 'e' || scan_peek(js) == 'E') {
        js->i++;
        if (scan_peek(js) == '+' || scan_peek(js) == '-') js->i++;
        if (!is_digit(scan_peek(js))) return scan_fail(js, "bad number");
        while (is_digit(scan_peek(js))) js->i++;
    }
    return true;
}

static bool scan_literal(jscan *js, const char *lit)
{
    size_t l = strlen(lit);
    if (js->n - js->i < l || memcmp(js->s + js->i, lit, l) != 0) return scan_fail(js, "unexpected character");
    js->i += l;
    return true;
}

static bool scan_value(jscan *js, int depth, int *obj_count);

/* count: number of members (duplicates included); top: record members. */
static bool scan_object(jscan *js, int depth, int *count, bool top)
{
    js->i++; /* '{' */
    *count = 0;
    scan_ws(js);
    if (scan_peek(js) == '}') {
        js->i++;
        return true;
    }
    for (;;) {
        scan_ws(js);
        size_t key_at = js->i;
        if (!scan_string(js)) return false;
        scan_ws(js);
        if (scan_peek(js) != ':') return scan_fail(js, "expected ':'");
        js->i++;
        scan_ws(js);
        int sub = -1;
        if (!scan_value(js, depth + 1, &sub)) return false;
        if (top) {
            if (js->n_top == js->cap_top) {
                int cap = js->cap_top ? 2 * js->cap_top : 64;
                size_t *ko = realloc(js->key_off, (size_t)cap * sizeof *ko);
                if (ko) js->key_off = ko;
                int *sc = realloc(js->sub_count, (size_t)cap * sizeof *sc);
                if (sc) js->sub_count = sc;
                if (!ko || !sc) {
                    js->oom = true;
                    return scan_fail(js, "out of memory");
                }
                js->cap_top = cap;
            }
            js->key_off[js->n_top] = key_at;
            js->sub_count[js->n_top] = sub;
            js->n_top++;
        }
        (*count)++;
        scan_ws(js);
        int c = scan_peek(js);
        js->i++;
        if (c == '}') return true;
        if (c != ',') {
            js->i--;
            return scan_fail(js, "expected ',' or '}'");
        }
    }
}

static bool scan_value(jscan *js, int depth, int *obj_count)
{
    if (depth > SCAN_MAX_DEPTH) return scan_fail(js, "nesting too deep");
    int c = scan_peek(js);
    if (c == '{') return scan_object(js, depth, obj_count, false);
    if (c == '[') {
        js->i++;
        scan_ws(js);
        if (scan_peek(js) == ']') {
            js->i++;
            return true;
        }
        for (;;) {
            scan_ws(js);
            int dummy;
            if (!scan_value(js, depth + 1, &dummy)) return false;
            scan_ws(js);
            c = scan_peek(js);
            if (c == ']') {
                js->i++;
                return true;
            }
            if (c != ',') return scan_fail(js, "expected ',' or ']'");
            js->i++;
        }
    }
    if (c == '"') return scan_string(js);
    if (c == '-' || is_digit(c)) return scan_number(js);
    if (c == 't') return scan_literal(js, "true");
    if (c == 'f') return scan_literal(js, "false");
    if (c == 'n') return scan_literal(js, "null");
    if (c < 0) return scan_fail(js, "unexpected end of header");
    return scan_fail(js, "unexpected character");
}

/* Whole header: one object, then only whitespace (the official writer pads
 * with spaces to a multiple of 8 bytes). */
static bool scan_header(jscan *js, int *top_count)
{
    if (scan_peek(js) != '{') return scan_fail(js, "header does not start with '{'");
    if (!scan_object(js, 1, top_count, true)) return false;
    scan_ws(js);
    if (js->i != js->n) return scan_fail(js, "trailing characters after the JSON object");
    return true;
}

/* Decode the JSON string token at s[off..] with json-c (malloc'd, or NULL). */
static char *decode_key(const char *s, size_t n, size_t off)
{
    jscan js = {.s = s, .n = n, .i = off};
    if (!scan_string(&js)) return NULL;
    json_tokener *tok = json_tokener_new();
    if (!tok) return NULL;
    json_object *o = json_tokener_parse_ex(tok, s + off, (int)(js.i - off));
    char *r = NULL;
    if (o && json_object_get_type(o) == json_type_string) r = strdup(json_object_get_string(o));
    json_object_put(o);
    json_tokener_free(tok);
    return r;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The top level has fewer keys in json-c's tree than in the text: find one
 * that occurs twice, for the error line. */
static char *find_duplicate_key(const jscan *js)
{
    char **keys = calloc((size_t)js->n_top, sizeof *keys);
    char *dup = NULL;
    if (!keys) return NULL;
    int k = 0;
    for (int i = 0; i < js->n_top; i++)
        if ((keys[k] = decode_key(js->s, js->n, js->key_off[i]))) k++;
    qsort(keys, (size_t)k, sizeof *keys, cmp_str);
    for (int i = 1; i < k && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) dup = strdup(keys[i]);
    for (int i = 0; i < k; i++) free(keys[i]);
    free(keys);
    return dup;
}

/* ----------------------------------------------------------------- reader */

static int cmp_offsets(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* A non-negative JSON integer. json-c clamps integers beyond int64 to
 * INT64_MIN/INT64_MAX silently, so INT64_MAX itself is taken as "out of
 * range" (no real shape or offset comes near it). */
static const char *get_uint(json_object *o, int64_t *v)
{
    if (!o || json_object_get_type(o) != json_type_int) return "is not an integer";
    *v = json_object_get_int64(o);
    if (*v < 0) return "is negative";
    if (*v == INT64_MAX) return "is out of range";
    return NULL;
}

/* Checks one tensor entry and fills t (except data). Returns an error text
 * (static or in buf), NULL if fine. n_fields_text: key count in the text. */
static const char *parse_entry(json_object *v, int n_fields_text, uint64_t data_size, st_tensor *t, char *buf,
                               size_t buflen)
{
    if (json_object_get_type(v) != json_type_object) return "entry is not an object";
    if (n_fields_text != json_object_object_length(v)) return "entry has a duplicate field";
    json_object *jd = NULL, *js = NULL, *jo = NULL;
    json_object_object_foreach(v, key, val)
    {
        if (strcmp(key, "dtype") == 0)
            jd = val;
        else if (strcmp(key, "shape") == 0)
            js = val;
        else if (strcmp(key, "data_offsets") == 0)
            jo = val;
        else {
            snprintf(buf, buflen, "unknown field '%s'", st_quote(key).s);
            return buf;
        }
    }
    if (!jd) return "missing field 'dtype'";
    if (!js) return "missing field 'shape'";
    if (!jo) return "missing field 'data_offsets'";

    if (json_object_get_type(jd) != json_type_string) return "dtype is not a string";
    if (st_dtype_parse(json_object_get_string(jd), &t->dtype) != 0) {
        snprintf(buf, buflen, "unknown dtype '%s'", st_quote(json_object_get_string(jd)).s);
        return buf;
    }

    if (json_object_get_type(js) != json_type_array) return "shape is not an array";
    size_t rank = json_object_array_length(js);
    if (rank > ST_MAX_RANK) {
        snprintf(buf, buflen, "rank %zu exceeds the maximum %d", rank, ST_MAX_RANK);
        return buf;
    }
    t->rank = (int)rank;
    for (size_t i = 0; i < rank; i++) {
        const char *e = get_uint(json_object_array_get_idx(js, i), &t->shape[i]);
        if (e) {
            snprintf(buf, buflen, "shape[%zu] %s", i, e);
            return buf;
        }
    }

    if (json_object_get_type(jo) != json_type_array || json_object_array_length(jo) != 2)
        return "data_offsets is not an array of two integers";
    int64_t be[2];
    for (size_t i = 0; i < 2; i++) {
        const char *e = get_uint(json_object_array_get_idx(jo, i), &be[i]);
        if (e) {
            snprintf(buf, buflen, "data_offsets[%zu] %s", i, e);
            return buf;
        }
    }
    t->begin = (uint64_t)be[0];
    t->end = (uint64_t)be[1];
    if (t->begin > t->end) {
        snprintf(buf, buflen, "data_offsets [%llu, %llu): begin > end", (unsigned long long)t->begin,
                 (unsigned long long)t->end);
        return buf;
    }
    if (t->end > data_size) {
        snprintf(buf, buflen, "data_offsets [%llu, %llu) end past the data region (%llu bytes)",
                 (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)data_size);
        return buf;
    }
    uint64_t bytes;
    const char *e = tensor_bytes(t->shape, t->rank, t->dtype, &bytes);
    if (e) return e;
    if (bytes != t->end - t->begin) {
        snprintf(buf, buflen, "byte size mismatch: data_offsets [%llu, %llu) hold %llu bytes, shape x %s needs %llu",
                 (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)(t->end - t->begin),
                 st_dtype_name(t->dtype), (unsigned long long)bytes);
        return buf;
    }
    return NULL;
}

static int parse_metadata(st_file *f, json_object *v, int n_text, char *err, size_t errlen)
{
    if (json_object_get_type(v) != json_type_object) {
        h3_seterr(err, errlen, "%s: __metadata__ is not an object", f->path);
        return -1;
    }
    if (n_text != json_object_object_length(v)) {
        h3_seterr(err, errlen, "%s: __metadata__ has a duplicate key", f->path);
        return -1;
    }
    int n = json_object_object_length(v);
    f->meta_keys = calloc((size_t)n + 1, sizeof(char *));
    f->meta_vals = calloc((size_t)n + 1, sizeof(char *));
    if (!f->meta_keys || !f->meta_vals) {
        h3_seterr(err, errlen, "%s: out of memory", f->path);
        return ST_ERR_RESOURCE;
    }
    json_object_object_foreach(v, key, val)
    {
        if (json_object_get_type(val) != json_type_string) {
            h3_seterr(err, errlen, "%s: __metadata__ '%s' is not a string", f->path, st_quote(key).s);
            return -1;
        }
        f->meta_keys[f->n_meta] = strdup(key);
        f->meta_vals[f->n_meta] = strdup(json_object_get_string(val));
        f->n_meta++;
        if (!f->meta_keys[f->n_meta - 1] || !f->meta_vals[f->n_meta - 1]) {
            h3_seterr(err, errlen, "%s: out of memory", f->path);
            return ST_ERR_RESOURCE;
        }
    }
    return 0;
}

/* Validates the parsed header and fills f->tensors / meta (the tensors'
 * data pointers are set once the data is read). 0, ST_ERR_FILE or
 * ST_ERR_RESOURCE. */
static int parse_tensors(st_file *f, json_object *root, const jscan *js, char *err, size_t errlen)
{
    const char *p = f->path;
    int n_all = json_object_object_length(root);
    f->tensors = calloc((size_t)n_all + 1, sizeof *f->tensors);
    if (!f->tensors) {
        h3_seterr(err, errlen, "%s: out of memory", p);
        return ST_ERR_RESOURCE;
    }
    char buf[320];
    int idx = 0; /* no top-level duplicates, so json-c's order is the text's */
    json_object_object_foreach(root, key, val)
    {
        int n_text = js->sub_count[idx++];
        if (strcmp(key, "__metadata__") == 0) {
            const int rc = parse_metadata(f, val, n_text, err, errlen);
            if (rc) return rc;
            continue;
        }
        st_tensor *t = &f->tensors[f->n_tensors];
        if (!(t->name = strdup(key))) {
            h3_seterr(err, errlen, "%s: out of memory", p);
            return ST_ERR_RESOURCE;
        }
        f->n_tensors++;
        const char *e = parse_entry(val, n_text, f->data_size, t, buf, sizeof buf);
        if (e) {
            h3_seterr(err, errlen, "%s: tensor '%s': %s", p, st_quote(key).s, e);
            return -1;
        }
    }

    /* The tensors must tile [0, data_size) exactly: sorted by offset, each
     * begins where the previous one ended (zero-size tensors included). */
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_offsets);
    uint64_t cursor = 0;
    const st_tensor *last = NULL; /* the tensor that set cursor */
    for (int i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        if (t->begin < cursor) {
            h3_seterr(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu) overlap '%s'", p, st_quote(t->name).s,
                      (unsigned long long)t->begin, (unsigned long long)t->end, st_quote(last->name).s);
            return -1;
        }
        if (t->begin > cursor) {
            h3_seterr(err, errlen,
                      "%s: tensor '%s': data_offsets [%llu, %llu) leave a gap: bytes [%llu, %llu) belong to no tensor",
                      p, st_quote(t->name).s, (unsigned long long)t->begin, (unsigned long long)t->end,
                      (unsigned long long)cursor, (unsigned long long)t->begin);
            return -1;
        }
        if (t->end > cursor || !last) last = t;
        cursor = t->end;
    }
    if (cursor != f->data_size) {
        h3_seterr(err, errlen, "%s: %llu trailing data bytes [%llu, %llu) belong to no tensor", p,
                  (unsigned long long)(f->data_size - cursor), (unsigned long long)cursor,
                  (unsigned long long)f->data_size);
        return -1;
    }
    return 0;
}

/* pread until n bytes or end of file; the count read, -1 on an error. */
static ssize_t pread_full(int fd, void *buf, size_t n, off_t at)
{
    size_t got = 0;
    while (got < n) {
        const ssize_t r = pread(fd, (char *)buf + got, n - got, at + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Alignment of the data region in the private copy: a header of any length
 * (the format allows odd ones) still gives every dtype aligned data. */
#define DATA_ALIGN 64

/* path opened for reading if it is a regular file: the descriptor and its
 * stat, or -1 with err. O_NONBLOCK: opening a FIFO (or a device) must not
 * wait for a writer; fstat then refuses it. Reads of a regular file ignore
 * the flag. */
static int open_regular(const char *path, struct stat *sb, char *err, size_t errlen)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        h3_seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode)) {
        h3_seterr(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    return fd;
}

/* st_open, or with header_only st_open_header: then only the 8-byte length
 * and the header are read, and the tensors' data pointers stay NULL. */
static int open_file(const char *path, st_file *f, bool header_only, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    if (err && errlen) err[0] = 0;
    int rc = ST_ERR_FILE, fd = -1;
    json_object *root = NULL;
    json_tokener *tok = NULL;
    jscan js = {0};
    char *hdr = NULL; /* [n] the header as read first, before any data byte */

    if (!(f->path = strdup(path))) {
        h3_seterr(err, errlen, "%s: out of memory", path);
        return ST_ERR_RESOURCE;
    }
    struct stat sb;
    if ((fd = open_regular(path, &sb, err, errlen)) < 0) goto out;
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        h3_seterr(err, errlen, "%s: file too short (%llu bytes; the header length alone takes 8)", path,
                  (unsigned long long)size);
        goto out;
    }
    if (size > SIZE_MAX - DATA_ALIGN) {
        h3_seterr(err, errlen, "%s: file too large to map", path);
        goto out;
    }
    /* 1. The header length and the header, alone: a bad one is refused at
     * the cost of its own bytes, not of the file's (a sparse multi-GB file
     * with a zero length takes no memory and no time). */
    uint8_t len8[8];
    if (pread_full(fd, len8, 8, 0) != 8) {
        h3_seterr(err, errlen, "%s: file changed while reading (the header length)", path);
        goto out;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len8[i]; /* little-endian u64 */
    f->header_len = n;
    /* A length past both the limit and the file is no header length at all:
     * a text file's first 8 bytes read as one are ~10^18. Past only one of
     * them, it may be a real header (a huge one, or a file cut short). */
    if (n > ST_MAX_HEADER && n > size - 8) {
        h3_seterr(err, errlen, "%s: not a safetensors file (its first 8 bytes are not a plausible header length)",
                  path);
        goto out;
    }
    if (n > ST_MAX_HEADER) {
        h3_seterr(err, errlen, "%s: header length %llu exceeds the %u-byte limit", path, (unsigned long long)n,
                  ST_MAX_HEADER);
        goto out;
    }
    if (n > size - 8) {
        h3_seterr(err, errlen, "%s: header length %llu runs past the end of the file (%llu bytes)", path,
                  (unsigned long long)n, (unsigned long long)size);
        goto out;
    }
    if (n == 0) {
        h3_seterr(err, errlen, "%s: header is not a JSON object (first byte must be '{')", path);
        goto out;
    }
    if (!(hdr = malloc((size_t)n))) {
        h3_seterr(err, errlen, "%s: out of memory for the %llu-byte header", path, (unsigned long long)n);
        rc = ST_ERR_RESOURCE;
        goto out;
    }
    if (pread_full(fd, hdr, (size_t)n, 8) != (ssize_t)n) {
        h3_seterr(err, errlen, "%s: file changed while reading (the header)", path);
        goto out;
    }
    f->data_size = size - 8 - n;
    if (hdr[0] != '{') {
        h3_seterr(err, errlen, "%s: header is not a JSON object (first byte must be '{')", path);
        goto out;
    }

    js.s = hdr;
    js.n = (size_t)n;
    int top_count = 0;
    if (!scan_header(&js, &top_count)) {
        h3_seterr(err, errlen, "%s: invalid JSON header at byte %zu: %s", path, js.at, js.msg);
        if (js.oom) rc = ST_ERR_RESOURCE;
        goto out;
    }
    tok = json_tokener_new_ex(SCAN_MAX_DEPTH + 4);
    if (!tok) {
        h3_seterr(err, errlen, "%s: out of memory", path);
        rc = ST_ERR_RESOURCE;
        goto out;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    root = json_tokener_parse_ex(tok, hdr, (int)n);
    enum json_tokener_error je = json_tokener_get_error(tok);
    if (!root || je != json_tokener_success || json_object_get_type(root) != json_type_object) {
        h3_seterr(err, errlen, "%s: invalid JSON header at byte %zu: %s", path, json_tokener_get_parse_end(tok),
                  je == json_tokener_success ? "not an object" : json_tokener_error_desc(je));
        goto out;
    }
    if (top_count != json_object_object_length(root)) {
        char *dup = find_duplicate_key(&js);
        h3_seterr(err, errlen, "%s: tensor '%s': duplicate name in the header", path, dup ? st_quote(dup).s : "?");
        free(dup);
        goto out;
    }
    if ((rc = parse_tensors(f, root, &js, err, errlen)) != 0) goto out;
    if (header_only) goto out; /* rc = 0: the header alone, data pointers NULL */
    rc = ST_ERR_FILE;

    /* 2. The header is valid: now the whole file, into anonymous memory
     * rather than a mapping of the file, so a file truncated or rewritten
     * after st_open can neither fault (SIGBUS) nor change bytes that were
     * already validated. One sequential read of the 1.3 GB block costs well
     * under a second from the page cache. The copy starts at an offset that
     * puts the data region on a DATA_ALIGN boundary. */
    const size_t shift = (DATA_ALIGN - (size_t)(8 + n) % DATA_ALIGN) % DATA_ALIGN;
    void *m = mmap(NULL, (size_t)size + shift, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        h3_seterr(err, errlen, "%s: cannot allocate %llu bytes for the file: %s", path, (unsigned long long)size,
                  strerror(errno));
        rc = ST_ERR_RESOURCE;
        goto out;
    }
    f->mem = m;
    f->mem_size = (size_t)size + shift;
    f->map = (char *)m + shift;
    f->map_size = (size_t)size;
    const ssize_t got = pread_full(fd, f->map, (size_t)size, 0);
    if (got != (ssize_t)size || memcmp(f->map, len8, 8) != 0 || memcmp((char *)f->map + 8, hdr, (size_t)n) != 0) {
        h3_seterr(err, errlen, "%s: file changed while reading (%lld of %llu bytes read%s%s)", path, (long long)got,
                  (unsigned long long)size, got < 0 ? ": " : "", got < 0 ? strerror(errno) : "");
        goto out;
    }
    mprotect(m, f->mem_size, PROT_READ);
    f->data = (const uint8_t *)f->map + 8 + n;
    for (int i = 0; i < f->n_tensors; i++) f->tensors[i].data = f->data + f->tensors[i].begin;
    rc = 0;
out:
    json_object_put(root);
    if (tok) json_tokener_free(tok);
    free(js.key_off);
    free(js.sub_count);
    free(hdr);
    if (fd >= 0) close(fd);
    if (rc != 0) st_close(f);
    return rc;
}

int st_open(const char *path, st_file *f, char *err, size_t errlen)
{
    return open_file(path, f, false, err, errlen);
}

int st_open_header(const char *path, st_file *f, char *err, size_t errlen)
{
    return open_file(path, f, true, err, errlen);
}

uint64_t st_fnv1a64(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

int st_fingerprint(const char *path, uint64_t *size, uint64_t *hash, char *err, size_t errlen)
{
    int rc = ST_ERR_FILE;
    struct stat sb;
    const int fd = open_regular(path, &sb, err, errlen);
    if (fd < 0) return rc;
    *size = (uint64_t)sb.st_size;
    const size_t pl = strlen(path);
    uint64_t n = *size; /* an index (.json): all of it */
    if (pl < 5 || strcmp(path + pl - 5, ".json")) {
        uint8_t len8[8];
        if (pread_full(fd, len8, 8, 0) != 8) {
            h3_seterr(err, errlen, "%s: file too short for a header length", path);
            goto out;
        }
        n = 0;
        for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
        if (n > ST_MAX_HEADER || n > *size - 8) {
            h3_seterr(err, errlen, "%s: not a safetensors header", path);
            goto out;
        }
        n += 8;
    } else if (n > ST_MAX_HEADER) {
        h3_seterr(err, errlen, "%s: index larger than %u bytes", path, ST_MAX_HEADER);
        goto out;
    }
    uint8_t buf[1 << 16];
    uint64_t h = ST_FNV1A64_BASIS;
    for (uint64_t at = 0; at < n;) {
        const size_t k = n - at < sizeof buf ? (size_t)(n - at) : sizeof buf;
        if (pread_full(fd, buf, k, (off_t)at) != (ssize_t)k) {
            h3_seterr(err, errlen, "%s: file changed while reading", path);
            goto out;
        }
        h = st_fnv1a64(h, buf, k);
        at += k;
    }
    *hash = h;
    rc = 0;
out:
    close(fd);
    return rc;
}

int st_read(const st_file *f, const st_tensor *t, uint64_t off, size_t n, void *dst, char *err, size_t errlen)
{
    if (off > t->end - t->begin || n > t->end - t->begin - off) {
        h3_seterr(err, errlen, "%s: tensor '%s': reading bytes [%llu, %llu) of its %llu", f->path, st_quote(t->name).s,
                  (unsigned long long)off, (unsigned long long)(off + n), (unsigned long long)(t->end - t->begin));
        return -1;
    }
    int fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        h3_seterr(err, errlen, "%s: cannot open: %s", f->path, strerror(errno));
        return -1;
    }
    /* The header was validated against the file's size then; a file of
     * another size (or kind) now is another file, or one being rewritten. */
    struct stat sb;
    const uint64_t size = 8 + f->header_len + f->data_size;
    const int st = fstat(fd, &sb);
    int rc = -1;
    ssize_t got = 0;
    if (st != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != size) {
        h3_seterr(err, errlen, "%s: file changed since its header was read (%llu bytes, now %lld)", f->path,
                  (unsigned long long)size, st == 0 ? (long long)sb.st_size : -1LL);
    } else if ((got = pread_full(fd, dst, n, (off_t)(8 + f->header_len + t->begin + off))) != (ssize_t)n) {
        h3_seterr(err, errlen, "%s: tensor '%s': file changed while reading%s%s", f->path, st_quote(t->name).s,
                  got < 0 ? ": " : "", got < 0 ? strerror(errno) : "");
    } else {
        rc = 0;
    }
    close(fd);
    return rc;
}

void st_close(st_file *f)
{
    if (!f) return;
    if (f->mem) munmap(f->mem, f->mem_size);
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *st_meta(const st_file *f, const char *key)
{
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

/* ----------------------------------------------------------------- writer */

/* The writer writes to "<path>.tmp.<pid>" and renames it over path on a
 * successful close, so a failed write never leaves a partial file (nor
 * destroys an existing one). */
struct st_writer {
    FILE *fp;
    char *path, *tmp;
    uint64_t total, written;
    bool failed; /* the temp file is already gone */
};

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_fmt(sbuf *b, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) sb_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* Strict UTF-8 (utf8_seq), as the official reader requires of every string. */
static bool utf8_ok(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0, n = strlen(str); i < n;) {
        uint32_t cp;
        const size_t k = utf8_seq(s + i, n - i, &cp);
        if (!k) return false;
        i += k;
    }
    return true;
}

static void sb_json_string(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20) {
            sb_fmt(b, "\\u%04x", c);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static void writer_free(st_writer *w)
{
    if (w->fp) fclose(w->fp);
    free(w->path);
    free(w->tmp);
    free(w);
}

static void writer_fail(st_writer *w)
{
    if (w->failed) return;
    if (w->fp) fclose(w->fp);
    w->fp = NULL;
    remove(w->tmp);
    w->failed = true;
}

st_writer *st_writer_open(const char *path, const st_decl *decls, int n, const char *const *meta_kv, int n_meta,
                          char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if (n < 0 || n_meta < 0 || (n > 0 && !decls) || (n_meta > 0 && !meta_kv)) {
        h3_seterr(err, errlen, "%s: bad arguments to st_writer_open", path);
        return NULL;
    }
    struct stat sb; /* the rename would replace a device or FIFO with a file */
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        h3_seterr(err, errlen, "%s: exists and is not a regular file (not replaced)", path);
        return NULL;
    }
    sbuf b = {0};
    uint64_t total = 0;
    sb_str(&b, "{");
    if (n_meta > 0) {
        sb_str(&b, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            const char *k = meta_kv[2 * i], *v = meta_kv[2 * i + 1];
            if (!k || !v || !utf8_ok(k) || !utf8_ok(v)) {
                h3_seterr(err, errlen, "%s: __metadata__ entry %d is NULL or not UTF-8", path, i);
                goto fail;
            }
            for (int j = 0; j < i; j++)
                if (strcmp(meta_kv[2 * j], k) == 0) {
                    h3_seterr(err, errlen, "%s: __metadata__ key '%s' given twice", path, st_quote(k).s);
                    goto fail;
                }
            if (i) sb_str(&b, ",");
            sb_json_string(&b, k);
            sb_str(&b, ":");
            sb_json_string(&b, v);
        }
        sb_str(&b, "}");
    }
    for (int i = 0; i < n; i++) {
        const st_decl *d = &decls[i];
        if (!d->name || !utf8_ok(d->name) || strcmp(d->name, "__metadata__") == 0) {
            h3_seterr(err, errlen, "%s: tensor %d: name is NULL, not UTF-8 or reserved", path, i);
            goto fail;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(decls[j].name, d->name) == 0) {
                h3_seterr(err, errlen, "%s: tensor '%s': declared twice", path, st_quote(d->name).s);
                goto fail;
            }
        if ((unsigned)d->dtype >= ST_DTYPE_COUNT || d->rank < 0 || d->rank > ST_MAX_RANK) {
            h3_seterr(err, errlen, "%s: tensor '%s': bad dtype or rank", path, st_quote(d->name).s);
            goto fail;
        }
        uint64_t bytes;
        const char *why = tensor_bytes(d->shape, d->rank, d->dtype, &bytes);
        if (why || bytes > UINT64_MAX - total) {
            h3_seterr(err, errlen, "%s: tensor '%s': %s", path, st_quote(d->name).s,
                      why ? why : "the data region's size overflows 64 bits");
            goto fail;
        }
        sb_str(&b, (n_meta > 0 || i > 0) ? "," : "");
        sb_json_string(&b, d->name);
        sb_fmt(&b, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(d->dtype));
        for (int k = 0; k < d->rank; k++) sb_fmt(&b, k ? ",%lld" : "%lld", (long long)d->shape[k]);
        sb_fmt(&b, "],\"data_offsets\":[%llu,", (unsigned long long)total);
        total += bytes;
        sb_fmt(&b, "%llu]}", (unsigned long long)total);
    }
    sb_str(&b, "}");
    while (b.n % 8) sb_str(&b, " "); /* data region starts 8-aligned, like the official writer */
    if (b.oom) {
        h3_seterr(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    if (b.n > ST_MAX_HEADER) {
        h3_seterr(err, errlen, "%s: header of %zu bytes exceeds the %u-byte limit", path, b.n, ST_MAX_HEADER);
        goto fail;
    }

    st_writer *w = calloc(1, sizeof *w);
    size_t tl = strlen(path) + 32;
    if (!w || !(w->path = strdup(path)) || !(w->tmp = malloc(tl))) {
        if (w) writer_free(w);
        h3_seterr(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    static unsigned serial; /* distinct temp names for writers open at once */
    snprintf(w->tmp, tl, "%s.tmp.%ld.%u", path, (long)getpid(), serial++);
    w->total = total;
    int fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0 || !(w->fp = fdopen(fd, "wb"))) {
        h3_seterr(err, errlen, "%s: cannot create %s: %s", path, w->tmp, strerror(errno));
        if (fd >= 0) close(fd);
        remove(w->tmp);
        writer_free(w);
        goto fail;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)b.n >> (8 * i));
    if (fwrite(len8, 1, 8, w->fp) != 8 || fwrite(b.s, 1, b.n, w->fp) != b.n) {
        h3_seterr(err, errlen, "%s: write failed: %s", path, strerror(errno));
        writer_fail(w);
        writer_free(w);
        goto fail;
    }
    free(b.s);
    return w;
fail:
    free(b.s);
    return NULL;
}

/* After an error the file is already removed; the caller still frees w with
 * st_writer_close (which then returns -1) or st_writer_abort. */
int st_writer_write(st_writer *w, const void *bytes, size_t n, char *err, size_t errlen)
{
    if (w->failed) {
        h3_seterr(err, errlen, "%s: write after an earlier error", w->path);
        return -1;
    }
    if (n > w->total - w->written) {
        h3_seterr(err, errlen, "%s: writing %zu bytes at offset %llu goes past the %llu declared data bytes", w->path,
                  n, (unsigned long long)w->written, (unsigned long long)w->total);
        writer_fail(w);
        return -1;
    }
    if (n && fwrite(bytes, 1, n, w->fp) != n) {
        h3_seterr(err, errlen, "%s: write failed: %s", w->path, strerror(errno));
        writer_fail(w);
        return -1;
    }
    w->written += n;
    return 0;
}

int st_writer_close(st_writer *w, char *err, size_t errlen)
{
    int rc = -1;
    if (w->failed) {
        h3_seterr(err, errlen, "%s: not written (an earlier write failed)", w->path);
    } else if (w->written != w->total) {
        h3_seterr(err, errlen, "%s: only %llu of the %llu declared data bytes were written", w->path,
                  (unsigned long long)w->written, (unsigned long long)w->total);
        writer_fail(w);
    } else {
        FILE *fp = w->fp;
        w->fp = NULL;
        if (fclose(fp) != 0) { /* flushes; a full disk shows up here */
            h3_seterr(err, errlen, "%s: write failed: %s", w->path, strerror(errno));
            remove(w->tmp);
        } else if (rename(w->tmp, w->path) != 0) {
            h3_seterr(err, errlen, "%s: cannot rename %s into place: %s", w->path, w->tmp, strerror(errno));
            remove(w->tmp);
        } else {
            rc = 0;
        }
    }
    writer_free(w);
    return rc;
}

void st_writer_abort(st_writer *w)
{
    if (!w) return;
    writer_fail(w);
    writer_free(w);
}

int st_write(const char *path, const st_write_tensor *t, int n, const char *const *meta_kv, int n_meta, char *err,
             size_t errlen)
{
    if (n < 0 || (n > 0 && !t)) {
        h3_seterr(err, errlen, "%s: bad arguments to st_write", path);
        return -1;
    }
    st_decl *d = calloc((size_t)n + 1, sizeof *d);
    if (!d) {
        h3_seterr(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (int i = 0; i < n; i++) d[i] = t[i].decl;
    st_writer *w = st_writer_open(path, d, n, meta_kv, n_meta, err, errlen);
    free(d);
    if (!w) return -1;
    for (int i = 0; i < n; i++) {
        uint64_t nb = 0; /* open already checked the size */
        tensor_bytes(t[i].decl.shape, t[i].decl.rank, t[i].decl.dtype, &nb);
        const size_t bytes = (size_t)nb;
        if (bytes && !t[i].data) {
            h3_seterr(err, errlen, "%s: tensor '%s': data is NULL", path, st_quote(t[i].decl.name).s);
            st_writer_abort(w);
            return -1;
        }
        if (st_writer_write(w, t[i].data, bytes, err, errlen) != 0) {
            st_writer_abort(w);
            return -1;
        }
    }
    return st_writer_close(w, err, errlen);
}
