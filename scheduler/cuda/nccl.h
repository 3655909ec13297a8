/* nccl.h: the collectives of the CUDA device through NCCL, which is opened at run time (dlopen),
 * by the first plan that has a collective: a build without NCCL's header, or a machine without
 * libnccl, runs every other plan and refuses a collective with a clear reason. Private to
 * scheduler/cuda. */
#ifndef BATON_SCHEDULER_CUDA_NCCL_H
#define BATON_SCHEDULER_CUDA_NCCL_H

#include <cuda_runtime.h>

#include "baton/baton.h"
#include "scheduler/device.h"

/* Communicators for the CUDA devices ordinals[0..n-1] (ncclCommInitAll), into *out (freed by
 * baton__nccl_comms_destroy). BATON_ENOTSUP with the reason when NCCL cannot be had. */
int baton__nccl_comms_create(int n, const int *ordinals, void **out, baton_error *err);
void baton__nccl_comms_destroy(void *comms, int n);
/* Issues c on streams[k] of member k, as one NCCL group. */
int baton__nccl_run(void *comms, const dev_coll *c, cudaStream_t const *streams, baton_error *err);

#endif /* BATON_SCHEDULER_CUDA_NCCL_H */
