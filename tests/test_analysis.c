/* test_analysis.c: the ahead-of-time analysis: segments, next devices, boundaries, transfers,
 * sync points per mode, and the memory plan — including a randomized property test that no two
 * tensors live at the same time share bytes on any device. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"
#include "tests/support.h"

static baton_registry *reg;

static void setup(void)
{
    cr_assert_eq(baton_registry_create(&reg), 0);
}

static void teardown(void)
{
    baton_registry_destroy(reg);
}

TestSuite(analysis, .init = setup, .fini = teardown);

static baton_plan *load_text(const char *json)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = baton_plan_load_string(reg, json, strlen(json), "test.json", NULL, &plan, &err);
    cr_assert_eq(rc, 0, "plan failed to load: %s", err.message);
    return plan;
}

static baton_plan *load_file(const char *rel)
{
    baton_plan *plan = NULL;
    baton_error err = {0};
    int rc = baton_plan_load(reg, test_path(rel), &plan, &err);
    cr_assert_eq(rc, 0, "%s failed to load: %s", rel, err.message);
    return plan;
}

/* x -> [cuda a] -> [cuda b] -> [cpu c] -> [cuda d] -> y (output) */
static const char *mixed_plan =
    "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"mixed\",\n"
    " \"tensors\": [\n"
    "  {\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [4, 8], \"role\": \"input\"},\n"
    "  {\"name\": \"t1\", \"dtype\": \"f32\", \"shape\": [4, 8]},\n"
    "  {\"name\": \"t2\", \"dtype\": \"f32\", \"shape\": [4, 8]},\n"
    "  {\"name\": \"t3\", \"dtype\": \"f32\", \"shape\": [4, 8]},\n"
    "  {\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [4, 8], \"role\": \"output\"}],\n"
    " \"steps\": [\n"
    "  {\"name\": \"a\", \"kernel\": \"copy\", \"device\": \"cuda:0\", \"inputs\": [\"x\"], "
    "\"outputs\": [\"t1\"]},\n"
    "  {\"name\": \"b\", \"kernel\": \"add_scalar\", \"device\": \"cuda:0\", \"inputs\": [\"t1\"], "
    "\"outputs\": [\"t2\"], \"attrs\": {\"value\": 1}},\n"
    "  {\"name\": \"c\", \"kernel\": \"add\", \"device\": \"cpu\", \"inputs\": [\"t2\", \"x\"], "
    "\"outputs\": [\"t3\"]},\n"
    "  {\"name\": \"d\", \"kernel\": \"mul\", \"device\": \"cuda:0\", \"inputs\": [\"t3\", "
    "\"t1\"], "
    "\"outputs\": [\"y\"]}]}\n";

Test(analysis, splits_steps_into_segments_and_knows_each_next_device)
{
    baton_plan *p = load_text(mixed_plan);
    cr_assert_eq(p->n_segments, 3);
    cr_assert_eq(p->segments[0].first_step, 0);
    cr_assert_eq(p->segments[0].last_step, 1);
    cr_assert_eq(p->segments[1].device.kind, BATON_DEVICE_CPU);
    cr_assert_eq(p->steps[0].next_device.kind, BATON_DEVICE_CUDA);
    cr_assert_eq(p->steps[1].next_device.kind, BATON_DEVICE_CPU);
    cr_assert_eq(p->steps[1].next_kind, BATON_TARGET_KERNEL);
    cr_assert_eq(p->steps[3].next_device.kind, BATON_DEVICE_NONE);
    cr_assert_eq(p->steps[3].next_kind, BATON_TARGET_NONE);
    baton_step_info si;
    cr_assert_eq(baton_plan_step_info(p, 2, &si), 0);
    cr_assert_eq(si.segment, 1);
    cr_assert_eq(si.next_device.kind, BATON_DEVICE_CUDA);
    baton_plan_free(p);
}

