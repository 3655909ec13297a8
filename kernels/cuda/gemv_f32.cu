/* gemv_f32.cu: the decode GEMV's kernels (gemv_kernel.cuh) for f32. */
#include "kernels/cuda/gemv_kernel.cuh"

KCUDA_GEMV_FILE(float)
