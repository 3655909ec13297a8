/* fuzz_plan_load.c: libFuzzer target for the plan loader. Any input must either load or fail
 * with a message; never crash, leak or read out of bounds. Plans that load also have their small
 * constants materialised, so the initialisers are fuzzed too. And the loader's own JSON parser is
 * checked against Jansson's: a syntax error (BATON_EPARSE) exactly when json_loadb rejects.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DBATON_CUDA=OFF -DBATON_FUZZ=ON -DBATON_SANITIZE=ON
 *        cmake --build build-fuzz --target fuzz_plan_load
 * Run:   build-fuzz/fuzz_plan_load -max_total_time=620 -dict=tests/fuzz/plan.dict \
 *            tests/fuzz/corpus */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "plan/plan_internal.h"

static baton_registry *registry;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (baton_registry_create(&registry) != 0) {
        fprintf(stderr, "fuzz_plan_load: cannot create the registry\n");
        return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    baton_plan *plan = NULL;
    baton_error err;
    /* npy paths resolve against the corpus's plans directory when run from the repo root */
    int rc = baton_plan_load_string(registry, (const char *)data, size, "fuzz.json",
                                    "tests/data/good", &plan, &err);
    if (rc != BATON_ENOMEM) {
        json_error_t jerr;
        json_t *j = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
        int jansson_rejects = j == NULL;
        json_decref(j);
        /* Jansson skips a NUL byte after a number or literal; baton rejects it (see load.c) */
        int known = !jansson_rejects && rc == BATON_EPARSE && memchr(data, 0, size) &&
                    strstr(err.message, "NUL byte in the text");
        if (jansson_rejects != (rc == BATON_EPARSE) && !known) {
            fprintf(stderr, "parsers disagree: baton rc %d (%s), jansson %s: %s\n", rc, err.message,
                    jansson_rejects ? "rejects" : "accepts", jansson_rejects ? jerr.text : "");
            abort();
        }
    }
    if (rc == 0) {
        if (!plan || baton_plan_step_count(plan) < 1)
            abort(); /* a loaded plan has at least one step */
        for (int i = 0; i < plan->n_tensors; i++) {
            const plan_tensor *t = &plan->tensors[i];
            /* a view's chain ends at a tensor that holds bytes, and shares its slot */
            if (plan->tensors[t->storage].view_of >= 0 ||
                plan->memory[0].offset[i] != plan->memory[0].offset[t->storage])
                abort();
            if ((t->role != BATON_ROLE_CONSTANT && t->role != BATON_ROLE_STATE) ||
                t->nbytes > (1u << 16))
                continue;
            void *buf = malloc(t->nbytes ? t->nbytes : 1);
            if (buf && baton__plan_tensor_materialize(plan, i, buf, &err) != 0 &&
                t->init.kind != INIT_NPY)
                abort(); /* only a file that changed since load may fail here */
            free(buf);
        }
        baton_plan_free(plan);
    } else {
        if (plan != NULL || err.code != rc || memchr(err.message, 0, sizeof err.message) == NULL)
            abort();
    }
    return 0;
}
