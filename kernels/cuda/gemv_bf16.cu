/* gemv_bf16.cu: the decode GEMV's kernels (gemv_kernel.cuh) for bf16. */
#include "kernels/cuda/gemv_kernel.cuh"

KCUDA_GEMV_FILE(__nv_bfloat16)
