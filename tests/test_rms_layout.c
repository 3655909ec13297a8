/* test_rms_layout.c: the CUDA RMSNorm's host-side layout choice (kernels/cuda/rms_norm_layout.c),
 * on the CPU with made-up devices and buffer addresses: the layouts of named shapes (decode rows,
 * many rows, the tutorial's few long rows), every override path and its errors, and invariants
 * (limits, shared memory, coverage of columns, rows and part_grad blocks) over a grid of shapes;
 * the tuner's variants (what each may change) and its cache (kernels/cuda/rms_norm_tune.c). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/rms_norm_layout.h"
#include "kernels/cuda/rms_norm_tune.h"

/* An H100 SXM (and H200): 132 SMs, 227 KB of opt-in shared memory, 16-block clusters. */
static const kcuda_rms_device H100 = {.sms = 132, .smem_optin = 227 * 1024, .max_cluster = 16};
/* A smaller GPU: 20 SMs, 99 KB of shared memory, portable clusters only. */
static const kcuda_rms_device SMALL = {.sms = 20, .smem_optin = 99 * 1024, .max_cluster = 8};

#define BF16 BATON_DTYPE_BF16
#define F16  BATON_DTYPE_F16
#define F32  BATON_DTYPE_F32
#define F64  BATON_DTYPE_F64

static const baton_dtype FLOATS[4] = {BF16, F16, F32, F64};

/* Buffer addresses: only their alignment is read. */
static void *const ALIGNED[7] = {(void *)0x100000, (void *)0x200000, (void *)0x300000,
                                 (void *)0x400000, (void *)0x500000, (void *)0x600000,
                                 (void *)0x700000};

static baton_rms_norm_desc desc(baton_dtype x, baton_dtype w, int64_t n1, int64_t n2, int64_t P)
{
    baton_rms_norm_desc d = {
        .n1 = n1, .n2 = n2, .eps = 1e-5, .x_dtype = x, .w_dtype = w, .part_grad_size = P};
    return d;
}

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static void name_of(char *buf, size_t cap, const char *pass, const baton_rms_norm_desc *d,
                    const kcuda_rms_device *dev)
{
    snprintf(buf, cap, "%s x %s w %s, %lld x %lld, part_grad %lld, %d SMs", pass,
             baton_dtype_name((baton_dtype)d->x_dtype), baton_dtype_name((baton_dtype)d->w_dtype),
             (long long)d->n1, (long long)d->n2, (long long)d->part_grad_size, dev->sms);
}

/* What holds for every layout, forward or backward. */
static void check_common(const char *what, const baton_rms_norm_desc *d,
                         const kcuda_rms_device *dev, const kcuda_rms_layout *L)
{
    const int vx = 16 / (int)baton_dtype_size((baton_dtype)d->x_dtype);
    cr_assert(L->vec == vx || L->vec == 1, "%s: vec %d", what, L->vec);
    if (d->n2 % vx)
        cr_assert_eq(L->vec, 1, "%s: vectors of %d on a row of %lld", what, vx, (long long)d->n2);
    cr_assert(L->threads >= 32 && L->threads <= KCUDA_MAX_THREADS && L->threads % 32 == 0,
              "%s: threads %d", what, L->threads);
    cr_assert(L->cx >= 1 && L->cy >= 1 && (L->cx == 1 || L->cy == 1), "%s: cx %d, cy %d", what,
              L->cx, L->cy);
    cr_assert_leq(L->cx * L->cy, dev->max_cluster, "%s: a cluster of %d blocks", what,
                  L->cx * L->cy);
    cr_assert(L->grid >= 1 && L->grid <= (1LL << 30), "%s: grid %lld", what, L->grid);
    cr_assert_eq(L->grid % (L->cx * L->cy), 0, "%s: grid %lld is not whole clusters", what,
                 L->grid);
    /* The row's columns: cx chunks cover it, and every block has some (the split kernels' grid
     * of chunks: check_bwd). */
    cr_assert_eq(L->chunk % L->vec, 0, "%s: chunk %lld", what, (long long)L->chunk);
    cr_assert(L->mode == KCUDA_RMS_SPLIT ||
                  (L->chunk * L->cx >= d->n2 && L->chunk * (L->cx - 1) < d->n2),
              "%s: %d chunks of %lld for %lld columns", what, L->cx, (long long)L->chunk,
              (long long)d->n2);
    cr_assert_leq((int64_t)L->smem, baton__kcuda_rms_smem_max(dev),
                  "%s: %zu bytes of shared memory", what, L->smem);
    const int staged = L->mode == KCUDA_RMS_STAGED || L->mode == KCUDA_RMS_STAGED_CP;
    if (staged) {
        cr_assert(L->vec == vx && L->stages >= 1 && L->smem > 0 && L->nv == 0,
                  "%s: staged with vec %d, stages %d, smem %zu, nv %d", what, L->vec, L->stages,
                  L->smem, L->nv);
    } else if (L->mode == KCUDA_RMS_ROWS) {
        /* stages and shared memory: check_fwd and check_bwd */
    } else {
        cr_assert(L->stages == 0 && L->smem == 0, "%s: mode %d with stages %d, smem %zu", what,
                  L->mode, L->stages, L->smem);
    }
    /* The register kernels hold the block's share of the row; longer shares stream. */
    if (L->mode == KCUDA_RMS_REGS)
        cr_assert_leq(L->chunk, (int64_t)L->threads * L->nv * L->vec,
                      "%s: %lld columns in registers of %d threads x %d x %d", what,
                      (long long)L->chunk, L->threads, L->nv, L->vec);
    if (L->mode == KCUDA_RMS_STREAM)
        cr_assert_eq(L->nv, L->vec > 1 ? 2 : 4, "%s: streaming with nv %d", what, L->nv);
}

/* o: the override the layout was chosen under (NULL: none). */
static void check_fwd(const baton_rms_norm_desc *d, const kcuda_rms_device *dev,
                      const kcuda_rms_cfg *o, const kcuda_rms_layout *L)
{
    char what[160];
    name_of(what, sizeof what, "forward", d, dev);
    check_common(what, d, dev, L);
    cr_assert_eq(L->cy, 1, "%s: cy %d", what, L->cy);
    cr_assert(L->mode != KCUDA_RMS_SPLIT, "%s: the split kernels are the backward's", what);
    if (L->mode == KCUDA_RMS_ROWS) {
        cr_assert(baton_dtype_size((baton_dtype)d->x_dtype) <= 4 &&
                      baton_dtype_size((baton_dtype)d->w_dtype) <= 4,
                  "%s: register rows need x and w of at most 4 bytes", what);
        cr_assert(L->nv == 2 || L->nv == 4 || L->nv == 8, "%s: nv %d", what, L->nv);
        cr_assert_leq(d->n2, (int64_t)L->threads * L->nv * L->vec, "%s: the row does not fit",
                      what);
        cr_assert_eq(L->cx, 1, "%s", what);
        /* shared memory only for the row kernel's w */
        const size_t wrow = (size_t)d->n2 * baton_dtype_size((baton_dtype)d->w_dtype);
        cr_assert(L->stages == 0 &&
                      L->smem ==
                          (L->variant.kernel == KCUDA_RMS_VK_ROW ? (wrow + 15) / 16 * 16 : 0),
                  "%s: register rows with stages %d, smem %zu", what, L->stages, L->smem);
    }
    if (L->mode == KCUDA_RMS_STAGED || L->mode == KCUDA_RMS_STAGED_CP)
        cr_assert_leq(L->stages, KCUDA_FWD_BULK_STAGES, "%s: stages %d", what, L->stages);
    /* One cluster per row at most, unless asked for: a block with no row would only wait. */
    if (!(o && o->grid))
        cr_assert_leq(L->grid / L->cx, d->n1, "%s: %lld clusters for %lld rows", what,
                      L->grid / L->cx, (long long)d->n1);
}

static void check_bwd(const baton_rms_norm_desc *d, const kcuda_rms_device *dev,
                      const kcuda_rms_cfg *o, const kcuda_rms_layout *L)
{
    char what[160];
    name_of(what, sizeof what, "backward", d, dev);
    check_common(what, d, dev, L);
    const int64_t n1 = d->n1, n2 = d->n2, P = d->part_grad_size;
    /* part_grad's blocks cover the rows, and `active` of them hold some. */
    cr_assert_eq(L->P, P, "%s", what);
    cr_assert(L->B >= 1 && L->B * P >= n1, "%s: %lld blocks of %lld rows for %lld rows", what,
              (long long)P, (long long)L->B, (long long)n1);
    cr_assert(L->active >= 1 && L->active <= P && (L->active - 1) * L->B < n1 &&
                  L->active * L->B >= n1,
              "%s: active %lld of B %lld", what, (long long)L->active, (long long)L->B);
    cr_assert(L->mode != KCUDA_RMS_STAGED_CP, "%s: mode %d", what, L->mode);
    if (L->mode == KCUDA_RMS_ROWS) {
        cr_assert(baton_dtype_size((baton_dtype)d->x_dtype) <= 4 &&
                      baton_dtype_size((baton_dtype)d->w_dtype) <= 4,
                  "%s: register rows need x and w of at most 4 bytes", what);
        cr_assert(L->nv == 1 || L->nv == 2 || L->nv == 4 || L->nv == 8, "%s: nv %d", what, L->nv);
        cr_assert_leq(n2, (int64_t)L->threads * L->nv * L->vec, "%s: the row does not fit", what);
        cr_assert_eq(L->cx, 1, "%s", what);
        cr_assert(L->stages >= 2 && L->stages <= (L->nv > 2 ? 2 : KCUDA_BWD_ROWS_MAX),
                  "%s: register rows holding %d rows at nv %d", what, L->stages, L->nv);
        /* the column sums for the cluster's combine, only where there is a cluster */
        const size_t a = 4, want = L->cy > 1 ? ((size_t)n2 * a + 15) / 16 * 16 : 0;
        cr_assert_eq(L->smem, want, "%s: register rows over a cluster of %d with smem %zu", what,
                     L->cy, L->smem);
        cr_assert(!L->fit_cy || L->cy == 1, "%s: cy %d left to fit", what, L->cy);
    }
    if (L->mode == KCUDA_RMS_SPLIT) {
        const int vx = 16 / (int)baton_dtype_size((baton_dtype)d->x_dtype);
        cr_assert(n1 <= KCUDA_SPLIT_ROWS && L->vec == vx && L->threads == KCUDA_SPLIT_THREADS,
                  "%s: split with n1 %lld, vec %d, threads %d", what, (long long)n1, L->vec,
                  L->threads);
        cr_assert_eq(L->chunk, (int64_t)L->nv * KCUDA_SPLIT_THREADS * vx, "%s", what);
        cr_assert(L->grid * L->chunk >= n2 && (L->grid - 1) * L->chunk < n2,
                  "%s: %lld blocks of %lld columns", what, L->grid, (long long)L->chunk);
        /* Each block's columns of part_grad hold the copy of all nb * n1 partials. */
        const int64_t last = n2 - (L->grid - 1) * L->chunk;
        cr_assert_geq(P * last, L->grid * n1, "%s: no room for the partials", what);
        return;
    }
    /* Only clusters that hold rows are launched, unless asked for; the grad_weight kernel zeroes
     * the rest. */
    if (!(o && o->grid))
        cr_assert_leq(L->grid / (L->cx * L->cy), L->active * (L->kx > 1 ? L->kx : 1),
                      "%s: grid %lld", what, L->grid);
    if (L->kx > 1)
        cr_assert(L->mode == KCUDA_RMS_ROWS && L->kx <= KCUDA_BWD_CHAIN_MAX && L->chain_ok,
                  "%s: kx %d in mode %d", what, L->kx, L->mode);
    if (L->cy > 1)
        cr_assert(L->cx == 1 && (L->mode == KCUDA_RMS_STAGED || L->mode == KCUDA_RMS_ROWS),
                  "%s: cy %d with cx %d, mode %d", what, L->cy, L->cx, L->mode);
    if (!(o && o->cy))
        cr_assert_leq(L->cy, L->B, "%s: a cluster of %d over part_grad blocks of %lld rows", what,
                      L->cy, (long long)L->B);
    if (L->mode == KCUDA_RMS_STAGED)
        cr_assert_leq(L->stages, KCUDA_CP_STAGES, "%s: stages %d", what, L->stages);
    cr_assert(L->colsum_grid >= 1 && L->colsum_grid <= cdiv(n2, 32) &&
                  L->colsum_grid <= 8LL * dev->sms,
              "%s: grad_weight grid %lld", what, L->colsum_grid);
}

