/* fp8_rows.cu — e4m3 quantisation for the FP8 GEMM mode (--gemm fp8): the
 * GEMM weights once at load (one scale per output channel) and the
 * activations the GEMMs read (one scale per token), as cuBLASLt's "outer
 * vector" scale mode takes them; with --gemm-scales blocks one scale per 128 x
 * 128 weight tile and per token per 128 channels (cuBLASLt's block scaling).
 *
 * Numerics (cpu_ref.h, quant_rows): per row, amax over the row's BF16
 * values, s = amax / 448 (1 if amax == 0), code = cvt.rn.satfinite.e4m3(x *
 * (448 / amax)) with an IEEE division. Max is exact in any order, so codes
 * and scales equal the CPU's bit for bit.
 *
 * quant_rows: one block per row, two passes over the row (the second hits
 *   L1/L2: rows are <= 28 KiB); 16-byte loads, 8-byte code stores.
 * swiglu_q8: stage swiglu fused with the quantisation of its output: one
 *   block per token row holds its F outputs in registers (packed BF16-rounded, as
 *   the BF16 stage would store them), reduces amax and writes the codes; the
 *   BF16 u is written too when asked (checks), else never leaves the SM. */
#include "common.cuh"
#include "config.h"
#include "kernels.h"

#define ROWQ_THREADS 256
#define SWQ_MAX_THREADS 1024
/* Rows of up to 14336 (H3's F): 4 chunks per thread, <= 448 threads, and
 * registers capped for 3 rows' blocks per SM -- faster than 8 chunks x 224
 * threads at 62 registers, 4 chunks at 47 registers (2 rows' blocks) or 2
 * chunks x 896 threads at 32 registers (the journal has the figures). Wider rows: 8 chunks per thread, up to 1024
 * threads (F <= 65536). With silu's IEEE division (before h3d_silu_fast)
 * this cap made ptxas spill 16 + 20 bytes around the division's slow-path
 * call; without it no variant spills (sm_89/90a/120). */
#define SWQ_SMALL_THREADS 448

__global__ void __launch_bounds__(ROWQ_THREADS)
    quant_rows_vec_kernel(const uint16_t *__restrict__ x, // [rows][cols] bf16
                          int cols,
                          uint8_t *__restrict__ q,        // [rows][cols] e4m3
                          float *__restrict__ s)          // [rows]
{
    __shared__ float scratch[32];
    const size_t ro = (size_t)blockIdx.x * cols;
    const int nch = cols >> 3;
    float m = 0.0f;
    for (int c = threadIdx.x; c < nch; c += blockDim.x) {
        float v[8];
        h3d_unpack8(h3d_ld16(x + ro + 8 * c), v);
#pragma unroll
        for (int j = 0; j < 8; j++) m = fmaxf(m, fabsf(v[j]));
    }
    const float amax = h3d_block_max(m, scratch), inv = h3d_row_inv(amax);
    if (threadIdx.x == 0) s[blockIdx.x] = h3d_row_scale(amax);
    for (int c = threadIdx.x; c < nch; c += blockDim.x) {
        float v[8];
        h3d_unpack8(h3d_ld16_stream(x + ro + 8 * c), v);
        *(uint2 *)(q + ro + 8 * c) = h3d_e4m3x8(v, inv);
    }
}

__global__ void __launch_bounds__(ROWQ_THREADS)
    quant_rows_scalar_kernel(const uint16_t *__restrict__ x, int cols, uint8_t *__restrict__ q, float *__restrict__ s)
{
    __shared__ float scratch[32];
    const size_t ro = (size_t)blockIdx.x * cols;
    float m = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, fabsf(h3d_bf16(x[ro + c])));
    const float amax = h3d_block_max(m, scratch), inv = h3d_row_inv(amax);
    if (threadIdx.x == 0) s[blockIdx.x] = h3d_row_scale(amax);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        q[ro + c] = (uint8_t)(h3d_e4m3x2(h3d_bf16(x[ro + c]) * inv, 0.0f) & 0xffu);
}

