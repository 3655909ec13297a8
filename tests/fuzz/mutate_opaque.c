/* mutate_opaque.c: a bounded, seeded mutation driver for fuzz_plan_opaque (no libFuzzer needed),
 * run by ctest as fuzz_plan_opaque and so under ASan in CI: for BATON_FUZZ_SECONDS (default 20)
 * it takes the descriptor that baton packs for each seed plan, mutates it (bit flips; a field set
 * to a boundary value: 0, -1, n +- 1, 2^20, 2^31 - 1, INT64_MAX, dtype codes, huge, NaN and
 * infinite doubles; the length cut or grown; RMSNorm's descriptor rewritten in the JAX tutorial's
 * 32-byte layout first) and hands it to the target. The unmutated descriptor must load, and at
 * most a quarter of a seed's mutated ones may (more: its check ignores fields). Prints
 * the seed (BATON_TEST_SEED replays a run) and "N passed, 0 failed".
 *   mutate_opaque                        the bounded run
 *   mutate_opaque --write-corpus DIR     the seed inputs, for libFuzzer's corpus */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/descriptors.h"
#include "plan/plan_internal.h"
#include "tests/fuzz/fuzz_plan_opaque.h"

static uint64_t rng_state;

static uint64_t next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct seed_desc {
    uint8_t bytes[256];
    size_t len;
} seed_desc;

/* The descriptor baton packs for seed k (its plan loaded without "opaque"). */
static void packed(int k, seed_desc *d)
{
    char *text = fuzz_opaque_plan(k, NULL, 0, 0);
    baton_plan *plan = NULL;
    baton_error err;
    if (!text || baton_plan_load_string(fuzz_opaque_registry(), text, strlen(text), "seed.json",
                                        NULL, &plan, &err)) {
        fprintf(stderr, "mutate_opaque: seed plan %d does not load: %s\n", k, err.message);
        exit(1);
    }
    d->len = plan->steps[0].opaque_len;
    memcpy(d->bytes, plan->steps[0].opaque, d->len);
    baton_plan_free(plan);
    free(text);
}

static void mutate(const seed_desc *in, uint8_t *out, size_t *len)
{
    memcpy(out, in->bytes, in->len);
    *len = in->len;
    if (in->len == sizeof(baton_rms_norm_desc) && next() % 3 == 0) {
        /* the tutorial's layout of the same fields */
        baton_rms_norm_desc r;
        baton_rms_norm_tutorial_desc t;
        memcpy(&r, in->bytes, sizeof r);
        memset(&t, 0, sizeof t);
        t.n1 = (int32_t)r.n1;
        t.n2 = (int32_t)r.n2;
        t.eps = r.eps;
        t.x_type = r.x_dtype - 1;
        t.w_type = r.w_dtype - 1;
        t.part_grad_size = (int32_t)r.part_grad_size;
        memcpy(out, &t, sizeof t);
        *len = sizeof t;
    }
    int rounds = 1 + (int)(next() % 3);
    for (int r = 0; r < rounds; r++) {
        uint64_t what = next() % 10;
        if (what < 3 && *len) { /* flip a bit */
            size_t i = next() % *len;
            out[i] ^= (uint8_t)(1u << (next() % 8));
        } else if (what < 8 && *len >= 4) { /* a field to a boundary value */
            static const int64_t ints[] = {
                0,       1,         -1,        2,         3,         4,    5,         6,    7,
                1 << 20, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, 4097, 1LL << 40, -4096};
            size_t off = (next() % (*len / 4)) * 4;
            if (next() % 2 && off + 8 <= *len) {
                if (next() % 4 == 0) {
                    static const double dbl[] = {1e300, -1e300, 1e39, 65504.0 * 2, -1.0, 0.0};
                    double v = next() % 3 == 0   ? NAN
                               : next() % 2 == 0 ? INFINITY
                                                 : dbl[next() % (sizeof dbl / sizeof dbl[0])];
                    memcpy(out + off, &v, 8);
                } else {
                    int64_t v = ints[next() % (sizeof ints / sizeof ints[0])];
                    if (next() % 4 == 0) { /* the field's own value, off by one */
                        memcpy(&v, out + off, 8);
                        /* in unsigned arithmetic: the field may hold INT64_MIN or INT64_MAX */
                        v = (int64_t)((uint64_t)v + (next() % 2 ? 1u : UINT64_MAX));
                    }
                    memcpy(out + off, &v, 8);
                }
            } else {
                int32_t v = (int32_t)ints[next() % (sizeof ints / sizeof ints[0])];
                memcpy(out + off, &v, 4);
            }
        } else { /* cut or grow */
            static const size_t lens[] = {0, 1, 8, 20, 24, 31, 32, 33, 40, 47, 48, 56, 256};
            size_t n = lens[next() % (sizeof lens / sizeof lens[0])];
            for (size_t i = *len; i < n; i++)
                out[i] = (uint8_t)next();
            *len = n;
        }
    }
}

