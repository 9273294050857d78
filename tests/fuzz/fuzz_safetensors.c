/* fuzz_safetensors.c — libFuzzer target for the safetensors reader (st_open).
 *
 * Run alone: tests/fuzz/build_and_run.sh [RUNS]   (builds with clang
 * -fsanitize=fuzzer,address,undefined and fuzzes from the tests/data seeds)
 *
 * st_open takes a path and maps the file, so each input is written to one
 * memfd (rewritten per iteration) and opened through /proc/self/fd/N: the
 * fuzzer exercises the real open/fstat/mmap path, not a test-only variant.
 * On success the target checks the invariants a caller relies on (every
 * tensor inside the mapping, byte size = elements x dtype size, tensors tile
 * the data region) and reads every data byte, so a header the reader wrongly
 * accepts shows up as an abort or a fault here, not only as a sanitizer
 * report inside the parser. On failure the error must be one non-empty line. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "safetensors.h"

static int g_fd = -1;
static char g_path[64];

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_safetensors: invariant broken: %s\n", what);
    abort();
}

static void check_open_file(const st_file *f, size_t size)
{
    if (f->map_size != size) fail("map_size != file size");
    if (8 + f->header_len + f->data_size != size) fail("8 + header_len + data_size != file size");
    if (f->data != (const uint8_t *)f->map + 8 + f->header_len) fail("data != map + 8 + header_len");
    if ((uintptr_t)f->data % 64) fail("data region not 64-byte aligned");
    uint64_t cursor = 0;
    unsigned sum = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        if (!t->name) fail("tensor without a name");
        if ((unsigned)t->dtype >= ST_DTYPE_COUNT) fail("dtype out of range");
        if (t->rank < 0 || t->rank > ST_MAX_RANK) fail("rank out of range");
        for (int d = 0; d < t->rank; d++)
            if (t->shape[d] < 0) fail("negative shape");
        if (t->begin != cursor || t->end < t->begin) fail("tensors do not tile the data region in order");
        int64_t n = st_numel(t);
        if (n < 0) fail("st_numel overflow on an accepted tensor");
        if ((uint64_t)n * st_dtype_bits(t->dtype) != 8 * (t->end - t->begin)) fail("byte size != numel x dtype size");
        if ((const uint8_t *)t->data != f->data + t->begin) fail("data pointer != data + begin");
        if (st_find(f, t->name) == NULL) fail("st_find misses an accepted tensor");
        const uint8_t *p = t->data;                       /* [end - begin] bytes */
        for (uint64_t k = 0; k < t->end - t->begin; k++) sum += p[k]; /* must not fault */
        cursor = t->end;
    }
    if (cursor != f->data_size) fail("trailing bytes accepted");
    for (int i = 0; i < f->n_meta; i++) {
        if (!f->meta_keys[i] || !f->meta_vals[i]) fail("NULL metadata entry");
        if (st_meta(f, f->meta_keys[i]) == NULL) fail("st_meta misses an accepted key");
    }
    (void)st_find(f, "");
    (void)st_meta(f, "");
    /* Keep the reads from being optimised away. */
    volatile unsigned sink = sum;
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (g_fd < 0) {
        g_fd = memfd_create("fuzz_st", MFD_CLOEXEC);
        if (g_fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
    }
    if (ftruncate(g_fd, 0) != 0 || (size && pwrite(g_fd, data, size, 0) != (ssize_t)size)) {
        perror("memfd write");
        abort();
    }
    st_file f;
    char err[512];
    memset(err, 'X', sizeof err);
    if (st_open(g_path, &f, err, sizeof err) == 0) {
        check_open_file(&f, size);
        st_close(&f);
    } else {
        size_t n = strnlen(err, sizeof err);
        if (n == 0 || n == sizeof err) fail("error text empty or not terminated");
        if (memchr(err, '\n', n)) fail("error text spans more than one line");
        if (f.map || f.tensors || f.path) fail("st_open failed but left resources in f");
    }
    return 0;
}
