/* test_footprint.c: what libbaton costs a program that does not use a GPU. libbaton.so and the
 * CLI need no CUDA library at load time (the CUDA runtime is linked statically, cuBLASLt is
 * loaded on the first gemm prepared on a GPU), `baton --version` and `baton validate` of a small
 * plan stay under 40 MB resident, and a missing cuBLASLt is a clear error at prepare time. */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "baton/baton.h"
#include "tests/support.h"
#ifdef BATON_CUDA
#include "delegates/cuda/cublaslt_api.h"
#include "delegates/cuda/gemm_cublaslt.h"
#endif

#ifndef BATON_TEST_SHARED_LIB
#error "CMake passes BATON_TEST_SHARED_LIB (libbaton.so) and BATON_TEST_CLI (baton)"
#endif

/* Issue 9's bound for `baton validate` of a tiny plan. */
#define RSS_LIMIT_KB (40 * 1024)

/* The DT_NEEDED entries of a 64-bit ELF file, NUL-separated into buf. Returns their count. */
static int elf_needed(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *img = malloc((size_t)size);
    cr_assert(img && fread(img, 1, (size_t)size, f) == (size_t)size, "cannot read %s", path);
    fclose(f);
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
    cr_assert(memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64,
              "%s is not a 64-bit ELF file", path);
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff);
    int n = 0;
    size_t used = 0;
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNAMIC)
            continue;
        const char *strtab = (const char *)img + sh[sh[i].sh_link].sh_offset;
        const Elf64_Dyn *dyn = (const Elf64_Dyn *)(img + sh[i].sh_offset);
        for (size_t k = 0; k < sh[i].sh_size / sizeof *dyn && dyn[k].d_tag != DT_NULL; k++) {
            if (dyn[k].d_tag != DT_NEEDED)
                continue;
            const char *name = strtab + dyn[k].d_un.d_val;
            size_t len = strlen(name) + 1;
            cr_assert(used + len <= cap);
            memcpy(buf + used, name, len);
            used += len;
            n++;
        }
    }
    free(img);
    return n;
}

static void assert_no_cuda_needed(const char *path)
{
    static const char *const cuda_libs[] = {"libcudart", "libcublas", "libcuda.", "libnvrtc",
                                            "libnvToolsExt"};
    char needed[4096];
    int n = elf_needed(path, needed, sizeof needed);
    cr_assert_gt(n, 0, "%s has no NEEDED entries: not a dynamically linked ELF file?", path);
    const char *p = needed;
    for (int i = 0; i < n; i++, p += strlen(p) + 1)
        for (size_t k = 0; k < sizeof cuda_libs / sizeof cuda_libs[0]; k++)
            cr_expect(strncmp(p, cuda_libs[k], strlen(cuda_libs[k])) != 0,
                      "%s needs %s at load time: a CPU-only program could not start where CUDA "
                      "is absent (link the CUDA runtime statically, load CUDA libraries with "
                      "dlopen on first use)",
                      path, p);
}

Test(footprint, libbaton_so_needs_no_cuda_library_at_load_time)
{
    assert_no_cuda_needed(BATON_TEST_SHARED_LIB);
}

Test(footprint, the_cli_needs_no_cuda_library_at_load_time)
{
    assert_no_cuda_needed(BATON_TEST_CLI);
}

/* Runs the CLI with argv (stdout and stderr to /dev/null); returns its peak resident memory in
 * KiB and its exit status in *status. */
static long cli_max_rss_kb(char *const argv[], int *status)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork failed");
    if (pid == 0) {
        FILE *null = freopen("/dev/null", "w", stdout);
        (void)null;
        null = freopen("/dev/null", "w", stderr);
        execv(BATON_TEST_CLI, argv);
        _exit(127);
    }
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    cr_assert_eq(wait4(pid, status, 0, &ru), pid, "wait4 failed");
    return ru.ru_maxrss; /* KiB on Linux */
}

static void skip_if_instrumented(void)
{
#ifdef BATON_TEST_SANITIZE
    cr_skip("a sanitizer build: AddressSanitizer's shadow memory alone exceeds the bound");
#endif
}

Test(footprint, version_stays_under_40_mb_resident)
{
    skip_if_instrumented();
    char *argv[] = {BATON_TEST_CLI, "--version", NULL};
    int status = 0;
    long kb = cli_max_rss_kb(argv, &status);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "baton --version failed (%d)", status);
    cr_log_info("baton --version: %ld KiB resident at most", kb);
    cr_assert_leq(kb, RSS_LIMIT_KB, "baton --version peaked at %ld KiB (limit %d KiB)", kb,
                  RSS_LIMIT_KB);
}

