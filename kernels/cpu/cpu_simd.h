/* cpu_simd.h: what a CPU kernel uses to run at the machine's speed, in one include (for the decoder
 * kernels to adopt): the vector level chosen at run time and bf16/f16 <-> f32 conversions in
 * registers (core/simd.h), the parallel-for over the CPU pool (core/threads.h), and a row split
 * that depends on the sizes alone, so that a kernel's bits do not depend on the thread count.
 *
 * A kernel in this style: convert a row (or a chunk) to f32 on the stack with baton__cvt_to_f32,
 * compute in f32 (plain loops vectorise; or the v16_ / v8_ helpers inside a SIMD_T512 / SIMD_T256
 * function picked by baton__simd_level_get()), round back once with baton__cvt_from_f32; split rows
 * with kcpu_parallel_rows; reduce in a fixed order (baton__simd_dot_f32 sums in a fixed order too).
 */
#ifndef BATON_KERNELS_CPU_SIMD_H
#define BATON_KERNELS_CPU_SIMD_H

#include <stdint.h>

#include "core/simd.h"
#include "core/threads.h"

/* fn(arg, r0, r1) handles rows [r0, r1). */
typedef void (*kcpu_rows_fn)(void *arg, int64_t r0, int64_t r1);

typedef struct kcpu_rows_job {
    kcpu_rows_fn fn;
    void *arg;
    int64_t rows, per_task;
} kcpu_rows_job;

static void kcpu_rows_task(void *p, int64_t t)
{
    const kcpu_rows_job *j = (const kcpu_rows_job *)p;
    int64_t r0 = t * j->per_task, r1 = r0 + j->per_task < j->rows ? r0 + j->per_task : j->rows;
    j->fn(j->arg, r0, r1);
}

/* Runs fn over rows [0, rows) in tasks of at least grain_bytes of work each (rows * row_bytes in
 * all; 64 KiB to 256 KiB suits memory-bound kernels), on the CPU pool; one task, on the calling
 * thread, when the work is small. The cut depends on rows, row_bytes and grain_bytes alone. */
static inline void kcpu_parallel_rows(int64_t rows, int64_t row_bytes, int64_t grain_bytes,
                                      kcpu_rows_fn fn, void *arg)
{
    if (rows <= 0)
        return;
    int64_t tasks = par_tasks(rows * (row_bytes > 0 ? row_bytes : 1), grain_bytes, 1024);
    if (tasks > rows)
        tasks = rows;
    kcpu_rows_job j = {fn, arg, rows, (rows + tasks - 1) / tasks};
    baton__par_for((rows + j.per_task - 1) / j.per_task, kcpu_rows_task, &j);
}

#endif /* BATON_KERNELS_CPU_SIMD_H */
