/* test_safetensors.c — the loader rejects every malformed fixture with the
 * expected one-line error, reads the valid fixtures exactly, survives
 * truncated and mutated files, and the writer round-trips; a text file is
 * "not a safetensors file", and st_fingerprint hashes only the header.
 *
 * Run alone: ctest -R test_safetensors   (or: build/tests/test_safetensors tests/data)
 * Fixtures: tests/data, made by tools/make_bad_safetensors.py. Seed: H3_TEST_SEED. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rng.h"
#include "safetensors.h"

#include "test_util.h"

static const char *g_data; /* fixtures dir */
static char g_tmp[256];    /* scratch dir, removed at the end */

static char *path_in(const char *dir, const char *name)
{
    static char buf[4][1024];
    static int k;
    char *p = buf[k++ & 3];
    if (strlen(dir) + strlen(name) + 2 > sizeof buf[0]) {
        fprintf(stderr, "path too long: %s/%s\n", dir, name);
        exit(1);
    }
    strcpy(p, dir);
    strcat(p, "/");
    strcat(p, name);
    return p;
}

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, fp);
    fclose(fp);
    return b;
}

static void write_all(const char *path, const void *b, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(b, 1, n, fp) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(fp);
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Number of entries in the scratch dir whose name starts with prefix. */
static int count_prefixed(const char *prefix)
{
    DIR *d = opendir(g_tmp);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    if (d) closedir(d);
    return n;
}

/* ---------------------------------------------------------- bad fixtures */

static void test_bad_files(void)
{
    char *list = path_in(g_data, "expected_errors.txt");
    FILE *fp = fopen(list, "r");
    if (!fp) {
        EXPECT(0, "cannot open %s", list);
        return;
    }
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        char *sp = strchr(line, ' ');
        if (!sp) {
            EXPECT(0, "bad line in expected_errors.txt: %s", line);
            continue;
        }
        *sp = 0;
        const char *file = line, *want = sp + 1;
        st_file f;
        char err[512] = "";
        int rc = st_open(path_in(g_data, file), &f, err, sizeof err);
        EXPECT(rc != 0, "%s: st_open accepted a malformed file", file);
        EXPECT(strstr(err, want) != NULL, "%s: error '%s' lacks '%s'", file, err, want);
        EXPECT(strstr(err, file) != NULL, "%s: error '%s' does not name the file", file, err);
        EXPECT(strchr(err, '\n') == NULL, "%s: error is not one line", file);
        EXPECT(f.map == NULL && f.tensors == NULL && f.n_tensors == 0, "%s: st_file not cleared on failure", file);
        st_close(&f); /* must be harmless */
        n++;
    }
    fclose(fp);
    EXPECT(n >= 40, "only %d bad fixtures listed", n);
    printf("bad fixtures: %d rejected as expected\n", n);
}

/* ---------------------------------------------------------- good fixtures */

typedef struct {
    const char *name;
    st_dtype dtype;
    int rank;
    int64_t shape[3];
    const char *bytes; /* expected contents, hex */
} want_t;

static void expect_tensor(const st_file *f, const want_t *w)
{
    const st_tensor *t = st_find(f, w->name);
    EXPECT(t != NULL, "%s: tensor '%s' missing", f->path, w->name);
    if (!t) return;
    EXPECT(t->dtype == w->dtype, "%s: '%s' dtype %s, want %s", f->path, w->name, st_dtype_name(t->dtype),
           st_dtype_name(w->dtype));
    EXPECT(t->rank == w->rank, "%s: '%s' rank %d, want %d", f->path, w->name, t->rank, w->rank);
    for (int i = 0; i < w->rank && i < t->rank; i++)
        EXPECT(t->shape[i] == w->shape[i], "%s: '%s' shape[%d] %lld, want %lld", f->path, w->name, i,
               (long long)t->shape[i], (long long)w->shape[i]);
    size_t nb = strlen(w->bytes) / 2;
    EXPECT(t->end - t->begin == nb, "%s: '%s' has %llu bytes, want %zu", f->path, w->name,
           (unsigned long long)(t->end - t->begin), nb);
    EXPECT((uint64_t)st_numel(t) * st_dtype_bits(t->dtype) == 8 * (t->end - t->begin), "%s: '%s' numel", f->path,
           w->name);
    for (size_t i = 0; i < nb && i < t->end - t->begin; i++) {
        unsigned v;
        sscanf(w->bytes + 2 * i, "%2x", &v);
        if (((const unsigned char *)t->data)[i] != v) {
            EXPECT(0, "%s: '%s' byte %zu is %02x, want %02x", f->path, w->name, i, ((const unsigned char *)t->data)[i], v);
            break;
        }
    }
}