Test(analysis, places_transfers_at_the_boundary_into_the_reading_segment)
{
    baton_plan *p = load_text(mixed_plan);
    /* x: host -> cuda before a (segment 0); t2: cuda -> host before c; t3: host -> cuda before
     * d; t1 is already on cuda:0 for d; y goes back to the host at the end. */
    cr_assert_eq(p->n_transfers, 4);
    struct {
        const char *tensor;
        int segment;
        baton_device_kind to;
    } want[] = {{"x", 0, BATON_DEVICE_CUDA},
                {"t2", 1, BATON_DEVICE_CPU},
                {"t3", 2, BATON_DEVICE_CUDA},
                {"y", 3, BATON_DEVICE_CPU}};
    for (int i = 0; i < 4; i++) {
        const plan_transfer *x = &p->transfers[i];
        cr_assert_str_eq(p->tensors[x->tensor].name, want[i].tensor);
        cr_assert_eq(x->segment, want[i].segment, "%s", want[i].tensor);
        cr_assert_eq(x->to.kind, want[i].to, "%s", want[i].tensor);
    }
    cr_assert_eq(p->n_boundaries, 2);
    cr_assert_eq(p->boundaries[0].host_wait, 1);
    cr_assert_eq(p->boundaries[0].n_transfers, 1);
    cr_assert_eq(p->boundaries[1].host_wait, 0);
    baton_plan_free(p);
}

Test(analysis, lists_host_waits_per_sync_mode)
{
    baton_plan *p = load_text(mixed_plan);
    cr_assert_eq(p->n_sync[BATON_SYNC_STRICT], 3, "one per GPU step");
    /* one at the cuda -> cpu boundary, one at the end since the last segment is on the GPU */
    cr_assert_eq(p->n_sync[BATON_SYNC_BOUNDARY], 2);
    cr_assert_eq(p->n_sync[BATON_SYNC_GRAPH], 2);
    cr_assert_str_eq(p->sync[BATON_SYNC_BOUNDARY][0].why, "boundary");
    cr_assert_str_eq(p->sync[BATON_SYNC_BOUNDARY][1].why, "end");
    baton_plan_free(p);
}

Test(analysis, bundled_rfc_plan_waits_once_per_layer)
{
    baton_plan *p = load_file("examples/plans/rfc.json");
    cr_assert_eq(p->n_segments, 16);
    cr_assert_eq(p->n_sync[BATON_SYNC_STRICT], 24);
    cr_assert_eq(p->n_sync[BATON_SYNC_BOUNDARY], 8);
    baton_plan_free(p);
}

Test(analysis, chain_of_one_device_reuses_two_buffers)
{
    baton_plan *p = load_file("examples/plans/rmsnorm_chain64.json");
    int d = baton__plan_memory_index(p, (baton_device){BATON_DEVICE_CUDA, 0});
    cr_assert_geq(d, 1);
    const plan_memory *m = &p->memory[d];
    /* h_i = rms_norm(h_{i-1}): each activation dies when the next is written, so the 64
     * activations alternate between exactly two 8 KiB slots, and the 64 per-row invvars share
     * one slot; the arena holds the weight, those three slots and nothing else. */
    int64_t slot_of[2] = {-1, -1};
    int n_slots = 0;
    for (int k = 1; k <= 64; k++) {
        char name[16];
        snprintf(name, sizeof name, "h%d", k);
        int t = baton__plan_find_tensor(p, name);
        cr_assert_geq(t, 0, "%s missing", name);
        int64_t off = m->offset[t];
        cr_assert_geq(off, 0, "%s has no slot on cuda:0", name);
        if (n_slots < 2 && off != slot_of[0])
            slot_of[n_slots++] = off;
        cr_assert(off == slot_of[0] || off == slot_of[1], "%s at %lld: a third activation slot",
                  name, (long long)off);
        /* alternation: h_k never shares a slot with h_{k-1}, which it reads */
        if (k > 1) {
            snprintf(name, sizeof name, "h%d", k - 1);
            cr_assert_neq(off, m->offset[baton__plan_find_tensor(p, name)],
                          "h%d overwrites its input", k);
        }
        snprintf(name, sizeof name, "inv%d", k);
        int iv = baton__plan_find_tensor(p, name);
        if (iv >= 0 && k > 1) {
            char prev[16];
            snprintf(prev, sizeof prev, "inv%d", k - 1);
            cr_assert_eq(m->offset[iv], m->offset[baton__plan_find_tensor(p, prev)],
                         "%s and %s do not share a slot", name, prev);
        }
    }
    cr_assert_eq(n_slots, 2, "the activations use %d slots", n_slots);
    size_t w = p->tensors[baton__plan_find_tensor(p, "w")].nbytes;
    cr_assert_leq(m->arena_bytes, w + 2 * 8192 + 256,
                  "arena %zu: more than weight + 2 slots + "
                  "invvar",
                  m->arena_bytes);
    baton_plan_free(p);
}

