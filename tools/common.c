/* common.c: what `run` and `bench` share: loading a plan with the CLI's exit codes, binding a
 * plan's inputs from .npy files or seeded values, and the clock.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libgen.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

int cli_oom(const char *what, size_t bytes)
{
    char size[64] = "";
    if (bytes >= (1u << 30))
        snprintf(size, sizeof size, " (%zu bytes, %.1f GiB)", bytes, (double)bytes / (1u << 30));
    else if (bytes)
        snprintf(size, sizeof size, " (%zu bytes)", bytes);
    fprintf(stderr, "baton: out of memory: cannot allocate %s%s\n", what, size);
    return EXIT_RUN;
}

const char *cli_arena_total(const baton_plan *plan, char *buf, size_t cap)
{
    double total = 0;
    for (int i = 0; i < baton_plan_arena_count(plan); i++) {
        baton_arena a;
        if (baton_plan_arena_info(plan, i, &a) == 0)
            total += (double)a.nbytes;
    }
    snprintf(buf, cap, "%.0f bytes, %.1f GiB", total, total / (1u << 30));
    return buf;
}

int cli_load(const cli *c, baton_registry **reg, baton_plan **plan)
{
    baton_error err = {0};
    int rc = baton_registry_create(reg);
    if (rc)
        return cli_oom("the registry of targets", 0);
    for (int i = 0; i < c->n_plugins; i++) {
        rc = baton_registry_load_plugin(*reg, c->plugins[i], &err);
        if (rc) {
            fprintf(stderr, "baton: --plugin: %s\n", cli_esc(err.message));
            /* as for --input: a file that cannot be read is 4, one that is not what the option
             * takes (no plugin, or its init refused) is bad usage, not an invalid plan */
            return rc == BATON_EIO ? EXIT_IO : rc == BATON_ENOMEM ? EXIT_RUN : EXIT_USAGE;
        }
    }
    rc = baton_plan_load(*reg, c->plan_path, plan, &err);
    if (rc) {
        fprintf(stderr, "%s\n", cli_esc(err.message));
        /* a plan too large to read into memory is a file that could not be read (4), even for
         * validate, not a failed run (3) */
        return rc == BATON_EIO || rc == BATON_ENOMEM ? EXIT_IO : EXIT_PLAN;
    }
    return 0;
}

/* Fills an unbound input with reproducible N(0, 1) values: the plan format's seeded normal, so a
 * plan constant with the same seed holds the same bits. */
static void fill_default(const baton_tensor_info *ti, void *buf, uint64_t seed)
{
    baton_fill_normal(buf, ti->desc.dtype, baton_tensor_desc_numel(&ti->desc), seed, 0.0, 1.0);
}

/* "a, b, c" of the plan's tensors of one role, escaped, into buf. */
static void list_role(const baton_plan *plan, baton_role role, char *buf, size_t cap)
{
    size_t o = 0;
    int n = 0;
    buf[0] = 0;
    for (int t = 0; t < baton_plan_tensor_count(plan) && o + 8 < cap; t++) {
        baton_tensor_info ti;
        if (baton_plan_tensor_info(plan, t, &ti) || ti.role != role)
            continue;
        int w = snprintf(buf + o, cap - o, "%s%s", n++ ? ", " : "", cli_esc(ti.name));
        o = w < 0 || (size_t)w >= cap - o ? cap - 1 : o + (size_t)w;
    }
    if (!n)
        snprintf(buf, cap, "(none)");
    else if (o >= cap - 8)
        snprintf(buf + cap - 8, 8, ", ...");
}

/* The tensor of that role closest to name within a small edit distance, or NULL. */
static const char *closest(const baton_plan *plan, baton_role role, const char *name)
{
    const char *best = NULL;
    int best_d = 3; /* up to 2 edits, and fewer than half the name */
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        if (baton_plan_tensor_info(plan, t, &ti) || ti.role != role)
            continue;
        int d = cli_edit_distance(name, ti.name, 2);
        if (d < best_d && (size_t)d * 2 < strlen(ti.name) + 1)
            best = ti.name, best_d = d;
    }
    return best;
}

