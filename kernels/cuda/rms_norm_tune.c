/* rms_norm_tune.c: the cache of tuned RMSNorm variants, per GPU name and shape class (see
 * rms_norm_tune.h). Plain C11 atomics, so that kernel calls read it without a lock and CPU-only
 * builds test it. */
#include "kernels/cuda/rms_norm_tune.h"

#include <stdatomic.h>
#include <string.h>

#include "baton/baton.h"
#include "core/core.h"

typedef struct tune_slot {
    atomic_int ready; /* 1 once key and v are written */
    kcuda_rms_tune_key key;
    kcuda_rms_variant v;
} tune_slot;

static tune_slot slots[KCUDA_RMS_TUNE_SLOTS];
static atomic_int claimed; /* slots handed out; may pass KCUDA_RMS_TUNE_SLOTS when full */

static int ilog2(int64_t v)
{
    int r = 0;
    while (v > 1) {
        v >>= 1;
        r++;
    }
    return r;
}

void baton__kcuda_rms_tune_key_make(kcuda_rms_tune_key *k, const char *device, int bwd,
                                    const baton_rms_norm_desc *d, const kcuda_rms_layout *L)
{
    memset(k, 0, sizeof *k);
    if (device)
        strncpy(k->device, device, sizeof k->device - 1);
    k->bwd = bwd ? 1 : 0;
    k->x_dtype = d->x_dtype;
    k->w_dtype = d->w_dtype;
    k->mode = L->mode;
    k->vec = L->vec;
    k->n1_log2 = ilog2(d->n1);
    k->p_log2 = bwd ? ilog2(d->part_grad_size) : 0;
    k->n2 = d->n2;
}

int baton__kcuda_rms_tune_find(const kcuda_rms_tune_key *k, kcuda_rms_variant *v)
{
    int n = atomic_load_explicit(&claimed, memory_order_acquire);
    if (n > KCUDA_RMS_TUNE_SLOTS)
        n = KCUDA_RMS_TUNE_SLOTS;
    for (int i = 0; i < n; i++) {
        if (!atomic_load_explicit(&slots[i].ready, memory_order_acquire))
            continue;
        if (memcmp(&slots[i].key, k, sizeof *k) == 0) {
            *v = slots[i].v;
            return 1;
        }
    }
    return 0;
}

int baton__kcuda_rms_tune_store(const kcuda_rms_tune_key *k, const kcuda_rms_variant *v)
{
    kcuda_rms_variant have;
    if (baton__kcuda_rms_tune_find(k, &have))
        return 0;
    const int i = atomic_fetch_add_explicit(&claimed, 1, memory_order_acq_rel);
    if (i >= KCUDA_RMS_TUNE_SLOTS)
        return BATON_ENOMEM;
    slots[i].key = *k;
    slots[i].v = *v;
    atomic_store_explicit(&slots[i].ready, 1, memory_order_release);
    return 0;
}

void baton__kcuda_rms_tune_reset(void)
{
    const int n = atomic_load(&claimed);
    for (int i = 0; i < n && i < KCUDA_RMS_TUNE_SLOTS; i++)
        atomic_store(&slots[i].ready, 0);
    atomic_store(&claimed, 0);
}

int baton__kcuda_rms_tune_empty(void)
{
    return atomic_load_explicit(&claimed, memory_order_acquire) == 0;
}

/* A built-in pick: a shape class, as the cache keys it, and its variant. The keys are static, so
 * their padding is zero, as baton__kcuda_rms_tune_key_make leaves it: they compare with memcmp. */
typedef struct builtin_pick {
    kcuda_rms_tune_key key; /* device, bwd, x_dtype, w_dtype, mode, vec, n1_log2, p_log2, n2 */
    kcuda_rms_variant v;
} builtin_pick;

#define H100_SXM "NVIDIA H100 80GB HBM3"
#define H200     "NVIDIA H200"
#define BF16     BATON_DTYPE_BF16
#define F32      BATON_DTYPE_F32
#define ROWS     KCUDA_RMS_ROWS

/* `baton bench bench/kernels/rmsnorm_tune.json --gpu=cuda --modes=graph` on each GPU, the steps
 * whose tuning chose a variant over the default (bench/notebook/ has the runs), and the
 * H100's bf16 65536 x 4096 at part_grad 16 from bench_kernels' sweeps (too large for the plan; the
 * built-in picks' GPU test checks its bits like the others'). The forward
 * at 4096 x 4096 takes a row a block with w in shared memory; the backwards hold other rows, some
 * with a round of rows asked into L2. Classes where the default measured fastest are left out. */
