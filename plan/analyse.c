/* analyse.c: the ahead-of-time analysis of a validated plan. It splits the steps into segments
 * (maximal runs on one device), places the transfers a cross-device read needs at the boundary
 * into the reading segment, plans one arena per device by liveness so that dead tensors' space is
 * reused, and lists where each sync mode makes the host wait. The scheduler executes exactly this.
 *
 * Time is measured in positions: step i runs at 2i+1, the boundary into a segment whose first
 * step is f at 2f, the end of the run at 2n. A slot (a tensor's copy on one device) is live on the
 * closed interval [begin, end]; two slots may share bytes only if their intervals are disjoint. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

#define ARENA_ALIGN 256

static size_t align_up(size_t v)
{
    return (v + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

int baton__plan_memory_index(const baton_plan *plan, baton_device dev)
{
    for (int i = 0; i < plan->n_devices; i++)
        if (device_eq(plan->memory[i].device, dev))
            return i;
    return -1;
}

int baton__plan_segment_runs_on(const baton_plan *plan, int s, baton_device dev)
{
    int nd;
    const baton_device *devs = step_devices(&plan->steps[plan->segments[s].first_step], &nd);
    for (int g = 0; g < nd; g++)
        if (device_eq(devs[g], dev))
            return 1;
    return 0;
}

/* ---- segments, next steps, devices -------------------------------------------------------- */

static int build_segments(baton_plan *plan, baton_error *err)
{
    int n = plan->n_steps;
    plan->segments = calloc((size_t)(n ? n : 1), sizeof *plan->segments);
    if (!plan->segments)
        return baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
    int ns = 0;
    for (int i = 0; i < n; i++) {
        plan_step *s = &plan->steps[i];
        int coll = s->kind == BATON_TARGET_COLLECTIVE;
        if (ns == 0 || coll || plan->segments[ns - 1].collective ||
            !device_eq(plan->segments[ns - 1].device, s->device)) {
            plan->segments[ns].device = s->device;
            plan->segments[ns].first_step = i;
            plan->segments[ns].collective = coll;
            ns++;
        }
        plan->segments[ns - 1].last_step = i;
        s->segment = ns - 1;
        if (i + 1 < n) {
            s->next_device = plan->steps[i + 1].device;
            s->next_kind = plan->steps[i + 1].kind;
        } else {
            s->next_device = (baton_device){BATON_DEVICE_NONE, 0};
            s->next_kind = BATON_TARGET_NONE;
        }
    }
    plan->n_segments = ns;

    /* The CPU is always memory[0]: inputs are bound and outputs read there. */
    plan->n_devices = 1;
    plan->memory[0].device = (baton_device){BATON_DEVICE_CPU, 0};
    for (int i = 0; i < n; i++) {
        const plan_step *s = &plan->steps[i];
        int nd;
        const baton_device *devs = step_devices(s, &nd);
        for (int g = 0; g < nd; g++) {
            baton_device d = devs[g];
            if (baton__plan_memory_index(plan, d) >= 0)
                continue;
            if (plan->n_devices == PLAN_MAX_DEVICES)
                return baton__plan_error(err, BATON_EPLAN, plan, s->pos,
                                         "step '%s': the plan uses more than %d devices", s->name,
                                         PLAN_MAX_DEVICES);
            plan->memory[plan->n_devices++].device = d;
        }
    }
    return 0;
}

/* ---- transfers and slot lifetimes --------------------------------------------------------- */

typedef struct slot {
    int tensor;
    int begin, end;
    size_t size;
    int constant; /* placed first, so that instances of a runtime can share them */
} slot;

typedef struct analysis_scratch {
    int nd, nt;
    int *begin; /* [nd * nt], -1 when the tensor has no copy on that device */
    int *end;
} analysis_scratch;

#define SLOT(sc, d, t) ((size_t)(d) * (size_t)(sc)->nt + (size_t)(t))

static int home_device(const baton_plan *plan, const plan_tensor *t)
{
    if (t->role == BATON_ROLE_STATE) /* its one device (validate.c), the host when unused */
        return t->state_device.kind == BATON_DEVICE_NONE
                   ? 0
                   : baton__plan_memory_index(plan, t->state_device);
    if (t->producer < 0)
        return 0; /* inputs live on the host */
    const plan_step *p = &plan->steps[t->producer];
    for (int k = 0; k < p->n_outputs && p->n_group; k++)
        if (&plan->tensors[p->outputs[k]] == t)
            return baton__plan_memory_index(plan, p->group[k]);
    return baton__plan_memory_index(plan, p->device);
}

