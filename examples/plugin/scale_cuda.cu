// scale_cuda.cu: the CUDA implementation of the example plugin's "example.scale" kernel,
// launched on the stream baton gives the call (so it is captured into baton's CUDA graphs).
#include <cstdio>

#include <cuda_runtime.h>

__global__ void example_scale(const float *x, float *y, long long n, float alpha, float beta)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = x[i] * alpha + beta;
}

extern "C" int example_scale_launch(void *stream, const float *x, float *y, long long n,
                                    float alpha, float beta, char *why, size_t why_len)
{
    long long blocks = (n + 255) / 256;
    if (blocks < 1)
        blocks = 1;
    if (blocks > 4096)
        blocks = 4096;
    example_scale<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(x, y, n, alpha, beta);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        snprintf(why, why_len, "example.scale launch failed: %s", cudaGetErrorString(e));
        return -8; // BATON_ECUDA
    }
    return 0;
}