static kcuda_rms_layout fwd_on(const kcuda_rms_device *dev, baton_dtype x, baton_dtype w,
                               int64_t n1, int64_t n2, const kcuda_rms_cfg *o)
{
    const baton_rms_norm_desc d = desc(x, w, n1, n2, 1);
    kcuda_rms_layout L;
    char why[512] = "";
    const int rc = baton__kcuda_rms_fwd_layout(&d, ALIGNED, dev, o, &L, why, sizeof why);
    cr_assert_eq(rc, 0, "forward %lld x %lld: %s", (long long)n1, (long long)n2, why);
    check_fwd(&d, dev, o, &L);
    return L;
}

/* A model of cudaOccupancyMaxActiveClusters: a cluster runs within one GPC, whose SMs each take
 * `per_sm` blocks. The H100's GPCs as modelled here (132 SMs) give the counts measured on one (7
 * clusters of 16, 15 of 8, 66 of 2 at a block per SM; 31 of 4 against 30); the small GPU has two
 * GPCs of 10. */
typedef struct gpu_model {
    const kcuda_rms_device *dev;
    int per_sm;
} gpu_model;

static int model_clusters(void *u, int cy)
{
    static const int h100[] = {18, 18, 18, 18, 16, 16, 16, 12}, small[] = {10, 10};
    const gpu_model *m = u;
    const int big = m->dev->sms == 132;
    const int *gpc = big ? h100 : small, n = big ? 8 : 2;
    cr_assert(cy >= 2 && cy <= m->dev->max_cluster, "asked about clusters of %d", cy);
    int total = 0;
    for (int i = 0; i < n; i++)
        total += gpc[i] * m->per_sm / cy;
    return total;
}

/* The backward's layout on dev, its cy fitted (where the layout leaves it to fit) for a kernel of
 * per_sm blocks per SM on the model above. */
static kcuda_rms_layout bwd_fit(const kcuda_rms_device *dev, baton_dtype x, baton_dtype w,
                                int64_t n1, int64_t n2, int64_t P, const kcuda_rms_cfg *o,
                                int per_sm)
{
    const baton_rms_norm_desc d = desc(x, w, n1, n2, P);
    kcuda_rms_layout L;
    char why[512] = "";
    const int rc = baton__kcuda_rms_bwd_layout(&d, ALIGNED, dev, o, &L, why, sizeof why);
    cr_assert_eq(rc, 0, "backward %lld x %lld: %s", (long long)n1, (long long)n2, why);
    gpu_model m = {dev, per_sm};
    if (L.fit_cy)
        baton__kcuda_rms_fit_cy(&L, &d, dev, per_sm, model_clusters, &m);
    check_bwd(&d, dev, o, &L);
    return L;
}

static kcuda_rms_layout bwd_on(const kcuda_rms_device *dev, baton_dtype x, baton_dtype w,
                               int64_t n1, int64_t n2, int64_t P, const kcuda_rms_cfg *o)
{
    return bwd_fit(dev, x, w, n1, n2, P, o, 1);
}

/* The layout's reason when it refuses, or "" when it does not. */
static const char *refusal(int bwd, baton_dtype x, baton_dtype w, int64_t n1, int64_t n2, int64_t P,
                           const kcuda_rms_cfg *o)
{
    static char why[512];
    const baton_rms_norm_desc d = desc(x, w, n1, n2, P);
    kcuda_rms_layout L;
    why[0] = 0;
    const int rc = bwd ? baton__kcuda_rms_bwd_layout(&d, ALIGNED, &H100, o, &L, why, sizeof why)
                       : baton__kcuda_rms_fwd_layout(&d, ALIGNED, &H100, o, &L, why, sizeof why);
    if (rc == 0)
        return "";
    cr_assert_eq(rc, BATON_EINVAL, "refused with %d, not BATON_EINVAL", rc);
    cr_assert(why[0], "refused without a reason");
    return why;
}

#define expect_layout(L, m, t, g, cx_, cy_, st, nv_, sm)                                           \
    do {                                                                                           \
        cr_expect_eq((L).mode, (m), "mode %d, expected %d", (L).mode, (m));                        \
        cr_expect_eq((L).threads, (t), "threads %d, expected %d", (L).threads, (t));               \
        cr_expect_eq((L).grid, (long long)(g), "grid %lld, expected %lld", (L).grid,               \
                     (long long)(g));                                                              \
        cr_expect_eq((L).cx, (cx_), "cx %d, expected %d", (L).cx, (cx_));                          \
        cr_expect_eq((L).cy, (cy_), "cy %d, expected %d", (L).cy, (cy_));                          \
        cr_expect_eq((L).stages, (st), "stages %d, expected %d", (L).stages, (st));                \
        cr_expect_eq((L).nv, (nv_), "nv %d, expected %d", (L).nv, (nv_));                          \
        cr_expect_eq((L).smem, (size_t)(sm), "smem %zu, expected %zu", (L).smem, (size_t)(sm));    \
    } while (0)

/* ---- named shapes -------------------------------------------------------------------------- */

Test(rms_layout, decode_rows_take_a_block_per_row_in_registers)
{
    /* 4096 bf16 columns are 512 vectors: 4 per thread, 128 threads, a block per row. */
    kcuda_rms_layout L = fwd_on(&H100, BF16, BF16, 1, 4096, NULL);
    expect_layout(L, KCUDA_RMS_REGS, 128, 1, 1, 1, 0, 4, 0);
    cr_expect_eq(L.vec, 8);
    cr_expect(!L.spread && !L.may_shrink);
    L = fwd_on(&H100, BF16, BF16, 32, 4096, NULL);
    expect_layout(L, KCUDA_RMS_REGS, 128, 32, 1, 1, 0, 4, 0);
    /* Up to 2 x SMs rows, up to 2048 vectors a row. */
    L = fwd_on(&H100, F32, F32, 264, 8192, NULL);
    expect_layout(L, KCUDA_RMS_REGS, 512, 264, 1, 1, 0, 4, 0);
}

Test(rms_layout, decode_rows_end_at_two_rows_per_sm_and_2048_vectors)
{
    /* One row more than 2 x SMs: the register-rows kernel. */
    kcuda_rms_layout L = fwd_on(&H100, BF16, BF16, 265, 4096, NULL);
    cr_expect_eq(L.mode, KCUDA_RMS_ROWS);
    L = fwd_on(&SMALL, BF16, BF16, 41, 4096, NULL);
    cr_expect_eq(L.mode, KCUDA_RMS_ROWS, "41 rows on 20 SMs: mode %d", L.mode);
    L = fwd_on(&SMALL, BF16, BF16, 40, 4096, NULL);
    cr_expect_eq(L.mode, KCUDA_RMS_REGS, "40 rows on 20 SMs: mode %d", L.mode);
    /* 2049 vectors of bf16: no longer a decode row; a cluster of 4 blocks of at least 4096
     * columns, staged. */
    L = fwd_on(&H100, BF16, BF16, 1, 16392, NULL);
    cr_expect_eq(L.mode, KCUDA_RMS_STAGED);
    cr_expect_eq(L.cx, 4, "cx %d", L.cx);
    cr_expect_eq(L.chunk, 4104, "chunk %lld", (long long)L.chunk);
}

Test(rms_layout, the_column_sum_grid_follows_its_kernel)
{
    /* Up to KCUDA_COLSUM_COLS_P rows of part_grad: a thread per column, at most 8 blocks an SM;
     * more: 32 columns a block. */
    cr_expect_eq(baton__kcuda_rms_colsum_grid(4096, 16, 132), 4096 / KCUDA_COLSUM_COLS_THREADS);
    cr_expect_eq(baton__kcuda_rms_colsum_grid(4096, KCUDA_COLSUM_COLS_P, 132),
                 4096 / KCUDA_COLSUM_COLS_THREADS);
    cr_expect_eq(baton__kcuda_rms_colsum_grid(4095, 1, 132), 32,
                 "a partial block for the last columns");
    cr_expect_eq(baton__kcuda_rms_colsum_grid(1 << 20, 16, 132), 8 * 132);
    cr_expect_eq(baton__kcuda_rms_colsum_grid(4096, KCUDA_COLSUM_COLS_P + 1, 132), 4096 / 32);
}

Test(rms_layout, decode_rows_backward_is_staged_with_a_cluster_per_part_grad_block)
{
    /* 1 row: one block, one stage. Shared memory: w 8 KB, sums 16 KB, 2 invvar slots, 8 + 8 KB of
     * grad_output and x. */
    kcuda_rms_layout L = bwd_on(&H100, BF16, BF16, 1, 4096, 16, NULL);
    expect_layout(L, KCUDA_RMS_STAGED, 128, 1, 1, 1, 1, 0, 8192 + 16384 + 16 + 16384);
    cr_expect_eq(L.colsum_grid, 4096 / KCUDA_COLSUM_COLS_THREADS, "a thread per column");
    /* 32 rows in 16 part_grad blocks of 2: each block's rows over a cluster of 2. */
    L = bwd_on(&H100, BF16, BF16, 32, 4096, 16, NULL);
    expect_layout(L, KCUDA_RMS_STAGED, 128, 32, 1, 2, 1, 0, 8192 + 16384 + 16 + 16384);
    cr_expect_eq(L.B, 2);
    cr_expect_eq(L.active, 16);
}

Test(rms_layout, many_rows_forward_takes_register_rows_a_block_per_row)
{
    /* bf16: 2 vectors per thread; 512 vectors a row: 256 threads; a block for every row. */
    kcuda_rms_layout L = fwd_on(&H100, BF16, BF16, 65536, 4096, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 256, 65536, 1, 1, 0, 2, 0);
    cr_expect(!L.spread);
    baton__kcuda_rms_spread(&L, 8, H100.sms);
    cr_expect_eq(L.grid, 65536, "a block per row is not evened out");
    /* The persistent variant is: 8 blocks per SM, 1056 resident; 63 rows each need only 1041
     * blocks. */
    const baton_rms_norm_desc d = desc(BF16, BF16, 65536, 4096, 1);
    const kcuda_rms_variant persist = {KCUDA_RMS_VK_PERSIST, 0, 0};
    cr_assert_eq(baton__kcuda_rms_apply_variant(&d, 0, &H100, &persist, &L, NULL, 0), 0);
    cr_expect(L.mode == KCUDA_RMS_ROWS && L.threads == 256 && L.nv == 2 && L.spread);
    baton__kcuda_rms_spread(&L, 8, H100.sms);
    cr_expect_eq(L.grid, 1041);
    /* f32: 2 vectors per thread as well, while 512 threads cover the row; 4 above. */
    L = fwd_on(&H100, F32, F32, 65536, 4096, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 512, 65536, 1, 1, 0, 2, 0);
    L = fwd_on(&H100, BF16, BF16, 16384, 8192, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 512, 16384, 1, 1, 0, 2, 0);
    L = fwd_on(&H100, F32, F32, 16384, 8192, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 512, 16384, 1, 1, 0, 4, 0);
    /* 16384 f32 columns (4096 vectors): 8 per thread. */
    L = fwd_on(&H100, F32, BF16, 1000, 16384, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 512, 1000, 1, 1, 0, 8, 0);
}

