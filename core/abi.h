/* abi.h: reading a struct that a caller compiled against another version of baton.h. Structs
 * that may grow (baton_options, baton_target, baton_delegate_iface) start with `size_t
 * struct_size`; the library reads the fields that lie wholly inside it and defaults the rest, so
 * a caller built against an older header keeps working (baton.h states the promise). */
#ifndef BATON_CORE_ABI_H
#define BATON_CORE_ABI_H

#include <stddef.h>

#include "baton/baton.h"

/* One field of a versioned struct: where it lies. Tables list every field, struct_size first. */
typedef struct abi_field {
    size_t offset, size;
} abi_field;

#define ABI_FIELD(type, member)                                                                    \
    {                                                                                              \
        offsetof(type, member), sizeof(((type *)0)->member)                                        \
    }

/* Reads *src, whose caller says it is src->struct_size bytes, into dst (dst_size bytes, the
 * library's struct, already holding the defaults): each field lying wholly inside struct_size is
 * copied, the others keep their defaults, and dst's struct_size becomes dst_size. `what` names
 * the struct in messages ("baton_options", "target 'gemm'").
 *   BATON_EINVAL   struct_size is smaller than a size_t (0: never set): set it to sizeof.
 *   BATON_ENOTSUP  struct_size is larger than dst_size and a byte past dst_size is not zero: the
 *                  caller sets a field that this (older) library does not know. */
int baton__abi_read(void *dst, size_t dst_size, const void *src, const abi_field *fields,
                    int n_fields, const char *what, const char *type, baton_error *err);

#endif /* BATON_CORE_ABI_H */