/* ---- a large alternating plan --------------------------------------------------------------- */

/* A chain of n noop steps t(i) -> t(i+1), even steps on the CPU and odd ones on cuda:0: the shape
 * whose analysis was once quadratic in the number of boundaries (issue 9; bench_host times it). */
static char *alternating_chain(int n)
{
    size_t cap = (size_t)n * 160 + 1024, len = 0;
    char *b = malloc(cap);
    cr_assert_not_null(b);
    len += (size_t)snprintf(b + len, cap - len,
                            "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"alt\", "
                            "\"tensors\": [{\"name\": \"t0\", \"dtype\": \"f32\", \"shape\": [4], "
                            "\"role\": \"input\"}");
    for (int i = 1; i <= n; i++)
        len += (size_t)snprintf(b + len, cap - len,
                                ",\n{\"name\": \"t%d\", \"dtype\": \"f32\", \"shape\": [4]%s}", i,
                                i == n ? ", \"role\": \"output\"" : "");
    len += (size_t)snprintf(b + len, cap - len, "],\n\"steps\": [");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(b + len, cap - len,
                                "%s\n{\"name\": \"s%d\", \"kernel\": \"noop\", \"device\": \"%s\", "
                                "\"inputs\": [\"t%d\"], \"outputs\": [\"t%d\"]}",
                                i ? "," : "", i, i % 2 ? "cuda:0" : "cpu", i, i + 1);
    snprintf(b + len, cap - len, "]}\n");
    return b;
}

Test(analysis, analyses_a_100k_step_alternating_plan_exactly)
{
    const int n = 100000; /* even: the last step runs on cuda:0 */
    char *json = alternating_chain(n);
    baton_plan *p = load_text(json);
    free(json);
    const baton_device cpu = {BATON_DEVICE_CPU, 0}, gpu = {BATON_DEVICE_CUDA, 0};

    /* one segment per step */
    cr_assert_eq(p->n_segments, n);
    for (int i = 0; i < n; i++) {
        const plan_segment *g = &p->segments[i];
        cr_assert(g->first_step == i && g->last_step == i && p->steps[i].segment == i,
                  "segment %d: steps %d..%d", i, g->first_step, g->last_step);
        cr_assert(device_eq(g->device, i % 2 ? gpu : cpu), "segment %d on the wrong device", i);
    }

    /* one boundary between each pair of steps, each carrying the one tensor the next step reads;
     * the output t(n), written on cuda:0, goes back to the host at the end */
    cr_assert_eq(p->n_boundaries, n - 1);
    cr_assert_eq(p->n_transfers, n);
    for (int b = 0; b < n - 1; b++) {
        const plan_boundary *pb = &p->boundaries[b];
        int to_gpu = b % 2 == 0;
        cr_assert(pb->after_step == b && pb->n_transfers == 1 && pb->first_transfer == b,
                  "boundary %d: after step %d, transfers %d+%d", b, pb->after_step,
                  pb->first_transfer, pb->n_transfers);
        cr_assert(device_eq(pb->from, to_gpu ? cpu : gpu) && device_eq(pb->to, to_gpu ? gpu : cpu),
                  "boundary %d: wrong devices", b);
        cr_assert_eq(pb->host_wait, !to_gpu, "boundary %d", b);
        const plan_transfer *x = &p->transfers[b];
        cr_assert(x->tensor == b + 1 && x->segment == b + 1 && device_eq(x->from, pb->from) &&
                      device_eq(x->to, pb->to),
                  "transfer %d: tensor %d into segment %d", b, x->tensor, x->segment);
    }
    const plan_transfer *last = &p->transfers[n - 1];
    cr_assert(last->tensor == n && last->segment == n && device_eq(last->from, gpu) &&
                  device_eq(last->to, cpu),
              "the output's transfer: tensor %d, segment %d", last->tensor, last->segment);

    /* strict waits after every GPU step; boundary and graph at every cuda -> cpu boundary and at
     * the end */
    cr_assert_eq(p->n_sync[BATON_SYNC_STRICT], n / 2);
    for (int mode = BATON_SYNC_BOUNDARY; mode <= BATON_SYNC_GRAPH; mode++) {
        cr_assert_eq(p->n_sync[mode], n / 2, "mode %d", mode);
        for (int k = 0; k < n / 2; k++) {
            const plan_sync_point *sp = &p->sync[mode][k];
            cr_assert(sp->after_step == 2 * k + 1 && device_eq(sp->device, gpu),
                      "mode %d wait %d after step %d", mode, k, sp->after_step);
            cr_assert_str_eq(sp->why, k + 1 < n / 2 ? "boundary" : "end");
        }
    }

    /* a host buffer that the GPU copies from stays until the end; a GPU buffer is reused as soon
     * as the host has its copy: two slots on cuda:0 whatever the length */
    const plan_memory *mg = &p->memory[baton__plan_memory_index(p, gpu)];
    cr_assert_eq(mg->arena_bytes, 2 * 256, "cuda:0 arena %zu", mg->arena_bytes);
    baton_plan_free(p);
}

