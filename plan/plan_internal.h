/* plan_internal.h: the in-memory plan shared by plan/ (loader, validator, analysis) and
 * scheduler/. Users see it only through the accessors in baton.h. */
#ifndef BATON_PLAN_INTERNAL_H
#define BATON_PLAN_INTERNAL_H

#include <stdatomic.h>
#include <stdio.h>

#include "baton/baton.h"
#include "core/core.h"
#include "core/tune.h"

/* Where a thing was written in the plan file, for messages. 0 means unknown. */
typedef struct plan_pos {
    int line;
    int column;
} plan_pos;

typedef enum init_kind {
    INIT_NONE = 0,   /* inputs and intermediates */
    INIT_FILL,       /* every element = value */
    INIT_NORMAL,     /* seeded N(mean, std) */
    INIT_UNIFORM,    /* seeded U[low, high) */
    INIT_NPY,        /* a .npy file, path relative to the plan file */
    INIT_VALUES,     /* inline values, exactly numel of them */
    INIT_SAFETENSORS /* a tensor of a safetensors file (plan/safetensors.c), mapped */
} init_kind;

typedef struct st_file st_file;

typedef struct tensor_init {
    init_kind kind;
    double value;     /* FILL */
    double mean, std; /* NORMAL */
    double low, high; /* UNIFORM */
    uint64_t seed;    /* NORMAL, UNIFORM */
    char *path;       /* NPY, resolved against the plan's directory */
    double *values;   /* VALUES, numel entries */
    int64_t n_values;
    char *key;          /* SAFETENSORS: the tensor's name in the file */
    st_file *st;        /* SAFETENSORS: the mapping (one reference, dropped by baton_plan_free) */
    const void *mapped; /* SAFETENSORS: its bytes in the mapping (read-only) */
    /* SAFETENSORS: nonzero when the bytes are aligned to the element size, so that a CPU step
     * reads them in place instead of a copy in the arena (analyse.c gives them no slot). */
    int in_place;
} tensor_init;

typedef struct plan_tensor {
    char *name;
    baton_tensor_desc desc; /* a dimension named in the shape counts at its max */
    baton_role role;
    tensor_init init;
    size_t nbytes; /* at the dims' max */
    plan_pos pos;
    /* Per axis: the plan's dimension (plan.dims) that sizes it at run time, or -1 (fixed). */
    signed char dim[BATON_MAX_RANK];
    int has_dims;
    /* "view_of": the tensor whose bytes this one is (-1: none), and the end of that chain, whose
     * slot holds the bytes (the tensor itself when it is no view). */
    int view_of;
    int storage;
    plan_pos view_pos;
    /* A state tensor: the device whose steps use it (all on one), in memory-plan order of
     * baton__plan_memory_index once analysed; -1 before validation or when no step uses it. */
    baton_device state_device;
    /* dataflow, filled by the validator */
    int producer;   /* step index that writes it, -1 for inputs and constants */
    int first_read; /* first step that reads it, -1 if none */
    int last_read;  /* last step that reads it, -1 if none */
} plan_tensor;

typedef enum plan_collective {
    PLAN_COLL_NONE = 0,
    PLAN_COLL_ALL_REDUCE, /* the element-wise sum of the inputs, on every device */
    PLAN_COLL_ALL_GATHER  /* the inputs concatenated along dim 0 in group order, on every device */
} plan_collective;