static void touch(analysis_scratch *sc, int d, int t, int pos)
{
    size_t k = SLOT(sc, d, t);
    if (sc->begin[k] < 0 || pos < sc->begin[k])
        sc->begin[k] = pos;
    if (pos > sc->end[k])
        sc->end[k] = pos;
}

static int add_transfer(baton_plan *plan, int *cap, int tensor, int from, int to, int segment)
{
    if (plan->n_transfers == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        plan_transfer *nt = realloc(plan->transfers, (size_t)nc * sizeof *nt);
        if (!nt)
            return BATON_ENOMEM;
        plan->transfers = nt;
        *cap = nc;
    }
    plan->transfers[plan->n_transfers++] = (plan_transfer){
        .tensor = tensor,
        .from = plan->memory[from].device,
        .to = plan->memory[to].device,
        .segment = segment,
    };
    return 0;
}

static int cmp_transfer(const void *a, const void *b)
{
    const plan_transfer *x = a, *y = b;
    if (x->segment != y->segment)
        return x->segment < y->segment ? -1 : 1;
    return x->tensor < y->tensor ? -1 : x->tensor > y->tensor;
}

static int plan_lifetimes(baton_plan *plan, analysis_scratch *sc, baton_error *err)
{
    int n = plan->n_steps, END = 2 * n, cap = 0;
    /* first step on each device that reads each tensor, to place transfers */
    for (int i = 0; i < n; i++) {
        const plan_step *s = &plan->steps[i];
        for (int k = 0; k < s->n_outputs; k++)
            touch(sc, baton__plan_memory_index(plan, step_arg_device(s, k)), s->outputs[k],
                  2 * i + 1);
        for (int k = 0; k < s->n_inputs; k++) {
            int d = baton__plan_memory_index(plan, step_arg_device(s, k));
            int t = plan->tensors[s->inputs[k]].storage; /* a view reads its base's bytes */
            const plan_tensor *pt = &plan->tensors[t];
            size_t key = SLOT(sc, d, t);
            if (pt->role == BATON_ROLE_CONSTANT || pt->role == BATON_ROLE_STATE) {
                touch(sc, d, t, 0);
                touch(sc, d, t, END);
                continue;
            }
            int home = home_device(plan, pt);
            if (home != d && sc->begin[key] < 0) {
                /* first read on a device other than the tensor's home: a transfer at the
                 * boundary into this segment */
                int seg = s->segment;
                int at = 2 * plan->segments[seg].first_step;
                if (add_transfer(plan, &cap, t, home, d, seg))
                    return baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
                touch(sc, d, t, at);
                touch(sc, home, t, at);
                /* A host buffer that a GPU copies from asynchronously stays untouched until the
                 * run ends: with several GPUs no single wait orders the copy before reuse. So
                 * does a GPU's buffer that another GPU copies from: the reader waits for the
                 * writer, but nothing makes the writer's later work wait for the reader. */
                if (home == 0 || (d != 0 && plan->memory[d].device.kind == BATON_DEVICE_CUDA))
                    touch(sc, home, t, END);
            }
            touch(sc, d, t, 2 * i + 1);
        }
    }
    for (int t = 0; t < plan->n_tensors; t++) {
        const plan_tensor *pt = &plan->tensors[t];
        if (pt->role == BATON_ROLE_INPUT) {
            touch(sc, 0, t, 0);
            touch(sc, 0, t, END);
        } else if (pt->role == BATON_ROLE_STATE) {
            /* live for the whole run (and across runs: no other slot ever takes its bytes) */
            int home = home_device(plan, pt);
            touch(sc, home, t, 0);
            touch(sc, home, t, END);
        } else if (pt->role == BATON_ROLE_OUTPUT && pt->producer >= 0) {
            int home = home_device(plan, pt);
            touch(sc, home, t, END);
            if (home != 0) {
                if (sc->begin[SLOT(sc, 0, t)] < 0 &&
                    add_transfer(plan, &cap, t, home, 0, plan->n_segments))
                    return baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
                touch(sc, 0, t, END);
            }
        }
    }
    /* placed in step order, so usually sorted already: check before paying for a sort */
    int sorted = 1;
    for (int i = 1; i < plan->n_transfers && sorted; i++)
        sorted = cmp_transfer(&plan->transfers[i - 1], &plan->transfers[i]) <= 0;
    if (!sorted)
        qsort(plan->transfers, (size_t)plan->n_transfers, sizeof *plan->transfers, cmp_transfer);
    return 0;
}

