/* bench_kernels.cu: times baton's CUDA RMSNorm kernels (issue 3) against the device's own
 * copy bandwidth, measured in the same run. CUDA events, the median of >= 50 runs, input sets
 * rotated so that together they exceed twice the L2 cache (L2 is not what is measured), and a spin
 * kernel ahead of each batch so that the host has queued every launch before the GPU reaches it
 * (event pairs then time the GPU, not the host). Small kernels are also timed as many
 * back-to-back launches replayed from a CUDA graph (with and without programmatic dependent
 * launch). Effective bandwidth counts, forward: x and w read, y and invvar written; backward:
 * grad_output, x, w and invvar read, grad_input and grad_weight written (part_grad, scratch, is
 * not counted).
 *
 *   bench_kernels [--runs N] [--quick] [--sweep] [--small] [--layout-floor] [--wait-floor]
 *                 [--timeline]
 * --small: only the tutorial and decode shapes (a quick same-run A/B of two builds).
 * Environment: BENCH_P=1 to 256, the backward at that part_grad size only (else 16 and 256);
 * BENCH_SHAPE="bf16 32768x4096", that large shape only (for a profiler; several: comma-separated);
 * BENCH_OVR="mode=5,kx=4,cy=2;pf=1", after each default backward those overrides too
 * (parse_override).
 * --layout-floor: after each default backward, its bytes moved without arithmetic at its own
 * layout and at a free one (layout_floor below).
 * --wait-floor: after each default forward and backward, the least that any kernel of its
 * structure must wait for (fwd_wait_floor, tail_floor below).
 * --timeline (a build with -DBATON_KERNEL_TIMELINE=ON): after each register backward, where its
 * blocks spent their time (bench_timeline.h).
 * Lines starting with RESULT are for scripts/gpu-kernels.sh's table. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#include "bench/cuda/bench_common.h"
#include "bench/cuda/copy_kernels.cuh"
#ifdef KCUDA_TIMELINE
#include "bench/cuda/bench_timeline.h"
#endif
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/rms_norm_cuda.h"
#include "kernels/descriptors.h"

static int g_runs = 100;
static cudaDeviceProp g_prop; /* device 0's, read once in main */
static int g_sms = 132;
static size_t g_l2 = 50u << 20;
static cudaStream_t g_stream;

static void *dalloc(size_t n)
{
    void *p;
    CHECK_CUDA(cudaMalloc(&p, n));
    return p;
}

static const char *dt_name(int dt)
{
    return dt == BATON_DTYPE_BF16 ? "bf16" : dt == BATON_DTYPE_F32 ? "f32" : "?";
}

static size_t dt_size(int dt)
{
    return dt == BATON_DTYPE_BF16 ? 2 : 4;
}

/* One shape's buffers, `sets` copies of everything a call reads or writes. */
struct Sets {
    int n;
    std::vector<void *> x, w, y, iv, g, gi, gw, pg;
    void free_all()
    {
        for (auto *v : {&x, &w, &y, &iv, &g, &gi, &gw, &pg})
            for (void *p : *v)
                CHECK_CUDA(cudaFree(p));
    }
};

static Sets make_sets(int64_t n1, int64_t n2, int dt, int64_t P, bool bwd, size_t per_set)
{
    Sets s;
    /* Rotate through enough sets that together they are >= 2 x L2 (at least 2). */
    s.n = (int)std::max<size_t>(2, (2 * g_l2 + per_set - 1) / per_set);
    if (s.n > 64)
        s.n = 64;
    const size_t e = dt_size(dt), n = (size_t)(n1 * n2);
    for (int i = 0; i < s.n; i++) {
        s.x.push_back(dalloc(n * e));
        s.w.push_back(dalloc((size_t)n2 * e));
        s.y.push_back(dalloc(n * e));
        s.iv.push_back(dalloc((size_t)n1 * 4));
        fill_random(g_stream, s.x.back(), n * e, 17 + i);
        fill_random(g_stream, s.w.back(), (size_t)n2 * e, 91 + i);
        if (bwd) {
            s.g.push_back(dalloc(n * e));
            s.gi.push_back(dalloc(n * e));
            s.gw.push_back(dalloc((size_t)n2 * e));
            s.pg.push_back(dalloc((size_t)(P * n2) * 4));
            fill_random(g_stream, s.g.back(), n * e, 1234 + i);
        }
    }
    CHECK_CUDA(cudaStreamSynchronize(g_stream));
    return s;
}

static baton_exec_ctx make_ctx(int pdl, char *err, size_t len)
{
    baton_exec_ctx c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.device.kind = BATON_DEVICE_CUDA;
    c.device.index = 0;
    c.stream = g_stream;
    c.pdl = pdl;
    c.step_name = "bench";
    c.errbuf = err;
    c.errbuf_len = len;
    return c;
}

static void cfg_str(const kcuda_rms_cfg &c, char *b, size_t n)
{
    /* Forward mode 0 with 2+ stages is the bulk-copy kernel; 4 the cp.async one. */
    static const char *modes[] = {"staged", "regs", "stream", "split", "staged-cp", "rows"};
    const char *m = c.mode >= 0 && c.mode <= 5 ? modes[c.mode] : "?";
    char pf[16] = "";
    if (c.variant.prefetch)
        snprintf(pf, sizeof pf, " pf%d", c.variant.prefetch);
    snprintf(b, n, "%s t%d nv%d s%d cx%d kx%d cy%d grid%lld smem%lldK%s%s", m, c.threads, c.nv,
             c.stages, c.cx, c.kx, c.cy, c.grid, c.smem / 1024,
             c.variant.kernel == KCUDA_RMS_VK_PERSIST ? " persistent"
             : c.variant.kernel == KCUDA_RMS_VK_BULK  ? " rows-order"
             : c.variant.kernel == KCUDA_RMS_VK_ROW   ? " row-w-smem"
                                                      : "",
             pf);
}

static double copy_tbs; /* bytes read + written per second / 1e12 */
/* The shape being measured: the best copy kernel and cudaMemcpy moving x's bytes (read) and as
 * many written, timed as its calls are (0: not measured). */
static double floor_tbs, floor_memcpy_tbs;