typedef struct plan_step {
    char *name;
    char *target_name;
    const baton_target *target;     /* resolved by the validator */
    kernel_tune_fn cuda_tune;       /* its CUDA kernel's tuning hook (targets/builtin.h), or NULL */
    kernel_prepare_fn cuda_prepare; /* its CUDA kernel's prepare hook (core/tune.h), or NULL */
    kernel_error_fn cuda_errors;    /* its CUDA kernel's run-time error record, or NULL */
    baton_target_kind kind;
    baton_device device;
    /* The device the plan wrote when the validator moved the step to the CPU (a cuda:N step whose
     * target has only a CPU implementation: the per-step fallback), else kind NONE. */
    baton_device fallback_from;
    int n_inputs, n_outputs;
    int *inputs;  /* tensor indices */
    int *outputs; /* tensor indices */
    int n_attrs;
    baton_attr *attrs; /* names and strings owned by the plan */
    /* The descriptor passed to the kernel (opaque_len bytes, never NULL once validated): from the
     * plan's "opaque" hex when given (opaque_verbatim = 1), else from the target's pack(). */
    const char *opaque;
    size_t opaque_len;
    int opaque_verbatim;
    plan_pos pos;
    /* where parts of the step were written (loader), for the validator's messages */
    plan_pos target_pos;              /* the "kernel" or "delegate" value */
    plan_pos device_pos;              /* the "device" value */
    plan_pos *input_pos, *output_pos; /* per entry of inputs / outputs */
    plan_pos *attr_pos;               /* per attribute: its key */
    /* A collective (kind BATON_TARGET_COLLECTIVE): its op and the group of devices it spans;
     * inputs[i] is read and outputs[i] written on group[i]. `device` is group[0]. */
    plan_collective coll;
    int n_group;
    baton_device *group;
    int has_dims; /* reads or writes a tensor sized by a dimension */
    /* analysis */
    int segment;
    baton_device next_device;
    baton_target_kind next_kind;
} plan_step;

/* The device a step reads its input k, or writes its output k, on: group[k] for a collective,
 * else the step's device. */
static inline baton_device step_arg_device(const plan_step *s, int k)
{
    return s->n_group ? s->group[k] : s->device;
}

/* The devices a step runs on (*n of them): a collective's group, else its one device. */
static inline const baton_device *step_devices(const plan_step *s, int *n)
{
    *n = s->n_group ? s->n_group : 1;
    return s->n_group ? s->group : &s->device;
}

/* ---- analysis ---- */

/* A maximal run of consecutive steps on one device, or one collective step (a segment of its own,
 * over its group; `device` is the group's first). */
typedef struct plan_segment {
    baton_device device;
    int first_step, last_step; /* inclusive */
    int collective;            /* the segment is one collective step */
} plan_segment;

/* A copy of a tensor from the device that holds it to the device that reads it. Issued at the
 * start of segment `segment` (the boundary into it), or at the end of the run for outputs that
 * live on a GPU (segment == n_segments). */
typedef struct plan_transfer {
    int tensor;
    baton_device from, to;
    int segment;
} plan_transfer;

/* A change of device between two consecutive segments. */
typedef struct plan_boundary {
    int after_step; /* last step of the segment before the boundary */
    baton_device from, to;
    int first_transfer, n_transfers; /* into plan.transfers */
    int host_wait;                   /* boundary and graph modes wait here: GPU -> CPU */
} plan_boundary;

/* Per device: one arena, and where each tensor's copy on that device lives in it. */
typedef struct plan_memory {
    baton_device device;
    size_t arena_bytes;
    size_t naive_bytes; /* the sum of all slot sizes, to show what reuse saved */
    /* Constants live whole runs and are placed first: they fill [0, const_bytes) of the arena,
     * so instances of one prepared plan can share them (scheduler/pool.c). */
    size_t const_bytes;
    int64_t *offset; /* per tensor: byte offset in the arena, -1 if not on this device */
    int *live_begin; /* per tensor: first position at which the slot is live (see analyse.c) */
    int *live_end;   /* per tensor: last position, inclusive */
} plan_memory;

/* A point where the host waits for a device, in one sync mode. */
typedef struct plan_sync_point {
    int after_step; /* the host waits after this step has been issued */
    baton_device device;
    const char *why; /* "step", "boundary", "end" */
} plan_sync_point;

#define PLAN_MAX_DEVICES CORE_MAX_DEVICES

/* A slot of a name index: the item, and bits of its name's hash so that a probe compares names
 * only when these match. */
typedef struct plan_name_slot {
    int item;
    uint32_t tag;
} plan_name_slot;

/* A dimension bound at run time ("dims"): memory is planned for max. */
typedef struct plan_dim {
    char *name;
    int64_t min, max;
    plan_pos pos;
} plan_dim;

/* memory.offset of a constant that CPU steps read in place from its mapping (safetensors), so it
 * takes no room in the arena. */
