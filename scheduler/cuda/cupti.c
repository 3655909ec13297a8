/* cupti.c: device timelines for traces on CUDA (cupti.h). CUPTI's activity API delivers a record
 * per kernel and per copy, with start and end on the GPU, in buffers it hands back when full or
 * flushed. CUPTI is process-wide, so one session serves every traced runtime: records are routed
 * to the trace whose stream they ran on. libcupti is opened with dlopen on the first trace, so a
 * program that never traces does not need it; without its header at build time, or without the
 * library at run time, a trace simply has no GPU process and says why. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/dynlib.h"
#include "scheduler/cuda/cupti.h"

#ifdef BATON_CUPTI

#include <cuda_runtime_api.h>
#include <cupti.h>
#include <pthread.h>
#include <time.h>

#define MAX_SINKS  16
#define CORR_SLOTS 65536 /* launch -> step map, by correlation id */
#define BUF_BYTES  ((size_t)4 << 20)

/* The functions of libcupti baton uses. */
static struct {
    void *lib;
    CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                      CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*enable)(CUpti_ActivityKind);
    CUptiResult (*disable)(CUpti_ActivityKind);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*get_timestamp)(uint64_t *);
    CUptiResult (*stream_id)(CUcontext, CUstream, uint8_t, uint32_t *);
    CUptiResult (*push_ext)(CUpti_ExternalCorrelationKind, uint64_t);
    CUptiResult (*pop_ext)(CUpti_ExternalCorrelationKind, uint64_t *);
} api;

typedef struct sink {
    dev_trace *t;
    uint32_t stream;
    size_t synced; /* spans before this index have their steps and graph spans */
} sink;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static sink sinks[MAX_SINKS];
static int n_sinks, enabled;

/* baton_gpu_busy_begin/end: every kernel and copy of the process, for the busy fraction. */
typedef struct busy_span {
    int64_t t0, t1;
    uint32_t dev; /* the CUDA device it ran on */
} busy_span;
static struct {
    int on;
    busy_span *spans;
    size_t n, cap, dropped;
    uint64_t begin; /* CUPTI's clock */
    /* the last window's figures per device (baton_gpu_busy_device), once it has ended */
    int ended;
    double dev_fraction[BATON_BUSY_MAX_DEVICES];
    int64_t dev_work[BATON_BUSY_MAX_DEVICES];
} busy;
static int64_t clock_offset; /* CLOCK_MONOTONIC - CUPTI's clock, ns */
static struct {
    uint32_t corr;
    int step;
} corr_step[CORR_SLOTS];

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int load(baton_error *err)
{
    if (api.lib)
        return 0;
    static const char *const names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
    const dynlib_sym syms[] = {
        {"cuptiActivityRegisterCallbacks", &api.register_callbacks},
        {"cuptiActivityEnable", &api.enable},
        {"cuptiActivityDisable", &api.disable},
        {"cuptiActivityFlushAll", &api.flush_all},
        {"cuptiActivityGetNextRecord", &api.next_record},
        {"cuptiGetTimestamp", &api.get_timestamp},
        {"cuptiGetStreamIdEx", &api.stream_id},
        {"cuptiActivityPushExternalCorrelationId", &api.push_ext},
        {"cuptiActivityPopExternalCorrelationId", &api.pop_ext},
    };
    const char *missing;
    char why[256];
    void *lib = baton__dynlib_open(names, sizeof names / sizeof names[0], syms,
                                   sizeof syms / sizeof syms[0], &missing, why, sizeof why);
    if (!lib && missing)
        return baton__err_set(err, BATON_ENOTSUP, "no device timeline: libcupti lacks %s", missing);
    if (!lib)
        return baton__err_set(err, BATON_ENOTSUP,
                              "no device timeline: libcupti.so cannot be loaded (%s); put the CUDA "
                              "toolkit's CUPTI library on the library path",
                              why);
    api.lib = lib;
    return 0;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUF_BYTES);
    *size = *buffer ? BUF_BYTES : 0;
    *max_records = 0;
}

/* Kernel names as C++ mangles them, made readable once (the names live as long as CUPTI). */
extern char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

static const char *readable(const char *name)
{
    static struct {
        const char *mangled, *plain;
    } seen[256];
    static int n_seen;
    if (!name)
        return "kernel";
    for (int i = 0; i < n_seen; i++)
        if (seen[i].mangled == name)
            return seen[i].plain;
    int status = -1;
    char *plain =
        name[0] == '_' && name[1] == 'Z' ? __cxa_demangle(name, NULL, NULL, &status) : NULL;
    if (status != 0 || !plain)
        return name;
    char *paren = strchr(plain, '(');
    if (paren)
        *paren = 0; /* the name without its argument list */
    if (n_seen == 256)
        return plain; /* kept: CUPTI's names are few; beyond that, leak rather than dangle */
    seen[n_seen].mangled = name;
    seen[n_seen].plain = plain;
    return seen[n_seen++].plain;
}