static const char *role_name(baton_role r)
{
    return r == BATON_ROLE_INPUT      ? "an input"
           : r == BATON_ROLE_OUTPUT   ? "an output"
           : r == BATON_ROLE_CONSTANT ? "a constant"
           : r == BATON_ROLE_STATE    ? "a state tensor"
                                      : "an intermediate tensor";
}

/* A binding's name must be a tensor of that role: else a message that says what it is instead
 * and lists the choices. */
static int check_name(const baton_plan *plan, const char *opt, const char *name, baton_role want)
{
    baton_tensor_info ti;
    int t = baton_plan_tensor_index(plan, name);
    if (t >= 0 && baton_plan_tensor_info(plan, t, &ti) == 0 && ti.role == want)
        return 0;
    char list[512], mean[600] = "";
    list_role(plan, want, list, sizeof list);
    /* a tensor of another role is what the user meant; say what it is, not what it resembles */
    const char *near = t < 0 ? closest(plan, want, name) : NULL;
    if (near)
        snprintf(mean, sizeof mean, " (did you mean '%s'?)", cli_esc(near));
    const char *what = want == BATON_ROLE_INPUT ? "inputs" : "outputs";
    if (t >= 0)
        fprintf(stderr, "baton: %s %s: '%s' is %s of the plan, not one of its %s%s; its %s: %s\n",
                opt, cli_esc(name), cli_esc(name), role_name(ti.role), what, mean, what, list);
    else
        fprintf(stderr, "baton: %s %s: the plan has no tensor of that name%s; its %s: %s\n", opt,
                cli_esc(name), mean, what, list);
    return EXIT_USAGE;
}

/* An output or trace path must be writable before anything runs: an existing regular file or
 * character device we may write, or a new name in a writable directory. */
static int check_writable(const char *opt, const char *name, const char *path)
{
    struct stat st;
    const char *why = NULL;
    char label[600];
    snprintf(label, sizeof label, "%s%s%s", opt, name ? " " : "", name ? cli_esc(name) : "");
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            why = "is a directory; give a file name";
        else if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode))
            why = "is not a regular file (a FIFO or socket would block or fail)";
        else if (access(path, W_OK))
            why = "exists and is not writable";
    } else {
        char *dup = strdup(path);
        if (!dup)
            return EXIT_RUN;
        const char *dir = dirname(dup);
        if (stat(dir, &st) || !S_ISDIR(st.st_mode))
            why = "is in a directory that does not exist; create it first";
        else if (access(dir, W_OK | X_OK))
            why = "is in a directory that is not writable";
        free(dup);
    }
    if (!why)
        return 0;
    fprintf(stderr, "baton: %s: %s %s; nothing was run or written\n", label, cli_esc(path), why);
    return EXIT_IO;
}

/* A file as the system names it: its device and inode when it exists, and its resolved path
 * (realpath of the file, or of its directory plus its name when it does not exist yet). */
typedef struct file_id {
    int exists, chr;
    dev_t dev;
    ino_t ino;
    char path[PATH_MAX + 256];
} file_id;

static void file_id_of(const char *path, file_id *f)
{
    struct stat st;
    memset(f, 0, sizeof *f);
    if (stat(path, &st) == 0) {
        f->exists = 1;
        f->chr = S_ISCHR(st.st_mode);
        f->dev = st.st_dev;
        f->ino = st.st_ino;
    }
    char buf[PATH_MAX];
    if (realpath(path, buf)) {
        snprintf(f->path, sizeof f->path, "%s", buf);
        return;
    }
    char *d1 = strdup(path), *d2 = strdup(path);
    if (d1 && d2 && realpath(dirname(d1), buf))
        snprintf(f->path, sizeof f->path, "%s/%s", buf, basename(d2));
    else
        snprintf(f->path, sizeof f->path, "%s", path);
    free(d1);
    free(d2);
}

/* Whether two paths name one file: the same device and inode, or the same resolved path. Two
 * character devices are not a conflict (writing /dev/null twice loses nothing). */
static int same_file(const file_id *a, const file_id *b)
{
    if (a->chr && b->chr)
        return 0;
    if (a->exists && b->exists)
        return a->dev == b->dev && a->ino == b->ino;
    return strcmp(a->path, b->path) == 0;
}

/* The files a command reads and writes: each written one must be no other. */
typedef struct file_use {
    char label[MAX_NAME + 32];
    const char *path;
    int writes;
    file_id id;
} file_use;

