/* rms_norm_cuda.h: the launch configuration of the CUDA RMSNorm kernels, exposed so that the
 * benchmark can sweep it and the tests can force every code path (clusters, the streaming loop,
 * scalar loads) on small shapes. Private to kernels/cuda, tests and bench; no CUDA include. */
#ifndef BATON_KCUDA_RMS_NORM_H
#define BATON_KCUDA_RMS_NORM_H

#include <stddef.h>
#include <stdint.h>

#include "baton/baton.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Modes (kcuda_rms_cfg.mode): which kernel family runs. kernels/cuda/rms_norm_layout.c chooses. */
enum {
    KCUDA_RMS_STAGED = 0,    /* 16-byte vectors staged in shared memory */
    KCUDA_RMS_REGS = 1,      /* the row held in registers */
    KCUDA_RMS_STREAM = 2,    /* the block's share of a row read twice */
    KCUDA_RMS_SPLIT = 3,     /* backward: partial-dot and finishing kernels */
    KCUDA_RMS_STAGED_CP = 4, /* forward: staged, copied by cp.async instead of bulk copies */
    KCUDA_RMS_ROWS = 5       /* register rows (forward and backward) */
};

/* How a call is laid out on the GPU. In an override, 0 means "choose"; in the report, every field
 * holds what was launched.
 *   mode     0 staged: each block stages its share of `stages` rows in shared memory (the fast
 *              path): the forward with 2 or more stages by one bulk copy per row (the copy
 *              engine, completing on an mbarrier), the forward with one stage and the backward
 *              by per-thread 16-byte cp.async copies; 1 registers: scalar loads, the row held in
 *              registers (rows that are not a multiple of the vector width, unaligned buffers);
 *            2 streaming: the block's share of a row is read twice (too long for either);
 *            3 split (backward, at most 16 rows of 16-byte vectors): a partial-dot kernel and a
 *              finishing kernel over column chunks of every row, `grid` blocks of `threads`,
 *              `nv` vectors per thread and row. Forward mode 1 with vec > 1 is the decode path:
 *              a block per row, four 16-byte vectors of x and w per thread in registers.
 *            4 staged with cp.async (forward, an override only): mode 0's layout, but the rows
 *              are staged by the per-thread cp.async kernel even with 2 to 4 stages (the kernel
 *              that the bulk copies replaced, kept to compare against them in bench_kernels);
 *              more than 4 stages is BATON_EINVAL. Reported as 4 when it ran staged (an
 *              override of 4 on a shape that streams reports 2). The backward has no such
 *              kernel: there an override of 4 chooses, as 1 does.
 *            5 register rows (forward, many rows of 16-byte vectors, x and w of at most 4
 *              bytes): a persistent grid, a block per row, `nv` (2, 4 or 8) vectors of x per
 *              thread, the next row loaded while this one is reduced; the default there.
 *              Backward (many rows of 16-byte vectors, x and w of at most 4 bytes): each thread
 *              holds its vectors of w, of its column sums and of `stages` rows (2, 3, 4, or 6
 *              and 8 in blocks of at most 256 threads whose rows fit in registers; 2 from 4
 *              vectors per thread on) in registers, two rows reduced at a time where it holds 4,
 *              6 or 8;
 *              a part_grad block's rows split over a cluster of cy blocks, cy fitted to the
 *              clusters resident at once (rms_norm_layout.h, baton__kcuda_rms_fit_cy); the default
 *              there. An override of 2 forces streaming, 3 the split backward, 4 the cp.async
 *              forward, 5 register rows (test and benchmark hooks); 0 and 1 choose. Any nonzero
 *              field of an override but nv (and, in the forward, cy) also turns off the choices
 *              that only a plain call gets: the decode path, register rows, the split backward.
 *   threads  threads per block (a multiple of 32, at most 512)
 *   nv       vectors per thread held in registers (modes 1, 2 and 5; 0 when staged); an
 *            override of 2, 4 or 8 picks mode 5's
 *   vec      elements per vector: 16 bytes of x, or 1 (scalar); an override of 1 forces scalar
 *   cx       blocks that share one row (a thread-block cluster when > 1; at most 16)
 *   cy       backward only: blocks that share one part_grad block, combined through
 *            distributed shared memory in a fixed order (at most 16)
 *   kx       register backward only: clusters that share one part_grad block (1 to 4), each
 *            taking a kx-th of its rows and adding its sums to part_grad after the one before it
 *            (counters in grad_weight's bytes until the column sum writes it); 0: 1. Only an
 *            override chains clusters (measured slower than one per part_grad block on an H100
 *            at all but one benchmark shape in bench_kernels)
 *   stages   staged mode: rows in flight per block (1 to 8 in the forward, 1 to 4 in the
 *            backward, which lowers a larger override to 4)
 *   grid     blocks launched (the main kernel)
 *   smem     dynamic shared memory per block, bytes
 *   variant  a tuning variant (below), applied to the layout that the other fields choose; it
 *            does not count as an override field (a plain call's choices stay). In the report:
 *            the variant that ran, {0, 0, 0} for the layout as chosen. */

