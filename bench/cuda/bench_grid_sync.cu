/* bench_grid_sync.cu: what the RMSNorm backward's second kernel (the column sum of part_grad)
 * costs against a grid-wide barrier in one cooperative kernel, at the backward's own layout: a
 * grid of 16 clusters streams the bytes, each block writes a row of column sums, and the tail adds
 * the rows of each column. It decides whether fusing the column sum into the main kernel can pay
 * (docs/decisions/0003-column-sum-inside-the-backward.md); it is not a benchmark of baton's
 * kernels. */
#include <cooperative_groups.h>

#include "bench/cuda/bench_common.h"
#include "kernels/cuda/kcuda_common.cuh"

using kcuda::pdl_trigger;
using kcuda::pdl_wait;

#define COLS      4096 /* a part_grad row at the 4096-column shapes */
#define LANES     8    /* the column sum's lanes, as KCUDA_COLSUM_LANES */
#define THREADS   256
#define PER_GRAPH 20 /* calls captured in one graph */

/* The main kernel's work: stream this block's share of `in`, then write the block's row of
 * column sums (row blockIdx.x of `part`). */
__device__ __forceinline__ void stream_rows(const float4 *in, size_t n4, float *part)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    float s = 0.f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        const float4 v = __ldcs(in + i);
        s += v.x + v.y + v.z + v.w;
    }
    for (int j = threadIdx.x; j < COLS; j += blockDim.x)
        part[(size_t)blockIdx.x * COLS + j] = s + (float)j;
}

/* The column sum, as rms_colsum_kernel: a block is 32 columns x LANES lanes, lane k adds rows k,
 * k + LANES, ... in order, and the lanes' sums are added in lane order. */
