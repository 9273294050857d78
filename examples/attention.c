/* attention.c — h3block's attention from C: random BF16 q, k, v for two
 * batch items, h3b_attention on the GPU, and the result against exact
 * attention computed here in double. Exit 0 when the relative RMS error is
 * within 8%, 1 otherwise, 77 without a usable GPU: on i.i.d. N(0, 1) q, k, v
 * the contract's e4m3 rounding of the inputs alone costs 4.4-4.8% (exact
 * attention on the rounded inputs, docs/accuracy.md) and the kernel ~5%; a
 * wrong kernel is ~100% off.
 *
 *   cc attention.c $(pkg-config --cflags --libs h3block) -lcudart -o attention
 */
#include <h3block.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef H3_EXAMPLE_CUDA
#include <cuda_runtime.h>
#endif

enum { B = 2, S = 300, H = 3, D = 128 };

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
}
static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* N(0, 1) by Box-Muller from a fixed LCG: the same data everywhere */
static float normal(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    const double u1 = ((*s >> 11) + 1.0) / 9007199254740993.0;
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    const double u2 = (*s >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

int main(void)
{
    printf("h3block %s\n", h3b_version());
    h3b_attn *a;
    h3b_status st = h3b_attn_create(&a, 0, 0);
    if (st != H3B_OK) {
        printf("skipped: %s: %s\n", h3b_status_name(st), h3b_attn_error(a));
        h3b_attn_destroy(a);
        return 77;
    }
    printf("kernel: %s\n", h3b_attn_kernel(a));
#ifdef H3_EXAMPLE_CUDA
    const size_t n = (size_t)B * S * H * D;
    uint16_t *host = malloc(3 * n * 2), *out = malloc(n * 2);
    if (!host || !out) return 1;
    uint64_t seed = 1;
    for (size_t i = 0; i < 3 * n; i++) host[i] = to_bf16(normal(&seed));
    void *dev = NULL, *dout = NULL;
    if (cudaMalloc(&dev, 3 * n * 2) || cudaMalloc(&dout, n * 2) ||
        cudaMemcpy(dev, host, 3 * n * 2, cudaMemcpyHostToDevice)) {
        fprintf(stderr, "CUDA: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    /* q, k, v one after another, each [B][S][H][D] */
    const h3b_tensor q = {dev, (int64_t)S * H * D, H * D, D}, k = {(uint16_t *)dev + n, q.stride_b, q.stride_s, D},
                     v = {(uint16_t *)dev + 2 * n, q.stride_b, q.stride_s, D};
    st = h3b_attention(a, B, S, H, q, k, v, dout, NULL, NULL);
    if (st != H3B_OK || cudaMemcpy(out, dout, n * 2, cudaMemcpyDeviceToHost)) {
        fprintf(stderr, "h3b_attention: %s: %s\n", h3b_status_name(st), h3b_attn_error(a));
        return 1;
    }
    /* exact attention in double */
    double err2 = 0, ref2 = 0;
    double *p = malloc(S * sizeof *p);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < S; i++) {
                const uint16_t *qi = host + (((size_t)b * S + i) * H + h) * D;
                double m = -INFINITY, l = 0;
                for (int j = 0; j < S; j++) {
                    const uint16_t *kj = host + n + (((size_t)b * S + j) * H + h) * D;
                    double dot = 0;
                    for (int d = 0; d < D; d++) dot += (double)from_bf16(qi[d]) * from_bf16(kj[d]);
                    p[j] = dot / sqrt((double)D);
                    if (p[j] > m) m = p[j];
                }
                for (int j = 0; j < S; j++) l += p[j] = exp(p[j] - m);
                for (int d = 0; d < D; d++) {
                    double o = 0;
                    for (int j = 0; j < S; j++) o += p[j] * from_bf16(host[2 * n + (((size_t)b * S + j) * H + h) * D + d]);
                    o /= l;
                    const double got = from_bf16(out[(((size_t)b * S + i) * H + h) * D + d]);
                    err2 += (got - o) * (got - o);
                    ref2 += o * o;
                }
            }
    const double rel = sqrt(err2 / ref2);
    printf("B %d, S %d, H %d: relative RMS error against exact attention %.4f%%\n", B, S, H, 100 * rel);
    free(p);
    free(host);
    free(out);
    cudaFree(dev);
    cudaFree(dout);
    h3b_attn_destroy(a);
    return rel < 0.08 ? 0 : 1;
#else
    h3b_attn_destroy(a);
    printf("skipped: this example was built without the CUDA runtime\n");
    return 77;
#endif
}
