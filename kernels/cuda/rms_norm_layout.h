/* rms_norm_layout.h: how a CUDA RMSNorm call is laid out (kernel family, threads, grid, stages,
 * cluster shape), chosen on the host from the shape, dtypes, buffer alignment, device properties
 * and an optional override. Plain C with no CUDA header: CPU-only builds compile and test it. */
#ifndef BATON_KCUDA_RMS_NORM_LAYOUT_H
#define BATON_KCUDA_RMS_NORM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "baton/baton.h"
#include "kernels/cuda/rms_norm_cuda.h"
#include "kernels/descriptors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the kernels are compiled for; the layout never asks for more. */
#define KCUDA_MAX_THREADS      512  /* threads per block (__launch_bounds__) */
#define KCUDA_FWD_STAGES       4    /* the most rows in flight the forward chooses by itself */
#define KCUDA_FWD_BULK_STAGES  8    /* the most rows in flight of the bulk-copy forward */
#define KCUDA_CP_STAGES        4    /* the cp.async kernels wait on at most 3 groups */
#define KCUDA_MAX_CLUSTER      16   /* blocks per cluster (above 8: non-portable) */
#define KCUDA_SPLIT_ROWS       16   /* the split backward's most rows */
#define KCUDA_SPLIT_THREADS    128  /* the split backward's threads per block */
#define KCUDA_BWD_ROWS_MAX     8    /* the register backward's most rows held per block */
#define KCUDA_BWD_DEEP_THREADS 256  /* its threads per block where it holds more than 4 rows */
#define KCUDA_BWD_DEEP_REGS    168  /* ... and the most registers KCUDA_BWD_ROWS_REGS may say */
#define KCUDA_BWD_CHAIN_MAX    4    /* its most clusters per part_grad block */
#define KCUDA_STATIC_SMEM      1024 /* room left for the kernels' static shared memory */

/* The register backward kernels compiled to ask rows into L2 (variant prefetch): up to 2 vectors
 * per thread holding 3 or 4 rows (where it paid on an H200, in bench_kernels' sweeps). */
#define KCUDA_BWD_PF_OK(NV, D) ((NV) <= 2 && ((D) == 3 || (D) == 4))

/* The register backward's estimate of the registers a thread needs to hold D rows of NV 16-byte
 * vectors of x (XB bytes an element) and of grad_output (WB, w's dtype), plus w and its column
 * sums (4 bytes each). The kernel (its launch bounds) and the layout (which rows it may hold)
 * read the same formula, so that the layout never asks for a kernel that spills. */
#define KCUDA_BWD_ROWS_REGS(XB, WB, NV, D)                                                         \
    ((D) * ((NV) * (16 / (XB)) * (WB) / 4 + (NV)*4 + 1) + (NV) * (16 / (XB)) * (WB) / 4 +          \
     (NV) * (16 / (XB)))

/* What the layout needs to know of the device (the .cu side fills it from the CUDA runtime). */
typedef struct kcuda_rms_device {
    int sms;            /* streaming multiprocessors */
    int64_t smem_optin; /* shared memory a block may opt in to (227 KB on Hopper), bytes */
    int max_cluster;    /* the largest cluster to choose: 16, or 8 where 16 cannot run */
} kcuda_rms_device;

/* A chosen layout: the fields of kcuda_rms_cfg, and what the launch needs besides. */
typedef struct kcuda_rms_layout {
    int mode; /* KCUDA_RMS_* */
    int vec, nv, threads, cx, cy, stages;
    /* Register backward: clusters per part_grad block (1, or up to KCUDA_BWD_CHAIN_MAX chained
     * through part_grad in a fixed order, counting in grad_weight's bytes: an override only; 0
     * until baton__kcuda_rms_fit_cy sets it), and whether grad_weight has the room and alignment
     * for the counters (baton__kcuda_rms_chain_bytes). */
    int kx, chain_ok;
    /* Register backward: grad_output's and x's rows start 16-byte aligned, so that the copy
     * engine may be asked to bring whole rows into L2 (variant prefetch). */
    int pf_ok;
    int64_t chunk;  /* columns per block (a row is cx chunks) */
    long long grid; /* blocks of the main kernel (the split backward: of each kernel) */
    size_t smem;    /* dynamic shared memory per block */
    /* Forward: the grid is to be evened out over the blocks that are resident at once, which
     * only the CUDA runtime can say: call baton__kcuda_rms_spread with its answer. */
    int spread;
    /* The cluster (cx * cy blocks) is above 8 and was not asked for: if the device cannot run
     * it, choose again with max_cluster 8. */
    int may_shrink;
    /* Register backward: cy is to be fitted to the clusters that are resident at once, which only
     * the CUDA runtime can say: call baton__kcuda_rms_fit_cy with its answers, for the kernel that
     * holds fit_stages rows (the layout's own choice, so that a tuning variant of other stages
     * gets the same cy, hence the same bits). */
    int fit_cy, fit_stages;
    /* ... for this many part_grad blocks: the layout's active ones, raised by the caller to the
     * unsharded call's (a row shard's descriptor says how many) so that cy is that call's. */
    int64_t fit_blocks;
    /* Backward: part_grad blocks (part_grad_size), rows per block, blocks that hold rows, and
     * the grad_weight (column sum) kernel's grid. */
    int64_t P, B, active;
    long long colsum_grid;
    /* The variant applied (rms_norm_cuda.h), stages resolved; {0, 0, 0}: the layout as chosen.
     * Forward kernel KCUDA_RMS_VK_BULK: the staged kernel reduces in register rows' order. */
    kcuda_rms_variant variant;
} kcuda_rms_layout;

