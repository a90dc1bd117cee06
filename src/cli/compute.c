/* SPDX-License-Identifier: MIT */
/*
 * compute.c: the install/resume dialogue with acceld. It parses binding
 * specs, and turns the 422 questions computeModeSelect and
 * computeBindingRequired into terminal prompts (or into an explanation that
 * names the option to pass when nobody is at a terminal). Validation
 * refusals (computeBindingUnavailable) are printed with sentence.h.
 */
#include "common/accel_setup.h"
#include "cli/compute.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/prompt.h"
#include "cli/sentence.h"
#include "cli/table.h"
#include "common/quantity.h"
#include "common/util.h"
#include "common/yamljson.h"

#define MAX_CHOICES 256 /* devices offered in one prompt */

enum accel_err compute_parse_mem(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    enum accel_err err;
    if (s[0] != '\0' && strspn(s, "0123456789.") == strlen(s)) {
        char *q = xasprintf("%sGi", s);
        err = quantity_parse_bytes(q, &v);
        free(q);
    } else {
        err = quantity_parse_bytes(s, &v);
    }
    if (err != ACCEL_OK)
        return err;
    if (v == 0)
        return ACCEL_ERANGE;
    *out = v;
    return ACCEL_OK;
}

enum accel_err compute_parse_binding(const char *spec, json_t **out,
                                     char **cause)
{
    const char *c1 = strchr(spec, ':');
    const char *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
    if (c1 == NULL || c1 == spec || c1[1] == '\0' || c1 + 1 == c2 ||
        (c2 != NULL && c2[1] == '\0')) {
        *cause = xasprintf("--compute-binding %s: expected "
                           "NODE:DEVICE[:MEM]", spec);
        return ACCEL_EPARSE;
    }
    uint64_t mem = 0;
    if (c2 != NULL) {
        enum accel_err err = compute_parse_mem(c2 + 1, &mem);
        if (err != ACCEL_OK) {
            *cause = xasprintf("--compute-binding %s: memory \"%s\" is not "
                               "a positive quantity (8 = 8 Gi, or 8Gi, "
                               "512Mi)", spec, c2 + 1);
            return err;
        }
    }
    json_t *o = json_object();
    json_object_set_new(o, "nodeName",
                        json_stringn(spec, (size_t)(c1 - spec)));
    size_t dlen = c2 != NULL ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1);
    json_object_set_new(o, "deviceId", json_stringn(c1 + 1, dlen));
    if (c2 != NULL)
        json_object_set_new(o, "memory", json_integer((json_int_t)mem));
    *out = o;
    return ACCEL_OK;
}

int compute_bindings_from_args(const struct cli_args *args, json_t **out)
{
    *out = NULL;
    if (args->nbindings == 0)
        return CLI_EXIT_OK;
    json_t *arr = json_array();
    for (int i = 0; i < args->nbindings; i++) {
        json_t *b = NULL;
        char *cause = NULL;
        if (compute_parse_binding(args->bindings[i], &b, &cause) != ACCEL_OK) {
            fprintf(stderr, "accelctl: %s\n", cause);
            free(cause);
            json_decref(arr);
            return CLI_EXIT_USAGE;
        }
        json_array_append_new(arr, b);
    }
    *out = arr;
    return CLI_EXIT_OK;
}