static const builtin_pick builtin[] = {
    /* bf16 4096 x 4096 forward: 25.8 against 26.3 us (H100), 19.8 against 20.6 (H200) */
    {{H100_SXM, 0, BF16, BF16, ROWS, 8, 12, 0, 4096}, {KCUDA_RMS_VK_ROW, 0, 0}},
    {{H200, 0, BF16, BF16, ROWS, 8, 12, 0, 4096}, {KCUDA_RMS_VK_ROW, 0, 0}},
    /* H100 backward, bf16: 16384 x 8192 at part_grad 256 holds 2 rows (290.4 against 294.3 us),
     * at 16 holds 3 (288.4 against 292.1); 32768 x 4096 at 256 holds 6 (290.3 against 299.2), at
     * 16 holds 2 (288.0 against 309.8); 65536 x 4096 at 16 holds 2 (568.7 against 605.0,
     * bench_kernels) */
    {{H100_SXM, 1, BF16, BF16, ROWS, 8, 14, 8, 8192}, {0, 2, 0}},
    {{H100_SXM, 1, BF16, BF16, ROWS, 8, 14, 4, 8192}, {0, 3, 0}},
    {{H100_SXM, 1, BF16, BF16, ROWS, 8, 15, 8, 4096}, {0, 6, 0}},
    {{H100_SXM, 1, BF16, BF16, ROWS, 8, 15, 4, 4096}, {0, 2, 0}},
    {{H100_SXM, 1, BF16, BF16, ROWS, 8, 16, 4, 4096}, {0, 2, 0}},
    /* H200 backward: bf16 32768 x 4096 at part_grad 256 holds 2 rows (213.0 against 220.3 us);
     * bf16 16384 x 8192 at 16 asks a round into L2 (222.7 against 235.7); f32 32768 x 4096 at 16
     * (the default holds 3 rows) asks a round into L2 (398.7 against 424.7); f32 4096 x 4096 at
     * 16 holds 4 rows (60.1 against 62.6, bench_kernels --sweep) */
    {{H200, 1, BF16, BF16, ROWS, 8, 15, 8, 4096}, {0, 2, 0}},
    {{H200, 1, BF16, BF16, ROWS, 8, 14, 4, 8192}, {0, 0, 1}},
    {{H200, 1, F32, F32, ROWS, 4, 15, 4, 4096}, {0, 0, 1}},
    {{H200, 1, F32, F32, ROWS, 4, 12, 4, 4096}, {0, 4, 0}},
};

int baton__kcuda_rms_tune_builtin_count(void)
{
    return (int)(sizeof builtin / sizeof builtin[0]);
}

void baton__kcuda_rms_tune_builtin_at(int i, kcuda_rms_tune_key *k, kcuda_rms_variant *v)
{
    memcpy(k, &builtin[i].key, sizeof *k); /* the padding too: keys compare with memcmp */
    *v = builtin[i].v;
}

int baton__kcuda_rms_tune_builtin(const kcuda_rms_tune_key *k, kcuda_rms_variant *v)
{
    for (int i = 0; i < baton__kcuda_rms_tune_builtin_count(); i++)
        if (memcmp(&builtin[i].key, k, sizeof *k) == 0) {
            *v = builtin[i].v;
            return 1;
        }
    return 0;
}

int baton__kcuda_rms_autotune_from_env(void)
{
    static int cache = ENV_UNREAD;
    return baton__env_flag("BATON_NO_AUTOTUNE", &cache) != 1;
}

void baton__kcuda_rms_apply_tuned(const char *device, int bwd, const baton_rms_norm_desc *d,
                                  const kcuda_rms_device *dev, kcuda_rms_layout *L)
{
    kcuda_rms_tune_key k;
    kcuda_rms_variant v;
    baton__kcuda_rms_tune_key_make(&k, device, bwd, d, L);
    if (!baton__kcuda_rms_tune_find(&k, &v) && !baton__kcuda_rms_tune_builtin(&k, &v))
        return;
    if (kcuda_rms_variant_none(&v))
        return;
    kcuda_rms_layout t = *L;
    if (baton__kcuda_rms_apply_variant(d, bwd, dev, &v, &t, NULL, 0) == 0)
        *L = t;
}
