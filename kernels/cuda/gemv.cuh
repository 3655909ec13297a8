/* gemv.cuh: what the decode GEMV's files share: the kernel's arguments and its block, and pick(),
 * which hands out the kernel for a dtype (gemv_kernel.cuh, instantiated in gemv_{bf16,f16,f32}.cu,
 * a file per dtype so that they compile in parallel; gemv.cu launches). */
#ifndef BATON_KCUDA_GEMV_CUH
#define BATON_KCUDA_GEMV_CUH

#include "kernels/cuda/cuda_gemv.h"
#include "kernels/cuda/kcuda_common.cuh"

namespace kcuda
{
namespace gv
{

constexpr int THREADS = 256;
/* The most dynamic shared memory one block asks for: x's staged rows. */
constexpr size_t SMEM_MAX = 200 * 1024;

struct Args {
    const void *x, *w, *c, *g;
    void *y;
    long long m, n, k, ldx;
    float alpha, eps;
    int w_const;
};

/* The kernel for x, W and y of T, mt rows of x a block (1, 2, 4 or 8), a prologue
 * (BATON_GEMV_PLAIN, _RMS, _SWIGLU) and a variant (0 to BATON_GEMV_VARIANTS - 1): a
 * void (*)(Args). */
template <typename T> void *pick(int mt, int prologue, int variant);

} /* namespace gv */
} /* namespace kcuda */

#endif /* BATON_KCUDA_GEMV_CUH */
