/* sm90_grid.h — the three-consumer kernel's grid: which CTA does which
 * queries, chosen so that the last wave of CTAs does not leave most SMs idle.
 * Plain C (host and device), so that a CPU test checks it.
 *
 * A whole CTA owns 192 queries of one head (three consumer warpgroups of 64
 * rows) for every key tile. One fits per SM, and all take the same time T,
 * so H * ceil(S / 192) of them run in waves of `sms`, and the last wave,
 * and the last tile of each head when S is not a multiple of 192, keep SMs
 * idle: 9.33 waves at S = 4096, H = 56 on 132 SMs cost 10 T.
 * A split CTA owns 64 queries, and its three warpgroups each take a third
 * of the key tiles and merge (m, l, O) in shared memory at the end: ~T / 3.
 * The grid: `full` whole CTAs first (head-major, as the whole 192-row tiles
 * of each head), then `split` split CTAs: the last `conv` whole tiles as
 * three split CTAs each, then each head's ragged rows (the S mod 192 past
 * its last whole tile) as `nrag` split CTAs. CTAs start in index order as
 * SMs free up, so the split CTAs fill the last wave. `conv` is the smallest
 * count that minimises the estimated time in thirds of T (`thirds`).
 * Without splitting (fewer than 3 key tiles, or the caller says no) the grid
 * is the plain one: `full` = H * ceil(S / 192) whole CTAs, the last of each
 * head ragged.
 * A split row's P8 is rounded against its part's running max, not the
 * row's: the CPU emulation models that (cpu_ref.h, cpu_attn_split) from the
 * plan the launch runs (h3k_attn_fp8_sm90_grid, kernels.h) and
 * h3_sm90_grid_row_split. */
#ifndef H3_SM90_GRID_H
#define H3_SM90_GRID_H

#ifdef __CUDACC__
#define H3_HD __host__ __device__ __forceinline__
#else
#define H3_HD static inline
#endif

typedef struct h3_sm90_grid { /* tagged: kernels.h declares it without this header */
    int tiles;  /* 192-row tiles per head that run as whole CTAs (counting the ragged one when not split) */
    int full;   /* whole CTAs: blocks [0, full) */
    int conv;   /* whole tiles (the last ones of the head-major order) run as 3 split CTAs each */
    int nrag;   /* split CTAs per head for its ragged rows: ceil((S mod 192) / 64) */
    int split;  /* split CTAs: blocks [full, full + split) = 3 conv + H nrag */
    int thirds; /* the estimated time, in thirds of a whole CTA's */
} h3_sm90_grid;

/* One CTA's work: head h, queries [row0, row0 + 192) (whole) or [row0,
 * row0 + 64) (split), rows >= S ignored. */
typedef struct {
    int h, row0, split;
} h3_sm90_cta;

/* Time in thirds of T of `full` whole CTAs then `split` thirds on `sms`
 * SMs, each CTA started on the first free SM: the whole CTAs leave `low`
 * SMs a wave behind, which take three split CTAs each before the rest are
 * spread over every SM. */
static inline int h3_sm90_grid_thirds(int full, int split, int sms)
{
    const int q = full / sms, r = full % sms, low = sms - r;
    if (r == 0) return 3 * q + (split + sms - 1) / sms;
    if (split <= 3 * low) return 3 * q + 3;
    return 3 * q + 3 + (split - 3 * low + sms - 1) / sms;
}

/* The grid for S queries, H heads, `sms` SMs; may_split = 0 gives the plain
 * grid. */
static inline h3_sm90_grid h3_sm90_grid_plan(int S, int H, int sms, int may_split)
{
    h3_sm90_grid g = {0, 0, 0, 0, 0, 0};
    const int nkt = (S + 127) / 128;
    if (!may_split || nkt < 3 || sms < 1) {
        g.tiles = (S + 191) / 192;
        g.full = H * g.tiles;
        g.thirds = 3 * ((g.full + (sms > 0 ? sms : 1) - 1) / (sms > 0 ? sms : 1));
        return g;
    }
    g.tiles = S / 192;
    g.nrag = (S % 192 + 63) / 64;
    const int whole = H * g.tiles, cmax = whole < sms ? whole : sms;
    g.thirds = -1;
    for (int c = 0; c <= cmax; ++c) {
        const int t = h3_sm90_grid_thirds(whole - c, 3 * c + H * g.nrag, sms);
        if (g.thirds < 0 || t < g.thirds) g.thirds = t, g.conv = c;
    }
    g.full = whole - g.conv;
    g.split = 3 * g.conv + H * g.nrag;
    return g;
}

/* What CTA b of grid g does. */
H3_HD h3_sm90_cta h3_sm90_grid_cta(const h3_sm90_grid *g, int b)
{
    h3_sm90_cta c;
    if (b < g->full) {
        c.h = b / g->tiles, c.row0 = b % g->tiles * 192, c.split = 0;
        return c;
    }
    int p = b - g->full;
    c.split = 1;
    if (p < 3 * g->conv) {
        const int item = g->full + p / 3;
        c.h = item / g->tiles, c.row0 = item % g->tiles * 192 + p % 3 * 64;
        return c;
    }
    p -= 3 * g->conv;
    c.h = p / g->nrag, c.row0 = g->tiles * 192 + p % g->nrag * 64;
    return c;
}

/* Whether query row i (< S) of head h runs in a split CTA of grid g (the
 * CTA h3_sm90_grid_cta gives it says split): the ragged rows past the
 * whole tiles (only a split grid has any: the plain grid's `tiles` counts
 * the ragged tile) and the rows of the converted tiles, the last ones of the
 * head-major order. */
H3_HD int h3_sm90_grid_row_split(const h3_sm90_grid *g, int h, int i)
{
    return i >= g->tiles * 192 || h * g->tiles + i / 192 >= g->full;
}

/* The same with the grid as the context pointer: the row predicate of the
 * CPU emulation's split description (cpu_ref.h cpu_attn_split). */
H3_HD int h3_sm90_grid_row_split_ctx(const void *g, int h, int i)
{
    return h3_sm90_grid_row_split((const h3_sm90_grid *)g, h, i);
}

/* The first of the nkt key tiles that part j (0..2) of a split CTA takes
 * (first(3) = nkt): consumer warpgroup j runs tiles [first(j), first(j +
 * 1)) from a fresh running max, and the producer loads them into its ring.
 * Every part has a tile when nkt >= 3, the plan's condition for
 * splitting. */
H3_HD int h3_sm90_split_first_tile(int j, int nkt) { return j * nkt / 3; }

#endif