/* TB/s of bytes moved in us microseconds, and that as % of the shape's best copy kernel (0: not
 * measured). */
static double tbs_of(double bytes, double us)
{
    return bytes / (us * 1e-6) / 1e12;
}
static double pct_of_best(double tbs)
{
    return floor_tbs > 0 ? 100.0 * tbs / floor_tbs : 0;
}

/* The forward's bytes: x read and y written, w read, invvar written (f32). */
static double fwd_bytes(int64_t n1, int64_t n2, size_t e)
{
    return (double)n1 * n2 * e * 2 + (double)n2 * e + (double)n1 * 4;
}

struct Result {
    double us, tbs;
    kcuda_rms_cfg cfg;
};

static Result bench_fwd(int64_t n1, int64_t n2, int dt, const kcuda_rms_cfg *over, Sets &s)
{
    const size_t e = dt_size(dt);
    baton_rms_norm_desc d = {n1, n2, 1e-5, dt, dt, 0};
    char err[512] = "";
    baton_exec_ctx ctx = make_ctx(0, err, sizeof err);
    Result r;
    memset(&r, 0, sizeof r);
    bool failed = false;
    auto call = [&](int i) {
        int k = i % s.n;
        void *b[4] = {s.x[k], s.w[k], s.y[k], s.iv[k]};
        if (!failed &&
            baton__kcuda_rms_norm_fwd_cfg(&ctx, b, (const char *)&d, sizeof d, over, &r.cfg)) {
            printf("  fwd %lldx%lld: FAILED: %s\n", (long long)n1, (long long)n2, err);
            failed = true;
            cudaGetLastError();
        }
    };
    r.us = time_events(g_stream, call, g_runs);
    if (failed)
        r.us = 1e30;
    r.tbs = tbs_of(fwd_bytes(n1, n2, e), r.us);
    return r;
}

/* The backward's bytes: g, x read and grad_input written; w read and grad_weight written; invvar
 * read; part_grad written by the main kernel and read by the column sum (f32). */
static double bwd_bytes(int64_t n1, int64_t n2, size_t e, int64_t P)
{
    return (double)n1 * n2 * e * 3 + (double)n2 * e * 2 + (double)n1 * 4 + 2.0 * (double)P * n2 * 4;
}

static Result bench_bwd(int64_t n1, int64_t n2, int dt, int64_t P, const kcuda_rms_cfg *over,
                        Sets &s)
{
    const size_t e = dt_size(dt);
    baton_rms_norm_desc d = {n1, n2, 1e-5, dt, dt, P};
    char err[512] = "";
    baton_exec_ctx ctx = make_ctx(0, err, sizeof err);
    Result r;
    memset(&r, 0, sizeof r);
    /* invvar from a real forward pass, for every set */
    for (int k = 0; k < s.n; k++) {
        void *b[4] = {s.x[k], s.w[k], s.y[k], s.iv[k]};
        if (baton__kcuda_rms_norm_fwd(&ctx, b, (const char *)&d, sizeof d)) {
            fprintf(stderr, "rms_norm_fwd: %s\n", err);
            exit(1);
        }
    }
    bool failed = false;
    auto call = [&](int i) {
        int k = i % s.n;
        void *b[7] = {s.g[k], s.iv[k], s.x[k], s.w[k], s.gi[k], s.gw[k], s.pg[k]};
        if (!failed &&
            baton__kcuda_rms_norm_bwd_cfg(&ctx, b, (const char *)&d, sizeof d, over, &r.cfg)) {
            printf("  bwd %lldx%lld: FAILED: %s\n", (long long)n1, (long long)n2, err);
            failed = true;
            cudaGetLastError();
        }
    };
    r.us = time_events(g_stream, call, g_runs);
    if (failed)
        r.us = 1e30;
    r.tbs = tbs_of(bwd_bytes(n1, n2, e, P), r.us);
    return r;
}

static void print_result(const char *pass, int64_t n1, int64_t n2, int dt, int64_t P,
                         const char *tag, const Result &r, bool result_line)
{
    char c[128];
    cfg_str(r.cfg, c, sizeof c);
    const double best = pct_of_best(r.tbs);
    const double mc = floor_memcpy_tbs > 0 ? 100.0 * r.tbs / floor_memcpy_tbs : 0;
    printf("  %-4s %-5s %6lldx%-7lld P%-4lld %-8s %10.2f us %6.3f TB/s %6.1f%% of copy %6.1f%% "
           "of best copy kernel %6.1f%% of memcpy (same bytes)  [%s]\n",
           pass, dt_name(dt), (long long)n1, (long long)n2, (long long)P, tag, r.us, r.tbs,
           100.0 * r.tbs / copy_tbs, best, mc, c);
    if (result_line)
        printf("RESULT kernels %s %s %lldx%lld P=%lld %s us=%.2f tbs=%.3f pct_copy=%.1f "
               "pct_best=%.1f pct_memcpy=%.1f cfg=\"%s\"\n",
               pass, dt_name(dt), (long long)n1, (long long)n2, (long long)P, tag, r.us, r.tbs,
               100.0 * r.tbs / copy_tbs, best, mc, c);
    fflush(stdout);
}

static void measure_copy(void)
{
    const size_t bytes = 2ull << 30;
    void *a = dalloc(bytes), *b = dalloc(bytes);
    fill_random(g_stream, a, bytes, 5);
    double us = time_events(
        g_stream,
        [&](int i) {
            CHECK_CUDA(cudaMemcpyAsync(i & 1 ? a : b, i & 1 ? b : a, bytes,
                                       cudaMemcpyDeviceToDevice, g_stream));
        },
        std::max(20, g_runs / 2), 3);
    copy_tbs = tbs_of(2.0 * bytes, us);
    printf("copy: device-to-device %zu MiB: %.1f us, %.3f TB/s (read + written)\n", bytes >> 20, us,
           copy_tbs);
    printf("RESULT kernels copy d2d %zuMiB us=%.1f tbs=%.3f\n", bytes >> 20, us, copy_tbs);
    CHECK_CUDA(cudaFree(a));
    CHECK_CUDA(cudaFree(b));
}