static void test_good_files(void)
{
    st_file f;
    char err[512];
    /* Expected bytes written out by hand from the values in make_bad_safetensors.py. */
    static const want_t small[] = {
        {"bool", ST_BOOL, 1, {3}, "010001"},
        {"u8", ST_U8, 2, {2, 2}, "0001feff"},
        {"i8", ST_I8, 1, {2}, "807f"},
        {"i32", ST_I32, 1, {3}, "ffffffff00000000ffffff7f"},
        {"i64", ST_I64, 1, {1}, "0000000000ffffff"},
        {"f16", ST_F16, 1, {2}, "003c00c0"},
        {"bf16", ST_BF16, 2, {1, 3}, "803f494080ff"},
        {"f32", ST_F32, 2, {2, 1}, "0000003fcaf249f1"},
        {"f64", ST_F64, 1, {1}, "555555555555d53f"},
        {"e4m3", ST_F8_E4M3, 1, {4}, "387e01ff"},
        {"e5m2", ST_F8_E5M2, 1, {4}, "3c7b7c80"},
        {"scalar", ST_F32, 0, {0}, "0000e040"},
    };
    if (st_open(path_in(g_data, "good_small.safetensors"), &f, err, sizeof err) != 0) {
        EXPECT(0, "good_small rejected: %s", err);
    } else {
        EXPECT(f.n_tensors == 12, "good_small: %d tensors", f.n_tensors);
        EXPECT(f.n_meta == 0, "good_small: %d metadata", f.n_meta);
        EXPECT((8 + f.header_len) % 8 == 0, "good_small: header not padded");
        for (size_t i = 0; i < sizeof small / sizeof *small; i++) expect_tensor(&f, &small[i]);
        for (int i = 1; i < f.n_tensors; i++)
            EXPECT(f.tensors[i].begin == f.tensors[i - 1].end, "good_small: tensors not in offset order");
        EXPECT(st_find(&f, "nope") == NULL, "st_find found a missing tensor");
        st_close(&f);
    }

    if (st_open(path_in(g_data, "good_meta.safetensors"), &f, err, sizeof err) != 0) {
        EXPECT(0, "good_meta rejected: %s", err);
    } else {
        want_t w = {"blocks.0.norm1.weight", ST_BF16, 1, {4}, "803f803f00404040"};
        expect_tensor(&f, &w);
        EXPECT(f.n_meta == 3, "good_meta: %d metadata", f.n_meta);
        const char *fmt = st_meta(&f, "format"), *note = st_meta(&f, "note"), *empty = st_meta(&f, "empty");
        EXPECT(fmt && strcmp(fmt, "pt") == 0, "good_meta: format '%s'", fmt ? fmt : "(null)");
        EXPECT(note && strcmp(note, "quote \" backslash \\ caf\xc3\xa9") == 0, "good_meta: note '%s'",
               note ? note : "(null)");
        EXPECT(empty && !empty[0], "good_meta: empty");
        EXPECT(st_meta(&f, "absent") == NULL, "st_meta found a missing key");
        st_close(&f);
    }

    if (st_open(path_in(g_data, "good_empty_tensor.safetensors"), &f, err, sizeof err) != 0) {
        EXPECT(0, "good_empty_tensor rejected: %s", err);
    } else {
        static const want_t e[] = {
            {"empty0", ST_F32, 2, {0, 3}, ""}, {"a", ST_F32, 1, {2}, "0000803f00000040"},
            {"empty1", ST_BF16, 2, {4, 0}, ""}, {"b", ST_U8, 1, {3}, "070809"}, {"empty2", ST_I64, 1, {0}, ""},
        };
        EXPECT(f.n_tensors == 5, "good_empty_tensor: %d tensors", f.n_tensors);
        for (size_t i = 0; i < 5; i++) expect_tensor(&f, &e[i]);
        st_close(&f);
    }

    if (st_open(path_in(g_data, "good_no_tensors.safetensors"), &f, err, sizeof err) != 0) {
        EXPECT(0, "good_no_tensors rejected: %s", err);
    } else {
        EXPECT(f.n_tensors == 0 && f.data_size == 0, "good_no_tensors");
        st_close(&f);
    }

    if (st_open(path_in(g_data, "good_unordered.safetensors"), &f, err, sizeof err) != 0) {
        EXPECT(0, "good_unordered rejected: %s", err);
    } else {
        EXPECT(f.n_tensors == 2 && strcmp(f.tensors[0].name, "first") == 0, "good_unordered: not sorted by offset");
        want_t a = {"first", ST_F32, 1, {1}, "00002040"}, b = {"second", ST_U8, 1, {2}, "0102"};
        expect_tensor(&f, &a);
        expect_tensor(&f, &b);
        st_close(&f);
    }

    /* every other dtype the format defines (the official reader loads them),
     * F4 and F6_* packing elements into bits */
    if (st_open(path_in(g_data, "good_dtypes_other.safetensors"), &f, err, sizeof err) != 0) {
        EXPECT(0, "good_dtypes_other rejected: %s", err);
    } else {
        static const want_t o[] = {
            {"u16", ST_U16, 1, {2}, "0100ffff"},       {"u32", ST_U32, 1, {1}, "00286bee"},
            {"u64", ST_U64, 1, {1}, "ffffffffffffffff"}, {"i16", ST_I16, 1, {2}, "0080ff7f"},
            {"e8m0", ST_F8_E8M0, 1, {2}, "7f80"},      {"e4m3fnuz", ST_F8_E4M3FNUZ, 1, {1}, "40"},
            {"e5m2fnuz", ST_F8_E5M2FNUZ, 1, {1}, "40"}, {"c64", ST_C64, 1, {1}, "0000803f000080bf"},
            {"f4", ST_F4, 1, {4}, "2143"},             {"f6a", ST_F6_E2M3, 1, {4}, "010203"},
            {"f6b", ST_F6_E3M2, 1, {4}, "040506"},
        };
        EXPECT(f.n_tensors == 11, "good_dtypes_other: %d tensors", f.n_tensors);
        for (size_t i = 0; i < sizeof o / sizeof *o; i++) expect_tensor(&f, &o[i]);
        st_close(&f);
    }

    /* an odd header length: the data region still lands aligned in memory */
    if (st_open(path_in(g_data, "good_odd_header.safetensors"), &f, err, sizeof err) != 0) {
        EXPECT(0, "good_odd_header rejected: %s", err);
    } else {
        want_t a = {"a", ST_BF16, 1, {2}, "803f0040"};
        expect_tensor(&f, &a);
        EXPECT(f.header_len % 2 == 1, "good_odd_header: header length %llu is even", (unsigned long long)f.header_len);
        EXPECT((uintptr_t)f.data % 64 == 0, "good_odd_header: data region not 64-byte aligned");
        st_close(&f);
    }

    if (st_open(path_in(g_data, "good_surrogate_pair.safetensors"), &f, err, sizeof err) != 0) {
        EXPECT(0, "good_surrogate_pair rejected: %s", err);
    } else {
        want_t a = {"a\xf0\x9f\x98\x80", ST_U8, 1, {1}, "07"}; /* U+1F600 from \ud83d\ude00 */
        expect_tensor(&f, &a);
        st_close(&f);
    }

    EXPECT(st_open(path_in(g_data, "does_not_exist.safetensors"), &f, err, sizeof err) != 0 &&
               strstr(err, "does_not_exist.safetensors: cannot open"),
           "missing file: '%s'", err);
    EXPECT(st_open(g_data, &f, err, sizeof err) != 0 && strstr(err, "not a regular file"), "directory: '%s'", err);
}

