/* plan.c: the life and the read-only face of a loaded plan: baton_plan_free, the accessors of
 * baton.h, the name indexes the loader builds (so lookups stay O(1) on 10,000-step plans) and the
 * "did you mean" helper every plan message uses. */
#include <ctype.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "plan/plan_internal.h"
#include "targets/registry.h"

/* ---- name indexes ------------------------------------------------------------------------ */

/* SipHash-1-3 of a name under the plan's random key. A plan file chooses its names, and with a
 * fixed hash (FNV-1a before) names that share a slot are easy to make, which turned every lookup
 * into a scan of all names: 16,384 such names took 2.5 s to load, a million would take hours
 * (issue 9). With a secret key per plan no name set can be made to collide. */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

static uint64_t name_hash(const uint64_t key[2], const char *s)
{
    size_t len = strlen(s);
    uint64_t v0 = key[0] ^ 0x736f6d6570736575ull, v1 = key[1] ^ 0x646f72616e646f6dull;
    uint64_t v2 = key[0] ^ 0x6c7967656e657261ull, v3 = key[1] ^ 0x7465646279746573ull;
    const unsigned char *p = (const unsigned char *)s;
    size_t whole = len & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = 0;
        for (int k = 7; k >= 0; k--) /* little-endian, whatever the machine */
            m = m << 8 | p[i + (size_t)k];
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    for (size_t k = len - whole; k > 0; k--)
        b |= (uint64_t)p[whole + k - 1] << (8 * (k - 1));
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* A key no plan file can guess: the kernel's random bytes, else the clock and an address. */
static void new_index_key(baton_plan *plan)
{
    if (getrandom(plan->index_key, sizeof plan->index_key, GRND_NONBLOCK) ==
        (ssize_t)sizeof plan->index_key)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    plan->index_key[0] = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
    plan->index_key[1] = (uint64_t)(uintptr_t)plan * 0xBF58476D1CE4E5B9ull;
}

int baton__plan_index_create(baton_plan *plan)
{
    int n = plan->n_tensors > plan->n_steps ? plan->n_tensors : plan->n_steps;
    unsigned cap = 16;
    while (cap < 2u * (unsigned)n)
        cap <<= 1;
    free(plan->tensor_index);
    free(plan->step_index);
    plan->tensor_index = malloc(cap * sizeof *plan->tensor_index);
    plan->step_index = malloc(cap * sizeof *plan->step_index);
    if (!plan->tensor_index || !plan->step_index)
        return BATON_ENOMEM;
    memset(plan->tensor_index, 0xff, cap * sizeof *plan->tensor_index);
    memset(plan->step_index, 0xff, cap * sizeof *plan->step_index);
    plan->index_mask = cap - 1;
    new_index_key(plan);
    return 0;
}

static const char *tensor_name(const baton_plan *plan, int i)
{
    return plan->tensors[i].name;
}

static const char *step_name(const baton_plan *plan, int i)
{
    return plan->steps[i].name;
}

/* Finds name's slot: the slot that holds it, or the empty slot where it would go; *tag receives
 * the bits of its hash that the slot keeps. */
static unsigned probe(const baton_plan *plan, const plan_name_slot *table,
                      const char *(*name_of)(const baton_plan *, int), const char *name,
                      uint32_t *tag)
{
    uint64_t h = name_hash(plan->index_key, name);
    unsigned i = (unsigned)h & plan->index_mask;
    *tag = (uint32_t)(h >> 32);
    while (table[i].item >= 0 &&
           (table[i].tag != *tag || strcmp(name_of(plan, table[i].item), name) != 0))
        i = (i + 1) & plan->index_mask;
    return i;
}

static int index_add(baton_plan *plan, plan_name_slot *table,
                     const char *(*name_of)(const baton_plan *, int), int item)
{
    uint32_t tag;
    unsigned slot = probe(plan, table, name_of, name_of(plan, item), &tag);
    if (table[slot].item >= 0)
        return table[slot].item;
    table[slot] = (plan_name_slot){item, tag};
    return -1;
}

int baton__plan_index_add_tensor(baton_plan *plan, int i)
{
    return index_add(plan, plan->tensor_index, tensor_name, i);
}

int baton__plan_index_add_step(baton_plan *plan, int i)
{
    return index_add(plan, plan->step_index, step_name, i);
}

int baton__plan_find_tensor(const baton_plan *plan, const char *name)
{
    if (!plan || !name || !plan->tensor_index)
        return -1;
    uint32_t tag;
    return plan->tensor_index[probe(plan, plan->tensor_index, tensor_name, name, &tag)].item;
}

int baton__plan_find_step(const baton_plan *plan, const char *name)
{
    if (!plan || !name || !plan->step_index)
        return -1;
    uint32_t tag;
    return plan->step_index[probe(plan, plan->step_index, step_name, name, &tag)].item;
}

/* ---- the pool ------------------------------------------------------------------------------ */

typedef struct plan_pool_block {
    struct plan_pool_block *prev;
    max_align_t data[]; /* the blocks' bytes */
} plan_pool_block;

#define POOL_FIRST_BLOCK ((size_t)16 << 10)
#define POOL_MAX_BLOCK   ((size_t)4 << 20)

const char baton__plan_no_descriptor[1];

void *baton__plan_alloc(baton_plan *plan, size_t size)
{
    size = (size + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    if (size > plan->pool_left) {
        /* blocks grow with the plan; a request larger than a block gets a block of its own */
        size_t cap =
            plan->pool ? 2 * (size_t)(plan->pool_next - (char *)plan->pool->data) + plan->pool_left
                       : POOL_FIRST_BLOCK;
        if (cap > POOL_MAX_BLOCK)
            cap = POOL_MAX_BLOCK;
        if (cap < size)
            cap = size;
        plan_pool_block *b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->prev = plan->pool;
        plan->pool = b;
        plan->pool_next = (char *)b->data;
        plan->pool_left = cap;
    }
    void *p = plan->pool_next;
    plan->pool_next += size;
    plan->pool_left -= size;
    return p;
}

char *baton__plan_strdup(baton_plan *plan, const char *s, size_t len)
{
    char *d = baton__plan_alloc(plan, len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = 0;
    }
    return d;
}

/* ---- suggestions ------------------------------------------------------------------------- */

#define SUGGEST_MAX_LEN 64

void baton__plan_suggest_init(plan_suggest *s, const char *word)
{
    s->word = word;
    s->best = NULL;
    s->best_dist = 1 << 30;
}

/* Optimal-string-alignment distance, case-insensitive; stops early above `limit`. */
static int edit_distance(const char *a, const char *b, int limit)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > SUGGEST_MAX_LEN || lb > SUGGEST_MAX_LEN || abs(la - lb) > limit)
        return limit + 1;
    int rows[3][SUGGEST_MAX_LEN + 1];
    int *pp = rows[0], *p = rows[1], *c = rows[2];
    for (int j = 0; j <= lb; j++)
        p[j] = j;
    for (int i = 1; i <= la; i++) {
        c[0] = i;
        int row_min = c[0];
        for (int j = 1; j <= lb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int cost = ca == cb ? 0 : 1;
            int v = p[j - 1] + cost;
            if (p[j] + 1 < v)
                v = p[j] + 1;
            if (c[j - 1] + 1 < v)
                v = c[j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && pp[j - 2] + 1 < v)
                v = pp[j - 2] + 1;
            c[j] = v;
            if (v < row_min)
                row_min = v;
        }
        if (row_min > limit)
            return limit + 1;
        int *t = pp;
        pp = p;
        p = c;
        c = t;
    }
    return p[lb];
}