/* The floor of one shape: the best of copy_kernels.cuh's copies (a grid-stride sweep, row copies
 * of the shape's rows on a persistent grid and a block per row, bulk copies) and cudaMemcpy, each
 * moving x's bytes into y, rotated over the shape's sets and timed as its calls are. Sets
 * floor_tbs and floor_memcpy_tbs. */
static void measure_floor(int64_t n1, int64_t n2, int dt, Sets &s)
{
    const size_t bytes = (size_t)(n1 * n2) * dt_size(dt), n16 = bytes / 16;
    const int vecs = (int)(n2 * (int64_t)dt_size(dt) / 16);
    double best = 0;
    char which[64] = "";
    auto consider = [&](const char *name, auto launch) {
        const double us = time_events(
            g_stream,
            [&](int i) {
                launch(s.x[i % s.n], s.y[i % s.n]);
                CHECK_CUDA(cudaGetLastError());
            },
            g_runs);
        const double tbs = tbs_of(2.0 * bytes, us);
        if (tbs > best) {
            best = tbs;
            snprintf(which, sizeof which, "%s", name);
        }
    };
    char name[64];
    for (int per : {1, 2, 4})
        for (int th : {512, 1024}) {
            snprintf(name, sizeof name, "grid-stride %dx%d", per, th);
            consider(name, [&](void *x, void *y) {
                copy16<4><<<g_sms * per, th, 0, g_stream>>>((const uint4 *)x, (uint4 *)y, n16);
            });
        }
    if (bytes % ((size_t)vecs * 16) == 0 && vecs <= 4 * 1024) {
        for (int per4 : {4, 2}) { /* vectors per thread */
            const int th = vecs / per4;
            if (th < 32 || th > 1024 || vecs % per4)
                continue;
            snprintf(name, sizeof name, "row copy, a block per row x %d", th);
            consider(name, [&](void *x, void *y) {
                rowcopy16<<<(unsigned)n1, th, 0, g_stream>>>((const uint4 *)x, (uint4 *)y, n1,
                                                             vecs);
            });
            for (int per : {2, 4}) {
                if (per * th > 2048)
                    continue;
                snprintf(name, sizeof name, "row copy, %d blocks/SM x %d", per, th);
                consider(name, [&](void *x, void *y) {
                    rowcopy16<<<g_sms * per, th, 0, g_stream>>>((const uint4 *)x, (uint4 *)y, n1,
                                                                vecs);
                });
            }
        }
    }
    const int ch = 16384;
    if (bytes % ch == 0) {
        CHECK_CUDA(
            cudaFuncSetAttribute(bulkcopy, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * ch));
        consider("bulk copy 16 KB x 4 stages, 2 blocks/SM", [&](void *x, void *y) {
            bulkcopy<<<g_sms * 2, 32, 4 * ch, g_stream>>>((const char *)x, (char *)y,
                                                          (int64_t)(bytes / ch), ch, 4);
        });
    }
    const double mus = time_events(
        g_stream,
        [&](int i) {
            CHECK_CUDA(cudaMemcpyAsync(s.y[i % s.n], s.x[i % s.n], bytes, cudaMemcpyDeviceToDevice,
                                       g_stream));
        },
        g_runs);
    floor_tbs = best;
    floor_memcpy_tbs = tbs_of(2.0 * bytes, mus);
    printf("  floor %-5s %6lldx%-7lld best copy kernel %.3f TB/s (%s), cudaMemcpy %.3f TB/s\n",
           dt_name(dt), (long long)n1, (long long)n2, best, which, floor_memcpy_tbs);
    for (char *c = which; *c; c++) /* one word on the RESULT line */
        *c = *c == ' ' || *c == ',' ? '_' : *c;
    printf("RESULT kernels floor %s %lldx%lld tbs=%.3f memcpy_tbs=%.3f which=%s\n", dt_name(dt),
           (long long)n1, (long long)n2, best, floor_memcpy_tbs, which);
    fflush(stdout);
}

/* bwdcopy<NV, D, BAR, TAIL> for the NV and D given (NULL for others). */
typedef void (*BwdCopyFn)(const uint4 *, const uint4 *, const float *, uint4 *, int64_t, int,
                          int64_t, int, float *);
template <int NV, bool BAR, int TAIL> static BwdCopyFn bwdcopy_d(int D)
{
    switch (D) {
    case 2: return bwdcopy<NV, 2, BAR, TAIL>;
    case 3: return bwdcopy<NV, 3, BAR, TAIL>;
    case 4: return bwdcopy<NV, 4, BAR, TAIL>;
    case 6: return bwdcopy<NV, 6, BAR, TAIL>;
    case 8: return bwdcopy<NV, 8, BAR, TAIL>;
    }
    return NULL;
}

static BwdCopyFn bwdcopy_for(int nv, int D, bool bar)
{
    if (nv == 2)
        return bar ? bwdcopy_d<2, true, 0>(D) : bwdcopy_d<2, false, 0>(D);
    if (nv == 4)
        return bar ? bwdcopy_d<4, true, 0>(D) : bwdcopy_d<4, false, 0>(D);
    return NULL;
}

/* bwdcopy with the barrier and the tail's least work (copy_kernels.cuh), x's elements of xb
 * bytes. */
static BwdCopyFn bwdtail_for(int nv, int D, size_t xb)
{
    if (nv == 2)
        return xb == 2 ? bwdcopy_d<2, true, 2>(D) : bwdcopy_d<2, true, 4>(D);
    if (nv == 4)
        return xb == 2 ? bwdcopy_d<4, true, 2>(D) : bwdcopy_d<4, true, 4>(D);
    return NULL;
}

/* Launches fn as bwdcopy at groups clusters of cy blocks of T threads, held to bps blocks per SM
 * by its dynamic shared memory (bps 0: only the smem bytes it needs, so that a kernel launched
 * behind it may place its blocks beside it, as behind the backward); false (after printing why)
 * if the launch fails. */
