/* options.c: the defaults of baton_options, in one place so that the CLI, the examples and every
 * embedder start from the same values. */
#include <string.h>

#include "baton/baton.h"

void baton_options_init(baton_options *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof *opts);
    opts->mode = BATON_SYNC_GRAPH;
    opts->gpu = BATON_GPU_AUTO;
}
