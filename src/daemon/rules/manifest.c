/* SPDX-License-Identifier: MIT */
/*
 * manifest.c: manifest validation. Every refusal names the field and the
 * rule; nothing is partially filled on failure.
 */
#include "common/accel_setup.h"
#include "daemon/rules/manifest.h"

#include <stdlib.h>
#include <string.h>

#include "common/quantity.h"
#include "common/util.h"

#define STOP_TIMEOUT_DEFAULT 10
#define STOP_TIMEOUT_MAX 3600
#define RUN_MAX_ARGS 256
#define RUN_MAX_PRELOAD 16     /* run.preload entries */

/* A quantity field of an accelerator entry. */
struct qfield {
    const char *key;  /* manifest key */
    const char *pair; /* the request/limit it is compared with */
    bool cpu;         /* millicores, not bytes */
    bool gpu;         /* GPU memory field */
    size_t off;       /* offset in struct adm_req */
};

#define QF(k, pair, cpu, gpu, f) {k, pair, cpu, gpu, offsetof(struct adm_req, f)}
static const struct qfield qfields[] = {
    QF("requiredCpu", NULL, true, false, req_cpu),
    QF("limitedCpu", "requiredCpu", true, false, lim_cpu),
    QF("requiredMemory", NULL, false, false, req_mem),
    QF("limitedMemory", "requiredMemory", false, false, lim_mem),
    QF("requiredDisk", NULL, false, false, req_disk),
    QF("limitedDisk", "requiredDisk", false, false, lim_disk),
    QF("requiredGPUMemory", NULL, false, true, req_gpu),
    QF("limitedGPUMemory", "requiredGPUMemory", false, true, lim_gpu),
};
#define NQF (sizeof(qfields) / sizeof(qfields[0]))

static uint64_t *qslot(struct adm_req *r, const struct qfield *f)
{
    return (uint64_t *)((char *)r + f->off);
}

/* Parse one quantity value (string or non-negative integer). */
static enum accel_err parse_qvalue(const json_t *v, bool cpu, uint64_t *out,
                                   const char *path, const char *key,
                                   char **cause)
{
    char buf[64];
    enum accel_err rc;
    const char *s;

    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0) {
            *cause = xasprintf("%s.%s must not be negative (got %lld)", path, key,
                          (long long)i);
            return ACCEL_EINVAL;
        }
        snprintf(buf, sizeof buf, "%lld", (long long)i);
        s = buf;
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d >= 0) || d > 1e18) {
            *cause = xasprintf("%s.%s must be a non-negative quantity", path, key);
            return ACCEL_EINVAL;
        }
        snprintf(buf, sizeof buf, "%.6f", d);
        s = buf;
    } else if (json_is_string(v)) {
        s = json_string_value(v);
    } else {
        *cause = xasprintf("%s.%s must be a quantity string like \"8Gi\" or a "
                      "number",
                      path, key);
        return ACCEL_EINVAL;
    }
    rc = cpu ? quantity_parse_millicores(s, out) : quantity_parse_bytes(s, out);
    if (rc == ACCEL_ERANGE) {
        *cause = xasprintf("%s.%s (%s) is too large (at most 4Ei bytes or "
                           "4611686018427387.904 CPUs)", path, key, s);
        return ACCEL_EINVAL;
    }
    if (rc != ACCEL_OK) {
        *cause = xasprintf("%s.%s must be a valid quantity such as \"8Gi\", "
                      "\"512Mi\" or \"2\" (got \"%s\")",
                      path, key, s);
        return ACCEL_EINVAL;
    }
    return ACCEL_OK;
}

static bool is_known_entry_key(const char *k)
{
    static const char *const extra[] = {"mode", "supportMultiCards",
                                        "supportMultiNodes", "reclaim",
                                        "priority"};
    for (size_t i = 0; i < NQF; i++)
        if (strcmp(k, qfields[i].key) == 0)
            return true;
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        if (strcmp(k, extra[i]) == 0)
            return true;
    return false;
}