struct BwdCopyLaunch {
    BwdCopyFn fn;
    cudaLaunchConfig_t lc;
    cudaLaunchAttribute at[1];
    bool setup(BwdCopyFn f, int64_t groups, int cy, int T, int bps, size_t need = 0)
    {
        fn = f;
        size_t smem =
            bps ? (size_t)g_prop.sharedMemPerMultiprocessor / bps - g_prop.reservedSharedMemPerBlock
                : need;
        if (smem > g_prop.sharedMemPerBlockOptin)
            smem = g_prop.sharedMemPerBlockOptin;
        if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) ||
            cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)) {
            printf("  layout floor: %s\n", cudaGetErrorString(cudaGetLastError()));
            return false;
        }
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = (unsigned)cy;
        at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
        memset(&lc, 0, sizeof lc);
        lc.gridDim = dim3((unsigned)(groups * cy));
        lc.blockDim = dim3((unsigned)T);
        lc.dynamicSmemBytes = smem;
        lc.stream = g_stream;
        lc.attrs = at;
        lc.numAttrs = cy > 1 ? 1 : 0;
        return true;
    }
    bool launch(Sets &s, int k, int64_t n1, int vecs, int64_t B, int cy)
    {
        cudaError_t rc = cudaLaunchKernelEx(&lc, fn, (const uint4 *)s.g[k], (const uint4 *)s.x[k],
                                            (const float *)s.iv[k], (uint4 *)s.gi[k], n1, vecs, B,
                                            cy, (float *)s.pg[k]);
        if (rc != cudaSuccess) {
            printf("  layout floor: %s\n", cudaGetErrorString(rc));
            cudaGetLastError();
            return false;
        }
        return true;
    }
};

/* --layout-floor: the backward's bytes moved by bwdcopy (copy_kernels.cuh) at the layout the
 * default backward `def` launched (its grid, cluster, threads and vectors per thread) and, for
 * comparison, at a free layout (a block for every slot, no cluster: what part_grad 16 cannot
 * have with its bits fixed by the cluster), holding 3 to 8 rows, with and without the row sums'
 * barrier, at 1 or 2 blocks per SM. Is the part_grad 16 gap the kernel's or the layout's? */
static void layout_floor(int64_t n1, int64_t n2, int dt, int64_t P, const kcuda_rms_cfg &def,
                         Sets &s)
{
    const size_t e = dt_size(dt);
    const int vecs = (int)(n2 * (int64_t)e / 16), T = def.threads, nv = def.nv;
    if (def.mode != KCUDA_RMS_ROWS || (int64_t)vecs * 16 != n2 * (int64_t)e || T * nv < vecs ||
        T < 32)
        return;
    const double bytes = bwd_bytes(n1, n2, e, P);
    const int64_t Bp = (n1 + P - 1) / P;
    for (int free_layout = 0; free_layout < 2; free_layout++)
        for (int bps : {1, 2})
            for (int D : {3, 4, 6, 8})
                for (int bar = 0; bar < 2; bar++) {
                    BwdCopyFn fn = bwdcopy_for(nv, D, bar);
                    if (!fn || (D > 4 && T > 256))
                        continue;
                    const int cy = free_layout ? 1 : (int)def.cy;
                    const int64_t groups =
                        free_layout ? (int64_t)bps * g_sms : (int64_t)def.grid / (cy ? cy : 1);
                    const int64_t B = free_layout ? (n1 + groups - 1) / groups : Bp;
                    BwdCopyLaunch bl;
                    bool failed = !bl.setup(fn, groups, cy, T, bps);
                    const double us = time_events(
                        g_stream,
                        [&](int i) {
                            if (!failed)
                                failed = !bl.launch(s, i % s.n, n1, vecs, B, cy);
                        },
                        g_runs);
                    if (failed)
                        continue;
                    const double tbs = tbs_of(bytes, us), pct = pct_of_best(tbs);
                    const char *lay = free_layout ? "free" : "fitted";
                    printf("  bwd  %-5s %6lldx%-7lld P%-4lld floor-%-6s %10.2f us %6.3f TB/s "
                           "%6.1f%% of best copy kernel  [bwdcopy t%d nv%d D%d %s cy%d grid%lld "
                           "%d/SM]\n",
                           dt_name(dt), (long long)n1, (long long)n2, (long long)P, lay, us, tbs,
                           pct, T, nv, D, bar ? "bar" : "nobar", cy, (long long)(groups * cy), bps);
                    printf("RESULT kernels layoutfloor %s %lldx%lld P=%lld %s t=%d nv=%d D=%d "
                           "bar=%d cy=%d grid=%lld bps=%d us=%.2f pct_best=%.1f\n",
                           dt_name(dt), (long long)n1, (long long)n2, (long long)P, lay, T, nv, D,
                           bar, cy, (long long)(groups * cy), bps, us, pct);
                    fflush(stdout);
                }
}

/* --wait-floor, the backward: what its tail waits for, at the default's own grid, cluster, threads,
 * vectors and rows held, with only the shared memory it needs or held to 1 or 2 blocks per SM:
 * bwdcopy with the row sums' barrier ("bytes"); with its column sums and part_grad's row written,
 * across the cluster's ranks by the kernel's own combine where cy > 1 ("+ combine"); and with the
 * column sum of part_grad launched behind it as the backward launches it (rms_norm_grad_weight,
 * programmatic dependent launch: "+ column sum"). The last does the least that any backward with
 * these bits must do after its last row: the floor of its structure, against which the kernel is
 * read. Each occupancy prints a line of its own (tailfloor_at) as well as the best. The copy
 * needs few registers; the kernel it stands for holds its rows and column sums in up to 128 a
 * thread, which keeps it to 2 blocks of 256 threads per SM (1 of 512), so that line is the floor
 * the kernel can reach (docs/decisions/0005-part-grad-sums-kept-in-l2.md). */
