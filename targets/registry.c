/* registry.c: the table of targets (kernels and delegates) that plans name. A registry starts
 * with baton's built-ins; embedders add their own targets, add device implementations to a
 * registered one (e.g. a ROCm rms_norm) or deliberately replace one (baton_registry_replace). */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "targets/builtin.h"
#include "targets/registry.h"

/* A registered target with its own copies of what the caller's target pointed to (strings and
 * delegate tables), so that nothing the caller passed need outlive the call. `t` comes first: a
 * baton_target pointer into the registry is the entry, and free() of it frees everything. */
typedef struct reg_entry {
    baton_target t;
    baton_delegate_iface ifaces[BATON_MAX_IMPLS];
    /* t.impls[k]'s prepare-time hooks (baton's own kernels) */
    kernel_tune_fn tune[BATON_MAX_IMPLS];
    kernel_prepare_fn prepare[BATON_MAX_IMPLS];
    kernel_error_fn errors[BATON_MAX_IMPLS];
    char strings[]; /* name, summary, attribute names and help, NUL-separated */
} reg_entry;

struct baton_registry {
    atomic_int refs; /* the creator's, plus one per plan loaded from it */
    int n, cap;
    baton_target **targets;
    /* Entries that a later add or replace superseded: plans loaded before still point at them,
     * so they live as long as the registry. */
    int n_retired, cap_retired;
    baton_target **retired;
    /* Plugins loaded into it (dlopen handles): closed when it is freed, after every plan. */
    int n_plugins;
    void **plugins;
    log_sink log; /* baton_registry_set_log; its plans and runtimes log here */
};

void baton_registry_set_log(baton_registry *reg, baton_log_fn fn, void *user)
{
    if (!reg)
        return;
    reg->log.fn = fn;
    reg->log.user = user;
}

const log_sink *baton__registry_log(const baton_registry *reg)
{
    return &reg->log;
}

int baton_registry_create(baton_registry **out)
{
    if (!out)
        return BATON_EINVAL;
    *out = NULL;
    baton_registry *reg = calloc(1, sizeof *reg);
    if (!reg)
        return BATON_ENOMEM;
    atomic_init(&reg->refs, 1);
    for (int i = 0; i < baton__builtin_target_count; i++) {
        const builtin_target *b = &baton__builtin_targets[i];
        int rc = baton_registry_add(reg, b->target, NULL);
        if (rc) {
            baton_registry_destroy(reg);
            return rc;
        }
        /* the entry just appended keeps the hooks beside its implementations */
        reg_entry *e = (reg_entry *)reg->targets[reg->n - 1];
        memcpy(e->tune, b->tune, sizeof b->tune);
        memcpy(e->prepare, b->prepare, sizeof b->prepare);
        memcpy(e->errors, b->errors, sizeof b->errors);
        for (int k = 0; k < BATON_MAX_IMPLS; k++) /* an error record is a kernel's */
            if (k >= e->t.n_impls || !e->t.impls[k].kernel ||
                e->t.impls[k].device != BATON_DEVICE_CUDA)
                e->errors[k] = NULL;
    }
    *out = reg;
    return 0;
}

const baton_registry *baton__registry_retain(const baton_registry *reg)
{
    if (reg) /* the count is the one mutable part of a registry that plans share */
        atomic_fetch_add_explicit(&((baton_registry *)reg)->refs, 1, memory_order_relaxed);
    return reg;
}

