/* infer.c: the smallest useful baton program. It loads a plan, sets every input to a ramp,
 * runs the plan, and prints the first values of every output.
 *
 *   build/infer examples/plans/rfc.json [strict|boundary|graph]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/baton.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PLAN.json [strict|boundary|graph]\n", argv[0]);
        return 2;
    }
    baton_error err = {0};
    baton_registry *reg = NULL;
    baton_plan *plan = NULL;
    baton_runtime *rt = NULL;
    int status = 1;

    /* 1. A registry of kernels and delegates; embedders add their own here. */
    if (baton_registry_create(&reg) != 0)
        return 1;
    /* 2. Load, validate and analyse the plan. Errors name file:line:column and the fix. */
    if (baton_plan_load(reg, argv[1], &plan, &err) != 0) {
        fprintf(stderr, "%s\n", err.message);
        goto out;
    }
    /* 3. Prepare: arenas, constants, streams, delegate states. Runs allocate nothing. */
    baton_options opts;
    baton_options_init(&opts);
    if (argc > 2 && baton_sync_mode_parse(argv[2], &opts.mode) != 0) {
        fprintf(stderr, "unknown mode '%s'\n", argv[2]);
        goto out;
    }
    if (baton_runtime_create(plan, &opts, &rt, &err) != 0) {
        fprintf(stderr, "%s\n", err.message);
        goto out;
    }
    /* 4. Bind inputs by name: a ramp of values, converted to each input's dtype (bf16, f16,
     * integers...) with baton_convert, which rounds as baton's kernels do. */
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role != BATON_ROLE_INPUT)
            continue;
        int64_t n = baton_tensor_desc_numel(&ti.desc);
        float *ramp = malloc((size_t)(n ? n : 1) * sizeof *ramp);
        void *x = malloc(ti.nbytes ? ti.nbytes : 1);
        for (int64_t i = 0; i < n; i++)
            ramp[i] = (float)(i % 17) / 17.0f - 0.5f;
        int rc = baton_convert(x, ti.desc.dtype, ramp, BATON_DTYPE_F32, n);
        if (rc == 0)
            rc = baton_runtime_set_input(rt, ti.name, x, ti.nbytes, &err);
        free(ramp);
        free(x);
        if (rc != 0) {
            fprintf(stderr, "input %s: %s\n", ti.name, err.message);
            goto out;
        }
    }
    /* 5. Run. */
    if (baton_runtime_run(rt, &err) != 0) {
        fprintf(stderr, "run failed: %s\n", err.message);
        goto out;
    }
    /* 6. Read outputs by name, and print the first values of any dtype as doubles. */
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role != BATON_ROLE_OUTPUT)
            continue;
        void *y = malloc(ti.nbytes ? ti.nbytes : 1);
        if (baton_runtime_get_output(rt, ti.name, y, ti.nbytes, &err) == 0) {
            int64_t n = baton_tensor_desc_numel(&ti.desc);
            double first[4];
            int k = n < 4 ? (int)n : 4;
            baton_convert(first, BATON_DTYPE_F64, y, ti.desc.dtype, k);
            printf("%s (%s):", ti.name, baton_dtype_name(ti.desc.dtype));
            for (int i = 0; i < k; i++)
                printf(" %g", first[i]);
            printf("%s\n", n > 4 ? " ..." : "");
        }
        free(y);
    }
    status = 0;
out:
    baton_runtime_destroy(rt);
    baton_plan_free(plan);
    baton_registry_destroy(reg);
    return status;
}
