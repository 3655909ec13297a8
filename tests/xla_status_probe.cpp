// xla_status_probe.cpp: XLA's legacy custom-call status exactly as XLA declares it
// (xla/service/custom_call_status_internal.h), compiled with this machine's C++ library, for
// tests/test_xla_status.c to check that kernels/xla_status.c writes what XLA would read.
#include <cstring>
#include <new>
#include <optional>
#include <string>

#include "kernels/xla_status.h"

struct XlaCustomCallStatus_ {
    // A message present means failure.
    std::optional<std::string> message;
};

extern "C" {

void *probe_status_create(void)
{
    return new (std::nothrow) XlaCustomCallStatus_();
}

// Frees the status and its message with operator delete, as XLA does after the call.
void probe_status_destroy(void *s)
{
    delete static_cast<XlaCustomCallStatus_ *>(s);
}

// Reads the message as XLA's CustomCallStatusGetMessage does (an optional view), then copies it
// through std::string's own members: -1 when the status holds none, else its length.
long probe_status_message(const void *s, char *out, size_t cap)
{
    const auto &m = static_cast<const XlaCustomCallStatus_ *>(s)->message;
    if (!m)
        return -1;
    std::string copy;
    copy.reserve(m->size() + 1);
    copy.append(m->data(), m->size());
    std::strncpy(out, copy.c_str(), cap);
    out[cap - 1] = 0;
    return static_cast<long>(copy.size());
}

// Fails the status from C++ code, as XLA's thunk calls a custom call: this function is in the
// object that uses XLA's layout.
int probe_fail(void *s, const char *msg)
{
    return xla_status_fail(s, reinterpret_cast<const void *>(&probe_fail), msg);
}
}
