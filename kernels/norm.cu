/* norm.cu — stages norm1_mod and norm2_mod (RMSNorm over C + adaLN
 * modulation), the latter fused with gate_res1 (DESIGN.md §1 steps 2, 6, 7).
 *
 * rmsnorm_mod: out = bf16(x * rs * w * (1 + scale[tag]) + shift[tag]),
 *   rs = 1 / sqrtf(mean(x^2) + eps), evaluated left to right in FP32 with the
 *   final "* (1 + scale) + shift" as one fma (what GCC's contraction makes of
 *   the CPU twin, cpu_ref/norm.c); sqrtf and the divisions are IEEE.
 * fused: xo = bf16(x + gate[tag] * y) (fma, as cpu_ref/residual.c) is written
 *   once and normalised from the BF16-rounded value, exactly as the CPU's
 *   gate_residual followed by rmsnorm_mod on xo.
 * Layout: x, y, xo, out [S][C] bf16; w [C] bf16; mod [M][6][C] bf16; tags [S].
 * One block per token row; the row stays in registers between the sum of
 * squares and the output (16-byte loads/stores, C = 5376 = 672 chunks of 8:
 * 192 threads x <= 4 chunks). Only the order of the FP32 sum of squares
 * differs from the CPU (lane tree + warp tree). A scalar kernel covers C not
 * a multiple of 8, C > 32768 or unaligned pointers.
 * _q8 variants (FP8 GEMM mode): the BF16-rounded output row is also
 * quantised to e4m3 with one scale per token (fp8_rows.cu's convention), or
 * with blk one per token per 128 columns, for the next GEMM; the BF16 output
 * is then optional (NULL: not written). */
#include "common.cuh"
#include "config.h"
#include "kernels.h"

#define NORM_CPT 4 /* 16-byte chunks per thread (registers) */

template <bool RES, bool Q8, bool BLK>
__global__ void __maxnreg__(48) /* 48 x 192 threads: 6 blocks per SM at C = 5376 (a cap of 40 spills) */
    norm_mod_vec_kernel(const uint16_t *__restrict__ x,    // [S][C] bf16
                        const uint16_t *__restrict__ y,    // [S][C] bf16 (RES)
                        const uint16_t *__restrict__ mod,  // [M][6][C] bf16
                        const int32_t *__restrict__ tags,  // [S]
                        int C, int slot_gate,
                        uint16_t *__restrict__ xo,         // [S][C] bf16 (RES)
                        const uint16_t *__restrict__ w,    // [C] bf16
                        float eps, int slot_shift, int slot_scale,
                        uint16_t *__restrict__ out,        // [S][C] bf16 (may be NULL with Q8)
                        uint8_t *__restrict__ out8,        // [S][C] e4m3 (Q8)
                        float *__restrict__ s8)            // (Q8) [S] row scales; BLK: [ceil(C / 128)][S]
{
    __shared__ float scratch[32];
    const int s = blockIdx.x, nch = C >> 3;
    const size_t ro = (size_t)s * C;
    const uint16_t *mt = mod + (size_t)tags[s] * H3_SLOTS * C; /* [6][C] of this modality */
    /* The row waits for its sum of squares (and with Q8 for its amax) as
     * packed BF16, which every value held is (x, the rounded residual, the
     * rounded output): 4 registers per chunk instead of 8. With the 48-register
     * cap 6 rows' blocks fit an SM instead of 5 (60 registers), which made
     * norm1_mod_q8 and gate_res1+norm2_mod_q8 about 5% faster (the journal has
     * the figures). */
    uint4 pk[NORM_CPT];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < NORM_CPT; i++) {
        const int c = threadIdx.x + i * blockDim.x;
        pk[i] = make_uint4(0, 0, 0, 0);
        if (c < nch) {
            pk[i] = h3d_ld16_stream(x + ro + 8 * c);
            float v[8];
            h3d_unpack8(pk[i], v);
            if (RES) {
                float yy[8], g[8];
                h3d_unpack8(h3d_ld16_stream(y + ro + 8 * c), yy);
                h3d_unpack8(h3d_ld16(mt + (size_t)slot_gate * C + 8 * c), g);
#pragma unroll
                for (int j = 0; j < 8; j++) v[j] = __fmaf_rn(g[j], yy[j], v[j]);
                pk[i] = h3d_pack8(v);
                h3d_st16(xo + ro + 8 * c, pk[i]);
                h3d_unpack8(pk[i], v); /* normalise the stored BF16 residual */
            }
#pragma unroll
            for (int j = 0; j < 8; j++) ss += v[j] * v[j];
        }
    }
    ss = h3d_block_sum(ss, scratch);
    const float rs = 1.0f / sqrtf(ss / (float)C + eps);
    float m = 0.0f; /* Q8: amax of the BF16 outputs */