void baton__plan_suggest_try(plan_suggest *s, const char *candidate)
{
    if (!s->word || !candidate || strcmp(s->word, candidate) == 0)
        return;
    int len = (int)strlen(s->word);
    int limit = len <= 3 ? 1 : len <= 6 ? 2 : 3;
    int d = edit_distance(s->word, candidate, limit);
    /* A distance as long as the word means nothing in common (x vs y). */
    if (d > limit || (d >= len && d > 0))
        return;
    if (d < s->best_dist) {
        s->best_dist = d;
        s->best = candidate;
    }
}

const char *baton__plan_suggest_best(const plan_suggest *s)
{
    return s->best;
}

/* ---- free and accessors ------------------------------------------------------------------ */

const baton_plan *baton__plan_retain(const baton_plan *plan)
{
    if (plan) /* the count is the one mutable part of a plan that runtimes share */
        atomic_fetch_add_explicit(&((baton_plan *)plan)->refs, 1, memory_order_relaxed);
    return plan;
}

void baton_plan_free(baton_plan *plan)
{
    if (!plan || atomic_fetch_sub_explicit(&plan->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (int i = 0; i < plan->n_tensors && plan->tensors; i++) {
        plan_tensor *t = &plan->tensors[i];
        free(t->init.path);
        free(t->init.values);
        free(t->init.key);
        baton__st_release(t->init.st);
    }
    free(plan->tensors);
    free(plan->dims);  /* their names are in the pool */
    free(plan->steps); /* what the steps point to is in the pool */
    while (plan->pool) {
        plan_pool_block *prev = plan->pool->prev;
        free(plan->pool);
        plan->pool = prev;
    }
    free(plan->segments);
    free(plan->boundaries);
    free(plan->transfers);
    for (int d = 0; d < PLAN_MAX_DEVICES; d++) {
        free(plan->memory[d].offset);
        free(plan->memory[d].live_begin);
        free(plan->memory[d].live_end);
    }
    for (int m = 0; m < 3; m++)
        free(plan->sync[m]);
    free(plan->tensor_index);
    free(plan->step_index);
    free(plan->source);
    free(plan->base_dir);
    free(plan->name);
    baton_registry_destroy((baton_registry *)plan->registry); /* drops the plan's reference */
    free(plan);
}

const char *baton_plan_name(const baton_plan *plan)
{
    return plan ? plan->name : NULL;
}

int baton_plan_tensor_count(const baton_plan *plan)
{
    return plan ? plan->n_tensors : 0;
}

int baton_plan_step_count(const baton_plan *plan)
{
    return plan ? plan->n_steps : 0;
}

int baton_plan_tensor_index(const baton_plan *plan, const char *name)
{
    if (!plan || !name)
        return BATON_EINVAL;
    int i = baton__plan_find_tensor(plan, name);
    return i < 0 ? BATON_ENOENT : i;
}

int baton_plan_step_index(const baton_plan *plan, const char *name)
{
    if (!plan || !name)
        return BATON_EINVAL;
    int i = baton__plan_find_step(plan, name);
    return i < 0 ? BATON_ENOENT : i;
}

int baton_plan_tensor_info(const baton_plan *plan, int i, baton_tensor_info *out)
{
    if (!plan || !out)
        return BATON_EINVAL;
    if (i < 0 || i >= plan->n_tensors)
        return BATON_ENOENT;
    const plan_tensor *t = &plan->tensors[i];
    out->name = t->name;
    out->desc = t->desc;
    out->role = t->role;
    out->nbytes = t->nbytes;
    return 0;
}

int baton_plan_step_info(const baton_plan *plan, int i, baton_step_info *out)
{
    if (!plan || !out)
        return BATON_EINVAL;
    if (i < 0 || i >= plan->n_steps)
        return BATON_ENOENT;
    const plan_step *s = &plan->steps[i];
    out->name = s->name;
    out->target = s->target_name;
    out->kind = s->kind;
    out->device = s->device;
    out->segment = s->segment;
    out->next_device = s->next_device;
    out->next_kind = s->next_kind;
    return 0;
}

int baton__plan_error(baton_error *err, int code, const baton_plan *plan, plan_pos pos,
                      const char *fmt, ...)
{
    char prefix[600];
    const char *src = plan && plan->source ? plan->source : "<plan>";
    if (pos.line > 0)
        snprintf(prefix, sizeof prefix, "%s:%d:%d: ", src, pos.line, pos.column);
    else
        snprintf(prefix, sizeof prefix, "%s: ", src);
    va_list ap;
    va_start(ap, fmt);
    baton__err_vset(err, code, prefix, fmt, ap);
    va_end(ap);
    return code;
}

int baton_plan_arena_count(const baton_plan *plan)
{
    return plan ? plan->n_devices : 0;
}

int baton_plan_arena_info(const baton_plan *plan, int i, baton_arena *out)
{
    if (!plan || !out || i < 0 || i >= plan->n_devices)
        return BATON_EINVAL;
    out->device = plan->memory[i].device;
    out->data = NULL;
    out->nbytes = plan->memory[i].arena_bytes;
    return 0;
}

int baton_plan_dim_count(const baton_plan *plan)
{
    return plan ? plan->n_dims : 0;
}

int baton_plan_dim_info(const baton_plan *plan, int i, const char **name, int64_t *min,
                        int64_t *max)
{
    if (!plan || i < 0 || i >= plan->n_dims)
        return BATON_EINVAL;
    if (name)
        *name = plan->dims[i].name;
    if (min)
        *min = plan->dims[i].min;
    if (max)
        *max = plan->dims[i].max;
    return 0;
}

int baton_plan_tensor_dim(const baton_plan *plan, int tensor, int axis)
{
    if (!plan || tensor < 0 || tensor >= plan->n_tensors || axis < 0 ||
        axis >= plan->tensors[tensor].desc.rank)
        return -1;
    return plan->tensors[tensor].dim[axis];
}