#define PLAN_OFFSET_MAPPED (-2)

struct baton_plan {
    /* The loader's reference plus one per runtime; the plan holds one on its registry. */
    atomic_int refs;
    const baton_registry *registry;
    const log_sink *log; /* the registry's (baton__registry_log): where its runtimes' messages go */
    char *source;        /* the file name, for messages */
    char *base_dir;      /* for npy paths */
    char *name;
    int n_tensors;
    plan_tensor *tensors;
    int n_steps;
    plan_step *steps;
    int n_dims;
    plan_dim *dims;
    int has_state; /* a tensor has role state */

    /* analysis (plan/analyse.c) */
    int n_segments;
    plan_segment *segments;
    int n_boundaries;
    plan_boundary *boundaries;
    int n_transfers;
    plan_transfer *transfers;
    int n_devices; /* distinct devices used, the CPU always first */
    plan_memory memory[PLAN_MAX_DEVICES];
    int n_sync[3]; /* per baton_sync_mode */
    plan_sync_point *sync[3];

    /* name indexes (plan/plan.c): open addressing, item -1 marks an empty slot */
    plan_name_slot *tensor_index;
    plan_name_slot *step_index;
    unsigned index_mask;   /* both tables have index_mask + 1 slots */
    uint64_t index_key[2]; /* the names' hash key, random per plan (see plan.c) */

    /* the pool (plan/plan.c) that holds names, argument lists, attributes and descriptors */
    struct plan_pool_block *pool;
    char *pool_next;
    size_t pool_left;
};

/* The most inputs or outputs one step may list; the longest name (core/core.h). */
#define PLAN_MAX_STEP_ARGS CORE_MAX_STEP_ARGS
#define PLAN_MAX_NAME      CORE_MAX_NAME

/* plan/plan.c: takes one more reference on a plan (thread-safe), as a runtime does; returns it.
 * baton_plan_free drops one. */
const baton_plan *baton__plan_retain(const baton_plan *plan);

/* plan/plan.c: name lookup. baton__plan_index_create sizes both tables for n_tensors and n_steps;
 * plan_index_add_* return -1 when added, or the index that already holds the name. */
int baton__plan_index_create(baton_plan *plan);
int baton__plan_index_add_tensor(baton_plan *plan, int i);
int baton__plan_index_add_step(baton_plan *plan, int i);
int baton__plan_find_tensor(const baton_plan *plan, const char *name); /* -1 if absent */
int baton__plan_find_step(const baton_plan *plan, const char *name);   /* -1 if absent */

/* plan/plan.c: memory that lives as long as the plan, carved from a few large blocks that
 * baton_plan_free releases at once, so that a million-step plan does not make millions of small
 * allocations. Names, steps' tensor lists and positions, attributes and descriptors live there;
 * nothing in it is freed on its own. baton__plan_alloc returns size bytes aligned for any field of
 * the plan (NULL when out of memory); baton__plan_strdup copies len bytes and a NUL. */
void *baton__plan_alloc(baton_plan *plan, size_t size);
char *baton__plan_strdup(baton_plan *plan, const char *s, size_t len);
/* The descriptor of a step that has none: zero bytes, but not NULL. */
extern const char baton__plan_no_descriptor[1];

/* plan/plan.c: "did you mean" for names, keys and enum words: the closest candidate within a
 * small edit distance (case-insensitive, transpositions count 1), or NULL. */
typedef struct plan_suggest {
    const char *word;
    const char *best;
    int best_dist;
} plan_suggest;
void baton__plan_suggest_init(plan_suggest *s, const char *word);
void baton__plan_suggest_try(plan_suggest *s, const char *candidate);
const char *baton__plan_suggest_best(const plan_suggest *s);

/* plan/init.c: fills dst (the tensor's nbytes) with a constant's or a state tensor's initial
 * value (a state without init: zeros), rounded to its dtype. Deterministic on every machine for
 * fill, normal, uniform and values; docs/plan-format.md gives the algorithms. BATON_EINVAL for a
 * tensor that is not a constant; npy errors as baton_npy_read gives them, prefixed with the tensor.
 */