/* Read at most max bytes of f into a new buffer; NULL if larger or bad. */
static char *slurp(FILE *f, size_t max, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                free(buf);
                return NULL;
            }
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (n > max || ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int compute_read_manifest(const char *file, json_t **out)
{
    FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
    if (f == NULL) {
        fprintf(stderr, "accelctl: cannot open %s: %s\n", file,
                strerror(errno));
        return CLI_EXIT_USAGE;
    }
    size_t len = 0;
    char *buf = slurp(f, ACCEL_MAX_BODY, &len);
    if (f != stdin)
        fclose(f);
    if (buf == NULL) {
        fprintf(stderr, "accelctl: cannot read %s (unreadable, or larger "
                "than %d bytes)\n", file, ACCEL_MAX_BODY);
        return CLI_EXIT_USAGE;
    }
    json_t *v = NULL;
    char *cause = NULL;
    enum accel_err err = yamljson_parse_any(buf, len, &v, &cause);
    free(buf);
    if (err != ACCEL_OK || !json_is_object(v)) {
        fprintf(stderr, "accelctl: %s: %s\n", file,
                cause != NULL ? cause : "a manifest must be a mapping");
        free(cause);
        json_decref(v);
        return CLI_EXIT_USAGE;
    }
    *out = v;
    return CLI_EXIT_OK;
}

const char *compute_manifest_name(const json_t *manifest,
                                  const char *fallback)
{
    const char *n = json_string_value(
        json_object_get(json_object_get(manifest, "metadata"), "name"));
    return n != NULL ? n : fallback;
}

/* ---- computeModeSelect ---- */

static void print_modes(const json_t *modes)
{
    size_t i;
    json_t *m;
    json_array_foreach(modes, i, m) {
        const char *t = json_string_value(json_object_get(m, "computeType"));
        const char *st = json_string_value(json_object_get(m, "status"));
        const char *why = json_string_value(json_object_get(m, "reason"));
        fprintf(stderr, "  %zu) %s (%s%s%s)\n", i + 1, t ? t : "?",
                st ? st : "?", why ? ": " : "", why ? why : "");
    }
}

/* Ask which type from the computeModeSelect plan (an array of
 * {computeType, status, reason}); returns a borrowed type name or NULL. */
static const char *ask_mode(const char *app, const json_t *modes)
{
    int n = (int)json_array_size(modes);
    if (n == 0)
        return NULL;
    fprintf(stderr, "App \"%s\" can run on several accelerator types. "
            "Select one to install:\n", app);
    print_modes(modes);
    char *q = xasprintf("Type [1-%d]: ", n);
    int c = prompt_choose(q, n);
    free(q);
    if (c < 0)
        return NULL;
    return json_string_value(
        json_object_get(json_array_get(modes, (size_t)c), "computeType"));
}

static void explain_modes(const char *app, const json_t *modes)
{
    fprintf(stderr, "App \"%s\" can run on several accelerator types; "
            "re-run with --compute-mode TYPE. The types:\n", app);
    print_modes(modes);
}

/* ---- computeBindingRequired ---- */

/* One device offered in the binding prompt (borrowed from the answer). */
struct choice {
    const json_t *dev; /* an Availability device */
};

static int64_t jint(const json_t *o, const char *k)
{
    return (int64_t)json_integer_value(json_object_get(o, k));
}

/* "NVIDIA GPU, single card, requires 8 Gi" (the Resume dialog's summary). */
static char *summary(const json_t *av)
{
    const json_t *req = json_object_get(av, "requirement");
    const char *mode = table_str(req, "mode");
    const char *scope = table_str(av, "scope");
    enum accel_type t;
    bool known = accel_type_parse(mode, &t);
    const char *title = known ? accel_type_title(t) : mode;
    int64_t need = known && accel_type_has_vram(t) ? jint(req, "requiredGpu")
                                                   : jint(req, "requiredMemory");
    const char *how = strcmp(scope, "cross-node-cards") == 0 ? "multi-node"
                      : strcmp(scope, "single-node-cards") == 0 ? "multi-card"
                                                                : "single card";
    if (need <= 0)
        return xasprintf("%s, %s", title, how);
    /* hundredths of a GiB, rounded up */
    uint64_t h = ((uint64_t)need * 100 + (UINT64_C(1) << 30) - 1) >> 30;
    if (h % 100 == 0)
        return xasprintf("%s, %s, requires %llu Gi", title, how,
                         (unsigned long long)(h / 100));
    return xasprintf("%s, %s, requires %llu.%02llu Gi", title, how,
                     (unsigned long long)(h / 100),
                     (unsigned long long)(h % 100));
}

static size_t gather(const json_t *av, struct choice *out, size_t max)
{
    size_t n = 0, i, j;
    json_t *node, *dev;
    json_array_foreach(json_object_get(av, "nodes"), i, node) {
        json_array_foreach(json_object_get(node, "devices"), j, dev) {
            if (n < max)
                out[n++].dev = dev;
        }
    }
    return n;
}

static void print_choices(const struct choice *c, size_t n)
{
    static const char *const head[] = { "#",    "NODE", "DEVICE", "MODEL",
                                        "MODE", "VRAM", "FREE",   "FIT" };
    struct table t;
    table_init(&t, 8, head);
    for (size_t i = 0; i < n; i++) {
        char idx[24], vram[32], free_[32];
        snprintf(idx, sizeof(idx), "%zu", i + 1);
        table_fmt_gib(jint(c[i].dev, "capacity"), vram, sizeof(vram));
        table_fmt_gib(jint(c[i].dev, "available"), free_, sizeof(free_));
        const char *fit = table_str(c[i].dev, "fitLevel");
        const char *row[] = { idx, table_str(c[i].dev, "nodeName"),
                              table_str(c[i].dev, "deviceId"),
                              table_str(c[i].dev, "cardModel"),
                              table_str(c[i].dev, "supportType"), vram, free_,
                              fit[0] ? fit : "no" };
        table_add(&t, row);
    }
    table_print(&t, stderr);
    table_release(&t);
}

/* The default quota of a Memory slicing device: the requirement. */
static int64_t default_quota(const json_t *av)
{
    const json_t *req = json_object_get(av, "requirement");
    int64_t g = jint(req, "requiredGpu");
    return g > 0 ? g : jint(req, "requiredMemory");
}

/* Ask the quota on one Memory slicing device; false = no answer. */
static bool ask_quota(const json_t *dev, int64_t def, uint64_t *out)
{
    int64_t max = jint(dev, "available");
    char d[32], m[32], buf[64];
    table_fmt_gib(def, d, sizeof(d));
    table_fmt_gib(max, m, sizeof(m));
    char *q =
        xasprintf("Memory quota on %s:%s (Gi by default, or 512Mi) "
                  "[default %s, at most %s]: ",
                  table_str(dev, "nodeName"), table_str(dev, "deviceId"), d, m);
    bool ok = false;
    for (int tries = 0; tries < 3 && !ok; tries++) {
        uint64_t v = (uint64_t)def;
        if (!prompt_line(q, buf, sizeof(buf)))
            break;
        if (buf[0] != '\0' && compute_parse_mem(buf, &v) != ACCEL_OK) {
            fprintf(stderr, "Not a quantity: %s\n", buf);
            continue;
        }
        if (max > 0 && v > (uint64_t)max) {
            fprintf(stderr, "At most %s is free on this GPU.\n", m);
            continue;
        }
        *out = v;
        ok = true;
    }
    free(q);
    return ok;
}

static json_t *binding_for(const json_t *av, const json_t *dev)
{
    json_t *b = json_object();
    json_object_set_new(b, "nodeName", json_string(table_str(dev, "nodeName")));
    json_object_set_new(b, "deviceId", json_string(table_str(dev, "deviceId")));
    if (strcmp(table_str(dev, "supportType"), "MemorySlice") == 0) {
        uint64_t q = 0;
        if (!ask_quota(dev, default_quota(av), &q)) {
            json_decref(b);
            return NULL;
        }
        json_object_set_new(b, "memory", json_integer((json_int_t)q));
    }
    return b;
}

/* Parse "1" or "1,3" into indexes; false if any is out of 1..n. */
static size_t parse_picks(const char *s, size_t n, size_t *picks, size_t max)
{
    size_t k = 0;
    const char *p = s;
    while (*p != '\0' && k < max) {
        char *end = NULL;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || v < 1 || v > n)
            return 0;
        picks[k++] = (size_t)v - 1;
        p = end + strspn(end, ", ");
    }
    return *p == '\0' ? k : 0;
}