#pragma unroll
    for (int i = 0; i < NORM_CPT; i++) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < nch) {
            float v[8], ww[8], sh[8], sc[8], o[8];
            h3d_unpack8(pk[i], v);
            h3d_unpack8(h3d_ld16(w + 8 * c), ww);
            h3d_unpack8(h3d_ld16(mt + (size_t)slot_shift * C + 8 * c), sh);
            h3d_unpack8(h3d_ld16(mt + (size_t)slot_scale * C + 8 * c), sc);
#pragma unroll
            for (int j = 0; j < 8; j++) o[j] = __fmaf_rn(v[j] * rs * ww[j], 1.0f + sc[j], sh[j]);
            pk[i] = h3d_pack8(o);
            if (!Q8 || out) h3d_st16(out + ro + 8 * c, pk[i]);
            if (Q8 && !BLK) { /* amax of the BF16 output the BF16 stage would store */
                h3d_unpack8(pk[i], o);
#pragma unroll
                for (int j = 0; j < 8; j++) m = fmaxf(m, fabsf(o[j]));
            }
        }
    }
    if (Q8 && BLK) {
        /* block scales: one per token per 128 columns (h3d_blk128_max) */
#pragma unroll
        for (int i = 0; i < NORM_CPT; i++) {
            const int c = threadIdx.x + i * blockDim.x;
            float o[8];
            h3d_unpack8(pk[i], o); /* 0 past the row */
            h3d_store_e4m3x8_blk128(o, c, nch, out8 + ro, s8, gridDim.x, s);
        }
    } else if (Q8) {
        /* FP8 GEMM mode: the row's BF16 outputs -> e4m3 codes with one scale
         * per token (fp8_rows.cu's convention, cpu_ref quant_rows). */
        const float amax = h3d_block_max(m, scratch), inv = h3d_row_inv(amax);
        if (threadIdx.x == 0) s8[s] = h3d_row_scale(amax);
#pragma unroll
        for (int i = 0; i < NORM_CPT; i++) {
            const int c = threadIdx.x + i * blockDim.x;
            if (c < nch) {
                float o[8];
                h3d_unpack8(pk[i], o);
                *(uint2 *)(out8 + ro + 8 * c) = h3d_e4m3x8(o, inv);
            }
        }
    }
}

/* Scalar fallback: same numerics; each thread re-reads only elements it wrote itself. */
template <bool RES>
__global__ void __launch_bounds__(256)
    norm_mod_scalar_kernel(const uint16_t *__restrict__ x, const uint16_t *__restrict__ y,
                           const uint16_t *__restrict__ mod, const int32_t *__restrict__ tags, int C, int slot_gate,
                           uint16_t *xo, const uint16_t *__restrict__ w, float eps, int slot_shift, int slot_scale,
                           uint16_t *__restrict__ out)
{
    __shared__ float scratch[32];
    const int s = blockIdx.x;
    const size_t ro = (size_t)s * C;
    const uint16_t *mt = mod + (size_t)tags[s] * H3_SLOTS * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = h3d_bf16(x[ro + c]);
        if (RES) {
            v = h3d_round_bf16(__fmaf_rn(h3d_bf16(mt[(size_t)slot_gate * C + c]), h3d_bf16(y[ro + c]), v));
            xo[ro + c] = h3d_to_bf16(v);
        }
        ss += v * v;
    }
    ss = h3d_block_sum(ss, scratch);
    const float rs = 1.0f / sqrtf(ss / (float)C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float v = RES ? h3d_bf16(xo[ro + c]) : h3d_bf16(x[ro + c]);
        const float o = __fmaf_rn(v * rs * h3d_bf16(w[c]), 1.0f + h3d_bf16(mt[(size_t)slot_scale * C + c]),
                                  h3d_bf16(mt[(size_t)slot_shift * C + c]));
        out[ro + c] = h3d_to_bf16(o);
    }
}