/* ---- randomized property test --------------------------------------------------------------- */

static int overlaps(int64_t a0, size_t an, int64_t b0, size_t bn)
{
    return a0 < b0 + (int64_t)bn && b0 < a0 + (int64_t)an;
}

/* Checks the memory-plan invariants of a loaded plan; returns the number of pairs checked. */
static long check_memory_plan(const baton_plan *p, uint64_t seed)
{
    long pairs = 0;
    for (int d = 0; d < p->n_devices; d++) {
        const plan_memory *m = &p->memory[d];
        for (int a = 0; a < p->n_tensors; a++) {
            if (m->offset[a] < 0)
                continue;
            cr_assert_leq((size_t)m->offset[a] + p->tensors[a].nbytes, m->arena_bytes,
                          "seed %llu: tensor %s beyond the arena", (unsigned long long)seed,
                          p->tensors[a].name);
            cr_assert_eq(m->offset[a] % 256, 0, "seed %llu: unaligned offset",
                         (unsigned long long)seed);
            for (int b = a + 1; b < p->n_tensors; b++) {
                if (m->offset[b] < 0)
                    continue;
                int live_together =
                    m->live_begin[a] <= m->live_end[b] && m->live_begin[b] <= m->live_end[a];
                if (!live_together)
                    continue;
                pairs++;
                cr_assert(!overlaps(m->offset[a], p->tensors[a].nbytes, m->offset[b],
                                    p->tensors[b].nbytes),
                          "seed %llu: %s [%d,%d] and %s [%d,%d] overlap on device %d",
                          (unsigned long long)seed, p->tensors[a].name, m->live_begin[a],
                          m->live_end[a], p->tensors[b].name, m->live_begin[b], m->live_end[b], d);
            }
        }
    }
    /* Every tensor a step touches has a slot on the step's device that is live at the step. */
    for (int i = 0; i < p->n_steps; i++) {
        const plan_step *s = &p->steps[i];
        int d = baton__plan_memory_index(p, s->device);
        const plan_memory *m = &p->memory[d];
        for (int k = 0; k < s->n_inputs + s->n_outputs; k++) {
            int t = k < s->n_inputs ? s->inputs[k] : s->outputs[k - s->n_inputs];
            cr_assert_geq(m->offset[t], 0, "seed %llu: step %s: %s has no slot",
                          (unsigned long long)seed, s->name, p->tensors[t].name);
            cr_assert(m->live_begin[t] <= 2 * i + 1 && 2 * i + 1 <= m->live_end[t],
                      "seed %llu: step %s: %s not live at the step", (unsigned long long)seed,
                      s->name, p->tensors[t].name);
        }
    }
    /* Outputs and inputs stay on the host for the whole run. */
    for (int t = 0; t < p->n_tensors; t++) {
        const plan_tensor *pt = &p->tensors[t];
        if ((pt->role == BATON_ROLE_OUTPUT && pt->producer >= 0) || pt->role == BATON_ROLE_INPUT) {
            cr_assert_geq(p->memory[0].offset[t], 0);
            cr_assert_eq(p->memory[0].live_end[t], 2 * p->n_steps);
        }
    }
    return pairs;
}