static void put(uint32_t stream, dev_span sp)
{
    for (int i = 0; i < n_sinks; i++) {
        if (sinks[i].stream != stream)
            continue;
        dev_trace *t = sinks[i].t;
        size_t k = atomic_load(&t->n);
        if (k >= t->cap) {
            atomic_fetch_add(&t->dropped, 1);
            return;
        }
        t->spans[k] = sp;
        atomic_store(&t->n, k + 1);
        return;
    }
}

static void busy_put(uint64_t t0, uint64_t t1, uint32_t dev)
{
    if (!busy.on || t1 <= busy.begin)
        return;
    if (busy.n == busy.cap) {
        busy.dropped++;
        return;
    }
    busy.spans[busy.n++] = (busy_span){(int64_t)t0, (int64_t)t1, dev};
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&lock);
    while (valid && api.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
            rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const void *)rec;
            busy_put(k->start, k->end, k->deviceId);
            put(k->streamId, (dev_span){readable(k->name), "kernel", -1, k->graphId ? 1 : 0, 0,
                                        (int64_t)k->start + clock_offset,
                                        (int64_t)k->end + clock_offset, k->correlationId});
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const void *)rec;
            busy_put(m->start, m->end, m->deviceId);
            put(m->streamId, (dev_span){"copy", "copy", -1, m->graphId ? 1 : 0, (int64_t)m->bytes,
                                        (int64_t)m->start + clock_offset,
                                        (int64_t)m->end + clock_offset, m->correlationId});
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
            const CUpti_ActivityExternalCorrelation *e = (const void *)rec;
            corr_step[e->correlationId % CORR_SLOTS].corr = e->correlationId;
            corr_step[e->correlationId % CORR_SLOTS].step = (int)e->externalId - 1;
        }
    }
    pthread_mutex_unlock(&lock);
    free(buffer);
}

/* What is recorded: kernels (in graphs too) and copies, and the step tags. */
static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                           CUPTI_ACTIVITY_KIND_MEMCPY,
                                           CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))

/* With the lock held: CUPTI on for the first user (a trace or the busy fraction). */
static int enable_all(baton_error *err)
{
    if (enabled)
        return 0;
    int rc = 0;
    if (api.register_callbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS)
        rc = baton__err_set(err, BATON_ENOTSUP,
                            "no device timeline: CUPTI refused its callbacks (is another profiler "
                            "attached?)");
    for (int i = 0; !rc && i < N_KINDS; i++)
        if (api.enable(kinds[i]) != CUPTI_SUCCESS)
            rc = baton__err_set(err, BATON_ENOTSUP,
                                "no device timeline: cuptiActivityEnable failed");
    uint64_t ts = 0;
    if (!rc && api.get_timestamp(&ts) == CUPTI_SUCCESS)
        clock_offset = mono_ns() - (int64_t)ts;
    enabled = !rc;
    return rc;
}

/* With the lock held: CUPTI off when its last user is gone (it slows every kernel while on). */
static void disable_unused(void)
{
    if (n_sinks == 0 && !busy.on && enabled) {
        for (int i = 0; i < N_KINDS; i++)
            api.disable(kinds[i]);
        enabled = 0;
    }
}

int baton__cupti_attach(void *stream, dev_trace *t, baton_error *err)
{
    pthread_mutex_lock(&lock);
    int rc = load(err);
    uint32_t id = 0;
    if (!rc && api.stream_id(NULL, (CUstream)stream, 0, &id) != CUPTI_SUCCESS)
        rc = baton__err_set(err, BATON_ENOTSUP, "no device timeline: cuptiGetStreamIdEx failed");
    if (!rc && n_sinks == MAX_SINKS)
        rc = baton__err_set(err, BATON_ENOTSUP, "no device timeline: %d streams are traced already",
                            MAX_SINKS);
    if (!rc)
        rc = enable_all(err);
    if (!rc)
        sinks[n_sinks++] = (sink){t, id, 0};
    pthread_mutex_unlock(&lock);
    return rc;
}

void baton__cupti_detach(dev_trace *t)
{
    if (!api.lib)
        return;
    api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); /* nothing may land in t after this */
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_sinks; i++)
        if (sinks[i].t == t)
            sinks[i--] = sinks[--n_sinks];
    disable_unused();
    pthread_mutex_unlock(&lock);
}

#define BUSY_CAP ((size_t)1 << 22) /* spans: 64 MiB, about 4 M kernels and copies */

