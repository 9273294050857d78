/* rng.h — deterministic counter-based random numbers (splitmix64), so that a
 * generator writes the same bytes for the same seed on any machine and any
 * thread count: value i of stream s depends only on (seed, s, i). */
#ifndef H3_RNG_H
#define H3_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t h3_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1), never 0 (safe for log). */
static inline double h3_uniform(uint64_t seed, uint64_t stream, uint64_t i)
{
    uint64_t z = h3_mix64(h3_mix64(seed ^ h3_mix64(stream)) + i);
    return ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Standard normal, Box-Muller on two counter-derived uniforms. */
static inline double h3_normal(uint64_t seed, uint64_t stream, uint64_t i)
{
    double u1 = h3_uniform(seed, stream, 2 * i), u2 = h3_uniform(seed, stream, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A small sequential generator for tests. */
typedef struct { uint64_t s; } h3_rng;
static inline uint64_t h3_rng_next(h3_rng *r) { return h3_mix64(r->s++); }
static inline double h3_rng_uniform(h3_rng *r) { return ((double)(h3_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static inline double h3_rng_normal(h3_rng *r)
{
    double u1 = h3_rng_uniform(r), u2 = h3_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