/* ---- arena placement ---------------------------------------------------------------------- */

/* The free space of one arena below its top: maximal free ranges ("holes") in a treap ordered by
 * offset, where each node also knows the largest hole in its subtree. First fit (the lowest hole
 * that is large enough) and freeing with coalescing then cost O(log holes) instead of a scan of
 * every hole, which made plans that leave many unusable holes quadratic (issue 9). The placement is
 * the same as a sorted list of holes would give; priorities only shape the tree. */
typedef struct hole {
    size_t off, size;
    size_t max;    /* the largest size in this subtree */
    uint32_t prio; /* a heap on priorities keeps the tree balanced */
    int left, right;
} hole;

typedef struct freelist {
    hole *h;
    int n, cap; /* nodes made, room for */
    int root;   /* -1: no hole */
    int spare;  /* nodes to reuse, chained through .left */
    uint32_t rng;
    size_t top; /* arena high-water mark */
} freelist;

static size_t hmax(const freelist *fl, int t)
{
    return t < 0 ? 0 : fl->h[t].max;
}

static void pull(freelist *fl, int t)
{
    hole *x = &fl->h[t];
    size_t l = hmax(fl, x->left), r = hmax(fl, x->right), m = x->size;
    if (l > m)
        m = l;
    x->max = r > m ? r : m;
}

/* Joins two treaps, every offset in a below every offset in b. */
static int merge(freelist *fl, int a, int b)
{
    if (a < 0)
        return b;
    if (b < 0)
        return a;
    if (fl->h[a].prio > fl->h[b].prio) {
        fl->h[a].right = merge(fl, fl->h[a].right, b);
        pull(fl, a);
        return a;
    }
    fl->h[b].left = merge(fl, a, fl->h[b].left);
    pull(fl, b);
    return b;
}

/* Splits treap t into *a (offsets below off) and *b (the rest). */
static void split(freelist *fl, int t, size_t off, int *a, int *b)
{
    if (t < 0) {
        *a = *b = -1;
        return;
    }
    if (fl->h[t].off < off) {
        split(fl, fl->h[t].right, off, &fl->h[t].right, b);
        *a = t;
    } else {
        split(fl, fl->h[t].left, off, a, &fl->h[t].left);
        *b = t;
    }
    pull(fl, t);
}

/* Removes the hole at off (which exists) from treap t; returns the new root. */
static int erase(freelist *fl, int t, size_t off)
{
    hole *x = &fl->h[t];
    if (x->off == off) {
        int rest = merge(fl, x->left, x->right);
        x->left = fl->spare;
        fl->spare = t;
        return rest;
    }
    if (off < x->off)
        x->left = erase(fl, x->left, off);
    else
        x->right = erase(fl, x->right, off);
    pull(fl, t);
    return t;
}

/* Recomputes the maxima on the path to the hole at off, after its size (or its offset, within
 * its neighbours) changed. */
static void refresh(freelist *fl, int t, size_t off)
{
    if (fl->h[t].off != off)
        refresh(fl, off < fl->h[t].off ? fl->h[t].left : fl->h[t].right, off);
    pull(fl, t);
}

static int insert(freelist *fl, size_t off, size_t size)
{
    int k = fl->spare;
    if (k >= 0) {
        fl->spare = fl->h[k].left;
    } else {
        if (fl->n == fl->cap) {
            int nc = fl->cap ? fl->cap * 2 : 16;
            hole *nh = realloc(fl->h, (size_t)nc * sizeof *nh);
            if (!nh)
                return BATON_ENOMEM;
            fl->h = nh;
            fl->cap = nc;
        }
        k = fl->n++;
    }
    fl->rng ^= fl->rng << 13; /* xorshift32: fixed seed, so every run builds the same tree */
    fl->rng ^= fl->rng >> 17;
    fl->rng ^= fl->rng << 5;
    fl->h[k] =
        (hole){.off = off, .size = size, .max = size, .prio = fl->rng, .left = -1, .right = -1};
    int a, b;
    split(fl, fl->root, off, &a, &b);
    fl->root = merge(fl, merge(fl, a, k), b);
    return 0;
}

/* The hole with the largest offset below off (before = 1) or the smallest above it, or -1. */
static int neighbour(const freelist *fl, size_t off, int before)
{
    int best = -1;
    for (int t = fl->root; t >= 0;) {
        if (before ? fl->h[t].off < off : fl->h[t].off > off) {
            best = t;
            t = before ? fl->h[t].right : fl->h[t].left;
        } else {
            t = before ? fl->h[t].left : fl->h[t].right;
        }
    }
    return best;
}