/* Every proper prefix of a valid file must be rejected, and random byte
 * mutations must never crash (run under ASan to make that bite); whatever
 * is accepted must still tile the data region. */
static void test_mutations(uint64_t seed)
{
    size_t n;
    unsigned char *orig = read_all(path_in(g_data, "good_small.safetensors"), &n);
    if (!orig) {
        EXPECT(0, "cannot read good_small");
        return;
    }
    char *p = path_in(g_tmp, "mut.safetensors");
    st_file f;
    char err[512];
    for (size_t k = 0; k < n; k++) {
        write_all(p, orig, k);
        int rc = st_open(p, &f, err, sizeof err);
        EXPECT(rc != 0, "prefix of %zu/%zu bytes accepted", k, n);
        if (rc == 0) st_close(&f);
    }
    h3_rng r = {seed};
    unsigned char *m = malloc(n);
    int accepted = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(m, orig, n);
        int flips = 1 + (int)(h3_rng_next(&r) % 4);
        for (int j = 0; j < flips; j++) {
            /* mostly in the header, where the parser lives */
            size_t at = (size_t)(h3_rng_next(&r) % (h3_rng_next(&r) & 1 ? n : 8 + 200));
            static const unsigned char interesting[] = {'{', '}', '[', ']', '"', ',', ':', '\\', '0', '9', '-', '.', ' ', 0, 0xff};
            m[at] = h3_rng_next(&r) & 1 ? (unsigned char)h3_rng_next(&r)
                                        : interesting[h3_rng_next(&r) % sizeof interesting];
        }
        write_all(p, m, n);
        err[0] = 0;
        if (st_open(p, &f, err, sizeof err) == 0) {
            accepted++;
            uint64_t cursor = 0;
            for (int i = 0; i < f.n_tensors; i++) {
                const st_tensor *t = &f.tensors[i];
                EXPECT(t->begin == cursor && t->end <= f.data_size &&
                           (uint64_t)st_numel(t) * st_dtype_bits(t->dtype) == 8 * (t->end - t->begin),
                       "mutation %d accepted a bad layout", it);
                cursor = t->end;
            }
            EXPECT(cursor == f.data_size, "mutation %d: data not covered", it);
            st_close(&f);
        } else {
            EXPECT(err[0] && strchr(err, '\n') == NULL, "mutation %d: bad error line '%s'", it, err);
        }
    }
    printf("mutations: 3000 tried, %d still valid (e.g. a changed data byte)\n", accepted);
    free(m);
    free(orig);
    remove(p);
}