static void tail_floor(int64_t n1, int64_t n2, int dt, int64_t P, const kcuda_rms_cfg &def, Sets &s)
{
    const size_t e = dt_size(dt);
    const int vecs = (int)(n2 * (int64_t)e / 16), T = def.threads, nv = def.nv, D = def.stages;
    const int cy = def.cy > 0 ? def.cy : 1;
    if (def.mode != KCUDA_RMS_ROWS || (int64_t)vecs * 16 != n2 * (int64_t)e || T * nv < vecs ||
        T < 32 || def.kx > 1 || !bwdtail_for(nv, D, e))
        return;
    const double bytes = bwd_bytes(n1, n2, e, P);
    const int64_t B = (n1 + P - 1) / P, groups = (int64_t)def.grid / cy;
    const baton_rms_grad_weight_desc gd = {P, n2, BATON_DTYPE_F32, dt};
    char err[512] = "";
    const baton_exec_ctx ctx = make_ctx(1, err, sizeof err);
    static const char *forms[] = {"bytes", "+ combine", "+ column sum"};
    for (int form = 0; form < 3; form++) {
        double best = 1e30;
        int best_bps = 0;
        for (int bps : {0, 1, 2}) {
            BwdCopyLaunch bl;
            bool failed = !bl.setup(form ? bwdtail_for(nv, D, e) : bwdcopy_for(nv, D, true), groups,
                                    cy, T, bps, form && cy > 1 ? (size_t)n2 * 4 : 0);
            const double us = time_events(
                g_stream,
                [&](int i) {
                    const int k = i % s.n;
                    if (failed)
                        return;
                    failed = !bl.launch(s, k, n1, vecs, B, cy);
                    if (failed || form < 2)
                        return;
                    void *b[3] = {s.pg[k], s.w[k], s.gw[k]};
                    if (baton__kcuda_rms_norm_grad_weight(&ctx, b, (const char *)&gd, sizeof gd)) {
                        printf("  tail floor: %s\n", err);
                        failed = true;
                    }
                },
                g_runs);
            if (failed)
                continue;
            printf("RESULT kernels tailfloor_at %s %lldx%lld P=%lld form=%d bps=%d us=%.2f "
                   "pct_best=%.1f\n",
                   dt_name(dt), (long long)n1, (long long)n2, (long long)P, form, bps, us,
                   pct_of_best(tbs_of(bytes, us)));
            if (us < best) {
                best = us;
                best_bps = bps;
            }
        }
        if (best >= 1e29)
            continue;
        const double pct = pct_of_best(tbs_of(bytes, best));
        char held[32] = "smem as needed";
        if (best_bps)
            snprintf(held, sizeof held, "%d/SM", best_bps);
        printf("  bwd  %-5s %6lldx%-7lld P%-4lld floor-tail %9.2f us %6.1f%% of best copy kernel "
               " [%s: bwdcopy t%d nv%d D%d cy%d grid%lld %s]\n",
               dt_name(dt), (long long)n1, (long long)n2, (long long)P, best, pct, forms[form], T,
               nv, D, cy, (long long)def.grid, held);
        printf("RESULT kernels tailfloor %s %lldx%lld P=%lld form=%d us=%.2f pct_best=%.1f\n",
               dt_name(dt), (long long)n1, (long long)n2, (long long)P, form, best, pct);
        fflush(stdout);
    }
}

/* rowfold16<NV, R> for the NV and R given (NULL for others). */
typedef void (*RowFoldFn)(const uint4 *, uint4 *, int64_t, int);
static RowFoldFn rowfold_for(int nv, int R)
{
    switch (nv * 10 + R) {
    case 11: return rowfold16<1, 1>;
    case 12: return rowfold16<1, 2>;
    case 21: return rowfold16<2, 1>;
    case 22: return rowfold16<2, 2>;
    case 41: return rowfold16<4, 1>;
    case 42: return rowfold16<4, 2>;
    }
    return NULL;
}

/* --wait-floor, the forward: x's rows copied to y by rowfold16 (copy_kernels.cuh), each store
 * waiting for its whole row as y waits for the row's sum, at 1, 2 or 4 vectors per thread and 1
 * or 2 rows a block; the forward's bytes (w and invvar too), % of the best copy kernel. */
static void fwd_wait_floor(int64_t n1, int64_t n2, int dt, Sets &s)
{
    const size_t e = dt_size(dt);
    const int vecs = (int)(n2 * (int64_t)e / 16);
    if ((int64_t)vecs * 16 != n2 * (int64_t)e)
        return;
    const double bytes = fwd_bytes(n1, n2, e);
    for (int nv : {1, 2, 4})
        for (int R : {1, 2}) {
            const int T = (vecs + nv - 1) / nv;
            if (T % 32 || T > 512 || !rowfold_for(nv, R))
                continue;
            const RowFoldFn fn = rowfold_for(nv, R);
            const unsigned grid = (unsigned)((n1 + R - 1) / R);
            const double us = time_events(
                g_stream,
                [&](int i) {
                    fn<<<grid, T, 0, g_stream>>>((const uint4 *)s.x[i % s.n], (uint4 *)s.y[i % s.n],
                                                 n1, vecs);
                    CHECK_CUDA(cudaGetLastError());
                },
                g_runs);
            const double pct = pct_of_best(tbs_of(bytes, us));
            printf("  fwd  %-5s %6lldx%-7lld P0    floor-wait %9.2f us %6.1f%% of best copy kernel "
                   " [rowfold t%d nv%d %d row%s a block]\n",
                   dt_name(dt), (long long)n1, (long long)n2, us, pct, T, nv, R, R > 1 ? "s" : "");
            printf("RESULT kernels waitfloor fwd %s %lldx%lld t=%d nv=%d R=%d us=%.2f "
                   "pct_best=%.1f\n",
                   dt_name(dt), (long long)n1, (long long)n2, T, nv, R, us, pct);
            fflush(stdout);
        }
}

/* --timeline: the last call's stamps (the register backward's only) */
static void bwd_timeline(int64_t n1, int64_t n2, int dt, int64_t P, const char *tag,
                         const kcuda_rms_cfg &c)
{
#ifdef KCUDA_TIMELINE
    if (c.mode != KCUDA_RMS_ROWS)
        return;
    char what[96];
    snprintf(what, sizeof what, "bwd %s %lldx%lld P%lld %s", dt_name(dt), (long long)n1,
             (long long)n2, (long long)P, tag);
    print_bwd_timeline(what, c.cy);
#else
    (void)n1, (void)n2, (void)dt, (void)P, (void)tag, (void)c;
#endif
}

/* One override of BENCH_OVR's list, "mode=5,kx=4,cy=2;pf=1": keys mode, nv, threads, cx, cy, kx,
 * st (stages), vst (the variant's stages) and pf (its prefetch), comma-separated; configurations
 * separated by ';'. Fills *v and returns where the next configuration starts; an unknown key or a
 * malformed pair ends this one. */
