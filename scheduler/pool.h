/* pool.h: what baton's own tests and benchmarks reach inside a pool (scheduler/pool.c): an
 * instance's runtime, to arm a fault in it or read its counters. Not part of the public API. */
#ifndef BATON_SCHEDULER_POOL_H
#define BATON_SCHEDULER_POOL_H

#include "baton/baton_uv.h"

/* Instance i's runtime, or NULL. */
baton_runtime *baton__pool_instance(baton_pool *pool, int i);

#endif /* BATON_SCHEDULER_POOL_H */