/* ---------------------------------------------------------- header only */

/* st_open_header: the same verdict and error line as st_open on every
 * fixture, no data pointers, and st_read gives st_open's bytes; a file that
 * changes size after the header was read is refused by st_read. */
static void test_header_only(void)
{
    DIR *d = opendir(g_data);
    int n = 0, good = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 12 || strcmp(e->d_name + l - 12, ".safetensors")) continue;
        const char *p = path_in(g_data, e->d_name);
        st_file a, h;
        char ea[512] = "", eh[512] = "";
        int ra = st_open(p, &a, ea, sizeof ea), rh = st_open_header(p, &h, eh, sizeof eh);
        n++;
        EXPECT(ra == rh && !strcmp(ea, eh), "%s: st_open %d '%s', st_open_header %d '%s'", e->d_name, ra, ea, rh,
               eh);
        if (ra == 0 && rh == 0) {
            good++;
            EXPECT(a.n_tensors == h.n_tensors && a.n_meta == h.n_meta && a.data_size == h.data_size,
                   "%s: header-only view differs", e->d_name);
            for (int i = 0; i < a.n_tensors && i < h.n_tensors; i++) {
                const st_tensor *x = &a.tensors[i], *y = &h.tensors[i];
                size_t nb = (size_t)(x->end - x->begin);
                unsigned char *buf = malloc(nb + 1);
                char err[512];
                EXPECT(!strcmp(x->name, y->name) && x->begin == y->begin && y->data == NULL,
                       "%s: tensor %d differs or has data", e->d_name, i);
                EXPECT(st_read(&h, y, 0, nb, buf, err, sizeof err) == 0 && !memcmp(buf, x->data, nb),
                       "%s: st_read of '%s': %s", e->d_name, y->name, err);
                if (nb >= 2)
                    EXPECT(st_read(&h, y, 1, nb - 1, buf, err, sizeof err) == 0 &&
                               !memcmp(buf, (const char *)x->data + 1, nb - 1),
                           "%s: st_read of '%s' from byte 1: %s", e->d_name, y->name, err);
                EXPECT(st_read(&h, y, 0, nb + 1, buf, err, sizeof err) != 0 && strstr(err, y->name),
                       "%s: st_read past '%s' accepted", e->d_name, y->name);
                free(buf);
            }
        }
        if (ra == 0) st_close(&a);
        if (rh == 0) st_close(&h);
    }
    if (d) closedir(d);
    EXPECT(n >= 40 && good >= 5, "only %d fixtures (%d good) seen", n, good);

    /* changed under the reader */
    size_t sz;
    unsigned char *orig = read_all(path_in(g_data, "good_small.safetensors"), &sz);
    char *p = path_in(g_tmp, "ho.safetensors"), err[512];
    st_file h;
    write_all(p, orig, sz);
    if (st_open_header(p, &h, err, sizeof err) != 0) {
        EXPECT(0, "ho.safetensors: %s", err);
    } else {
        const st_tensor *t = &h.tensors[h.n_tensors - 1];
        unsigned char b[16];
        write_all(p, orig, sz - 1);
        EXPECT(st_read(&h, t, 0, 1, b, err, sizeof err) != 0 && strstr(err, "changed since its header was read"),
               "st_read of a shortened file: '%s'", err);
        remove(p);
        EXPECT(st_read(&h, t, 0, 1, b, err, sizeof err) != 0 && strstr(err, "cannot open"),
               "st_read of a removed file: '%s'", err);
        st_close(&h);
    }
    free(orig);
    printf("header only: %d fixtures, %d valid ones read back through st_read\n", n, good);
}

