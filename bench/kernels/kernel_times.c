/* kernel_times.c: every GPU kernel a process runs between kt_start and kt_stop, with its name and
 * its start and end on the GPU, from CUPTI's activity API. Loaded by bench/kernels/peers.py with
 * ctypes, so that XLA's and torch's kernels are timed on the device like baton's own (issue 11).
 *
 * The API, all returning 0 or a count on success and a negative number with kt_error() saying why:
 *   kt_start()  records from now on;      kt_flush()  delivers what has run, returns the count;
 *   kt_stop()   kt_flush, then stops;     kt_get(i, &name, &start_ns, &end_ns)  record i;
 *   kt_clear()  forgets the records (names from kt_get die with them). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

#define KT_API __attribute__((visibility("default")))

/* CUPTI fills buffers of this size and hands them back when full or flushed; 4 MiB holds some
 * ten thousand kernel records, so a measured call never waits for a buffer. */
#define BUF_BYTES ((size_t)4 << 20)

typedef struct kernel_record {
    char *name;
    uint64_t start, end;
} kernel_record;

/* Records arrive on CUPTI's own thread while Python reads them on its thread: the lock guards
 * everything below it. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static kernel_record *records;
static size_t n_records, cap_records;
static size_t dropped; /* by CUPTI (no buffer) or here (no memory): the times would be short */

static int registered, enabled;
static char error[512] = "no error";

static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error, sizeof error, fmt, ap);
    va_end(ap);
    return code;
}

/* A failed CUPTI call, named with CUPTI's reason. */
static int cupti_fail(const char *call, CUptiResult r)
{
    const char *why = NULL;
    if (cuptiGetResultString(r, &why) != CUPTI_SUCCESS || !why)
        why = "unknown CUPTI result";
    /* CUPTI says only "unknown" when there is no driver to talk to: say that plainly */
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (driver)
        dlclose(driver);
    return fail(-1, "%s failed: %s (%d)%s", call, why, (int)r,
                driver ? "" : "; no CUDA driver is loaded in this process (no GPU here?)");
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    /* CUPTI needs its buffers 8-byte aligned; a NULL buffer makes it drop records, counted below */
    *buffer = aligned_alloc(8, BUF_BYTES);
    *size = *buffer ? BUF_BYTES : 0;
    *max_records = 0;
}

/* With the lock held. */
static void add(const char *name, uint64_t start, uint64_t end)
{
    if (n_records == cap_records) {
        size_t cap = cap_records ? 2 * cap_records : 1024;
        kernel_record *grown = realloc(records, cap * sizeof *grown);
        if (!grown) {
            dropped++;
            return;
        }
        records = grown;
        cap_records = cap;
    }
    /* CUPTI owns the name and may reuse it once the buffer is gone */
    char *copy = strdup(name ? name : "(unnamed kernel)");
    if (!copy) {
        dropped++;
        return;
    }
    records[n_records++] = (kernel_record){copy, start, end};
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)size;
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&lock);
    while (valid && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
            rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        /* CUDA 13's CUPTI writes version 10 of the kernel record for both kinds */
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        add(k->name, k->start, k->end);
    }
    size_t lost = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &lost) == CUPTI_SUCCESS)
        dropped += lost;
    pthread_mutex_unlock(&lock);
    free(buffer);
}

KT_API const char *kt_error(void)
{
    return error;
}

KT_API void kt_clear(void)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_records; i++)
        free(records[i].name);
    n_records = 0;
    dropped = 0;
    pthread_mutex_unlock(&lock);
}

KT_API int kt_start(void)
{
    if (enabled)
        return fail(-2, "kt_start: already recording (call kt_stop first)");
    CUptiResult r;
    /* once per process: CUPTI keeps the callbacks across enable and disable */
    if (!registered) {
        r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
        if (r != CUPTI_SUCCESS)
            return cupti_fail("cuptiActivityRegisterCallbacks", r);
        registered = 1;
    }
    r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r != CUPTI_SUCCESS)
        return cupti_fail("cuptiActivityEnable(CONCURRENT_KERNEL)", r);
    enabled = 1;
    return 0;
}

/* The records of every kernel that has finished so far, delivered; their count, or -1 when some
 * were lost (a sum over a call's kernels would then be too short to report). */
static int collect(void)
{
    CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (r != CUPTI_SUCCESS)
        return cupti_fail("cuptiActivityFlushAll", r);
    pthread_mutex_lock(&lock);
    size_t n = n_records, lost = dropped;
    pthread_mutex_unlock(&lock);
    if (lost)
        return fail(-1, "%zu kernel records were dropped (%zu kept)", lost, n);
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

KT_API int kt_flush(void)
{
    if (!enabled)
        return fail(-2, "kt_flush: not recording (call kt_start first)");
    return collect();
}

KT_API int kt_stop(void)
{
    if (!enabled)
        return fail(-2, "kt_stop: not recording (call kt_start first)");
    int n = collect();
    /* off again, since recording slows every launch of the process's other measurements */
    CUptiResult r = cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    enabled = 0;
    if (r != CUPTI_SUCCESS && n >= 0)
        return cupti_fail("cuptiActivityDisable(CONCURRENT_KERNEL)", r);
    return n;
}

KT_API int kt_get(int i, const char **name, unsigned long long *start_ns,
                  unsigned long long *end_ns)
{
    pthread_mutex_lock(&lock);
    int ok = i >= 0 && (size_t)i < n_records;
    if (ok) {
        if (name)
            *name = records[i].name;
        if (start_ns)
            *start_ns = records[i].start;
        if (end_ns)
            *end_ns = records[i].end;
    }
    pthread_mutex_unlock(&lock);
    return ok ? 0 : fail(-3, "kt_get: no record %d", i);
}