static const char *parse_override(const char *c, kcuda_rms_cfg *v)
{
    memset(v, 0, sizeof *v);
    struct {
        const char *key;
        int *field;
    } keys[] = {{"mode", &v->mode},
                {"nv", &v->nv},
                {"threads", &v->threads},
                {"cx", &v->cx},
                {"cy", &v->cy},
                {"kx", &v->kx},
                {"st", &v->stages},
                {"vst", &v->variant.stages},
                {"pf", &v->variant.prefetch}};
    while (*c && *c != ';') {
        char key[16];
        int val = 0, n = 0;
        if (sscanf(c, "%15[a-z]=%d%n", key, &val, &n) != 2)
            break;
        size_t k = 0;
        while (k < sizeof keys / sizeof keys[0] && strcmp(keys[k].key, key))
            k++;
        if (k == sizeof keys / sizeof keys[0])
            break;
        *keys[k].field = val;
        c += n;
        if (*c == ',')
            c++;
    }
    while (*c && *c != ';')
        c++;
    return *c == ';' ? c + 1 : c;
}

int main(int argc, char **argv)
{
    bool quick = false, sweep = false, small_only = false, lfloor = false, wfloor = false;
    bool timeline = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            g_runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--sweep"))
            sweep = true;
        else if (!strcmp(argv[i], "--small"))
            small_only = true;
        else if (!strcmp(argv[i], "--layout-floor"))
            lfloor = true;
        else if (!strcmp(argv[i], "--wait-floor"))
            wfloor = true;
        else if (!strcmp(argv[i], "--timeline")) {
#ifndef KCUDA_TIMELINE
            fprintf(stderr,
                    "%s: --timeline needs a timeline build: configure with "
                    "-DBATON_KERNEL_TIMELINE=ON (docs/benchmarks.md)\n",
                    argv[0]);
            return 2;
#endif
            timeline = true;
        } else {
            fprintf(stderr,
                    "usage: %s [--runs N] [--quick] [--sweep] [--small] [--layout-floor] "
                    "[--wait-floor] [--timeline]\n",
                    argv[0]);
            return 2;
        }
    }
    if (g_runs < 50)
        g_runs = 50;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: nothing to measure\n");
        return 0;
    }
    CHECK_CUDA(cudaGetDeviceProperties(&g_prop, 0));
    const cudaDeviceProp &prop = g_prop;
    g_sms = prop.multiProcessorCount;
    g_l2 = (size_t)prop.l2CacheSize;
    CHECK_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    printf("device: %s, %d SMs, L2 %zu MiB, %d runs per median\n", prop.name, g_sms, g_l2 >> 20,
           g_runs);
    printf("RESULT kernels device \"%s\" sms=%d l2MiB=%zu\n", prop.name, g_sms, g_l2 >> 20);
    measure_copy();

    /* ---- the bandwidth shapes ---- */
    const int64_t big[][2] = {{16384, 8192}, {32768, 4096}, {65536, 4096}, {4096, 4096}};
    const int dts[] = {BATON_DTYPE_BF16, BATON_DTYPE_F32};
    /* BENCH_P: the backward at this part_grad size only, any of 1..256 (the sets hold 256 rows of
     * part_grad) */
    int64_t Ps[] = {16, 256};
    int nps = 2;
    const char *only_p = getenv("BENCH_P");
    if (only_p && *only_p) {
        char *end = NULL;
        const long long p = strtoll(only_p, &end, 10);
        if (*end || p < 1 || p > 256) {
            fprintf(stderr, "bench_kernels: BENCH_P=%s: give a part_grad size from 1 to 256\n",
                    only_p);
            return 2;
        }
        Ps[0] = p;
        nps = 1;
    }
    for (int di = 0; di < (small_only ? 0 : 2); di++) {
        for (int si = 0; si < 4; si++) {
            const int dt = dts[di];
            const int64_t n1 = big[si][0], n2 = big[si][1];
            const char *only_shape = getenv("BENCH_SHAPE");
            if (only_shape && *only_shape) { /* e.g. "bf16 32768x4096,f32 4096x4096" */
                char name[64];
                snprintf(name, sizeof name, "%s %lldx%lld", dt_name(dt), (long long)n1,
                         (long long)n2);
                const char *at = strstr(only_shape, name);
                const size_t k = strlen(name);
                if (!at || (at != only_shape && at[-1] != ',') || (at[k] && at[k] != ','))
                    continue;
            }
            const size_t e = dt_size(dt), per = (size_t)(n1 * n2) * e;
            Sets s = make_sets(n1, n2, dt, 256, true, 3 * per);
            measure_floor(n1, n2, dt, s);
            Result r = bench_fwd(n1, n2, dt, NULL, s);
            print_result("fwd", n1, n2, dt, 0, "default", r, true);
            if (wfloor)
                fwd_wait_floor(n1, n2, dt, s);
            if (sweep) {
                /* The register kernel (mode 5) at 2, 4 and 8 vectors per thread, the bulk-copy
                 * kernel (stages 2 to 8), and the cp.async kernel (mode 4). */
                std::vector<kcuda_rms_cfg> vs;
                for (int nv : {2, 4, 8}) {
                    kcuda_rms_cfg v;
                    memset(&v, 0, sizeof v);
                    v.mode = 5;
                    v.nv = nv;
                    if ((int64_t)512 * nv * (int64_t)(16 / e) >= n2)
                        vs.push_back(v);
                }
                for (int t : {256, 512})
                    for (int st : {2, 4}) {
                        kcuda_rms_cfg v;
                        memset(&v, 0, sizeof v);
                        v.threads = t;
                        v.stages = st;
                        vs.push_back(v);
                    }
                for (int t : {0, 256, 512}) {
                    kcuda_rms_cfg v;
                    memset(&v, 0, sizeof v);
                    v.mode = 4;
                    v.threads = t;
                    vs.push_back(v);
                }
                for (int k : {KCUDA_RMS_VK_PERSIST, KCUDA_RMS_VK_BULK, KCUDA_RMS_VK_ROW}) {
                    kcuda_rms_cfg v;
                    memset(&v, 0, sizeof v);
                    v.variant.kernel = k;
                    vs.push_back(v);
                }
                Result best = r;
                for (const auto &v : vs) {
                    Result rv = bench_fwd(n1, n2, dt, &v, s);
                    print_result("fwd", n1, n2, dt, 0, "sweep", rv, false);
                    if (rv.us < best.us)
                        best = rv;
                }
                print_result("fwd", n1, n2, dt, 0, "best", best, true);
            }
            for (int i = 0; i < nps; i++) {
                const int64_t P = Ps[i];
                if (quick && P != 16)
                    continue;
                Result rb = bench_bwd(n1, n2, dt, P, NULL, s);
                print_result("bwd", n1, n2, dt, P, "default", rb, true);
                if (timeline)
                    bwd_timeline(n1, n2, dt, P, "default", rb.cfg);
                /* BENCH_OVR: overrides of this backward to measure beside its default */
                for (const char *c = getenv("BENCH_OVR"); c && *c;) {
                    kcuda_rms_cfg v;
                    c = parse_override(c, &v);
                    Result rv = bench_bwd(n1, n2, dt, P, &v, s);
                    if (rv.us < 1e29) {
                        print_result("bwd", n1, n2, dt, P, "ovr", rv, true);
                        if (timeline)
                            bwd_timeline(n1, n2, dt, P, "ovr", rv.cfg);
                    }
                }
                if (lfloor)
                    layout_floor(n1, n2, dt, P, rb.cfg, s);
                if (wfloor)
                    tail_floor(n1, n2, dt, P, rb.cfg, s);
                if (sweep) {
                    /* The register backward holding 2 to 8 rows (tuning variants: the same
                     * bits), the layout as if it held 3 to 8 (cy fitted for that kernel: other
                     * bits), half the threads at twice the vectors, forced at other cluster
                     * sizes (other bits: what the fit chose against), 2 to 4 chained
                     * clusters per part_grad block (kx), deeper rows at forced clusters, and
                     * the staged kernel at the cluster that it used to choose
                     * (min(ceil(2 SMs / P), 16)). Rows a layout cannot hold fail and are left
                     * out. BENCH_SWEEP_BWD=1 adds the staged kernel's threads and stages. */
                    std::vector<kcuda_rms_cfg> vs;
                    const int nv = rb.cfg.nv; /* as the default launched it */
                    const int rows[] = {2, 3, 4, 6, 8};
                    for (int st : rows) {
                        kcuda_rms_cfg v;
                        memset(&v, 0, sizeof v);
                        v.variant.stages = st;
                        vs.push_back(v);
                    }
                    /* rounds of rows asked into L2 beyond those held (tuning variants too) */
                    for (int st : {0, 3, 4})
                        for (int pf : {1, 2}) {
                            kcuda_rms_cfg v;
                            memset(&v, 0, sizeof v);
                            v.variant.stages = st;
                            v.variant.prefetch = pf;
                            vs.push_back(v);
                        }
                    for (int st : rows) {
                        kcuda_rms_cfg v;
                        memset(&v, 0, sizeof v);
                        v.mode = 5;
                        v.stages = st;
                        if (st != rb.cfg.stages && st > 2)
                            vs.push_back(v);
                    }
                    for (int st : rows) {
                        /* half the threads, twice the vectors each: more blocks per SM */
                        kcuda_rms_cfg v;
                        memset(&v, 0, sizeof v);
                        v.mode = 5;
                        v.nv = 2 * nv;
                        v.stages = st;
                        if (2 * nv <= 8)
                            vs.push_back(v);
                    }
                    /* register rows (mode 5) with kx, rows held and cy as given (0: chosen) */
                    auto rows_at = [&vs](int kx, int st, int cy) {
                        kcuda_rms_cfg v;
                        memset(&v, 0, sizeof v);
                        v.mode = 5;
                        v.kx = kx;
                        v.stages = st;
                        v.cy = cy;
                        vs.push_back(v);
                    };
                    for (int cy : {1, 2, 4, 6, 7, 8, 12, 14, 16})
                        rows_at(0, 0, cy);
                    for (int kx = 2; kx <= 4; kx++) /* chained clusters, cy fitted for them */
                        for (int st : {0, 6})
                            rows_at(kx, st, 0);
                    for (int st : {6, 8})
                        for (int cy : {6, 8, 12, 16})
                            rows_at(0, st, cy);
                    {
                        kcuda_rms_cfg v;
                        memset(&v, 0, sizeof v);
                        const int64_t cy = (2 * g_sms + P - 1) / P;
                        v.cy = (int)(cy > 16 ? 16 : cy);
                        vs.push_back(v);
                    }
                    if (getenv("BENCH_SWEEP_BWD"))
                        for (int t : {128, 256, 512})
                            for (int st = 1; st <= 4; st++) {
                                kcuda_rms_cfg v;
                                memset(&v, 0, sizeof v);
                                v.threads = t;
                                v.stages = st;
                                vs.push_back(v);
                            }
                    Result best = rb;
                    for (const auto &v : vs) {
                        if (v.cy && (P * v.cy * (v.kx ? v.kx : 1) > 4096 ||
                                     (n1 + P - 1) / P < v.cy * (v.kx ? v.kx : 1)))
                            continue;
                        Result rv = bench_bwd(n1, n2, dt, P, &v, s);
                        if (rv.us >= 1e29)
                            continue; /* not a layout this call can have (printed) */
                        print_result("bwd", n1, n2, dt, P, "sweep", rv, false);
                        if (rv.us < best.us)
                            best = rv;
                    }
                    print_result("bwd", n1, n2, dt, P, "best", best, true);
                }
            }
            s.free_all();
            floor_tbs = floor_memcpy_tbs = 0;
        }
    }

    /* ---- the tutorial's 4 x 262144 bf16, and decode rows ---- */
    struct Small {
        int64_t n1, n2, P;
    } small[] = {{4, 262144, 16}, {4, 262144, 4}, {1, 4096, 16}, {32, 4096, 16}};
    for (const auto &sh : small) {
        const int dt = BATON_DTYPE_BF16;
        const size_t per = (size_t)(sh.n1 * sh.n2) * 2 * 3 + (size_t)sh.P * sh.n2 * 4;
        Sets s = make_sets(sh.n1, sh.n2, dt, sh.P, true, per);
        char err[512] = "";
        baton_rms_norm_desc d = {sh.n1, sh.n2, 1e-5, dt, dt, sh.P};
        Result r;
        memset(&r, 0, sizeof r);
        if (sh.P == 16) {
            r = bench_fwd(sh.n1, sh.n2, dt, NULL, s);
            print_result("fwd", sh.n1, sh.n2, dt, 0, "events", r, true);
            if (sweep)
                for (int cx : {4, 8, 16})
                    for (int t : {256, 512}) {
                        kcuda_rms_cfg v;
                        memset(&v, 0, sizeof v);
                        v.cx = sh.n2 >= 4096 * cx ? cx : 1;
                        v.threads = t;
                        print_result("fwd", sh.n1, sh.n2, dt, 0, "sweep",
                                     bench_fwd(sh.n1, sh.n2, dt, &v, s), false);
                    }
        }
        if (sweep)
            for (int cx : {4, 8, 16})
                for (int t : {256, 512}) {
                    kcuda_rms_cfg v;
                    memset(&v, 0, sizeof v);
                    v.cx = sh.n2 >= 4096 * cx ? cx : 1;
                    v.threads = t;
                    print_result("bwd", sh.n1, sh.n2, dt, sh.P, "sweep",
                                 bench_bwd(sh.n1, sh.n2, dt, sh.P, &v, s), false);
                }
        Result rb = bench_bwd(sh.n1, sh.n2, dt, sh.P, NULL, s);
        print_result("bwd", sh.n1, sh.n2, dt, sh.P, "events", rb, true);
        {
            /* Host time per call (what a scheduler pays to issue one), behind a busy GPU. */
            baton_exec_ctx ctx = make_ctx(0, err, sizeof err);
            spin_kernel<<<1, 1, 0, g_stream>>>(50000000LL);
            const int calls = 150; /* 450 launches: well inside the launch queue */
            double t[2];
            for (int pass = 0; pass < 2; pass++) {
                struct timespec a, b;
                clock_gettime(CLOCK_MONOTONIC, &a);
                for (int i = 0; i < calls; i++) {
                    int k = i % s.n;
                    void *fb[4] = {s.x[k], s.w[k], s.y[k], s.iv[k]};
                    void *bb[7] = {s.g[k], s.iv[k], s.x[k], s.w[k], s.gi[k], s.gw[k], s.pg[k]};
                    int rc = pass == 0
                                 ? baton__kcuda_rms_norm_fwd(&ctx, fb, (const char *)&d, sizeof d)
                                 : baton__kcuda_rms_norm_bwd(&ctx, bb, (const char *)&d, sizeof d);
                    if (rc) {
                        fprintf(stderr, "host-cost call: %s\n", err);
                        exit(1);
                    }
                }
                clock_gettime(CLOCK_MONOTONIC, &b);
                t[pass] = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / calls;
            }
            CHECK_CUDA(cudaStreamSynchronize(g_stream));
            printf("  host time per call %lldx%lld P%lld: fwd %.2f us, bwd %.2f us\n",
                   (long long)sh.n1, (long long)sh.n2, (long long)sh.P, t[0], t[1]);
            printf("RESULT kernels host %lldx%lld P=%lld fwd_us=%.2f bwd_us=%.2f\n",
                   (long long)sh.n1, (long long)sh.n2, (long long)sh.P, t[0], t[1]);
        }
        /* Back-to-back launches replayed from a graph: 64 calls over the rotating sets. */
        for (int pdl = 0; pdl < 2; pdl++) {
            baton_exec_ctx ctx = make_ctx(pdl, err, sizeof err);
            const char *tag = pdl ? "graph+pdl" : "graph";
            if (sh.P == 16) {
                r.us = time_graph(
                    g_stream,
                    [&](int i) {
                        int k = i % s.n;
                        void *b[4] = {s.x[k], s.w[k], s.y[k], s.iv[k]};
                        if (baton__kcuda_rms_norm_fwd(&ctx, b, (const char *)&d, sizeof d)) {
                            fprintf(stderr, "rms_norm_fwd: %s\n", err);
                            exit(1);
                        }
                    },
                    64, g_runs);
                r.tbs = tbs_of(fwd_bytes(sh.n1, sh.n2, 2), r.us);
                print_result("fwd", sh.n1, sh.n2, dt, 0, tag, r, true);
            }
            rb.us = time_graph(
                g_stream,
                [&](int i) {
                    int k = i % s.n;
                    void *b[7] = {s.g[k], s.iv[k], s.x[k], s.w[k], s.gi[k], s.gw[k], s.pg[k]};
                    if (baton__kcuda_rms_norm_bwd(&ctx, b, (const char *)&d, sizeof d)) {
                        fprintf(stderr, "rms_norm_bwd: %s\n", err);
                        exit(1);
                    }
                },
                64, g_runs);
            rb.tbs = tbs_of((double)sh.n1 * sh.n2 * 6 + sh.n2 * 4 + sh.n1 * 4, rb.us);
            print_result("bwd", sh.n1, sh.n2, dt, sh.P, tag, rb, true);
        }
        s.free_all();
    }

    /* The floor: an empty kernel (baton__kcuda_noop), one launch per call, from a graph. */
    {
        char err[256] = "";
        for (int pdl = 0; pdl < 2; pdl++) {
            baton_exec_ctx ctx = make_ctx(pdl, err, sizeof err);
            double us = time_graph(
                g_stream,
                [&](int) {
                    if (baton__kcuda_noop(&ctx, NULL, NULL, 0)) {
                        fprintf(stderr, "noop: %s\n", err);
                        exit(1);
                    }
                },
                64, g_runs);
            printf("  noop %s: %.2f us per launch\n", pdl ? "graph+pdl" : "graph", us);
            printf("RESULT kernels noop %s us=%.2f\n", pdl ? "graph+pdl" : "graph", us);
        }
    }
    CHECK_CUDA(cudaStreamDestroy(g_stream));
    return 0;
}
