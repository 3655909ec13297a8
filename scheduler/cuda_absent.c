/* cuda_absent.c: the CUDA queries of a CPU-only build (-DBATON_CUDA=OFF): CMake compiles this file
 * instead of scheduler/cuda/, so no CUDA device can be used and the answers are fixed. */
#include "baton/baton.h"

int baton_cuda_built(void)
{
    return 0;
}

int baton_cuda_device_count(void)
{
    return 0;
}
