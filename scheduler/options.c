/* options.c: the defaults of baton_options, in one place so that the CLI, the examples and every
 * embedder start from the same values, and the reading of a caller's options whatever
 * baton.h it was built against (struct_size, core/abi.h). */
#include <string.h>

#include "core/abi.h"
#include "scheduler/runtime.h"

void baton_options_init(baton_options *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof *opts);
    opts->struct_size = sizeof *opts;
    opts->mode = BATON_SYNC_GRAPH;
    opts->gpu = BATON_GPU_AUTO;
}

/* Every field, in order. A field added to baton_options is added here, or callers cannot set it. */
static const abi_field options_fields[] = {
    ABI_FIELD(baton_options, struct_size), ABI_FIELD(baton_options, mode),
    ABI_FIELD(baton_options, gpu),         ABI_FIELD(baton_options, fallback_is_error),
    ABI_FIELD(baton_options, quiet),       ABI_FIELD(baton_options, sim_delay_us),
    ABI_FIELD(baton_options, disable_pdl), ABI_FIELD(baton_options, disable_queue_ahead),
    ABI_FIELD(baton_options, arenas),      ABI_FIELD(baton_options, n_arenas),
    ABI_FIELD(baton_options, streams),     ABI_FIELD(baton_options, n_streams),
    ABI_FIELD(baton_options, no_autotune), ABI_FIELD(baton_options, cpu_threads),
    ABI_FIELD(baton_options, cpu_pool),    ABI_FIELD(baton_options, allow_unset_inputs),
    ABI_FIELD(baton_options, rank),        ABI_FIELD(baton_options, world),
    ABI_FIELD(baton_options, rendezvous),  ABI_FIELD(baton_options, rendezvous_timeout_ms),
};

int baton__options_read(const baton_options *in, baton_options *out, baton_error *err)
{
    baton_options_init(out);
    if (!in)
        return 0;
    return baton__abi_read(out, sizeof *out, in, options_fields,
                           (int)(sizeof options_fields / sizeof options_fields[0]),
                           "baton_runtime_create: options (baton_options_init() sets struct_size)",
                           "baton_options", err);
}