static enum accel_err parse_bool(const json_t *e, const char *key, bool *out,
                                 const char *path, char **cause)
{
    const json_t *v = json_object_get(e, key);
    *out = false;
    if (v == NULL || json_is_null(v))
        return ACCEL_OK;
    if (!json_is_boolean(v)) {
        *cause = xasprintf("%s.%s must be true or false", path, key);
        return ACCEL_EINVAL;
    }
    *out = json_is_true(v);
    return ACCEL_OK;
}

static enum accel_err check_envelope(const json_t *e, struct adm_req *r,
                                     const char *path, char **cause)
{
    bool vram = accel_type_has_vram(r->type);
    bool any = false;
    for (size_t i = 0; i < NQF; i++) {
        const json_t *v = json_object_get(e, qfields[i].key);
        if (v == NULL || json_is_null(v))
            continue;
        if (qfields[i].gpu && !vram) {
            *cause = xasprintf("%s.%s must be empty for mode=%s (only nvidia, "
                          "amd-gpu and intel-gpu have dedicated GPU memory)",
                          path, qfields[i].key, accel_type_name(r->type));
            return ACCEL_EINVAL;
        }
        if (parse_qvalue(v, qfields[i].cpu, qslot(r, &qfields[i]), path,
                         qfields[i].key, cause) != ACCEL_OK)
            return ACCEL_EINVAL;
        any = true;
    }
    if (!any)
        return ACCEL_OK;
    for (size_t i = 0; i < NQF; i++) {
        const json_t *v = json_object_get(e, qfields[i].key);
        if (qfields[i].gpu && !vram)
            continue;
        if (v == NULL || json_is_null(v)) {
            *cause = xasprintf("%s.%s is required to declare a complete resource "
                          "envelope (mode=%s)",
                          path, qfields[i].key, accel_type_name(r->type));
            return ACCEL_EINVAL;
        }
    }
    return ACCEL_OK;
}

static enum accel_err check_limits(struct adm_req *r, const char *path,
                                   char **cause)
{
    for (size_t i = 0; i < NQF; i++) {
        const struct qfield *f = &qfields[i], *p = NULL;
        char a[32], b[32];
        if (f->pair == NULL)
            continue;
        p = &qfields[i - 1];
        if (*qslot(r, f) >= *qslot(r, p))
            continue;
        if (f->cpu) {
            snprintf(a, sizeof a, "%llum", (unsigned long long)*qslot(r, f));
            snprintf(b, sizeof b, "%llum", (unsigned long long)*qslot(r, p));
        } else {
            quantity_format_bytes(*qslot(r, f), a, sizeof a);
            quantity_format_bytes(*qslot(r, p), b, sizeof b);
        }
        *cause = xasprintf("%s.%s (%s) must be >= %s (%s)", path, f->key, a,
                      p->key, b);
        return ACCEL_EINVAL;
    }
    return ACCEL_OK;
}

static enum accel_err parse_entry(const json_t *e, size_t idx,
                                  struct adm_req *r, char **cause)
{
    char path[48];
    const char *key;
    const json_t *v;