int baton__plan_tensor_materialize(const baton_plan *plan, int tensor, void *dst, baton_error *err);

/* plan/validate.c: resolves targets, checks signatures and dataflow, packs descriptors. */
int baton__plan_validate(baton_plan *plan, baton_error *err);
/* plan/analyse.c: segments, boundaries, transfers, memory plan, sync points. */
int baton__plan_analyse(baton_plan *plan, baton_error *err);
/* plan/describe.c */
int baton__plan_describe(const baton_plan *plan, FILE *f, int as_json);

/* Index of the memory plan for a device, or -1. */
int baton__plan_memory_index(const baton_plan *plan, baton_device dev);
/* plan/analyse.c: whether segment s runs on dev (a collective: on any device of its group). */
int baton__plan_segment_runs_on(const baton_plan *plan, int s, baton_device dev);

/* plan/npy.c: opens path for reading if it is a regular file, without ever blocking (a FIFO,
 * directory, device or socket is refused with "PATH is a FIFO, not a regular file: give the path
 * of a WHAT"). Returns the descriptor and its size, or a negative BATON_E* code with err set. */
int baton__plan_open_regular(const char *path, const char *what, uint64_t *size, baton_error *err);

/* plan/npy.c: parses the magic, version and header of a .npy held in buf: the first len bytes
 * of a file of file_size bytes, with len >= min(file_size, NPY_PREFIX_MAX). On success fills
 * desc and *data_offset, and file_size - *data_offset is exactly the data the header describes.
 * Otherwise returns BATON_EIO with a message naming `name` and the fix. Never reads past len. */
#define NPY_PREFIX_MAX (12 + 65535)
int baton__npy_parse(const void *buf, size_t len, uint64_t file_size, const char *name,
                     baton_tensor_desc *desc, size_t *data_offset, baton_error *err);
/* plan/npy.c: the magic, version, header dict and padding that baton__npy_parse reads back as desc,
 * into buf (NPY_PREFIX_MAX bytes fit any desc). Returns its length, or 0 when desc has no .npy
 * form (invalid dtype, rank or dimension; a size that overflows). */
size_t baton__npy_format_header(const baton_tensor_desc *desc, unsigned char *buf, size_t cap);

/* plan/safetensors.c: the header of a safetensors file. entries are sorted by name; begin and end
 * are offsets into the data, which starts at byte data_start of the file. */
typedef struct st_entry {
    const char *name;
    baton_tensor_desc desc;
    uint64_t begin, end;
} st_entry;
typedef struct st_header {
    int n;
    st_entry *entries;
    char *names; /* the entries' names, one block */
    uint64_t data_start, data_len;
} st_header;
/* Parses and checks the header of a safetensors file of file_size bytes whose first len bytes
 * are buf (len >= 8 + the header's length, or the whole file). BATON_EIO with a message naming
 * `name`, what is wrong and the fix (printable ASCII only); BATON_ENOMEM. Free with
 * baton__st_header_free (also safe after a failure). */
int baton__st_parse(const void *buf, size_t len, uint64_t file_size, const char *name,
                    st_header *out, baton_error *err);
void baton__st_header_free(st_header *h);
/* The entry of that name, or -1. */
int baton__st_header_find(const st_header *h, const char *key);
/* Maps a regular file read-only and checks its header, or takes another reference on the
 * process's mapping of the same file (device and inode, unchanged size and mtime). Thread-safe.
 * Errors as baton__st_parse, and baton__plan_open_regular's for what is not a readable regular
 * file. */
int baton__st_open(const char *path, st_file **out, baton_error *err);
/* Drops a reference; the last unmaps the file. NULL is a no-op. */
void baton__st_release(st_file *f);
const st_header *baton__st_file_header(const st_file *f);
const void *baton__st_file_data(const st_file *f, int entry);
/* How many files the process has mapped now (tests). */
int baton__st_cache_count(void);

/* plan/plan.c: formats "source:line:column: message" into err and returns code. */
int baton__plan_error(baton_error *err, int code, const baton_plan *plan, plan_pos pos,
                      const char *fmt, ...) CORE_PRINTF(5, 6);

#endif /* BATON_PLAN_INTERNAL_H */
