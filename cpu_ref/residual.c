/* residual.c — stages gate_res1 / gate_res2: x + gate[tag] * y (DESIGN.md §1
 * steps 6 and 9). out = bf16(x + gate * y) in FP32 (one rounding). */
#include "cpu_internal.h"
#include "cpu_ref.h"

void cpu_gate_residual(const uint16_t *x, const uint16_t *y, const uint16_t *mod, const int32_t *tags, int S, int C,
                       int slot_gate, const int *rows, int nrows, uint16_t *out)
{
    (void)S;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < nrows; r++) {
        const int s = cpu_row(rows, r);
        const uint16_t *xr = x + (size_t)s * C, *yr = y + (size_t)s * C; /* [C] bf16 */
        const uint16_t *gate = mod + ((size_t)tags[s] * H3_SLOTS + slot_gate) * C; /* [C] bf16 */
        uint16_t *o = out + (size_t)r * C;                                          /* [C] bf16 */
        for (int c = 0; c < C; c++)
            o[c] = h3_f32_to_bf16(h3_bf16_to_f32(xr[c]) + h3_bf16_to_f32(gate[c]) * h3_bf16_to_f32(yr[c]));
    }
}
