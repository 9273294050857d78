/* swiglu.c — stage swiglu: u = silu(gate) * up on fc1's output (DESIGN.md §1
 * step 8). g rows are [gate (F) | up (F)]; u = bf16(silu(g[f]) * g[F + f]),
 * silu in FP32 (cpu_silu). */
#include "cpu_internal.h"
#include "cpu_ref.h"

void cpu_swiglu(const uint16_t *g, int S, int F, const int *rows, int nrows, uint16_t *u)
{
    (void)S;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < nrows; r++) {
        const uint16_t *gr = g + (size_t)cpu_row(rows, r) * 2 * F; /* [2F] bf16 */
        uint16_t *ur = u + (size_t)r * F;                          /* [F] bf16 */
        for (int f = 0; f < F; f++) ur[f] = h3_f32_to_bf16(cpu_silu(h3_bf16_to_f32(gr[f])) * h3_bf16_to_f32(gr[F + f]));
    }
}