extern "C" int h3k_quant_rows_e4m3(const uint16_t *x, int rows, int cols, uint8_t *q, float *s, h3_stream stream)
{
    if (rows <= 0) return 0;
    if (cols <= 0) return (int)cudaErrorInvalidValue;
    const cudaStream_t st = (cudaStream_t)stream;
    if (cols % 8 == 0 && h3_aligned16(x) && ((uintptr_t)q & 7u) == 0)
        quant_rows_vec_kernel<<<rows, ROWQ_THREADS, 0, st>>>(x, cols, q, s);
    else
        quant_rows_scalar_kernel<<<rows, ROWQ_THREADS, 0, st>>>(x, cols, q, s);
    return (int)cudaGetLastError();
}

/* 1 x 128 block scales: one pass, each half-warp's 16 chunks are one block
 * (h3d_blk128_max); every lane runs every round so the shuffles see the
 * whole warp. */
__global__ void __launch_bounds__(ROWQ_THREADS)
    quant_rows_blk_kernel(const uint16_t *__restrict__ x, int cols, uint8_t *__restrict__ q,
                          float *__restrict__ s) // [ceil(cols / 128)][rows]
{
    const size_t ro = (size_t)blockIdx.x * cols;
    const int nch = cols >> 3;
    for (int base = 0; base < nch; base += blockDim.x) {
        const int c = base + threadIdx.x;
        float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        if (c < nch) h3d_unpack8(h3d_ld16_stream(x + ro + 8 * c), v);
        h3d_store_e4m3x8_blk128(v, c, nch, q + ro, s, gridDim.x, blockIdx.x);
    }
}

/* 128 x 128 tiles (weights, once at load): one block per tile, amax over the
 * tile's values, then its codes; s [ceil(rows / 128)][ld], ld = ceil(cols /
 * 128) rounded up to 4 (cuBLASLt reads 16-byte rows; the pad holds 1).
 * Ragged edge tiles hold what is there. */
__global__ void __launch_bounds__(ROWQ_THREADS)
    quant_tiles_kernel(const uint16_t *__restrict__ x, int rows, int cols, uint8_t *__restrict__ q,
                       float *__restrict__ s, unsigned ld)
{
    __shared__ float scratch[32];
    const int r0 = blockIdx.y * 128, c0 = blockIdx.x * 128;
    const int nr = min(128, rows - r0), nc = min(128, cols - c0);
    float m = 0.0f;
    for (int e = threadIdx.x; e < nr * 128; e += blockDim.x) {
        const int r = e >> 7, c = e & 127;
        if (c < nc) m = fmaxf(m, fabsf(h3d_bf16(x[(size_t)(r0 + r) * cols + c0 + c])));
    }
    const float amax = h3d_block_max(m, scratch), inv = h3d_row_inv(amax);
    if (threadIdx.x == 0) s[(size_t)blockIdx.y * ld + blockIdx.x] = h3d_row_scale(amax);
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x < ld - gridDim.x) s[(size_t)blockIdx.y * ld + gridDim.x + threadIdx.x] = 1.0f;
    for (int e = threadIdx.x; e < nr * 128; e += blockDim.x) {
        const int r = e >> 7, c = e & 127;
        if (c < nc) {
            const size_t i = (size_t)(r0 + r) * cols + c0 + c;
            q[i] = (uint8_t)(h3d_e4m3x2(h3d_bf16(x[i]) * inv, 0.0f) & 0xffu);
        }
    }
}