    snprintf(path, sizeof path, "spec.accelerator[%zu]", idx);
    memset(r, 0, sizeof(*r));
    if (!json_is_object(e)) {
        *cause = xasprintf("%s must be an object", path);
        return ACCEL_EINVAL;
    }
    json_object_foreach((json_t *)e, key, v) {
        if (!is_known_entry_key(key)) {
            *cause = xasprintf("%s.%s is not a known field", path, key);
            return ACCEL_EINVAL;
        }
    }
    v = json_object_get(e, "mode");
    if (!json_is_string(v)) {
        *cause = xasprintf("%s.mode is required", path);
        return ACCEL_EINVAL;
    }
    if (!accel_type_parse(json_string_value(v), &r->type)) {
        *cause = xasprintf("%s.mode must be one of cpu, nvidia, nvidia-gb10, "
                      "apple-m, intel, amd, intel-gpu, amd-gpu, moore-soc "
                      "(got \"%s\")",
                      path, json_string_value(v));
        return ACCEL_EINVAL;
    }
    if (check_envelope(e, r, path, cause) != ACCEL_OK ||
        check_limits(r, path, cause) != ACCEL_OK)
        return ACCEL_EINVAL;
    if (parse_bool(e, "supportMultiCards", &r->multi_cards, path, cause) ||
        parse_bool(e, "supportMultiNodes", &r->multi_nodes, path, cause))
        return ACCEL_EINVAL;
    if ((r->multi_cards || r->multi_nodes) && r->type != ACCEL_TYPE_NVIDIA) {
        *cause = xasprintf("%s.%s is only supported for mode=nvidia", path,
                      r->multi_nodes ? "supportMultiNodes"
                                     : "supportMultiCards");
        return ACCEL_EINVAL;
    }
    if (r->multi_nodes)
        r->multi_cards = true;
    return ACCEL_OK;
}

static enum accel_err parse_accelerators(const json_t *spec, struct manifest *m,
                                         char **cause)
{
    const json_t *acc = json_object_get(spec, "accelerator");
    size_t i;
    const json_t *e;

    if (!json_is_array(acc) || json_array_size(acc) == 0) {
        *cause = xasprintf("spec.accelerator must list at least one accelerator "
                      "entry");
        return ACCEL_EINVAL;
    }
    if (json_array_size(acc) > MANIFEST_MAX_ENTRIES) {
        *cause = xasprintf("spec.accelerator has %zu entries; at most one per "
                      "type (%d) is allowed",
                      json_array_size(acc), MANIFEST_MAX_ENTRIES);
        return ACCEL_EINVAL;
    }
    m->req = xcalloc(json_array_size(acc), sizeof(*m->req));
    json_array_foreach(acc, i, e) {
        struct manifest_reclaim r;
        if (parse_entry(e, i, &m->req[i], cause) != ACCEL_OK)
            return ACCEL_EINVAL;
        if (manifest_reclaim_parse(e, i, &r, cause) != ACCEL_OK) {
            manifest_reclaim_release(&r);
            return ACCEL_EINVAL;
        }
        if (r.kind != MANIFEST_RECLAIM_NONE &&
            !accel_type_elastic(m->req[i].type)) {
            *cause = xasprintf("spec.accelerator[%zu].reclaim is for a GPU "
                               "whose memory acceld can take back (nvidia, "
                               "amd-gpu, intel-gpu, amd); mode=%s has none "
                               "to give back",
                               i, accel_type_name(m->req[i].type));
            manifest_reclaim_release(&r);
            return ACCEL_EINVAL;
        }
        if (r.kind != MANIFEST_RECLAIM_NONE || r.priority != 0) {
            if (m->reclaim == NULL)
                m->reclaim = xcalloc(json_array_size(acc),
                                     sizeof(*m->reclaim));
            m->reclaim[i] = r;
        }
        for (size_t j = 0; j < i; j++) {
            if (m->req[j].type == m->req[i].type) {
                *cause = xasprintf("spec.accelerator[%zu].mode %s is declared "
                              "twice (also spec.accelerator[%zu])",
                              i, accel_type_name(m->req[i].type), j);
                if (m->reclaim != NULL)
                    manifest_reclaim_release(&m->reclaim[i]);
                return ACCEL_EINVAL;
            }
        }
        m->nreq = i + 1;
    }
    return ACCEL_OK;
}

