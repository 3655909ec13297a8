/* fuzz_plan_opaque.h: the opaque fuzz target's pieces that its bounded mutation driver
 * (mutate_opaque.c) shares. */
#ifndef BATON_TESTS_FUZZ_PLAN_OPAQUE_H
#define BATON_TESTS_FUZZ_PLAN_OPAQUE_H

#include <stddef.h>
#include <stdint.h>

#include "baton/baton.h"

int fuzz_opaque_seed_count(void);
/* Seed plan k's target ("delegate:<name>" for a delegate), into buf. */
const char *fuzz_opaque_target(int k, char *buf, size_t cap);
/* Seed plan k with `opaque` as its step's descriptor (or none), malloc'd JSON text. */
char *fuzz_opaque_plan(int k, const uint8_t *opaque, size_t len, int with_opaque);
baton_registry *fuzz_opaque_registry(void);
/* Loads seed plan data[0] with data[1..] as its opaque, runs it if it loads: 1 when it loaded,
 * 0 when refused, -1 when the input is empty. Aborts on a broken property. */
int fuzz_opaque_one(const uint8_t *data, size_t size);

#endif
