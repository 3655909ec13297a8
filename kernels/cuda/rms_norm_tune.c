/* rms_norm_tune.c: the cache of tuned RMSNorm variants, per GPU name and shape class (see
 * rms_norm_tune.h). Plain C11 atomics, so that kernel calls read it without a lock and CPU-only
 * builds test it. */
#include "kernels/cuda/rms_norm_tune.h"

#include <stdatomic.h>
#include <string.h>

#include "baton/baton.h"

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

void kcuda_rms_tune_key_make(kcuda_rms_tune_key *k, const char *device, int bwd,
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

int kcuda_rms_tune_find(const kcuda_rms_tune_key *k, kcuda_rms_variant *v)
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

int kcuda_rms_tune_store(const kcuda_rms_tune_key *k, const kcuda_rms_variant *v)
{
    kcuda_rms_variant have;
    if (kcuda_rms_tune_find(k, &have))
        return 0;
    const int i = atomic_fetch_add_explicit(&claimed, 1, memory_order_acq_rel);
    if (i >= KCUDA_RMS_TUNE_SLOTS)
        return BATON_ENOMEM;
    slots[i].key = *k;
    slots[i].v = *v;
    atomic_store_explicit(&slots[i].ready, 1, memory_order_release);
    return 0;
}

void kcuda_rms_tune_reset(void)
{
    const int n = atomic_load(&claimed);
    for (int i = 0; i < n && i < KCUDA_RMS_TUNE_SLOTS; i++)
        atomic_store(&slots[i].ready, 0);
    atomic_store(&claimed, 0);
}

int kcuda_rms_tune_empty(void)
{
    return atomic_load_explicit(&claimed, memory_order_acquire) == 0;
}

void kcuda_rms_apply_tuned(const char *device, int bwd, const baton_rms_norm_desc *d,
                           const kcuda_rms_device *dev, kcuda_rms_layout *L)
{
    kcuda_rms_tune_key k;
    kcuda_rms_variant v;
    kcuda_rms_tune_key_make(&k, device, bwd, d, L);
    if (!kcuda_rms_tune_find(&k, &v) || kcuda_rms_variant_none(&v))
        return;
    kcuda_rms_layout t = *L;
    if (kcuda_rms_apply_variant(d, bwd, dev, &v, &t, NULL, 0) == 0)
        *L = t;
}
