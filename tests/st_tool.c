/* st_tool.c — helper for the Python interop tests (tests/python/), not a test itself.
 *
 *   st_tool dump FILE    one line per tensor, in offset order:
 *                          T <name as hex of its UTF-8 bytes> <dtype> <shape, d0xd1x..., "-" if rank 0> <fnv1a64 of its bytes>
 *                        and one per metadata entry: M <key hex> <value hex>
 *   st_tool write FILE   writes the fixed multi-dtype file that tests/python/test_st_interop.py expects
 *   st_tool diff A B NAME TOL
 *                        BF16 tensor NAME of A vs B: prints relative RMS ||a - b|| / ||b|| and
 *                        the max abs difference; exit 0 when shapes match, every value is
 *                        finite and the relative RMS is <= TOL, else 1 (tests/test_gpu_sp.sh)
 * Run alone: build/tests/st_tool dump tests/data/good_small.safetensors */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numerics.h"
#include "safetensors.h"

static void hex(const char *s)
{
    if (!*s) fputs("-", stdout); /* empty string */
    for (; *s; s++) printf("%02x", (unsigned char)*s);
}

static int dump(const char *path)
{
    st_file f;
    char err[512];
    if (st_open(path, &f, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    for (int i = 0; i < f.n_tensors; i++) {
        const st_tensor *t = &f.tensors[i];
        fputs("T ", stdout);
        hex(t->name);
        printf(" %s ", st_dtype_name(t->dtype));
        if (t->rank == 0) fputs("-", stdout);
        for (int k = 0; k < t->rank; k++) printf(k ? "x%lld" : "%lld", (long long)t->shape[k]);
        printf(" %016llx\n", (unsigned long long)st_fnv1a64(ST_FNV1A64_BASIS, t->data, (size_t)(t->end - t->begin)));
    }
    for (int i = 0; i < f.n_meta; i++) {
        fputs("M ", stdout);
        hex(f.meta_keys[i]);
        fputs(" ", stdout);
        hex(f.meta_vals[i]);
        fputs("\n", stdout);
    }
    st_close(&f);
    return 0;
}

static int diff(const char *pa, const char *pb, const char *name, double tol)
{
    st_file fa, fb;
    char err[512];
    if (st_open(pa, &fa, err, sizeof err) || st_open(pb, &fb, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const st_tensor *a = st_find(&fa, name), *b = st_find(&fb, name);
    int ok = a && b && a->dtype == ST_BF16 && b->dtype == ST_BF16 && st_numel(a) == st_numel(b);
    if (!ok) {
        fprintf(stderr, "st_tool diff: tensor '%s' missing, not BF16 or of different sizes\n", name);
    } else {
        const uint16_t *x = a->data, *y = b->data;
        double se = 0, sr = 0, mx = 0;
        long nonfinite = 0;
        for (int64_t i = 0; i < st_numel(a); i++) {
            const double u = h3_bf16_to_f32(x[i]), v = h3_bf16_to_f32(y[i]);
            if (!isfinite(u) || !isfinite(v)) {
                nonfinite++;
                continue;
            }
            se += (u - v) * (u - v);
            sr += v * v;
            if (fabs(u - v) > mx) mx = fabs(u - v);
        }
        const double rel = sr > 0 ? sqrt(se / sr) : sqrt(se);
        ok = nonfinite == 0 && rel <= tol;
        printf("%s: rel RMS %.3e (tol %.1e), max abs %.3e, %ld non-finite over %lld values\n", name, rel, tol, mx,
               nonfinite, (long long)st_numel(a));
    }
    st_close(&fa);
    st_close(&fb);
    return ok ? 0 : 1;
}

/* The values are integer formulas so the Python side rebuilds them exactly. */
static int write_fixed(const char *path)
{
    static uint16_t bf16[12];   // [3][4] bf16: (i - 6) * 0.5
    static float f32[12];       // [2][3][2] f32: (i - 5) * 0.375
    static uint16_t f16[5];     // [5] f16 bits: i * 0x1357
    static uint8_t e4m3[256];   // [256] every code
    static uint8_t e5m2[16][16]; // [16][16] every code
    static int64_t i64[3] = {-1, 0, 1ll << 40};
    static int32_t i32[2] = {-7, 123456};
    static int8_t i8[4] = {-128, -1, 0, 127};
    static uint8_t mask[4] = {1, 0, 0, 1};
    static double f64 = 0.1;
    for (int i = 0; i < 12; i++) bf16[i] = h3_f32_to_bf16((float)(i - 6) * 0.5f);
    for (int i = 0; i < 12; i++) f32[i] = (float)(i - 5) * 0.375f;
    for (int i = 0; i < 5; i++) f16[i] = (uint16_t)(i * 0x1357);
    for (int i = 0; i < 256; i++) e4m3[i] = (uint8_t)i, e5m2[i / 16][i % 16] = (uint8_t)i;
    st_write_tensor t[] = {
        {{"model.weight.bf16", ST_BF16, 2, {3, 4}}, bf16},
        {{"model.weight.f32", ST_F32, 3, {2, 3, 2}}, f32},
        {{"f16", ST_F16, 1, {5}}, f16},
        {{"codes.e4m3", ST_F8_E4M3, 1, {256}}, e4m3},
        {{"codes.e5m2", ST_F8_E5M2, 2, {16, 16}}, e5m2},
        {{"ids", ST_I64, 1, {3}}, i64},
        {{"i32", ST_I32, 1, {2}}, i32},
        {{"i8", ST_I8, 1, {4}}, i8},
        {{"empty.u8", ST_U8, 2, {0, 7}}, NULL},
        {{"mask", ST_BOOL, 1, {4}}, mask},
        {{"scalar.f64", ST_F64, 0, {0}}, &f64},
    };
    const char *meta[] = {"format", "pt", "producer", "h3block st_tool"};
    char err[512];
    if (st_write(path, t, (int)(sizeof t / sizeof *t), meta, 2, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "dump") == 0) return dump(argv[2]);
    if (argc == 3 && strcmp(argv[1], "write") == 0) return write_fixed(argv[2]);
    if (argc == 6 && strcmp(argv[1], "diff") == 0) return diff(argv[2], argv[3], argv[4], strtod(argv[5], NULL));
    fprintf(stderr, "usage: %s dump|write FILE | diff A B TENSOR TOL\n", argv[0]);
    return 2;
}