/* First fit among the holes, else grow the arena (absorbing a hole that ends at the top). */
static size_t fl_alloc(freelist *fl, size_t size)
{
    int t = fl->root;
    if (hmax(fl, t) >= size) {
        /* the lowest hole that fits: left while the left subtree has one, else here, else right */
        for (;;) {
            if (hmax(fl, fl->h[t].left) >= size)
                t = fl->h[t].left;
            else if (fl->h[t].size >= size)
                break;
            else
                t = fl->h[t].right;
        }
        size_t off = fl->h[t].off;
        if (fl->h[t].size == size) {
            fl->root = erase(fl, fl->root, off);
        } else {
            fl->h[t].off += size;
            fl->h[t].size -= size;
            refresh(fl, fl->root, fl->h[t].off);
        }
        return off;
    }
    int last = neighbour(fl, SIZE_MAX, 1);
    if (last >= 0 && fl->h[last].off + fl->h[last].size == fl->top) {
        size_t off = fl->h[last].off;
        fl->top = off + size;
        fl->root = erase(fl, fl->root, off);
        return off;
    }
    size_t off = fl->top;
    fl->top += size;
    return off;
}

static int fl_free(freelist *fl, size_t off, size_t size)
{
    int prev = neighbour(fl, off, 1), next = neighbour(fl, off, 0);
    /* coalesce with neighbours */
    int merged_prev = prev >= 0 && fl->h[prev].off + fl->h[prev].size == off;
    int merged_next = next >= 0 && off + size == fl->h[next].off;
    if (merged_prev && merged_next) {
        size_t next_size = fl->h[next].size;
        fl->root = erase(fl, fl->root, fl->h[next].off);
        fl->h[prev].size += size + next_size;
        refresh(fl, fl->root, fl->h[prev].off);
    } else if (merged_prev) {
        fl->h[prev].size += size;
        refresh(fl, fl->root, fl->h[prev].off);
    } else if (merged_next) {
        fl->h[next].off = off;
        fl->h[next].size += size;
        refresh(fl, fl->root, off);
    } else {
        return insert(fl, off, size);
    }
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const slot *x = a, *y = b;
    if (x->constant != y->constant)
        return x->constant ? -1 : 1;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    /* larger first at the same moment: fewer holes */
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    return x->tensor - y->tensor;
}

/* Orders the slots (given in tensor order) by cmp_begin into out, and pointers to them by end
 * into by_end (ties in tensor order), by counting: positions run from 0 to npos - 1, so this is
 * linear, where two sorts cost O(n log n). Only slots that begin together need comparing. */
/* cmp_begin's first two keys as one number: constants first, then by begin */
static int slot_key(const slot *x)
{
    return x->constant ? 0 : x->begin + 1;
}

static int order_slots(const slot *in, int ns, int npos, slot *out, slot **by_end)
{
    int *at = calloc((size_t)npos + 2, sizeof *at);
    if (!at)
        return BATON_ENOMEM;
    for (int i = 0; i < ns; i++)
        at[slot_key(&in[i]) + 1]++;
    for (int p = 0; p <= npos; p++)
        at[p + 1] += at[p];
    for (int i = 0; i < ns; i++)
        out[at[slot_key(&in[i])]++] = in[i];
    for (int i = 0, j; i < ns; i = j) {
        for (j = i + 1; j < ns && slot_key(&out[j]) == slot_key(&out[i]); j++)
            ;
        if (j - i > 1)
            qsort(&out[i], (size_t)(j - i), sizeof *out, cmp_begin);
    }
    memset(at, 0, ((size_t)npos + 2) * sizeof *at);
    for (int i = 0; i < ns; i++)
        at[out[i].end + 1]++;
    for (int p = 0; p < npos; p++)
        at[p + 1] += at[p];
    for (int i = 0; i < ns; i++)
        by_end[at[out[i].end]++] = &out[i];
    free(at);
    return 0;
}

/* Places one device's slots in time order: at each position, slots whose life ended earlier go
 * back to the free list, then slots that begin there take the first hole that fits. */
