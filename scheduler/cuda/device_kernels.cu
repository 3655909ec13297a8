/* device_kernels.cu: the CUDA device's own kernels, the ones that move control and small data
 * between the host and a stream without the copy engine.
 *
 * - The gate: a one-thread kernel that holds its stream until the host sets a flag in mapped
 *   pinned memory, then clears the flag behind itself. A stream memory operation
 *   (cuStreamWaitValue32) would need no kernel, but measured slower and less steady: a host store
 *   reached the end of a queued graph in 4.7-5.3 us through this kernel, in 4.7-13.8 us through a
 *   wait node, and a fresh graph launch took 7.8-9.1 us (H100s, bench_floors handoff).
 * - Small copies between pinned host memory (through its unified address) and the device: a
 *   copy-engine memcpy between kernels costs an engine hand-off each way; in an RFC-like layer
 *   (8 KiB in, four kernels, 8 KiB out, 8 layers) copy kernels took 279.5 us against 323.1 us
 *   with memcpy nodes, and 268.4 us queued behind the gate (H100, bench_floors handoff). The
 *   copy kernel takes part in programmatic dependent launch like baton's kernels: it waits for
 *   the grid before it before touching memory, and lets the next one launch once it is done. */
#include <cuda_runtime.h>

#include <stdint.h>

#include "scheduler/cuda/device_cuda.h"

namespace
{

__global__ void gate_kernel(volatile unsigned *flag)
{
    while (*flag != 1u)
        __nanosleep(100); /* a read over the bus about every microsecond, not a tight loop */
    *flag = 0u;
    __threadfence_system();
}

/* Host memory is read past every cache (.cv: the host rewrites it between runs) and written
 * through to it (.wt), so the stream's next step, or the host after its wait, sees the bytes. */
__global__ void copy_kernel(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n16,
                            const unsigned char *__restrict__ tsrc,
                            unsigned char *__restrict__ tdst, unsigned tail, int to_host)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory"); /* a no-op unless launched with PDL */
#endif
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        const uint4 v = to_host ? src[i] : __ldcv(&src[i]);
        if (to_host)
            __stwt(&dst[i], v);
        else
            dst[i] = v;
    }
    if (blockIdx.x == 0 && threadIdx.x < tail)
        tdst[threadIdx.x] = tsrc[threadIdx.x];
    if (to_host)
        __threadfence_system();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

} // namespace

extern "C" cudaError_t baton__dev_cuda_gate_launch(void *stream, volatile unsigned *flag)
{
    gate_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(flag);
    return cudaGetLastError();
}

extern "C" cudaError_t baton__dev_cuda_copy_launch(void *stream, void *dst, const void *src,
                                                   size_t bytes, int to_host, int pdl)
{
    const size_t n16 = bytes / 16;
    const unsigned tail = (unsigned)(bytes % 16);
    size_t blocks = (n16 + 255) / 256;
    if (blocks < 1)
        blocks = 1;
    if (blocks > 64)
        blocks = 64;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)blocks, 1, 1);
    cfg.blockDim = dim3(256, 1, 1);
    cfg.stream = (cudaStream_t)stream;
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = pdl ? 1 : 0;
    cudaError_t e = cudaLaunchKernelEx(&cfg, copy_kernel, (const uint4 *)src, (uint4 *)dst, n16,
                                       (const unsigned char *)src + n16 * 16,
                                       (unsigned char *)dst + n16 * 16, tail, to_host);
    return e != cudaSuccess ? e : cudaGetLastError();
}