Test(rms_layout, many_rows_with_wide_weights_are_staged_by_bulk_copies)
{
    /* f64 x: no register rows. 32 KB rows: 3 stages (about 64 KB ahead), 512 threads, a grid
     * evened out: one block per SM resident gives 128 blocks of 32 rows. */
    kcuda_rms_layout L = fwd_on(&H100, F64, F64, 4096, 4096, NULL);
    expect_layout(L, KCUDA_RMS_STAGED, 512, 4096, 1, 1, 3, 0, 4 * 32768);
    cr_expect(L.spread);
    baton__kcuda_rms_spread(&L, 1, H100.sms);
    cr_expect_eq(L.grid, 128);
    /* f32 x with f64 weights: 16 KB rows of x, 4 stages. */
    L = fwd_on(&H100, F32, F64, 4096, 4096, NULL);
    expect_layout(L, KCUDA_RMS_STAGED, 256, 4096, 1, 1, 4, 0, 32768 + 4 * 16384);
}

Test(rms_layout, many_rows_backward_takes_register_rows_with_clusters_that_all_fit_at_once)
{
    /* bf16 rows of 4096: two vectors per thread (16-bit rows), 256 threads, 4 rows held (two
     * reducing, two loading). 256 part_grad blocks: more than the 132 SMs hold at a block each,
     * so no cluster and nothing to combine. */
    kcuda_rms_layout L = bwd_on(&H100, BF16, BF16, 65536, 4096, 256, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 256, 256, 1, 1, 4, 2, 0);
    cr_expect(!L.may_shrink);
    /* f32 rows of 4096: 2 vectors per thread, 3 rows held. */
    L = bwd_on(&H100, F32, F32, 65536, 4096, 256, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 512, 256, 1, 1, 3, 2, 0);
    cr_expect_eq(L.kx, 1, "256 part_grad blocks fill the SMs: no chain");
    /* f32 rows of 8192: 4 vectors. */
    L = bwd_on(&H100, F32, F32, 16384, 8192, 256, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 512, 256, 1, 1, 2, 4, 0);
    /* The tutorial's part_grad_size 16 at a block per SM: 16 clusters of 8 would be 128 blocks,
     * but only 15 clusters of 8 (or 7) fit in the modelled GPCs at once; 16 of 6 do. */
    L = bwd_on(&H100, BF16, BF16, 16384, 8192, 16, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 512, 16 * 6, 1, 6, 4, 2, 32768);
    cr_expect_eq(L.kx, 1, "clusters are chained only when asked for");
    cr_expect_eq(L.colsum_grid, 8192 / KCUDA_COLSUM_COLS_THREADS, "a thread per column");
    /* Asked for, 4 chained clusters of 2 fill 128 SMs. */
    const kcuda_rms_cfg four = {.kx = 4};
    L = bwd_on(&H100, BF16, BF16, 16384, 8192, 16, &four);
    expect_layout(L, KCUDA_RMS_ROWS, 512, 16 * 4 * 2, 1, 2, 4, 2, 32768);
    cr_expect_eq(L.kx, 4);
    /* Two blocks per SM: 16 clusters of 13 to 16 do not fit, of 12 they do; 64 chained
     * clusters of 4 do. */
    L = bwd_fit(&H100, BF16, BF16, 32768, 4096, 16, NULL, 2);
    expect_layout(L, KCUDA_RMS_ROWS, 256, 16 * 12, 1, 12, 4, 2, 16384);
    L = bwd_fit(&H100, BF16, BF16, 32768, 4096, 16, &four, 2);
    expect_layout(L, KCUDA_RMS_ROWS, 256, 16 * 4 * 4, 1, 4, 4, 2, 16384);
    /* 16 rows a block but 256 blocks: no cluster. 16 blocks of 256 rows: clusters of 6. */
    L = bwd_on(&H100, BF16, BF16, 4096, 4096, 256, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 256, 256, 1, 1, 4, 2, 0);
    L = bwd_on(&H100, BF16, BF16, 4096, 4096, 16, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 256, 96, 1, 6, 4, 2, 16384);
    cr_expect(L.chain_ok && L.kx == 1, "chain_ok %d, kx %d", L.chain_ok, L.kx);
    /* No room in grad_weight for the chain's counters (64 bf16 columns: 128 bytes for 1 + 16 *
     * 16 counters), or grad_weight not aligned for them: one cluster per part_grad block. */
    L = bwd_on(&H100, BF16, BF16, 65536, 64, 16, NULL);
    cr_expect(L.mode == KCUDA_RMS_ROWS && !L.chain_ok && L.kx == 1, "mode %d, chain_ok %d, kx %d",
              L.mode, L.chain_ok, L.kx);
    void *odd[7];
    memcpy(odd, ALIGNED, sizeof odd);
    odd[5] = (char *)odd[5] + 2;
    const baton_rms_norm_desc dd = desc(BF16, BF16, 4096, 4096, 16);
    char why[256];
    cr_assert_eq(baton__kcuda_rms_bwd_layout(&dd, odd, &H100, NULL, &L, why, sizeof why), 0, "%s",
                 why);
    cr_expect(!L.chain_ok, "grad_weight at 2 bytes past alignment");
    const kcuda_rms_cfg two = {.kx = 2};
    cr_expect_eq(baton__kcuda_rms_bwd_layout(&dd, odd, &H100, &two, &L, why, sizeof why),
                 BATON_EINVAL);
    cr_expect(strstr(why, "aligned to 4 bytes"), "%s", why);
    /* f32 rows of 2048 (16 KB): 3 rows held. */
    L = bwd_on(&H100, F32, F32, 65536, 2048, 256, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 512, 256, 1, 1, 3, 1, 0);
    /* A cluster no larger than the rows of a block: 300 rows in 100 blocks of 3. */
    L = bwd_fit(&H100, BF16, BF16, 300, 1024, 100, NULL, 8);
    cr_expect_eq(L.cy, 3, "cy %d", L.cy);
    /* Rows of more than 2048 vectors take another kernel; fewer rows than 2 per SM are staged. */
    L = bwd_on(&H100, BF16, BF16, 4096, 32768, 16, NULL);
    cr_expect_neq(L.mode, KCUDA_RMS_ROWS);
    L = bwd_on(&H100, BF16, BF16, 200, 4096, 16, NULL);
    cr_expect_eq(L.mode, KCUDA_RMS_STAGED, "mode %d", L.mode);
}

Test(rms_layout, register_backward_cy_is_left_to_fit_unless_asked_for)
{
    const baton_rms_norm_desc d = desc(BF16, BF16, 16384, 4096, 16);
    kcuda_rms_layout L;
    char why[256];
    cr_assert_eq(baton__kcuda_rms_bwd_layout(&d, ALIGNED, &H100, NULL, &L, why, sizeof why), 0,
                 "%s", why);
    cr_expect(L.mode == KCUDA_RMS_ROWS && L.fit_cy && L.cy == 1 && L.fit_stages == 4,
              "mode %d, fit_cy %d, cy %d, fit_stages %d", L.mode, L.fit_cy, L.cy, L.fit_stages);
    /* A cy or a grid asked for is kept. */
    kcuda_rms_cfg o = {.mode = 5, .cy = 4};
    cr_assert_eq(baton__kcuda_rms_bwd_layout(&d, ALIGNED, &H100, &o, &L, why, sizeof why), 0, "%s",
                 why);
    cr_expect(!L.fit_cy && L.cy == 4 && L.grid == 64 && L.smem == 16384,
              "fit_cy %d, cy %d, grid %lld, smem %zu", L.fit_cy, L.cy, L.grid, L.smem);
    /* A variant's rows held do not move cy: the fit is for the layout's own kernel. */
    o = (kcuda_rms_cfg){.variant = {0, 2}};
    cr_assert_eq(baton__kcuda_rms_bwd_layout(&d, ALIGNED, &H100, &o, &L, why, sizeof why), 0, "%s",
                 why);
    cr_expect(L.fit_cy && L.stages == 2 && L.fit_stages == 4, "fit_cy %d, stages %d, fit %d",
              L.fit_cy, L.stages, L.fit_stages);
    /* ... but rows held that the override asks of the layout do: the fit is for their kernel. */
    o = (kcuda_rms_cfg){.mode = 5, .stages = 8};
    cr_assert_eq(baton__kcuda_rms_bwd_layout(&d, ALIGNED, &H100, &o, &L, why, sizeof why), 0, "%s",
                 why);
    cr_expect(L.fit_cy && L.stages == 8 && L.fit_stages == 8, "fit_cy %d, stages %d, fit %d",
              L.fit_cy, L.stages, L.fit_stages);
    /* Nothing fits (the runtime answers 0 for every size): one block per part_grad block. */
    gpu_model none = {&SMALL, 0};
    cr_assert_eq(baton__kcuda_rms_fit_cy(&L, &d, &H100, 1, model_clusters, &none), 1);
    cr_expect(L.grid == 16 * L.kx && L.smem == 0 && !L.fit_cy, "grid %lld, kx %d, smem %zu", L.grid,
              L.kx, L.smem);
    /* Set again from a remembered answer. */
    baton__kcuda_rms_bwd_set_cy(&L, &d, 1, 5);
    cr_expect(L.cy == 5 && L.grid == 80 && L.smem == 16384, "cy %d grid %lld smem %zu", L.cy,
              L.grid, L.smem);
}

Test(rms_layout, staged_backward_stages_by_the_row_width)
{
    /* The staged kernel where a cluster is asked for (cy); its stages as it chooses them. 256
     * part_grad blocks of 256 rows, a cluster of 2 on each: 512 blocks, crowded (>= 3 per SM).
     * 16-bit rows of 8 KB: no row ahead. */
    kcuda_rms_cfg o = {.cy = 2};
    kcuda_rms_layout L = bwd_on(&H100, BF16, BF16, 65536, 4096, 256, &o);
    expect_layout(L, KCUDA_RMS_STAGED, 128, 512, 1, 2, 1, 0, 8192 + 16384 + 16 + 16384);
    /* 32-bit rows, crowded: three ahead (4 stages). */
    L = bwd_on(&H100, F32, F32, 65536, 4096, 256, &o);
    expect_layout(L, KCUDA_RMS_STAGED, 256, 512, 1, 2, 4, 0,
                  16384 + 16384 + 32 + 4 * (16384 + 16384));
    /* 32 KB f32 rows: 4 stages do not fit in 226 KB, 2 do. */
    L = bwd_on(&H100, F32, F32, 16384, 8192, 256, &o);
    expect_layout(L, KCUDA_RMS_STAGED, 512, 512, 1, 2, 2, 0,
                  32768 + 32768 + 16 + 2 * (32768 + 32768));
    /* Clusters of 16 on 16 blocks, not crowded: 2 stages and 8 vectors per thread. */
    o.cy = 16;
    L = bwd_on(&H100, F32, F32, 16384, 8192, 16, &o);
    expect_layout(L, KCUDA_RMS_STAGED, 256, 256, 1, 16, 2, 0,
                  32768 + 32768 + 16 + 2 * (32768 + 32768));
}

