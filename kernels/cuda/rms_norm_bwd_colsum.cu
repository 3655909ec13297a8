/* rms_norm_bwd_colsum.cu: grad_weight from part_grad, the column sum that ends the RMSNorm
 * backward (rms_norm_bwd.cuh) and that rms_norm_grad_weight runs alone. */
#include "kernels/cuda/kcuda_common.cuh"

#include <type_traits>

#include "kernels/cuda/rms_norm_bwd.cuh"

namespace kcuda
{

/* Column j of a 32 x 8 block: lane (lx, ly) is colsum_lane ly of column j0 + lx. The blocks from
 * `active` on hold no rows: this kernel writes their zeros (the main kernel launches no block for
 * them) and leaves them out of the sum. */
template <typename A, typename TW, bool BATCH>
__global__ void __launch_bounds__(256) rms_colsum_kernel(A *__restrict__ pg, TW *__restrict__ gw,
                                                         int64_t P, int64_t active, int64_t n2)
{
    static_assert(KCUDA_COLSUM_LANES == 8, "a block is 32 columns x KCUDA_COLSUM_LANES lanes");
    __shared__ A part[KCUDA_COLSUM_LANES][33];
    const int lx = threadIdx.x & 31, ly = threadIdx.x >> 5;
    TL_COLSUM(ENTRY);
    pdl_wait();
    TL_COLSUM(WAITED);
    for (int64_t j0 = (int64_t)blockIdx.x * 32; j0 < n2; j0 += (int64_t)gridDim.x * 32) {
        const int64_t j = j0 + lx;
        A s = 0;
        if (j < n2) {
            s = colsum_lane<BATCH>(pg, n2, j, ly, active);
            for (int64_t p = active + ly; p < P; p += KCUDA_COLSUM_LANES)
                pg[p * n2 + j] = 0;
        }
        part[ly][lx] = s;
        __syncthreads();
        if (ly == 0 && j < n2)
            gw[j] = from_acc<TW>(colsum_combine<A>([&](int k) { return part[k][lx]; }));
        __syncthreads();
    }
    TL_COLSUM(EXIT);
    pdl_trigger();
}

/* The column sum of at most KCUDA_COLSUM_COLS_P part_grad rows (the tutorial's 16; decode rows):
 * a thread per column loads all of its rows before adding any, one round trip to L2 where a
 * lane of rms_colsum_kernel waits for each of its rows in turn, then adds them as the lanes do
 * and the lanes in lane order (the same bits), with no barrier between lanes. bf16 4096 x 4096's
 * backward at part_grad 16 0.2-0.9 us faster on an H100 and an H200 (bench_kernels). */
template <typename A, typename TW>
__global__ void __launch_bounds__(KCUDA_COLSUM_COLS_THREADS)
    rms_colsum_cols(A *__restrict__ pg, TW *__restrict__ gw, int64_t P, int64_t active, int64_t n2)
{
    constexpr int L = KCUDA_COLSUM_LANES;
    static_assert(KCUDA_COLSUM_COLS_P % (2 * L) == 0, "whole rounds of 2 rows a lane");
    TL_COLSUM(ENTRY);
    pdl_wait();
    TL_COLSUM(WAITED);
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n2;
         j += (int64_t)gridDim.x * blockDim.x) {
        A lanes[L];
#pragma unroll
        for (int k = 0; k < L; k++)
            lanes[k] = 0;
#pragma unroll
        for (int p0 = 0; p0 < KCUDA_COLSUM_COLS_P; p0 += 2 * L) {
            if (p0 >= active)
                break;
            /* rows p0 .. p0 + 15: lane k's rows p0 + k and p0 + k + 8, in its order; a row past
             * `active` adds +0, which leaves a lane's bits (see above) */
            A v[2 * L];
#pragma unroll
            for (int i = 0; i < 2 * L; i++)
                v[i] = p0 + i < active ? pg[(p0 + i) * n2 + j] : A(0);
#pragma unroll
            for (int i = 0; i < 2 * L; i++)
                lanes[i % L] += v[i];
        }
        for (int64_t p = active; p < P; p++)
            pg[p * n2 + j] = 0;
        gw[j] = from_acc<TW>(colsum_combine<A>([&](int k) { return lanes[k]; }));
    }
    TL_COLSUM(EXIT);
    pdl_trigger();
}

