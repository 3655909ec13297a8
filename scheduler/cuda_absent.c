/* cuda_absent.c: the CUDA queries of a CPU-only build (-DBATON_CUDA=OFF): CMake compiles this file
 * instead of scheduler/cuda/, so no CUDA device can be used and the answers are fixed. */
#include "baton/baton.h"
#include "core/core.h"

int baton_cuda_built(void)
{
    return 0;
}

int baton_cuda_device_count(void)
{
    return 0;
}

int baton_gpu_busy_begin(baton_error *err)
{
    err_clear(err);
    return baton__err_set(err, BATON_ENOTSUP, "GPU busy fraction: this build of baton has no CUDA");
}

int baton_gpu_busy_end(double *fraction, baton_error *err)
{
    err_clear(err);
    if (fraction)
        *fraction = 0;
    return baton__err_set(err, BATON_ESTATE, "GPU busy fraction: call baton_gpu_busy_begin first");
}

int baton_gpu_busy_device(int device, double *fraction, int64_t *work_ns, baton_error *err)
{
    err_clear(err);
    if (fraction)
        *fraction = 0;
    if (work_ns)
        *work_ns = 0;
    if (device < 0 || device >= BATON_BUSY_MAX_DEVICES)
        return baton__err_set(err, BATON_EINVAL, "GPU busy fraction: device %d is not 0..%d",
                              device, BATON_BUSY_MAX_DEVICES - 1);
    return baton__err_set(err, BATON_ESTATE, "GPU busy fraction: this build of baton has no CUDA");
}
