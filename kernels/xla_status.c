/* xla_status.c: failing an XLA legacy custom call from C (xla_status.h). XLA's own setter is used
 * where the process has it; pip's jaxlib has none (its linker dropped the unused function), so
 * otherwise, in a build with -DBATON_XLA_STATUS_LAYOUT=ON only, the status is written in the
 * layout XLA gives it, once the caller is known to have that layout. That relies on a private C++
 * layout of XLA's, hence opt-in (docs/kernels.md says the risk). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dl_iterate_phdr, memmem */
#endif
#include "kernels/xla_status.h"

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

typedef void (*status_set_failure_fn)(void *status, const char *message, size_t message_len);
typedef void *(*operator_new_fn)(size_t size, const void *nothrow_tag);

/* Symbol `name` as the loaded object at path `object` and its dependencies resolve it, through a
 * handle that only references the object (RTLD_NOLOAD); NULL where they have none, and for the
 * main program ("", as dl_iterate_phdr names it) or no object (NULL), which callers ask about
 * through RTLD_DEFAULT instead. */
static void *sym_in_object(const char *object, const char *name)
{
    if (!object || !object[0])
        return NULL;
    void *h = dlopen(object, RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return NULL;
    void *sym = dlsym(h, name);
    dlclose(h);
    return sym;
}

/* dl_iterate_phdr's callback: XLA's setter in one loaded object, into *out. */
static int find_setter_in(struct dl_phdr_info *info, size_t size, void *out)
{
    (void)size;
    void *sym = sym_in_object(info->dlpi_name, "XlaCustomCallStatusSetFailure");
    if (!sym)
        return 0;
    *(void **)out = sym;
    return 1;
}

/* XLA's XlaCustomCallStatusSetFailure, wherever the process has it: in the global scope (an XLA
 * linked into the program), or in a library loaded with RTLD_LOCAL, as Python loads jaxlib. The
 * search is made once; a NULL result is cached as "searched, absent" by the flag. */
static status_set_failure_fn xla_setter(void)
{
    static _Atomic(void *) cached;
    static atomic_int searched;
    void *sym = atomic_load(&cached);
    if (!sym && !atomic_load(&searched)) {
        sym = dlsym(RTLD_DEFAULT, "XlaCustomCallStatusSetFailure");
        if (!sym)
            dl_iterate_phdr(find_setter_in, &sym);
        atomic_store(&cached, sym);
        atomic_store(&searched, 1);
    }
    status_set_failure_fn set = NULL;
    memcpy(&set, &sym, sizeof set); /* object to function pointer, as POSIX allows */
    return set;
}

#if BATON_XLA_STATUS_LAYOUT /* opt-in: cmake -DBATON_XLA_STATUS_LAYOUT=ON */
/* ---- the status in XLA's layout ----------------------------------------------------------------
 * XLA defines the status (xla/service/custom_call_status_internal.h, unchanged since the status
 * API appeared in 2021) as
 *     struct XlaCustomCallStatus_ { std::optional<std::string> message; };
 * a message present meaning failure, and its GPU thunk makes one, empty, around each call, then
 * turns a message into an error. Under libstdc++'s C++11 ABI (stable since GCC 5) that is a
 * std::string (data pointer, size, then a 16-byte union of the short-string buffer and the
 * capacity) followed by optional's engaged flag at byte 32. jaxlib's CUDA plugin is such a build:
 * its CustomCallStatusGetMessage tests byte 32 and reads the pointer and size at 0 and 8. */
struct cxx11_string {
    char *data;
    size_t size;
    union {
        char local[16];
        size_t capacity;
    } u;
};
struct xla_status_layout {
    struct cxx11_string message;
    unsigned char engaged;
};
_Static_assert(offsetof(struct xla_status_layout, engaged) == 32, "libstdc++'s optional<string>");

/* The loaded object holding a code address, and its dynamic string table (the names it imports
 * and exports). */
struct object_at {
    uintptr_t addr;
    int found;
    const char *name; /* "" for the main program */
    const char *strtab;
    size_t strsz;
};

static int find_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct object_at *o = arg;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    const ElfW(Dyn) *dyn = NULL;
    int inside = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t s = info->dlpi_addr + ph->p_vaddr, e = s + ph->p_memsz;
        lo = s < lo ? s : lo;
        hi = e > hi ? e : hi;
        inside |= o->addr >= s && o->addr < e;
    }
    if (!inside)
        return 0;
    o->found = 1;
    o->name = info->dlpi_name ? info->dlpi_name : "";
    uintptr_t strtab = 0;
    size_t strsz = 0;
    for (; dyn && dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == DT_STRTAB)
            strtab = dyn->d_un.d_ptr;
        else if (dyn->d_tag == DT_STRSZ)
            strsz = dyn->d_un.d_val;
    }
    /* glibc relocates DT_STRTAB in place where the dynamic section is writable; where it does
     * not (musl, read-only dynamic sections) the entry is still the link-time address. */
    if (strtab && !(strtab >= lo && strtab < hi))
        strtab += info->dlpi_addr;
    if (strtab >= lo && strsz <= hi - strtab) {
        o->strtab = (const char *)strtab;
        o->strsz = strsz;
    }
    return 1;
}

