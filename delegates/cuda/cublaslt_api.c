/* cublaslt_api.c: loads cuBLASLt with dlopen on first use (see cublaslt_api.h). The handle is
 * process-wide and never closed, as the CUDA runtime keeps the driver: it is loaded once, under
 * pthread_once, and what the gemm delegate's states point to stays valid until exit. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dynlib.h"
#include "delegates/cuda/cublaslt_api.h"

#define LT_FIX                                                                                     \
    "install cuBLAS from the CUDA toolkit (the libcublas package of CUDA " LT_API_STR(             \
        CUBLAS_VER_MAJOR) "), add its directory to LD_LIBRARY_PATH, or set BATON_CUBLASLT to the " \
                          "library's path"

int baton__lt_api_open(const char *path, lt_api *api, char *msg, size_t msg_len)
{
    memset(api, 0, sizeof *api);
#define LT_API_SYM(fn) {#fn, &api->fn},
    const dynlib_sym syms[] = {LT_API_CALLS(LT_API_SYM)};
#undef LT_API_SYM
    const char *missing;
    char why[256];
    void *h =
        baton__dynlib_open(&path, 1, syms, sizeof syms / sizeof syms[0], &missing, why, sizeof why);
    if (!h && !missing) {
        snprintf(
            msg, msg_len,
            "cannot load %s (cuBLASLt, which the gemm delegate uses on CUDA devices): %s; " LT_FIX,
            path, why);
        return -1;
    }
    if (!h) {
        snprintf(msg, msg_len, "%s has no %s: it is not cuBLASLt %d or newer; " LT_FIX, path,
                 missing, CUBLAS_VER_MAJOR);
        return -1;
    }
    /* The structs baton passes by value (algorithms, heuristic results) keep their layout
     * within a major version only. */
    size_t version = api->cublasLtGetVersion();
    if (version / 10000 != CUBLAS_VER_MAJOR) {
        snprintf(msg, msg_len,
                 "%s is cuBLASLt %zu.%zu but baton was built against cuBLASLt %d; " LT_FIX, path,
                 version / 10000, version / 100 % 100, CUBLAS_VER_MAJOR);
        dlclose(h);
        memset(api, 0, sizeof *api);
        return -1;
    }
    return 0; /* h stays open for the life of the process */
}

static pthread_once_t lt_once = PTHREAD_ONCE_INIT;
static lt_api lt_loaded;
static int lt_ok;
static char lt_msg[768];

static void lt_load_once(void)
{
    const char *path = getenv("BATON_CUBLASLT");
    if (!path || !path[0])
        path = LT_API_DEFAULT_LIB;
    lt_ok = baton__lt_api_open(path, &lt_loaded, lt_msg, sizeof lt_msg) == 0;
}

const lt_api *baton__lt_api_get(char *msg, size_t msg_len)
{
    pthread_once(&lt_once, lt_load_once);
    if (lt_ok)
        return &lt_loaded;
    if (msg && msg_len)
        snprintf(msg, msg_len, "%s", lt_msg);
    return NULL;
}