static int place_device(baton_plan *plan, analysis_scratch *sc, int d, baton_error *err)
{
    plan_memory *m = &plan->memory[d];
    int nt = plan->n_tensors, ns = 0, rc = 0;
    slot *found = malloc((size_t)(nt ? nt : 1) * sizeof *found);
    slot *slots = malloc((size_t)(nt ? nt : 1) * sizeof *slots);
    slot **by_end = malloc((size_t)(nt ? nt : 1) * sizeof *by_end);
    freelist fl = {.root = -1, .spare = -1, .rng = 2463534242u};
    if (!found || !slots || !by_end) {
        rc = baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
        goto out;
    }
    for (int t = 0; t < nt; t++) {
        size_t k = SLOT(sc, d, t);
        m->offset[t] = -1;
        m->live_begin[t] = sc->begin[k];
        m->live_end[t] = sc->end[k];
        if (sc->begin[k] < 0)
            continue;
        size_t size = align_up(plan->tensors[t].nbytes ? plan->tensors[t].nbytes : 1);
        int constant = plan->tensors[t].role == BATON_ROLE_CONSTANT;
        if (constant && d == 0 && plan->tensors[t].init.in_place) {
            /* CPU steps read it where the file is mapped: no bytes of the arena */
            m->offset[t] = PLAN_OFFSET_MAPPED;
            continue;
        }
        found[ns++] = (slot){t, sc->begin[k], sc->end[k], size, constant};
        if (constant)
            m->const_bytes += size;
        m->naive_bytes += size;
    }
    if (order_slots(found, ns, 2 * plan->n_steps + 1, slots, by_end)) {
        rc = baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
        goto out;
    }
    int next_free = 0;
    for (int i = 0; i < ns; i++) {
        while (next_free < ns && by_end[next_free]->end < slots[i].begin) {
            slot *f = by_end[next_free++];
            if (m->offset[f->tensor] >= 0 && fl_free(&fl, (size_t)m->offset[f->tensor], f->size)) {
                rc = baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
                goto out;
            }
        }
        m->offset[slots[i].tensor] = (int64_t)fl_alloc(&fl, slots[i].size);
    }
    m->arena_bytes = fl.top;
    /* a view is its base's bytes: same offset, same life */
    for (int t = 0; t < nt; t++) {
        int r = plan->tensors[t].storage;
        if (r != t) {
            m->offset[t] = m->offset[r];
            m->live_begin[t] = m->live_begin[r];
            m->live_end[t] = m->live_end[r];
        }
    }
out:
    free(fl.h);
    free(found);
    free(slots);
    free(by_end);
    return rc;
}

/* ---- boundaries and sync points ----------------------------------------------------------- */

static int push_sync(baton_plan *plan, int mode, int *cap, int after, baton_device dev,
                     const char *why)
{
    if (plan->n_sync[mode] == cap[mode]) {
        int nc = cap[mode] ? cap[mode] * 2 : 16;
        plan_sync_point *np = realloc(plan->sync[mode], (size_t)nc * sizeof *np);
        if (!np)
            return BATON_ENOMEM;
        plan->sync[mode] = np;
        cap[mode] = nc;
    }
    plan->sync[mode][plan->n_sync[mode]++] = (plan_sync_point){after, dev, why};
    return 0;
}

