/* testing.h: hooks into the runtime for baton's own tests: prepare with a device fault
 * armed, and arm a fault in a prepared runtime (scheduler/testing.c, compiled only with
 * -DBATON_TESTING=ON). Not part of the public API. */
#ifndef BATON_SCHEDULER_TESTING_H
#define BATON_SCHEDULER_TESTING_H

#include "baton/baton.h"
#include "scheduler/device.h"

/* baton_runtime_create, with `fault` armed on device index `fault_dev` (the plan's memory
 * index: 0 is the CPU) right after it is opened, so that e.g. its arena allocation fails. */
int baton__runtime_create_faulty(const baton_plan *plan, const baton_options *opts, int fault_dev,
                                 dev_fault fault, baton_runtime **out, baton_error *err);
/* Arms a one-shot fault on a device of a prepared runtime. */
void baton__runtime_inject(baton_runtime *rt, int device, dev_fault fault);
/* From the next run on (call it before the first), runs issue only the plan's GPU segments, each
 * as it would run (its graph, copies included), skipping the CPU segments and the host waits
 * they need; one wait ends the run. Outputs made by CPU steps are then stale. This is the GPU
 * floor a plan's runs in flight are measured against (bench/bench_pool_floor.c). */
void baton__runtime_gpu_only(baton_runtime *rt, int on);
/* Mutation testing: GPU-to-GPU copies stop waiting for the writer's event, so a test that reads
 * what another device wrote must fail once the writer is slow (sim_delay_us). */
void baton__runtime_skip_cross_waits(baton_runtime *rt, int on);

/* A look into a prepared runtime's devices: the context of device index `device` (the plan's
 * memory index; NULL when out of range), and the graph slot that GPU segment `segment` replays in
 * graph mode (-1 when out of range). The CUDA tests read a captured segment's edges with them. */
dev_ctx *baton__runtime_device_ctx(baton_runtime *rt, int device);
int baton__runtime_graph_slot(baton_runtime *rt, int segment);

#endif
