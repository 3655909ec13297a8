/* decoder_errors.cu: the host side of the decoder files' error records (decoder_record.cuh). A
 * kernel that meets an index out of range clamps it and records it in its file's record; at the
 * next host wait baton__kcuda_decoder_error_take reads every file's record of the device and
 * reports the failing call of the lowest step (the first in plan order: a device's steps run in
 * that order on its stream). */
#include "kernels/cuda/decoder_common.cuh"

#include <mutex>

using kcuda::dec::DecRecordUnit;

/* The files whose kernels record (DEC_RECORD_UNIT at the end of each). */
extern "C" const DecRecordUnit baton__dec_record_embedding, baton__dec_record_rope,
    baton__dec_record_kv_cache, baton__dec_record_attention, baton__dec_record_prefill;

static const DecRecordUnit *const g_units[] = {
    &baton__dec_record_embedding, &baton__dec_record_rope,    &baton__dec_record_kv_cache,
    &baton__dec_record_attention, &baton__dec_record_prefill,
};
#define N_UNITS ((int)(sizeof g_units / sizeof g_units[0]))

/* Per device: 0 no host copy yet, 1 the host copies are in use, 2 none could be made (every check
 * copies from the device). */
static std::atomic<int> g_mirror_state[KCUDA_MAX_DEVICES];
/* Per device: the host copies, 4 words a unit in g_units' order. */
static unsigned long long *g_mirror[KCUDA_MAX_DEVICES];
static std::mutex g_mirror_lock;

/* Gives `device` (current) the host copies of its records. Once per device and process, after a
 * run's wait: kernels launched before a record's copy was set write only the device record, so the
 * device is synchronised once, and the caller's check that follows still reads the device. */
static void mirror_setup(int device)
{
    std::lock_guard<std::mutex> hold(g_mirror_lock);
    if (g_mirror_state[device].load(std::memory_order_acquire) != 0)
        return;
    const size_t bytes = 4 * N_UNITS * sizeof(unsigned long long);
    void *h = NULL, *dp = NULL;
    int state = 2;
    if (cudaHostAlloc(&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess) {
        memset(h, 0, bytes);
        bool ok = cudaHostGetDevicePointer(&dp, h, 0) == cudaSuccess;
        int set = 0;
        for (; ok && set < N_UNITS; set++)
            ok = g_units[set]->mirror((unsigned long long *)dp + 4 * set) == cudaSuccess;
        if (ok && cudaDeviceSynchronize() == cudaSuccess) {
            g_mirror[device] = (unsigned long long *)h;
            state = 1;
        } else {
            /* The units already pointed at h are pointed back at nothing before h goes; if one
             * cannot be, h stays (a kernel may still write it). */
            bool back = true;
            for (int u = 0; u < set; u++)
                back = g_units[u]->mirror(NULL) == cudaSuccess && back;
            if (back && cudaDeviceSynchronize() == cudaSuccess)
                cudaFreeHost(h);
        }
    }
    (void)cudaGetLastError();
    g_mirror_state[device].store(state, std::memory_order_release);
}

/* Whether no host copy of `device` holds an error (false: look at the devices' records). */
static bool mirror_clear(int device)
{
    if (g_mirror_state[device].load(std::memory_order_acquire) != 1)
        return false;
    const volatile unsigned long long *h = g_mirror[device];
    for (int u = 0; u < N_UNITS; u++)
        if (h[4 * u])
            return false;
    return true;
}

extern "C" int baton__kcuda_decoder_error_take(int device, int *step_out, char *msg, size_t len)
{
    if (step_out)
        *step_out = -1;
    const bool known = device >= 0 && device < KCUDA_MAX_DEVICES;
    if (known && mirror_clear(device))
        return 0; /* the common case: no CUDA call */
    int prev = 0;
    if (cudaGetDevice(&prev) != cudaSuccess)
        return baton__reason_set(msg, len, BATON_ECUDA, "cudaGetDevice failed");
    if (device != prev && cudaSetDevice(device) != cudaSuccess)
        return baton__reason_set(msg, len, BATON_ECUDA, "cudaSetDevice(%d) failed", device);
    if (known && g_mirror_state[device].load(std::memory_order_acquire) == 0)
        mirror_setup(device);
    /* Every unit's record is read and cleared; the lowest step's is reported. */
    unsigned long long rec[4] = {0, 0, 0, 0};
    cudaError_t e = cudaSuccess;
    const char *failed = NULL;
    for (int u = 0; u < N_UNITS && e == cudaSuccess; u++) {
        unsigned long long r[4] = {0, 0, 0, 0};
        e = g_units[u]->take(r);
        if (e != cudaSuccess) {
            failed = g_units[u]->name;
            break;
        }
        if (r[0] && (!rec[0] || (r[0] & 0xffffffffu) < (rec[0] & 0xffffffffu)))
            memcpy(rec, r, sizeof rec);
        if (r[0] && known && g_mirror_state[device].load(std::memory_order_acquire) == 1)
            memset((void *)(g_mirror[device] + 4 * u), 0, 4 * sizeof(unsigned long long));
    }
    if (device != prev)
        cudaSetDevice(prev);
    if (e != cudaSuccess)
        return baton__reason_set(msg, len, BATON_ECUDA,
                                 "reading the decoder kernels' error record (%s): %s", failed,
                                 cudaGetErrorString(e));
    if (!rec[0])
        return 0;
    const int op = (int)(rec[0] >> 32), step = (int)(rec[0] & 0xffffffffu) - 1;
    if (step_out)
        *step_out = step;
    const char *what = op == DEC_EMBEDDING ? "ids" : "positions";
    const char *range = op == DEC_EMBEDDING   ? "the table's rows"
                        : op == DEC_ATTENTION ? "the caches' rows"
                                              : "the cache's rows";
    return baton__reason_set(
        msg, len, BATON_EKERNEL,
        "%s at step #%d on cuda:%d: %s[%lld] = %lld is outside [0, %lld) (%s; the "
        "access was clamped and the result is not valid)",
        baton__dec_op_name(op), step, device, what, (long long)rec[1], (long long)rec[2],
        (long long)rec[3], range);
}