char **manifest_strings(const json_t *arr, const char *path, char **cause)
{
    size_t n = json_array_size(arr), i;
    const json_t *v;
    char **out;

    if (!json_is_array(arr) || n == 0 || n > RUN_MAX_ARGS) {
        *cause = xasprintf("%s must be a non-empty list of at most %d strings",
                      path, RUN_MAX_ARGS);
        return NULL;
    }
    out = xcalloc(n + 1, sizeof(char *));
    json_array_foreach(arr, i, v) {
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            strlen(json_string_value(v)) != json_string_length(v)) {
            *cause = xasprintf("%s[%zu] must be a non-empty string", path, i);
            for (size_t j = 0; j < i; j++)
                free(out[j]);
            free(out);
            return NULL;
        }
        out[i] = xstrdup(json_string_value(v));
    }
    return out;
}

static bool env_key_valid(const char *k)
{
    if (*k == '\0' || (*k >= '0' && *k <= '9'))
        return false;
    for (; *k; k++) {
        char c = *k;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return true;
}

static enum accel_err parse_env(const json_t *env, struct manifest_run *run,
                                char **cause)
{
    const char *k;
    const json_t *v;
    size_t n = 0;

    if (env == NULL || json_is_null(env)) {
        run->env = xcalloc(1, sizeof(char *));
        return ACCEL_OK;
    }
    if (!json_is_object(env)) {
        *cause = xasprintf("run.env must be an object of strings");
        return ACCEL_EINVAL;
    }
    run->env = xcalloc(json_object_size(env) + 1, sizeof(char *));
    json_object_foreach((json_t *)env, k, v) {
        if (!env_key_valid(k)) {
            *cause = xasprintf("run.env key \"%s\" must match [A-Za-z_][A-Za-z0-9_]*",
                          k);
            return ACCEL_EINVAL;
        }
        if (!json_is_string(v)) {
            *cause = xasprintf("run.env.%s must be a string", k);
            return ACCEL_EINVAL;
        }
        run->env[n++] = xasprintf("%s=%s", k, json_string_value(v));
    }
    return ACCEL_OK;
}

/* run.user: a user name ([a-z_][a-z0-9_.-]*, at most 32) or a uid. */
static enum accel_err parse_user(const json_t *v, struct manifest_run *run,
                                 char **cause)
{
    const char *s;
    size_t len;

    if (v == NULL || json_is_null(v))
        return ACCEL_OK;
    if (json_is_integer(v) && json_integer_value(v) >= 0 &&
        json_integer_value(v) < 0x7fffffff) {
        run->user = xasprintf("%lld", (long long)json_integer_value(v));
        return ACCEL_OK;
    }
    s = json_string_value(v);
    len = s ? strlen(s) : 0;
    if (s == NULL || len == 0 || len > 32 || len != json_string_length(v) ||
        strspn(s, "abcdefghijklmnopqrstuvwxyz"
                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != len ||
        s[0] == '-') {
        *cause = xasprintf("run.user must be a user name (letters, digits, "
                           "'_', '.', '-', at most 32) or a uid");
        return ACCEL_EINVAL;
    }
    run->user = xstrdup(s);
    return ACCEL_OK;
}

/* run.preload: absolute paths; ':' and spaces would split LD_PRELOAD. */
static enum accel_err parse_preload(const json_t *v, struct manifest_run *run,
                                    char **cause)
{
    size_t i, n = json_array_size(v);
    const json_t *e;

    if (v == NULL || json_is_null(v)) {
        run->preload = xcalloc(1, sizeof(char *));
        return ACCEL_OK;
    }
    if (!json_is_array(v) || n > RUN_MAX_PRELOAD) {
        *cause = xasprintf("run.preload must be a list of at most %d "
                           "absolute paths", RUN_MAX_PRELOAD);
        return ACCEL_EINVAL;
    }
    run->preload = xcalloc(n + 1, sizeof(char *));
    json_array_foreach(v, i, e) {
        const char *p = json_string_value(e);
        if (p == NULL || p[0] != '/' || strlen(p) != json_string_length(e) ||
            strpbrk(p, ": \t\n") != NULL || strlen(p) > 4096) {
            *cause = xasprintf("run.preload[%zu] must be an absolute path "
                               "without ':' or spaces", i);
            return ACCEL_EINVAL;
        }
        run->preload[i] = xstrdup(p);
    }
    return ACCEL_OK;
}

/* The container fields a host command may not have. */
static const char *const container_only[] = {
    "image", "pull", "entrypoint", "ports", "volumes", "shmSize",
    "privileged", "network", "pid", "capAdd", NULL};

bool manifest_container_key(const char *k)
{
    for (const char *const *c = container_only; *c; c++)
        if (strcmp(k, *c) == 0)
            return true;
    return false;
}

static enum accel_err parse_run(const json_t *run, struct manifest *m,
                                char **cause)
{
    const char *k;
    const json_t *v;

    m->run.stop_timeout_s = STOP_TIMEOUT_DEFAULT;
    if (run == NULL || json_is_null(run))
        return ACCEL_OK;
    if (!json_is_object(run)) {
        *cause = xasprintf("run must be an object");
        return ACCEL_EINVAL;
    }
    json_object_foreach((json_t *)run, k, v) {
        if (strcmp(k, "command") && strcmp(k, "env") && strcmp(k, "workdir") &&
            strcmp(k, "stopTimeoutSeconds") && strcmp(k, "user") &&
            strcmp(k, "preload") && !manifest_container_key(k)) {
            *cause = xasprintf("run.%s is not a known field", k);
            return ACCEL_EINVAL;
        }
    }
    if (json_object_get(run, "image") != NULL) {
        if (manifest_container_parse(run, &m->run, cause) != ACCEL_OK)
            return ACCEL_EINVAL;
    } else {
        for (const char *const *c = container_only; *c; c++)
            if (json_object_get(run, *c) != NULL) {
                *cause = xasprintf("run.%s is only for a container app "
                                   "(run.image)", *c);
                return ACCEL_EINVAL;
            }
    }
    v = json_object_get(run, "command");
    if (v != NULL || m->run.ctr.image == NULL) {
        m->run.argv = manifest_strings(v, "run.command", cause);
        if (m->run.argv == NULL)
            return ACCEL_EINVAL;
    }
    if (parse_env(json_object_get(run, "env"), &m->run, cause) != ACCEL_OK)
        return ACCEL_EINVAL;
    v = json_object_get(run, "workdir");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v) || json_string_value(v)[0] != '/') {
            *cause = xasprintf("run.workdir must be an absolute path");
            return ACCEL_EINVAL;
        }
        m->run.workdir = xstrdup(json_string_value(v));
    }
    if (parse_user(json_object_get(run, "user"), &m->run, cause) != ACCEL_OK ||
        parse_preload(json_object_get(run, "preload"), &m->run, cause) !=
            ACCEL_OK)
        return ACCEL_EINVAL;
    v = json_object_get(run, "stopTimeoutSeconds");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > STOP_TIMEOUT_MAX) {
            *cause = xasprintf("run.stopTimeoutSeconds must be an integer from 1 "
                          "to %d",
                          STOP_TIMEOUT_MAX);
            return ACCEL_EINVAL;
        }
        m->run.stop_timeout_s = (int)json_integer_value(v);
    }
    return ACCEL_OK;
}