static int check_distinct(const cli *c)
{
    const int cap = 2 * MAX_BINDINGS + 4;
    file_use *u = calloc((size_t)cap, sizeof *u);
    if (!u)
        return cli_oom("the list of the command's files", (size_t)cap * sizeof *u);
    int n = 0;
    snprintf(u[n].label, sizeof u[n].label, "the plan file");
    u[n++].path = c->plan_path;
    for (int i = 0; i < c->n_in; i++) {
        snprintf(u[n].label, sizeof u[n].label, "--input %s", cli_esc(c->in[i].name));
        u[n++].path = c->in[i].path;
    }
    for (int i = 0; i < c->n_out; i++) {
        snprintf(u[n].label, sizeof u[n].label, "--output %s", cli_esc(c->out[i].name));
        u[n].writes = 1;
        u[n++].path = c->out[i].path;
    }
    if (c->trace) {
        snprintf(u[n].label, sizeof u[n].label, "--trace");
        u[n].writes = 1;
        u[n++].path = c->trace;
    }
    if (c->report) {
        snprintf(u[n].label, sizeof u[n].label, "--report");
        u[n].writes = 1;
        u[n++].path = c->report;
    }
    for (int i = 0; i < n; i++)
        file_id_of(u[i].path, &u[i].id);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        for (int k = 0; k < i && !rc; k++) {
            if (!(u[i].writes || u[k].writes) || !same_file(&u[i].id, &u[k].id))
                continue;
            fprintf(stderr,
                    "baton: %s (%s) and %s (%s) are the same file; %s; nothing was run or "
                    "written\n",
                    u[k].label, cli_esc(u[k].path), u[i].label, cli_esc(u[i].path),
                    u[i].writes && u[k].writes ? "give each file written its own path"
                                               : "a file written must not be one that is read");
            rc = EXIT_USAGE;
        }
    free(u);
    return rc;
}

int cli_check_bindings(const cli *c, const baton_plan *plan)
{
    int rc;
    for (int i = 0; i < c->n_in; i++)
        if ((rc = check_name(plan, "--input", c->in[i].name, BATON_ROLE_INPUT)))
            return rc;
    for (int i = 0; i < c->n_out; i++) {
        baton_tensor_info ti;
        int t = baton_plan_tensor_index(plan, c->out[i].name);
        if (t >= 0 && baton_plan_tensor_info(plan, t, &ti) == 0 && ti.role == BATON_ROLE_STATE)
            continue; /* state is read after the runs like an output */
        if ((rc = check_name(plan, "--output", c->out[i].name, BATON_ROLE_OUTPUT)))
            return rc;
    }
    for (int i = 0; i < c->n_dims; i++) {
        int known = 0;
        const char *name;
        for (int k = 0; k < baton_plan_dim_count(plan); k++)
            if (baton_plan_dim_info(plan, k, &name, NULL, NULL) == 0 &&
                strcmp(name, c->dim_name[i]) == 0)
                known = 1;
        if (!known) {
            fprintf(stderr, "baton: --dim %s: the plan has no dimension of that name%s\n",
                    cli_esc(c->dim_name[i]),
                    baton_plan_dim_count(plan) ? "" : " (it declares no \"dims\")");
            return EXIT_USAGE;
        }
    }
    const char *empty = c->trace && !c->trace[0]     ? "--trace"
                        : c->report && !c->report[0] ? "--report"
                                                     : NULL;
    if (empty) {
        fprintf(stderr, "baton: %s= names no file; give a path (%s=FILE)\n", empty, empty);
        return EXIT_USAGE;
    }
    if ((rc = check_distinct(c)))
        return rc;
    for (int i = 0; i < c->n_out; i++)
        if ((rc = check_writable("--output", c->out[i].name, c->out[i].path)))
            return rc;
    if (c->trace && (rc = check_writable("--trace", NULL, c->trace)))
        return rc;
    if (c->report && (rc = check_writable("--report", NULL, c->report)))
        return rc;
    return 0;
}

static void shape_str(const baton_tensor_desc *d, char *buf, size_t cap)
{
    size_t o = (size_t)snprintf(buf, cap, "%s [", baton_dtype_name(d->dtype));
    for (int i = 0; i < d->rank && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? "," : "", (long long)d->shape[i]);
    if (o < cap)
        snprintf(buf + o, cap - o, "]");
}

