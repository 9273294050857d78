/* fp8_tool.c — helper for tests/python/test_fp8_ml_dtypes.py, not a test itself:
 * exposes src/numerics.h's FP8 conversions to a comparison with ml_dtypes.
 *
 *   fp8_tool decode OUT       OUT = 256 e4m3 decodes then 256 e5m2 decodes, float32 LE
 *   fp8_tool encode IN OUT    IN = n float32 LE; OUT = four arrays of n codes:
 *                             e4m3 satfinite, e4m3 _nonsat, e5m2 satfinite, e5m2 _nonsat
 * Run alone: build/tests/fp8_tool decode /tmp/dec.bin */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numerics.h"

static int decode(const char *out)
{
    float v[512]; // [2][256] f32
    for (int i = 0; i < 256; i++) {
        v[i] = h3_e4m3_to_f32((uint8_t)i);
        v[256 + i] = h3_e5m2_to_f32((uint8_t)i);
    }
    FILE *fp = fopen(out, "wb");
    if (!fp || fwrite(v, sizeof v, 1, fp) != 1 || fclose(fp) != 0) {
        perror(out);
        return 1;
    }
    return 0;
}

static int encode(const char *in, const char *out)
{
    FILE *fp = fopen(in, "rb");
    if (!fp) {
        perror(in);
        return 1;
    }
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    size_t n = (size_t)sz / 4;
    float *x = malloc(n * 4 + 4);      // [n] f32
    uint8_t *c = malloc(4 * n + 1);    // [4][n] fp8 codes
    if (!x || !c || fread(x, 4, n, fp) != n) {
        fprintf(stderr, "%s: read failed\n", in);
        return 1;
    }
    fclose(fp);
    for (size_t i = 0; i < n; i++) {
        c[i] = h3_f32_to_e4m3(x[i]);
        c[n + i] = h3_f32_to_e4m3_nonsat(x[i]);
        c[2 * n + i] = h3_f32_to_e5m2(x[i]);
        c[3 * n + i] = h3_f32_to_e5m2_nonsat(x[i]);
    }
    fp = fopen(out, "wb");
    if (!fp || fwrite(c, 1, 4 * n, fp) != 4 * n || fclose(fp) != 0) {
        perror(out);
        return 1;
    }
    free(x);
    free(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "decode") == 0) return decode(argv[2]);
    if (argc == 4 && strcmp(argv[1], "encode") == 0) return encode(argv[2], argv[3]);
    fprintf(stderr, "usage: %s decode OUT | encode IN OUT\n", argv[0]);
    return 2;
}