extern "C" int h3k_quant_blocks_e4m3(const uint16_t *x, int rows, int cols, int brows, uint8_t *q, float *s,
                                     h3_stream stream)
{
    if (rows <= 0) return 0;
    const cudaStream_t st = (cudaStream_t)stream;
    if (brows == 1) {
        if (cols <= 0 || cols % 8 || !h3_aligned16(x) || ((uintptr_t)q & 7u)) return (int)cudaErrorInvalidValue;
        quant_rows_blk_kernel<<<rows, ROWQ_THREADS, 0, st>>>(x, cols, q, s);
    } else if (brows == 128) {
        if (cols <= 0) return (int)cudaErrorInvalidValue;
        const dim3 grid((unsigned)((cols + 127) / 128), (unsigned)((rows + 127) / 128));
        quant_tiles_kernel<<<grid, ROWQ_THREADS, 0, st>>>(x, rows, cols, q, s, (unsigned)h3_fp8_w_scale_ld((size_t)cols));
    } else {
        return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

template <int CPT, bool BLK> /* CPT: 16-byte chunks per thread held in registers; BLK: 1 x 128 block scales */
__global__ void __launch_bounds__(CPT == 4 ? SWQ_SMALL_THREADS : SWQ_MAX_THREADS, CPT == 4 ? 3 : 1)
    swiglu_q8_kernel(const uint16_t *__restrict__ g, // [S][2F] bf16 (gate | up)
                     int F,
                     uint16_t *__restrict__ u,       // [S][F] bf16, may be NULL
                     uint8_t *__restrict__ u8,       // [S][F] e4m3
                     float *__restrict__ su)         // [S]; BLK: [ceil(F / 128)][S]
{
    __shared__ float scratch[32];
    const int s = blockIdx.x, nch = F >> 3;
    const uint16_t *gr = g + (size_t)s * 2 * F;
    /* The row waits for its amax as packed BF16 (4 registers per chunk, not
     * 8): fewer registers, more rows in flight per SM. */
    uint4 pk[CPT];
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < CPT; i++) {
        const int c = threadIdx.x + i * blockDim.x;
        pk[i] = make_uint4(0, 0, 0, 0);
        if (c < nch) {
            float a[8], b[8];
            h3d_unpack8(h3d_ld16_stream(gr + 8 * c), a);
            h3d_unpack8(h3d_ld16_stream(gr + F + 8 * c), b);
#pragma unroll
            for (int j = 0; j < 8; j++) a[j] = h3d_silu_fast(a[j]) * b[j];
            pk[i] = h3d_pack8(a);
            if (u) h3d_st16(u + (size_t)s * F + 8 * c, pk[i]);
            h3d_unpack8(pk[i], a); /* quantise the BF16 value the BF16 stage would store */
#pragma unroll
            for (int j = 0; j < 8; j++) m = fmaxf(m, fabsf(a[j]));
        }
    }
    if (BLK) {
#pragma unroll
        for (int i = 0; i < CPT; i++) {
            const int c = threadIdx.x + i * blockDim.x;
            float a[8];
            h3d_unpack8(pk[i], a); /* 0 past the row */
            h3d_store_e4m3x8_blk128(a, c, nch, u8 + (size_t)s * F, su, gridDim.x, s);
        }
        return;
    }
    const float amax = h3d_block_max(m, scratch), inv = h3d_row_inv(amax);
    if (threadIdx.x == 0) su[s] = h3d_row_scale(amax);
#pragma unroll
    for (int i = 0; i < CPT; i++) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < nch) {
            float a[8];
            h3d_unpack8(pk[i], a);
            *(uint2 *)(u8 + (size_t)s * F + 8 * c) = h3d_e4m3x8(a, inv);
        }
    }
}

extern "C" int h3k_swiglu_q8(const uint16_t *g, int S, int F, uint16_t *u, uint8_t *u8, float *su, int blk,
                             h3_stream stream)
{
    if (S <= 0) return 0;
    const int nch = F / 8;
    /* The row must fit the registers of one block: F <= 8 x 8 x 1024. */
    if (F <= 0 || F % 8 || nch > 8 * SWQ_MAX_THREADS || !h3_aligned16(g) || (u && !h3_aligned16(u)) ||
        ((uintptr_t)u8 & 7u))
        return (int)cudaErrorInvalidValue;
    const int cpt = nch <= 4 * SWQ_SMALL_THREADS ? 4 : 8;
    const int threads = ((nch + cpt - 1) / cpt + 31) / 32 * 32;
    const cudaStream_t st = (cudaStream_t)stream;
    if (cpt == 4 && blk)
        swiglu_q8_kernel<4, true><<<S, threads, 0, st>>>(g, F, u, u8, su);
    else if (cpt == 4)
        swiglu_q8_kernel<4, false><<<S, threads, 0, st>>>(g, F, u, u8, su);
    else if (blk)
        swiglu_q8_kernel<8, true><<<S, threads, 0, st>>>(g, F, u, u8, su);
    else
        swiglu_q8_kernel<8, false><<<S, threads, 0, st>>>(g, F, u, u8, su);
    return (int)cudaGetLastError();
}
