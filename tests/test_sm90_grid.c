/* test_sm90_grid.c — the Hopper three-consumer kernel's grid (kernels/attn/
 * sm90_grid.h), on the CPU:
 *   - every query row of every head is owned by exactly one CTA, whole CTAs
 *     on 192-row tiles, split ones on 64-row blocks, none past the head;
 *   - h3_sm90_grid_row_split says split exactly for the rows whose CTA is
 *     split (what the CPU emulation is told, cpu_ref.h cpu_attn_split);
 *   - the three parts of a split CTA's key tiles (h3_sm90_split_first_tile)
 *     are contiguous, in order, cover every tile and are never empty when
 *     the plan splits (nkt >= 3);
 *   - the plan's time estimate equals a simulation of the hardware's order
 *     (each CTA in index order onto the SM that frees first; a whole CTA 3
 *     thirds, a split one 1), written here independently of the header's
 *     closed form;
 *   - no other count of converted tiles gives a shorter simulated time, and
 *     the plan is never slower than the plain grid;
 *   - the plain grid (no split: under 3 key tiles or when asked) is
 *     H * ceil(S / 192) whole CTAs;
 *   - the figures docs/perf.md quotes: S = 4096 / 8192 / 30272, H = 56 on
 *     132 SMs take 28 / 55 / 201 thirds where the plain grid takes 30 / 57
 *     / 204. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/sm90_grid.h"

static int g_fail;
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            printf("FAIL: " __VA_ARGS__);                                                                              \
            printf("\n");                                                                                              \
            g_fail = 1;                                                                                                \
        }                                                                                                              \
    } while (0)

/* Thirds of T for CTAs of the given costs started in order on the SM that
 * frees first (lowest index among ties, as any choice gives the same time). */
static int simulate(const int *cost, int n, int sms)
{
    int *busy = calloc((size_t)sms, sizeof *busy), end = 0;
    for (int i = 0; i < n; ++i) {
        int best = 0;
        for (int s = 1; s < sms; ++s)
            if (busy[s] < busy[best]) best = s;
        busy[best] += cost[i];
        if (busy[best] > end) end = busy[best];
    }
    free(busy);
    return end;
}

/* Simulated time of grid g (whole 3, split 1). */
static int simulate_grid(const h3_sm90_grid *g, int sms)
{
    const int n = g->full + g->split;
    int *cost = malloc((size_t)(n > 0 ? n : 1) * sizeof *cost);
    for (int b = 0; b < n; ++b) cost[b] = b < g->full ? 3 : 1;
    const int t = simulate(cost, n, sms);
    free(cost);
    return t;
}

/* Each row of each head owned once, and h3_sm90_grid_row_split says split
 * exactly where its CTA is split; returns 0 on a failure (reported). */
static int check_cover(const h3_sm90_grid *g, int S, int H)
{
    unsigned char *own = calloc((size_t)S * (size_t)H, 1), *split = calloc((size_t)S * (size_t)H, 1);
    int ok = 1;
    for (int b = 0; b < g->full + g->split && ok; ++b) {
        const h3_sm90_cta c = h3_sm90_grid_cta(g, b);
        const int rows = c.split ? 64 : 192;
        if (c.h < 0 || c.h >= H || c.row0 < 0 || c.row0 >= S || c.row0 % 64 != 0 || c.split != (b >= g->full)) {
            CHECK(0, "S=%d H=%d: CTA %d -> head %d row %d split %d out of range", S, H, b, c.h, c.row0, c.split);
            ok = 0;
            break;
        }
        for (int r = c.row0; r < c.row0 + rows && r < S; ++r) {
            ++own[(size_t)c.h * S + r];
            split[(size_t)c.h * S + r] = (unsigned char)c.split;
        }
    }
    for (size_t i = 0; ok && i < (size_t)S * H; ++i)
        if (own[i] != 1) {
            CHECK(0, "S=%d H=%d: row %zu of head %zu owned by %d CTAs", S, H, i % (size_t)S, i / (size_t)S, own[i]);
            ok = 0;
        }
    for (size_t i = 0; ok && i < (size_t)S * H; ++i) {
        const int h = (int)(i / (size_t)S), r = (int)(i % (size_t)S), says = h3_sm90_grid_row_split(g, h, r) != 0;
        if (says != split[i]) {
            CHECK(0, "S=%d H=%d: row %d of head %d: its CTA is %s, h3_sm90_grid_row_split says %s", S, H, r, h,
                  split[i] ? "split" : "whole", says ? "split" : "whole");
            ok = 0;
        }
    }
    free(own);
    free(split);
    return ok;
}