/* Checks a call: the descriptor (opaque, len), the nbuf buffers (none NULL) and the override
 * (NULL: none). On success copies the descriptor to *d, the backward's unsharded_part_grad_size
 * (0 for a 40-byte descriptor) to *unsharded (NULL: not wanted), and returns 0; otherwise returns
 * BATON_EINVAL with the reason, prefixed by `what`, in why (whylen bytes, may be 0). bwd: the
 * backward's descriptor (part_grad_size counts). */
int baton__kcuda_rms_check(const char *what, void **buffers, int nbuf, const char *opaque,
                           size_t len, int bwd, const kcuda_rms_cfg *override,
                           baton_rms_norm_desc *d, int64_t *unsharded, char *why, size_t whylen);

/* The forward's layout for a checked call: d, its buffers (x, weight, y, invvar: only their
 * alignment is read), the device and the override (NULL: choose). Returns 0, or BATON_EINVAL
 * with the reason in why when the override cannot run on this shape. */
int baton__kcuda_rms_fwd_layout(const baton_rms_norm_desc *d, void *const *buffers,
                                const kcuda_rms_device *dev, const kcuda_rms_cfg *override,
                                kcuda_rms_layout *L, char *why, size_t whylen);

/* The backward's layout (buffers: grad_output, invvar, x, weight, grad_input, grad_weight,
 * part_grad); as baton__kcuda_rms_fwd_layout. */
int baton__kcuda_rms_bwd_layout(const baton_rms_norm_desc *d, void *const *buffers,
                                const kcuda_rms_device *dev, const kcuda_rms_cfg *override,
                                kcuda_rms_layout *L, char *why, size_t whylen);

/* Applies variant v (rms_norm_cuda.h) to L, the layout chosen for d on dev (bwd: the backward's):
 * 0, or BATON_EINVAL with the reason in why when v does not apply to L or its shared memory does
 * not fit. baton__kcuda_rms_fwd_layout and _bwd_layout call it for an override's variant. */
int baton__kcuda_rms_apply_variant(const baton_rms_norm_desc *d, int bwd,
                                   const kcuda_rms_device *dev, const kcuda_rms_variant *v,
                                   kcuda_rms_layout *L, char *why, size_t whylen);

/* The variants a tuner may measure for a call whose chosen layout is L (no variant applied):
 * {0, 0, 0}, the layout as chosen, first, then each variant that applies to L and fits, at most
 * max in all; returns how many. The register forward: the persistent grid, the bulk-copy kernel
 * in rows' order with 2 to 4 stages, and a row a block with w in shared memory; the bulk-copy
 * forward: 2, 3, 4, 6 or 8 stages, and the cp.async kernel with 2 to 4; the register backward whose
 * blocks have more than one row: the other rows held (2, 3, 4, 6 or 8) that its threads and
 * registers allow, and 3 or 4 rows held with 1 or 2 rounds asked into L2 (prefetch) where its rows
 * are aligned for it; a staged backward whose blocks have more than one row: 1 to 4 stages.
 * Anything else: none but {0, 0, 0}. */
#define KCUDA_RMS_MAX_VARIANTS 12
int baton__kcuda_rms_variants(const baton_rms_norm_desc *d, int bwd, const kcuda_rms_device *dev,
                              const kcuda_rms_layout *L, kcuda_rms_variant *out, int max);

