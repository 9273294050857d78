/* test_checker_fp8.c — the stage checker's FP8 GEMM checks (app/checker.c) on
 * the host, in both scale granularities, with no GPU: the "GPU" side is the
 * CPU reference's own output, so every check must pass; then one value is
 * corrupted and the check it belongs to must fail. The block-scale index
 * math (an activation's scales [S][ceil(K / 128)], a weight's [ceil(N /
 * 128)][ceil(K / 128)], checker.h) lives only here on the host, where a
 * GPU run is the first to see a mistake in it otherwise.
 *
 * Run alone: ctest --test-dir build -R test_checker_fp8 --output-on-failure */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checker.h"
#include "config.h"
#include "cpu_ref.h"
#include "numerics.h"
#include "report.h"
#include "rng.h"

static int g_fail = 0;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test_checker_fp8: out of memory\n");
        exit(1);
    }
    return p;
}

/* x [rows][cols] bf16: N(0, 1) times 2^U(-6, 6) per 128 x 128 tile and again
 * per (row, 128-column block), so every scale differs. */
static uint16_t *make(h3_rng *g, int rows, int cols)
{
    uint16_t *x = xmalloc((size_t)rows * cols * 2);
    const int nb = (int)h3_fp8_kblocks((size_t)cols);
    float *tile = xmalloc(sizeof(float) * (size_t)((rows + 127) / 128) * nb);
    for (long i = 0; i < (long)((rows + 127) / 128) * nb; i++) tile[i] = exp2f((float)(12 * h3_rng_uniform(g) - 6));
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < nb; b++) {
            const float m = tile[(r / 128) * nb + b] * exp2f((float)(12 * h3_rng_uniform(g) - 6));
            for (int c = b * 128; c < cols && c < b * 128 + 128; c++)
                x[(size_t)r * cols + c] = h3_f32_to_bf16((float)h3_rng_normal(g) * m);
        }
    free(tile);
    return x;
}

/* The checks r holds for stage, all passed (want 1) or at least one failed (want 0). */
static void expect(report *r, const char *stage, int want, const char *what)
{
    int n = 0, failed = 0;
    for (int i = 0; i < r->n_checks; i++) {
        if (strcmp(r->checks[i].stage, stage)) continue;
        n++;
        failed += r->checks[i].asserted && !r->checks[i].pass;
    }
    const int ok = n > 0 && (want ? failed == 0 : failed > 0);
    printf("%s %-64s %d check(s), %d failed%s\n", ok ? "ok  " : "FAIL", what, n, failed,
           n ? "" : " (none ran)");
    if (!ok) {
        for (int i = 0; i < r->n_checks; i++)
            if (!strcmp(r->checks[i].stage, stage))
                printf("     %s / %s: pass %d, %s\n", r->checks[i].stage, r->checks[i].what, r->checks[i].pass,
                       r->checks[i].detail);
        g_fail = 1;
    }
    r->n_checks = 0;
}

