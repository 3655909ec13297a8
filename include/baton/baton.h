/* baton.h: the public C API of baton, a runtime that executes an ahead-of-time plan of
 * delegate and custom-kernel invocations across CPU and CUDA devices, waiting for a GPU
 * only where the plan crosses back to the host.
 *
 * Conventions (as in libuv): every fallible call returns an int, 0 on success or a negative
 * BATON_E* code; baton_strerror() names the code, and a caller-provided baton_error receives a
 * message that names the place (file:line:column, step, tensor) and the fix. Handles are opaque.
 * State hangs off a registry, a plan, a runtime or a pool. Process-wide state (docs/api.md lists
 * it): the log callback of baton_log_set (the default for registries without their own); caches
 * of CUDA device and kernel facts (multiprocessor counts, kernel attributes, occupancy; one per
 * translation unit that needs them) and the tuning results of baton's CUDA kernels, all filled
 * once with atomic operations so that any thread may read or fill them; the cuBLASLt library and
 * its function table, loaded once; and CUPTI's activity recording while a trace or
 * baton_gpu_busy_begin uses it.
 *
 * NULL: a fallible call given NULL for a handle or a pointer it needs returns BATON_EINVAL (a NULL
 * baton_error * is always allowed: the message is then dropped); a function returning a pointer
 * returns NULL, a count 0, a mode or backend query of a NULL runtime or pool BATON_SYNC_STRICT or
 * BATON_GPU_CPU; a void function does nothing (baton_runtime_stats of a NULL runtime zeroes *out).
 * tests/test_api_null.c checks every function. */
#ifndef BATON_H
#define BATON_H

#include <stddef.h>
#include <stdint.h>

