/* fuzz_plan_opaque.c: libFuzzer target for a plan's "opaque" descriptor (issue 38: a descriptor
 * saying more elements than the tensors hold wrote past the arena). The input's first byte picks
 * one of the valid one-step plans below (one per built-in target that reads a descriptor, the
 * decoder's and the gemm delegates' included); the rest are the step's "opaque" bytes. The plan
 * must load or fail with a message; one that loads is run on the CPU, and must run or fail with a
 * message, and never touch memory outside its buffers (ASan, whose redzones surround every arena
 * and buffer).
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DBATON_CUDA=OFF -DBATON_FUZZ=ON -DBATON_SANITIZE=ON
 *        cmake --build build-fuzz --target fuzz_plan_opaque
 * Run:   build-fuzz/fuzz_plan_opaque -max_total_time=600 tests/fuzz/opaque_corpus
 * CI runs tests/fuzz/mutate_opaque.c (a bounded mutation driver over the same function) under
 * ASan as the ctest fuzz_plan_opaque. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_plan_opaque.h"

static baton_registry *registry;

/* The seed plans: each step's tensors, target, inputs, outputs and extra keys, split at '|'. */
// clang-format off
#define T(n, dt, sh, role)                                                                         \
    "{\"name\": \"" n "\", \"dtype\": \"" dt "\", \"shape\": " sh ", \"role\": \"" role "\"}"
