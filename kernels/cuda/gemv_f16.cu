/* gemv_f16.cu: the decode GEMV's kernels (gemv_kernel.cuh) for f16. */
#include "kernels/cuda/gemv_kernel.cuh"

KCUDA_GEMV_FILE(__half)