/* The manifest's texts a terminal or a page shows: no control character
 * (util_ctrl_len), which could retitle a window, clear a screen or
 * overwrite a line where accelctl prints them; the long descriptions
 * (Markdown) may have lines and tabs. */
static const struct {
    const char *parent, *key; /* root.parent.key */
    bool lines;               /* '\n' and '\t' allowed */
} texts[] = {
    { "metadata", "title", false },
    { "metadata", "description", false },
    { "spec", "fullDescription", true },
    { "spec", "upgradeDescription", true },
};

enum accel_err manifest_check_texts(const json_t *root, char **cause)
{
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        const json_t *v = json_object_get(json_object_get(root,
                                                          texts[i].parent),
                                          texts[i].key);
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);

        for (size_t at = 0; s != NULL && at < len; at++) {
            if (util_ctrl_len(s, len, at) == 0 ||
                (texts[i].lines && (s[at] == '\n' || s[at] == '\t')))
                continue;
            *cause = xasprintf("%s.%s must not contain control characters "
                               "(U+%04X at byte %zu%s)", texts[i].parent,
                               texts[i].key,
                               util_ctrl_len(s, len, at) == 2
                                   ? (unsigned char)s[at + 1]
                                   : (unsigned char)s[at],
                               at, texts[i].lines ? "; lines and tabs are "
                                                    "allowed" : "");
            return ACCEL_EINVAL;
        }
    }
    return ACCEL_OK;
}