static const char *const seeds[] = {
    "[" T("x", "f32", "[4]", "input") "," T("y", "f32", "[4]", "output")
        "]|copy|\"x\"|\"y\"|",
    "[" T("a", "f32", "[2, 3]", "input") "," T("b", "f32", "[3]", "input") ","
        T("y", "f32", "[2, 3]", "output") "]|add|\"a\", \"b\"|\"y\"|",
    "[" T("a", "i32", "[3, 2]", "input") "," T("b", "i32", "[3, 2]", "input") ","
        T("y", "i32", "[3, 2]", "output") "]|mul|\"a\", \"b\"|\"y\"|",
    "[" T("x", "f16", "[5]", "input") "," T("y", "f16", "[5]", "output")
        "]|add_scalar|\"x\"|\"y\"|, \"attrs\": {\"value\": 2}",
    "[" T("x", "bf16", "[2, 4]", "input") "," T("y", "bf16", "[2, 4]", "output")
        "]|softshrink|\"x\"|\"y\"|",
    "[" T("x", "f32", "[3, 5]", "input") "," T("y", "i64", "[3]", "output")
        "]|argmax|\"x\"|\"y\"|",
    "[" T("x", "f32", "[4, 8]", "input") "," T("w", "bf16", "[8]", "input") ","
        T("y", "bf16", "[4, 8]", "output") "," T("iv", "f32", "[4]", "output")
        "]|rms_norm_fwd|\"x\", \"w\"|\"y\", \"iv\"|",
    "[" T("g", "f32", "[3, 8]", "input") "," T("iv", "f32", "[3]", "input") ","
        T("x", "f32", "[3, 8]", "input") "," T("w", "f32", "[8]", "input") ","
        T("gx", "f32", "[3, 8]", "output") "," T("gw", "f32", "[8]", "output") ","
        T("pg", "f32", "[2, 8]", "output")
        "]|rms_norm_bwd|\"g\", \"iv\", \"x\", \"w\"|\"gx\", \"gw\", \"pg\"|",
    "[" T("pg", "f32", "[2, 8]", "input") "," T("w", "f16", "[8]", "input") ","
        T("gw", "f16", "[8]", "output") "]|rms_norm_grad_weight|\"pg\", \"w\"|\"gw\"|",
    /* the decoder's targets (issue 41); integer inputs (ids, positions, step) are 0 to 2 */
    "[" T("ids", "i64", "[3]", "input") "," T("table", "f32", "[5, 8]", "input") ","
        T("y", "f32", "[3, 8]", "output") "]|embedding|\"ids\", \"table\"|\"y\"|",
    "[" T("x", "bf16", "[2, 16]", "input") "," T("pos", "i32", "[2]", "input") ","
        T("f", "f32", "[4]", "input") "," T("y", "bf16", "[2, 16]", "output")
        "]|rope|\"x\", \"pos\", \"f\"|\"y\"|, \"attrs\": {\"head_dim\": 8}",
    "[" T("c", "f32", "[8, 8]", "state") "," T("new", "f32", "[2, 8]", "input") ","
        T("pos", "i64", "[2]", "input") "]|kv_cache_update|\"c\", \"new\", \"pos\"|\"c\"|",
    "[" T("q", "f32", "[2, 16]", "input") "," T("k", "f32", "[8, 8]", "input") ","
        T("v", "f32", "[8, 8]", "input") "," T("pos", "i64", "[2]", "input") ","
        T("y", "f32", "[2, 16]", "output")
        "]|attention|\"q\", \"k\", \"v\", \"pos\"|\"y\"|, \"attrs\": {\"head_dim\": 8, "
        "\"n_heads\": 2, \"n_kv_heads\": 1}",
    "[" T("a", "bf16", "[3, 8]", "input") "," T("b", "bf16", "[3, 8]", "input") ","
        T("y", "bf16", "[3, 8]", "output") "]|silu_mul|\"a\", \"b\"|\"y\"|",
    "[" T("x", "f16", "[7]", "input") "," T("y", "f16", "[7]", "output") "]|silu|\"x\"|\"y\"|",
    "[" T("x", "f32", "[2, 5]", "input") "," T("y", "f32", "[2, 5]", "output")
        "]|gelu|\"x\"|\"y\"|, \"attrs\": {\"approximate\": true}",
    "[" T("x", "f32", "[3, 9]", "input") "," T("y", "f32", "[3, 9]", "output")
        "]|softmax|\"x\"|\"y\"|",
    "[" T("x", "f32", "[6]", "input") "," T("y", "bf16", "[6]", "output") "]|cast|\"x\"|\"y\"|",
    "[" T("l", "f32", "[2, 11]", "input") "," T("t", "i64", "[1]", "input") ","
        T("y", "i64", "[2]", "output")
        "]|sample|\"l\", \"t\"|\"y\"|, \"attrs\": {\"temperature\": 0.7, \"top_k\": 3, "
        "\"top_p\": 0.9, \"seed\": 5}",
    "[" T("gu", "bf16", "[2, 16]", "input") "," T("y", "bf16", "[2, 8]", "output")
        "]|swiglu|\"gu\"|\"y\"|",
    "[" T("qkv", "f32", "[2, 32]", "input") "," T("pos", "i64", "[2]", "input") ","
        T("f", "f32", "[4]", "input") "," T("k", "f32", "[8, 8]", "state") ","
        T("v", "f32", "[8, 8]", "state") "," T("q", "f32", "[2, 16]", "output")
        "]|rope_cache_update|\"qkv\", \"pos\", \"f\", \"k\", \"v\"|\"q\", \"k\", \"v\"|, "
        "\"attrs\": {\"head_dim\": 8, \"n_heads\": 2, \"n_kv_heads\": 1}",
    "[" T("x", "f32", "[2, 8]", "input") "," T("g", "f32", "[8]", "input") ","
        T("w", "f32", "[4, 8]", "input") "," T("y", "f32", "[2, 4]", "output")
        "]|rms_norm_gemm|\"x\", \"g\", \"w\"|\"y\"|, \"attrs\": {\"eps\": 1e-5}",
    "[" T("gu", "bf16", "[2, 16]", "input") "," T("w", "bf16", "[4, 8]", "input") ","
        T("c", "bf16", "[2, 4]", "input") "," T("y", "bf16", "[2, 4]", "output")
        "]|swiglu_gemm_add|\"gu\", \"w\", \"c\"|\"y\"|",
    /* delegates: the target's name after "delegate:" */
    "[" T("a", "f32", "[3, 8]", "input") "," T("b", "f32", "[4, 8]", "input") ","
        T("y", "f32", "[3, 4]", "output")
        "]|delegate:gemm|\"a\", \"b\"|\"y\"|, \"attrs\": {\"trans_b\": true}",
    "[" T("a", "bf16", "[2, 8]", "input") "," T("b", "bf16", "[8, 4]", "input") ","
        T("c", "bf16", "[2, 4]", "input") "," T("y", "bf16", "[2, 4]", "output")
        "]|delegate:gemm_add|\"a\", \"b\", \"c\"|\"y\"|",
};
#undef T
// clang-format on

int fuzz_opaque_seed_count(void)
{
    return (int)(sizeof seeds / sizeof seeds[0]);
}