/* A short description of what L launches ("register rows, 2 vectors per thread, 256 threads"),
 * for the tuner's report; bwd: L is the backward's. */
void baton__kcuda_rms_describe(const kcuda_rms_layout *L, int bwd, char *buf, size_t cap);

/* Evens out L's grid when L->spread: blocks_per_sm of the chosen kernel (at L->threads and
 * L->smem) times sms clusters run at once; a grid with more rows than that gets as few blocks as
 * give each the same number of rows, so that no tail runs alone. */
void baton__kcuda_rms_spread(kcuda_rms_layout *L, int blocks_per_sm, int sms);

/* Fits the register backward's clusters when L->fit_cy, for active part_grad blocks (L->active,
 * or L->fit_blocks where that is larger: a row shard fits as its unsharded call):
 *  - kx = 1: the largest cy (at most 16, or dev->max_cluster, and the rows per part_grad block)
 *    such that all active clusters of cy blocks are resident at once: active * cy <= sms *
 *    blocks_per_sm and clusters(u, cy) >= active, where clusters() is
 *    cudaOccupancyMaxActiveClusters for that cluster size (the GPCs decide how many fit, which no
 *    formula here knows; on an H100 clusters of 16 fit only 7 at a time). 1 where none fits.
 *  - kx > 1 (only where the override asks for it, and L->chain_ok): kx clusters per part_grad
 *    block, each taking a kx-th of its rows (at least 2 rounds of rows held per block), with the
 *    largest cy at which all active * kx clusters are resident. Cluster k adds its sums to
 *    part_grad after cluster k - 1 (a fixed order). Not the default: on an H100 it filled the SMs
 *    but ran slower than one cluster per part_grad block at every benchmark shape but one
 *    (bench_kernels).
 * Every block then has work from the start and none waits for a second wave. Sets kx, cy, smem
 * and grid, clears fit_cy and returns cy. part_grad's bits depend on kx and cy, so they are fixed
 * for one GPU model and one build (the occupancy of the compiled kernel enters), not across them.
 */
int baton__kcuda_rms_fit_cy(kcuda_rms_layout *L, const baton_rms_norm_desc *d,
                            const kcuda_rms_device *dev, int blocks_per_sm,
                            int (*clusters)(void *u, int cy), void *u);

/* Sets the register backward's kx and cy to values baton__kcuda_rms_fit_cy chose before (for the
 * same call), with the shared memory and grid that follow; clears fit_cy. */
void baton__kcuda_rms_bwd_set_cy(kcuda_rms_layout *L, const baton_rms_norm_desc *d, int kx, int cy);

/* The bytes of grad_weight that the chained register backward (kx > 1) counts in before the
 * column sum overwrites them: a counter that hands out the clusters' work in launch order, and
 * one per part_grad block and cluster rank; zeroed before the launch. */
size_t baton__kcuda_rms_chain_bytes(int64_t active, int cy);

/* The column sum (grad_weight from part_grad) has two kernels with the same bits: up to
 * KCUDA_COLSUM_COLS_P rows of part_grad, a thread per column in blocks of
 * KCUDA_COLSUM_COLS_THREADS; more rows, blocks of 32 columns by 8 lanes of rows. */
#define KCUDA_COLSUM_COLS_P       32
#define KCUDA_COLSUM_COLS_THREADS 128

/* The grid of the grad_weight (column sum) kernel over part_grad's P rows of n2: the backward's
 * and rms_norm_grad_weight's, so that both launch the same column sum. */
long long baton__kcuda_rms_colsum_grid(int64_t n2, int64_t P, int sms);

/* Whether L's kernel wants the largest shared-memory carveout: the staged kernels do (their
 * stages are the bytes in flight; more blocks per SM); register rows, forward and backward,
 * keep L1 for their loads in flight (with the largest carveout, the register forward with w in
 * shared memory ran 2-10 points slower on an H200 in bench_kernels). */
static inline int kcuda_rms_max_carveout(const kcuda_rms_layout *L)
{
    return L->mode != KCUDA_RMS_ROWS;
}

/* Copies what L launches into *chosen (NULL: nothing). */
void baton__kcuda_rms_report(const kcuda_rms_layout *L, kcuda_rms_cfg *chosen);

/* The dynamic shared memory the layout lets a block use: the opt-in limit less the kernels'
 * static part. */
int64_t baton__kcuda_rms_smem_max(const kcuda_rms_device *dev);

#ifdef __cplusplus
}
#endif
#endif /* BATON_KCUDA_RMS_NORM_LAYOUT_H */
