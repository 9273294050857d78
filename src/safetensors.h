/* safetensors.h — strict reader and streaming writer for .safetensors files.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON (an object of
 * tensor name -> {dtype, shape, data_offsets} plus an optional __metadata__
 * object of string -> string), then the data region. The reader validates
 * everything before handing out a pointer (see st_open) and reads the file
 * into private read-only memory, so a file cut short later cannot SIGBUS. Library-style: functions return 0 or -1 and fill err with one
 * line naming the file and, where there is one, the tensor. Knows nothing of
 * CUDA or of the H3 block. */
#ifndef H3_SAFETENSORS_H
#define H3_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ST_BOOL = 0, ST_U8, ST_I8, ST_I32, ST_I64, ST_F16, ST_BF16, ST_F32, ST_F64, ST_F8_E4M3, ST_F8_E5M2,
    ST_DTYPE_COUNT
} st_dtype;

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
    size_t map_size;
    uint64_t header_len;
    const uint8_t *data;   /* start of the data region */
    uint64_t data_size;
    int n_tensors;
    st_tensor *tensors;    /* in order of data_offsets */
    int n_meta;
    char **meta_keys, **meta_vals;
} st_file;

const char *st_dtype_name(st_dtype t);     /* "BF16", ... */
size_t st_dtype_size(st_dtype t);          /* bytes per element */
int st_dtype_parse(const char *s, st_dtype *out); /* 0 or -1 */
int64_t st_numel(const st_tensor *t);

/* Opens and validates path. Rejects (one error line naming file and tensor):
 * short file, header length > 100 MB or past EOF, header not starting with
 * '{', invalid or non-strict JSON, duplicate keys, unknown dtype, rank > 8,
 * negative/non-integer shape or offsets, begin > end, end past the data,
 * byte size != elements x dtype size (overflow-checked), overlaps, gaps, and
 * trailing bytes not covered by any tensor. */
int st_open(const char *path, st_file *f, char *err, size_t errlen);
/* The same checks, reading only the header: every tensor's data is NULL and
 * its bytes come from st_read (a checkpoint shard or a single-file model is
 * tens of GB, of which one block is wanted). */
int st_open_header(const char *path, st_file *f, char *err, size_t errlen);
/* Reads n bytes from byte off of tensor t's data into dst, from f's file
 * (which must still have the size its header was read at). */
int st_read(const st_file *f, const st_tensor *t, uint64_t off, size_t n, void *dst, char *err, size_t errlen);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
const char *st_meta(const st_file *f, const char *key); /* NULL if absent */

/* Streaming writer: declare all tensors first, then write their bytes in
 * declaration order (the header is written by st_writer_open, so a 1.3 GB
 * file never needs to be in memory). st_writer_close checks that exactly the
 * declared bytes were written; on any error the partial file is removed. */
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
