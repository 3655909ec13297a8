/* cpu_common.h: what the CPU kernels share, private to kernels/cpu/: error messages into the
 * context, descriptor and buffer checks, and the chunked load/store that converts a run of elements
 * to and from double on the stack. Static inline so the chunk loops stay inlined in each kernel. */
#ifndef BATON_KERNELS_CPU_COMMON_H
#define BATON_KERNELS_CPU_COMMON_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/dtype.h"
#include "kernels/cpu/cpu_kernels.h"

/* Elements per stack chunk: 4 KiB of doubles per buffer. */
#define CHUNK 512

/* The caller's floating-point mode, saved while a kernel runs in IEEE mode (subnormals kept):
 * XLA:CPU calls custom calls with flush-to-zero and denormals-are-zero set, which turned an
 * invvar below 1.2e-38 (rows whose RMS exceeds 8.5e37) into 0 and grad_weight with it. Saving and
 * restoring the control register costs a few cycles a call, against rows of work. */
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
typedef unsigned int fp_mode;
static inline fp_mode fp_mode_ieee(void)
{
    const unsigned int m = _mm_getcsr();
    _mm_setcsr(m & ~0x8040u); /* FTZ (bit 15) and DAZ (bit 6) off */
    return m;
}
static inline void fp_mode_restore(fp_mode m)
{
    _mm_setcsr(m);
}
#elif defined(__aarch64__)
typedef uint64_t fp_mode;
static inline fp_mode fp_mode_ieee(void)
{
    uint64_t m;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(m));
    __asm__ __volatile__("msr fpcr, %0" : : "r"(m & ~(UINT64_C(1) << 24)) : "memory"); /* FZ */
    return m;
}
static inline void fp_mode_restore(fp_mode m)
{
    __asm__ __volatile__("msr fpcr, %0" : : "r"(m) : "memory");
}
#else
typedef int fp_mode;
static inline fp_mode fp_mode_ieee(void)
{
    return 0;
}
static inline void fp_mode_restore(fp_mode m)
{
    (void)m;
}
#endif

/* Checks that the first n buffers are there. */
static inline int check_buffers(const baton_exec_ctx *ctx, const char *name, void **buffers, int n)
{
    if (!buffers)
        return baton__ctx_fail(ctx, BATON_EINVAL, "%s: buffers is NULL", name);
    for (int i = 0; i < n; i++)
        if (!buffers[i])
            return baton__ctx_fail(ctx, BATON_EINVAL, "%s: buffer %d of %d is NULL", name, i, n);
    return 0;
}

/* Loads elements off .. off+n-1 of a float buffer of dtype dt into out as doubles. */
static inline void load_chunk(baton_dtype dt, const void *p, int64_t off, int n, double *out)
{
    switch (dt) {
    case BATON_DTYPE_BF16: {
        const uint16_t *s = (const uint16_t *)p + off;
        for (int i = 0; i < n; i++)
            out[i] = bf16_to_f32(s[i]);
        break;
    }
    case BATON_DTYPE_F16: {
        const uint16_t *s = (const uint16_t *)p + off;
        for (int i = 0; i < n; i++)
            out[i] = f16_to_f32(s[i]);
        break;
    }
    case BATON_DTYPE_F32: {
        const float *s = (const float *)p + off;
        for (int i = 0; i < n; i++)
            out[i] = s[i];
        break;
    }
    default: memcpy(out, (const double *)p + off, sizeof(double) * (size_t)n); break;
    }
}

/* Stores n doubles into elements off .. off+n-1, rounded once to dtype dt. */
static inline void store_chunk(baton_dtype dt, void *p, int64_t off, int n, const double *in)
{
    switch (dt) {
    case BATON_DTYPE_BF16: {
        uint16_t *d = (uint16_t *)p + off;
        for (int i = 0; i < n; i++)
            d[i] = f32_to_bf16((float)in[i]);
        break;
    }
    case BATON_DTYPE_F16: {
        uint16_t *d = (uint16_t *)p + off;
        for (int i = 0; i < n; i++)
            d[i] = f32_to_f16((float)in[i]);
        break;
    }
    case BATON_DTYPE_F32: {
        float *d = (float *)p + off;
        for (int i = 0; i < n; i++)
            d[i] = (float)in[i];
        break;
    }
    default: memcpy((double *)p + off, in, sizeof(double) * (size_t)n); break;
    }
}

#endif /* BATON_KERNELS_CPU_COMMON_H */
