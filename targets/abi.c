/* abi.c: a caller's baton_target and delegate tables, read by their struct_size (core/abi.h), so
 * that a target table compiled against an older baton.h registers with its missing fields at
 * their defaults, and one from a newer header is refused when it sets a field this library does
 * not know. */
#include <stdio.h>
#include <string.h>

#include "core/abi.h"
#include "targets/registry.h"

/* Every field, in order: a field added to these structs is added here too. */
static const abi_field target_fields[] = {
    ABI_FIELD(baton_target, struct_size), ABI_FIELD(baton_target, name),
    ABI_FIELD(baton_target, kind),        ABI_FIELD(baton_target, n_inputs),
    ABI_FIELD(baton_target, n_outputs),   ABI_FIELD(baton_target, summary),
    ABI_FIELD(baton_target, attrs),       ABI_FIELD(baton_target, check),
    ABI_FIELD(baton_target, pack),        ABI_FIELD(baton_target, impls),
    ABI_FIELD(baton_target, n_impls),     ABI_FIELD(baton_target, user),
    ABI_FIELD(baton_target, aliases),     ABI_FIELD(baton_target, n_aliases),
};

static const abi_field iface_fields[] = {
    ABI_FIELD(baton_delegate_iface, struct_size), ABI_FIELD(baton_delegate_iface, init),
    ABI_FIELD(baton_delegate_iface, execute),     ABI_FIELD(baton_delegate_iface, destroy),
    ABI_FIELD(baton_delegate_iface, capturable),  ABI_FIELD(baton_delegate_iface, memory),
};

#define N_FIELDS(a) ((int)(sizeof(a) / sizeof(a)[0]))

int baton__target_read(const char *fn, const baton_target *in, baton_target *out,
                       baton_delegate_iface ifaces[BATON_MAX_IMPLS], baton_error *err)
{
    char what[120];
    memset(out, 0, sizeof *out);
    snprintf(what, sizeof what, "%s: the target table", fn);
    int rc = baton__abi_read(out, sizeof *out, in, target_fields, N_FIELDS(target_fields), what,
                             "baton_target", err);
    if (rc)
        return rc;
    /* The delegate tables too: the registry copies them at this library's size. An n_impls out
     * of range is the registry's to refuse; only the entries that exist are read here. */
    int n = out->n_impls < 0 ? 0 : out->n_impls > BATON_MAX_IMPLS ? BATON_MAX_IMPLS : out->n_impls;
    for (int i = 0; i < n; i++) {
        if (!out->impls[i].delegate)
            continue;
        memset(&ifaces[i], 0, sizeof ifaces[i]);
        snprintf(what, sizeof what, "%s: target '%.64s': impls[%d].delegate", fn,
                 out->name ? out->name : "(NULL)", i);
        rc = baton__abi_read(&ifaces[i], sizeof ifaces[i], out->impls[i].delegate, iface_fields,
                             N_FIELDS(iface_fields), what, "baton_delegate_iface", err);
        if (rc)
            return rc;
        out->impls[i].delegate = &ifaces[i];
    }
    return 0;
}