/* ---------------------------------------------------------- writer */

static void fill_random(h3_rng *r, unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)h3_rng_next(r);
}

static void test_writer(uint64_t seed)
{
    h3_rng r = {seed ^ 0x5eedull};
    enum { NT = 7 };
    /* Declaration order deliberately not sorted by name or dtype. */
    st_decl d[NT] = {
        {"z.last.weight", ST_BF16, 2, {3, 5}},
        {"a \"quoted\"\tname\\", ST_F32, 1, {7}},
        {"empty", ST_F8_E4M3, 2, {0, 4}},
        {"scalar", ST_F64, 0, {0}},
        {"codes", ST_F8_E5M2, 3, {2, 1, 3}},
        {"mask", ST_BOOL, 1, {5}},
        {"ids", ST_I64, 1, {2}},
    };
    unsigned char *data[NT];
    size_t bytes[NT], total = 0;
    st_write_tensor wt[NT];
    for (int i = 0; i < NT; i++) {
        int64_t ne = 1;
        for (int k = 0; k < d[i].rank; k++) ne *= d[i].shape[k];
        bytes[i] = (size_t)ne * st_dtype_size(d[i].dtype);
        data[i] = malloc(bytes[i] + 1);
        fill_random(&r, data[i], bytes[i]);
        wt[i].decl = d[i];
        wt[i].data = data[i];
        total += bytes[i];
    }
    const char *meta[] = {"format", "pt", "comment", "line1\nline2 \"x\" \xc3\xa9", "empty", ""};
    char err[512];
    char *p1 = path_in(g_tmp, "w1.safetensors"), *p2 = path_in(g_tmp, "w2.safetensors");

    EXPECT(st_write(p1, wt, NT, meta, 3, err, sizeof err) == 0, "st_write: %s", err);

    /* streaming, in random chunk sizes that straddle tensor boundaries */
    st_writer *w = st_writer_open(p2, d, NT, meta, 3, err, sizeof err);
    EXPECT(w != NULL, "st_writer_open: %s", err);
    if (w) {
        unsigned char *all = malloc(total + 1);
        size_t o = 0;
        for (int i = 0; i < NT; i++) {
            memcpy(all + o, data[i], bytes[i]);
            o += bytes[i];
        }
        for (o = 0; o < total;) {
            size_t c = 1 + (size_t)(h3_rng_next(&r) % 9);
            if (c > total - o) c = total - o;
            EXPECT(st_writer_write(w, all + o, c, err, sizeof err) == 0, "st_writer_write: %s", err);
            o += c;
        }
        EXPECT(st_writer_write(w, all, 0, err, sizeof err) == 0, "zero-byte write: %s", err);
        EXPECT(st_writer_close(w, err, sizeof err) == 0, "st_writer_close: %s", err);
        free(all);
    }
    size_t n1, n2;
    unsigned char *b1 = read_all(p1, &n1), *b2 = read_all(p2, &n2);
    EXPECT(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0, "st_write and the streaming writer differ");

    st_file f;
    if (st_open(p1, &f, err, sizeof err) != 0) {
        EXPECT(0, "written file rejected: %s", err);
    } else {
        EXPECT(f.n_tensors == NT, "%d tensors", f.n_tensors);
        EXPECT(f.header_len % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)f.header_len);
        EXPECT(f.data_size == total, "data size");
        /* header: __metadata__ first, then the tensors in declaration order,
         * then space padding (a NUL-terminated copy: the map has no NUL) */
        char *h = malloc(f.header_len + 1);
        memcpy(h, (const char *)f.map + 8, f.header_len);
        h[f.header_len] = 0;
        const char *prev = strstr(h, "{\"__metadata__\"");
        EXPECT(prev == h, "header does not begin with __metadata__");
        uint64_t off = 0;
        for (int i = 0; i < NT; i++) {
            const st_tensor *t = st_find(&f, d[i].name);
            EXPECT(t != NULL, "'%s' missing", d[i].name);
            if (!t) continue;
            EXPECT(t->dtype == d[i].dtype && t->rank == d[i].rank, "'%s' dtype/rank", d[i].name);
            for (int k = 0; k < d[i].rank; k++) EXPECT(t->shape[k] == d[i].shape[k], "'%s' shape", d[i].name);
            EXPECT(t->begin == off && t->end == off + bytes[i], "'%s' offsets not contiguous in declaration order",
                   d[i].name);
            EXPECT(bytes[i] == 0 || memcmp(t->data, data[i], bytes[i]) == 0, "'%s' bytes differ", d[i].name);
            off += bytes[i];
            char key[16];
            snprintf(key, sizeof key, "\"%.2s", d[i].name); /* names differ in their first 2 chars, unescaped */
            const char *at = prev ? strstr(prev + 1, key) : NULL;
            EXPECT(at != NULL, "'%s' out of declaration order in the header", d[i].name);
            if (at) prev = at;
        }
        size_t e = f.header_len;
        while (e > 0 && h[e - 1] == ' ') e--;
        EXPECT(e > 0 && h[e - 1] == '}' && f.header_len - e < 8, "header is not JSON + fewer than 8 spaces");
        free(h);
        for (int i = 0; i < 3; i++) {
            const char *v = st_meta(&f, meta[2 * i]);
            EXPECT(v && strcmp(v, meta[2 * i + 1]) == 0, "metadata '%s' = '%s'", meta[2 * i], v ? v : "(null)");
        }
        st_close(&f);
    }
    free(b1);
    free(b2);

    /* abort: nothing left behind (neither the file nor a temp) */
    char *p3 = path_in(g_tmp, "w3.safetensors");
    w = st_writer_open(p3, d, NT, NULL, 0, err, sizeof err);
    EXPECT(w != NULL, "open: %s", err);
    if (w) {
        st_writer_write(w, data[0], bytes[0], err, sizeof err);
        st_writer_abort(w);
    }
    EXPECT(!exists(p3) && count_prefixed("w3.") == 0, "abort left a file behind");

    /* too few bytes: close fails and removes the file */
    w = st_writer_open(p3, d, NT, NULL, 0, err, sizeof err);
    if (w) {
        EXPECT(st_writer_write(w, data[0], bytes[0], err, sizeof err) == 0, "write: %s", err);
        EXPECT(st_writer_close(w, err, sizeof err) != 0 && strstr(err, "declared"), "short write accepted: '%s'", err);
    }
    EXPECT(!exists(p3) && count_prefixed("w3.") == 0, "short write left a file behind");

    /* too many bytes: the write fails, the file is gone, close fails */
    w = st_writer_open(p3, d, 1, NULL, 0, err, sizeof err);
    if (w) {
        EXPECT(st_writer_write(w, data[0], bytes[0] - 1, err, sizeof err) == 0, "write: %s", err);
        EXPECT(st_writer_write(w, data[0], 2, err, sizeof err) != 0 && strstr(err, "declared"),
               "overlong write accepted: '%s'", err);
        EXPECT(!exists(p3) && count_prefixed("w3.") == 0, "overlong write left a file behind");
        EXPECT(st_writer_close(w, err, sizeof err) != 0, "close after a failed write succeeded");
    }

    /* a failed write must not destroy an existing file at the path */
    w = st_writer_open(p1, d, NT, NULL, 0, err, sizeof err);
    if (w) st_writer_abort(w);
    EXPECT(st_open(p1, &f, err, sizeof err) == 0, "aborted writer destroyed the existing file: %s", err);
    st_close(&f);

    /* declarations the writer must refuse */
    st_decl dup[2] = {{"x", ST_F32, 1, {1}}, {"x", ST_U8, 1, {1}}};
    EXPECT(!st_writer_open(p3, dup, 2, NULL, 0, err, sizeof err) && strstr(err, "'x'"), "duplicate name: '%s'", err);
    st_decl neg = {"n", ST_F32, 2, {2, -1}};
    EXPECT(!st_writer_open(p3, &neg, 1, NULL, 0, err, sizeof err), "negative shape accepted");
    st_decl big = {"b", ST_F32, 3, {1ll << 40, 1ll << 40, 1ll << 40}};
    EXPECT(!st_writer_open(p3, &big, 1, NULL, 0, err, sizeof err), "overflowing shape accepted");
    st_decl rank = {"r", ST_F32, 9, {1}};
    EXPECT(!st_writer_open(p3, &rank, 1, NULL, 0, err, sizeof err), "rank 9 accepted");
    st_decl res = {"__metadata__", ST_F32, 1, {1}};
    EXPECT(!st_writer_open(p3, &res, 1, NULL, 0, err, sizeof err), "reserved name accepted");
    const char *dupmeta[] = {"k", "1", "k", "2"};
    EXPECT(!st_writer_open(p3, d, 1, dupmeta, 2, err, sizeof err), "duplicate metadata key accepted");
    st_decl badutf = {"a\xff", ST_F32, 1, {1}};
    EXPECT(!st_writer_open(p3, &badutf, 1, NULL, 0, err, sizeof err), "non-UTF-8 name accepted");
    EXPECT(!exists(p3) && count_prefixed("w3.") == 0, "refused declarations left a file behind");

    /* a FIFO at the path: refused, not replaced by a regular file (the
     * rename would turn a device node or a FIFO into a file) */
    char *pf = path_in(g_tmp, "fifo.safetensors");
    struct stat sb;
    if (mkfifo(pf, 0600) == 0) {
        EXPECT(!st_writer_open(pf, d, 1, NULL, 0, err, sizeof err) && strstr(err, "not a regular file"),
               "writer over a FIFO: '%s'", err);
        EXPECT(stat(pf, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO was replaced");
        EXPECT(count_prefixed("fifo.safetensors.") == 0, "refused FIFO left a temporary behind");
        remove(pf);
    }

    /* no tensors at all: a valid, empty file */
    EXPECT(st_write(p3, NULL, 0, NULL, 0, err, sizeof err) == 0, "empty st_write: %s", err);
    EXPECT(st_open(p3, &f, err, sizeof err) == 0 && f.n_tensors == 0, "empty file: %s", err);
    st_close(&f);

    remove(p1);
    remove(p2);
    remove(p3);
    for (int i = 0; i < NT; i++) free(data[i]);
}

/* ------------------------------------- header lengths, st_fingerprint */

static void write_bytes(const char *path, const void *b, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (fp) {
        fwrite(b, 1, n, fp);
        fclose(fp);
    }
}

/* FNV-1a 64 as its specification gives it, to check st_fingerprint's. */
static uint64_t fnv_ref(const uint8_t *p, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* A text file's first 8 bytes make a length past the limit and the file:
 * "not a safetensors file"; a length past the limit only (a sparse file
 * larger than it) keeps the limit's own message. The fingerprint hashes the
 * length and the header, never the data, and an index in full. */
static void test_header_length(void)
{
    char *p = path_in(g_tmp, "hl.safetensors"), err[512];
    st_file f;
    const char text[] = "# h3block\n\nOne MiniMax-H3 video-diffusion DiT block on an NVIDIA GPU.\n";
    write_bytes(p, text, sizeof text - 1);
    EXPECT(st_open(p, &f, err, sizeof err) == ST_ERR_FILE &&
               strstr(err, "not a safetensors file (its first 8 bytes are not a plausible header length)"),
           "a text file: '%s'", err);
    const uint8_t len8[8] = {0x01, 0xe1, 0xf5, 0x05}; /* 100000001, little-endian */
    write_bytes(p, len8, 8);
    EXPECT(truncate(p, 100000100) == 0, "truncate: %s", strerror(errno));
    EXPECT(st_open(p, &f, err, sizeof err) == ST_ERR_FILE && strstr(err, "exceeds the 100000000-byte limit"),
           "a 100000001-byte header in a larger file: '%s'", err);
    remove(p);

    char *good = path_in(g_data, "good_small.safetensors");
    EXPECT(st_open(good, &f, err, sizeof err) == 0, "good_small: %s", err);
    const size_t hl = 8 + (size_t)f.header_len;
    uint8_t *copy = malloc(f.map_size);
    memcpy(copy, f.map, f.map_size);
    const size_t size = f.map_size;
    st_close(&f);
    uint64_t sz = 0, h = 0, h2 = 0;
    EXPECT(st_fingerprint(good, &sz, &h, err, sizeof err) == 0, "st_fingerprint: %s", err);
    EXPECT(sz == size && h == fnv_ref(copy, hl), "fingerprint: size %llu (want %zu), hash %016llx (want %016llx)",
           (unsigned long long)sz, size, (unsigned long long)h, (unsigned long long)fnv_ref(copy, hl));
    copy[size - 1] ^= 1; /* a data byte: same fingerprint */
    write_bytes(p, copy, size);
    EXPECT(st_fingerprint(p, &sz, &h2, err, sizeof err) == 0 && h2 == h, "a data byte changed the fingerprint");
    copy[hl - 2] ^= 0x20; /* a header byte: another */
    write_bytes(p, copy, size);
    EXPECT(st_fingerprint(p, &sz, &h2, err, sizeof err) == 0 && h2 != h, "a header byte left the fingerprint");
    remove(p);
    free(copy);
    char *idx = path_in(g_tmp, "m.safetensors.index.json");
    const char json[] = "{\"weight_map\": {}}";
    write_bytes(idx, json, sizeof json - 1);
    EXPECT(st_fingerprint(idx, &sz, &h, err, sizeof err) == 0 && sz == sizeof json - 1 &&
               h == fnv_ref((const uint8_t *)json, sizeof json - 1),
           "index fingerprint: %s", err);
    remove(idx);
    EXPECT(st_fingerprint(g_tmp, &sz, &h, err, sizeof err) == ST_ERR_FILE && strstr(err, "not a regular file"),
           "a directory: '%s'", err);
}

/* ---------------------------------------------------------- st_escape */

static void expect_escape(const char *in, size_t len, int quoted, size_t outlen, const char *want)
{
    char out[256];
    st_escape(out, outlen, in, len, quoted);
    EXPECT(strcmp(out, want) == 0, "st_escape(\"%s\"): got \"%s\", want \"%s\"", want, out, want);
}

/* Names and paths from files and flags are printed through st_escape: one
 * line, no terminal control, valid UTF-8 kept. */
static void test_escape(void)
{
    expect_escape("plain.name", 10, 1, 64, "plain.name");
    expect_escape("a\nb", 3, 1, 64, "a\\x0ab");
    expect_escape("\x1b[31mred", 8, 1, 64, "\\x1b[31mred");
    expect_escape("it's \\", 6, 1, 64, "it\\x27s \\x5c");
    expect_escape("it's \\", 6, 0, 64, "it's \\");
    expect_escape("caf\xc3\xa9", 5, 1, 64, "caf\xc3\xa9");                /* UTF-8 kept */
    expect_escape("a\xff" "b", 3, 1, 64, "a\\xffb");                       /* not UTF-8 */
    expect_escape("\xc2\x9b" "2J", 4, 0, 64, "\\xc2\\x9b2J");               /* C1 CSI */
    expect_escape("\xc0\xaf", 2, 0, 64, "\\xc0\\xaf");                     /* overlong */
    expect_escape("abcdefghijklmnopqrstuvwxyz", 26, 1, 16, "abcdefghijkl...");
    expect_escape("\n\n\n\n\n\n", 6, 1, 16, "\\x0a\\x0a\\x0a...");
    expect_escape("a\0b", 3, 0, 64, "a\\x00b");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    g_data = argv[1];
    const char *s = getenv("H3_TEST_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_safetensors: seed %llu (set H3_TEST_SEED to repeat)\n", (unsigned long long)seed);
    snprintf(g_tmp, sizeof g_tmp, "st_test_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_bad_files();
    test_good_files();
    test_mutations(seed);
    test_header_only();
    test_writer(seed);
    test_escape();
    test_header_length();
    if (count_prefixed("") > 2) EXPECT(0, "scratch dir %s not empty at the end", g_tmp);
    rmdir(g_tmp);
    printf("%d checks, %d failed\n", checks, fails);
    return fails ? 1 : 0;
}
