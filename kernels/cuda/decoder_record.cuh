/* decoder_record.cuh: the run-time error record of a decoder file whose kernels read indices (ids,
 * positions). Such an index out of range is clamped, never followed, and recorded here; the host
 * reads the records at its next wait (baton__kcuda_decoder_error_take, decoder_errors.cu).
 *
 * Without relocatable device code a __device__ variable belongs to its translation unit, so each
 * file that includes this header has its own record (static), and hands it to the host side by
 * DEC_RECORD_UNIT(name) at its end. */
#ifndef BATON_KCUDA_DECODER_RECORD_CUH
#define BATON_KCUDA_DECODER_RECORD_CUH

#include "kernels/cuda/decoder_common.cuh"

namespace kcuda
{
namespace dec
{

/* err[0]: 0, or (op << 32) | (step_index + 1) of the file's first failing call (atomicCAS: first
 * wins); err[1]: the element's index; err[2]: its value; err[3]: the exclusive limit. */
static __device__ unsigned long long g_err[4];
/* The first error's copy in mapped pinned host memory (NULL until the host sets it), so that the
 * check after every run reads host memory instead of copying from the device. */
static __device__ unsigned long long *g_err_host;

/* used: without it the compiler specialises record to the one op a file's kernels pass, and the
 * register allocation of its callers (rope_kernel, attn_mma_kernel) changes with the call. */
static __device__ __noinline__ __attribute__((used)) void record(int op, int step, long long i,
                                                                 long long v, long long limit)
{
    const unsigned long long tag =
        ((unsigned long long)op << 32) | (unsigned long long)(unsigned)(step + 1);
    record_error(g_err, &g_err_host, tag, i, v, limit);
}

/* The current device's record into rec, cleared on the device when it holds an error. */
static inline cudaError_t record_take(unsigned long long rec[4])
{
    cudaError_t e = cudaMemcpyFromSymbol(rec, g_err, 4 * sizeof(unsigned long long));
    if (e == cudaSuccess && rec[0]) {
        const unsigned long long zero[4] = {0, 0, 0, 0};
        e = cudaMemcpyToSymbol(g_err, zero, sizeof zero);
    }
    return e;
}

/* Where the current device's kernels copy their first error from now on (a device address of
 * mapped host memory, 4 words). */
static inline cudaError_t record_mirror(unsigned long long *dp)
{
    return cudaMemcpyToSymbol(g_err_host, &dp, sizeof dp);
}

} /* namespace dec */
} /* namespace kcuda */

#define DEC_RECORD_UNIT(name)                                                                      \
    extern "C" const kcuda::dec::DecRecordUnit baton__dec_record_##name = {                        \
        #name, kcuda::dec::record_take, kcuda::dec::record_mirror};

#endif /* BATON_KCUDA_DECODER_RECORD_CUH */