Test(rms_layout, tutorial_shape_splits_rows_over_clusters_forward_and_kernels_backward)
{
    /* 4 x 262144 bf16: each row over a cluster of 16 blocks of 16384 columns, one stage (the
     * cp.async kernel), 256 threads of 8 vectors. */
    kcuda_rms_layout L = fwd_on(&H100, BF16, BF16, 4, 262144, NULL);
    expect_layout(L, KCUDA_RMS_STAGED, 256, 64, 16, 1, 1, 0, 32768 + 32768);
    cr_expect(L.may_shrink && !L.spread);
    /* The backward: the split kernels, 256 blocks of 1024 columns. */
    L = bwd_on(&H100, BF16, BF16, 4, 262144, 16, NULL);
    expect_layout(L, KCUDA_RMS_SPLIT, 128, 256, 1, 1, 0, 1, 0);
    cr_expect_eq(L.chunk, 1024);
    /* Where 16-block clusters cannot run: 8 blocks of 32768 columns. */
    kcuda_rms_device d8 = H100;
    d8.max_cluster = 8;
    L = fwd_on(&d8, BF16, BF16, 4, 262144, NULL);
    expect_layout(L, KCUDA_RMS_STAGED, 512, 32, 8, 1, 1, 0, 65536 + 65536);
    cr_expect(!L.may_shrink);
}

Test(rms_layout, few_long_rows_backward_takes_the_split_kernels)
{
    /* 2 x 1M f64: 16 vectors per thread and row, 4096 columns a block. */
    kcuda_rms_layout L = bwd_on(&H100, F64, F16, 2, 1048576, 3, NULL);
    expect_layout(L, KCUDA_RMS_SPLIT, 128, 256, 1, 1, 0, 16, 0);
    cr_expect_eq(L.chunk, 4096);
    /* 17 rows are too many for it: clusters of 16 blocks. */
    L = bwd_on(&H100, BF16, BF16, 17, 262144, 16, NULL);
    cr_expect_eq(L.mode, KCUDA_RMS_STAGED);
    cr_expect_eq(L.cx, 16);
    /* So are rows that do not split (a single block's worth of columns per row). */
    L = bwd_on(&H100, BF16, BF16, 4, 4096, 16, NULL);
    cr_expect_eq(L.mode, KCUDA_RMS_STAGED);
}

/* The data-parallel plan (scripts/shard.py) gets the one-GPU part_grad bits only where a shard's
 * backward (n1 / N rows, P / N blocks) adds each block's rows in the full call's order: the same
 * family and the same cy (the rank-ordered split of a block's rows). The split kernels (few long
 * rows, the tutorial's shape) add a block's rows in row order at any size. The register backward
 * fits cy to the clusters resident at once, which depends on the number of blocks: a shard, with
 * fewer blocks, fits larger clusters (docs/shard.md). */
Test(rms_layout, row_shards_keep_the_full_backwards_row_order_only_in_the_split_kernels)
{
    static const struct {
        baton_dtype x;
        int64_t n1, n2, P;
    } cases[] = {{BF16, 4, 262144, 4}, {BF16, 16, 262144, 16}, {F32, 8, 131072, 8}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int N = 2; N <= 4; N += 2) {
            const kcuda_rms_layout Lf = bwd_on(&H100, cases[i].x, cases[i].x, cases[i].n1,
                                               cases[i].n2, cases[i].P, NULL),
                                   Ls = bwd_on(&H100, cases[i].x, cases[i].x, cases[i].n1 / N,
                                               cases[i].n2, cases[i].P / N, NULL);
            cr_expect(Lf.mode == KCUDA_RMS_SPLIT && Ls.mode == KCUDA_RMS_SPLIT && Lf.B == Ls.B,
                      "case %zu over %d shards: full mode %d B %lld, shard mode %d B %lld", i, N,
                      Lf.mode, (long long)Lf.B, Ls.mode, (long long)Ls.B);
        }
    /* Where it does not hold: 8192 x 4096 at P 16 fits clusters of 6 (16 of them), its halves at
     * P 8 clusters of 12 (8 of them). */
    const kcuda_rms_layout Lf = bwd_on(&H100, BF16, BF16, 8192, 4096, 16, NULL),
                           Ls = bwd_on(&H100, BF16, BF16, 4096, 4096, 8, NULL);
    cr_expect(Lf.mode == KCUDA_RMS_ROWS && Ls.mode == KCUDA_RMS_ROWS &&
                  (Lf.cy != Ls.cy || Lf.kx != Ls.kx),
              "8192 x 4096 at P 16: mode %d kx %d cy %d, its halves at P 8: mode %d kx %d cy %d "
              "(update docs/shard.md if this changed)",
              Lf.mode, Lf.kx, Lf.cy, Ls.mode, Ls.kx, Ls.cy);
}

Test(rms_layout, rows_that_are_not_whole_vectors_or_unaligned_buffers_load_scalars)
{
    /* 4095 columns: scalars in registers would need 1024 threads: the block streams. */
    kcuda_rms_layout L = fwd_on(&H100, BF16, BF16, 17, 4095, NULL);
    expect_layout(L, KCUDA_RMS_STREAM, 512, 17, 1, 1, 0, 4, 0);
    cr_expect_eq(L.vec, 1);
    L = fwd_on(&H100, BF16, BF16, 3, 2047, NULL);
    expect_layout(L, KCUDA_RMS_REGS, 512, 3, 1, 1, 0, 4, 0);
    /* The weight 8 bytes off a 16-byte boundary: scalar loads too, forward and backward. */
    const baton_rms_norm_desc d = desc(BF16, BF16, 8, 2048, 8);
    void *fb[4] = {ALIGNED[0], (char *)ALIGNED[1] + 8, ALIGNED[2], ALIGNED[3]};
    char why[512];
    cr_assert_eq(baton__kcuda_rms_fwd_layout(&d, fb, &H100, NULL, &L, why, sizeof why), 0, "%s",
                 why);
    check_fwd(&d, &H100, NULL, &L);
    cr_expect_eq(L.vec, 1);
    cr_expect_eq(L.mode, KCUDA_RMS_REGS);
    void *bb[7] = {ALIGNED[0],
                   ALIGNED[1],
                   ALIGNED[2],
                   ALIGNED[3],
                   ALIGNED[4],
                   ALIGNED[5],
                   (char *)ALIGNED[6] + 8};
    cr_assert_eq(baton__kcuda_rms_bwd_layout(&d, bb, &H100, NULL, &L, why, sizeof why), 0, "%s",
                 why);
    check_bwd(&d, &H100, NULL, &L);
    cr_expect_eq(L.vec, 1, "part_grad 8 bytes off: vec %d", L.vec);
    /* f32 invvar 4-byte aligned is enough. */
    bb[6] = ALIGNED[6];
    bb[1] = (char *)ALIGNED[1] + 4;
    cr_assert_eq(baton__kcuda_rms_bwd_layout(&d, bb, &H100, NULL, &L, why, sizeof why), 0, "%s",
                 why);
    cr_expect_eq(L.vec, 8);
}

Test(rms_layout, a_small_gpu_gets_fewer_stages_and_portable_clusters)
{
    /* 98 KB for the stages: 2 of the f64 forward's 32 KB rows (3 on an H100). */
    kcuda_rms_layout L = fwd_on(&SMALL, F64, F64, 4096, 4096, NULL);
    expect_layout(L, KCUDA_RMS_STAGED, 512, 4096, 1, 1, 2, 0, 3 * 32768);
    /* f64 weights (no register rows): the f32 backward of 32 KB rows does not fit one stage, so
     * it streams (staged on an H100). */
    L = bwd_on(&SMALL, F32, F64, 4096, 8192, 16, NULL);
    cr_expect_eq(L.mode, KCUDA_RMS_STREAM, "mode %d", L.mode);
    L = bwd_on(&H100, F32, F64, 4096, 8192, 16, NULL);
    cr_expect_eq(L.mode, KCUDA_RMS_STAGED, "mode %d", L.mode);
    /* Many rows: register rows. At a block per SM, 20 SMs hold one block of each of the 16
     * part_grad blocks; at 8 per SM, clusters of at most 8 where 16 cannot run (10 would fit). */
    L = bwd_on(&SMALL, F32, F32, 4096, 8192, 16, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 512, 16, 1, 1, 2, 4, 0);
    L = bwd_fit(&SMALL, F32, F32, 4096, 8192, 16, NULL, 8);
    expect_layout(L, KCUDA_RMS_ROWS, 512, 16 * 8, 1, 8, 2, 4, 32768);
    L = bwd_on(&H100, F32, F32, 4096, 8192, 16, NULL);
    expect_layout(L, KCUDA_RMS_ROWS, 512, 16 * 6, 1, 6, 2, 4, 32768);
    /* Long rows split over at most 8 blocks. */
    L = fwd_on(&SMALL, F32, F32, 2, 1048576, NULL);
    cr_expect_eq(L.cx, 8);
    cr_expect_eq(L.mode, KCUDA_RMS_STREAM, "131072 f32 columns a block do not fit: mode %d",
                 L.mode);
}

/* ---- overrides ------------------------------------------------------------------------------ */

Test(rms_layout, overrides_force_each_mode)
{
    /* Mode 2: streaming, forward and backward. */
    kcuda_rms_cfg o = {.mode = KCUDA_RMS_STREAM};
    kcuda_rms_layout L = fwd_on(&H100, BF16, F32, 3, 8192, &o);
    cr_expect_eq(L.mode, KCUDA_RMS_STREAM);
    cr_expect_eq(L.nv, 2);
    L = bwd_on(&H100, BF16, F32, 3, 8192, 2, &o);
    cr_expect_eq(L.mode, KCUDA_RMS_STREAM);
    /* Mode 3: the split backward on short rows. */
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_SPLIT};
    L = bwd_on(&H100, F16, F32, 16, 20000, 3, &o);
    expect_layout(L, KCUDA_RMS_SPLIT, 128, 20, 1, 1, 0, 1, 0);
    /* Mode 4: the cp.async forward with 3 stages on a grid of 8, reported as 4. */
    o = (kcuda_rms_cfg){.grid = 8, .stages = 3, .mode = KCUDA_RMS_STAGED_CP};
    L = fwd_on(&H100, BF16, F32, 100, 4096, &o);
    expect_layout(L, KCUDA_RMS_STAGED_CP, 128, 8, 1, 1, 3, 0, 16384 + 3 * 8192);
    cr_expect(!L.spread, "a grid that was asked for is kept");
    kcuda_rms_cfg c;
    memset(&c, 0xff, sizeof c);
    baton__kcuda_rms_report(&L, &c);
    cr_expect(c.mode == 4 && c.stages == 3 && c.grid == 8 && c.nv == 0 && c.threads == 128 &&
                  c.cx == 1 && c.cy == 1 && c.vec == 8 && c.smem == 40960,
              "report: mode %d stages %d grid %lld nv %d", c.mode, c.stages, c.grid, c.nv);
    /* Mode 4 where the staged kernel does not fit: it streams, and says so. */
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_STAGED_CP};
    L = fwd_on(&H100, F32, F32, 1, 1048576, &o);
    cr_expect_eq(L.mode, KCUDA_RMS_STREAM);
    /* Mode 4 in the backward chooses (no split kernels: it is an override). */
    L = bwd_on(&H100, BF16, BF16, 4, 262144, 16, &o);
    cr_expect_eq(L.mode, KCUDA_RMS_STAGED);
    /* Mode 5: register rows with 8 vectors per thread on few rows. */
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_ROWS, .nv = 8};
    L = fwd_on(&H100, F32, BF16, 257, 8192, &o);
    expect_layout(L, KCUDA_RMS_ROWS, 256, 257, 1, 1, 0, 8, 0);
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_ROWS, .grid = 7};
    L = fwd_on(&H100, BF16, BF16, 101, 2048, &o);
    cr_expect_eq(L.grid, 7);
    cr_expect(!L.spread);
    /* vec 1: scalar loads on an aligned row. */
    o = (kcuda_rms_cfg){.vec = 1};
    L = fwd_on(&H100, BF16, BF16, 4, 2048, &o);
    cr_expect(L.vec == 1 && L.mode == KCUDA_RMS_REGS, "vec %d, mode %d", L.vec, L.mode);
}

/* The launch paths that tests/test_kernels_cuda.c forces on a GPU: the backward's mode and
 * cluster shape it asserts there are the ones chosen here for an H100 or H200. */