/* The bytes of each input read by cli_read_inputs (its shape may bind dims), by tensor. */
static size_t *in_bytes;

/* Whether an input file's shape fits tensor t: fixed axes equal, an axis sized by a dimension
 * within its bounds. */
static int shape_fits(const baton_plan *plan, int t, const baton_tensor_desc *want,
                      const baton_tensor_desc *got)
{
    if (got->dtype != want->dtype || got->rank != want->rank)
        return 0;
    for (int k = 0; k < got->rank; k++) {
        int d = baton_plan_tensor_dim(plan, t, k);
        int64_t lo, hi;
        if (d < 0) {
            if (got->shape[k] != want->shape[k])
                return 0;
        } else if (baton_plan_dim_info(plan, d, NULL, &lo, &hi) || got->shape[k] < lo ||
                   got->shape[k] > hi) {
            return 0;
        }
    }
    return 1;
}

/* Tensor t's bytes with the --dim values (the max for the others). */
static size_t bytes_with_dims(const cli *c, const baton_plan *plan, int t,
                              const baton_tensor_info *ti)
{
    size_t n = baton_dtype_size(ti->desc.dtype);
    for (int k = 0; k < ti->desc.rank; k++) {
        int64_t v = ti->desc.shape[k];
        int d = baton_plan_tensor_dim(plan, t, k);
        const char *name;
        if (d >= 0 && baton_plan_dim_info(plan, d, &name, NULL, NULL) == 0)
            for (int i = 0; i < c->n_dims; i++)
                if (strcmp(c->dim_name[i], name) == 0)
                    v = c->dim_value[i];
        n *= (size_t)v;
    }
    return n;
}

int cli_read_inputs(const cli *c, const baton_plan *plan, void **bufs, int note)
{
    free(in_bytes);
    in_bytes = calloc((size_t)baton_plan_tensor_count(plan) + 1, sizeof *in_bytes);
    if (!in_bytes)
        return EXIT_RUN;
    baton_error err = {0};
    int nt = baton_plan_tensor_count(plan);
    for (int t = 0; t < nt; t++)
        bufs[t] = NULL;
    for (int t = 0; t < nt; t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role != BATON_ROLE_INPUT)
            continue;
        const char *path = NULL;
        for (int i = 0; i < c->n_in; i++)
            if (strcmp(c->in[i].name, ti.name) == 0)
                path = c->in[i].path;
        if (path) {
            baton_tensor_desc d;
            void *buf = NULL;
            if (baton_npy_read(path, &d, &buf, &err)) {
                fprintf(stderr, "baton: --input %s: %s\n", cli_esc(ti.name),
                        err.message[0] ? cli_esc(err.message) : baton_strerror(err.code));
                cli_free_inputs(plan, bufs);
                return err.code == BATON_ENOMEM ? EXIT_RUN : EXIT_IO;
            }
            /* the exact dtype and shape, as for a constant's npy init: a (2,2) file is not [4] */
            if (!shape_fits(plan, t, &ti.desc, &d)) {
                char got[256], want[256];
                shape_str(&d, got, sizeof got);
                shape_str(&ti.desc, want, sizeof want);
                fprintf(stderr,
                        "baton: --input %s: %s holds %s, the plan's input is %s; give a file of "
                        "that dtype and shape\n",
                        cli_esc(ti.name), cli_esc(path), got, want);
                free(buf);
                cli_free_inputs(plan, bufs);
                return EXIT_USAGE;
            }
            bufs[t] = buf;
            in_bytes[t] = (size_t)baton_tensor_desc_numel(&d) * baton_dtype_size(d.dtype);
        } else {
            in_bytes[t] = bytes_with_dims(c, plan, t, &ti);
            bufs[t] = malloc(ti.nbytes ? ti.nbytes : 1);
            if (!bufs[t]) {
                cli_free_inputs(plan, bufs);
                char what[600];
                snprintf(what, sizeof what, "input '%s'", cli_esc(ti.name));
                return cli_oom(what, ti.nbytes);
            }
            fill_default(&ti, bufs[t], (uint64_t)t + 1);
            if (note && !c->opts.quiet)
                fprintf(stderr, "baton: note: input '%s' not given; filled with N(0,1), seed %d\n",
                        cli_esc(ti.name), t + 1);
        }
    }
    return 0;
}

