/* common.c: what `run` and `bench` share: loading a plan with the CLI's exit codes, binding a
 * plan's inputs from .npy files or seeded values, and the clock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

int cli_load(const cli *c, baton_registry **reg, baton_plan **plan)
{
    baton_error err = {0};
    int rc = baton_registry_create(reg);
    if (rc) {
        fprintf(stderr, "baton: %s\n", baton_strerror(rc));
        return EXIT_RUN;
    }
    rc = baton_plan_load(*reg, c->plan_path, plan, &err);
    if (rc) {
        fprintf(stderr, "%s\n", err.message);
        return rc == BATON_EIO ? EXIT_IO : EXIT_PLAN;
    }
    return 0;
}

/* Fills an unbound input with reproducible N(0, 1) values: the plan format's seeded normal, so a
 * plan constant with the same seed holds the same bits. */
static void fill_default(const baton_tensor_info *ti, void *buf, uint64_t seed)
{
    baton_fill_normal(buf, ti->desc.dtype, baton_tensor_desc_numel(&ti->desc), seed, 0.0, 1.0);
}

int cli_bind_inputs(const cli *c, baton_plan *plan, baton_runtime *rt)
{
    baton_error err = {0};
    for (int i = 0; i < c->n_in; i++)
        if (baton_plan_tensor_index(plan, c->in[i].name) < 0) {
            fprintf(stderr, "baton: --input %s: the plan has no tensor of that name\n",
                    c->in[i].name);
            return EXIT_USAGE;
        }
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role != BATON_ROLE_INPUT)
            continue;
        const char *path = NULL;
        for (int i = 0; i < c->n_in; i++)
            if (strcmp(c->in[i].name, ti.name) == 0)
                path = c->in[i].path;
        void *buf = NULL;
        if (path) {
            baton_tensor_desc d;
            if (baton_npy_read(path, &d, &buf, &err)) {
                fprintf(stderr, "baton: --input %s: %s\n", ti.name, err.message);
                return EXIT_IO;
            }
            int same = d.dtype == ti.desc.dtype &&
                       baton_tensor_desc_numel(&d) == baton_tensor_desc_numel(&ti.desc);
            if (!same) {
                fprintf(stderr,
                        "baton: --input %s: %s holds %s with %lld elements, the plan wants %s "
                        "with %lld\n",
                        ti.name, path, baton_dtype_name(d.dtype),
                        (long long)baton_tensor_desc_numel(&d), baton_dtype_name(ti.desc.dtype),
                        (long long)baton_tensor_desc_numel(&ti.desc));
                free(buf);
                return EXIT_IO;
            }
        } else {
            buf = malloc(ti.nbytes ? ti.nbytes : 1);
            if (!buf)
                return EXIT_RUN;
            fill_default(&ti, buf, (uint64_t)t + 1);
            if (!c->opts.quiet)
                fprintf(stderr, "baton: note: input '%s' not given; filled with N(0,1), seed %d\n",
                        ti.name, t + 1);
        }
        int rc = baton_runtime_set_input(rt, ti.name, buf, ti.nbytes, &err);
        free(buf);
        if (rc) {
            fprintf(stderr, "baton: %s\n", err.message);
            return EXIT_RUN;
        }
    }
    return 0;
}

int64_t cli_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
