/* test_stats.h — what the numeric tests share: their seed, and error
 * statistics of an output against a reference.
 *
 * Seeds: every test runs a fixed seed by default, so CTest is repeatable;
 * H3_TEST_SEED=N runs seed N, H3_TEST_SEED=random a fresh one (time-based).
 * The seed is printed, so a failure can be replayed. */
#ifndef H3_TEST_STATS_H
#define H3_TEST_STATS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define H3T_DEFAULT_SEED 1

static inline uint64_t h3t_seed(const char *test)
{
    const char *es = getenv("H3_TEST_SEED");
    uint64_t seed = H3T_DEFAULT_SEED;
    if (es && !strcmp(es, "random"))
        seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    else if (es && *es)
        seed = strtoull(es, NULL, 0);
    printf("%s: seed %llu (H3_TEST_SEED=%llu repeats it; H3_TEST_SEED=random draws a fresh one)\n", test,
           (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

/* Error of got against ref, element by element: NaN/Inf counted first, then
 * squared error, squared reference, max abs error, and the elements over a
 * tolerance (tol = INFINITY: none). */
typedef struct {
    double max_abs, se, sref, n_bad, n;
    int nonfinite;
} h3t_stats;

static inline void h3t_acc(h3t_stats *s, double got, double ref, double tol)
{
    if (!isfinite(got)) {
        s->nonfinite++;
        s->n_bad++;
        return;
    }
    const double e = fabs(got - ref);
    if (e > s->max_abs) s->max_abs = e;
    s->se += e * e;
    s->sref += ref * ref;
    s->n++;
    if (e > tol) s->n_bad++;
}

/* ||got - ref|| / ||ref||, or ||got - ref|| where the reference is all 0 */
static inline double h3t_rel_rms(const h3t_stats *s) { return s->sref > 0 ? sqrt(s->se / s->sref) : sqrt(s->se); }

#endif