void cli_free_inputs(const baton_plan *plan, void **bufs)
{
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        free(bufs[t]);
        bufs[t] = NULL;
    }
    free(in_bytes);
    in_bytes = NULL;
}

int cli_bind_inputs(const cli *c, const baton_plan *plan, baton_runtime *rt, void **bufs)
{
    baton_error err = {0};
    for (int i = 0; i < c->n_dims; i++)
        if (baton_runtime_set_dims(rt, c->dim_name[i], c->dim_value[i], &err)) {
            fprintf(stderr, "baton: --dim %s=%lld: %s\n", cli_esc(c->dim_name[i]), c->dim_value[i],
                    cli_esc(err.message));
            return EXIT_USAGE;
        }
    for (int t = 0; t < baton_plan_tensor_count(plan); t++) {
        baton_tensor_info ti;
        baton_plan_tensor_info(plan, t, &ti);
        if (ti.role != BATON_ROLE_INPUT)
            continue;
        size_t n = in_bytes && in_bytes[t] ? in_bytes[t] : ti.nbytes;
        if (baton_runtime_set_input(rt, ti.name, bufs[t], n, &err)) {
            fprintf(stderr, "baton: %s\n", cli_esc(err.message));
            return EXIT_RUN;
        }
    }
    return 0;
}

int64_t cli_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Temporaries to remove if the command is interrupted (SIGINT, SIGTERM, SIGHUP): the handler may
 * only unlink, which is async-signal-safe, then dies of the signal as it would have.
 *
 * The handler can run on any thread (OpenBLAS and CUDA start their own), so a temporary must never
 * exist unregistered while it runs: cli_temp_create blocks the signals on its own thread, raises
 * `creating` around mkstemp and the registration, and gives up if `dying` is already set; the
 * handler sets `dying`, then waits out `creating` (a few system calls) before it unlinks. With
 * sequentially consistent atomics one of the two always sees the other's flag. */
#define CLI_MAX_TEMPS (MAX_BINDINGS + 8)
static const char *volatile temps[CLI_MAX_TEMPS];
static atomic_int creating, dying;
static const int cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define N_CLEANUP_SIGNALS (sizeof cleanup_signals / sizeof cleanup_signals[0])

static void cleanup_set(sigset_t *set)
{
    sigemptyset(set);
    for (size_t i = 0; i < N_CLEANUP_SIGNALS; i++)
        sigaddset(set, cleanup_signals[i]);
}

static void temp_add(const char *path)
{
    for (int i = 0; i < CLI_MAX_TEMPS; i++)
        if (!temps[i]) {
            temps[i] = path;
            return;
        }
}

void cli_temp_remove(const char *path)
{
    for (int i = 0; i < CLI_MAX_TEMPS; i++)
        if (temps[i] == path)
            temps[i] = NULL;
}

