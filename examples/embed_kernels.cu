// embed_kernels.cu: the GPU side of examples/embed_executor.c's own kernel, exec.gelu, launched
// on the stream baton hands the call (the executor's own stream, when it gave one).
#include <cuda_runtime.h>

__global__ void exec_gelu(const float *x, float *y, long long n)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
}

extern "C" int exec_gelu_cuda(void *stream, const float *x, float *y, long long n)
{
    long long blocks = (n + 255) / 256;
    if (blocks < 1)
        blocks = 1;
    if (blocks > 4096)
        blocks = 4096; /* the grid-stride loop covers the rest */
    exec_gelu<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(x, y, n);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