Test(rms_layout, the_gpu_tests_forced_paths_get_the_layouts_they_assert)
{
    const struct {
        baton_dtype x, w;
        int64_t n1, n2, pgs;
        kcuda_rms_cfg over;
        int want_mode, want_cx, want_cy;
    } paths[] = {
        {BF16, F32, 3, 8192, 2, {.mode = 2}, 2, 0, 0},
        {F16, F16, 3, 8190, 2, {.threads = 64}, 2, 0, 0},
        {BF16, BF16, 4, 2048, 2, {.vec = 1}, 1, 0, 0},
        {BF16, BF16, 2, 16384, 4, {.cx = 4}, 0, 4, 1},
        {F32, F64, 2, 16384, 4, {.cx = 4, .mode = 2}, 2, 4, 1},
        {F64, F64, 3, 6001, 2, {.cx = 3}, 1, 3, 1},
        {BF16, BF16, 2, 65536, 2, {.cx = 16}, 0, 16, 1},
        {BF16, F32, 67, 4096, 2, {.cy = 4}, 0, 1, 4},
        {F64, BF16, 130, 2048, 3, {.cy = 8}, 0, 1, 8},
        {BF16, BF16, 100, 4096, 64, {.grid = 8, .stages = 1}, 0, 1, 1},
        {F32, F16, 100, 4096, 64, {.grid = 8, .stages = 3}, 0, 1, 1},
        {F16, F32, 100, 1024, 64, {.grid = 5, .stages = 4}, 0, 1, 1},
        {BF16, BF16, 99, 8192, 99, {.grid = 14, .threads = 512}, 0, 2, 1},
        {BF16, BF16, 3, 8192, 2, {.mode = 3}, 3, 0, 0},
        {F64, F16, 5, 6000, 7, {.mode = 3}, 3, 0, 0},
        {F16, F32, 16, 20000, 3, {.mode = 3}, 3, 0, 0},
        {F32, BF16, 9, 70000, 4, {.mode = 3}, 3, 0, 0},
        {BF16, BF16, 10, 16384, 4, {.cx = 4, .stages = 2}, 0, 4, 1},
        {F16, BF16, 100, 4096, 64, {.grid = 8, .stages = 8}, 0, 1, 1},
        {F64, F32, 37, 2048, 8, {.grid = 6, .stages = 6}, 0, 1, 1},
        {BF16, F32, 100, 4096, 64, {.grid = 8, .stages = 3, .mode = 4}, 0, 1, 1},
        {BF16, BF16, 300, 4096, 30, {.mode = 5, .nv = 2}, -1, 0, 0},
        {F32, BF16, 257, 8192, 16, {.mode = 5, .nv = 8}, -1, 0, 0},
        {F16, F32, 130, 4104, 13, {.mode = 5, .nv = 4}, -1, 0, 0},
        {BF16, F16, 70, 8, 7, {.mode = 5}, -1, 0, 0},
        {BF16, BF16, 101, 2048, 101, {.mode = 5, .grid = 7}, -1, 0, 0},
        {F32, BF16, 3000, 1024, 30, {0}, 5, 1, 0},
        {BF16, F32, 300, 2048, 300, {.mode = 5}, 5, 1, 1},
        {F16, BF16, 300, 1000, 3, {.mode = 5, .cy = 2}, 5, 1, 2},
        {BF16, BF16, 301, 1024, 3, {.mode = 5, .stages = 4}, 5, 1, 0},
        {F32, F32, 301, 2048, 5, {.mode = 5, .stages = 3, .cy = 3}, 5, 1, 3},
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        const kcuda_rms_cfg *o = paths[i].over.mode || paths[i].over.threads || paths[i].over.vec ||
                                         paths[i].over.cx || paths[i].over.cy ||
                                         paths[i].over.grid || paths[i].over.stages ||
                                         paths[i].over.nv
                                     ? &paths[i].over
                                     : NULL;
        const kcuda_rms_layout F =
            fwd_on(&H100, paths[i].x, paths[i].w, paths[i].n1, paths[i].n2, o);
        const kcuda_rms_layout B =
            bwd_on(&H100, paths[i].x, paths[i].w, paths[i].n1, paths[i].n2, paths[i].pgs, o);
        if (paths[i].over.mode == 5 || (paths[i].n1 >= 3000 && paths[i].over.mode == 0))
            cr_expect_eq(F.mode, KCUDA_RMS_ROWS, "path %zu: forward mode %d", i, F.mode);
        if (paths[i].want_mode >= 0)
            cr_expect_eq(B.mode, paths[i].want_mode, "path %zu: backward mode %d, not %d", i,
                         B.mode, paths[i].want_mode);
        if (paths[i].want_cx)
            cr_expect_eq(B.cx, paths[i].want_cx, "path %zu: backward cx %d", i, B.cx);
        if (paths[i].want_cy)
            cr_expect_eq(B.cy, paths[i].want_cy, "path %zu: backward cy %d", i, B.cy);
    }
}

Test(rms_layout, overrides_that_cannot_run_are_refused_with_the_reason)
{
    kcuda_rms_cfg o = {.mode = KCUDA_RMS_ROWS};
    cr_expect(strstr(refusal(0, F64, F32, 1000, 4096, 1, &o), "mode 5 (register rows)"));
    cr_expect(strstr(refusal(0, BF16, BF16, 1000, 65536, 1, &o), "n2 <= 4096 vectors"));
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_ROWS, .threads = 64};
    cr_expect(strstr(refusal(0, BF16, BF16, 1000, 4096, 1, &o), "cannot hold 512 vectors"));
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_STAGED_CP, .stages = 5};
    cr_expect(strstr(refusal(0, BF16, BF16, 100, 4096, 1, &o), "with mode 4 (1..4)"));
    /* ... but the backward lowers stages above 4 to 4. */
    cr_expect_str_empty(refusal(1, BF16, BF16, 100, 4096, 64, &o));
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_SPLIT};
    cr_expect(strstr(refusal(1, BF16, BF16, 17, 8192, 16, &o), "n1 <= 16"));
    /* The register backward holds 2 to 4 rows, only 2 from 4 vectors per thread on, and 6 or 8
     * only in blocks of at most 256 threads whose rows fit in registers. */
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_ROWS, .stages = 1};
    cr_expect(strstr(refusal(1, BF16, BF16, 1000, 4096, 16, &o), "stages = 1 with register rows"));
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_ROWS, .stages = 3, .nv = 4};
    cr_expect(strstr(refusal(1, BF16, BF16, 1000, 4096, 16, &o), "one of 2"));
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_ROWS, .stages = 5};
    cr_expect(strstr(refusal(1, BF16, BF16, 1000, 4096, 16, &o), "one of 2, 3, 4, 6, 8"));
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_ROWS, .stages = 6};
    cr_expect_str_empty(refusal(1, BF16, BF16, 1000, 4096, 16, &o));
    cr_expect(strstr(refusal(1, BF16, BF16, 1000, 8192, 16, &o), "512 threads"));
    /* Chained clusters: 1 to 4, on the register backward only, and not with a grid. */
    o = (kcuda_rms_cfg){.kx = 5};
    cr_expect(strstr(refusal(1, BF16, BF16, 1000, 4096, 16, &o), "1 to 4 clusters"));
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_ROWS, .kx = 2, .grid = 64};
    cr_expect(strstr(refusal(1, BF16, BF16, 1000, 4096, 16, &o), "no grid override"));
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_STREAM, .kx = 2};
    cr_expect(strstr(refusal(1, BF16, BF16, 1000, 4096, 16, &o), "not mode 2"));
    o = (kcuda_rms_cfg){.kx = 2};
    cr_expect(strstr(refusal(1, BF16, BF16, 16, 4096, 16, &o), "cannot have"));
    /* bf16 x with f32 weights at 2 vectors: 8 rows would not fit in registers. */
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_ROWS, .stages = 8};
    const char *m = refusal(1, BF16, F32, 1000, 4096, 16, &o);
    cr_expect(strstr(m, "one of 2, 3, 4") && !strstr(m, "4, 6"), "%s", m);
    o = (kcuda_rms_cfg){.mode = KCUDA_RMS_SPLIT};
    /* 10 blocks, the last of 8 columns: P rows of 8 cells for 160 partials. */
    cr_expect(strstr(refusal(1, BF16, BF16, 16, 9224, 19, &o), "part_grad room"));
    cr_expect_str_empty(refusal(1, BF16, BF16, 16, 9224, 20, &o));
    cr_expect(strstr(refusal(1, BF16, BF16, 4, 4095, 16, &o), "16-byte rows"));
    /* cy on rows that the layout splits over a cluster already. */
    o = (kcuda_rms_cfg){.cy = 4};
    cr_expect(strstr(refusal(1, BF16, BF16, 2, 65536, 2, &o), "cy = 4 needs cx == 1"));
    cr_expect(strstr(refusal(1, BF16, BF16, 8, 4095, 2, &o), "cy = 4 needs cx == 1"));
}

/* ---- checks of a call ----------------------------------------------------------------------- */

static const char *check_why(int bwd, const baton_rms_norm_desc *d, size_t len, void **buffers,
                             const kcuda_rms_cfg *o)
{
    static char why[512];
    baton_rms_norm_desc out;
    why[0] = 0;
    const int rc =
        baton__kcuda_rms_check(bwd ? "rms_norm_bwd" : "rms_norm_fwd", buffers, bwd ? 7 : 4,
                               (const char *)d, len, bwd, o, &out, NULL, why, sizeof why);
    if (rc == 0) {
        cr_expect(memcmp(&out, d, sizeof out) == 0, "the checked descriptor is the one given");
        return "";
    }
    cr_assert_eq(rc, BATON_EINVAL);
    cr_assert(strncmp(why, bwd ? "rms_norm_bwd: " : "rms_norm_fwd: ", 14) == 0,
              "the reason names the kernel: %s", why);
    return why;
}

Test(rms_layout, the_backward_takes_a_48_byte_row_shard_descriptor)
{
    void *b[7];
    memcpy(b, ALIGNED, sizeof b);
    baton_rms_norm_shard_desc sd = {desc(BF16, BF16, 4096, 4096, 8), 16};
    baton_rms_norm_desc out;
    int64_t u = -1;
    char why[512] = "";
    cr_assert_eq(baton__kcuda_rms_check("rms_norm_bwd", b, 7, (const char *)&sd, sizeof sd, 1, NULL,
                                        &out, &u, why, sizeof why),
                 0, "%s", why);
    cr_expect(u == 16 && memcmp(&out, &sd.rms, sizeof out) == 0, "unsharded %lld", (long long)u);
    /* 40 bytes: none */
    cr_assert_eq(baton__kcuda_rms_check("rms_norm_bwd", b, 7, (const char *)&sd, sizeof sd.rms, 1,
                                        NULL, &out, &u, why, sizeof why),
                 0, "%s", why);
    cr_expect_eq(u, 0);
    /* the forward does not take it; fewer blocks than the shard's own are refused */
    cr_expect_neq(baton__kcuda_rms_check("rms_norm_fwd", b, 4, (const char *)&sd, sizeof sd, 0,
                                         NULL, &out, NULL, why, sizeof why),
                  0);
    cr_expect(strstr(why, "is 48 bytes but must be 40 or 32"), "%s", why);
    sd.unsharded_part_grad_size = 4;
    cr_expect_neq(baton__kcuda_rms_check("rms_norm_bwd", b, 7, (const char *)&sd, sizeof sd, 1,
                                         NULL, &out, &u, why, sizeof why),
                  0);
    cr_expect(strstr(why, "unsharded_part_grad_size is 4: it must be 0 or >= part_grad_size (8)"),
              "%s", why);
}

/* A row shard told the unsharded call's number of blocks fits cy as that call does: the layout
 * of 8192 x 4096 at P 16 and of its halves at P 8 with fit_blocks 16 agree (on the H100 model). */