static void run(int blocks, int S, int N, int K)
{
    h3_rng g = {12345u + (uint64_t)blocks * 1000u + (uint64_t)K};
    const int nb = blocks ? (int)h3_fp8_kblocks((size_t)K) : 1;
    const size_t nsx = (size_t)S * nb, nsw = blocks ? (size_t)((N + 127) / 128) * nb : (size_t)N;
    int rows[] = {0, 1, S / 3, S / 2, S - 2, S - 1};
    const int nrows = (int)(sizeof rows / sizeof rows[0]);
    h3_check_ctx k = {.S = S, .rows = rows, .nrows = nrows, .gemm_blocks = blocks};
    static report r; /* large: not on the stack */
    memset(&r, 0, sizeof r);
    char what[128];
    const char *mode = blocks ? "block scales" : "row scales";

    /* an activation as its producer wrote it: codes and scales of every row */
    uint16_t *x = make(&g, S, K), *W = make(&g, N, K);
    uint8_t *x8 = xmalloc((size_t)S * K), *W8 = xmalloc((size_t)N * K);
    float *sx = xmalloc(nsx * 4), *sw = xmalloc(nsw * 4);
    if (blocks) {
        cpu_quant_blocks_e4m3(x, S, K, 1, x8, sx);
        cpu_quant_blocks_e4m3(W, N, K, 128, W8, sw);
    } else {
        cpu_quant_rows_e4m3(x, S, K, x8, sx);
        cpu_quant_rows_e4m3(W, N, K, W8, sw);
    }
    uint16_t *ref = xmalloc((size_t)nrows * K * 2);
    h3_gather_rows_bf16(x, K, rows, nrows, ref);

    /* a producer's e4m3 rows against the CPU's quantisation of its BF16 output */
    h3_check_rows_q8(&r, &k, "producer", ref, K, x8, sx);
    snprintf(what, sizeof what, "%s: producer codes and scales (S %d, K %d)", mode, S, K);
    expect(&r, "producer", 1, what);
    sx[(size_t)rows[3] * nb + nb - 1] *= 2.0f; /* the last scale of a sampled row */
    h3_check_rows_q8(&r, &k, "producer", ref, K, x8, sx);
    snprintf(what, sizeof what, "%s: producer, one scale doubled", mode);
    expect(&r, "producer", 0, what);
    sx[(size_t)rows[3] * nb + nb - 1] *= 0.5f;

    /* the row quantiser on the sampled rows (out_quant) and on a whole weight */
    h3_check_quant_exact(&r, &k, "out_quant", "O", x, nrows, K, rows, x8, sx);
    snprintf(what, sizeof what, "%s: out_quant's codes and scales", mode);
    expect(&r, "out_quant", 1, what);
    h3_check_quant_exact(&r, &k, "qkv_gemm", "weights e4m3", W, N, K, NULL, W8, sw);
    snprintf(what, sizeof what, "%s: weight codes and scales (N %d, K %d)", mode, N, K);
    expect(&r, "qkv_gemm", 1, what);
    sw[nsw - 1] *= 2.0f; /* the last weight scale */
    h3_check_quant_exact(&r, &k, "qkv_gemm", "weights e4m3", W, N, K, NULL, W8, sw);
    snprintf(what, sizeof what, "%s: weights, the last scale doubled", mode);
    expect(&r, "qkv_gemm", 0, what);
    sw[nsw - 1] *= 0.5f;

    /* the GEMM on those operands */
    uint16_t *y = xmalloc((size_t)S * N * 2), *yr = xmalloc((size_t)nrows * N * 2);
    if (blocks)
        cpu_gemm_fp8_blocks(x8, sx, 1, W8, sw, 128, S, N, K, rows, nrows, yr);
    else
        cpu_gemm_fp8(x8, sx, W8, sw, S, N, K, rows, nrows, yr);
    memset(y, 0, (size_t)S * N * 2);
    for (int i = 0; i < nrows; i++) memcpy(y + (size_t)rows[i] * N, yr + (size_t)i * N, (size_t)N * 2);
    h3_check_gemm_fp8(&r, &k, "qkv_gemm", x8, sx, W8, sw, N, K, y);
    snprintf(what, sizeof what, "%s: the FP8 GEMM (S %d, N %d, K %d)", mode, S, N, K);
    expect(&r, "qkv_gemm", 1, what);
    for (size_t i = 0; i < nsx; i++) sx[i] = sx[nsx - 1 - i]; /* (half of) the scales in reverse order */
    h3_check_gemm_fp8(&r, &k, "qkv_gemm", x8, sx, W8, sw, N, K, y);
    snprintf(what, sizeof what, "%s: the FP8 GEMM, input scales misplaced", mode);
    expect(&r, "qkv_gemm", 0, what);

    free(x), free(W), free(x8), free(W8), free(sx), free(sw), free(ref), free(y), free(yr);
}

int main(void)
{
    /* K and N multiples of 128, and ragged (200 = 128 + 72; 300 rows = 2 tiles + 44) */
    run(0, 64, 256, 384);
    run(1, 64, 256, 384);
    run(1, 40, 300, 200);
    run(1, 24, 384, 5376); /* qkv's K: 42 blocks (cuBLASLt pads the device's rows to 44) */
    printf("%s\n", g_fail ? "test_checker_fp8: FAILED" : "test_checker_fp8: all passed");
    return g_fail;
}