/* A random valid plan: copy steps on cpu, cuda:0 and cuda:1, each reading any earlier tensor
 * (so lifetimes cross devices and segments), some of whose outputs are plan outputs. */
static char *random_plan(test_rng *r, int n_steps)
{
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    int n_inputs = 1 + (int)(test_rng_next(r) % 3);
    int nt = n_inputs + n_steps;
    int *sizes = malloc((size_t)nt * sizeof *sizes), *src = malloc((size_t)nt * sizeof *src);
    int *dev = malloc((size_t)nt * sizeof *dev);
    for (int t = 0; t < n_inputs; t++)
        sizes[t] = 1 + (int)(test_rng_next(r) % 700);
    int d = 0;
    for (int i = 0; i < n_steps; i++) {
        if (test_rng_next(r) % 3 == 0)
            d = (int)(test_rng_next(r) % 3);
        int out = n_inputs + i;
        src[i] = (int)(test_rng_next(r) % (unsigned)out);
        sizes[out] = sizes[src[i]];
        dev[i] = d;
    }
    n += (size_t)snprintf(buf + n, cap - n,
                          "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"random\", "
                          "\"tensors\": [\n");
    for (int t = 0; t < nt; t++) {
        const char *role = t < n_inputs                ? "input"
                           : test_rng_next(r) % 6 == 0 ? "output"
                                                       : "intermediate";
        n += (size_t)snprintf(buf + n, cap - n,
                              "%s{\"name\": \"t%d\", \"dtype\": \"f32\", \"shape\": [%d], "
                              "\"role\": \"%s\"}\n",
                              t ? "," : "", t, sizes[t], role);
    }
    n += (size_t)snprintf(buf + n, cap - n, "], \"steps\": [\n");
    static const char *devs[] = {"cpu", "cuda:0", "cuda:1"};
    for (int i = 0; i < n_steps; i++)
        n += (size_t)snprintf(buf + n, cap - n,
                              "%s{\"name\": \"s%d\", \"kernel\": \"copy\", \"device\": \"%s\", "
                              "\"inputs\": [\"t%d\"], \"outputs\": [\"t%d\"]}\n",
                              i ? "," : "", i, devs[dev[i]], src[i], n_inputs + i);
    snprintf(buf + n, cap - n, "]}\n");
    free(sizes);
    free(src);
    free(dev);
    return buf;
}

Test(analysis, memory_plan_never_overlaps_live_tensors_on_random_plans)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    long pairs = 0;
    for (int iter = 0; iter < 200; iter++) {
        int n_steps = 1 + (int)(test_rng_next(&r) % 120);
        char *json = random_plan(&r, n_steps);
        baton_plan *p = NULL;
        baton_error err = {0};
        int rc = baton_plan_load_string(reg, json, strlen(json), "random.json", NULL, &p, &err);
        cr_assert_eq(rc, 0, "seed %llu iter %d: %s", (unsigned long long)seed, iter, err.message);
        pairs += check_memory_plan(p, seed);
        /* reuse must actually happen on long plans, or the test proves nothing */
        baton_plan_free(p);
        free(json);
    }
    cr_assert_gt(pairs, 1000, "too few overlapping lifetimes were checked (%ld)", pairs);
}