Test(rms_layout, a_row_shard_fits_cy_for_the_unsharded_blocks)
{
    const baton_rms_norm_desc full = desc(BF16, BF16, 8192, 4096, 16),
                              half = desc(BF16, BF16, 4096, 4096, 8);
    kcuda_rms_layout Lf, Ls;
    char why[256];
    gpu_model m = {&H100, 2};
    cr_assert_eq(baton__kcuda_rms_bwd_layout(&full, ALIGNED, &H100, NULL, &Lf, why, sizeof why), 0);
    cr_assert_eq(baton__kcuda_rms_bwd_layout(&half, ALIGNED, &H100, NULL, &Ls, why, sizeof why), 0);
    cr_assert(Lf.fit_blocks == 16 && Ls.fit_blocks == 8, "fit_blocks %lld, %lld",
              (long long)Lf.fit_blocks, (long long)Ls.fit_blocks);
    kcuda_rms_layout Lo = Ls;
    baton__kcuda_rms_fit_cy(&Lf, &full, &H100, 2, model_clusters, &m);
    baton__kcuda_rms_fit_cy(&Lo, &half, &H100, 2, model_clusters, &m);
    Ls.fit_blocks = 16;
    baton__kcuda_rms_fit_cy(&Ls, &half, &H100, 2, model_clusters, &m);
    cr_expect(Ls.kx == Lf.kx && Ls.cy == Lf.cy && (Lo.kx != Lf.kx || Lo.cy != Lf.cy),
              "full kx %d cy %d, shard on its own kx %d cy %d, told 16 blocks kx %d cy %d", Lf.kx,
              Lf.cy, Lo.kx, Lo.cy, Ls.kx, Ls.cy);
    cr_expect_eq(Ls.grid, 8 * Lf.kx * Lf.cy, "the shard launches its own 8 part_grad blocks");
}

Test(rms_layout, bad_descriptors_buffers_and_overrides_are_refused_by_name)
{
    void *b[7];
    memcpy(b, ALIGNED, sizeof b);
    baton_rms_norm_desc d = desc(BF16, BF16, 4, 4096, 0);
    cr_expect_str_empty(check_why(0, &d, sizeof d, b, NULL), "the forward ignores part_grad");
    cr_expect(strstr(check_why(1, &d, sizeof d, b, NULL), "part_grad_size is 0: it must be >= 1"));
    d.part_grad_size = 16;
    cr_expect_str_empty(check_why(1, &d, sizeof d, b, NULL));
    cr_expect(strstr(check_why(0, &d, sizeof d - 16, b, NULL), "is 24 bytes but must be 40 or 32"));
    d.n1 = 0;
    cr_expect(strstr(check_why(0, &d, sizeof d, b, NULL),
                     "n1 = 0 rows of n2 = 4096 elements: both must be >= 1"));
    d.n1 = INT64_MAX / 4;
    cr_expect(strstr(check_why(0, &d, sizeof d, b, NULL), "product fit in 64 bits"));
    d = desc(BATON_DTYPE_I32, BF16, 4, 4096, 16);
    cr_expect(
        strstr(check_why(0, &d, sizeof d, b, NULL), "x_dtype is code 5: it must be bf16 (1)"));
    d = desc(BF16, BF16, 4, 4096, 16);
    d.eps = -1;
    cr_expect(strstr(check_why(0, &d, sizeof d, b, NULL),
                     "rms_norm_fwd: eps is -1: it must be a finite number >= 0"));
    d.eps = 1e-5;
    b[5] = NULL;
    cr_expect_str_empty(check_why(0, &d, sizeof d, b, NULL), "the forward has 4 buffers");
    cr_expect(strstr(check_why(1, &d, sizeof d, b, NULL), "buffer 5 is NULL"));
    cr_expect(strstr(check_why(1, &d, sizeof d, NULL, NULL), "buffers is NULL"));
    b[5] = ALIGNED[5];
    const struct {
        kcuda_rms_cfg o;
        const char *why;
    } bad[] = {
        {{.threads = 48}, "threads = 48"},
        {{.threads = 544}, "threads = 544"},
        {{.cx = 17}, "cx = 17"},
        {{.cx = 2, .cy = 2}, "not both > 1"},
        {{.vec = 2}, "vec = 2"},
        {{.stages = 9}, "stages = 9 (0..8)"},
        {{.nv = 3}, "nv = 3"},
        {{.mode = 6}, "mode = 6"},
        {{.grid = -1}, "grid = -1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect(strstr(check_why(1, &d, sizeof d, b, &bad[i].o), bad[i].why),
                  "override %zu: wanted \"%s\"", i, bad[i].why);
}

/* ---- invariants ----------------------------------------------------------------------------- */

Test(rms_layout, every_default_layout_keeps_within_the_limits)
{
    static const int64_t n1s[] = {1, 2, 3, 4, 16, 17, 40, 41, 100, 263, 264, 265, 1000, 65536};
    static const int64_t n2s[] = {1,    7,     8,     1024,  2047,   4095,    4096,
                                  8192, 16384, 16392, 65536, 262144, 1048576, 3000000};
    const kcuda_rms_device *devs[] = {&H100, &SMALL};
    int n = 0;
    for (size_t v = 0; v < 2; v++)
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++)
                for (size_t i = 0; i < sizeof n1s / sizeof n1s[0]; i++)
                    for (size_t j = 0; j < sizeof n2s / sizeof n2s[0]; j++) {
                        const int64_t n1 = n1s[i], n2 = n2s[j];
                        kcuda_rms_layout F = fwd_on(devs[v], FLOATS[a], FLOATS[b], n1, n2, NULL);
                        /* Evened out for any occupancy, the grid still covers the rows with
                         * no more rows per cluster than a resident grid would have. */
                        for (int per_sm = 1; per_sm <= 16; per_sm *= 4) {
                            kcuda_rms_layout S = F;
                            baton__kcuda_rms_spread(&S, per_sm, devs[v]->sms);
                            const long long g0 = F.grid / F.cx, g = S.grid / S.cx;
                            long long res = (long long)per_sm * devs[v]->sms / F.cx;
                            res = res < 1 ? 1 : res;
                            cr_assert_eq(S.grid % S.cx, 0);
                            if (F.spread && g0 > res)
                                cr_assert(g <= res && cdiv(g0, g) == cdiv(g0, res),
                                          "%lld rows' clusters spread to %lld with %lld resident",
                                          g0, g, res);
                            else
                                cr_assert_eq(g, g0);
                        }
                        const int64_t Ps[] = {1, 16, 256, n1};
                        for (size_t p = 0; p < 4; p++)
                            bwd_on(devs[v], FLOATS[a], FLOATS[b], n1, n2, Ps[p], NULL);
                        n++;
                    }
    cr_assert_eq(n, 2 * 16 * 14 * 14);
}

Test(rms_layout, overridden_layouts_keep_within_the_limits)
{
    /* Every combination of a few override values that the layout accepts keeps the invariants
     * (the 16-block clusters only where max_cluster allows them). */
    static const int modes[] = {0, 1, 2, 4};
    static const int threads[] = {0, 32, 512};
    static const int cxs[] = {0, 1, 4, 16};
    static const int stages[] = {0, 1, 4, 8};
    static const long long grids[] = {0, 1, 7};
    const int64_t shapes[][2] = {{1, 4096}, {3, 8190}, {100, 4096}, {4, 262144}, {2000, 1024}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int a = 0; a < 4; a++)
            for (size_t m = 0; m < 4; m++)
                for (size_t t = 0; t < 3; t++)
                    for (size_t c = 0; c < 4; c++)
                        for (size_t k = 0; k < 4; k++)
                            for (size_t g = 0; g < 3; g++) {
                                const kcuda_rms_cfg o = {.mode = modes[m],
                                                         .threads = threads[t],
                                                         .cx = cxs[c],
                                                         .stages = stages[k],
                                                         .grid = grids[g]};
                                const baton_rms_norm_desc d =
                                    desc(FLOATS[a], BF16, shapes[s][0], shapes[s][1], 16);
                                kcuda_rms_layout L;
                                char why[512];
                                if (baton__kcuda_rms_fwd_layout(&d, ALIGNED, &H100, &o, &L, why,
                                                                sizeof why) == 0) {
                                    check_fwd(&d, &H100, &o, &L);
                                    if (o.cx)
                                        cr_assert_leq(L.cx, o.cx);
                                    if (o.threads)
                                        cr_assert_eq(L.threads, o.threads);
                                }
                                if (baton__kcuda_rms_bwd_layout(&d, ALIGNED, &H100, &o, &L, why,
                                                                sizeof why) == 0)
                                    check_bwd(&d, &H100, &o, &L);
                            }
}

/* ---- tuning: the variants and the cache -------------------------------------------------------
 */

static int variants_of(int bwd, const kcuda_rms_device *dev, baton_rms_norm_desc d,
                       kcuda_rms_layout *L, kcuda_rms_variant *v)
{
    char why[512] = "";
    const int rc = bwd ? baton__kcuda_rms_bwd_layout(&d, ALIGNED, dev, NULL, L, why, sizeof why)
                       : baton__kcuda_rms_fwd_layout(&d, ALIGNED, dev, NULL, L, why, sizeof why);
    cr_assert_eq(rc, 0, "%s", why);
    return baton__kcuda_rms_variants(&d, bwd, dev, L, v, KCUDA_RMS_MAX_VARIANTS);
}

Test(rms_layout, register_rows_may_be_replaced_by_bulk_copies_at_the_same_threads)
{
    const baton_rms_norm_desc d = desc(BF16, BF16, 16384, 8192, 1);
    kcuda_rms_layout L;
    kcuda_rms_variant v[KCUDA_RMS_MAX_VARIANTS];
    const int n = variants_of(0, &H100, d, &L, v);
    cr_assert_eq(L.mode, KCUDA_RMS_ROWS);
    cr_assert_eq(n, 6,
                 "the default, a persistent grid, the bulk-copy kernel with 2, 3, 4 stages and a "
                 "row a block: %d",
                 n);
    cr_assert(v[0].kernel == 0 && v[0].stages == 0);
    cr_assert(v[1].kernel == KCUDA_RMS_VK_PERSIST && v[1].stages == 0);
    kcuda_rms_layout P = L;
    cr_assert_eq(baton__kcuda_rms_apply_variant(&d, 0, &H100, &v[1], &P, NULL, 0), 0);
    cr_assert(P.mode == L.mode && P.threads == L.threads && P.nv == L.nv && P.grid == L.grid &&
                  P.spread && !L.spread,
              "the same kernel and threads, on a grid to be evened out");
    cr_assert(v[n - 1].kernel == KCUDA_RMS_VK_ROW && v[n - 1].stages == 0);
    kcuda_rms_layout R = L;
    cr_assert_eq(baton__kcuda_rms_apply_variant(&d, 0, &H100, &v[n - 1], &R, NULL, 0), 0);
    cr_assert(R.mode == L.mode && R.threads == L.threads && R.nv == L.nv && R.grid == L.grid &&
                  !R.spread && R.smem == 8192 * 2 && L.smem == 0,
              "the same threads and a block per row, w's row in shared memory");
    for (int i = 2; i < n - 1; i++) {
        cr_assert_eq(v[i].kernel, KCUDA_RMS_VK_BULK);
        cr_assert_eq(v[i].stages, i);
        kcuda_rms_layout T = L;
        cr_assert_eq(baton__kcuda_rms_apply_variant(&d, 0, &H100, &v[i], &T, NULL, 0), 0);
        cr_assert_eq(T.mode, KCUDA_RMS_STAGED);
        cr_assert_eq(T.threads, L.threads, "the same threads: the same vectors per thread");
        cr_assert(T.cx == 1 && T.chunk == d.n2 && T.vec == L.vec && T.grid == L.grid && T.spread);
        cr_assert_eq(T.stages, v[i].stages);
        cr_assert_eq(T.smem, (size_t)(8192 * 2 + v[i].stages * 8192 * 2));
        cr_assert_eq(T.variant.kernel, KCUDA_RMS_VK_BULK);
        kcuda_rms_cfg rep;
        baton__kcuda_rms_report(&T, &rep);
        cr_assert(rep.variant.kernel == KCUDA_RMS_VK_BULK && rep.variant.stages == v[i].stages);
    }
}

