/* rms_norm_bwd_rows_f32.cu: the register backward (rms_norm_bwd_rows.cuh) for x of f32, and for x
 * of f64, which has none (register rows take x and w of at most 4 bytes). */
#include "kernels/cuda/rms_norm_bwd_rows.cuh"

KCUDA_BWD_ROWS_FILE(float, f32)
KCUDA_BWD_ROWS_INST(double)