static int build_boundaries_and_syncs(baton_plan *plan, baton_error *err)
{
    int ns = plan->n_segments, cap[3] = {0, 0, 0};
    plan->n_boundaries = ns > 0 ? ns - 1 : 0;
    plan->boundaries = calloc((size_t)(ns ? ns : 1), sizeof *plan->boundaries);
    if (!plan->boundaries)
        return baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
    int ti = 0;
    while (ti < plan->n_transfers && plan->transfers[ti].segment == 0)
        ti++;
    for (int b = 0; b < plan->n_boundaries; b++) {
        plan_boundary *pb = &plan->boundaries[b];
        pb->after_step = plan->segments[b].last_step;
        pb->from = plan->segments[b].device;
        pb->to = plan->segments[b + 1].device;
        pb->first_transfer = ti;
        while (ti < plan->n_transfers && plan->transfers[ti].segment == b + 1)
            ti++;
        pb->n_transfers = ti - pb->first_transfer;
        pb->host_wait = pb->from.kind == BATON_DEVICE_CUDA && pb->to.kind == BATON_DEVICE_CPU;
    }

    /* strict: after every GPU step (a collective: on each device of its group). */
    for (int i = 0; i < plan->n_steps; i++) {
        const plan_step *st = &plan->steps[i];
        int nd;
        const baton_device *devs = step_devices(st, &nd);
        for (int g = 0; g < nd; g++) {
            baton_device dev = devs[g];
            if (dev.kind == BATON_DEVICE_CUDA &&
                push_sync(plan, BATON_SYNC_STRICT, cap, i, dev, "step"))
                return baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
        }
    }
    /* strict, at the end: a GPU whose outputs go home but that is not in the last segment sends
     * them after its last wait, and is waited for again (the last segment's send theirs before
     * their last step's wait) */
    if (ns > 0) {
        int sends[PLAN_MAX_DEVICES] = {0};
        for (int t = 0; t < plan->n_transfers; t++)
            if (plan->transfers[t].segment == ns)
                sends[baton__plan_memory_index(plan, plan->transfers[t].from)] = 1;
        for (int d = 1; d < plan->n_devices; d++)
            if (sends[d] && !baton__plan_segment_runs_on(plan, ns - 1, plan->memory[d].device) &&
                push_sync(plan, BATON_SYNC_STRICT, cap, plan->n_steps - 1, plan->memory[d].device,
                          "end"))
                return baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
    }
    /* boundary and graph: at GPU -> CPU boundaries (on every GPU that the CPU segment reads
     * from) and at the end on every GPU with work issued since its last wait. */
    for (int mode = BATON_SYNC_BOUNDARY; mode <= BATON_SYNC_GRAPH; mode++) {
        int pending[PLAN_MAX_DEVICES] = {0};
        for (int s = 0; s < ns; s++) {
            const plan_segment *seg = &plan->segments[s];
            if (seg->device.kind == BATON_DEVICE_CPU && s > 0) {
                int need[PLAN_MAX_DEVICES] = {0};
                int prev = baton__plan_memory_index(plan, plan->segments[s - 1].device);
                if (plan->segments[s - 1].device.kind == BATON_DEVICE_CUDA)
                    need[prev] = 1;
                /* the transfers into segment s are boundary s-1's (sorted by segment), so this
                 * stays linear in boundaries + transfers rather than their product */
                const plan_boundary *pb = &plan->boundaries[s - 1];
                for (int t = pb->first_transfer; t < pb->first_transfer + pb->n_transfers; t++)
                    need[baton__plan_memory_index(plan, plan->transfers[t].from)] = 1;
                for (int d = 1; d < plan->n_devices; d++)
                    if (need[d] && pending[d]) {
                        if (push_sync(plan, mode, cap, seg->first_step - 1, plan->memory[d].device,
                                      "boundary"))
                            return baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
                        pending[d] = 0;
                    }
            } else if (seg->device.kind == BATON_DEVICE_CUDA) { /* a collective: its group */
                int nd;
                const baton_device *devs = step_devices(&plan->steps[seg->first_step], &nd);
                for (int g = 0; g < nd; g++)
                    pending[baton__plan_memory_index(plan, devs[g])] = 1;
            }
        }
        for (int d = 1; d < plan->n_devices; d++)
            if (pending[d] &&
                push_sync(plan, mode, cap, plan->n_steps - 1, plan->memory[d].device, "end"))
                return baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
    }
    return 0;
}

int baton__plan_analyse(baton_plan *plan, baton_error *err)
{
    int rc = build_segments(plan, err);
    if (rc)
        return rc;
    analysis_scratch sc = {.nd = plan->n_devices, .nt = plan->n_tensors};
    size_t cells = (size_t)sc.nd * (size_t)(sc.nt ? sc.nt : 1);
    sc.begin = malloc(cells * sizeof *sc.begin);
    sc.end = malloc(cells * sizeof *sc.end);
    if (!sc.begin || !sc.end) {
        rc = baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
        goto out;
    }
    for (size_t i = 0; i < cells; i++) {
        sc.begin[i] = -1;
        sc.end[i] = -1;
    }
    rc = plan_lifetimes(plan, &sc, err);
    if (rc)
        goto out;
    for (int d = 0; d < plan->n_devices; d++) {
        plan_memory *m = &plan->memory[d];
        size_t nt = (size_t)(plan->n_tensors ? plan->n_tensors : 1);
        m->offset = malloc(nt * sizeof *m->offset);
        m->live_begin = malloc(nt * sizeof *m->live_begin);
        m->live_end = malloc(nt * sizeof *m->live_end);
        if (!m->offset || !m->live_begin || !m->live_end) {
            rc = baton__err_set(err, BATON_ENOMEM, "analysis: out of memory");
            goto out;
        }
        rc = place_device(plan, &sc, d, err);
        if (rc)
            goto out;
    }
    rc = build_boundaries_and_syncs(plan, err);
out:
    free(sc.begin);
    free(sc.end);
    return rc;
}