Test(rms_layout, bulk_copy_forward_varies_its_stages_and_may_take_cp_async)
{
    /* f64 weights with many rows: the staged bulk-copy kernel */
    const baton_rms_norm_desc d = desc(BF16, F64, 4096, 4096, 1);
    kcuda_rms_layout L;
    kcuda_rms_variant v[KCUDA_RMS_MAX_VARIANTS];
    const int n = variants_of(0, &H100, d, &L, v);
    cr_assert(L.mode == KCUDA_RMS_STAGED && L.stages >= 2, "mode %d, stages %d", L.mode, L.stages);
    int cp = 0, stages = 0;
    for (int i = 1; i < n; i++) {
        kcuda_rms_layout T = L;
        cr_assert_eq(baton__kcuda_rms_apply_variant(&d, 0, &H100, &v[i], &T, NULL, 0), 0);
        cr_assert(T.threads == L.threads && T.cx == L.cx && T.chunk == L.chunk &&
                  T.grid == L.grid && T.spread == L.spread);
        cr_assert_leq((int64_t)T.smem, baton__kcuda_rms_smem_max(&H100));
        if (v[i].kernel == KCUDA_RMS_VK_CP) {
            cr_assert_eq(T.mode, KCUDA_RMS_STAGED_CP);
            cr_assert_leq(T.stages, KCUDA_CP_STAGES);
            cp++;
        } else {
            cr_assert_eq(v[i].kernel, 0);
            cr_assert(T.mode == KCUDA_RMS_STAGED && T.stages >= 2 && T.stages != L.stages);
            stages++;
        }
    }
    cr_assert_eq(cp, 3, "cp.async with 2, 3 and 4 stages");
    cr_assert_geq(stages, 3, "bulk copies with other stages");
}

Test(rms_layout, staged_backward_varies_only_its_stages)
{
    /* Fewer rows than 2 per SM: the staged kernel, 4 rows per cluster block. */
    const baton_rms_norm_desc d = desc(BF16, BF16, 256, 8192, 4);
    kcuda_rms_layout L;
    kcuda_rms_variant v[KCUDA_RMS_MAX_VARIANTS];
    const int n = variants_of(1, &H100, d, &L, v);
    cr_assert_eq(L.mode, KCUDA_RMS_STAGED);
    cr_assert_eq(n, 4, "the default and three other stage counts: %d", n);
    for (int i = 1; i < n; i++) {
        kcuda_rms_layout T = L;
        cr_assert_eq(v[i].kernel, 0);
        cr_assert_eq(baton__kcuda_rms_apply_variant(&d, 1, &H100, &v[i], &T, NULL, 0), 0);
        cr_assert(T.mode == L.mode && T.threads == L.threads && T.cx == L.cx && T.cy == L.cy &&
                  T.chunk == L.chunk && T.grid == L.grid && T.B == L.B && T.P == L.P &&
                  T.active == L.active && T.colsum_grid == L.colsum_grid);
        cr_assert(T.stages == v[i].stages && T.stages != L.stages);
    }
    /* A block of one row has nothing to stage ahead; the split kernels and decode rows have no
     * variants either. */
    cr_assert_eq(variants_of(1, &H100, desc(BF16, BF16, 256, 4096, 256), &L, v), 1);
    cr_assert_eq(variants_of(1, &H100, desc(BF16, BF16, 4, 262144, 4), &L, v), 1);
    cr_assert_eq(variants_of(0, &H100, desc(BF16, BF16, 4, 262144, 1), &L, v), 1);
    cr_assert_eq(variants_of(0, &H100, desc(BF16, BF16, 32, 4096, 1), &L, v), 1);
    cr_assert_eq(variants_of(0, &H100, desc(F32, F32, 1000, 4095, 1), &L, v), 1);
}

Test(rms_layout, variants_that_do_not_apply_are_refused_with_the_reason)
{
    char why[512];
    kcuda_rms_layout L;
    const baton_rms_norm_desc rows = desc(BF16, BF16, 16384, 4096, 1);
    const baton_rms_norm_desc wide = desc(BF16, F64, 4096, 4096, 1);
    const baton_rms_norm_desc back = desc(F32, F32, 256, 8192, 4);
    /* register backward rows: 8-byte rows of grad_output (bf16, 1020 columns) */
    const baton_rms_norm_desc odd = desc(F32, BF16, 16384, 1020, 16);
    const baton_rms_norm_desc deep = desc(BF16, BF16, 16384, 4096, 16);
    struct {
        const baton_rms_norm_desc *d;
        int bwd;
        kcuda_rms_variant v;
        const char *why;
    } bad[] = {
        {&rows, 0, {KCUDA_RMS_VK_CP, 0, 0}, "applies where the bulk-copy kernel"},
        {&rows, 0, {0, 3, 0}, "applies to a staged layout"},
        {&rows, 0, {KCUDA_RMS_VK_BULK, 1, 0}, "needs 2 to 8 stages"},
        {&rows, 0, {KCUDA_RMS_VK_PERSIST, 2, 0}, "with stages 0"},
        {&wide, 0, {KCUDA_RMS_VK_PERSIST, 0, 0}, "a persistent grid"},
        {&rows, 0, {KCUDA_RMS_VK_ROW, 2, 0}, "with stages 0"},
        {&wide, 0, {KCUDA_RMS_VK_ROW, 0, 0}, "a row a block"},
        {&wide, 0, {KCUDA_RMS_VK_BULK, 0, 0}, "applies where register rows"},
        {&wide, 0, {KCUDA_RMS_VK_CP, 8, 0}, "takes 1 to 4 stages"},
        {&back, 1, {KCUDA_RMS_VK_BULK, 2, 0}, "change only its stages"},
        {&back, 1, {0, 8, 0}, "applies to a staged layout"},
        {&rows, 0, {0, 0, 2}, "applies to the register backward"},
        {&back, 1, {0, 0, 2}, "applies to the register backward"},
        {&odd, 1, {0, 0, 1}, "16-byte aligned"},
        {&deep, 1, {0, 6, 1}, "3 or 4 rows"},
        {&deep, 1, {0, 0, 5}, "prefetch = 5 (0..4)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const kcuda_rms_cfg o = {.variant = bad[i].v};
        why[0] = 0;
        const int rc =
            bad[i].bwd
                ? baton__kcuda_rms_bwd_layout(bad[i].d, ALIGNED, &H100, &o, &L, why, sizeof why)
                : baton__kcuda_rms_fwd_layout(bad[i].d, ALIGNED, &H100, &o, &L, why, sizeof why);
        cr_expect_eq(rc, BATON_EINVAL, "variant %zu", i);
        cr_expect(strstr(why, bad[i].why) != NULL, "variant %zu: \"%s\", wanted \"%s\"", i, why,
                  bad[i].why);
    }
    /* Shared memory: four stages of 16 KB f32 rows (and grad_output) do not fit in 99 KB. */
    const baton_rms_norm_desc big = desc(F32, F32, 32, 4096, 4);
    const kcuda_rms_cfg o = {.variant = {0, 4}};
    cr_assert_eq(baton__kcuda_rms_bwd_layout(&big, ALIGNED, &SMALL, &o, &L, why, sizeof why),
                 BATON_EINVAL);
    cr_assert(strstr(why, "shared memory") != NULL, "%s", why);
    const kcuda_rms_cfg out_of_range = {.variant = {5, 0}};
    cr_assert_eq(
        baton__kcuda_rms_fwd_layout(&rows, ALIGNED, &H100, &out_of_range, &L, why, sizeof why),
        BATON_EINVAL);
    cr_assert(strstr(why, "variant kernel = 5") != NULL, "%s", why);
}

Test(rms_layout, every_variant_keeps_the_threads_chunks_and_clusters_of_its_default)
{
    /* The bitwise promise on the host side: a variant changes the kernel or its stages, never
     * what decides the order of a row's sum (threads, vectors, columns per block, clusters) or
     * which rows a part_grad block adds (P, B, cy). The GPU test checks the bits themselves. */
    static const int64_t n1s[] = {1, 17, 264, 265, 1000, 4096, 16384};
    static const int64_t n2s[] = {8, 1024, 4096, 8192, 16384, 65536, 262144};
    const kcuda_rms_device *devs[] = {&H100, &SMALL};
    int with = 0;
    for (size_t dv = 0; dv < 2; dv++)
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++)
                for (size_t i = 0; i < sizeof n1s / sizeof n1s[0]; i++)
                    for (size_t j = 0; j < sizeof n2s / sizeof n2s[0]; j++)
                        for (int bwd = 0; bwd < 2; bwd++) {
                            const baton_rms_norm_desc d =
                                desc(FLOATS[a], FLOATS[b], n1s[i], n2s[j], 256);
                            kcuda_rms_layout L;
                            kcuda_rms_variant v[KCUDA_RMS_MAX_VARIANTS];
                            const int n = variants_of(bwd, devs[dv], d, &L, v);
                            cr_assert(n >= 1 && n <= KCUDA_RMS_MAX_VARIANTS);
                            with += n > 1;
                            for (int k = 1; k < n; k++) {
                                kcuda_rms_layout T = L;
                                const kcuda_rms_cfg o = {.variant = v[k]};
                                char why[512] = "";
                                const int rc =
                                    bwd ? baton__kcuda_rms_bwd_layout(&d, ALIGNED, devs[dv], &o, &T,
                                                                      why, sizeof why)
                                        : baton__kcuda_rms_fwd_layout(&d, ALIGNED, devs[dv], &o, &T,
                                                                      why, sizeof why);
                                cr_assert_eq(rc, 0, "%s", why);
                                if (bwd)
                                    check_bwd(&d, devs[dv], &o, &T);
                                else
                                    check_fwd(&d, devs[dv], &o, &T);
                                cr_assert(T.threads == L.threads && T.vec == L.vec &&
                                          T.cx == L.cx && T.cy == L.cy && T.chunk == L.chunk &&
                                          T.grid == L.grid && T.P == L.P && T.B == L.B);
                                if (v[k].kernel == KCUDA_RMS_VK_PERSIST)
                                    cr_assert(T.mode == L.mode && T.nv == L.nv && T.spread);
                                else if (v[k].kernel == KCUDA_RMS_VK_ROW)
                                    cr_assert(T.mode == L.mode && T.nv == L.nv && !T.spread &&
                                              T.smem >= (size_t)d.n2 * baton_dtype_size(
                                                                           (baton_dtype)d.w_dtype));
                                else if (bwd && L.mode == KCUDA_RMS_ROWS)
                                    cr_assert(T.mode == L.mode && T.nv == L.nv &&
                                              T.stages == (v[k].stages ? v[k].stages : L.stages) &&
                                              T.variant.prefetch == v[k].prefetch &&
                                              T.fit_stages == L.fit_stages && T.smem == L.smem);
                                else
                                    cr_assert(T.mode == KCUDA_RMS_STAGED ||
                                              T.mode == KCUDA_RMS_STAGED_CP);
                            }
                        }
    cr_assert_gt(with, 100, "variants on %d shapes", with);
}

