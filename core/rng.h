/* rng.h: the seeded generators (core/rng.c): splitmix64 and the machine-independent normal and
 * uniform fills of the plan format. One copy for the plan's initialisers, the CLI (through the
 * public baton_fill_*) and the tests. */
#ifndef BATON_CORE_RNG_H
#define BATON_CORE_RNG_H

#include <stdint.h>

#include "baton/baton.h"

/* The next value of a splitmix64 stream; advances *state. */
uint64_t baton__rng_splitmix64(uint64_t *state);
/* n seeded N(mean, std) values, stored as dt (integers truncate and saturate). Large fills run in
 * stretches over the CPU pool, with the bits of one pass (as the uniform fill). */
void baton__rng_fill_normal(void *dst, baton_dtype dt, int64_t n, uint64_t seed, double mean,
                            double std);
/* n seeded U[low, high) values, stored as dt. */
void baton__rng_fill_uniform(void *dst, baton_dtype dt, int64_t n, uint64_t seed, double low,
                             double high);

#endif /* BATON_CORE_RNG_H */