template <bool RES>
static int launch_norm_mod(const uint16_t *x, const uint16_t *y, const uint16_t *mod, const int32_t *tags, int S,
                           int C, int slot_gate, uint16_t *xo, const uint16_t *w, float eps, int slot_shift,
                           int slot_scale, uint16_t *out, uint8_t *out8, float *s8, int blk, cudaStream_t st)
{
    if (S <= 0) return 0;
    if (C <= 0) return (int)cudaErrorInvalidValue;
    const int nch = C / 8;
    bool vec = C % 8 == 0 && nch <= NORM_CPT * 1024 && h3_aligned16(x) && h3_aligned16(mod) && h3_aligned16(w) &&
               h3_aligned16(out);
    if (RES) vec = vec && h3_aligned16(y) && h3_aligned16(xo);
    if (out8) {
        /* The FP8 output needs the row in registers: the vector path only
         * (C a multiple of 8, <= 32768: every H3 config). */
        if (!vec || ((uintptr_t)out8 & 7u) || !s8) return (int)cudaErrorInvalidValue;
        int threads = (nch + NORM_CPT - 1) / NORM_CPT;
        threads = (threads + 31) / 32 * 32;
        if (blk)
            norm_mod_vec_kernel<RES, true, true><<<S, threads, 0, st>>>(x, y, mod, tags, C, slot_gate, xo, w, eps,
                                                                        slot_shift, slot_scale, out, out8, s8);
        else
            norm_mod_vec_kernel<RES, true, false><<<S, threads, 0, st>>>(x, y, mod, tags, C, slot_gate, xo, w, eps,
                                                                         slot_shift, slot_scale, out, out8, s8);
        return (int)cudaGetLastError();
    }
    if (!out) return (int)cudaErrorInvalidValue;
    if (vec) {
        int threads = (nch + NORM_CPT - 1) / NORM_CPT;
        threads = (threads + 31) / 32 * 32;
        norm_mod_vec_kernel<RES, false, false><<<S, threads, 0, st>>>(x, y, mod, tags, C, slot_gate, xo, w, eps, slot_shift,
                                                               slot_scale, out, nullptr, nullptr);
    } else {
        norm_mod_scalar_kernel<RES><<<S, 256, 0, st>>>(x, y, mod, tags, C, slot_gate, xo, w, eps, slot_shift,
                                                       slot_scale, out);
    }
    return (int)cudaGetLastError();
}

extern "C" int h3k_rmsnorm_mod(const uint16_t *x, const uint16_t *w, const uint16_t *mod, const int32_t *tags, int S,
                               int C, float eps, int slot_shift, int slot_scale, uint16_t *out, h3_stream stream)
{
    return launch_norm_mod<false>(x, nullptr, mod, tags, S, C, 0, nullptr, w, eps, slot_shift, slot_scale, out,
                                  nullptr, nullptr, 0, (cudaStream_t)stream);
}

extern "C" int h3k_rmsnorm_mod_q8(const uint16_t *x, const uint16_t *w, const uint16_t *mod, const int32_t *tags,
                                  int S, int C, float eps, int slot_shift, int slot_scale, uint16_t *out,
                                  uint8_t *out8, float *s8, int blk, h3_stream stream)
{
    if (!out8) return (int)cudaErrorInvalidValue;
    return launch_norm_mod<false>(x, nullptr, mod, tags, S, C, 0, nullptr, w, eps, slot_shift, slot_scale, out,
                                  out8, s8, blk, (cudaStream_t)stream);
}

extern "C" int h3k_gate_residual_norm_mod(const uint16_t *x, const uint16_t *y, const uint16_t *mod,
                                          const int32_t *tags, int S, int C, int slot_gate, uint16_t *xo,
                                          const uint16_t *w2, float eps, int slot_shift, int slot_scale, uint16_t *b,
                                          h3_stream stream)
{
    return launch_norm_mod<true>(x, y, mod, tags, S, C, slot_gate, xo, w2, eps, slot_shift, slot_scale, b,
                                 nullptr, nullptr, 0, (cudaStream_t)stream);
}

extern "C" int h3k_gate_residual_norm_mod_q8(const uint16_t *x, const uint16_t *y, const uint16_t *mod,
                                             const int32_t *tags, int S, int C, int slot_gate, uint16_t *xo,
                                             const uint16_t *w2, float eps, int slot_shift, int slot_scale,
                                             uint16_t *b, uint8_t *b8, float *sb, int blk, h3_stream stream)
{
    if (!b8) return (int)cudaErrorInvalidValue;
    return launch_norm_mod<true>(x, y, mod, tags, S, C, slot_gate, xo, w2, eps, slot_shift, slot_scale, b, b8, sb,
                                 blk, (cudaStream_t)stream);
}