void baton_registry_destroy(baton_registry *reg)
{
    if (!reg || atomic_fetch_sub_explicit(&reg->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (int i = 0; i < reg->n; i++)
        free(reg->targets[i]);
    for (int i = 0; i < reg->n_retired; i++)
        free(reg->retired[i]);
    free(reg->targets);
    free(reg->retired);
    for (int i = 0; i < reg->n_plugins; i++)
        baton__plugin_close(reg->plugins[i]);
    free(reg->plugins);
    free(reg);
}

int baton__registry_has_plugin(const baton_registry *reg, void *handle)
{
    for (int i = 0; i < reg->n_plugins; i++)
        if (reg->plugins[i] == handle)
            return 1;
    return 0;
}

int baton__registry_keep_plugin(baton_registry *reg, void *handle)
{
    void **np = realloc(reg->plugins, ((size_t)reg->n_plugins + 1) * sizeof *np);
    if (!np)
        return BATON_ENOMEM;
    reg->plugins = np;
    reg->plugins[reg->n_plugins++] = handle;
    return 0;
}

int baton__registry_snapshot_take(const baton_registry *reg, registry_snapshot *snap)
{
    snap->n = reg->n;
    snap->n_retired = reg->n_retired;
    snap->targets = malloc(((size_t)reg->n + 1) * sizeof *snap->targets);
    if (!snap->targets)
        return BATON_ENOMEM;
    memcpy(snap->targets, reg->targets, (size_t)reg->n * sizeof *snap->targets);
    return 0;
}

static int in_snapshot(const registry_snapshot *snap, const baton_target *t)
{
    for (int i = 0; i < snap->n; i++)
        if (snap->targets[i] == t)
            return 1;
    return 0;
}

void baton__registry_snapshot_restore(baton_registry *reg, registry_snapshot *snap)
{
    /* Entries made since: in the table now, or superseded since and retired. Entries of the
     * snapshot that were superseded go back in place. No plan can point at the new ones: plans
     * are not loaded while a plugin initialises. */
    for (int i = 0; i < reg->n; i++)
        if (!in_snapshot(snap, reg->targets[i]))
            free(reg->targets[i]);
    for (int i = snap->n_retired; i < reg->n_retired; i++)
        if (!in_snapshot(snap, reg->retired[i]))
            free(reg->retired[i]);
    reg->n_retired = snap->n_retired;
    memcpy(reg->targets, snap->targets, (size_t)snap->n * sizeof *snap->targets);
    reg->n = snap->n;
}

void baton__registry_snapshot_free(registry_snapshot *snap)
{
    free(snap->targets);
    snap->targets = NULL;
}

static int find_index(const baton_registry *reg, const char *name)
{
    for (int i = 0; i < reg->n; i++)
        if (strcmp(reg->targets[i]->name, name) == 0)
            return i;
    return -1;
}

/* ---- checking what a caller registers ---------------------------------------------------- */

/* name for a message: at most 64 bytes, bytes a terminal would interpret shown as '?'. */
static const char *shown(const char *name, char *buf, size_t cap)
{
    if (!name)
        return "(NULL)";
    size_t i = 0;
    for (; name[i] && i < 64 && i + 4 < cap; i++) {
        unsigned char c = (unsigned char)name[i];
        buf[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    if (name[i] && i + 4 <= cap)
        memcpy(buf + i, "...", 3), i += 3;
    buf[i] = 0;
    return buf;
}

/* Whether s is a name a plan can write (letters, digits, '_', '.', '-'; 1 to CORE_MAX_NAME
 * bytes); if not, says why in `why`. */
static int name_ok(const char *s, char *why, size_t cap)
{
    if (!s) {
        snprintf(why, cap, "is NULL");
        return 0;
    }
    if (!s[0]) {
        snprintf(why, cap, "is empty");
        return 0;
    }
    size_t n = strnlen(s, (size_t)1 << 16); /* a plugin's name may lack its NUL: bounded */
    if (n > CORE_MAX_NAME) {
        snprintf(why, cap,
                 n == (size_t)1 << 16 ? "is over %zu bytes long (at most %d)"
                                      : "is %zu bytes long (at most %d)",
                 n, CORE_MAX_NAME);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '_' || c == '.' || c == '-')
            continue;
        if (c > 0x20 && c < 0x7f)
            snprintf(why, cap, "has '%c' at offset %zu", c, i);
        else
            snprintf(why, cap, "has %s at offset %zu", c == ' ' ? "a space" : "a control byte", i);
        return 0;
    }
    return 1;
}

#define NAME_RULE "letters, digits, '_', '.' and '-', at most 255 bytes"

/* Fails an add or replace with BATON_EINVAL: "fn: target 'name': what". */
static int refuse(baton_error *err, const char *fn, const baton_target *t, const char *fmt, ...)
    CORE_PRINTF(4, 5);
static int refuse(baton_error *err, const char *fn, const baton_target *t, const char *fmt, ...)
{
    char what[800], name[80];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return baton__err_set(err, BATON_EINVAL, "%s: target '%s': %s", fn,
                          shown(t->name, name, sizeof name), what);
}

static const char *kind_name(baton_device_kind k)
{
    return k == BATON_DEVICE_CPU ? "cpu" : k == BATON_DEVICE_CUDA ? "cuda" : "unknown";
}

static int check_impls(const char *fn, const baton_target *t, baton_error *err)
{
    if (t->n_impls < 1 || t->n_impls > BATON_MAX_IMPLS)
        return refuse(err, fn, t,
                      "n_impls is %d; give 1 to %d implementations (impls[0] onwards), one per "
                      "device kind",
                      t->n_impls, BATON_MAX_IMPLS);
    int kernel = t->kind == BATON_TARGET_KERNEL;
    for (int i = 0; i < t->n_impls; i++) {
        const baton_target_impl *im = &t->impls[i];
        if (im->device != BATON_DEVICE_CPU && im->device != BATON_DEVICE_CUDA)
            return refuse(err, fn, t,
                          "impls[%d].device is %d, not a device kind; use BATON_DEVICE_CPU or "
                          "BATON_DEVICE_CUDA",
                          i, (int)im->device);
        for (int j = 0; j < i; j++)
            if (t->impls[j].device == im->device)
                return refuse(err, fn, t,
                              "impls[%d] and impls[%d] are both for %s; give one implementation "
                              "per device kind",
                              j, i, kind_name(im->device));
        if (kernel && (!im->kernel || im->delegate))
            return refuse(err, fn, t,
                          "impls[%d] (%s) %s; a kernel target's implementations set .kernel and "
                          "leave .delegate NULL",
                          i, kind_name(im->device),
                          !im->kernel ? "has no .kernel" : "sets .delegate");
        if (!kernel &&
            (!im->delegate || !im->delegate->init || !im->delegate->execute || im->kernel))
            return refuse(err, fn, t,
                          "impls[%d] (%s) %s; a delegate target's implementations set .delegate "
                          "to a table with init() and execute() (destroy() may be NULL) and "
                          "leave .kernel NULL",
                          i, kind_name(im->device),
                          im->kernel            ? "sets .kernel"
                          : !im->delegate       ? "has no .delegate"
                          : !im->delegate->init ? "has a .delegate without init()"
                                                : "has a .delegate without execute()");
    }
    return 0;
}

static int check_attr_specs(const char *fn, const baton_target *t, baton_error *err)
{
    char why[96], name[80];
    int n = 0;
    while (n < BATON_MAX_ATTR_SPECS && t->attrs[n].name)
        n++;
    /* The validator stops at the first unnamed spec: anything after it would be ignored. */
    for (int k = n; k < BATON_MAX_ATTR_SPECS; k++) {
        const baton_attr_spec *s = &t->attrs[k];
        if (s->name)
            return refuse(err, fn, t,
                          "attrs[%d] '%s' follows attrs[%d], which has no name, so plans could "
                          "never set it; list the named attribute specs first, with nothing "
                          "after the last one",
                          k, shown(s->name, name, sizeof name), n);
        if (s->type != BATON_ATTR_NONE || s->required || s->help)
            return refuse(err, fn, t,
                          "attrs[%d] has a type, help or required flag but no name; name it, or "
                          "zero it if it is not an attribute",
                          k);
    }
    for (int k = 0; k < n; k++) {
        const baton_attr_spec *s = &t->attrs[k];
        if (!name_ok(s->name, why, sizeof why))
            return refuse(err, fn, t, "the name of attrs[%d] '%s' %s; use " NAME_RULE, k,
                          shown(s->name, name, sizeof name), why);
        if (s->type < BATON_ATTR_INT || s->type > BATON_ATTR_STRING)
            return refuse(err, fn, t,
                          "attrs[%d] '%s' has type %d; use BATON_ATTR_INT, BATON_ATTR_FLOAT, "
                          "BATON_ATTR_BOOL or BATON_ATTR_STRING",
                          k, s->name, (int)s->type);
        for (int j = 0; j < k; j++)
            if (strcmp(t->attrs[j].name, s->name) == 0)
                return refuse(err, fn, t,
                              "attrs[%d] and attrs[%d] are both named '%s'; each attribute is "
                              "specified once",
                              j, k, s->name);
    }
    return 0;
}

/* Everything a registered target must satisfy, checked before anything changes. */
static int check_target(const char *fn, const baton_target *t, baton_error *err)
{
    char why[96], name[80];
    if (!name_ok(t->name, why, sizeof why))
        return baton__err_set(err, BATON_EINVAL,
                              "%s: the target name '%s' %s; plans name targets with " NAME_RULE, fn,
                              shown(t->name, name, sizeof name), why);
    if (t->kind != BATON_TARGET_KERNEL && t->kind != BATON_TARGET_DELEGATE)
        return refuse(err, fn, t, "kind is %d; use BATON_TARGET_KERNEL or BATON_TARGET_DELEGATE",
                      (int)t->kind);
    if (!t->check)
        return refuse(err, fn, t,
                      "check() is NULL; every target needs a signature check that computes its "
                      "output types (without it the validator would trust the plan's "
                      "declarations, and a kernel writing more than declared would overflow "
                      "its arena)");
    if (t->n_inputs < 0 || t->n_inputs > CORE_MAX_STEP_ARGS || t->n_outputs < 0 ||
        t->n_outputs > CORE_MAX_STEP_ARGS)
        return refuse(err, fn, t,
                      "n_inputs is %d and n_outputs %d; each must be 0 to %d (exact counts)",
                      t->n_inputs, t->n_outputs, CORE_MAX_STEP_ARGS);
    if (t->n_aliases < 0 || t->n_aliases > BATON_MAX_ALIASES)
        return refuse(err, fn, t, "n_aliases is %d; give 0 to %d in-place pairs", t->n_aliases,
                      BATON_MAX_ALIASES);
    for (int a = 0; a < t->n_aliases; a++) {
        const baton_alias *al = &t->aliases[a];
        if (al->output < 0 || al->output >= t->n_outputs || al->input < 0 ||
            al->input >= t->n_inputs)
            return refuse(err, fn, t,
                          "aliases[%d] pairs output %d with input %d; the target has outputs 0 to "
                          "%d and inputs 0 to %d",
                          a, al->output, al->input, t->n_outputs - 1, t->n_inputs - 1);
        for (int b = 0; b < a; b++)
            if (t->aliases[b].output == al->output && t->aliases[b].input == al->input)
                return refuse(err, fn, t, "aliases[%d] repeats aliases[%d]; list a pair once", a,
                              b);
    }
    int rc = check_impls(fn, t, err);
    if (!rc)
        rc = check_attr_specs(fn, t, err);
    return rc;
}

/* How t's signature differs from the registered one's, or NULL when it is the same: kind,
 * counts, check, pack and attribute specs (names, types, required). */
static const char *signature_diff(const baton_target *have, const baton_target *t, char *buf,
                                  size_t cap)
{
    if (have->kind != t->kind)
        snprintf(buf, cap, "it is a %s, not a %s",
                 have->kind == BATON_TARGET_KERNEL ? "kernel" : "delegate",
                 t->kind == BATON_TARGET_KERNEL ? "kernel" : "delegate");
    else if (have->n_inputs != t->n_inputs || have->n_outputs != t->n_outputs)
        snprintf(buf, cap, "it takes %d inputs and %d outputs, not %d and %d", have->n_inputs,
                 have->n_outputs, t->n_inputs, t->n_outputs);
    else if (have->check != t->check)
        snprintf(buf, cap, "its check() is another function");
    else if (have->pack != t->pack)
        snprintf(buf, cap, "its pack() is another function");
    else if (have->n_aliases != t->n_aliases ||
             memcmp(have->aliases, t->aliases, (size_t)t->n_aliases * sizeof *t->aliases) != 0)
        snprintf(buf, cap, "its in-place aliases differ");
    else {
        for (int k = 0; k < BATON_MAX_ATTR_SPECS; k++) {
            const baton_attr_spec *a = &have->attrs[k], *b = &t->attrs[k];
            if (!a->name && !b->name)
                break;
            if (!a->name || !b->name || strcmp(a->name, b->name) != 0 || a->type != b->type ||
                !a->required != !b->required) {
                snprintf(buf, cap, "its attribute specs differ at attrs[%d]", k);
                return buf;
            }
        }
        return NULL;
    }
    return buf;
}

/* ---- building and committing --------------------------------------------------------------- */

static char *put(char **p, const char *s)
{
    size_t n = strlen(s) + 1;
    char *at = memcpy(*p, s, n);
    *p += n;
    return at;
}

/* A new entry: sig's signature and strings, with n_impls implementations (delegate tables
 * copied). An implementation that `prev` (the entry it supersedes, or NULL) had, the same kernel
 * for the same device kind, keeps its tuning hook: the hook tunes that kernel, no other. NULL when
 * out of memory. */
static baton_target *entry_build(const baton_target *sig, const baton_target_impl *impls,
                                 int n_impls, const baton_target *prev)
{
    size_t len = strlen(sig->name) + 1 + (sig->summary ? strlen(sig->summary) + 1 : 0);
    for (int k = 0; k < BATON_MAX_ATTR_SPECS && sig->attrs[k].name; k++)
        len += strlen(sig->attrs[k].name) + 1 +
               (sig->attrs[k].help ? strlen(sig->attrs[k].help) + 1 : 0);
    reg_entry *e = malloc(sizeof *e + len);
    if (!e)
        return NULL;
    memset(e, 0, sizeof *e);
    e->t = *sig;
    char *p = e->strings;
    e->t.name = put(&p, sig->name);
    e->t.summary = sig->summary ? put(&p, sig->summary) : NULL;
    for (int k = 0; k < BATON_MAX_ATTR_SPECS && sig->attrs[k].name; k++) {
        e->t.attrs[k].name = put(&p, sig->attrs[k].name);
        e->t.attrs[k].help = sig->attrs[k].help ? put(&p, sig->attrs[k].help) : NULL;
    }
    memset(e->t.impls, 0, sizeof e->t.impls);
    for (int i = 0; i < n_impls; i++) {
        e->t.impls[i] = impls[i];
        if (impls[i].delegate) {
            e->ifaces[i] = *impls[i].delegate;
            e->t.impls[i].delegate = &e->ifaces[i];
        }
    }
    e->t.n_impls = n_impls;
    for (int i = 0; prev && i < n_impls; i++)
        for (int k = 0; k < prev->n_impls; k++)
            if (prev->impls[k].device == impls[i].device && impls[i].kernel &&
                prev->impls[k].kernel == impls[i].kernel) {
                e->tune[i] = ((const reg_entry *)prev)->tune[k];
                e->prepare[i] = ((const reg_entry *)prev)->prepare[k];
                e->errors[i] = ((const reg_entry *)prev)->errors[k];
            }
    return &e->t;
}

/* Makes room for one more pointer in *arr, so that the commit that follows cannot fail. */
static int reserve(baton_target ***arr, int n, int *cap)
{
    if (n < *cap)
        return 0;
    int ncap = *cap ? *cap * 2 : 16;
    baton_target **na = realloc(*arr, (size_t)ncap * sizeof *na);
    if (!na)
        return BATON_ENOMEM;
    *arr = na;
    *cap = ncap;
    return 0;
}

/* Puts `e` in slot i (or at the end when i == reg->n), retiring what was there. Cannot fail:
 * the caller reserved the room. */
static void commit(baton_registry *reg, int i, baton_target *e)
{
    if (i == reg->n) {
        reg->targets[reg->n++] = e;
        return;
    }
    reg->retired[reg->n_retired++] = reg->targets[i];
    reg->targets[i] = e;
}

static int out_of_memory(baton_error *err, const char *fn, const baton_target *t)
{
    char name[80];
    return baton__err_set(err, BATON_ENOMEM, "%s: target '%s': out of memory", fn,
                          shown(t->name, name, sizeof name));
}

/* What add and replace both do first: the caller's target read at this library's size, then
 * checked; `full` and `ifaces` hold the copy. */
static int read_checked(const char *fn, const baton_registry *reg, const baton_target *t,
                        baton_target *full, baton_delegate_iface *ifaces, baton_error *err)
{
    if (!reg || !t)
        return baton__err_set(err, BATON_EINVAL, "%s: a registry and a target are required", fn);
    int rc = baton__target_read(fn, t, full, ifaces, err);
    return rc ? rc : check_target(fn, full, err);
}

int baton_registry_add(baton_registry *reg, const baton_target *t, baton_error *err)
{
    err_clear(err);
    static const char fn[] = "baton_registry_add";
    baton_target full; /* t at this library's size (abi.c) */
    baton_delegate_iface ifaces[BATON_MAX_IMPLS];
    int rc = read_checked(fn, reg, t, &full, ifaces, err);
    if (rc)
        return rc;
    t = &full;
    int i = find_index(reg, t->name);
    if (i < 0) {
        baton_target *e = NULL;
        if (reserve(&reg->targets, reg->n, &reg->cap) ||
            !(e = entry_build(t, t->impls, t->n_impls, NULL)))
            return out_of_memory(err, fn, t);
        commit(reg, reg->n, e);
        return 0;
    }
    /* The name is taken: only new device kinds for the very same signature may join it. */
    const baton_target *have = reg->targets[i];
    char why[128];
    if (signature_diff(have, t, why, sizeof why))
        return refuse(err, fn, t,
                      "already registered with another signature (%s); implementations can be "
                      "added to a registered target only with the same kind, counts, check(), "
                      "pack() and attribute specs (start from a copy of baton_registry_find()'s "
                      "result and change impls), or override it with baton_registry_replace()",
                      why);
    if (have->user != t->user)
        return refuse(err, fn, t,
                      "already registered with another user pointer; one target has one user "
                      "pointer for all its implementations: register these under another name, "
                      "or override the target with baton_registry_replace()");
    baton_target_impl all[BATON_MAX_IMPLS];
    int n = have->n_impls;
    memcpy(all, have->impls, (size_t)n * sizeof *all);
    for (int k = 0; k < t->n_impls; k++) {
        if (baton_target_impl_for(have, t->impls[k].device))
            return refuse(err, fn, t,
                          "already has a %s implementation; register implementations only for "
                          "device kinds it lacks, or override it with baton_registry_replace()",
                          kind_name(t->impls[k].device));
        if (n == BATON_MAX_IMPLS)
            return refuse(err, fn, t,
                          "has %d implementations and this adds %d: at most %d per target",
                          have->n_impls, t->n_impls, BATON_MAX_IMPLS);
        all[n++] = t->impls[k];
    }
    baton_target *e = NULL;
    if (reserve(&reg->retired, reg->n_retired, &reg->cap_retired) ||
        !(e = entry_build(have, all, n, have)))
        return out_of_memory(err, fn, t);
    commit(reg, i, e);
    return 0;
}

int baton_registry_replace(baton_registry *reg, const baton_target *t, baton_error *err)
{
    err_clear(err);
    static const char fn[] = "baton_registry_replace";
    baton_target full; /* t at this library's size (abi.c) */
    baton_delegate_iface ifaces[BATON_MAX_IMPLS];
    int rc = read_checked(fn, reg, t, &full, ifaces, err);
    if (rc)
        return rc;
    t = &full;
    int i = find_index(reg, t->name);
    if (i < 0) {
        char name[80];
        return baton__err_set(err, BATON_ENOENT,
                              "%s: no target named '%s' is registered, so there is nothing to "
                              "replace; add a new target with baton_registry_add()",
                              fn, shown(t->name, name, sizeof name));
    }
    baton_target *e = NULL;
    if (reserve(&reg->retired, reg->n_retired, &reg->cap_retired) ||
        !(e = entry_build(t, t->impls, t->n_impls, reg->targets[i])))
        return out_of_memory(err, fn, t);
    commit(reg, i, e);
    return 0;
}

kernel_tune_fn baton__registry_tuner(const baton_target *t, baton_device_kind kind)
{
    for (int k = 0; t && k < t->n_impls; k++)
        if (t->impls[k].device == kind)
            return ((const reg_entry *)t)->tune[k];
    return NULL;
}

kernel_error_fn baton__registry_errors(const baton_target *t, baton_device_kind kind)
{
    for (int k = 0; t && k < t->n_impls; k++)
        if (t->impls[k].device == kind)
            return ((const reg_entry *)t)->errors[k];
    return NULL;
}

kernel_prepare_fn baton__registry_preparer(const baton_target *t, baton_device_kind kind)
{
    for (int k = 0; t && k < t->n_impls; k++)
        if (t->impls[k].device == kind)
            return ((const reg_entry *)t)->prepare[k];
    return NULL;
}

const baton_target *baton_registry_find(const baton_registry *reg, const char *name)
{
    if (!reg || !name)
        return NULL;
    int i = find_index(reg, name);
    return i < 0 ? NULL : reg->targets[i];
}

int baton_registry_count(const baton_registry *reg)
{
    return reg ? reg->n : 0;
}

const baton_target *baton_registry_at(const baton_registry *reg, int i)
{
    if (!reg || i < 0 || i >= reg->n)
        return NULL;
    return reg->targets[i];
}

const baton_target_impl *baton_target_impl_for(const baton_target *t, baton_device_kind kind)
{
    if (!t)
        return NULL;
    for (int i = 0; i < t->n_impls; i++)
        if (t->impls[i].device == kind)
            return &t->impls[i];
    return NULL;
}
