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

/* How a call is laid out on the GPU. In an override, 0 means "choose"; in the report, every field
 * holds what was launched.
 *   mode     0 staged: each thread copies its 16-byte vectors into shared memory with cp.async,
 *              `stages` rows ahead (the fast path); 1 registers: scalar loads, the row held in
 *              registers (rows that are not a multiple of the vector width, unaligned buffers);
 *            2 streaming: the block's share of a row is read twice (too long for either);
 *            3 split (backward, at most 16 rows of 16-byte vectors): a partial-dot kernel and a
 *              finishing kernel over column chunks of every row, `grid` blocks of `threads`,
 *              `nv` vectors per thread and row. Forward mode 1 with vec > 1 is the decode path:
 *              a block per row, four 16-byte vectors of x and w per thread in registers.
 *            5 register rows (forward, many rows of 16-byte vectors, x and w of at most 4
 *              bytes): a persistent grid, a block per row, `nv` (2, 4 or 8) vectors of x per
 *              thread, the next row loaded while this one is reduced; the default there.
 *              An override of 2 forces streaming, 3 the split backward, 5 register rows (test
 *              and benchmark hooks); 0 and 1 choose.
 *   threads  threads per block (a multiple of 32, at most 512)
 *   nv       vectors per thread held in registers (modes 1, 2 and 5; 0 when staged); an
 *            override of 2, 4 or 8 picks mode 5's
 *   vec      elements per vector: 16 bytes of x, or 1 (scalar); an override of 1 forces scalar
 *   cx       blocks that share one row (a thread-block cluster when > 1; at most 16)
 *   cy       backward only: blocks that share one part_grad block, combined through
 *            distributed shared memory in a fixed order (at most 16)
 *   stages   staged mode: rows in flight per block (1 to 4)
 *   grid     blocks launched (the main kernel)
 *   smem     dynamic shared memory per block, bytes */
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
} kcuda_rms_cfg;

/* kcuda_rms_norm_fwd / _bwd with an optional override (NULL: choose) and an optional report of
 * the configuration launched (NULL: none). Same errors as the plain calls; an override that cannot
 * run (e.g. threads not a multiple of 32) is BATON_EINVAL. */
int kcuda_rms_norm_fwd_cfg(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                           size_t len, const kcuda_rms_cfg *override, kcuda_rms_cfg *chosen);
int kcuda_rms_norm_bwd_cfg(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                           size_t len, const kcuda_rms_cfg *override, kcuda_rms_cfg *chosen);

#ifdef __cplusplus
}
#endif
#endif /* BATON_KCUDA_RMS_NORM_H */
