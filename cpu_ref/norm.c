/* norm.c — stages norm1_mod / norm2_mod: RMSNorm over C, then the adaLN
 * modulation of the token's modality (DESIGN.md §1 steps 2 and 7).
 *
 * out = bf16(x * rsqrt(mean(x^2) + eps) * w * (1 + scale[tag]) + shift[tag]),
 * evaluated left to right in FP32; mean(x^2) accumulates in FP32. */
#include <math.h>

#include "cpu_internal.h"
#include "cpu_ref.h"

void cpu_rmsnorm_mod(const uint16_t *x, const uint16_t *w, const uint16_t *mod, const int32_t *tags, int S, int C,
                     float eps, int slot_shift, int slot_scale, const int *rows, int nrows, uint16_t *out)
{
    (void)S;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < nrows; r++) {
        const int s = cpu_row(rows, r);
        const uint16_t *xr = x + (size_t)s * C;                               /* [C] bf16 */
        const uint16_t *shift = mod + ((size_t)tags[s] * H3_SLOTS + slot_shift) * C; /* [C] bf16 */
        const uint16_t *scale = mod + ((size_t)tags[s] * H3_SLOTS + slot_scale) * C; /* [C] bf16 */
        uint16_t *o = out + (size_t)r * C;                                    /* [C] bf16 */
        float ss = 0.0f;
        for (int c = 0; c < C; c++) {
            float v = h3_bf16_to_f32(xr[c]);
            ss += v * v;
        }
        const float rs = 1.0f / sqrtf(ss / (float)C + eps);
        for (int c = 0; c < C; c++) {
            float v = h3_bf16_to_f32(xr[c]) * rs * h3_bf16_to_f32(w[c]) * (1.0f + h3_bf16_to_f32(scale[c])) +
                      h3_bf16_to_f32(shift[c]);
            o[c] = h3_f32_to_bf16(v);
        }
    }
}