/* Variants: what the per-device tuner (rms_norm_tune.cu) may change in the layout that a call
 * chooses. Each one launches the same per-row reduction (the same threads, each adding the same
 * vectors in the same order, then the same block reduction and the same rounding), so every
 * output bit (y and invvar; grad_input, grad_weight and part_grad) equals the default's:
 *   kernel KCUDA_RMS_VK_BULK  forward, where register rows (mode 5) is chosen: the bulk-copy
 *                             staged kernel at register rows' threads, reducing each row in
 *                             register rows' order (a shuffle tree over the warps' sums, and
 *                             mean = sum / n2); `stages` 2 to 8 rows in flight (0: as the
 *                             staged layout would choose)
 *          KCUDA_RMS_VK_CP    forward, where the bulk-copy kernel (mode 0, 2 or more stages) is
 *                             chosen: the cp.async staged kernel (mode 4); `stages` 2 to 4 (0:
 *                             the chosen stages, at most 4)
 *          KCUDA_RMS_VK_PERSIST forward, where register rows (mode 5) is chosen: the same kernel
 *                             on a persistent grid (evened out over the resident blocks, each
 *                             block loading its next row while it reduces one) instead of a
 *                             block per row; `stages` 0
 *          KCUDA_RMS_VK_ROW   forward, where register rows (mode 5) is chosen with a block per
 *                             row: a kernel for exactly that, which holds one row (no buffer for
 *                             a next one, so fewer registers: 4 blocks of 512 threads per SM at
 *                             2 vectors per thread) and copies its vectors of w into shared
 *                             memory (cp.async) as the row loads, so that the row's scaling
 *                             does not wait for w after the row's barrier; `stages` 0
 *          0                  the kernel chosen; `stages` (nonzero) changes only the rows in
 *                             flight of a staged layout: forward 2 to 8 on the bulk-copy
 *                             kernel, backward 1 to 4; the register backward (mode 5): the
 *                             rows it holds, 2, 3, 4, 6 or 8 as mode 5 allows (kx and cy stay
 *                             as fitted for its own choice); `prefetch` (the register backward
 *                             at up to 2 vectors per thread holding 3 or 4 rows, 16-byte aligned
 *                             rows; 1 to KCUDA_BWD_PREFETCH_MAX): at the top of each round of
 *                             the rows it holds, one thread asks the copy engine to bring the
 *                             round that many rounds ahead into L2 (cp.async.bulk.prefetch),
 *                             raising the bytes in flight where the registers cannot
 * Anything else (register rows with other vectors per thread, other threads, clusters or grids of
 * part_grad blocks) reduces in another order and is not a variant. A variant that does not apply
 * to the chosen layout, or whose shared memory does not fit, is BATON_EINVAL with the reason. */