int baton_gpu_busy_begin(baton_error *err)
{
    err_clear(err);
    if (baton_cuda_device_count() == 0)
        return baton__err_set(err, BATON_ENOTSUP, "GPU busy fraction: no CUDA device");
    pthread_mutex_lock(&lock);
    int rc =
        busy.on ? baton__err_set(err, BATON_ESTATE, "GPU busy fraction: already measuring") : 0;
    if (!rc)
        rc = load(err);
    if (!rc && !busy.spans && !(busy.spans = malloc(BUSY_CAP * sizeof *busy.spans)))
        rc = baton__err_set(err, BATON_ENOMEM, "GPU busy fraction: out of memory");
    if (!rc)
        rc = enable_all(err);
    if (!rc && api.get_timestamp(&busy.begin) != CUPTI_SUCCESS)
        rc = baton__err_set(err, BATON_ENOTSUP, "GPU busy fraction: cuptiGetTimestamp failed");
    if (!rc) {
        busy.cap = BUSY_CAP;
        busy.n = busy.dropped = 0;
        busy.on = 1;
        busy.ended = 0;
    }
    disable_unused();
    pthread_mutex_unlock(&lock);
    return rc;
}

static int cmp_span(const void *a, const void *b)
{
    const busy_span *x = a, *y = b;
    return (x->t0 > y->t0) - (x->t0 < y->t0);
}

/* With the lock held, busy.spans sorted by start: the time within [lo, hi) in which at least one
 * span of device `dev` (-1: any) ran, and in *work (if not NULL) the sum of those spans' clipped
 * lengths (side-by-side spans each counted). */
static int64_t union_ns(int64_t lo, int64_t hi, int dev, int64_t *work)
{
    int64_t covered = 0, c0 = 0, c1 = 0, sum = 0;
    int have = 0;
    for (size_t i = 0; i < busy.n; i++) {
        if (dev >= 0 && busy.spans[i].dev != (uint32_t)dev)
            continue;
        int64_t a = busy.spans[i].t0 > lo ? busy.spans[i].t0 : lo;
        int64_t b = busy.spans[i].t1 < hi ? busy.spans[i].t1 : hi;
        if (b <= a)
            continue;
        sum += b - a;
        if (have && a <= c1) {
            c1 = b > c1 ? b : c1;
            continue;
        }
        if (have)
            covered += c1 - c0;
        c0 = a, c1 = b, have = 1;
    }
    if (have)
        covered += c1 - c0;
    if (work)
        *work = sum;
    return covered;
}

int baton_gpu_busy_end(double *fraction, baton_error *err)
{
    err_clear(err);
    if (fraction)
        *fraction = 0;
    if (!busy.on)
        return baton__err_set(err, BATON_ESTATE,
                              "GPU busy fraction: call baton_gpu_busy_begin first");
    uint64_t end = 0;
    /* The window ends now; work issued before and still running counts up to its end, which
     * CUPTI reports once it completes, so wait for every GPU first (cudaDeviceSynchronize waits
     * for the current one only), leaving the caller's current device as it was. */
    int prev = -1, count = 0;
    if (cudaGetDevice(&prev) != cudaSuccess)
        prev = -1;
    if (cudaGetDeviceCount(&count) != cudaSuccess)
        count = 0;
    for (int d = 0; d < count; d++)
        if (cudaSetDevice(d) == cudaSuccess)
            cudaDeviceSynchronize();
    if (prev >= 0)
        cudaSetDevice(prev);
    (void)cudaGetLastError();
    api.get_timestamp(&end);
    api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    pthread_mutex_lock(&lock);
    busy.on = 0;
    qsort(busy.spans, busy.n, sizeof *busy.spans, cmp_span);
    const int64_t lo = (int64_t)busy.begin, hi = (int64_t)end;
    /* every device together (dev -1), then each device alone */
    const int64_t covered = union_ns(lo, hi, -1, NULL);
    for (int d = 0; d < BATON_BUSY_MAX_DEVICES; d++) {
        int64_t work = 0;
        const int64_t on = union_ns(lo, hi, d, &work);
        busy.dev_fraction[d] = hi > lo ? (double)on / (double)(hi - lo) : 0;
        busy.dev_work[d] = work;
    }
    busy.ended = 1;
    size_t dropped = busy.dropped;
    disable_unused();
    pthread_mutex_unlock(&lock);
    if (dropped)
        return baton__err_set(
            err, BATON_ENOMEM,
            "GPU busy fraction: %zu kernels and copies did not fit (%zu recorded); "
            "measure a shorter window",
            dropped, (size_t)BUSY_CAP);
    if (fraction && hi > lo)
        *fraction = (double)covered / (double)(hi - lo);
    return 0;
}

