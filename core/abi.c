/* abi.c: reads versioned structs field by field (see abi.h), the one place that decides what a
 * struct_size from an older or newer header means. */
#include <string.h>

#include "core/abi.h"
#include "core/core.h"

int baton__abi_read(void *dst, size_t dst_size, const void *src, const abi_field *fields,
                    int n_fields, const char *what, const char *type, baton_error *err)
{
    size_t size;
    memcpy(&size, src, sizeof size); /* struct_size leads every versioned struct */
    if (size < sizeof(size_t))
        return baton__err_set(err, BATON_EINVAL,
                              "%s: struct_size is %zu; set it to sizeof(%s), the size in the "
                              "baton.h the caller compiles against",
                              what, size, type);
    if (size > dst_size) {
        const unsigned char *tail = (const unsigned char *)src + dst_size;
        for (size_t i = 0; i < size - dst_size; i++)
            if (tail[i])
                return baton__err_set(
                    err, BATON_ENOTSUP,
                    "%s: struct_size is %zu but this libbaton %s knows %zu bytes of %s, and byte "
                    "%zu is set: the caller was built against a newer baton.h and uses a field "
                    "this library does not have; link the newer libbaton, or leave that field "
                    "zero",
                    what, size, baton_version_string(), dst_size, type, dst_size + i);
    }
    for (int f = 0; f < n_fields; f++)
        if (fields[f].offset + fields[f].size <= size)
            memcpy((char *)dst + fields[f].offset, (const char *)src + fields[f].offset,
                   fields[f].size);
    memcpy(dst, &dst_size, sizeof dst_size);
    return 0;
}
