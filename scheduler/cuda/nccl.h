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

/* One process per GPU (baton_options.world): rank 0's new id (ncclGetUniqueId); this rank's
 * communicator over the world (ncclCommInitRank, with the device current; it returns once every
 * rank has joined), freed by baton__nccl_world_leave; a send (send 1) or receive of `bytes` with
 * rank `peer` on `stream`; this rank's part of collective c. */
int baton__nccl_world_id(unsigned char *id, baton_error *err);
int baton__nccl_world_join(const unsigned char *id, int rank, int world, void **out,
                           baton_error *err);
void baton__nccl_world_leave(void *comm);
int baton__nccl_world_move(void *comm, void *buf, size_t bytes, int peer, int send,
                           cudaStream_t stream, baton_error *err);
int baton__nccl_world_coll(void *comm, const dev_coll *c, int rank, cudaStream_t stream,
                           baton_error *err);

#endif /* BATON_SCHEDULER_CUDA_NCCL_H */
