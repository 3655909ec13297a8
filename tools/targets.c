/* targets.c: `baton targets [--json] [--plugin=PATH]...`: every target a registry holds (the
 * built-ins and those of the plugins named), with its kind, devices, inputs, outputs, in-place
 * aliases and attributes, as text or JSON. docs/targets.md is generated from the JSON
 * (scripts/gen_targets_doc.py). Public API only. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *attr_type_name(baton_attr_type t)
{
    switch (t) {
    case BATON_ATTR_INT: return "int";
    case BATON_ATTR_FLOAT: return "float";
    case BATON_ATTR_BOOL: return "bool";
    case BATON_ATTR_STRING: return "string";
    default: return "none";
    }
}

static const char *device_name(baton_device_kind k)
{
    return k == BATON_DEVICE_CPU ? "cpu" : k == BATON_DEVICE_CUDA ? "cuda" : "none";
}

static json_t *target_json(const baton_target *t)
{
    json_t *o = json_object(), *devs = json_array(), *attrs = json_array(), *al = json_array();
    json_object_set_new(o, "name", json_string(t->name));
    json_object_set_new(o, "kind",
                        json_string(t->kind == BATON_TARGET_DELEGATE ? "delegate" : "kernel"));
    for (int i = 0; i < t->n_impls; i++)
        json_array_append_new(devs, json_string(device_name(t->impls[i].device)));
    json_object_set_new(o, "devices", devs);
    json_object_set_new(o, "inputs", json_integer(t->n_inputs));
    json_object_set_new(o, "outputs", json_integer(t->n_outputs));
    json_object_set_new(o, "summary", json_string(t->summary ? t->summary : ""));
    for (int i = 0; i < BATON_MAX_ATTR_SPECS && t->attrs[i].name; i++) {
        json_t *a = json_object();
        json_object_set_new(a, "name", json_string(t->attrs[i].name));
        json_object_set_new(a, "type", json_string(attr_type_name(t->attrs[i].type)));
        json_object_set_new(a, "required", json_boolean(t->attrs[i].required));
        json_object_set_new(a, "help", json_string(t->attrs[i].help ? t->attrs[i].help : ""));
        json_array_append_new(attrs, a);
    }
    json_object_set_new(o, "attrs", attrs);
    for (int i = 0; i < t->n_aliases && i < BATON_MAX_ALIASES; i++) {
        json_t *a = json_object();
        json_object_set_new(a, "output", json_integer(t->aliases[i].output));
        json_object_set_new(a, "input", json_integer(t->aliases[i].input));
        json_array_append_new(al, a);
    }
    json_object_set_new(o, "aliases", al);
    return o;
}

static void target_text(const baton_target *t)
{
    printf("%s  (%s on", cli_esc(t->name),
           t->kind == BATON_TARGET_DELEGATE ? "delegate" : "kernel");
    for (int i = 0; i < t->n_impls; i++)
        printf("%s %s", i ? "," : "", device_name(t->impls[i].device));
    printf("; %d input%s, %d output%s", t->n_inputs, t->n_inputs == 1 ? "" : "s", t->n_outputs,
           t->n_outputs == 1 ? "" : "s");
    for (int i = 0; i < t->n_aliases && i < BATON_MAX_ALIASES; i++)
        printf("; output %d in place of input %d", t->aliases[i].output, t->aliases[i].input);
    printf(")\n");
    if (t->summary)
        printf("    %s\n", cli_esc(t->summary));
    for (int i = 0; i < BATON_MAX_ATTR_SPECS && t->attrs[i].name; i++)
        printf("    %s: %s%s: %s\n", cli_esc(t->attrs[i].name), attr_type_name(t->attrs[i].type),
               t->attrs[i].required ? ", required" : "",
               cli_esc(t->attrs[i].help ? t->attrs[i].help : ""));
}

int cmd_targets(int argc, char **argv)
{
    int json = 0;
    const char *plugins[MAX_PLUGINS];
    int n_plugins = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            cli_print_usage("targets");
            return 0;
        } else if (strncmp(a, "--plugin=", 9) == 0 || strcmp(a, "--plugin") == 0) {
            const char *p = a[8] == '=' ? a + 9 : (i + 1 < argc ? argv[++i] : NULL);
            if (!p || !*p) {
                fprintf(stderr, "baton targets: --plugin needs a path (--plugin=PATH)\n");
                return EXIT_USAGE;
            }
            if (n_plugins == MAX_PLUGINS) {
                fprintf(stderr, "baton targets: at most %d --plugin options\n", MAX_PLUGINS);
                return EXIT_USAGE;
            }
            plugins[n_plugins++] = p;
        } else {
            fprintf(stderr, "baton targets: unknown option '%s' (takes --json and --plugin=PATH)\n",
                    cli_esc(a));
            return EXIT_USAGE;
        }
    }
    baton_registry *reg = NULL;
    baton_error err = {0};
    if (baton_registry_create(&reg)) {
        fprintf(stderr, "baton targets: cannot create a registry\n");
        return EXIT_RUN;
    }
    for (int i = 0; i < n_plugins; i++)
        if (baton_registry_load_plugin(reg, plugins[i], &err)) {
            fprintf(stderr, "baton: --plugin %s: %s\n", cli_esc(plugins[i]), cli_esc(err.message));
            baton_registry_destroy(reg);
            return err.code == BATON_EIO ? EXIT_IO : EXIT_PLAN;
        }
    const int n = baton_registry_count(reg);
    if (json) {
        json_t *root = json_object(), *arr = json_array();
        json_object_set_new(root, "baton", json_string(baton_version_string()));
        json_object_set_new(root, "cuda_built", json_boolean(baton_cuda_built()));
        for (int i = 0; i < n; i++)
            json_array_append_new(arr, target_json(baton_registry_at(reg, i)));
        json_object_set_new(root, "targets", arr);
        char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(root);
    } else {
        for (int i = 0; i < n; i++)
            target_text(baton_registry_at(reg, i));
    }
    baton_registry_destroy(reg);
    return 0;
}