/* BATON_XLA_STATUS_LAYOUT=0 turns the writing off, for an XLA whose status is not the one above
 * (the reason is then logged). Read once per process. */
static int layout_allowed(void)
{
    static int cache = ENV_UNREAD;
    return baton__env_flag("BATON_XLA_STATUS_LAYOUT", &cache) != 0;
}

static int has_name(const struct object_at *o, const char *part)
{
    return memmem(o->strtab, o->strsz, part, strlen(part)) != NULL;
}

/* Writes msg into a status in XLA's layout, if the object at `caller` was built against
 * libstdc++'s C++11 std::string (its dynamic symbols name the type: jaxlib's CUDA plugin imports
 * no string function, all are inlined, but exports thousands that take a std::string) and not
 * against libc++'s (std::__1), and the status is still empty. The buffer of a long message comes
 * from operator new, since XLA's std::string frees it with operator delete: the process's own
 * where it has one, which is what the caller binds to, else the caller's dependencies'. Where no
 * loaded object exports one, the caller carries a private copy of libstdc++ (linked statically),
 * whose delete is free(), so the buffer comes from malloc. */
static int write_in_layout(void *status, const void *caller, const char *msg)
{
    struct object_at o = {.addr = (uintptr_t)caller};
    if (!caller || !layout_allowed())
        return 0;
    dl_iterate_phdr(find_object, &o);
    if (!o.found || !o.strtab || !has_name(&o, "St7__cxx1112basic_stringIcSt11char_traitsIcE") ||
        has_name(&o, "St3__1"))
        return 0;
    struct xla_status_layout *s = status;
    if (s->engaged) /* not the empty status XLA makes: not ours to touch */
        return 0;

    size_t len = strlen(msg);
    char *buf = s->message.u.local;
    if (len >= sizeof s->message.u.local) {
        /* operator new(size, nothrow), looked up as the caller's own references bind: the global
         * scope first, then the caller's dependencies (a plugin loaded RTLD_LOCAL). */
        const char *new_name = "_ZnwmRKSt9nothrow_t";
        void *sym = dlsym(RTLD_DEFAULT, new_name);
        if (!sym)
            sym = sym_in_object(o.name, new_name);
        operator_new_fn new_nothrow = NULL;
        memcpy(&new_nothrow, &sym, sizeof new_nothrow);
        static const char nothrow_tag; /* std::nothrow_t is empty: only its address is passed */
        buf = new_nothrow ? new_nothrow(len + 1, &nothrow_tag) : malloc(len + 1);
        if (!buf)
            return 0;
        s->message.u.capacity = len;
    }
    memcpy(buf, msg, len + 1);
    s->message.data = buf;
    s->message.size = len;
    s->engaged = 1;
    return 1;
}

#else
/* Built without the layout writer: a status XLA's setter cannot fail is left alone, and the
 * caller logs the reason (the outputs stay unwritten). */
static int write_in_layout(void *status, const void *caller, const char *msg)
{
    (void)status, (void)caller, (void)msg;
    return 0;
}
#endif

int baton__xla_status_fail(void *status, const void *caller, const char *msg)
{
    if (!status || !msg)
        return XLA_STATUS_NOT_SET;
    status_set_failure_fn set = xla_setter();
    if (set) {
        set(status, msg, strlen(msg));
        return XLA_STATUS_BY_XLA;
    }
    return write_in_layout(status, caller, msg) ? XLA_STATUS_BY_LAYOUT : XLA_STATUS_NOT_SET;
}