Test(analysis, memory_plan_reuses_space_on_random_chains)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    char *json = random_plan(&r, 300);
    baton_plan *p = NULL;
    baton_error err = {0};
    cr_assert_eq(baton_plan_load_string(reg, json, strlen(json), "r.json", NULL, &p, &err), 0, "%s",
                 err.message);
    size_t arena = 0, naive = 0;
    for (int d = 0; d < p->n_devices; d++) {
        arena += p->memory[d].arena_bytes;
        naive += p->memory[d].naive_bytes;
    }
    cr_assert_lt(arena, naive, "seed %llu: no reuse (%zu of %zu)", (unsigned long long)seed, arena,
                 naive);
    baton_plan_free(p);
    free(json);
}

/* ---- the arena placement against a reference --------------------------------------------------
 */

/* First fit over a sorted array of holes, the plain form of the placement analyse.c documents:
 * slots in order of (begin, larger first, tensor); before each, the slots whose life ended earlier
 * are freed and coalesced; a slot takes the lowest hole that fits, else the top (absorbing a hole
 * that ends there). Fills off[t] and returns the arena size; *most_holes is the peak hole count. */
typedef struct ref_slot {
    int t, begin, end;
    size_t size;
} ref_slot;

static int ref_cmp_begin(const void *a, const void *b)
{
    const ref_slot *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    return x->t - y->t;
}

static size_t reference_arena(const baton_plan *p, const plan_memory *m, int64_t *off,
                              int *most_holes)
{
    int nt = p->n_tensors, ns = 0, nh = 0;
    ref_slot *sl = malloc((size_t)nt * sizeof *sl);
    size_t(*holes)[2] = malloc((size_t)nt * sizeof *holes), top = 0;
    char *freed = calloc((size_t)nt, 1);
    cr_assert(sl && holes && freed);
    for (int t = 0; t < nt; t++) {
        off[t] = -1;
        if (m->live_begin[t] >= 0)
            sl[ns++] = (ref_slot){t, m->live_begin[t], m->live_end[t],
                                  (p->tensors[t].nbytes + 255) / 256 * 256};
    }
    qsort(sl, (size_t)ns, sizeof *sl, ref_cmp_begin);
    *most_holes = 0;
    for (int i = 0; i < ns; i++) {
        for (int j = 0; j < i; j++) { /* free what ended before this slot begins */
            if (freed[j] || sl[j].end >= sl[i].begin)
                continue;
            freed[j] = 1;
            size_t o = (size_t)off[sl[j].t], z = sl[j].size;
            int k = 0;
            while (k < nh && holes[k][0] < o)
                k++;
            int prev = k > 0 && holes[k - 1][0] + holes[k - 1][1] == o;
            int next = k < nh && o + z == holes[k][0];
            if (prev && next) {
                holes[k - 1][1] += z + holes[k][1];
                memmove(&holes[k], &holes[k + 1], (size_t)(nh - k - 1) * sizeof *holes);
                nh--;
            } else if (prev) {
                holes[k - 1][1] += z;
            } else if (next) {
                holes[k][0] = o;
                holes[k][1] += z;
            } else {
                memmove(&holes[k + 1], &holes[k], (size_t)(nh - k) * sizeof *holes);
                holes[k][0] = o;
                holes[k][1] = z;
                nh++;
            }
        }
        if (nh > *most_holes)
            *most_holes = nh;
        size_t z = sl[i].size;
        int k = 0;
        while (k < nh && holes[k][1] < z)
            k++;
        if (k < nh) {
            off[sl[i].t] = (int64_t)holes[k][0];
            holes[k][0] += z;
            holes[k][1] -= z;
            if (holes[k][1] == 0) {
                memmove(&holes[k], &holes[k + 1], (size_t)(nh - k - 1) * sizeof *holes);
                nh--;
            }
        } else if (nh > 0 && holes[nh - 1][0] + holes[nh - 1][1] == top) {
            off[sl[i].t] = (int64_t)holes[nh - 1][0];
            top = holes[nh - 1][0] + z;
            nh--;
        } else {
            off[sl[i].t] = (int64_t)top;
            top += z;
        }
    }
    free(sl);
    free(holes);
    free(freed);
    return top;
}

