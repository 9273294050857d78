/* adaln.c — stage adaln: mod = adaln_proj(silu(temb)) (DESIGN.md §1 step 1).
 *
 * mod[j] = bf16(sum_k W[j][k] * silu(temb[k]) + b[j]); silu stays FP32 (not
 * rounded to BF16), the dot product accumulates in FP32, the bias is added
 * after the sum. One GEMV of M*6*C rows, parallel over rows. */
#include <stdlib.h>

#include "cpu_internal.h"
#include "cpu_ref.h"

void cpu_adaln(const h3_config *cfg, const float *temb, const uint16_t *W, const uint16_t *b, uint16_t *mod)
{
    const int T = cfg->temb, R = h3_mod_width(cfg);
    float st[T > 0 ? T : 1]; /* [T] silu(temb) */
    for (int k = 0; k < T; k++) st[k] = cpu_silu(temb[k]);
#pragma omp parallel for schedule(static)
    for (int j = 0; j < R; j++) {
        const uint16_t *wr = W + (size_t)j * T; /* [T] bf16 */
        float acc = 0.0f;
        for (int k = 0; k < T; k++) acc += h3_bf16_to_f32(wr[k]) * st[k];
        mod[j] = h3_f32_to_bf16(acc + h3_bf16_to_f32(b[j]));
    }
}
