/* safetensors.h — strict reader and streaming writer for .safetensors files.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON (an object of
 * tensor name -> {dtype, shape, data_offsets} plus an optional __metadata__
 * object of string -> string), then the data region. The reader validates
 * the header length and the header before it touches a data byte, then reads
 * the file into private read-only memory, so a file cut short later cannot
 * SIGBUS. Library-style: functions return 0 or an error code (ST_ERR_FILE,
 * ST_ERR_RESOURCE) and fill err with one line naming the file and, where
 * there is one, the tensor. Knows nothing of CUDA or of the H3 block. */
#ifndef H3_SAFETENSORS_H
#define H3_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every dtype the format defines (the official reader's list); F4 and F6_*
 * pack elements into bits, so a tensor of them must fill whole bytes. */
typedef enum {
    ST_BOOL = 0, ST_U8, ST_I8, ST_I32, ST_I64, ST_F16, ST_BF16, ST_F32, ST_F64, ST_F8_E4M3, ST_F8_E5M2,
    ST_F4, ST_F6_E2M3, ST_F6_E3M2, ST_F8_E8M0, ST_F8_E4M3FNUZ, ST_F8_E5M2FNUZ, ST_I16, ST_U16, ST_U32, ST_U64,
    ST_C64,
    ST_DTYPE_COUNT
} st_dtype;

/* Error codes: ST_ERR_FILE, the path or the file's contents are refused (a
 * user error); ST_ERR_RESOURCE, the machine ran short (memory) while the
 * file may be fine. */
#define ST_ERR_FILE (-1)
#define ST_ERR_RESOURCE (-2)

#define ST_MAX_RANK 8
#define ST_MAX_HEADER (100u * 1000u * 1000u) /* 100 MB */

typedef struct {
    char *name;
    st_dtype dtype;
    int rank;
    int64_t shape[ST_MAX_RANK];
    uint64_t begin, end;   /* data_offsets, relative to the data region */
    const void *data;      /* points into the mapping; NULL after st_open_header */
} st_tensor;

typedef struct {
    char *path;
    void *map;             /* a private read-only copy of the whole file (read, not mapped: see st_open) */
    size_t map_size;       /* the file's size */
    void *mem;             /* the allocation holding map (map sits in it so that data is 64-byte aligned) */
    size_t mem_size;
    uint64_t header_len;
    const uint8_t *data;   /* start of the data region, 64-byte aligned whatever the header length */
    uint64_t data_size;
    int n_tensors;
    st_tensor *tensors;    /* in order of data_offsets */
    int n_meta;
    char **meta_keys, **meta_vals;
} st_file;

const char *st_dtype_name(st_dtype t);     /* "BF16", ... */
size_t st_dtype_bits(st_dtype t);          /* bits per element */
size_t st_dtype_size(st_dtype t);          /* bytes per element; 0 for F4 and F6_* (less than a byte) */
int st_dtype_parse(const char *s, st_dtype *out); /* 0 or -1 */
int64_t st_numel(const st_tensor *t);

/* Writes s[0..len) into out (outlen > 0, always terminated) with control
 * characters (C0, DEL, C1) and bytes that are not UTF-8 as \xNN, and, when
 * quoted, also ' and \ (the text goes between quotes); what does not fit
 * is cut and ends in "...". For printing a name or path that came from a
 * file or a flag: the result is one line and moves no terminal cursor.
 * Returns out. */
char *st_escape(char *out, size_t outlen, const char *s, size_t len, int quoted);
/* st_escape(s, quoted) into a bounded buffer, for a '%s' in a message:
 * printf("'%s'", st_quote(name).s). */
typedef struct {
    char s[168];
} st_quoted;
st_quoted st_quote(const char *s);
/* A shape as "[a, b, ...]" for a message: printf("%s", st_shape_text(t->rank,
 * t->shape).s); long enough for ST_MAX_RANK 64-bit dimensions. */
typedef struct {
    char s[184];
} st_shape_str;
st_shape_str st_shape_text(int rank, const int64_t *shape);

/* Opens and validates path. Rejects with ST_ERR_FILE (one error line naming
 * file and tensor): a path that is not a regular file (a FIFO or device is
 * refused without blocking), short file, header length > 100 MB or past EOF
 * (both: "not a safetensors file"),
 * header not starting with '{', invalid or non-strict JSON (UTF-8 checked as
 * the official reader does: no overlongs, surrogates or lone \uD800
 * escapes), duplicate keys, unknown dtype, rank > 8, negative, -0 or
 * non-integer shape or offsets, begin > end, end past the data, byte size !=
 * elements x dtype size (overflow-checked), overlaps, gaps, and trailing
 * bytes not covered by any tensor. The 8-byte length and the header are read
 * and checked first: a bad header costs its own bytes, never the file's.
 * ST_ERR_RESOURCE: out of memory (for the header or the file's copy). */
int st_open(const char *path, st_file *f, char *err, size_t errlen);
/* The same checks, reading only the header: every tensor's data is NULL and
 * its bytes come from st_read (a checkpoint shard or a single-file model is
 * tens of GB, of which one block is wanted). */
int st_open_header(const char *path, st_file *f, char *err, size_t errlen);
/* FNV-1a 64 of p[0..n) continued from h (start from ST_FNV1A64_BASIS): the
 * offset basis and prime of the FNV specification. Tells contents apart;
 * nothing adversarial. */
#define ST_FNV1A64_BASIS 0xcbf29ce484222325ull
uint64_t st_fnv1a64(uint64_t h, const void *p, size_t n);
/* The size of path and a hash of its header, to name the file in a report:
 * FNV-1a 64 over a .safetensors file's first 8 + N bytes (the header length
 * and the JSON header: names, dtypes, shapes, offsets, __metadata__), or over
 * all of an index (a path ending in .json). Reads no tensor data. 0, or
 * ST_ERR_FILE with err. */
int st_fingerprint(const char *path, uint64_t *size, uint64_t *hash, char *err, size_t errlen);
/* Reads n bytes from byte off of tensor t's data into dst, from f's file
 * (which must still have the size its header was read at). */
int st_read(const st_file *f, const st_tensor *t, uint64_t off, size_t n, void *dst, char *err, size_t errlen);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
const char *st_meta(const st_file *f, const char *key); /* NULL if absent */

/* Streaming writer: declare all tensors first, then write their bytes in
 * declaration order (the header is written by st_writer_open, so a 1.3 GB
 * file never needs to be in memory). st_writer_close checks that exactly the
 * declared bytes were written; on any error the partial file is removed.
 * The file is written beside path and renamed over it, so path must be a
 * regular file or absent (a device or FIFO there is refused, not replaced). */
typedef struct {
    const char *name;
    st_dtype dtype;
    int rank;
    int64_t shape[ST_MAX_RANK];
} st_decl;

typedef struct st_writer st_writer;
st_writer *st_writer_open(const char *path, const st_decl *decls, int n, const char *const *meta_kv, int n_meta,
                          char *err, size_t errlen); /* meta_kv: key0, val0, key1, val1, ... */
int st_writer_write(st_writer *w, const void *bytes, size_t n, char *err, size_t errlen);
int st_writer_close(st_writer *w, char *err, size_t errlen); /* frees w */
void st_writer_abort(st_writer *w);                           /* removes the file, frees w */

/* One-shot convenience: writes tensors whose data is in memory. */
typedef struct {
    st_decl decl;
    const void *data;
} st_write_tensor;
int st_write(const char *path, const st_write_tensor *t, int n, const char *const *meta_kv, int n_meta, char *err,
             size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
