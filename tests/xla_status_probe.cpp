// xla_status_probe.cpp: a stand-in for XLA's GPU plugin, built as a shared library as jaxlib's
// is, for tests/test_xla_status.c. It declares the legacy custom-call status exactly as XLA does
// (xla/service/custom_call_status_internal.h) and runs a custom call as XLA's thunk runs one: an
// empty status, the call, then the message read as CustomCallStatusGetMessage reads it.
#include <cstring>
#include <optional>
#include <string>

#define PROBE_API __attribute__((visibility("default")))

struct XlaCustomCallStatus_ {
    // A message present means failure.
    std::optional<std::string> message;
};

namespace probe
{

// Exported, as the plugin exports thousands of functions that take a std::string: so this
// object's dynamic symbols name libstdc++'s C++11 string, which is what baton looks for.
PROBE_API size_t copy_message(const std::string &m, char *out, size_t cap)
{
    std::strncpy(out, m.c_str(), cap);
    out[cap - 1] = 0;
    return m.size();
}

} // namespace probe

extern "C" {

typedef int (*probe_custom_call)(void *status, const char *msg);

// Runs `call` on a new status, first failed with `preset` when that is not NULL. *how gets the
// call's return. Returns -1 when the status then holds no message, else the message's length
// (copied to out). The status, message included, is then freed as XLA frees it.
PROBE_API long probe_run(probe_custom_call call, const char *msg, const char *preset, int *how,
                         char *out, size_t cap)
{
    XlaCustomCallStatus_ status;
    if (preset)
        status.message = std::string(preset);
    *how = call(&status, msg);
    if (!status.message)
        return -1;
    return static_cast<long>(probe::copy_message(*status.message, out, cap));
}
}
