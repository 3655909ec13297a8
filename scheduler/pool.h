/* pool.h: what baton's own tests and benchmarks reach inside a pool (scheduler/pool.c): an
 * instance's runtime, to arm a fault in it or read its counters. Not part of the public API. */
#ifndef BATON_SCHEDULER_POOL_H
#define BATON_SCHEDULER_POOL_H

#include "baton/baton_uv.h"

/* Instance i's runtime, or NULL. */
baton_runtime *baton__pool_instance(baton_pool *pool, int i);

/* The stream priority instance i of n gets under BATON_POOL_PRIORITIES=`levels` (the
 * environment's value): *rank of *of levels, 0 the highest. levels 1: one level per instance
 * (spread); levels >= 2: that many levels, the instances split into as many equal groups in
 * order (2: the first half high, the second low); 0 or n = 1: *of = 0 (the default priority). */
void baton__pool_priority(int i, int n, int levels, int *rank, int *of);

#endif /* BATON_SCHEDULER_POOL_H */