int cli_temp_create(char *tmpl)
{
    sigset_t block, old;
    cleanup_set(&block);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    atomic_store(&creating, 1);
    int fd = -1;
    if (atomic_load(&dying)) {
        errno = EINTR; /* the command is being ended: make nothing the handler would miss */
    } else {
        fd = mkstemp(tmpl);
        if (fd >= 0)
            temp_add(tmpl);
    }
    atomic_store(&creating, 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return fd;
}

static void remove_temps(int sig)
{
    atomic_store(&dying, 1);
    while (atomic_load(&creating))
        ;
    for (int i = 0; i < CLI_MAX_TEMPS; i++)
        if (temps[i])
            unlink(temps[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

void cli_clean_up_on_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = remove_temps;
    cleanup_set(&sa.sa_mask);
    for (size_t i = 0; i < N_CLEANUP_SIGNALS; i++) {
        struct sigaction old;
        /* a signal ignored by whoever started us (nohup, a background job) stays ignored */
        if (sigaction(cleanup_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        sigaction(cleanup_signals[i], &sa, NULL);
    }
}

/* Output files appear whole or not at all: each is written to a temporary name beside it and
 * renamed over its path only when every file of the command has been written. A character device
 * (/dev/null, /dev/stdout) is written directly. */
int cli_stage(cli_staged *s, const char *path)
{
    struct stat st;
    s->path = path;
    s->direct = stat(path, &st) == 0 && S_ISCHR(st.st_mode);
    s->written = 0;
    if (s->direct) {
        snprintf(s->tmp, sizeof s->tmp, "%s", path);
        return 0;
    }
    if ((size_t)snprintf(s->tmp, sizeof s->tmp, "%s.baton-XXXXXX", path) >= sizeof s->tmp)
        return -1;
    int fd = cli_temp_create(s->tmp);
    if (fd < 0)
        return -1;
    s->written = 1;
    /* mkstemp makes 0600; the final file gets what a plain create would */
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask)) {
        int e = errno;
        close(fd);
        cli_discard(s, 1);
        errno = e;
        return -1;
    }
    close(fd);
    return 0;
}

int cli_commit(cli_staged *s, int n)
{
    for (int i = 0; i < n; i++)
        if (!s[i].direct && rename(s[i].tmp, s[i].path)) {
            fprintf(stderr, "baton: cannot rename %s to %s: %s\n", cli_esc(s[i].tmp),
                    cli_esc(s[i].path), strerror(errno));
            cli_discard(s + i, n - i);
            return EXIT_IO;
        } else {
            s[i].written = 0;
            cli_temp_remove(s[i].tmp);
        }
    return 0;
}

void cli_discard(cli_staged *s, int n)
{
    for (int i = 0; i < n; i++)
        if (s[i].written && !s[i].direct) {
            unlink(s[i].tmp);
            cli_temp_remove(s[i].tmp);
            s[i].written = 0;
        }
}

void cli_progress_begin(cli_progress *p, const cli *c, const char *what, int64_t total)
{
    memset(p, 0, sizeof *p);
    p->on = !c->opts.quiet && total > 1 && isatty(STDERR_FILENO);
    p->what = what;
    p->total = total;
    p->t0 = cli_clock_ns();
}

void cli_progress_update(cli_progress *p, int64_t done)
{
    if (!p->on || done <= 0)
        return;
    int64_t now = cli_clock_ns(), elapsed = now - p->t0;
    double left_s = (double)elapsed / (double)done * (double)(p->total - done) / 1e9;
    if (!p->shown) {
        /* show it only for work that will take more than about 2 s in all, judged once the
         * first runs have taken 100 ms (or right away if one run is that slow) */
        if (elapsed < 100000000 && done < p->total)
            return;
        if ((double)elapsed / 1e9 + left_s < 2.0)
            return;
        p->shown = 1;
    } else if (now - p->last < 100000000 && done < p->total) {
        return; /* at most ~10 updates a second */
    }
    p->last = now;
    fprintf(stderr, "\r%s: %lld/%lld (%d%%), about %.0f s left\x1b[K", p->what, (long long)done,
            (long long)p->total, (int)(100 * done / p->total), left_s);
    fflush(stderr);
}

void cli_progress_end(cli_progress *p)
{
    if (p->shown) {
        fputs("\r\x1b[K", stderr);
        fflush(stderr);
    }
    p->shown = 0;
}

/* Whether a note of this text was printed before (and remembers it): a note is said once per
 * process, since `bench` prepares a runtime per mode and each would repeat the same ones. The
 * first NOTES_SEEN texts are remembered by hash; past that, notes print again. */
#define NOTES_SEEN 256
static int note_seen(const char *message)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static unsigned long long seen[NOTES_SEEN];
    static int n;
    unsigned long long h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)message; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    pthread_mutex_lock(&mu);
    int found = 0;
    for (int i = 0; i < n && !found; i++)
        found = seen[i] == h;
    if (!found && n < NOTES_SEEN)
        seen[n++] = h;
    pthread_mutex_unlock(&mu);
    return found;
}

void cli_log(void *user, baton_log_level level, const char *message)
{
    (void)user;
    if (level == BATON_LOG_NOTE && note_seen(message))
        return;
    static const char *const names[] = {"error", "warning", "note"};
    char said[2048], line[2048]; /* not cli_esc's shared buffers: a pool's workers may log too */
    cli_flags(message, said, sizeof said);
    cli_escape(said, line, sizeof line, 0);
    fprintf(stderr, "baton: %s: %s\n", (unsigned)level < 3 ? names[level] : "message", line);
}