/* The column sum for `active` part_grad blocks: batched loads where the lanes have many rows. */
template <typename A, typename TW>
using ColsumKernel = void (*)(A *, TW *, int64_t, int64_t, int64_t);
template <typename A, typename TW> static ColsumKernel<A, TW> colsum_kernel_for(int64_t active)
{
    return active >= KCUDA_COLSUM_LANES * KCUDA_COLSUM_BATCH ? rms_colsum_kernel<A, TW, true>
                                                             : rms_colsum_kernel<A, TW, false>;
}

/* Launches the column sum of part_grad's P rows (`active` of them with rows) into grad_weight on
 * baton__kcuda_rms_colsum_grid's grid: the backward's second kernel and rms_norm_grad_weight alike.
 */
template <typename A, typename TW>
int launch_colsum(const baton_exec_ctx *ctx, const char *name, long long grid, A *pg, TW *gw,
                  int64_t P, int64_t active, int64_t n2)
{
    if (P <= KCUDA_COLSUM_COLS_P)
        return launch(ctx, name, rms_colsum_cols<A, TW>, (unsigned)grid,
                      (unsigned)KCUDA_COLSUM_COLS_THREADS, 0, 1, pg, gw, P, active, n2);
    return launch(ctx, name, colsum_kernel_for<A, TW>(active), (unsigned)grid, 256u, 0, 1, pg, gw,
                  P, active, n2);
}

#define KCUDA_INST_A(A, TW)                                                                        \
    template int launch_colsum<A, TW>(const baton_exec_ctx *, const char *, long long, A *, TW *,  \
                                      int64_t, int64_t, int64_t);
#define KCUDA_INST(TW) KCUDA_INST_A(float, TW) KCUDA_INST_A(double, TW)
KCUDA_INST(__nv_bfloat16)
KCUDA_INST(__half)
KCUDA_INST(float)
KCUDA_INST(double)
#undef KCUDA_INST
#undef KCUDA_INST_A

} /* namespace kcuda */

using namespace kcuda;

/* grad_weight from a part_grad: the backward's column sum kernel over all P rows (none to zero,
 * so the input is only read). */
template <typename A>
static int grad_weight_w(const baton_exec_ctx *ctx, void **buffers,
                         const baton_rms_grad_weight_desc &d, long long grid)
{
    const char *name = "rms_norm_grad_weight";
    A *pg = static_cast<A *>(buffers[0]);
    const int64_t P = d.part_grad_size, n2 = d.n2;
    switch (d.w_dtype) {
    case BATON_DTYPE_BF16:
        return launch_colsum(ctx, name, grid, pg, (__nv_bfloat16 *)buffers[2], P, P, n2);
    case BATON_DTYPE_F16: return launch_colsum(ctx, name, grid, pg, (__half *)buffers[2], P, P, n2);
    case BATON_DTYPE_F32: return launch_colsum(ctx, name, grid, pg, (float *)buffers[2], P, P, n2);
    default: return launch_colsum(ctx, name, grid, pg, (double *)buffers[2], P, P, n2);
    }
}

extern "C" int baton__kcuda_rms_norm_grad_weight(const baton_exec_ctx *ctx, void **buffers,
                                                 const char *opaque, size_t len)
{
    const char *name = "rms_norm_grad_weight";
    baton_rms_grad_weight_desc d;
    const int rc = baton__rms_grad_weight_desc_read(ctx, opaque, len, &d);
    if (rc)
        return rc;
    if (!buffers || !buffers[0] || !buffers[1] || !buffers[2])
        return baton__ctx_fail(ctx, BATON_EINVAL,
                               "%s: a buffer (part_grad, weight, grad_weight) is NULL", name);
    const long long grid =
        baton__kcuda_rms_colsum_grid(d.n2, d.part_grad_size, device_facts(ctx).sms);
    return d.pg_dtype == BATON_DTYPE_F32 ? grad_weight_w<float>(ctx, buffers, d, grid)
                                         : grad_weight_w<double>(ctx, buffers, d, grid);
}

#ifdef KCUDA_TIMELINE
extern "C" int baton__kcuda_rms_bwd_timeline_colsum(unsigned long long (*out)[KCUDA_TL_SLOTS])
{
    return (int)cudaMemcpyFromSymbol(
        out, kcuda::tl_colsum, sizeof(unsigned long long) * KCUDA_TL_MAX_BLOCKS * KCUDA_TL_SLOTS);
}
#endif
