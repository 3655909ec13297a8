/* cublaslt_api.h: cuBLASLt as a table of function pointers, loaded with dlopen when the first
 * gemm step is prepared on a GPU. libbaton then needs no libcublasLt at load time: a 540 MB
 * library whose relocations alone cost ~200 MB of resident memory in every process, GPU or not,
 * and which a CPU-only machine does not have. */
#ifndef BATON_DELEGATES_CUBLASLT_API_H
#define BATON_DELEGATES_CUBLASLT_API_H

#include <stddef.h>

#include <cublasLt.h>

/* Every cuBLASLt call baton makes. The table's members have the header's own prototypes
 * (__typeof__), so a call through the table is checked exactly as a direct call. */
#define LT_API_CALLS(X)                                                                            \
    X(cublasLtGetVersion)                                                                          \
    X(cublasLtGetStatusName)                                                                       \
    X(cublasLtGetStatusString)                                                                     \
    X(cublasLtCreate)                                                                              \
    X(cublasLtDestroy)                                                                             \
    X(cublasLtMatmulDescCreate)                                                                    \
    X(cublasLtMatmulDescDestroy)                                                                   \
    X(cublasLtMatmulDescSetAttribute)                                                              \
    X(cublasLtMatrixLayoutCreate)                                                                  \
    X(cublasLtMatrixLayoutDestroy)                                                                 \
    X(cublasLtMatrixLayoutSetAttribute)                                                            \
    X(cublasLtMatmulPreferenceCreate)                                                              \
    X(cublasLtMatmulPreferenceDestroy)                                                             \
    X(cublasLtMatmulPreferenceSetAttribute)                                                        \
    X(cublasLtMatmulAlgoGetHeuristic)                                                              \
    X(cublasLtMatmul)

typedef struct lt_api {
#define LT_API_MEMBER(fn) __typeof__(fn) *fn;
    LT_API_CALLS(LT_API_MEMBER)
#undef LT_API_MEMBER
} lt_api;

/* The library loaded when BATON_CUBLASLT is unset: the cuBLASLt major version baton was
 * compiled against ("libcublasLt.so.13"), found the way the dynamic linker finds libraries. */
#define LT_API_STR_(x)     #x
#define LT_API_STR(x)      LT_API_STR_(x)
#define LT_API_DEFAULT_LIB "libcublasLt.so." LT_API_STR(CUBLAS_VER_MAJOR)

/* The process's cuBLASLt, loaded on the first call (thread-safe) from $BATON_CUBLASLT or
 * LT_API_DEFAULT_LIB and kept for the life of the process. NULL when it cannot be loaded; then
 * msg holds the reason, naming the library and what to do. Later calls give the same answer. */
const lt_api *baton__lt_api_get(char *msg, size_t msg_len);

/* Loads cuBLASLt from `path` into *api (no caching; baton__lt_api_get uses it). Returns 0, or -1
 * with the reason in msg: the library is missing, lacks a call, or has another major version. */
int baton__lt_api_open(const char *path, lt_api *api, char *msg, size_t msg_len);

#endif /* BATON_DELEGATES_CUBLASLT_API_H */
