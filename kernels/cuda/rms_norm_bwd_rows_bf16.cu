/* rms_norm_bwd_rows_bf16.cu: the register backward (rms_norm_bwd_rows.cuh) for x of bf16. */
#include "kernels/cuda/rms_norm_bwd_rows.cuh"

KCUDA_BWD_ROWS_FILE(__nv_bfloat16, bf16)