enum { KCUDA_RMS_VK_BULK = 1, KCUDA_RMS_VK_CP = 2, KCUDA_RMS_VK_PERSIST = 3, KCUDA_RMS_VK_ROW = 4 };

typedef struct kcuda_rms_variant {
    int kernel;   /* 0 or KCUDA_RMS_VK_* */
    int stages;   /* 0: as chosen */
    int prefetch; /* the register backward: rounds of rows asked into L2 ahead (0: none) */
} kcuda_rms_variant;

/* The most rounds of rows a variant may ask into L2 ahead of the register backward's loads. */
#define KCUDA_BWD_PREFETCH_MAX 4

/* Whether v is {0, 0, 0}: the layout as chosen. */
static inline int kcuda_rms_variant_none(const kcuda_rms_variant *v)
{
    return !v->kernel && !v->stages && !v->prefetch;
}

typedef struct kcuda_rms_cfg {
    int mode;
    int threads;
    int nv;
    int vec;
    int cx;
    int cy;
    int stages;
    long long grid;
    long long smem;
    kcuda_rms_variant variant;
    int kx;
} kcuda_rms_cfg;

/* baton__kcuda_rms_norm_fwd / _bwd with an optional override (NULL: choose) and an optional report
 * of the configuration launched (NULL: none). Same errors as the plain calls; an override that
 * cannot run (e.g. threads not a multiple of 32) is BATON_EINVAL. */
int baton__kcuda_rms_norm_fwd_cfg(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                  size_t len, const kcuda_rms_cfg *override, kcuda_rms_cfg *chosen);
int baton__kcuda_rms_norm_bwd_cfg(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                                  size_t len, const kcuda_rms_cfg *override, kcuda_rms_cfg *chosen);

#ifdef KCUDA_TIMELINE
/* Timeline builds only (cmake -DBATON_KERNEL_TIMELINE=ON; bench_kernels --timeline): each block
 * of the register backward and of its column sum stamps %globaltimer (ns) at these phases of the
 * last launch, and KCUDA_TL_SM holds its SM (%smid) in the low 32 bits and its grid's size in the
 * high 32 (how baton__kcuda_rms_bwd_timeline counts the blocks). In every other build the stamps
 * compile to nothing and this is not declared. */
enum {
    KCUDA_TL_ENTRY,      /* the block starts */
    KCUDA_TL_WAITED,     /* past the wait for the kernel before (PDL) */
    KCUDA_TL_FIRST_STEP, /* its first rows reduced and written: the rows' first loads landed */
    KCUDA_TL_ROWS_DONE,  /* its last row written */
    KCUDA_TL_SYNCED,     /* every rank of its cluster done: past the combine's first barrier */
    KCUDA_TL_COMBINED,   /* its columns of part_grad written */
    KCUDA_TL_EXIT,       /* it leaves (past the combine's second barrier, in a cluster) */
    KCUDA_TL_SM,
    KCUDA_TL_SLOTS
};
/* The column sum's blocks stamp KCUDA_TL_ENTRY, KCUDA_TL_WAITED (its wait for the whole of the
 * main kernel), KCUDA_TL_EXIT and KCUDA_TL_SM. */
#define KCUDA_TL_MAX_BLOCKS 2048

/* Copies the last register backward's stamps: main[b] for its *n_main blocks, colsum[b] for its
 * column sum's *n_colsum blocks (arrays of KCUDA_TL_MAX_BLOCKS). Waits for the device. 0 or a
 * CUDA error code. */
int baton__kcuda_rms_bwd_timeline(unsigned long long (*main)[KCUDA_TL_SLOTS], int *n_main,
                                  unsigned long long (*colsum)[KCUDA_TL_SLOTS], int *n_colsum);
#endif

#ifdef __cplusplus
}
#endif
#endif /* BATON_KCUDA_RMS_NORM_H */
