/* plugin.c: loading targets from a shared library (baton_registry_load_plugin). The plugin gets a
 * table of the registry functions, so it needs no link to libbaton and one plugin binary works
 * with every library of the same plugin API version. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "targets/registry.h"

static const baton_plugin_api plugin_api = {
    .struct_size = sizeof(baton_plugin_api),
    .api_version = BATON_PLUGIN_API_VERSION,
    .baton_version = BATON_VERSION,
    .registry_add = baton_registry_add,
    .registry_replace = baton_registry_replace,
    .registry_find = baton_registry_find,
    .attrs_find = baton_attrs_find,
    .tensor_desc_numel = baton_tensor_desc_numel,
    .dtype_size = baton_dtype_size,
    .strerror = baton_strerror,
};

void baton__plugin_close(void *handle)
{
    if (handle)
        dlclose(handle);
}

int baton_registry_load_plugin(baton_registry *reg, const char *path, baton_error *err)
{
    err_clear(err);
    if (!reg || !path)
        return baton__err_set(err, BATON_EINVAL,
                              "baton_registry_load_plugin: a registry and a path "
                              "are required");
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return baton__err_set(
                err, BATON_EIO,
                "plugin %s: no such file; give the path of the plugin's shared "
                "library (a path without '/' is looked up as a file here, not on the "
                "library path)",
                path);
        return baton__err_set(err, BATON_EIO, "plugin %s cannot be read: %s", path,
                              strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return baton__err_set(err, BATON_EIO,
                              "plugin %s is %s, not a file; give the path of the plugin's shared "
                              "library (the .so file itself)",
                              path, S_ISDIR(st.st_mode) ? "a directory" : "a special file");
    /* dlopen searches the library path for a bare name: make it a path, as stat() saw it */
    char local[4096];
    if (!strchr(path, '/')) {
        snprintf(local, sizeof local, "./%s", path);
        path = local;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return baton__err_set(err, BATON_EIO, "plugin %s cannot be loaded: %s", path,
                              why ? why : "unknown reason");
    }
    void *sym = dlsym(h, BATON_PLUGIN_INIT_SYMBOL);
    if (!sym) {
        dlclose(h);
        return baton__err_set(
            err, BATON_ENOTARGET,
            "plugin %s exports no %s(); a baton plugin defines it (docs/plugins.md)", path,
            BATON_PLUGIN_INIT_SYMBOL);
    }
    /* The loader checks the version, not the plugin (as ggml's backend loader does): a plugin
     * built against another baton.h would misread the structs it is handed before it could
     * check anything. One without the declaration predates it: version 1. */
    const unsigned int *declared = dlsym(h, BATON_PLUGIN_VERSION_SYMBOL);
    unsigned int version = declared ? *declared : 1;
    if (version != BATON_PLUGIN_API_VERSION) {
        dlclose(h);
        return baton__err_set(
            err, BATON_ENOTSUP,
            "plugin %s was built for plugin API %u%s, and this library offers %u: "
            "rebuild the plugin against this baton's baton.h "
            "(with BATON_PLUGIN_DECLARE_VERSION(); docs/plugins.md)",
            path, version, declared ? "" : " (it declares no " BATON_PLUGIN_VERSION_SYMBOL ")",
            BATON_PLUGIN_API_VERSION);
    }
    baton_plugin_init_fn init;
    memcpy(&init, &sym, sizeof init);         /* object to function pointer, as POSIX allows */
    if (baton__registry_has_plugin(reg, h)) { /* already loaded here: dlopen counted one more */
        dlclose(h);
        return 0;
    }
    registry_snapshot snap;
    if (baton__registry_snapshot_take(reg, &snap)) {
        dlclose(h);
        return baton__err_set(err, BATON_ENOMEM, "plugin %s: out of memory", path);
    }
    baton_error perr = {0};
    int rc = init(reg, &plugin_api, &perr);
    /* the plugin's message is its to fill, perhaps without a NUL: bound it before any read */
    perr.message[sizeof perr.message - 1] = 0;
    if (!rc && baton__registry_keep_plugin(reg, h))
        rc = baton__err_set(&perr, BATON_ENOMEM, "out of memory");
    if (rc) {
        /* undo what it registered, then nothing refers to its code: unload it */
        baton__registry_snapshot_restore(reg, &snap);
        baton__registry_snapshot_free(&snap);
        dlclose(h);
        /* callers act on BATON_E* codes (the CLI's exit codes): anything else is EINVAL */
        int code = rc < 0 && rc >= BATON_ECANCELED ? rc : BATON_EINVAL;
        if (perr.message[0])
            return baton__err_set(err, code, "plugin %s: %s() failed: %s", path,
                                  BATON_PLUGIN_INIT_SYMBOL, perr.message);
        return baton__err_set(err, code, "plugin %s: %s() failed with %d (%s) and no message", path,
                              BATON_PLUGIN_INIT_SYMBOL, rc, baton_strerror(rc));
    }
    baton__registry_snapshot_free(&snap);
    return 0;
}