/* The seed's fields, split at '|': tensors, target, inputs, outputs, extra step keys. */
static void seed_fields(int k, char f[5][1024])
{
    const char *p = seeds[k];
    for (int i = 0; i < 5; i++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        snprintf(f[i], 1024, "%.*s", (int)n, p);
        p = bar ? bar + 1 : p + n;
    }
}

const char *fuzz_opaque_target(int k, char *buf, size_t cap)
{
    char f[5][1024];
    seed_fields(k, f);
    snprintf(buf, cap, "%s", f[1]);
    return buf;
}

char *fuzz_opaque_plan(int k, const uint8_t *opaque, size_t len, int with_opaque)
{
    char f[5][1024], hex[2 * 256 + 1];
    if (len > 256)
        len = 256;
    for (size_t i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", opaque[i]);
    hex[2 * len] = 0;
    seed_fields(k, f);
    const int delegate = strncmp(f[1], "delegate:", 9) == 0;
    const size_t cap = sizeof f + sizeof hex + 512; /* the fields, the hex and the frame */
    char *text = malloc(cap);
    if (!text)
        return NULL;
    int n = snprintf(
        text, cap,
        "{\"format\": \"baton.plan\", \"version\": 1, \"name\": \"fuzz\", \"tensors\": %s, "
        "\"steps\": [{\"name\": \"s\", \"%s\": \"%s\", \"device\": \"cpu\", \"inputs\": "
        "[%s], \"outputs\": [%s]%s%s%s%s]}",
        f[0], delegate ? "delegate" : "kernel", f[1] + (delegate ? 9 : 0), f[2], f[3], f[4],
        with_opaque ? ", \"opaque\": \"" : "", with_opaque ? hex : "", with_opaque ? "\"}" : "}");
    if (n < 0 || (size_t)n >= cap) {
        free(text);
        return NULL;
    }
    return text;
}

baton_registry *fuzz_opaque_registry(void)
{
    if (!registry && baton_registry_create(&registry) != 0) {
        fprintf(stderr, "fuzz_plan_opaque: cannot create the registry\n");
        abort();
    }
    return registry;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_opaque_registry();
    return 0;
}

int fuzz_opaque_one(const uint8_t *data, size_t size)
{
    if (size < 1)
        return -1;
    baton_registry *reg = fuzz_opaque_registry();
    int k = data[0] % fuzz_opaque_seed_count();
    char *text = fuzz_opaque_plan(k, data + 1, size - 1, 1);
    if (!text)
        return -1;
    baton_plan *plan = NULL;
    baton_error err;
    int rc = baton_plan_load_string(reg, text, strlen(text), "fuzz.json", NULL, &plan, &err);
    free(text);
    if (rc) {
        if (plan || err.code != rc || !memchr(err.message, 0, sizeof err.message) ||
            !err.message[0])
            abort(); /* a failed load leaves no plan and says why */
        return 0;
    }
    baton_options o;
    baton_options_init(&o);
    o.quiet = 1;
    o.gpu = BATON_GPU_CPU;
    baton_runtime *rt = NULL;
    rc = baton_runtime_create(plan, &o, &rt, &err);
    if (rc == 0) {
        int n = baton_plan_tensor_count(plan);
        for (int t = 0; t < n; t++) {
            baton_tensor_info ti;
            if (baton_plan_tensor_info(plan, t, &ti) || ti.role != BATON_ROLE_INPUT)
                continue;
            void *buf = calloc(1, ti.nbytes ? ti.nbytes : 1);
            if (!buf)
                abort();
            /* integer inputs are mostly indices (ids, positions, a step): 0 to 2 are in range of
             * every seed's tables and caches, so a run goes past the index checks into the
             * kernels the descriptor sizes */
            const int64_t n = baton_tensor_desc_numel(&ti.desc);
            if (ti.desc.dtype == BATON_DTYPE_I32 || ti.desc.dtype == BATON_DTYPE_I64)
                baton_fill_uniform(buf, ti.desc.dtype, n, 7, 0, 2.99);
            else
                baton_fill_normal(buf, ti.desc.dtype, n, 7, 0, 1);
            baton_runtime_set_input(rt, ti.name, buf, ti.nbytes, &err);
            free(buf);
        }
        rc = baton_runtime_run(rt, &err);
        if (rc && !err.message[0])
            abort(); /* a failed run says why */
        baton_runtime_destroy(rt);
    }
    baton_plan_free(plan);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_opaque_one(data, size);
    return 0;
}
