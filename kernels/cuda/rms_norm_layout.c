/* rms_norm_layout.c: the host-side half of the CUDA RMSNorm: checks a call and chooses its layout
 * (kernel family, threads, grid, stages, cluster shape). No CUDA header, so that CPU-only builds
 * compile it and tests/test_rms_layout.c checks its choices; rms_norm_{fwd,bwd}.cu launch them. */
#include "kernels/cuda/rms_norm_layout.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

#include "core/core.h"
#include "kernels/desc_check.h"

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int
why_set(char *why, size_t whylen, int code, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return code;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static size_t pad16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* a / 2^sh rounded up. The layout runs on every call, before the launch: it divides by the
 * vector width (a power of two) with shifts, and checks alignments with masks. */
static int64_t ceil_shr(int64_t a, int sh)
{
    return (a + ((int64_t)1 << sh) - 1) >> sh;
}

/* a: a power of two */
static int is_aligned(const void *p, size_t a)
{
    return ((uintptr_t)p & (a - 1)) == 0;
}

/* The alignment of a vector of vec elements of `bytes` each: its size, at most 16. */
static size_t vec_align(size_t bytes, int vec)
{
    const size_t b = bytes * (size_t)vec;
    return b >= 16 ? 16 : b;
}

/* Element sizes of a call: x, the weight (and y, grad_output), the accumulation type; and the
 * elements of x in a 16-byte vector, vx = 2^vsh. */
typedef struct sizes {
    size_t x, w, a;
    int vx, vsh;
} sizes;

static sizes sizes_of(const baton_rms_norm_desc *d)
{
    sizes s;
    s.x = baton_dtype_size((baton_dtype)d->x_dtype);
    s.w = baton_dtype_size((baton_dtype)d->w_dtype);
    s.a = s.x == 8 ? 8 : 4;
    s.vsh = s.x == 2 ? 3 : s.x == 4 ? 2 : 1;
    s.vx = 1 << s.vsh;
    return s;
}

/* Dynamic shared memory of the staged kernels for a chunk of columns (their carving of it is in
 * rms_norm_fwd.cu and the rms_norm_bwd*.cu files). Forward: w's chunk, then `stages` chunks of x.
 * Backward: w's chunk, the column sums (accumulation type), stages + 1 invvar slots, then `stages`
 * chunks of grad_output and of x. */
static size_t staged_smem(const sizes *s, int bwd, int64_t chunk, int stages)
{
    const size_t c = (size_t)chunk;
    if (!bwd)
        return pad16(c * s->w) + (size_t)stages * pad16(c * s->x);
    return pad16(c * s->w) + pad16(c * s->a) + pad16((size_t)(stages + 1) * s->a) +
           (size_t)stages * (pad16(c * s->w) + pad16(c * s->x));
}

int64_t baton__kcuda_rms_smem_max(const kcuda_rms_device *dev)
{
    const int64_t m = dev->smem_optin - KCUDA_STATIC_SMEM;
    return m > 0 ? m : 0;
}

/* ---- checks ---------------------------------------------------------------------------------- */

static int check_desc(const char *what, void **buffers, int nbuf, const char *opaque, size_t len,
                      baton_rms_norm_desc *d, int64_t *unsharded, int bwd, char *why, size_t wl)
{
    /* One decoder for every reader (kernels/desc_check.c): the same layouts, the same words. */
    baton_rms_norm_shard_desc sd;
    char reason[320];
    const int rc = baton__rms_norm_desc_decode(opaque, len, bwd, &sd, NULL, reason, sizeof reason);
    if (rc)
        return why_set(why, wl, rc, "%s: %s", what, reason);
    *d = sd.rms;
    if (unsharded)
        *unsharded = sd.unsharded_part_grad_size;
    if (!buffers)
        return why_set(why, wl, BATON_EINVAL, "%s: buffers is NULL", what);
    for (int i = 0; i < nbuf; i++)
        if (!buffers[i])
            return why_set(why, wl, BATON_EINVAL, "%s: buffer %d is NULL", what, i);
    return 0;
}

static int check_override(const char *what, const kcuda_rms_cfg *o, char *why, size_t wl)
{
    if (!o)
        return 0;
    if (o->threads < 0 || o->threads % 32 || o->threads > KCUDA_MAX_THREADS)
        return why_set(why, wl, BATON_EINVAL, "%s: override threads = %d (a multiple of 32, <= %d)",
                       what, o->threads, KCUDA_MAX_THREADS);
    if (o->cx < 0 || o->cx > KCUDA_MAX_CLUSTER || o->cy < 0 || o->cy > KCUDA_MAX_CLUSTER ||
        (o->cx > 1 && o->cy > 1))
        return why_set(why, wl, BATON_EINVAL, "%s: override cx = %d, cy = %d (0..16, not both > 1)",
                       what, o->cx, o->cy);
    if (o->vec != 0 && o->vec != 1)
        return why_set(why, wl, BATON_EINVAL, "%s: override vec = %d (0 or 1)", what, o->vec);
    if (o->stages < 0 || o->stages > KCUDA_FWD_BULK_STAGES)
        return why_set(why, wl, BATON_EINVAL, "%s: override stages = %d (0..%d)", what, o->stages,
                       KCUDA_FWD_BULK_STAGES);
    if (o->nv != 0 && o->nv != 2 && o->nv != 4 && o->nv != 8)
        return why_set(why, wl, BATON_EINVAL, "%s: override nv = %d (0, 2, 4 or 8)", what, o->nv);
    if (o->grid < 0 || o->mode < 0 || o->mode > KCUDA_RMS_ROWS)
        return why_set(why, wl, BATON_EINVAL, "%s: override grid = %lld, mode = %d", what, o->grid,
                       o->mode);
    if (o->variant.kernel < 0 || o->variant.kernel > KCUDA_RMS_VK_ROW || o->variant.stages < 0 ||
        o->variant.stages > KCUDA_FWD_BULK_STAGES || o->variant.prefetch < 0 ||
        o->variant.prefetch > KCUDA_BWD_PREFETCH_MAX)
        return why_set(why, wl, BATON_EINVAL,
                       "%s: variant kernel = %d, stages = %d, prefetch = %d (kernel 0 to 4; "
                       "stages 0..%d; prefetch 0..%d)",
                       what, o->variant.kernel, o->variant.stages, o->variant.prefetch,
                       KCUDA_FWD_BULK_STAGES, KCUDA_BWD_PREFETCH_MAX);
    return 0;
}

int baton__kcuda_rms_check(const char *what, void **buffers, int nbuf, const char *opaque,
                           size_t len, int bwd, const kcuda_rms_cfg *o, baton_rms_norm_desc *d,
                           int64_t *unsharded, char *why, size_t whylen)
{
    const int rc = check_desc(what, buffers, nbuf, opaque, len, d, unsharded, bwd, why, whylen);
    return rc ? rc : check_override(what, o, why, whylen);
}

/* ---- the shared choices ---------------------------------------------------------------------- */

/* Blocks per row: few rows leave most SMs idle, so a long row is split over a cluster. */
static int choose_cx(int64_t n1, int64_t n2, int sms, int max_cx, const kcuda_rms_cfg *o)
{
    if (o && o->cx)
        return o->cx;
    const int64_t want_blocks = 2 * (int64_t)sms;
    if (n1 >= want_blocks)
        return 1;
    int64_t cx = ceil_div(want_blocks, n1);
    const int64_t by_len = n2 / 4096; /* at least 4096 columns per block */
    if (cx > by_len)
        cx = by_len;
    if (cx > max_cx)
        cx = max_cx;
    return cx < 1 ? 1 : (int)cx;
}

/* Splits a row over cx blocks and picks the threads: `per` (4, or 8 given) 16-byte vectors per
 * thread in the staged kernels (they hold nothing in registers, so more blocks fit per SM), NV = 4
 * vectors in the register kernels. When the staged kernel's shared memory does not fit even with
 * one stage, the 16-byte path streams. */
static void shape_chunk(kcuda_rms_layout *L, const sizes *s, int bwd, int64_t smem_max, int64_t n2,
                        int cx, int vx, const kcuda_rms_cfg *o, int default_stages, int per)
{
    L->chunk = ceil_div(ceil_div(n2, cx), L->vec) * L->vec;
    L->cx = (int)ceil_div(n2, L->chunk);
    const int64_t nvec = ceil_div(L->chunk, L->vec);
    L->nv = 4;
    L->stages = 0;
    L->smem = 0;
    if (L->vec != vx)
        per = 4;
    if (L->vec == vx) {
        L->stages = (o && o->stages) ? o->stages : default_stages;
        while (L->stages > 1 && staged_smem(s, bwd, L->chunk, L->stages) > (size_t)smem_max)
            L->stages--;
        L->mode = staged_smem(s, bwd, L->chunk, L->stages) <= (size_t)smem_max ? KCUDA_RMS_STAGED
                                                                               : KCUDA_RMS_STREAM;
        if (o && o->mode == KCUDA_RMS_STREAM)
            L->mode = KCUDA_RMS_STREAM;
        if (L->mode == KCUDA_RMS_STAGED) {
            L->smem = staged_smem(s, bwd, L->chunk, L->stages);
            L->nv = 0;
        } else {
            L->stages = 0;
        }
    } else {
        L->mode = KCUDA_RMS_REGS;
    }
    if (L->mode == KCUDA_RMS_STREAM && L->vec > 1)
        L->nv = 2; /* the 16-byte streaming kernels hold 2 vectors per thread and step */
    int64_t t = (o && o->threads) ? o->threads : ceil_div(ceil_div(nvec, per), 32) * 32;
    if (!(o && o->threads) && t < 64 && nvec > 32)
        t = 64;
    if (t > KCUDA_MAX_THREADS)
        t = KCUDA_MAX_THREADS;
    if (t < 32)
        t = 32;
    L->threads = (int)t;
    if (L->mode == KCUDA_RMS_REGS && L->chunk > t * L->nv * L->vec)
        L->mode = KCUDA_RMS_STREAM;
}

void baton__kcuda_rms_spread(kcuda_rms_layout *L, int blocks_per_sm, int sms)
{
    if (!L->spread)
        return;
    long long groups = L->grid / L->cx;
    long long resident = (long long)(blocks_per_sm > 0 ? blocks_per_sm : 1) * sms / L->cx;
    if (resident < 1)
        resident = 1;
    if (groups > resident) {
        /* As few blocks as give every block the same number of rows: no tail. */
        const long long per = (groups + resident - 1) / resident;
        groups = (groups + per - 1) / per;
    }
    L->grid = groups * L->cx;
}

void baton__kcuda_rms_report(const kcuda_rms_layout *L, kcuda_rms_cfg *chosen)
{
    if (!chosen)
        return;
    const int staged = L->mode == KCUDA_RMS_STAGED || L->mode == KCUDA_RMS_STAGED_CP;
    chosen->threads = L->threads;
    chosen->nv = staged ? 0 : L->nv;
    chosen->vec = L->vec;
    chosen->cx = L->cx;
    chosen->cy = L->cy;
    chosen->kx = L->kx;
    chosen->stages = L->stages;
    chosen->mode = L->mode;
    chosen->grid = L->grid;
    chosen->smem = (long long)L->smem;
    chosen->variant = L->variant;
}

/* ---- forward --------------------------------------------------------------------------------- */

/* The staged forward's rows in flight when a block has more than one row: about 64 KB of x per
 * block (measured best on an H100: 4 stages of 16 KB rows, 3 of 32 KB; bench_kernels --sweep), at
 * least 2. */
static int fwd_deep(const sizes *s, int64_t chunk)
{
    const int64_t row_bytes = chunk * (int64_t)s->x;
    int deep = (int)(1 + (64 << 10) / (row_bytes > 0 ? row_bytes : 1));
    return deep < 2 ? 2 : deep > KCUDA_FWD_STAGES ? KCUDA_FWD_STAGES : deep;
}

/* The register-rows kernels' vectors per thread (*nv: at least nv0, or the override's, doubled up
 * to 8 while a row needs more than 512 threads) and threads (*t: the row's vectors over *nv, in
 * whole warps, or the override's): 0, or BATON_EINVAL when the override's threads cannot hold the
 * row. */
static int rows_threads(const char *what, int64_t nvec, int nv0, const kcuda_rms_cfg *o, int *nv,
                        int *t, char *why, size_t wl)
{
    int n = (o && o->nv) ? o->nv : nv0;
    while (n < 8 && nvec > (int64_t)n * KCUDA_MAX_THREADS)
        n *= 2;
    int64_t th = ceil_div(ceil_div(nvec, n), 32) * 32;
    if (o && o->threads) {
        if ((int64_t)o->threads * n < nvec)
            return why_set(why, wl, BATON_EINVAL,
                           "%s: override threads = %d with nv = %d cannot hold %lld vectors", what,
                           o->threads, n, (long long)nvec);
        th = o->threads;
    }
    *nv = n;
    *t = th < 32 ? 32 : (int)th;
    return 0;
}

/* rms_fwd_rows: NV vectors per thread and the fewest threads that cover the row, a block per
 * row. A block per row keeps more bytes in flight than a persistent grid that loads each block's
 * next row ahead: on an H100 it moves 2.95-3.0 TB/s, cudaMemcpy's own rate, where the persistent
 * grid (KCUDA_RMS_VK_PERSIST, which the tuner may still choose) and every persistent copy kernel
 * stay at 2.70-2.83 (bench_kernels). Only a grid too large to launch is evened out
 * over the resident blocks instead. */
static int fwd_rows(const baton_rms_norm_desc *d, const sizes *s, const kcuda_rms_cfg *o,
                    kcuda_rms_layout *L, char *why, size_t wl)
{
    const int VX = s->vx;
    const int64_t nvec = ceil_shr(d->n2, s->vsh);
    /* 2 vectors per thread, more where a row needs more than 512 threads: with a block per row,
     * 4-byte x too runs best at 2 (an H100, 4096 columns: 0.5-2 % faster than 4; the persistent
     * grid had preferred 4 on an H200). */
    int nv = 1, t = 32;
    const int rc = rows_threads("rms_norm_fwd", nvec, 2, o, &nv, &t, why, wl);
    if (rc)
        return rc;
    memset(L, 0, sizeof *L);
    L->mode = KCUDA_RMS_ROWS;
    L->vec = VX;
    L->nv = nv;
    L->threads = (int)t;
    L->cx = L->cy = 1;
    L->chunk = d->n2;
    L->grid = (o && o->grid) ? o->grid : d->n1;
    L->spread = !(o && o->grid) && d->n1 > INT_MAX;
    return 0;
}

static int fwd_layout(const baton_rms_norm_desc *d, void *const *buffers,
                      const kcuda_rms_device *dev, const kcuda_rms_cfg *o, kcuda_rms_layout *L,
                      char *why, size_t wl)
{
    const sizes s = sizes_of(d);
    const int VX = s.vx;
    const int sms = dev->sms;
    memset(L, 0, sizeof *L);
    const int vec_ok = (d->n2 & (VX - 1)) == 0 && is_aligned(buffers[0], 16) &&
                       is_aligned(buffers[1], vec_align(s.w, VX)) &&
                       is_aligned(buffers[2], vec_align(s.w, VX));
    L->vec = (vec_ok && !(o && o->vec == 1)) ? VX : 1;
    L->cy = 1;
    /* Decode rows (few short rows): one block per row holding its row in registers, four 16-byte
     * vectors of x and w per thread, no staging; a graph of them runs near the empty-kernel floor.
     */
    const int no_override =
        !o || !(o->mode || o->threads || o->stages || o->grid || o->cx || o->vec);
    const int64_t nvec_row = ceil_shr(d->n2, s.vsh);
    if (no_override && L->vec == VX && d->n1 <= 2LL * sms && nvec_row <= 4LL * KCUDA_MAX_THREADS) {
        L->mode = KCUDA_RMS_REGS;
        L->nv = 4;
        L->cx = 1;
        L->chunk = d->n2;
        L->threads = (int)(ceil_div(ceil_div(nvec_row, 4), 32) * 32);
        L->grid = d->n1;
        return 0;
    }
    /* Many rows of 16-byte vectors: the register kernel, a persistent grid of blocks that each
     * hold a row and load the next (rms_fwd_rows). Wider weights than 4 bytes would double its
     * registers; those pairs take the staged kernel. */
    const int rows_fit =
        L->vec == VX && s.x <= 4 && s.w <= 4 && nvec_row <= 8LL * KCUDA_MAX_THREADS;
    const int force_rows = o && o->mode == KCUDA_RMS_ROWS;
    if (force_rows && !rows_fit)
        return why_set(why, wl, BATON_EINVAL,
                       "rms_norm_fwd: override mode 5 (register rows) needs 16-byte vectors, x "
                       "and w of at most 4 bytes and n2 <= %d vectors",
                       8 * KCUDA_MAX_THREADS);
    if (rows_fit && (force_rows || (no_override && d->n1 >= 2LL * sms)))
        return fwd_rows(d, &s, o, L, why, wl);
    const int cp = o && o->mode == KCUDA_RMS_STAGED_CP;
    if (cp && o->stages > KCUDA_CP_STAGES)
        return why_set(why, wl, BATON_EINVAL,
                       "rms_norm_fwd: override stages = %d with mode 4 (1..%d)", o->stages,
                       KCUDA_CP_STAGES);
    const int cx = choose_cx(d->n1, d->n2, sms, dev->max_cluster, o);
    /* Many rows: a persistent grid, each block staging the next rows while it reduces one (and
     * reading w once). Few rows: a block (or cluster) per row. */
    const int deep = fwd_deep(&s, ceil_div(d->n2, cx));
    int want_stages;
    if (o && o->stages)
        want_stages = o->stages;
    else if (o && o->grid)
        want_stages = o->grid / cx < d->n1 ? deep : 1;
    else
        want_stages = d->n1 * cx > 2LL * sms ? deep : 1;
    shape_chunk(L, &s, 0, baton__kcuda_rms_smem_max(dev), d->n2, cx, VX, o, want_stages,
                cx > 1 ? 8 : 4);
    long long groups = d->n1;
    if (o && o->grid)
        groups = o->grid / L->cx > 0 ? o->grid / L->cx : 1;
    const long long cap = (1LL << 30) / L->cx;
    if (groups > cap)
        groups = cap;
    L->grid = groups * L->cx;
    L->may_shrink = L->cx > 8 && !(o && o->cx);
    /* One stage always runs the cp.async kernel; with more, an override of 4 asks for it. */
    if (cp && L->mode == KCUDA_RMS_STAGED)
        L->mode = KCUDA_RMS_STAGED_CP;
    L->spread = (L->mode == KCUDA_RMS_STAGED || L->mode == KCUDA_RMS_STAGED_CP) && L->stages > 1 &&
                !(o && o->grid);
    return 0;
}

int baton__kcuda_rms_fwd_layout(const baton_rms_norm_desc *d, void *const *buffers,
                                const kcuda_rms_device *dev, const kcuda_rms_cfg *o,
                                kcuda_rms_layout *L, char *why, size_t wl)
{
    const int rc = fwd_layout(d, buffers, dev, o, L, why, wl);
    if (rc || !o || kcuda_rms_variant_none(&o->variant))
        return rc;
    const int vrc = baton__kcuda_rms_apply_variant(d, 0, dev, &o->variant, L, why, wl);
    if (o->grid)
        L->spread = 0; /* a grid that was asked for is kept */
    return vrc;
}

/* ---- backward -------------------------------------------------------------------------------- */

/* Whether the register backward holds D rows (2, 3, 4, 6 or 8) at nv vectors per thread and t
 * threads: up to 4 at 1 or 2 vectors, 2 from 4 vectors on (rows of 32 KB or more, registers
 * full); 6 or 8 only in blocks of at most KCUDA_BWD_DEEP_THREADS whose rows fit in registers
 * (KCUDA_BWD_ROWS_REGS: the kernel compiles exactly these). */
static int bwd_rows_ok(const sizes *s, int nv, int t, int D)
{
    if (D < 2 || D > KCUDA_BWD_ROWS_MAX || D == 5 || D == 7)
        return 0;
    if (D <= 4)
        return nv <= 2 || D == 2;
    return t <= KCUDA_BWD_DEEP_THREADS &&
           KCUDA_BWD_ROWS_REGS((int)s->x, (int)s->w, nv, D) <= KCUDA_BWD_DEEP_REGS;
}

/* The rows held that bwd_rows_ok allows, as "2, 3, 4" for an error message. */
static const char *bwd_rows_list(const sizes *s, int nv, int t, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (int D = 2; D <= KCUDA_BWD_ROWS_MAX && n < cap; D++)
        if (bwd_rows_ok(s, nv, t, D))
            n += (size_t)snprintf(buf + n, cap - n, "%s%d", n ? ", " : "", D);
    return buf;
}

/* Rows held (D). Measured on an H100 (bench_kernels --sweep): 16-bit rows want 4 (two reducing, two
 * loading: a pair's reductions share one barrier), 92-94 % of the best copy kernel at 8192 columns
 * against 84 % holding 2 (6 and 8 help only where one block per SM suffices: a tuning variant);
 * 32-bit rows at up to 2 vectors per thread want 3 (f32 4096 columns at part_grad 16: 97.3
 * against 95.1 % holding 2, 92.5 against 90.8 at 4096 rows), never 4 (a pair measured slower); from
 * 4 vectors on, 2 (registers full). */
static int bwd_rows_depth(const baton_rms_norm_desc *d, const sizes *s, int nv)
{
    (void)d;
    if (!bwd_rows_ok(s, nv, KCUDA_MAX_THREADS, 4))
        return 2;
    return s->x == 2 ? 4 : 3;
}

/* Sets L's kx and cy and what follows from them: the cluster's shared memory, the grid (kx
 * clusters of cy blocks for every part_grad block that holds rows, or the grid asked for). */
static void bwd_rows_set_cy(kcuda_rms_layout *L, const baton_rms_norm_desc *d, const sizes *s,
                            int kx, int cy, long long grid_asked)
{
    L->fit_cy = 0;
    L->kx = kx < 1 ? 1 : kx;
    L->cy = cy;
    L->smem = cy > 1 ? pad16((size_t)d->n2 * s->a) : 0; /* the cluster's column sums */
    long long groups = L->active * L->kx;
    if (grid_asked)
        groups = grid_asked / cy > 0 ? grid_asked / cy : 1;
    const long long cap = (1LL << 30) / cy;
    if (groups > cap)
        groups = cap;
    L->grid = groups * cy;
}

size_t baton__kcuda_rms_chain_bytes(int64_t active, int cy)
{
    return sizeof(unsigned) * (size_t)(1 + active * (cy < 1 ? 1 : cy));
}

/* rms_bwd_rows (L's P, B and active already set): the fewest vectors per thread (1, 2, 4, or 8
 * where a row needs them) at up to 512 threads, D rows held (bwd_rows_depth), and cy left for
 * baton__kcuda_rms_fit_cy (L->fit_cy) unless the override sets it. */
static int bwd_rows(const baton_rms_norm_desc *d, const sizes *s, const kcuda_rms_device *dev,
                    const kcuda_rms_cfg *o, kcuda_rms_layout *L, char *why, size_t wl)
{
    const int64_t nvec = ceil_shr(d->n2, s->vsh);
    /* 16-bit rows: at least 2 vectors per thread, so that four rows fit in registers at two
     * blocks of 256 threads per SM (one vector of 512 threads holds 4 rows at one block per SM:
     * 69 against 88 % of the best copy kernel, bf16 32768 x 4096). */
    int nv = 1, t = 32;
    const int rc = rows_threads("rms_norm_bwd", nvec, s->x == 2 ? 2 : 1, o, &nv, &t, why, wl);
    if (rc)
        return rc;
    L->mode = KCUDA_RMS_ROWS;
    L->vec = s->vx;
    L->nv = nv;
    L->threads = (int)t;
    L->cx = 1;
    L->chunk = d->n2;
    L->stages = bwd_rows_depth(d, s, nv);
    L->fit_stages = L->stages;
    if (o && o->stages) {
        char ok[32];
        if (!bwd_rows_ok(s, nv, t, o->stages))
            return why_set(why, wl, BATON_EINVAL,
                           "rms_norm_bwd: override stages = %d with register rows at %d vectors "
                           "per thread and %d threads (rows held per block): one of %s",
                           o->stages, nv, t, bwd_rows_list(s, nv, t, ok, sizeof ok));
        /* The layout as if it held these rows itself: cy is fitted for their kernel. */
        L->stages = L->fit_stages = o->stages;
    }
    const int kx = o ? o->kx : 0;
    if (kx < 0 || kx > KCUDA_BWD_CHAIN_MAX)
        return why_set(why, wl, BATON_EINVAL,
                       "rms_norm_bwd: override kx = %d: 1 to %d clusters per part_grad block", kx,
                       KCUDA_BWD_CHAIN_MAX);
    if (kx > 1 && (o->grid || !L->chain_ok))
        return why_set(why, wl, BATON_EINVAL, "rms_norm_bwd: override kx = %d needs %s", kx,
                       o->grid ? "the grid that it sets (no grid override)"
                               : "grad_weight aligned to 4 bytes with room for the counters");
    bwd_rows_set_cy(L, d, s, kx, (o && o->cy) ? o->cy : 1, o ? o->grid : 0);
    L->fit_cy = !(o && (o->cy || o->grid));
    L->kx = kx; /* 0: baton__kcuda_rms_fit_cy chooses */
    if (!L->fit_cy && !kx)
        L->kx = 1;
    L->fit_blocks = L->active;
    if ((int64_t)L->smem > baton__kcuda_rms_smem_max(dev))
        return why_set(why, wl, BATON_EINVAL,
                       "rms_norm_bwd: register rows over a cluster of %d need %zu bytes of "
                       "shared memory per block; the device allows %lld",
                       L->cy, L->smem, (long long)baton__kcuda_rms_smem_max(dev));
    L->may_shrink = 0;
    L->colsum_grid = baton__kcuda_rms_colsum_grid(d->n2, L->P, dev->sms);
    return 0;
}

/* The largest cy <= cap (from 2) at which `want` clusters are resident at once; 1 if none. */
static int fit_clusters(int64_t cap, int64_t want, int (*clusters)(void *u, int cy), void *u)
{
    for (int c = (int)cap; c >= 2; c--)
        if (clusters(u, c) >= want)
            return c;
    return 1;
}

int baton__kcuda_rms_fit_cy(kcuda_rms_layout *L, const baton_rms_norm_desc *d,
                            const kcuda_rms_device *dev, int blocks_per_sm,
                            int (*clusters)(void *u, int cy), void *u)
{
    if (!L->fit_cy)
        return L->cy;
    const sizes s = sizes_of(d);
    const int64_t need = L->fit_blocks > L->active ? L->fit_blocks : L->active;
    const int64_t slots = (int64_t)dev->sms * blocks_per_sm;
    const int no_combine = (int64_t)pad16((size_t)d->n2 * s.a) > baton__kcuda_rms_smem_max(dev);
    int best_kx = 0, best_cy = 1;
    int64_t best = -1;
    /* Chained clusters only where asked for: on an H100 they fill the SMs but every bf16 and f32
     * benchmark shape but one ran slower than one cluster per part_grad block (bench_kernels);
     * the override keeps them measurable. */
    const int lo = L->kx ? L->kx : 1, hi = L->kx ? L->kx : 1;
    for (int kx = lo; kx <= hi; kx++) {
        if (kx > 1 && need * kx > slots)
            break;
        /* At most 16 (or max_cluster) blocks, every one resident, and (chained) each with at
         * least two rounds of the rows it holds. */
        int64_t cap = need > 0 ? slots / (need * kx) : 0;
        if (cap > dev->max_cluster)
            cap = dev->max_cluster;
        const int64_t rows = ceil_div(L->B, kx);
        if (cap > rows)
            cap = rows;
        if (kx > 1 && cap > rows / (2 * L->fit_stages))
            cap = rows / (2 * L->fit_stages);
        if (cap < 1)
            continue;
        const int cy = no_combine ? 1 : fit_clusters(cap, need * kx, clusters, u);
        const int64_t blocks = need * kx * cy;
        if (best < 0 || blocks > best) {
            best = blocks;
            best_kx = kx;
            best_cy = cy;
        }
    }
    if (best < 0) { /* the asked kx cannot have every cluster resident: one block each */
        best_kx = lo;
        best_cy = 1;
    }
    bwd_rows_set_cy(L, d, &s, best_kx, best_cy, 0);
    return best_cy;
}

void baton__kcuda_rms_bwd_set_cy(kcuda_rms_layout *L, const baton_rms_norm_desc *d, int kx, int cy)
{
    const sizes s = sizes_of(d);
    bwd_rows_set_cy(L, d, &s, kx, cy, 0);
}

static int bwd_layout(const baton_rms_norm_desc *d, void *const *buffers,
                      const kcuda_rms_device *dev, const kcuda_rms_cfg *o, kcuda_rms_layout *L,
                      char *why, size_t wl)
{
    const sizes s = sizes_of(d);
    const int VX = s.vx;
    const int sms = dev->sms;
    const int max_cl = dev->max_cluster;
    kcuda_rms_cfg o4;
    /* The staged backward is a cp.async kernel: more stages are lowered to its most. The
     * register backward (mode KCUDA_RMS_ROWS) checks its own rows held. */
    if (o && o->stages > KCUDA_CP_STAGES && o->mode != KCUDA_RMS_ROWS) {
        o4 = *o;
        o4.stages = KCUDA_CP_STAGES;
        o = &o4;
    }
    memset(L, 0, sizeof *L);
    const int vec_ok = (d->n2 & (VX - 1)) == 0 && is_aligned(buffers[0], vec_align(s.w, VX)) &&
                       is_aligned(buffers[2], 16) && is_aligned(buffers[4], 16) &&
                       is_aligned(buffers[3], vec_align(s.w, VX)) && is_aligned(buffers[1], s.a) &&
                       is_aligned(buffers[6], vec_align(s.a, VX));
    L->vec = (vec_ok && !(o && o->vec == 1)) ? VX : 1;
    const int64_t P = d->part_grad_size;
    const int64_t B = ceil_div(d->n1, P);
    const int64_t active = ceil_div(d->n1, B); /* part_grad blocks that hold rows */
    L->P = P;
    L->B = B;
    L->active = active;
    /* grad_weight's bytes hold the chained backward's counters until the column sum writes it. */
    L->chain_ok = is_aligned(buffers[5], sizeof(unsigned)) &&
                  (size_t)d->n2 * s.w >= baton__kcuda_rms_chain_bytes(active, KCUDA_MAX_CLUSTER);
    L->pf_ok = is_aligned(buffers[0], 16) && is_aligned(buffers[2], 16) &&
               ((size_t)d->n2 * s.w) % 16 == 0 && ((size_t)d->n2 * s.x) % 16 == 0;
    if (o && o->kx > 1 && !(o->mode == KCUDA_RMS_ROWS || o->mode == 0))
        return why_set(why, wl, BATON_EINVAL,
                       "rms_norm_bwd: override kx = %d applies to the register backward (mode 5), "
                       "not mode %d",
                       o->kx, o->mode);
    {
        /* Few long rows: the split kernels use every SM (a cluster per row would use at most 16
         * blocks a row). They need room for the copies of the partials in each block's columns. */
        const int forced = o && o->mode == KCUDA_RMS_SPLIT;
        const int64_t per = (int64_t)KCUDA_SPLIT_THREADS * VX;
        const int64_t nvt = ceil_div(d->n2, per * 2 * sms);
        const int64_t chunk = (nvt < 1 ? 1 : nvt) * per;
        const int64_t nb = ceil_div(d->n2, chunk);
        const int64_t last = d->n2 - (nb - 1) * chunk;
        const int fits = L->vec == VX && d->n1 <= KCUDA_SPLIT_ROWS && P * last >= nb * d->n1;
        const int want =
            (!o || !(o->mode || o->threads || o->stages || o->grid || o->cx || o->cy || o->vec)) &&
            choose_cx(d->n1, d->n2, sms, KCUDA_MAX_CLUSTER, NULL) > 1;
        if (forced && !fits)
            return why_set(why, wl, BATON_EINVAL,
                           "rms_norm_bwd: the split kernels need 16-byte rows, n1 <= %d and "
                           "part_grad room for the partials (n1 %lld, n2 %lld, part_grad_size "
                           "%lld)",
                           KCUDA_SPLIT_ROWS, (long long)d->n1, (long long)d->n2, (long long)P);
        if (fits && (forced || want) && !(o && o->kx > 1)) {
            L->mode = KCUDA_RMS_SPLIT;
            L->threads = KCUDA_SPLIT_THREADS;
            L->nv = (int)(nvt < 1 ? 1 : nvt);
            L->cx = 1;
            L->cy = 1;
            L->chunk = chunk;
            L->grid = nb;
            return 0;
        }
    }
    {
        /* Many rows of 16-byte vectors, x and w of at most 4 bytes: the register backward. */
        const int64_t nvec_row = ceil_shr(d->n2, s.vsh);
        const int rows_fit =
            L->vec == VX && s.x <= 4 && s.w <= 4 && nvec_row <= 8LL * KCUDA_MAX_THREADS;
        const int forced = o && o->mode == KCUDA_RMS_ROWS;
        const int plain = !o || !(o->mode || o->threads || o->stages || o->grid || o->cx || o->cy ||
                                  o->vec || o->nv);
        if (forced && !rows_fit)
            return why_set(why, wl, BATON_EINVAL,
                           "rms_norm_bwd: override mode 5 (register rows) needs 16-byte vectors, "
                           "x and w of at most 4 bytes and n2 <= %d vectors",
                           8 * KCUDA_MAX_THREADS);
        if (rows_fit &&
            (forced || (plain && d->n1 >= 2LL * sms && nvec_row <= 4LL * KCUDA_MAX_THREADS)))
            return bwd_rows(d, &s, dev, o, L, why, wl);
    }
    if (o && o->kx > 1)
        return why_set(why, wl, BATON_EINVAL,
                       "rms_norm_bwd: override kx = %d applies to the register backward, which "
                       "this call cannot have (mode 5 forces it where it can run)",
                       o->kx);
    /* Few rows: split each over a cluster (cx); many rows but few part_grad blocks: split each
     * block's rows over a cluster (cy). */
    const int64_t smem_max = baton__kcuda_rms_smem_max(dev);
    const int cx = choose_cx(d->n1, d->n2, sms, max_cl, o);
    shape_chunk(L, &s, 1, smem_max, d->n2, cx, VX, o, 1, 4);
    L->cy = 1;
    if (o && o->cy) {
        L->cy = o->cy;
    } else if (L->cx == 1 && L->mode == KCUDA_RMS_STAGED && !(o && o->grid)) {
        int64_t cy = ceil_div(2 * (int64_t)sms, active);
        if (cy > B)
            cy = B;
        if (cy > max_cl)
            cy = max_cl;
        L->cy = cy < 1 ? 1 : (int)cy;
    }
    if (L->cy > 1 && (L->cx > 1 || L->mode != KCUDA_RMS_STAGED))
        return why_set(why, wl, BATON_EINVAL,
                       "rms_norm_bwd: cy = %d needs cx == 1 and the staged (16-byte) kernel",
                       L->cy);
    const int cl = L->cx * L->cy;
    /* Only the blocks that hold rows are launched; grad_weight's kernel zeroes the others. */
    long long groups = active;
    const long long cap = (1LL << 30) / cl;
    if (o && o->grid)
        groups = o->grid / cl > 0 ? o->grid / cl : 1;
    if (groups > cap)
        groups = cap;
    L->grid = groups * cl;
    if (L->mode == KCUDA_RMS_STAGED && !(o && o->stages)) {
        /* Stages (bench_kernels --sweep with BENCH_SWEEP_BWD=1 on an H100 and an H200): none
         * ahead when a block has one row; with few blocks per SM, 16-bit rows want one row
         * ahead and 32-bit rows none (more threads' worth of rows instead). With many blocks,
         * 32-bit rows want three ahead, as many as fit (f32 32768 x 4096: 87 -> 91 % of copy
         * on the H100, 86 -> 90 % on the H200); 16-bit rows of 16 KB one ahead (three ahead
         * was 2 points better on the H100 but 8 worse on the H200), of 8 KB none. */
        const int one_row = ceil_div(B, L->cy) <= 1;
        const int crowded = L->grid >= 3LL * sms;
        int st = 1, per = 4;
        if (!one_row) {
            if (s.x == 2)
                st = !crowded || L->chunk * (int64_t)s.x >= (16 << 10) ? 2 : 1;
            else if (crowded)
                st = 4;
            else /* 16384 x 8192 f32: t256 s2 88% of copy, t256 s1 70% (one block per SM) */
                st = L->chunk * (int64_t)s.x >= (32 << 10) ? 2 : 1;
            if (s.x > 2 && !crowded)
                per = 8;
        }
        shape_chunk(L, &s, 1, smem_max, d->n2, L->cx, VX, o, st, per);
    }
    L->may_shrink = cl > 8 && !(o && (o->cx || o->cy));
    L->colsum_grid = baton__kcuda_rms_colsum_grid(d->n2, P, sms);
    return 0;
}

long long baton__kcuda_rms_colsum_grid(int64_t n2, int64_t P, int sms)
{
    /* A block's columns: a thread each, or 32 by 8 lanes; up to 8 blocks per SM. */
    const long long cgrid = ceil_div(n2, P <= KCUDA_COLSUM_COLS_P ? KCUDA_COLSUM_COLS_THREADS : 32);
    return cgrid < 8LL * sms ? cgrid : 8LL * sms;
}

int baton__kcuda_rms_bwd_layout(const baton_rms_norm_desc *d, void *const *buffers,
                                const kcuda_rms_device *dev, const kcuda_rms_cfg *o,
                                kcuda_rms_layout *L, char *why, size_t wl)
{
    const int rc = bwd_layout(d, buffers, dev, o, L, why, wl);
    if (rc || !o || kcuda_rms_variant_none(&o->variant))
        return rc;
    return baton__kcuda_rms_apply_variant(d, 1, dev, &o->variant, L, why, wl);
}

/* ---- variants: what the tuner may change without changing a bit ------------------------------ */

int baton__kcuda_rms_apply_variant(const baton_rms_norm_desc *d, int bwd,
                                   const kcuda_rms_device *dev, const kcuda_rms_variant *v,
                                   kcuda_rms_layout *L, char *why, size_t wl)
{
    const char *what = bwd ? "rms_norm_bwd" : "rms_norm_fwd";
    const sizes s = sizes_of(d);
    const size_t smem_max = (size_t)baton__kcuda_rms_smem_max(dev);
    int st = v->stages;
    int mode = L->mode;
    if (v->kernel < 0 || v->kernel > KCUDA_RMS_VK_ROW || st < 0)
        return why_set(why, wl, BATON_EINVAL,
                       "%s: variant kernel = %d, stages = %d (kernel 0 to 4; stages >= 0)", what,
                       v->kernel, st);
    if (bwd && v->kernel)
        return why_set(why, wl, BATON_EINVAL,
                       "%s: variant kernel %d: the backward's variants change only its stages",
                       what, v->kernel);
    if (v->prefetch && !(bwd && L->mode == KCUDA_RMS_ROWS))
        return why_set(why, wl, BATON_EINVAL,
                       "%s: variant prefetch = %d applies to the register backward (mode 5); this "
                       "call's layout is mode %d",
                       what, v->prefetch, L->mode);
    if (v->prefetch < 0 || v->prefetch > KCUDA_BWD_PREFETCH_MAX)
        return why_set(why, wl, BATON_EINVAL, "%s: variant prefetch = %d (0..%d)", what,
                       v->prefetch, KCUDA_BWD_PREFETCH_MAX);
    if (v->kernel == KCUDA_RMS_VK_PERSIST) {
        if (L->mode != KCUDA_RMS_ROWS || st)
            return why_set(why, wl, BATON_EINVAL,
                           "%s: variant kernel 3 (a persistent grid) applies, with stages 0, where "
                           "register rows (mode 5) is chosen; this call's layout is mode %d",
                           what, L->mode);
        L->spread = 1;
        L->variant.kernel = v->kernel;
        L->variant.stages = 0;
        return 0;
    }
    if (v->kernel == KCUDA_RMS_VK_ROW) {
        if (L->mode != KCUDA_RMS_ROWS || st || L->spread || L->variant.kernel)
            return why_set(why, wl, BATON_EINVAL,
                           "%s: variant kernel 4 (a row a block, w in shared memory) applies, "
                           "with stages 0, where register rows (mode 5) is chosen with a block "
                           "per row; this call's layout is mode %d%s",
                           what, L->mode, L->spread ? " on a persistent grid" : "");
        const size_t smem = (size_t)ceil_div(d->n2 * (int64_t)s.w, 16) * 16;
        if (smem > smem_max)
            return why_set(why, wl, BATON_EINVAL,
                           "%s: variant kernel 4 needs %zu bytes of shared memory for w; the "
                           "device allows %zu",
                           what, smem, smem_max);
        L->smem = smem;
        L->variant.kernel = v->kernel;
        L->variant.stages = 0;
        return 0;
    }
    if (v->kernel == KCUDA_RMS_VK_BULK) {
        if (L->mode != KCUDA_RMS_ROWS)
            return why_set(why, wl, BATON_EINVAL,
                           "%s: variant kernel 1 (bulk copies in register rows' order) applies "
                           "where register rows (mode 5) is chosen; this call's layout is mode %d",
                           what, L->mode);
        if (!st)
            st = fwd_deep(&s, L->chunk);
        if (st < 2)
            return why_set(why, wl, BATON_EINVAL,
                           "%s: variant kernel 1 needs 2 to %d stages (the bulk-copy kernel), "
                           "not %d",
                           what, KCUDA_FWD_BULK_STAGES, st);
        mode = KCUDA_RMS_STAGED;
        L->spread = 1; /* rows in flight need a persistent grid */
    } else if (v->kernel == KCUDA_RMS_VK_CP) {
        if (L->mode != KCUDA_RMS_STAGED || L->stages < 2 || L->variant.kernel)
            return why_set(why, wl, BATON_EINVAL,
                           "%s: variant kernel 2 (cp.async) applies where the bulk-copy kernel "
                           "(mode 0, 2 or more stages) is chosen; this call's layout is mode %d "
                           "with %d stages",
                           what, L->mode, L->stages);
        if (!st)
            st = L->stages < KCUDA_CP_STAGES ? L->stages : KCUDA_CP_STAGES;
        if (st > KCUDA_CP_STAGES)
            return why_set(why, wl, BATON_EINVAL,
                           "%s: variant kernel 2 (cp.async) takes 1 to %d stages, not %d", what,
                           KCUDA_CP_STAGES, st);
        mode = KCUDA_RMS_STAGED_CP;
    } else if (bwd && L->mode == KCUDA_RMS_ROWS) {
        /* The register backward: rows held per block (how far ahead its loads run; 0: as
         * chosen), and rows asked into L2 beyond them. */
        char ok[32];
        if (!st)
            st = L->stages;
        if (!bwd_rows_ok(&s, L->nv, L->threads, st))
            return why_set(why, wl, BATON_EINVAL,
                           "%s: variant stages = %d: the register backward at %d vectors per "
                           "thread and %d threads holds %s rows",
                           what, st, L->nv, L->threads,
                           bwd_rows_list(&s, L->nv, L->threads, ok, sizeof ok));
        if (v->prefetch && !KCUDA_BWD_PF_OK(L->nv, st))
            return why_set(why, wl, BATON_EINVAL,
                           "%s: variant prefetch = %d: compiled for up to 2 vectors per thread "
                           "holding 3 or 4 rows, not %d vectors and %d rows",
                           what, v->prefetch, L->nv, st);
        if (v->prefetch && !L->pf_ok)
            return why_set(why, wl, BATON_EINVAL,
                           "%s: variant prefetch = %d needs grad_output's and x's rows to start "
                           "16-byte aligned",
                           what, v->prefetch);
        L->stages = st;
        L->variant.kernel = 0;
        L->variant.stages = v->stages ? st : 0;
        L->variant.prefetch = v->prefetch;
        return 0;
    } else {
        /* Stages only: the forward's bulk-copy kernel (one stage would be the cp.async kernel:
         * variant kernel 2 says so), any staged backward. */
        const int ok = bwd ? L->mode == KCUDA_RMS_STAGED
                           : L->mode == KCUDA_RMS_STAGED && L->stages >= 2 && st >= 2;
        if (!ok || st > (bwd ? KCUDA_CP_STAGES : KCUDA_FWD_BULK_STAGES))
            return why_set(why, wl, BATON_EINVAL,
                           "%s: variant stages = %d applies to a staged layout (%s); this call's "
                           "layout is mode %d with %d stages",
                           what, st,
                           bwd ? "1 to 4 stages" : "the bulk-copy kernel: mode 0, 2 to 8 stages",
                           L->mode, L->stages);
    }
    const size_t smem = staged_smem(&s, bwd, L->chunk, st);
    if (smem > smem_max)
        return why_set(why, wl, BATON_EINVAL,
                       "%s: variant with %d stages needs %zu bytes of shared memory per block; "
                       "the device allows %zu",
                       what, st, smem, smem_max);
    L->mode = mode;
    L->stages = st;
    L->smem = smem;
    L->nv = 0;
    L->variant.kernel = v->kernel;
    L->variant.stages = st;
    return 0;
}

int baton__kcuda_rms_variants(const baton_rms_norm_desc *d, int bwd, const kcuda_rms_device *dev,
                              const kcuda_rms_layout *L, kcuda_rms_variant *out, int max)
{
    int n = 0;
    if (max < 1)
        return 0;
    out[n++] = (kcuda_rms_variant){0, 0, 0};
    kcuda_rms_variant want[KCUDA_RMS_MAX_VARIANTS];
    int nw = 0;
    if (!bwd && L->mode == KCUDA_RMS_ROWS) {
        want[nw++] = (kcuda_rms_variant){KCUDA_RMS_VK_PERSIST, 0, 0};
        for (int st = 2; st <= KCUDA_FWD_STAGES; st++)
            want[nw++] = (kcuda_rms_variant){KCUDA_RMS_VK_BULK, st, 0};
        want[nw++] = (kcuda_rms_variant){KCUDA_RMS_VK_ROW, 0, 0};
    } else if (!bwd && L->mode == KCUDA_RMS_STAGED && L->stages >= 2) {
        static const int bulk[] = {2, 3, 4, 6, 8};
        for (size_t i = 0; i < sizeof bulk / sizeof bulk[0]; i++)
            if (bulk[i] != L->stages)
                want[nw++] = (kcuda_rms_variant){0, bulk[i], 0};
        for (int st = 2; st <= KCUDA_CP_STAGES; st++)
            want[nw++] = (kcuda_rms_variant){KCUDA_RMS_VK_CP, st, 0};
    } else if (bwd && L->mode == KCUDA_RMS_ROWS && ceil_div(L->B, L->cy) > 1) {
        const sizes s = sizes_of(d);
        for (int st = 2; st <= KCUDA_BWD_ROWS_MAX; st++)
            if (st != L->stages && bwd_rows_ok(&s, L->nv, L->threads, st))
                want[nw++] = (kcuda_rms_variant){0, st, 0};
        /* and a round or two of rows asked into L2 beyond those held (an H200 wants more bytes
         * in flight than an H100 at the same clusters) */
        for (int st = 3; st <= 4; st++)
            for (int pf = 1; pf <= 2; pf++)
                want[nw++] = (kcuda_rms_variant){0, st == L->stages ? 0 : st, pf};
    } else if (bwd && L->mode == KCUDA_RMS_STAGED && ceil_div(L->B, L->cy) > 1) {
        /* Stages matter only where a block has more than one row. */
        for (int st = 1; st <= KCUDA_CP_STAGES; st++)
            if (st != L->stages)
                want[nw++] = (kcuda_rms_variant){0, st, 0};
    }
    for (int i = 0; i < nw && n < max; i++) {
        kcuda_rms_layout t = *L;
        if (baton__kcuda_rms_apply_variant(d, bwd, dev, &want[i], &t, NULL, 0) == 0)
            out[n++] = want[i];
    }
    return n;
}

void baton__kcuda_rms_describe(const kcuda_rms_layout *L, int bwd, char *buf, size_t cap)
{
    if (!buf || !cap)
        return;
    switch (L->mode) {
    case KCUDA_RMS_ROWS:
        if (!bwd) {
            snprintf(buf, cap, "register rows, %d vectors per thread, %d threads, %s", L->nv,
                     L->threads,
                     L->spread                               ? "a persistent grid"
                     : L->variant.kernel == KCUDA_RMS_VK_ROW ? "a row a block, w in shared memory"
                                                             : "a block per row");
            break;
        }
        char pf[40] = "";
        if (L->variant.prefetch)
            snprintf(pf, sizeof pf, ", more asked into L2 (%d)", L->variant.prefetch);
        snprintf(buf, cap, "register rows, %d vector%s per thread, %d threads, %d rows held%s%s%s",
                 L->nv, L->nv == 1 ? "" : "s", L->threads, L->stages,
                 L->cy > 1 ? ", rows over a cluster" : "", L->kx > 1 ? ", clusters chained" : "",
                 pf);
        break;
    case KCUDA_RMS_STAGED:
        snprintf(buf, cap, "staged by %s, %d stage%s, %d threads%s%s",
                 L->stages >= 2 && !bwd ? "bulk copies" : "cp.async", L->stages,
                 L->stages == 1 ? "" : "s", L->threads,
                 L->variant.kernel == KCUDA_RMS_VK_BULK ? ", register rows' order" : "",
                 L->cx > 1   ? ", split over a cluster"
                 : L->cy > 1 ? ", rows over a cluster"
                             : "");
        break;
    case KCUDA_RMS_STAGED_CP:
        snprintf(buf, cap, "staged by cp.async, %d stage%s, %d threads", L->stages,
                 L->stages == 1 ? "" : "s", L->threads);
        break;
    case KCUDA_RMS_REGS:
        snprintf(buf, cap, "%s, %d threads",
                 L->vec > 1 ? "decode rows in registers" : "scalar loads", L->threads);
        break;
    case KCUDA_RMS_STREAM: snprintf(buf, cap, "streaming, %d threads", L->threads); break;
    case KCUDA_RMS_SPLIT: snprintf(buf, cap, "split over %lld blocks", L->grid); break;
    default: snprintf(buf, cap, "mode %d", L->mode); break;
    }
}