__device__ __forceinline__ void column_sums(const float *part, int rows, float *out)
{
    __shared__ float lane_sums[LANES][33];
    const int lx = threadIdx.x & 31, ly = threadIdx.x >> 5;
    for (int j0 = blockIdx.x * 32; j0 < COLS; j0 += gridDim.x * 32) {
        float s = 0.f;
        for (int p = ly; p < rows; p += LANES)
            s += __ldcg(part + (size_t)p * COLS + j0 + lx);
        lane_sums[ly][lx] = s;
        __syncthreads();
        if (ly == 0) {
            float t = 0.f;
            for (int k = 0; k < LANES; k++)
                t += lane_sums[k][lx];
            out[j0 + lx] = t;
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(THREADS) main_kernel(const float4 *in, size_t n4, float *part)
{
    pdl_wait();
    pdl_trigger(); /* as the backward: the column sum may launch and wait on free SMs */
    stream_rows(in, n4, part);
}

__global__ void __launch_bounds__(THREADS) tail_kernel(const float *part, int rows, float *out)
{
    pdl_wait();
    column_sums(part, rows, out);
    pdl_trigger();
}

__global__ void __launch_bounds__(THREADS)
    fused_kernel(const float4 *in, size_t n4, float *part, float *out)
{
    pdl_wait();
    pdl_trigger();
    stream_rows(in, n4, part);
    cooperative_groups::this_grid().sync();
    column_sums(part, (int)gridDim.x, out);
}

static void launch(cudaStream_t s, const void *fn, void **args, unsigned grid, unsigned cl,
                   bool coop)
{
    cudaLaunchConfig_t c;
    memset(&c, 0, sizeof c);
    c.gridDim = dim3(grid);
    c.blockDim = dim3(THREADS);
    c.stream = s;
    cudaLaunchAttribute at[3];
    memset(at, 0, sizeof at);
    unsigned n = 0;
    at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[n++].val.programmaticStreamSerializationAllowed = 1;
    if (cl > 1) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n++].val.clusterDim = {cl, 1, 1};
    }
    if (coop) {
        at[n].id = cudaLaunchAttributeCooperative;
        at[n++].val.cooperative = 1;
    }
    c.attrs = at;
    c.numAttrs = n;
    CHECK_CUDA(cudaLaunchKernelExC(&c, fn, args));
}

enum { MAIN_ONLY, TWO_KERNELS, FUSED };
static const char *const mode_names[] = {"main kernel alone", "main + column-sum kernel",
                                         "one kernel, grid.sync"};

/* One call's time in us: the median over 20 replays of a graph of PER_GRAPH calls. */
static double time_mode(cudaStream_t s, int mode, const float4 *in, size_t n4, float *part,
                        float *out, unsigned grid, unsigned cl)
{
    int rows = (int)grid;
    void *main_args[] = {&in, &n4, &part};
    void *tail_args[] = {&part, &rows, &out};
    void *fused_args[] = {&in, &n4, &part, &out};
    auto call = [&](int) {
        if (mode == FUSED) {
            launch(s, (const void *)fused_kernel, fused_args, grid, cl, true);
        } else {
            launch(s, (const void *)main_kernel, main_args, grid, cl, false);
            if (mode == TWO_KERNELS)
                launch(s, (const void *)tail_kernel, tail_args, COLS / 32, 1, false);
        }
    };
    return time_graph(s, call, PER_GRAPH, 20);
}

int main(int argc, char **argv)
{
    const size_t mb = argc > 1 ? (size_t)atoll(argv[1]) : 64; /* bf16 4096 x 4096: g and x */
    if (argc > 2 || mb < 1) {
        fprintf(stderr, "usage: bench_grid_sync [MiB read per call, default 64]\n");
        return 2;
    }
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; %zu MiB read per call, %d calls per graph\n", prop.name,
           prop.multiProcessorCount, mb, PER_GRAPH);
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t n4 = (mb << 20) / sizeof(float4);
    float4 *in;
    float *part, *out[2];
    CHECK_CUDA(cudaMalloc(&in, n4 * sizeof(float4)));
    fill_random(s, in, n4 * sizeof(float4), 7);
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaMalloc(&part, (size_t)16 * 16 * COLS * sizeof(float)));
    for (int k = 0; k < 2; k++)
        CHECK_CUDA(cudaMalloc(&out[k], COLS * sizeof(float)));
    for (const void *fn : {(const void *)main_kernel, (const void *)fused_kernel})
        CHECK_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    for (unsigned cl : {8u, 12u, 16u}) {
        /* 16 clusters, as part_grad 16's blocks, where that many are resident at once. */
        cudaLaunchConfig_t c;
        memset(&c, 0, sizeof c);
        c.gridDim = dim3(16 * cl);
        c.blockDim = dim3(THREADS);
        cudaLaunchAttribute at;
        at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim = {cl, 1, 1};
        c.attrs = &at;
        c.numAttrs = 1;
        int clusters = 0;
        CHECK_CUDA(cudaOccupancyMaxActiveClusters(&clusters, (const void *)fused_kernel, &c));
        const unsigned grid = (unsigned)(clusters < 16 ? clusters : 16) * cl;
        double us[3];
        for (int m = MAIN_ONLY; m <= FUSED; m++)
            us[m] = time_mode(s, m, in, n4, part, out[m == FUSED], grid, cl);
        std::vector<float> h[2];
        for (int k = 0; k < 2; k++) {
            h[k].resize(COLS);
            CHECK_CUDA(
                cudaMemcpy(h[k].data(), out[k], COLS * sizeof(float), cudaMemcpyDeviceToHost));
        }
        const bool same = !memcmp(h[0].data(), h[1].data(), COLS * sizeof(float));
        for (int m = MAIN_ONLY; m <= FUSED; m++)
            printf("  clusters of %2u, grid %3u: %-26s %8.2f us\n", cl, grid, mode_names[m], us[m]);
        printf("RESULT grid_sync cl=%u grid=%u main_us=%.2f two_us=%.2f fused_us=%.2f "
               "tail_two_us=%.2f tail_fused_us=%.2f same_bits=%d\n",
               cl, grid, us[MAIN_ONLY], us[TWO_KERNELS], us[FUSED], us[TWO_KERNELS] - us[MAIN_ONLY],
               us[FUSED] - us[MAIN_ONLY], same);
        if (!same) {
            fprintf(stderr,
                    "bench_grid_sync: the fused column sums differ from the two kernels'\n");
            return 1;
        }
    }
    return 0;
}