int baton_gpu_busy_device(int device, double *fraction, int64_t *work_ns, baton_error *err)
{
    err_clear(err);
    if (fraction)
        *fraction = 0;
    if (work_ns)
        *work_ns = 0;
    if (device < 0 || device >= BATON_BUSY_MAX_DEVICES)
        return baton__err_set(err, BATON_EINVAL, "GPU busy fraction: device %d is not 0..%d",
                              device, BATON_BUSY_MAX_DEVICES - 1);
    pthread_mutex_lock(&lock);
    const int ended = busy.ended;
    if (ended && fraction)
        *fraction = busy.dev_fraction[device];
    if (ended && work_ns)
        *work_ns = busy.dev_work[device];
    pthread_mutex_unlock(&lock);
    return ended ? 0
                 : baton__err_set(err, BATON_ESTATE,
                                  "GPU busy fraction: no window has ended (baton_gpu_busy_begin, "
                                  "then baton_gpu_busy_end)");
}

void baton__cupti_sync(dev_trace *t)
{
    if (!api.lib)
        return;
    api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    pthread_mutex_lock(&lock);
    sink *me = NULL;
    for (int i = 0; i < n_sinks; i++)
        if (sinks[i].t == t)
            me = &sinks[i];
    size_t n = atomic_load(&t->n), from = me ? me->synced : n;
    /* name each span's step; the spans of one graph replay share its launch's correlation id and
     * arrive together: one more span per replay, on the stream lane, covers them */
    dev_span g = {0};
    for (size_t i = from; i <= n; i++) {
        dev_span *sp = i < n ? &t->spans[i] : NULL;
        if (sp && sp->step < 0 && sp->corr && corr_step[sp->corr % CORR_SLOTS].corr == sp->corr)
            sp->step = corr_step[sp->corr % CORR_SLOTS].step;
        int inside = sp && sp->lane == 1 && sp->corr;
        if (g.corr && (!inside || sp->corr != g.corr)) {
            size_t k = atomic_load(&t->n);
            if (k < t->cap) {
                t->spans[k] = g;
                atomic_store(&t->n, k + 1);
            } else {
                atomic_fetch_add(&t->dropped, 1);
            }
            g.corr = 0;
        }
        if (!inside)
            continue;
        if (!g.corr)
            g = (dev_span){"graph", "graph", sp->step, 0, 0, sp->t0, sp->t1, sp->corr};
        g.t0 = sp->t0 < g.t0 ? sp->t0 : g.t0;
        g.t1 = sp->t1 > g.t1 ? sp->t1 : g.t1;
    }
    if (me)
        me->synced = atomic_load(&t->n);
    pthread_mutex_unlock(&lock);
}

void baton__cupti_push(int step)
{
    if (enabled)
        api.push_ext(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, (uint64_t)step + 1);
}

void baton__cupti_pop(void)
{
    uint64_t id;
    if (enabled)
        api.pop_ext(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
}

#else /* built without CUPTI's header */

int baton_gpu_busy_begin(baton_error *err)
{
    err_clear(err);
    return baton__err_set(
        err, BATON_ENOTSUP,
        "GPU busy fraction: this build of baton has no CUPTI (its header was not found "
        "at build time)");
}

int baton_gpu_busy_end(double *fraction, baton_error *err)
{
    err_clear(err);
    if (fraction)
        *fraction = 0;
    return baton__err_set(err, BATON_ESTATE, "GPU busy fraction: call baton_gpu_busy_begin first");
}

int baton_gpu_busy_device(int device, double *fraction, int64_t *work_ns, baton_error *err)
{
    err_clear(err);
    if (fraction)
        *fraction = 0;
    if (work_ns)
        *work_ns = 0;
    if (device < 0 || device >= BATON_BUSY_MAX_DEVICES)
        return baton__err_set(err, BATON_EINVAL, "GPU busy fraction: device %d is not 0..%d",
                              device, BATON_BUSY_MAX_DEVICES - 1);
    return baton__err_set(err, BATON_ESTATE, "GPU busy fraction: no window has ended");
}

int baton__cupti_attach(void *stream, dev_trace *t, baton_error *err)
{
    (void)stream, (void)t;
    return baton__err_set(
        err, BATON_ENOTSUP,
        "no device timeline: this build of baton has no CUPTI (its header was not "
        "found at build time)");
}
void baton__cupti_detach(dev_trace *t)
{
    (void)t;
}
void baton__cupti_sync(dev_trace *t)
{
    (void)t;
}
void baton__cupti_push(int step)
{
    (void)step;
}
void baton__cupti_pop(void)
{
}

#endif
