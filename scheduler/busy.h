/* busy.h: what every build's baton_gpu_busy_device does first (scheduler/cuda/cupti.c with and
 * without CUPTI, scheduler/cuda_absent.c without CUDA): clear the outputs, check the device. */
#ifndef BATON_SCHEDULER_BUSY_H
#define BATON_SCHEDULER_BUSY_H

#include <stdint.h>

#include "baton/baton.h"
#include "core/core.h"

/* 0, or BATON_EINVAL with the reason in err for a device outside 0 .. BATON_BUSY_MAX_DEVICES - 1;
 * *fraction and *work_ns (either may be NULL) are 0 either way. */
static inline int baton__busy_device_args(int device, double *fraction, int64_t *work_ns,
                                          baton_error *err)
{
    err_clear(err);
    if (fraction)
        *fraction = 0;
    if (work_ns)
        *work_ns = 0;
    if (device < 0 || device >= BATON_BUSY_MAX_DEVICES)
        return baton__err_set(err, BATON_EINVAL, "GPU busy fraction: device %d is not 0..%d",
                              device, BATON_BUSY_MAX_DEVICES - 1);
    return 0;
}

#endif /* BATON_SCHEDULER_BUSY_H */