#include "baton/baton_export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Versions and the ABI
 *
 * The version below is the header's; baton_version() is the library's, which is newer when a
 * program runs against a newer shared libbaton than it was built with. CMake reads the project
 * version from these three lines.
 *
 * The ABI promise (docs/api.md), for as long as the soname stays (libbaton.so.1; a release that
 * must break it takes a new soname):
 *  - functions are only added, never removed or changed; enum values and #define'd limits keep
 *    their values; libbaton.so exports exactly the functions the public headers declare with
 *    BATON_API;
 *  - structs that the caller fills and baton reads may grow: baton_options, baton_target and
 *    baton_delegate_iface start with `size_t struct_size`, which the caller sets to the sizeof of
 *    its header (baton_options_init does it for options). New fields are only appended, after
 *    the previous version's sizeof. baton reads the fields that lie wholly inside struct_size
 *    and gives the others their defaults (baton_options_init's values, else zero or NULL), so a
 *    program built against an older header keeps its behaviour. A struct_size larger than the
 *    library's is accepted when the bytes it does not know are zero, else refused with
 *    BATON_ENOTSUP (the program asks for something this library cannot do). A struct_size below
 *    sizeof(size_t), e.g. 0, is BATON_EINVAL;
 *  - structs that baton passes to callbacks (baton_exec_ctx, baton_delegate_init,
 *    baton_sig_args) start with `size_t struct_size` too, set by baton to the sizeof of its own
 *    header, and grow only at the end: a callback built against a newer header than the library
 *    reads a field it added only when BATON_HAS_FIELD says the struct reaches it (fields of its
 *    own header's version or older are always there). A plugin built for another plugin API
 *    version is refused by the loader before it runs (BATON_PLUGIN_API_VERSION);
 *  - every other struct keeps its layout (baton_error, baton_tensor_desc, baton_attr,
 *    baton_attr_spec, baton_target_impl, baton_run_stats, baton_tensor_info, baton_step_info,
 *    baton_arena, baton_stream, baton_buffer, baton_job): new information comes through new
 *    functions or new fields of the structs above.
 * ------------------------------------------------------------------------------------------- */

#define BATON_VERSION_MAJOR 0
#define BATON_VERSION_MINOR 2
#define BATON_VERSION_PATCH 0
/* The header's version as one number, (major << 16) | (minor << 8) | patch: 0x000100 is 0.1.0. */
#define BATON_VERSION                                                                              \
    ((BATON_VERSION_MAJOR << 16) | (BATON_VERSION_MINOR << 8) | BATON_VERSION_PATCH)
/* The plan-file format version this library reads. */
#define BATON_PLAN_FORMAT_VERSION 1

/* Whether the struct *p, of type `type` and starting with struct_size, reaches `field`. */
#define BATON_HAS_FIELD(p, type, field)                                                            \
    ((p)->struct_size >= offsetof(type, field) + sizeof(((type *)0)->field))

/* The library's version, as BATON_VERSION encodes it, and as "0.1.0". The string is static. */
BATON_API unsigned int baton_version(void);
BATON_API const char *baton_version_string(void);

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

typedef enum baton_errcode {
    BATON_OK = 0,
    BATON_EINVAL = -1,    /* a bad argument from the caller (a kernel called directly answers a
                           * bad descriptor with it; a step that fails so in a run is EKERNEL) */
    BATON_ENOMEM = -2,    /* an allocation failed */
    BATON_EIO = -3,       /* a file could not be read or written */
    BATON_EPARSE = -4,    /* a plan file is not well-formed JSON */
    BATON_EPLAN = -5,     /* a plan is well-formed but invalid (schema, signature, dataflow) */
    BATON_ENOTARGET = -6, /* a step names a kernel or delegate that is not registered */
    BATON_ENODEV = -7,    /* a step needs a device that is not present */
    BATON_ECUDA = -8,     /* a CUDA, cuBLAS or driver call failed */
    BATON_EKERNEL = -9,   /* a step's kernel or delegate failed: the message names the step, its
                           * target and device once, then the reason */
    BATON_ENOTSUP = -10,  /* the operation is not supported by this build or target */
    BATON_ESTATE = -11,   /* the call does not fit the object's state (e.g. run before prepare) */
    BATON_ENOENT = -12,   /* a name (tensor, step) was not found */
    BATON_ENUMERIC = -13, /* reserved: a numeric check failed; the library does not return it
                           * (baton's benchmarks use it), the number stays for compatibility */
    BATON_ECANCELED = -14 /* a queued run was cancelled before it started (baton_uv.h) */
} baton_errcode;

#define BATON_ERROR_MAX 1024

/* Filled by calls that take one; `code` repeats the return value. Callers own it. */
typedef struct baton_error {
    int code;
    char message[BATON_ERROR_MAX];
} baton_error;

/* The name of an error code ("BATON_EPLAN: invalid plan"). Never NULL. */
BATON_API const char *baton_strerror(int code);

/* ---------------------------------------------------------------------------------------------
 * Element types, devices, roles
 * ------------------------------------------------------------------------------------------- */

/* The integer values are part of the ABI: they appear in kernel descriptors (see
 * docs/kernels.md). 0 is never a valid dtype. */
typedef enum baton_dtype {
    BATON_DTYPE_INVALID = 0,
    BATON_DTYPE_BF16 = 1,
    BATON_DTYPE_F16 = 2,
    BATON_DTYPE_F32 = 3,
    BATON_DTYPE_F64 = 4,
    BATON_DTYPE_I32 = 5,
    BATON_DTYPE_I64 = 6,
    BATON_DTYPE_U8 = 7,  /* unsigned byte (safetensors U8, numpy |u1) */
    BATON_DTYPE_BOOL = 8 /* one byte, 0 or 1 (safetensors BOOL, numpy |b1); stores v != 0 */
} baton_dtype;
#define BATON_DTYPE_COUNT 9

BATON_API const char *baton_dtype_name(baton_dtype dt);    /* "bf16"; "invalid" for others */
BATON_API size_t baton_dtype_size(baton_dtype dt);         /* bytes per element; 0 if invalid */
BATON_API baton_dtype baton_dtype_from_name(const char *); /* BATON_DTYPE_INVALID if unknown */

/* Converts n elements of src (src_dtype) into dst (dst_dtype), with the rounding of baton's
 * kernels: to bf16 and f16 round to nearest even; to integers truncate toward zero and saturate
 * (NaN gives 0). dst and src must not overlap. BATON_EINVAL for an invalid dtype, n < 0 or a NULL
 * buffer. */
BATON_API int baton_convert(void *dst, baton_dtype dst_dtype, const void *src,
                            baton_dtype src_dtype, int64_t n);
/* Fills n elements with the plan format's seeded "normal" (mean, std) or "uniform" [low, high)
 * values: the same bits on every machine for the same seed (docs/plan-format.md gives the
 * algorithms). BATON_EINVAL for an invalid dtype, n < 0 or a NULL buffer. */
BATON_API int baton_fill_normal(void *dst, baton_dtype dtype, int64_t n, uint64_t seed, double mean,
                                double std);
BATON_API int baton_fill_uniform(void *dst, baton_dtype dtype, int64_t n, uint64_t seed, double low,
                                 double high);

typedef enum baton_device_kind {
    BATON_DEVICE_NONE = 0, /* "no device": e.g. the next device after the last step */
    BATON_DEVICE_CPU = 1,
    BATON_DEVICE_CUDA = 2
} baton_device_kind;

typedef struct baton_device {
    baton_device_kind kind;
    int index; /* cuda:N; 0 for the CPU */
} baton_device;

/* Writes "cpu", "cuda:0" or "none" into buf; returns buf (a NULL buf or len 0: writes nothing). */
BATON_API char *baton_device_format(baton_device dev, char *buf, size_t len);
/* Parses "cpu" or "cuda:N". Returns 0 or BATON_EINVAL. */
BATON_API int baton_device_parse(const char *text, baton_device *out);

typedef enum baton_role {
    BATON_ROLE_INTERMEDIATE = 0,
    BATON_ROLE_INPUT = 1,
    BATON_ROLE_OUTPUT = 2,
    BATON_ROLE_CONSTANT = 3,
    /* Persists across the runs of one runtime (a pool instance owns its own): initialised from
     * its init (zeros without one) at baton_runtime_create and baton_runtime_reset_state; steps
     * may read and write it, in place where the target declares an alias (baton_alias). */
    BATON_ROLE_STATE = 4
} baton_role;

BATON_API const char *baton_role_name(baton_role role);

#define BATON_MAX_RANK 8

/* A tensor's type as a target sees it: dtype and shape. Row-major and dense. */
typedef struct baton_tensor_desc {
    baton_dtype dtype;
    int rank;
    int64_t shape[BATON_MAX_RANK];
} baton_tensor_desc;

/* The number of elements (1 for rank 0); -1 when the rank is outside [0, BATON_MAX_RANK], a
 * dimension is negative or the product does not fit int64_t. */
BATON_API int64_t baton_tensor_desc_numel(const baton_tensor_desc *d);

/* ---------------------------------------------------------------------------------------------
 * Attributes: the typed `attrs` object of a step
 * ------------------------------------------------------------------------------------------- */

typedef enum baton_attr_type {
    BATON_ATTR_NONE = 0,
    BATON_ATTR_INT = 1,
    BATON_ATTR_FLOAT = 2,
    BATON_ATTR_BOOL = 3,
    BATON_ATTR_STRING = 4
} baton_attr_type;

typedef struct baton_attr {
    const char *name;
    baton_attr_type type;
    int64_t i;     /* INT, BOOL */
    double f;      /* FLOAT; INT attributes also set it, so a float attribute may be written 1 */
    const char *s; /* STRING */
} baton_attr;

/* Looks an attribute up by name among n; NULL if absent. */
BATON_API const baton_attr *baton_attrs_find(const baton_attr *attrs, int n, const char *name);

/* ---------------------------------------------------------------------------------------------
 * Targets: kernels and delegates, and the context a call receives
 * ------------------------------------------------------------------------------------------- */

typedef enum baton_target_kind {
    BATON_TARGET_NONE = 0, /* used for "no next step" */
    BATON_TARGET_KERNEL = 1,
    BATON_TARGET_DELEGATE = 2,
    /* A collective step (all_reduce, all_gather) over a group of devices: no registry target;
     * baton_step_info.target names the collective and .device is the group's first device. */
    BATON_TARGET_COLLECTIVE = 3
} baton_target_kind;

/* What every kernel and delegate call receives: where it runs, on which stream, what runs next
 * (so a backend can keep work queued when the next step stays on its device), and whether the
 * call is being captured into a CUDA graph (then it must not synchronise or allocate). */
typedef struct baton_exec_ctx {
    size_t struct_size; /* sizeof(baton_exec_ctx) of the library; see "Versions and the ABI" */
    baton_device device;
    void *stream; /* cudaStream_t on CUDA devices; NULL on the CPU */
    baton_device next_device;
    baton_target_kind next_kind;
    int capturing; /* nonzero while a CUDA graph of this segment is being captured */
    int pdl;       /* nonzero: launch the first kernel with programmatic dependent launch (the op
                    * before it on the stream is a kernel; see baton_target_impl.supports_pdl) */
    const char *step_name; /* for messages */
    int step_index;
    char *errbuf; /* a call that fails writes its reason here (NUL-terminated) */
    size_t errbuf_len;
    /* The step as the plan declares it, as its check() saw it, so a kernel needs no pack() to
     * learn its shapes, dtypes and attributes (the descriptor stays, for XLA-ABI kernels):
     * sig->inputs then sig->outputs, in the order of `buffers`, and sig->attrs. It lives as long
     * as the runtime. (A pointer, not the fields, keeps the per-step call small: bench_host.) */
    const struct baton_sig_args *sig;
    void *user; /* the target's user pointer (baton_target.user), given at registration */
    /* Nonzero: the kernel may launch the variant that prepare-time tuning measured fastest for
     * this GPU model and shape class, or else baton's built-in pick for them, where it has one;
     * zero: its fixed default. The runtime sets it unless baton_options.no_autotune. baton's
     * kernels tune only among variants that give the default's bits (docs/kernels.md, "Tuning
     * per GPU"), so it changes speed, never results. */
    int autotune;
    /* What the kernel decided for this call at prepare (baton's built-in CUDA RMSNorm decodes its
     * descriptor, chooses its layout and tuned variant there), or NULL: the kernel decides on
     * every call. Owned by the runtime; a kernel that finds it stale (another descriptor after a
     * change of the plan's dims, buffers of another alignment) decides again. */
    void *prepared;
} baton_exec_ctx;

/* A kernel: a stateless custom call in the XLA custom-call convention. `buffers` holds the
 * inputs then the outputs, as device pointers of ctx->device; `opaque` is the descriptor that the
 * target's pack() produced (or the plan's verbatim "opaque" bytes). Returns 0 or a negative code,
 * after writing the reason to ctx->errbuf. */
typedef int (*baton_kernel_fn)(const baton_exec_ctx *ctx, void **buffers, const char *opaque,
                               size_t opaque_len);

/* A step as a target's signature check sees it. */
typedef struct baton_sig_args {
    size_t struct_size; /* sizeof(baton_sig_args) of the caller; see "Versions and the ABI" */
    int n_inputs;
    const baton_tensor_desc *inputs;
    int n_outputs;
    const baton_tensor_desc *outputs; /* as declared in the plan */
    int n_attrs;
    const baton_attr *attrs;
    /* The plan's names of the inputs and outputs (n_inputs and n_outputs entries), so that a
     * check's message can name the tensor the user must change. Either may be NULL where the
     * caller has no names (a step built by hand): a check then names the tensor by its role. */
    const char *const *input_names;
    const char *const *output_names;
    /* The plan's verbatim "opaque" bytes of this step (NULL and 0 when the plan gives none, and
     * always at run time): they replace what pack() would build, and the kernel trusts them, so
     * a check() that accepts them decodes and checks them here against the tensors and its own
     * ranges, and refuses a mismatch naming the field and both values (docs/plugins.md). */
    const char *opaque;
    size_t opaque_len;
    /* In a kernel's ctx->sig (NULL in check()): per input, nonzero when it is a plan constant,
     * loaded before the first run and never written, so a kernel launched with PDL may read it
     * before its grid-dependency wait (a decode GEMV streams its weight while the step before it
     * finishes). Read it through BATON_HAS_FIELD. */
    const int *input_constant;
} baton_sig_args;

/* The largest descriptor a target's pack() may produce. */
#define BATON_OPAQUE_MAX 256

/* Everything a delegate learns at prepare time: its step, and the whole ordered plan with each
 * step's device, so it can decide how much work to keep queued. */
typedef struct baton_delegate_init {
    size_t struct_size; /* sizeof(baton_delegate_init) of the library; "Versions and the ABI" */
    int step_index;
    const char *step_name;
    baton_device device;
    void *stream; /* the shared stream of `device` (cudaStream_t), NULL on the CPU */
    const baton_sig_args *sig;
    int n_steps;
    const baton_device *step_devices;    /* n_steps entries */
    const baton_target_kind *step_kinds; /* n_steps entries */
    /* Per input (sig->n_inputs entries): nonzero when it is a plan constant, already loaded at
     * input_data[k] (an address on `device`) and never written while the runtime lives, so a
     * delegate may preprocess it once here (convert, pack, transpose). */
    const int *input_constant;
    void *const *input_data;
    void *user; /* the target's user pointer (baton_target.user), given at registration */
} baton_delegate_init;

/* A backend implementation of a delegate, one per device kind (a ggml-style table). */
typedef struct baton_delegate_iface {
    size_t struct_size; /* sizeof(baton_delegate_iface); see "Versions and the ABI" above */
    /* Creates the per-step state (handles, chosen algorithm, workspace). May allocate. */
    int (*init)(const baton_delegate_init *info, void **state, baton_error *err);
    /* Runs the step. Must not allocate or synchronise when ctx->capturing is set. */
    int (*execute)(void *state, const baton_exec_ctx *ctx, void **buffers);
    /* Frees the state. May be NULL. */
    void (*destroy)(void *state);
    /* Nonzero if execute may be captured into a CUDA graph. */
    int capturable;
    /* Optional (NULL: the state holds nothing worth counting). The bytes the step's state holds
     * outside the plan's arenas, host or device, so that baton_pool_memory tells the truth:
     * *private_bytes are this step's own (scratch, workspaces); *shared_bytes a prepared copy of a
     * constant (widened, transposed, uploaded) that other steps and runtimes of the process share,
     * named by *shared_key (any address unique to that copy) so that it is counted once. baton
     * zeroes all three before the call. */
    void (*memory)(void *state, size_t *private_bytes, const void **shared_key,
                   size_t *shared_bytes);
} baton_delegate_iface;

/* One per-device implementation of a target. Exactly one of kernel/delegate is set, according to
 * the target's kind. */
typedef struct baton_target_impl {
    baton_device_kind device;
    baton_kernel_fn kernel;
    const baton_delegate_iface *delegate;
    /* The kernel honours ctx->pdl: when it is set, the kernel's first operation on the stream,
     * if a kernel launch, waits for the grids before it (griddepcontrol.wait,
     * cudaGridDependencySynchronize) before it reads or writes global memory. The runtime sets
     * ctx->pdl only where the stream's previous operation is a kernel, and inside a CUDA graph
     * makes that edge programmatic. */
    int supports_pdl;
} baton_target_impl;

/* The attribute a target accepts. */
typedef struct baton_attr_spec {
    const char *name;
    baton_attr_type type;
    int required;
    const char *help; /* one line, shown in errors and `baton inspect` */
} baton_attr_spec;

#define BATON_MAX_IMPLS      4
#define BATON_MAX_ATTR_SPECS 8

/* An in-place pair of a target: output `output` may be the same tensor as input `input` (the
 * kernel then gets one buffer for both). A plan may name one tensor as both only for a declared
 * pair, and only when the tensor is a state tensor ("role": "state"); baton's elementwise targets
 * declare (0, 0). */
typedef struct baton_alias {
    int output;
    int input;
} baton_alias;
#define BATON_MAX_ALIASES 4

/* A target's signature and implementations. The registry copies the struct and what it points
 * to (name, summary, attribute names and help, delegate tables), so none of it need outlive the
 * call; the functions (kernels, check, pack, a delegate's callbacks) must stay loaded as long as
 * the registry or a plan loaded from it lives.
 *
 * check() validates dtypes, shapes and attributes of one step and writes the expected output
 * descriptors into `expected` (n_outputs entries); the validator compares them with the plan's
 * declarations. On failure it writes a one-line reason (what is wrong and what would be right)
 * into msg and returns BATON_EPLAN.
 *
 * pack() turns a checked step into the descriptor bytes the kernel receives (NULL: none); it
 * returns the byte count written, or a negative code. */
typedef struct baton_target {
    size_t struct_size; /* sizeof(baton_target); see "Versions and the ABI" above */
    const char *name;   /* letters, digits, '_', '.' and '-'; 1 to 255 bytes */
    baton_target_kind kind;
    int n_inputs; /* exact counts, 0 to 64 each */
    int n_outputs;
    const char *summary;
    baton_attr_spec attrs[BATON_MAX_ATTR_SPECS]; /* named entries first; the rest zeroed */
    int (*check)(const baton_sig_args *args, baton_tensor_desc *expected, char *msg,
                 size_t msg_len);
    int (*pack)(const baton_sig_args *args, char *opaque, size_t cap);
    baton_target_impl impls[BATON_MAX_IMPLS]; /* one per device kind */
    int n_impls;                              /* 1 to BATON_MAX_IMPLS */
    /* Given back to every call of the target (baton_exec_ctx.user, baton_delegate_init.user), so
     * that a host runtime needs no globals. baton never dereferences it. */
    void *user;
    /* In-place pairs (see baton_alias): n_aliases entries, 0 to BATON_MAX_ALIASES, each output
     * and input in range, no output twice. A target built against a header without them has
     * none. */
    baton_alias aliases[BATON_MAX_ALIASES];
    int n_aliases;
} baton_target;

/* ---------------------------------------------------------------------------------------------
 * Registry
 * ------------------------------------------------------------------------------------------- */

/* Ownership: a registry is reference-counted. The creator holds one reference and every plan
 * loaded from it holds one, so baton_registry_destroy() may come before baton_plan_free() of its
 * plans: it drops the caller's reference, and the registry is freed when the last plan using it
 * is. The counts are atomic, so the last release may happen on any thread. Do not use a
 * registry pointer after destroying it. Adding or replacing targets must not run at the same
 * time as any other call on the same registry (loading a plan included); lookups and plan
 * loads may run concurrently with each other. */
typedef struct baton_registry baton_registry;

/* Creates a registry holding baton's built-in kernels and delegates for every device this build
 * supports. */
BATON_API int baton_registry_create(baton_registry **out);
/* Drops the caller's reference (see above). NULL is a no-op. */
BATON_API void baton_registry_destroy(baton_registry *reg);
/* Adds a target. BATON_EINVAL, with a message naming the target and the fix, unless: the name
 * is 1 to 255 bytes of letters, digits, '_', '.' and '-' (what a plan can write); kind is a kernel
 * or a delegate; check() is set (pack() may be NULL: no descriptor); n_inputs and n_outputs are
 * 0 to 64; n_impls is 1 to BATON_MAX_IMPLS, each for BATON_DEVICE_CPU or BATON_DEVICE_CUDA, at
 * most one per device kind; a kernel's impls set .kernel only, a delegate's .delegate only, with
 * init() and execute(); attribute specs are named (distinct names, a valid type), first in attrs.
 *
 * A name already registered: the call adds implementations for device kinds the target does not
 * have yet (e.g. a CUDA kernel for a CPU-only custom target), and only when kind, n_inputs,
 * n_outputs, check, pack and the attribute specs (names, types, required) are identical: start
 * from a copy of baton_registry_find()'s target and change impls. Another signature, or a device
 * kind it already has, is BATON_EINVAL (baton_registry_replace() overrides deliberately); the
 * registered summary and help texts stay.
 *
 * The target and its delegate tables are read by their struct_size ("Versions and the ABI"): a
 * struct_size of 0 is BATON_EINVAL, a field of a newer header set to nonzero BATON_ENOTSUP.
 *
 * A failed call leaves the registry exactly as it was. Plans loaded before a call keep the
 * targets they resolved: add targets before loading the plans that use them. */
BATON_API int baton_registry_add(baton_registry *reg, const baton_target *target, baton_error *err);
/* Replaces the registered target of target->name (a built-in included) with `target`, checked as
 * baton_registry_add checks a new one; its signature may differ. BATON_ENOENT when no target has
 * that name (use baton_registry_add). Plans loaded before keep the target they resolved; plans
 * loaded afterwards use the new one. A failed call changes nothing. */
BATON_API int baton_registry_replace(baton_registry *reg, const baton_target *target,
                                     baton_error *err);
/* The registered target of that name, or NULL. The pointer stays valid as long as the registry
 * lives, even after an add or a replace of that name (which install a new copy). */
BATON_API const baton_target *baton_registry_find(const baton_registry *reg, const char *name);
BATON_API int baton_registry_count(const baton_registry *reg);
BATON_API const baton_target *baton_registry_at(const baton_registry *reg, int i);
/* The implementation of `t` for a device kind, or NULL. */
BATON_API const baton_target_impl *baton_target_impl_for(const baton_target *t,
                                                         baton_device_kind kind);

/* ---------------------------------------------------------------------------------------------
 * Plugins: targets in a shared library (docs/plugins.md)
 *
 * A plugin is a shared library that exports
 *     int baton_plugin_init(baton_registry *reg, const baton_plugin_api *api, baton_error *err);
 * which registers its targets through api (so it need not link libbaton) and returns 0, or a
 * negative code with err filled, and declares the plugin API it was built against with
 * BATON_PLUGIN_DECLARE_VERSION(); at file scope. The loader reads that before it calls anything:
 * a plugin built for another version (one without the declaration counts as version 1) is
 * refused with BATON_ENOTSUP, naming both versions. Within one api_version the table only grows
 * at its end (struct_size says how far it reaches).
 *
 * Version 2: baton_exec_ctx, baton_sig_args and baton_delegate_init
 * start with struct_size, and the loader checks the version.
 * ------------------------------------------------------------------------------------------- */

#define BATON_PLUGIN_API_VERSION    2
#define BATON_PLUGIN_INIT_SYMBOL    "baton_plugin_init"
#define BATON_PLUGIN_VERSION_SYMBOL "baton_plugin_api_version"
#ifdef __cplusplus
#define BATON_PLUGIN_EXTERN_ extern "C"
#else
#define BATON_PLUGIN_EXTERN_
#endif
/* In one file of a plugin, at file scope: exports the plugin API version it was built against. */
#define BATON_PLUGIN_DECLARE_VERSION()                                                             \
    BATON_PLUGIN_EXTERN_ __attribute__((visibility("default")))                                    \
    const unsigned int baton_plugin_api_version = BATON_PLUGIN_API_VERSION

typedef struct baton_plugin_api {
    size_t struct_size;         /* sizeof(baton_plugin_api) of the loading library */
    unsigned int api_version;   /* BATON_PLUGIN_API_VERSION of the loading library */
    unsigned int baton_version; /* baton_version() of the loading library */
    int (*registry_add)(baton_registry *reg, const baton_target *target, baton_error *err);
    int (*registry_replace)(baton_registry *reg, const baton_target *target, baton_error *err);
    const baton_target *(*registry_find)(const baton_registry *reg, const char *name);
    const baton_attr *(*attrs_find)(const baton_attr *attrs, int n, const char *name);
    int64_t (*tensor_desc_numel)(const baton_tensor_desc *d);
    size_t (*dtype_size)(baton_dtype dt);
    const char *(*strerror)(int code);
} baton_plugin_api;

typedef int (*baton_plugin_init_fn)(baton_registry *reg, const baton_plugin_api *api,
                                    baton_error *err);

/* Loads the plugin at `path` (dlopen, RTLD_NOW | RTLD_LOCAL) and calls its baton_plugin_init on
 * reg. The library stays loaded until the registry is freed (after the last plan loaded from it),
 * so its kernels outlive every runtime that uses them. Errors name the path and the fix:
 * BATON_EIO when it is missing, not a file or cannot be loaded (the loader's reason),
 * BATON_ENOTARGET when it exports no baton_plugin_init, BATON_ENOTSUP when it declares another
 * plugin API version (nothing of it runs then), or the code its init returned, with its
 * message (BATON_EINVAL when that is not a BATON_E* code). A failed init leaves the registry as it
 * was (targets it added or replaced are undone). Loading the same library (by any path) into the
 * same registry again does nothing and returns 0. Not concurrently with other calls on reg. */
BATON_API int baton_registry_load_plugin(baton_registry *reg, const char *path, baton_error *err);

/* ---------------------------------------------------------------------------------------------
 * Plans: load, validate, analyse
 * ------------------------------------------------------------------------------------------- */

/* Ownership: a plan is reference-counted. It holds a reference on the registry it was loaded
 * from, and every runtime prepared from it holds one on the plan, so baton_plan_free() may come
 * before baton_runtime_destroy() of its runtimes: it drops the caller's reference, and the plan
 * is freed (releasing its registry) when the last runtime using it is destroyed. A plan is
 * immutable: several threads may read it and prepare runtimes from it at once. */
typedef struct baton_plan baton_plan;

/* Loads, validates and analyses a plan file. The plan takes a reference on the registry (see
 * above). On failure *out is NULL and err names the file, line:column, step or tensor, and the
 * fix. */
BATON_API int baton_plan_load(const baton_registry *reg, const char *path, baton_plan **out,
                              baton_error *err);
/* The same from memory. `source` names the text in messages; `base_dir` resolves npy paths
 * (NULL: the current directory). */
BATON_API int baton_plan_load_string(const baton_registry *reg, const char *json, size_t len,
                                     const char *source, const char *base_dir, baton_plan **out,
                                     baton_error *err);
/* Drops the caller's reference (see above). NULL is a no-op. */
BATON_API void baton_plan_free(baton_plan *plan);

BATON_API const char *baton_plan_name(const baton_plan *plan);
BATON_API int baton_plan_tensor_count(const baton_plan *plan);
BATON_API int baton_plan_step_count(const baton_plan *plan);
/* Index of a tensor or step by name, or BATON_ENOENT. */
BATON_API int baton_plan_tensor_index(const baton_plan *plan, const char *name);
BATON_API int baton_plan_step_index(const baton_plan *plan, const char *name);

typedef struct baton_tensor_info {
    const char *name;
    baton_tensor_desc desc;
    baton_role role;
    size_t nbytes;
} baton_tensor_info;

BATON_API int baton_plan_tensor_info(const baton_plan *plan, int i, baton_tensor_info *out);

/* The plan's dimensions bound at run time ("dims"): how many, and dimension i's name (it lives as
 * long as the plan) and bounds. A tensor's desc and nbytes (baton_tensor_info) are at the dims'
 * max; baton_plan_tensor_dim says which dimension sizes axis `axis` of tensor `tensor` (-1: a
 * fixed axis, or out of range). BATON_EINVAL for i out of range. */
BATON_API int baton_plan_dim_count(const baton_plan *plan);
BATON_API int baton_plan_dim_info(const baton_plan *plan, int i, const char **name, int64_t *min,
                                  int64_t *max);
BATON_API int baton_plan_tensor_dim(const baton_plan *plan, int tensor, int axis);

typedef struct baton_step_info {
    const char *name;
    const char *target;
    baton_target_kind kind;
    baton_device device;
    int segment;
    baton_device next_device; /* BATON_DEVICE_NONE after the last step */
    baton_target_kind next_kind;
} baton_step_info;

BATON_API int baton_plan_step_info(const baton_plan *plan, int i, baton_step_info *out);

/* Writes the analysis (segments, boundaries, transfers, memory plan, sync points) as readable
 * text or as JSON to a stream (a FILE *; void * keeps <stdio.h> out of this header). */
BATON_API int baton_plan_describe(const baton_plan *plan, void *file, int as_json);

/* ---------------------------------------------------------------------------------------------
 * Running
 * ------------------------------------------------------------------------------------------- */

typedef enum baton_sync_mode {
    BATON_SYNC_STRICT = 0,   /* wait for the device after every GPU step */
    BATON_SYNC_BOUNDARY = 1, /* one stream per GPU, wait only at GPU->CPU boundaries and the end */
    BATON_SYNC_GRAPH = 2     /* boundary, with each GPU segment replayed as a CUDA graph */
} baton_sync_mode;

BATON_API const char *baton_sync_mode_name(baton_sync_mode mode);
BATON_API int baton_sync_mode_parse(const char *text, baton_sync_mode *out);

/* How `cuda:N` steps are executed. */
typedef enum baton_gpu_backend {
    BATON_GPU_AUTO = 0, /* CUDA if the device exists, else fall back to the CPU (warning) */
    BATON_GPU_CUDA = 1, /* CUDA, or fail at prepare time */
    BATON_GPU_CPU = 2,  /* run GPU steps on the CPU (no warning: asked for) */
    BATON_GPU_SIM = 3   /* the test device: a worker thread per GPU that behaves like a stream */
} baton_gpu_backend;

/* An embedder's thread pool, handed to baton for its CPU steps (baton_options.cpu_pool), so that
 * a program with its own pool does not get a second one competing for the same cores. baton
 * splits a step into tasks by the step's size alone, never by the number of threads, and orders
 * every reduction by task: results are the same bits with any pool, any thread count, or none. */
typedef void (*baton_task_fn)(void *arg, int64_t task);
typedef struct baton_parallel_for {
    size_t struct_size; /* sizeof(baton_parallel_for) */
    /* Calls fn(arg, t) exactly once for each t in [0, n_tasks), on the pool's threads and/or the
     * calling thread, in any order, and returns when every call has returned. It may run them
     * all on the calling thread (baton calls it from inside a step; it must not deadlock when
     * two runtimes call it at once). */
    void (*run)(void *pool, int64_t n_tasks, baton_task_fn fn, void *arg);
    void *pool;    /* passed back to run */
    int n_threads; /* how many threads run tasks at once, the caller's included (>= 1) */
} baton_parallel_for;

/* Start from baton_options_init(), which sets struct_size and the defaults, then change fields. */
typedef struct baton_options {
    size_t struct_size; /* sizeof(baton_options); see "Versions and the ABI" above */
    baton_sync_mode mode;
    baton_gpu_backend gpu;
    int fallback_is_error; /* with BATON_GPU_AUTO: a missing device is an error, not a warning */
    int quiet;             /* no warnings on stderr */
    int sim_delay_us;      /* test device only: delay before each queued op, to expose races */
    int disable_pdl;       /* do not use programmatic dependent launch between kernels */
    /* Graph mode queues a GPU segment that follows a CPU segment (GPU -> CPU -> GPU on one
     * device) before the CPU segment runs, gated on a flag the host sets when the CPU segment is
     * done: the GPU starts it without a launch in between. 0 (the default): on, except in a
     * baton_uv pool of more than BATON_POOL_QUEUE_AHEAD_MAX instances, whose other runs fill the
     * GPU during a hand-off while the gates would cost them GPU time (docs/async.md); 1: off;
     * -1: on, in such pools too. */
    int disable_queue_ahead;
    /* Caller-owned memory and streams (docs/embedding.md); NULL/0: baton allocates and creates
     * its own. `arenas` gives the memory of some or all of the plan's devices
     * (baton_plan_arena_info says how much each needs); `streams` the cudaStream_t each CUDA
     * device runs on (ignored, with a note, for a device whose steps run on the CPU). Both arrays
     * are read at baton_runtime_create; the memory and streams must outlive the runtime, which
     * never frees or destroys them. */
    const struct baton_arena *arenas;
    int n_arenas;
    const struct baton_stream *streams;
    int n_streams;
    /* Kernels that can tune (baton's RMSNorm on CUDA) time their variants that give the
     * default's bits at baton_runtime_create, on the step's own buffers, and run the fastest for
     * this GPU model and shape class (cached in the process: later runtimes reuse it). 0 (the
     * default): tune; 1: their fixed defaults, for timings that must not depend on a measurement
     * (`--no-autotune`). Results are the same bits either way (docs/kernels.md). */
    int no_autotune;
    /* Threads for the CPU's steps: 0 (the default) as many as the machine's cores available to
     * the process; 1 the calling thread only; N at most N. baton keeps one pool per process,
     * shared by its runtimes: a step finding the pool busy (another runtime's step, or a step of
     * baton_uv's own worker threads) runs on its calling thread rather than oversubscribe the
     * cores. Small steps always run on the calling thread. Results do not depend on it. */
    int cpu_threads;
    /* An embedder's pool to run the CPU steps' tasks on instead of baton's (cpu_threads then
     * caps nothing); NULL: baton's. Read at baton_runtime_create; must outlive the runtime. */
    const baton_parallel_for *cpu_pool;
    /* 0 (the default): baton_runtime_run refuses (BATON_ESTATE, naming it) to run while an input
     * has never been given a value, by baton_runtime_set_input or a buffer bound with
     * baton_runtime_bind, since it would compute on whatever the memory held. 1: run anyway, for
     * a caller that fills inputs through other means or times runs whose values do not matter. */
    int allow_unset_inputs;
    /* One process per GPU (docs/multi-gpu.md). world > 0: this runtime is rank `rank` (0 to
     * world - 1) of `world` processes (or threads) that run one plan together, one GPU each: the
     * plan places its GPU steps on cuda:0 .. cuda:world-1, and rank R runs those on cuda:R (CUDA
     * device R modulo the devices this process sees), its own part of each collective (which
     * must span every rank, in rank order), and every CPU step; a tensor that one rank's GPU
     * makes and another's reads is sent and received on the GPUs' streams (NCCL send/recv on
     * CUDA; with BATON_GPU_SIM, ranks are threads of one process). Give each rank the inputs its
     * steps read, and read an output on the rank whose GPU makes it. A CPU step may not read what
     * another rank's GPU made (BATON_ENOTSUP at create, naming it). The ranks meet through the
     * file `rendezvous` (on storage every rank sees): rank 0 writes a new communicator id there
     * atomically, the others poll for it, and each leaves a marker `rendezvous.rankR` beside it
     * and waits for all the others' before joining; the files are removed afterwards. Files left
     * by an earlier launch make rank 0 fail (BATON_ESTATE): remove them, or use a path per
     * launch. baton_runtime_create returns when every rank has joined, or fails (BATON_ESTATE,
     * naming the rank missing) after rendezvous_timeout_ms (0: 300000). world 0 (the default): this
     * process runs every GPU of the plan. */
    int rank;
    int world;
    const char *rendezvous;
    int rendezvous_timeout_ms;
} baton_options;

/* Fills the defaults: graph mode, BATON_GPU_AUTO, everything else 0; struct_size = sizeof. */
BATON_API void baton_options_init(baton_options *opts);

/* Caller-owned memory: one arena per device a plan uses, each its own memory (arenas that overlap
 * are BATON_EINVAL: each device would overwrite the other's tensors). A runtime needs `nbytes` on
 * `device`,
 * aligned to BATON_ARENA_ALIGN: device memory (cudaMalloc) for cuda:N, host memory for the CPU,
 * pinned (cudaHostAlloc, or cudaHostRegister'ed) when a CUDA device takes part, since transfers
 * and graphs copy from it asynchronously. baton writes the plan's constants into it at
 * baton_runtime_create and uses the rest as scratch for the runtime's life. */
#define BATON_ARENA_ALIGN 256
typedef struct baton_arena {
    baton_device device;
    void *data;
    size_t nbytes;
} baton_arena;

/* How many arenas a runtime of the plan needs (the CPU's first, then each GPU's), and arena i's
 * device and size (data NULL). BATON_EINVAL for i out of range. */
BATON_API int baton_plan_arena_count(const baton_plan *plan);
BATON_API int baton_plan_arena_info(const baton_plan *plan, int i, baton_arena *out);

/* A caller's CUDA stream for one device (a cudaStream_t; not the legacy default stream, which
 * cannot be captured). The runtime issues all of that device's work on it and waits on events
 * it records there, exactly as on its own stream: the host waits where the sync mode says, and
 * a run returns only when its work on the stream is done. Work the caller queues on the stream
 * before baton_runtime_run is ordered before the run's, so a producer kernel of the caller's
 * needs no extra synchronisation. */
typedef struct baton_stream {
    baton_device device;
    void *stream;
} baton_stream;

/* Ownership: a runtime holds a reference on its plan (and so on the plan's registry); the
 * caller owns the runtime and frees it with baton_runtime_destroy(). A runtime is not
 * thread-safe: use one per thread (they may share a plan). */
typedef struct baton_runtime baton_runtime;

/* Prepares a plan for running: allocates each device's arena, loads constants, creates
 * streams and delegate states. opts NULL means baton_options_init()'s defaults; opts is read by
 * its struct_size ("Versions and the ABI"; 0 is BATON_EINVAL); a field out of range (an unknown
 * mode or gpu backend, a negative or over-1 s sim_delay_us, a negative cpu_threads, a cpu_pool
 * without run) is BATON_EINVAL naming the field and its allowed values. */
BATON_API int baton_runtime_create(const baton_plan *plan, const baton_options *opts,
                                   baton_runtime **out, baton_error *err);
BATON_API void baton_runtime_destroy(baton_runtime *rt);

/* Copies a host buffer of exactly the tensor's byte size into an input tensor, which keeps it for
 * the runs that follow until set again. BATON_EINVAL for a tensor that is not an input, a wrong
 * size or a NULL data. */
BATON_API int baton_runtime_set_input(baton_runtime *rt, const char *name, const void *data,
                                      size_t nbytes, baton_error *err);
/* Copies an output tensor, after a run that succeeded, or an input tensor (what was set) to a
 * host buffer of exactly the tensor's byte size. Other tensors cannot be read: the memory plan
 * reuses their space (BATON_EINVAL). An output before any run, or after a failed run, is
 * BATON_ESTATE. BATON_EINVAL for a wrong size or a NULL data. */
BATON_API int baton_runtime_get_output(baton_runtime *rt, const char *name, void *data,
                                       size_t nbytes, baton_error *err);

/* State tensors ("role": "state") keep their bytes from one run of a runtime to the next;
 * baton_runtime_get_output and baton_runtime_set_input read and write them by name (exactly the
 * tensor's bytes, between runs, at any time: before the first run they hold their init). They
 * are initialised from their init (zeros without one) at baton_runtime_create and by this call,
 * which puts every state tensor back so. Errors: BATON_EINVAL without a runtime, a device's
 * copy failure. */
BATON_API int baton_runtime_reset_state(baton_runtime *rt, baton_error *err);
/* Makes rt use `owner`'s state tensors instead of its own, by name: a prefill plan's runtime and
 * a decode plan's runtime then read and append one KV cache with no copy between them. Every state
 * tensor of rt's plan must be a state tensor of owner's plan with the same dtype and shape, used
 * on the same device, and the runtimes must use the same GPU backend (else BATON_EINVAL naming the
 * tensor, and nothing changes). Reads, writes and resets through either runtime reach the shared
 * bytes; runs of the two must not overlap (a runtime is not thread-safe anyway), and owner must
 * outlive rt. Graph mode captures rt's affected segments again on its next run (updated in
 * place). Call between runs. */
BATON_API int baton_runtime_share_state(baton_runtime *rt, const baton_runtime *owner,
                                        baton_error *err);

/* Dimensions bound at run time (the plan's "dims"): binds `name` to `value` for the next runs.
 * Every run starts at the dims' max; a run after a change first gives the steps that use a
 * dimension their actual shapes (baton_exec_ctx.sig, and their descriptors packed again) after
 * their target's check() accepted them, and its copies move the actual bytes (no allocation). An
 * input sized by one dimension may bind it instead: baton_runtime_set_input with the byte count
 * of its actual shape (two inputs that imply different values before a run: BATON_EINVAL naming
 * both); outputs are then read with the byte count of the last run's shape. BATON_ENOENT for a
 * name the plan does not declare (with a suggestion), BATON_EINVAL for a value outside its
 * bounds (naming the dimension and the bounds); a binding that a step's check() refuses fails the
 * next run with BATON_EINVAL naming the step and the dims, and the previous binding stays. */
BATON_API int baton_runtime_set_dims(baton_runtime *rt, const char *name, int64_t value,
                                     baton_error *err);
/* The value the next run binds `name` to. BATON_ENOENT for an unknown name. */
BATON_API int baton_runtime_get_dims(const baton_runtime *rt, const char *name, int64_t *value);
/* Graph mode keeps up to 8 executable graphs per GPU segment that depends on the dims, one per
 * binding: how many runs found their binding's graph ready (no capture, no update). Captures
 * and in-place updates count in baton_run_stats.captures and .graph_updates. Reset with
 * baton_runtime_reset_stats. */
BATON_API int64_t baton_runtime_graph_hits(const baton_runtime *rt);
/* Tensor `name`'s dtype and shape under the dims: the last run's for an output, the next run's
 * otherwise (its byte count is what get_output and set_input take). BATON_ENOENT for an unknown
 * name, BATON_EINVAL for NULL arguments. */
BATON_API int baton_runtime_tensor_desc(const baton_runtime *rt, const char *name,
                                        baton_tensor_desc *out);

/* Caller-owned input and output buffers, read and written in place by the runs (no copies). */
typedef struct baton_buffer {
    baton_device device; /* where data lives: BATON_DEVICE_CPU (host memory) or cuda:N */
    void *data;          /* aligned to BATON_ARENA_ALIGN */
    size_t nbytes;       /* exactly the tensor's size */
    baton_dtype dtype;   /* the tensor's dtype */
} baton_buffer;

/* Binds tensor `tensor` (baton_plan_tensor_index), an input or an output, to caller memory for
 * the runs that follow, until it is bound again or unbound (buf NULL: back to the runtime's own
 * memory, which baton_runtime_set_input / get_output copy to and from). Binding again with a new
 * address each run is the intended use: it costs no copy and no allocation, and in graph mode it
 * patches the captured graph's nodes that read or write the tensor (docs/embedding.md).
 *
 * Where: a host buffer (device cpu) may be bound to any input or output; it must be pinned when a
 * CUDA device takes part. A device buffer (cuda:N) replaces the tensor's copy on that GPU: an
 * input bound there is not copied from the host, so nothing else may read it (no CPU step and no
 * other device); an output bound there is not copied back at the end, and get_output reads it from
 * there. On the CPU fallback there are no device buffers. With the test device (BATON_GPU_SIM) a
 * cuda:N buffer is host memory.
 *
 * Checks, each a BATON_EINVAL naming the tensor and the fix (the runtime stays usable and the
 * previous binding stays): not an input or output; nbytes, dtype or alignment wrong; a device the
 * tensor does not live on; on CUDA, memory that is not on that GPU (cudaPointerGetAttributes) or
 * host memory that is not pinned; a buffer that overlaps another bound tensor's or lies in the
 * runtime's arenas. Call between runs (not while a run is in progress). */
BATON_API int baton_runtime_bind(baton_runtime *rt, int tensor, const baton_buffer *buf,
                                 baton_error *err);

/* Runs the plan once. Allocates nothing, except in the first graph-mode run and the first run after
 * baton_runtime_recapture, which capture and instantiate the GPU segments' graphs. On failure err
 * names the step, device and call; the runtime stays usable. One run at a time per runtime: a call
 * while another thread's run of the same runtime is in progress returns BATON_ESTATE at once (an
 * atomic flag; use one runtime per thread, or a baton_pool). */
BATON_API int baton_runtime_run(baton_runtime *rt, baton_error *err);

/* Queues a run: baton_runtime_run without the host's wait at its end, so that the next run's work
 * is on the GPU before this one's ends (a decode loop whose tokens stay on the device: the GPU
 * goes from one run's graph to the next without waiting for the host). It returns once the run's
 * work is issued when every segment of the plan runs on a GPU of this process, no collective, in
 * boundary or graph mode; otherwise it is baton_runtime_run. Queued runs execute in order.
 * baton_runtime_wait ends them: the host waits, and the run-time errors of their kernels (an id
 * out of range...) are reported there, naming the step. Calls that read or write what queued runs
 * use wait for them first, and report their errors: set_input, get_output, the state calls,
 * set_dims, trace_write, and a bind that is not a new address on the same device; a bind of a
 * new address on the same device (the intended way to give each queued run its own inputs and
 * outputs) applies to the runs queued after it, and the caller keeps the old buffer valid until
 * the wait. Allocates nothing (after the first run, as baton_runtime_run). */
BATON_API int baton_runtime_run_async(baton_runtime *rt, baton_error *err);
/* Waits for the runs baton_runtime_run_async queued; 0 at once when none is. On failure, err
 * names the step whose kernel failed, and the runtime stays usable. */
BATON_API int baton_runtime_wait(baton_runtime *rt, baton_error *err);

/* Counters accumulated over the runs since the runtime was created or its counters reset
 * (baton_runtime_reset_stats). They count what reached a GPU: with the CPU fallback (cuda:N steps
 * run on the CPU, baton_runtime_gpu_backend() == BATON_GPU_CPU) those steps count in `steps` but
 * are not launches, and the copies between the CPU's arena and theirs are host memcpys, not
 * transfers, so neither counts in bytes_*. The test device (BATON_GPU_SIM) counts as a GPU. */
typedef struct baton_run_stats {
    int64_t runs;
    int64_t steps;
    /* kernel and delegate calls issued to a GPU's stream one by one (not graph replays); steps
     * that run inline on the CPU, a CPU step or a cuda:N step on the CPU fallback, are not */
    int64_t kernel_launches;
    int64_t host_waits; /* times the host blocked on a GPU */
    int64_t graph_launches;
    int64_t captures;
    int64_t graph_updates;
    int64_t bytes_h2d;    /* bytes copied from host memory to a GPU */
    int64_t bytes_d2h;    /* from a GPU to host memory */
    int64_t bytes_d2d;    /* between GPUs */
    int64_t queued_ahead; /* GPU segments queued before the CPU segment that feeds them ran */
} baton_run_stats;

BATON_API void baton_runtime_stats(const baton_runtime *rt, baton_run_stats *out);
BATON_API void baton_runtime_reset_stats(baton_runtime *rt);
/* Why a GPU segment runs uncaptured in graph mode, or NULL. */
BATON_API const char *baton_runtime_note(const baton_runtime *rt);
/* What prepare-time tuning chose for step `step` (baton_options.no_autotune), one line: the
 * layout the step launches and whether it was measured here, measured earlier in the process or
 * the only candidate ("staged by bulk copies, 3 stages, 256 threads, register rows' order
 * (tuned: 98.1 us against 101.5 us for the default, 4 variants measured on NVIDIA H100 80GB
 * HBM3)"). NULL for a step that was not tuned: no tuning hook, not on a CUDA GPU, or tuning
 * off. The string lives as long as the runtime. */
BATON_API const char *baton_runtime_tuning(const baton_runtime *rt, int step);
/* Makes the next graph-mode run capture every GPU segment again and update the executable graphs
 * in place (cudaGraphExecUpdate), e.g. after a delegate changed its algorithm. Counted in
 * baton_run_stats.graph_updates. */
BATON_API int baton_runtime_recapture(baton_runtime *rt);
/* The sync mode and the GPU backend the runtime actually uses (after any fallback). */
BATON_API baton_sync_mode baton_runtime_mode(const baton_runtime *rt);
BATON_API baton_gpu_backend baton_runtime_gpu_backend(const baton_runtime *rt);

/* Per-step timing for `baton bench`: when enabled the runtime records host time per step
 * (on GPUs this is issue time unless the mode is strict). */
BATON_API int baton_runtime_enable_step_timing(baton_runtime *rt, int enable);
BATON_API int baton_runtime_step_time_ns(const baton_runtime *rt, int step, int64_t *total_ns);

/* Tracing: trace_begin(rt, max_events) allocates room for max_events host spans and as many per
 * device (nothing is allocated while runs are traced; spans past the room are counted as dropped),
 * and trace_write writes a Chrome trace of the runs since (Perfetto and chrome://tracing open it;
 * docs/sync-modes.md, "Reading a trace"). Process "host" has a lane per device on which the host
 * issued steps, transfers and graph launches and waited (spans "wait ..."), and a lane of runs;
 * each GPU has a process of its own with what the device ran, from the device's side: the test
 * device's worker, or CUPTI's activity records on CUDA (when the library was built with CUPTI;
 * else the GPU processes are absent and the metadata says why). Spans carry args: step, target,
 * run, mode, bytes. Tracing off costs one branch per step. trace_begin(rt, 0) stops tracing
 * and frees the spans: a GPU timeline is process-wide (CUPTI records every kernel of the process
 * while any runtime traces), and costs time per kernel (see baton_gpu_busy_begin). */
BATON_API int baton_runtime_trace_begin(baton_runtime *rt, size_t max_events);
BATON_API int baton_runtime_trace_write(baton_runtime *rt, const char *path, baton_error *err);

/* ---------------------------------------------------------------------------------------------
 * .npy files
 * ------------------------------------------------------------------------------------------- */

/* Reads a little-endian, C-ordered .npy of a baton dtype. *data is malloc'd; free() it (NULL on
 * failure). Only a regular file is opened (a FIFO or device is refused, never waited on); the
 * header must be one numpy could write, and the file exactly as long as it says. Errors:
 * BATON_EIO for a file that cannot be read or is not such a .npy (the message names the file
 * and the fix), BATON_ENOMEM, BATON_EINVAL for NULL arguments. */
BATON_API int baton_npy_read(const char *path, baton_tensor_desc *desc, void **data,
                             baton_error *err);
/* Writes desc and its data as a version 1.0 .npy, the header as numpy.save writes it.
 * BATON_EINVAL for a desc with no .npy form (invalid dtype or rank, a negative dimension, a size
 * that overflows) or NULL data of nonzero size; BATON_EIO if the file cannot be written. */
BATON_API int baton_npy_write(const char *path, const baton_tensor_desc *desc, const void *data,
                              baton_error *err);

/* ---------------------------------------------------------------------------------------------
 * Logging
 * ------------------------------------------------------------------------------------------- */

typedef enum baton_log_level {
    BATON_LOG_ERROR = 0,
    BATON_LOG_WARNING = 1, /* e.g. the CPU fallback of a plan that asks for a GPU */
    BATON_LOG_NOTE = 2     /* e.g. a segment that runs without a CUDA graph, and why */
} baton_log_level;

/* Receives every message the library would otherwise print: one line, no newline, no prefix. It
 * may be called on any thread that calls into baton (and on a pool's workers), so it must be
 * thread-safe. */
typedef void (*baton_log_fn)(void *user, baton_log_level level, const char *message);

/* Installs the process-wide log callback (NULL: the default, which writes "baton: warning: ..."
 * lines to stderr). The library writes nothing to stderr or stdout itself. It receives what no
 * registry's own callback does (baton_registry_set_log). Set it before other threads use baton;
 * baton_options.quiet still silences a runtime's warnings and notes. */
BATON_API void baton_log_set(baton_log_fn fn, void *user);
/* Gives one registry its own log callback, so that two embedders in one process keep their
 * messages apart: what concerns the plans loaded from reg and the runtimes and pools prepared
 * from them goes to fn (with `user`) instead of the process-wide callback (the notes of built-in
 * delegates at baton_runtime_create included); NULL goes back to that. Messages with no registry
 * (the legacy XLA entry points) stay process-wide. Set it before
 * loading plans, and not concurrently with other calls on reg. */
BATON_API void baton_registry_set_log(baton_registry *reg, baton_log_fn fn, void *user);

/* Whether this build has CUDA support, and how many CUDA devices are present (0 if none). */
BATON_API int baton_cuda_built(void);
BATON_API int baton_cuda_device_count(void);

/* How busy the process's GPUs are. Between begin and end, every CUDA kernel and copy of the
 * process (baton's or not) is recorded with its device timestamps through CUPTI's activity API
 * (libcupti, loaded on demand); end sets *fraction to the part of the window in which at least
 * one of them ran, 0 to 1. end waits for the GPUs first. Recording slows every kernel launch
 * (about 0.6 us per kernel on an H100), so measure in a pass of its own, not while timing; it
 * cannot overlap a trace's device timeline being started or stopped. BATON_ENOTSUP with the
 * reason without CUDA, a GPU or CUPTI; BATON_ESTATE when not begun (or begun twice). */
BATON_API int baton_gpu_busy_begin(baton_error *err);
BATON_API int baton_gpu_busy_end(double *fraction, baton_error *err);
/* After baton_gpu_busy_end, CUDA device `device`'s part of that window: *fraction, the part in
 * which at least one of its kernels or copies ran, and *work_ns, the sum of their durations
 * within the window (work that ran side by side counts each time, so it may exceed the window:
 * divided by the runs of the window, the device time a run costs). Either may be NULL. It tells
 * which GPU of a plan over several is the busy one. BATON_EINVAL for a device outside 0 ..
 * BATON_BUSY_MAX_DEVICES - 1, BATON_ESTATE before a window has ended. */
#define BATON_BUSY_MAX_DEVICES 16
BATON_API int baton_gpu_busy_device(int device, double *fraction, int64_t *work_ns,
                                    baton_error *err);

#ifdef __cplusplus
}
#endif
#endif /* BATON_H */