/* The parts of nkt key tiles: part j from h3_sm90_split_first_tile(j) to
 * that of j + 1, from tile 0 to nkt, none empty when nkt >= 3. */
static void check_parts(int nkt)
{
    CHECK(h3_sm90_split_first_tile(0, nkt) == 0 && h3_sm90_split_first_tile(3, nkt) == nkt,
          "nkt=%d: the parts run from tile %d to %d", nkt, h3_sm90_split_first_tile(0, nkt),
          h3_sm90_split_first_tile(3, nkt));
    for (int j = 0; j < 3; ++j) {
        const int n = h3_sm90_split_first_tile(j + 1, nkt) - h3_sm90_split_first_tile(j, nkt);
        CHECK(n >= (nkt >= 3 ? 1 : 0), "nkt=%d: part %d has %d tiles", nkt, j, n);
    }
}

static void check_plan(int S, int H, int sms)
{
    const h3_sm90_grid g = h3_sm90_grid_plan(S, H, sms, 1), p = h3_sm90_grid_plan(S, H, sms, 0);
    const int nkt = (S + 127) / 128;
    check_parts(nkt);
    CHECK(p.split == 0 && p.full == H * ((S + 191) / 192), "S=%d H=%d: the plain grid has %d + %d CTAs", S, H, p.full,
          p.split);
    if (!check_cover(&g, S, H) || !check_cover(&p, S, H)) return;
    if (nkt < 3) CHECK(g.split == 0 && g.full == p.full, "S=%d: under 3 key tiles the grid must be plain", S);
    const int t = simulate_grid(&g, sms), tp = simulate_grid(&p, sms);
    CHECK(t == g.thirds, "S=%d H=%d sms=%d: plan says %d thirds, the simulation %d", S, H, sms, g.thirds, t);
    CHECK(tp == p.thirds, "S=%d H=%d sms=%d: plain grid says %d thirds, the simulation %d", S, H, sms, p.thirds, tp);
    CHECK(t <= tp, "S=%d H=%d sms=%d: the plan (%d thirds) is slower than the plain grid (%d)", S, H, sms, t, tp);
    if (g.split == 0 && g.conv == 0 && nkt < 3) return;
    /* no other conversion count does better */
    const int whole = H * g.tiles;
    for (int c = 0; c <= whole && c <= sms; ++c) {
        h3_sm90_grid o = g;
        o.conv = c, o.full = whole - c, o.split = 3 * c + H * g.nrag;
        const int to = simulate_grid(&o, sms);
        CHECK(to >= t, "S=%d H=%d sms=%d: converting %d tiles takes %d thirds, the plan's %d takes %d", S, H, sms, c,
              to, g.conv, t);
        if (to < t) break;
    }
}

int main(void)
{
    static const int heads[] = {1, 2, 3, 7, 8, 56};
    static const int sms[] = {1, 2, 7, 78, 114, 132};
    int n = 0;
    for (int S = 1; S <= 1200; S += (S < 400 ? 1 : 13))
        for (int hi = 0; hi < 6; ++hi)
            for (int si = 0; si < 6; ++si, ++n) check_plan(S, heads[hi], sms[si]);
    static const int big[] = {4096, 8192, 16384, 30271, 30272, 30273, 75600};
    for (int i = 0; i < 7; ++i)
        for (int si = 0; si < 6; ++si, ++n) check_plan(big[i], 56, sms[si]);
    static const struct {
        int S, plan, plain;
    } quoted[] = {{4096, 28, 30}, {8192, 55, 57}, {30272, 201, 204}};
    for (int i = 0; i < 3; ++i) {
        const h3_sm90_grid g = h3_sm90_grid_plan(quoted[i].S, 56, 132, 1), p = h3_sm90_grid_plan(quoted[i].S, 56, 132, 0);
        CHECK(g.thirds == quoted[i].plan && p.thirds == quoted[i].plain, "S=%d H=56 on 132 SMs: %d / %d thirds, quoted %d / %d",
              quoted[i].S, g.thirds, p.thirds, quoted[i].plan, quoted[i].plain);
    }
    if (g_fail) return 1;
    printf("ok: %d grids (S, H, SMs): rows owned once, split rows as h3_sm90_grid_row_split says, key-tile parts "
           "cover, estimates = simulation, no better conversion count\n",
           n);
    return 0;
}