static enum accel_err parse_meta(const json_t *root, struct manifest *m,
                                 char **cause)
{
    const json_t *meta = json_object_get(root, "metadata");
    const json_t *name = json_object_get(meta, "name");
    const json_t *title = json_object_get(meta, "title");
    const json_t *opts = json_object_get(root, "options");
    const json_t *shared = json_object_get(opts, "shared");
    const json_t *api = json_object_get(root, "apiVersion");

    if (!json_is_object(meta) || !json_is_string(name)) {
        *cause = xasprintf("metadata.name is required");
        return ACCEL_EINVAL;
    }
    if (!accel_name_valid(json_string_value(name))) {
        *cause = xasprintf("metadata.name \"%.80s\" must be 1-63 characters of "
                      "a-z, 0-9 and '-', starting and ending with a letter "
                      "or digit",
                      json_string_value(name));
        return ACCEL_EINVAL;
    }
    if (title && !json_is_null(title) &&
        (!json_is_string(title) || json_string_length(title) > 200)) {
        *cause = xasprintf("metadata.title must be a string of at most 200 bytes");
        return ACCEL_EINVAL;
    }
    if (api && !json_is_null(api) && !json_is_string(api)) {
        *cause = xasprintf("apiVersion must be a string such as \"v2\" or \"v3\"");
        return ACCEL_EINVAL;
    }
    if (shared && !json_is_null(shared) && !json_is_boolean(shared)) {
        *cause = xasprintf("options.shared must be true or false");
        return ACCEL_EINVAL;
    }
    m->shared = json_is_true(shared) && json_is_string(api) &&
                strcmp(json_string_value(api), "v3") == 0;
    if (json_is_true(shared) && !m->shared) {
        *cause = xasprintf("options.shared requires apiVersion: v3");
        return ACCEL_EINVAL;
    }
    m->name = xstrdup(json_string_value(name));
    m->title = xstrdup(json_is_string(title) ? json_string_value(title)
                                             : m->name);
    return ACCEL_OK;
}

enum accel_err manifest_parse(const json_t *root, struct manifest *m,
                              char **cause)
{
    const json_t *spec;

    memset(m, 0, sizeof(*m));
    if (!json_is_object(root)) {
        *cause = xasprintf("manifest must be an object");
        return ACCEL_EINVAL;
    }
    if (parse_meta(root, m, cause) != ACCEL_OK)
        goto bad;
    spec = json_object_get(root, "spec");
    if (!json_is_object(spec)) {
        *cause = xasprintf("spec is required and must be an object");
        goto bad;
    }
    if (parse_accelerators(spec, m, cause) != ACCEL_OK ||
        parse_run(json_object_get(root, "run"), m, cause) != ACCEL_OK)
        goto bad;
    return ACCEL_OK;
bad:
    manifest_release(m);
    return ACCEL_EINVAL;
}

void manifest_strings_free(char **l)
{
    if (l == NULL)
        return;
    for (char **p = l; *p; p++)
        free(*p);
    free(l);
}

void manifest_release(struct manifest *m)
{
    free(m->name);
    free(m->title);
    manifest_strings_free(m->run.argv);
    manifest_strings_free(m->run.env);
    free(m->run.workdir);
    free(m->run.user);
    manifest_strings_free(m->run.preload);
    manifest_container_release(&m->run.ctr);
    for (size_t i = 0; m->reclaim != NULL && i < m->nreq; i++)
        manifest_reclaim_release(&m->reclaim[i]);
    free(m->reclaim);
    free(m->req);
    memset(m, 0, sizeof(*m));
}