/* Every device's offsets and arena size equal the reference's; returns the peak hole count. */
static int expect_reference_placement(const baton_plan *p, const char *what)
{
    int64_t *off = malloc((size_t)p->n_tensors * sizeof *off);
    int most = 0;
    for (int d = 0; d < p->n_devices; d++) {
        const plan_memory *m = &p->memory[d];
        int holes = 0;
        size_t arena = reference_arena(p, m, off, &holes);
        if (holes > most)
            most = holes;
        cr_assert_eq(m->arena_bytes, arena, "%s: device %d arena %zu, reference %zu", what, d,
                     m->arena_bytes, arena);
        for (int t = 0; t < p->n_tensors; t++)
            cr_assert_eq(m->offset[t], off[t], "%s: device %d tensor %s at %lld, reference %lld",
                         what, d, p->tensors[t].name, (long long)m->offset[t], (long long)off[t]);
    }
    free(off);
    return most;
}

Test(analysis, places_slots_exactly_as_first_fit_over_sorted_holes)
{
    uint64_t seed = test_fresh_seed();
    test_rng r = {seed};
    char what[64];
    for (int iter = 0; iter < 100; iter++) {
        char *json = random_plan(&r, 1 + (int)(test_rng_next(&r) % 300));
        snprintf(what, sizeof what, "seed %llu iter %d", (unsigned long long)seed, iter);
        baton_plan *p = load_text(json);
        expect_reference_placement(p, what);
        baton_plan_free(p);
        free(json);
    }

    /* Many holes that nothing fits into: input i_k (k*256 bytes) is copied to s_k, which is
     * copied to the output l_k; each s_k dies while l_k lives on, and the next s is larger. */
    const int m = 3000;
    size_t cap = (size_t)m * 400 + 1024, n = 0;
    char *json = malloc(cap);
    n += (size_t)snprintf(json + n, cap - n,
                          "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"holes\", "
                          "\"tensors\": [");
    for (int k = 1; k <= m; k++)
        n += (size_t)snprintf(json + n, cap - n,
                              "%s{\"name\": \"i%d\", \"dtype\": \"f32\", \"shape\": [%d], "
                              "\"role\": \"input\"},\n{\"name\": \"s%d\", \"dtype\": \"f32\", "
                              "\"shape\": [%d]},\n{\"name\": \"l%d\", \"dtype\": \"f32\", "
                              "\"shape\": [%d], \"role\": \"output\"}",
                              k > 1 ? ",\n" : "", k, 64 * k, k, 64 * k, k, 64 * k);
    n += (size_t)snprintf(json + n, cap - n, "],\n\"steps\": [");
    for (int k = 1; k <= m; k++)
        n += (size_t)snprintf(json + n, cap - n,
                              "%s{\"name\": \"a%d\", \"kernel\": \"copy\", \"device\": \"cpu\", "
                              "\"inputs\": [\"i%d\"], \"outputs\": [\"s%d\"]},\n{\"name\": "
                              "\"b%d\", \"kernel\": \"copy\", \"device\": \"cpu\", \"inputs\": "
                              "[\"s%d\"], \"outputs\": [\"l%d\"]}",
                              k > 1 ? ",\n" : "", k, k, k, k, k, k);
    snprintf(json + n, cap - n, "]}\n");
    baton_plan *p = load_text(json);
    int holes = expect_reference_placement(p, "the holes plan");
    cr_expect_geq(holes, m - 1, "the plan should leave a hole per step pair, got %d", holes);
    baton_plan_free(p);
    free(json);
}

Test(analysis, describe_writes_text_and_json)
{
    baton_plan *p = load_text(mixed_plan);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(baton_plan_describe(p, f, 0), 0);
    fclose(f);
    cr_assert(strstr(buf, "t2") && strstr(buf, "cuda:0 -> cpu") && strstr(buf, "host waits"), "%s",
              buf);
    free(buf);
    f = open_memstream(&buf, &len);
    cr_assert_eq(baton_plan_describe(p, f, 1), 0);
    fclose(f);
    cr_assert(strstr(buf, "\"segments\"") && strstr(buf, "\"transfers\"") &&
                  strstr(buf, "\"host_waits\"") && strstr(buf, "\"arena_bytes\""),
              "%s", buf);
    free(buf);
    baton_plan_free(p);
}