/* --write-corpus DIR: the seed plans' own inputs, the libFuzzer target's starting corpus. */
static int write_corpus(const char *dir, const seed_desc *descs, int n)
{
    for (int k = 0; k < n; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/seed-%02d", dir, k);
        FILE *f = fopen(path, "wb");
        uint8_t kb = (uint8_t)k;
        if (!f || fwrite(&kb, 1, 1, f) != 1 ||
            fwrite(descs[k].bytes, 1, descs[k].len, f) != descs[k].len || fclose(f)) {
            fprintf(stderr, "mutate_opaque: cannot write %s\n", path);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *s = getenv("BATON_TEST_SEED");
    uint64_t seed = s && *s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)clock();
    const char *t = getenv("BATON_FUZZ_SECONDS");
    double seconds = t && *t ? atof(t) : 20.0;
    rng_state = seed;
    const int n_seeds = fuzz_opaque_seed_count();
    seed_desc descs[64];
    for (int k = 0; k < n_seeds; k++)
        packed(k, &descs[k]);
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0)
        return write_corpus(argv[2], descs, n_seeds);
    printf("fuzz_plan_opaque: seed %llu (BATON_TEST_SEED=%llu replays it), %.0f s\n",
           (unsigned long long)seed, (unsigned long long)seed, seconds);
    fflush(stdout);
    long runs = 0, loaded = 0, refused = 0, tried[64] = {0}, took[64] = {0};
    uint8_t in[1 + 256];
    double t0 = now_s();
    do {
        for (int b = 0; b < 64; b++, runs++) {
            int k = (int)(next() % (uint64_t)n_seeds);
            size_t len;
            in[0] = (uint8_t)k;
            int plain = next() % 8 == 0;
            if (plain) {
                memcpy(in + 1, descs[k].bytes, descs[k].len);
                len = descs[k].len;
            } else {
                mutate(&descs[k], in + 1, &len);
            }
            int r = fuzz_opaque_one(in, len + 1);
            if (plain && r != 1) {
                fprintf(stderr,
                        "fuzz_plan_opaque: seed plan %d refuses its own packed "
                        "descriptor\n",
                        k);
                printf("%ld passed, 1 failed\n", runs);
                return 1;
            }
            r == 1 ? loaded++ : refused++;
            if (!plain) {
                tried[k]++;
                took[k] += r == 1;
            }
        }
    } while (now_s() - t0 < seconds);
    printf("fuzz_plan_opaque: %ld inputs in %.1f s: %ld loaded and ran, %ld refused\n", runs,
           now_s() - t0, loaded, refused);
    /* A check that compares every field with the step refuses nearly every mutation: those that
     * load change nothing, or a field no tensor or attribute pins (0.5-16 % of a seed's). Where a
     * quarter load, the target's check ignores bytes a mutation changed (the decoder's unused
     * fields and gemm's whole descriptor did: 28-100 %). */
    int lax = 0;
    for (int k = 0; k < n_seeds; k++) {
        char name[64];
        if (tried[k] >= 200 && took[k] * 4 > tried[k]) {
            fprintf(stderr,
                    "fuzz_plan_opaque: seed plan %d (%s) loaded %ld of %ld mutated descriptors: "
                    "its check ignores fields; compare each with the step's tensors and "
                    "attributes, as rms_norm's does\n",
                    k, fuzz_opaque_target(k, name, sizeof name), took[k], tried[k]);
            lax = 1;
        }
    }
    if (lax) {
        printf("%ld passed, 1 failed\n", runs);
        return 1;
    }
    printf("%ld passed, 0 failed\n", runs);
    return 0;
}
