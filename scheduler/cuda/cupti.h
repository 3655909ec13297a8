/* cupti.h: the CUDA device's timeline for traces, from CUPTI's activity records (kernels and
 * copies with their device timestamps), loaded on demand so that libbaton needs no libcupti until
 * a trace asks for it. Private to scheduler/cuda/. */
#ifndef BATON_SCHEDULER_CUDA_CUPTI_H
#define BATON_SCHEDULER_CUDA_CUPTI_H

#include <stdint.h>

#include "scheduler/device.h"

/* Records what runs on `stream` into t from now on (process-wide CUPTI activity, filtered by
 * stream). BATON_ENOTSUP with the reason when CUPTI cannot be had. */
int baton__cupti_attach(void *stream, dev_trace *t, baton_error *err);
void baton__cupti_detach(dev_trace *t);
/* Delivers every record of completed work into the attached traces, names steps, and adds a span
 * per graph replay. */
void baton__cupti_sync(dev_trace *t);
/* While tracing: tags the CUDA calls made between push and pop with a step (kernels of a graph
 * replay get the segment's first step). */
void baton__cupti_push(int step);
void baton__cupti_pop(void);

#endif /* BATON_SCHEDULER_CUDA_CUPTI_H */