Test(footprint, validate_of_a_small_plan_stays_under_40_mb_resident)
{
    skip_if_instrumented();
    char *argv[] = {BATON_TEST_CLI, "validate", (char *)test_path("examples/plans/rfc.json"), NULL};
    int status = 0;
    long kb = cli_max_rss_kb(argv, &status);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "baton validate %s failed (%d)",
              argv[2], status);
    cr_log_info("baton validate rfc.json: %ld KiB resident at most", kb);
    cr_assert_leq(kb, RSS_LIMIT_KB, "baton validate peaked at %ld KiB (limit %d KiB)", kb,
                  RSS_LIMIT_KB);
}

#ifdef BATON_CUDA
/* One bf16 gemm step, [8,64] x [64,32] on cuda:0, as the runtime hands it to init(). */
static int gemm_init_on_cuda0(void **state, baton_error *err)
{
    static baton_tensor_desc in[2] = {{BATON_DTYPE_BF16, 2, {8, 64}},
                                      {BATON_DTYPE_BF16, 2, {64, 32}}};
    static baton_tensor_desc out[1] = {{BATON_DTYPE_BF16, 2, {8, 32}}};
    static const baton_sig_args sig = {.n_inputs = 2, .inputs = in, .n_outputs = 1, .outputs = out};
    static const baton_device devs[1] = {{BATON_DEVICE_CUDA, 0}};
    static const baton_target_kind kinds[1] = {BATON_TARGET_DELEGATE};
    const baton_delegate_init info = {.step_index = 0,
                                      .step_name = "proj",
                                      .device = devs[0],
                                      .sig = &sig,
                                      .n_steps = 1,
                                      .step_devices = devs,
                                      .step_kinds = kinds};
    return baton__gemm_cublaslt_iface.init(&info, state, err);
}
#endif

Test(footprint, a_missing_cublaslt_is_an_error_naming_it_when_a_gemm_is_prepared)
{
#ifndef BATON_CUDA
    cr_skip("a CPU-only build: there is no cuBLASLt to load");
#else
    /* Criterion runs each test in its own process, so this is the process's first load. */
    setenv("BATON_CUBLASLT", "/nonexistent/libcublasLt.so.13", 1);
    void *state = NULL;
    baton_error err = {0};
    int rc = gemm_init_on_cuda0(&state, &err);
    cr_assert_eq(rc, BATON_ECUDA, "init gave %d: %s", rc, err.message);
    cr_assert_null(state);
    /* the delegate gives the reason; the runtime names the step and device (once) */
    cr_assert(!strstr(err.message, "step 'proj'"), "%s", err.message);
    cr_assert(strstr(err.message, "cannot load /nonexistent/libcublasLt.so.13"), "%s", err.message);
    cr_assert(strstr(err.message, "BATON_CUBLASLT"), "the fix is missing: %s", err.message);
#endif
}

Test(footprint, a_library_that_is_not_cublaslt_is_refused_naming_the_missing_call)
{
#ifndef BATON_CUDA
    cr_skip("a CPU-only build: there is no cuBLASLt to load");
#else
    lt_api api;
    char msg[768];
    cr_assert_eq(baton__lt_api_open("libc.so.6", &api, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "libc.so.6 has no cublasLtGetVersion"), "%s", msg);
    cr_assert_null(api.cublasLtMatmul);
#endif
}

Test(footprint, the_cublaslt_of_the_toolkit_resolves_every_call)
{
#ifndef BATON_CUDA
    cr_skip("a CPU-only build: there is no cuBLASLt to load");
#else
    lt_api api;
    char msg[768];
    if (baton__lt_api_open(LT_API_DEFAULT_LIB, &api, msg, sizeof msg) != 0)
        cr_skip("%s is not installed on this machine: %s", LT_API_DEFAULT_LIB, msg);
#define LT_API_CHECK(fn) cr_assert_not_null(api.fn, "%s was not resolved", #fn);
    LT_API_CALLS(LT_API_CHECK)
#undef LT_API_CHECK
    cr_assert_eq(api.cublasLtGetVersion() / 10000, CUBLAS_VER_MAJOR);
#endif
}
