/* cublaslt_algos.h: cuBLASLt's heuristic answers, kept for the life of the process. Every gemm
 * step of one shape asks the heuristic the same question (a decoder's sixteen layers hold sixteen
 * q projections) and each ask costs the host about 0.1 ms, so a prefill of a new length asked once
 * per GEMM step; with the answers kept it asks once per shape. The heuristic's answer depends only
 * on the key (the GPU, the operands' types, layouts and alignment, the workspace allowed), so a
 * kept answer is the one a new ask would give: the same algorithm, the same bits. */
#ifndef BATON_DELEGATES_CUBLASLT_ALGOS_H
#define BATON_DELEGATES_CUBLASLT_ALGOS_H

#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One question: C[M,N] = op(A) op(B) in `dtype` (a baton_dtype) with `flags` (BATON_GEMM_TRANS_*)
 * on CUDA device `device`, every pointer aligned to `align` bytes, within `cap` bytes of
 * workspace. */
typedef struct lt_algo_key {
    int device, dtype, flags;
    uint32_t align;
    int64_t m, n, k;
    size_t cap;
} lt_algo_key;

typedef struct lt_algo_answer {
    int have; /* 1: algo; -1: the heuristic has none for this key */
    cublasLtMatmulAlgo_t algo;
    size_t workspace; /* what algo needs */
} lt_algo_answer;

/* The kept answer to key into *out: 1, or 0 when none is kept. Thread-safe. */
int baton__lt_algo_find(const lt_algo_key *key, lt_algo_answer *out);

/* Keeps the heuristic's answer to key (the oldest kept answer goes when the table is full) and
 * counts one ask. Thread-safe. */
void baton__lt_algo_keep(const lt_algo_key *key, const lt_algo_answer *answer);

/* How many times the process has asked the heuristic: tests read it to see that a second step of
 * one shape asks nothing. */
uint64_t baton__lt_algo_asks(void);

#ifdef __cplusplus
}
#endif

#endif /* BATON_DELEGATES_CUBLASLT_ALGOS_H */