/* Ask for the devices (and quotas); returns a computeBinding array or NULL. */
static json_t *ask_binding(const char *app, const json_t *data)
{
    const json_t *av = json_object_get(data, "availability");
    struct choice c[MAX_CHOICES];
    size_t n = gather(av, c, MAX_CHOICES);
    char *sum = summary(av);
    fprintf(stderr, "App \"%s\" needs a GPU selection (%s). Devices:\n", app,
            sum);
    free(sum);
    if (n == 0) {
        fprintf(stderr, "No device of the app's type exists.\n");
        return NULL;
    }
    print_choices(c, n);
    bool multi = strcmp(table_str(av, "scope"), "card") != 0;
    char buf[256];
    size_t picks[MAX_CHOICES], k = 0;
    for (int tries = 0; tries < 3 && k == 0; tries++) {
        if (!prompt_line(multi ? "Devices (e.g. 1 or 1,2): " : "Device: ",
                         buf, sizeof(buf)))
            return NULL;
        k = parse_picks(buf, n, picks, multi ? MAX_CHOICES : 1);
        if (k == 0)
            fprintf(stderr, "Please answer %s from 1 to %zu.\n",
                    multi ? "numbers" : "a number", n);
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < k; i++) {
        json_t *b = binding_for(av, c[picks[i]].dev);
        if (b == NULL) {
            json_decref(arr);
            return NULL;
        }
        json_array_append_new(arr, b);
    }
    if (k == 0) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

static void explain_binding(const char *app, const json_t *data)
{
    const json_t *av = json_object_get(data, "availability");
    struct choice c[MAX_CHOICES];
    size_t n = gather(av, c, MAX_CHOICES);
    char *sum = summary(av);
    char buf[512];
    const char *reason = table_str(av, "reason");
    const char *s = sentence_for_code(reason, buf, sizeof(buf));
    fprintf(stderr, "App \"%s\" needs a GPU selection (%s); re-run with "
            "--compute-binding NODE:DEVICE[:MEM].\n", app, sum);
    free(sum);
    if (reason[0] != '\0')
        fprintf(stderr, "%s\n", s != NULL ? s : reason);
    if (n > 0) {
        fprintf(stderr, "Devices:\n");
        print_choices(c, n);
    }
}

/* Answer one question into body; false when it cannot be answered. */
static bool answer(const struct cli_ctx *ctx, const char *type,
                   const char *app, const json_t *data, json_t *body)
{
    if (strcmp(type, "computeModeSelect") == 0) {
        if (!ctx->interactive) {
            explain_modes(app, data);
            return false;
        }
        const char *mode = ask_mode(app, data);
        if (mode == NULL)
            return false;
        json_object_set_new(body, "selectedGpuType", json_string(mode));
        return true;
    }
    if (!ctx->interactive) {
        explain_binding(app, data);
        return false;
    }
    json_t *arr = ask_binding(app, data);
    if (arr == NULL)
        return false;
    json_object_set_new(body, "computeBinding", arr);
    return true;
}

int compute_send(const struct cli_ctx *ctx, const char *path, json_t *body,
                 const char *app, struct client_resp *out)
{
    for (int round = 0;; round++) {
        int rc = client_call(ctx, "POST", path, body, out);
        if (rc != CLI_EXIT_REFUSED)
            return rc;
        const char *type = client_check_type(out);
        bool question = type != NULL && round < 4 &&
                        (strcmp(type, "computeModeSelect") == 0 ||
                         strcmp(type, "computeBindingRequired") == 0);
        if (!question)
            return sentence_report_ctx(ctx, out);
        if (!answer(ctx, type, app, client_check_data(out), body))
            return CLI_EXIT_REFUSED;
        client_resp_release(out);
    }
}

const json_t *compute_find_device(const json_t *nodes, const char *node,
                                  const char *id)
{
    char buf[256];
    size_t i, j;
    json_t *n, *d;
    char *code;

    json_array_foreach(nodes, i, n) {
        if (strcmp(table_str(n, "nodeName"), node) != 0)
            continue;
        json_array_foreach(json_object_get(n, "devices"), j, d) {
            if (strcmp(table_str(d, "id"), id) == 0)
                return d;
        }
        code = xasprintf("device-not-found:%s", id);
        fprintf(stderr, "%s\n", sentence_for_code(code, buf, sizeof(buf)));
        free(code);
        return NULL;
    }
    code = xasprintf("node-not-found:%s", node);
    fprintf(stderr, "%s\n", sentence_for_code(code, buf, sizeof(buf)));
    free(code);
    return NULL;
}