Test(rms_layout, tuning_keys_group_rows_by_powers_of_two_and_name_the_gpu)
{
    kcuda_rms_layout L;
    kcuda_rms_variant v[KCUDA_RMS_MAX_VARIANTS];
    kcuda_rms_tune_key a, b;
    baton_rms_norm_desc d = desc(BF16, BF16, 16384, 8192, 1);
    variants_of(0, &H100, d, &L, v);
    baton__kcuda_rms_tune_key_make(&a, "NVIDIA H100 80GB HBM3", 0, &d, &L);
    d.n1 = 32767;
    baton__kcuda_rms_tune_key_make(&b, "NVIDIA H100 80GB HBM3", 0, &d, &L);
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0, "16384 and 32767 rows: one class");
    d.n1 = 32768;
    baton__kcuda_rms_tune_key_make(&b, "NVIDIA H100 80GB HBM3", 0, &d, &L);
    cr_assert_neq(memcmp(&a, &b, sizeof a), 0, "32768 rows: the next class");
    d.n1 = 16384;
    baton__kcuda_rms_tune_key_make(&b, "NVIDIA H200", 0, &d, &L);
    cr_assert_neq(memcmp(&a, &b, sizeof a), 0, "another GPU");
    baton__kcuda_rms_tune_key_make(&b, "NVIDIA H100 80GB HBM3", 1, &d, &L);
    cr_assert_neq(memcmp(&a, &b, sizeof a), 0, "the backward");
    d.n2 = 8200;
    baton__kcuda_rms_tune_key_make(&b, "NVIDIA H100 80GB HBM3", 0, &d, &L);
    cr_assert_neq(memcmp(&a, &b, sizeof a), 0, "another row length");
    /* A name longer than the key's room is cut, not overrun. */
    char longname[200];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    baton__kcuda_rms_tune_key_make(&b, longname, 0, &d, &L);
    cr_assert_eq(strlen(b.device), sizeof b.device - 1);
}

Test(rms_layout, the_tuning_cache_keeps_the_first_choice_per_class_and_refuses_when_full)
{
    baton__kcuda_rms_tune_reset();
    cr_assert(baton__kcuda_rms_tune_empty());
    kcuda_rms_layout L;
    kcuda_rms_variant v[KCUDA_RMS_MAX_VARIANTS], got;
    baton_rms_norm_desc d = desc(BF16, BF16, 16384, 8192, 1);
    variants_of(0, &H100, d, &L, v);
    kcuda_rms_tune_key k;
    baton__kcuda_rms_tune_key_make(&k, "GPU A", 0, &d, &L);
    cr_assert_eq(baton__kcuda_rms_tune_find(&k, &got), 0);
    cr_assert_eq(baton__kcuda_rms_tune_store(&k, &v[2]), 0);
    cr_assert(!baton__kcuda_rms_tune_empty());
    cr_assert_eq(baton__kcuda_rms_tune_store(&k, &v[3]), 0);
    cr_assert_eq(baton__kcuda_rms_tune_find(&k, &got), 1);
    cr_assert(got.kernel == v[2].kernel && got.stages == v[2].stages, "the first choice stays");

    /* A plain call with autotune finds it and launches it; another GPU's call does not. */
    kcuda_rms_layout T = L;
    baton__kcuda_rms_apply_tuned("GPU A", 0, &d, &H100, &T);
    cr_assert(T.mode == KCUDA_RMS_STAGED && T.variant.kernel == KCUDA_RMS_VK_BULK &&
              T.stages == v[2].stages && T.threads == L.threads);
    T = L;
    baton__kcuda_rms_apply_tuned("GPU B", 0, &d, &H100, &T);
    cr_assert(T.mode == KCUDA_RMS_ROWS && T.variant.kernel == 0);

    /* A class whose variant does not apply to this call's layout keeps the layout. */
    baton_rms_norm_desc w = desc(BF16, F64, 4096, 4096, 1);
    kcuda_rms_layout W;
    variants_of(0, &H100, w, &W, v);
    kcuda_rms_tune_key kw;
    baton__kcuda_rms_tune_key_make(&kw, "GPU A", 0, &w, &W);
    const kcuda_rms_variant wrong = {KCUDA_RMS_VK_BULK, 2, 0};
    cr_assert_eq(baton__kcuda_rms_tune_store(&kw, &wrong), 0);
    kcuda_rms_layout T2 = W;
    baton__kcuda_rms_apply_tuned("GPU A", 0, &w, &H100, &T2);
    cr_assert(memcmp(&T2, &W, sizeof W) == 0);

    /* Full: the class keeps its default, and says so. */
    int stored = 2;
    for (int i = 0; stored < KCUDA_RMS_TUNE_SLOTS; i++, stored++) {
        d.n2 = 16 + 8 * i;
        baton__kcuda_rms_tune_key_make(&k, "GPU C", 0, &d, &L);
        cr_assert_eq(baton__kcuda_rms_tune_store(&k, &v[1]), 0);
    }
    d.n2 = 1 << 20;
    baton__kcuda_rms_tune_key_make(&k, "GPU C", 0, &d, &L);
    cr_assert_eq(baton__kcuda_rms_tune_store(&k, &v[1]), BATON_ENOMEM);
    cr_assert_eq(baton__kcuda_rms_tune_find(&k, &got), 0);
    baton__kcuda_rms_tune_reset();
    cr_assert(baton__kcuda_rms_tune_empty());
    d = desc(BF16, BF16, 16384, 8192, 1);
    baton__kcuda_rms_tune_key_make(&k, "GPU A", 0, &d, &L);
    cr_assert_eq(baton__kcuda_rms_tune_find(&k, &got), 0);
}

/* The built-in picks (what the JAX/XLA entry points launch): each names a class whose layout, on
 * an H100 or H200 (the same SMs and shared memory), is what the pick was measured on, and the pick
 * applies to it; a plain call with autotune gets it on that GPU only, and a measurement wins. */
Test(rms_layout, the_built_in_picks_apply_to_the_layouts_their_classes_choose)
{
    baton__kcuda_rms_tune_reset();
    const int n = baton__kcuda_rms_tune_builtin_count();
    cr_assert_gt(n, 0);
    for (int i = 0; i < n; i++) {
        kcuda_rms_tune_key key, again;
        kcuda_rms_variant pick, got;
        baton__kcuda_rms_tune_builtin_at(i, &key, &pick);
        cr_assert(!kcuda_rms_variant_none(&pick), "pick %d is the default", i);
        baton_rms_norm_desc d =
            desc((baton_dtype)key.x_dtype, (baton_dtype)key.w_dtype, (int64_t)1 << key.n1_log2,
                 key.n2, key.bwd ? (int64_t)1 << key.p_log2 : 1);
        kcuda_rms_layout L;
        kcuda_rms_variant v[KCUDA_RMS_MAX_VARIANTS];
        const int nv = variants_of(key.bwd, &H100, d, &L, v);
        baton__kcuda_rms_tune_key_make(&again, key.device, key.bwd, &d, &L);
        cr_assert_eq(memcmp(&again, &key, sizeof key), 0,
                     "pick %d: the class's layout is mode %d, vec %d now", i, L.mode, L.vec);
        cr_assert_eq(baton__kcuda_rms_tune_builtin(&key, &got), 1);
        int listed = 0; /* the tuner measures it there */
        for (int j = 1; j < nv; j++) {
            kcuda_rms_layout a = L, b = L;
            cr_assert_eq(baton__kcuda_rms_apply_variant(&d, key.bwd, &H100, &v[j], &a, NULL, 0), 0);
            if (baton__kcuda_rms_apply_variant(&d, key.bwd, &H100, &pick, &b, NULL, 0) == 0 &&
                memcmp(&a, &b, sizeof a) == 0)
                listed = 1;
        }
        cr_assert(listed, "pick %d {%d, %d, %d} is not among its class's variants", i, pick.kernel,
                  pick.stages, pick.prefetch);
        kcuda_rms_layout T = L;
        baton__kcuda_rms_apply_tuned(key.device, key.bwd, &d, &H100, &T);
        cr_assert(T.variant.kernel == pick.kernel && T.variant.prefetch == pick.prefetch &&
                      (!pick.stages || T.stages == pick.stages),
                  "pick %d did not apply", i);
        T = L;
        baton__kcuda_rms_apply_tuned("NVIDIA A100-SXM4-80GB", key.bwd, &d, &H100, &T);
        cr_assert(memcmp(&T, &L, sizeof L) == 0, "pick %d applied on another GPU", i);
        const kcuda_rms_variant measured = {0, 0, 0};
        cr_assert_eq(baton__kcuda_rms_tune_store(&key, &measured), 0);
        T = L;
        baton__kcuda_rms_apply_tuned(key.device, key.bwd, &d, &H100, &T);
        cr_assert(memcmp(&T, &L, sizeof L) == 0, "pick %d overrode a measurement", i);
        baton__kcuda_rms_tune_reset();
    }
    /* One row length more: no pick. */
    kcuda_rms_tune_key k0;
    kcuda_rms_variant got;
    baton__kcuda_rms_tune_builtin_at(0, &k0, &got);
    k0.n2 += 8;
    cr_assert_eq(baton__kcuda_rms_tune_builtin(&k0, &got), 0);
}

Test(rms_layout, descriptions_name_the_kernel_the_stages_and_the_order)
{
    char buf[160];
    kcuda_rms_layout L;
    kcuda_rms_variant v[KCUDA_RMS_MAX_VARIANTS];
    const baton_rms_norm_desc d = desc(BF16, BF16, 16384, 8192, 1);
    variants_of(0, &H100, d, &L, v);
    baton__kcuda_rms_describe(&L, 0, buf, sizeof buf);
    cr_assert(strstr(buf, "register rows") && strstr(buf, "a block per row"), "%s", buf);
    kcuda_rms_layout P = L;
    baton__kcuda_rms_apply_variant(&d, 0, &H100, &v[1], &P, NULL, 0);
    baton__kcuda_rms_describe(&P, 0, buf, sizeof buf);
    cr_assert(strstr(buf, "register rows") && strstr(buf, "a persistent grid"), "%s", buf);
    baton__kcuda_rms_apply_variant(&d, 0, &H100, &v[3], &L, NULL, 0);
    baton__kcuda_rms_describe(&L, 0, buf, sizeof buf);
    cr_assert(strstr(buf, "bulk copies, 3 stages") && strstr(buf, "register rows' order"), "%s",
              buf);
    const baton_rms_norm_desc b = desc(BF16, BF16, 16384, 8192, 256);
    cr_assert_eq(variants_of(1, &H100, b, &L, v), 7,
                 "the register backward holding 2 or 3 rows, or 3 or 4 and asking 1 or 2 rounds "
                 "more into L2");
    baton__kcuda_rms_describe(&L, 1, buf, sizeof buf);
    cr_assert(strstr(buf, "register rows, 2 vectors per thread, 512 threads, 4 rows held"), "%s",
              buf);
    cr_assert(v[6].prefetch == 2 && !v[6].stages, "{%d, %d, %d}", v[6].kernel, v[6].stages,
              v[6].prefetch);
    kcuda_rms_layout F = L;
    cr_assert_eq(baton__kcuda_rms_apply_variant(&b, 1, &H100, &v[6], &F, NULL, 0), 0);
    baton__kcuda_rms_describe(&F, 1, buf, sizeof buf);
    cr_assert(strstr(buf, "4 rows held") && strstr(buf, "more asked into L2 (2)"), "%s", buf);
    baton__kcuda_rms_bwd_set_cy(&L, &b, 1, 8);
    baton__kcuda_rms_describe(&L, 1, buf, sizeof buf);
    cr_assert(strstr(buf, "rows over a cluster"), "%s", buf);
    const baton_rms_norm_desc c = desc(BF16, BF16, 256, 8192, 4);
    variants_of(1, &H100, c, &L, v);
    baton__kcuda_rms_describe(&L, 1, buf, sizeof buf);
    cr_assert(strstr(buf, "cp.async") != NULL, "%s", buf);
}