const struct adm_req *manifest_req(const struct manifest *m, enum accel_type t)
{
    for (size_t i = 0; i < m->nreq; i++)
        if (m->req[i].type == t)
            return &m->req[i];
    return NULL;
}

const struct manifest_reclaim *manifest_reclaim_of(const struct manifest *m,
                                                   enum accel_type t)
{
    for (size_t i = 0; m->reclaim != NULL && i < m->nreq; i++)
        if (m->req[i].type == t)
            return &m->reclaim[i];
    return NULL;
}

json_t *manifest_req_json(const struct adm_req *r)
{
    return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b}",
                     "mode", accel_type_name(r->type), "requiredCpu",
                     (json_int_t)r->req_cpu, "limitedCpu",
                     (json_int_t)r->lim_cpu, "requiredGpu",
                     (json_int_t)r->req_gpu, "limitedGpu",
                     (json_int_t)r->lim_gpu, "requiredMemory",
                     (json_int_t)r->req_mem, "limitedMemory",
                     (json_int_t)r->lim_mem, "requiredDisk",
                     (json_int_t)r->req_disk, "limitedDisk",
                     (json_int_t)r->lim_disk, "supportMultiCards",
                     r->multi_cards, "supportMultiNodes", r->multi_nodes);
}

bool manifest_env_reserved(const char *key)
{
    static const char *const names[] = {"CUDA_VISIBLE_DEVICES",
                                        "NVIDIA_VISIBLE_DEVICES",
                                        "HIP_VISIBLE_DEVICES", "LD_PRELOAD"};
    size_t len = strcspn(key, "=");

    if (len >= 6 && strncmp(key, "ACCEL_", 6) == 0)
        return true;
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
        if (strlen(names[i]) == len && strncmp(key, names[i], len) == 0)
            return true;
    return false;
}

bool manifest_runs(const struct manifest *m)
{
    return m->run.argv != NULL || m->run.ctr.image != NULL;
}

bool manifest_inside_home(const char *path, const char *home)
{
    size_t n = strlen(home);

    if (strncmp(path, home, n) != 0 || (path[n] != '\0' && path[n] != '/'))
        return false;
    for (const char *p = path; *p; p++) {
        if (*p != '/')
            continue;
        if ((p[1] == '.' && (p[2] == '/' || p[2] == '\0')) ||
            (p[1] == '.' && p[2] == '.' && (p[3] == '/' || p[3] == '\0')))
            return false;
    }
    return true;
}

enum accel_err manifest_check_install(const struct manifest *m, bool admin,
                                      const char *home, char **cause)
{
    for (char **e = m->run.env; e != NULL && *e != NULL; e++) {
        if (manifest_env_reserved(*e)) {
            *cause = xasprintf("run.env.%.*s is set by accel and cannot be "
                               "set in a manifest",
                               (int)strcspn(*e, "="), *e);
            return ACCEL_EINVAL;
        }
    }
    {
        enum accel_err rc = manifest_reclaim_check(m, admin, cause);
        if (rc != ACCEL_OK)
            return rc;
    }
    if (admin)
        return ACCEL_OK;
    if (m->run.user != NULL) {
        *cause = xasprintf("run.user: only an admin can choose the user an "
                           "app runs as (a member's app runs as its owner)");
        return ACCEL_EFORBIDDEN;
    }
    if (m->run.ctr.image != NULL) /* its workdir is the container's */
        return manifest_container_check(m, admin, home, cause);
    if (m->run.workdir != NULL && !manifest_inside_home(m->run.workdir, home)) {
        *cause = xasprintf("run.workdir: a member's app may only work inside "
                           "its owner's home %s (outside it is admin-only)",
                           home);
        return ACCEL_EFORBIDDEN;
    }
    return ACCEL_OK;
}
