/* rms_norm_bwd_rows_f16.cu: the register backward (rms_norm_bwd_rows.cuh) for x of f16. */
#include "kernels/cuda/rms_norm_bwd_rows.cuh"

KCUDA_BWD_ROWS_FILE(__half, f16)
