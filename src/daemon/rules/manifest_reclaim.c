/* SPDX-License-Identifier: MIT */
/*
 * manifest_reclaim.c: how an app gives memory back (SPEC 4.4, elastic
 * memory): spec.accelerator[].reclaim, a preset by name ("ollama",
 * "vllm", "comfyui", "llama-server"), {preset, port}, {http: {method,
 * port, path, body}} or {signal}, each with orStop; and the entry's
 * priority. Every action goes to 127.0.0.1 (there is no host to give);
 * what a member's action may reach is checked at install
 * (manifest_reclaim_check) and again when it is called (node/enforce/
 * reclaim.c: the port must be listened on by the app's own processes).
 * Pure: no I/O.
 */
#include "common/accel_setup.h"
#include "daemon/rules/manifest.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define RECLAIM_PATH_MAX 1024
#define RECLAIM_BODY_MAX 4096
#define PRIORITY_MAX 1000000
#define MEMBER_PORT_MIN 1024

static const struct {
    const char *name;
    enum manifest_preset p;
    uint16_t port;
} presets[] = {
    {"ollama", MANIFEST_PRESET_OLLAMA, 11434},
    {"vllm", MANIFEST_PRESET_VLLM, 8000},
    {"comfyui", MANIFEST_PRESET_COMFYUI, 8188},
    {"llama-server", MANIFEST_PRESET_LLAMA_SERVER, 8080},
};
#define NPRESETS (sizeof presets / sizeof presets[0])

static const struct {
    const char *name;
    int sig;
} signals[] = {
    {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGHUP", SIGHUP},
};
#define NSIGNALS (sizeof signals / sizeof signals[0])

const char *manifest_preset_name(enum manifest_preset p)
{
    for (size_t i = 0; i < NPRESETS; i++)
        if (presets[i].p == p)
            return presets[i].name;
    return "";
}

const char *manifest_signal_name(int sig)
{
    for (size_t i = 0; i < NSIGNALS; i++)
        if (signals[i].sig == sig)
            return signals[i].name;
    return "";
}

static enum accel_err preset_of(const json_t *v, const char *path,
                                struct manifest_reclaim *r, char **cause)
{
    const char *s = json_string_value(v);

    for (size_t i = 0; s != NULL && i < NPRESETS; i++) {
        if (strcmp(s, presets[i].name) == 0) {
            r->kind = MANIFEST_RECLAIM_PRESET;
            r->preset = presets[i].p;
            r->port = presets[i].port;
            return ACCEL_OK;
        }
    }
    *cause = xasprintf("%s must be one of ollama, vllm, comfyui, llama-server "
                       "(the apps whose own routes accel knows)", path);
    return ACCEL_EINVAL;
}

static enum accel_err port_of(const json_t *v, const char *path,
                              uint16_t *port, char **cause)
{
    if (!json_is_integer(v) || json_integer_value(v) < 1 ||
        json_integer_value(v) > 65535) {
        *cause = xasprintf("%s must be a port from 1 to 65535 (on "
                           "127.0.0.1, the app's own)", path);
        return ACCEL_EINVAL;
    }
    *port = (uint16_t)json_integer_value(v);
    return ACCEL_OK;
}

/* Printable ASCII without space, '#' or a backslash, starting with '/'. */
static bool http_path_ok(const char *s)
{
    if (s == NULL || s[0] != '/' || strlen(s) > RECLAIM_PATH_MAX)
        return false;
    for (const char *p = s; *p; p++)
        if (*p <= ' ' || *p > '~' || *p == '#' || *p == '\\')
            return false;
    return true;
}

static enum accel_err parse_http(const json_t *h, const char *path,
                                 struct manifest_reclaim *r, char **cause)
{
    static const char *const methods[] = {"GET", "POST", "PUT", "DELETE"};
    const char *k, *m;
    json_t *v;
    char sub[96];

    if (!json_is_object(h)) {
        *cause = xasprintf("%s.http must be an object {method, port, path, "
                           "body}", path);
        return ACCEL_EINVAL;
    }
    json_object_foreach((json_t *)h, k, v) {
        if (strcmp(k, "method") && strcmp(k, "port") && strcmp(k, "path") &&
            strcmp(k, "body")) {
            *cause = xasprintf("%s.http.%s is not a known field (method, "
                               "port, path, body)", path, k);
            return ACCEL_EINVAL;
        }
    }
    r->kind = MANIFEST_RECLAIM_HTTP;
    m = json_string_value(json_object_get(h, "method"));
    if (json_object_get(h, "method") == NULL)
        m = "POST";
    for (size_t i = 0; m != NULL && i < 4; i++)
        if (strcmp(m, methods[i]) == 0)
            util_strlcpy(r->method, m, sizeof r->method);
    if (r->method[0] == '\0') {
        *cause = xasprintf("%s.http.method must be GET, POST, PUT or DELETE",
                           path);
        return ACCEL_EINVAL;
    }
    snprintf(sub, sizeof sub, "%s.http.port", path);
    if (port_of(json_object_get(h, "port"), sub, &r->port, cause) != ACCEL_OK)
        return ACCEL_EINVAL;
    if (!http_path_ok(json_string_value(json_object_get(h, "path")))) {
        *cause = xasprintf("%s.http.path must be a path on the app's server "
                           "such as \"/free\" (a '/' then at most %d "
                           "printable characters, no space)", path,
                           RECLAIM_PATH_MAX - 1);
        return ACCEL_EINVAL;
    }
    r->path = xstrdup(json_string_value(json_object_get(h, "path")));
    v = json_object_get(h, "body");
    if (v != NULL && !json_is_null(v)) {
        if (json_is_string(v) && json_string_length(v) <= RECLAIM_BODY_MAX &&
            strlen(json_string_value(v)) == json_string_length(v))
            r->body = xstrdup(json_string_value(v));
        else if (json_is_object(v) || json_is_array(v))
            r->body = json_dumps(v, JSON_COMPACT);
        if (r->body == NULL || strlen(r->body) > RECLAIM_BODY_MAX) {
            *cause = xasprintf("%s.http.body must be a string or JSON of at "
                               "most %d bytes", path, RECLAIM_BODY_MAX);
            return ACCEL_EINVAL;
        }
    }
    return ACCEL_OK;
}

static enum accel_err parse_signal(const json_t *v, const char *path,
                                   struct manifest_reclaim *r, char **cause)
{
    const char *s = json_string_value(v);

    for (size_t i = 0; s != NULL && i < NSIGNALS; i++) {
        if (strcmp(s, signals[i].name) == 0 ||
            strcmp(s, signals[i].name + 3) == 0) {
            r->kind = MANIFEST_RECLAIM_SIGNAL;
            r->signal = signals[i].sig;
            return ACCEL_OK;
        }
    }
    *cause = xasprintf("%s.signal must be SIGUSR1, SIGUSR2 or SIGHUP (a "
                       "signal the app handles by giving memory back; a "
                       "stop is orStop's)", path);
    return ACCEL_EINVAL;
}

static enum accel_err parse_object(const json_t *o, const char *path,
                                   struct manifest_reclaim *r, char **cause)
{
    const json_t *pre = json_object_get(o, "preset");
    const json_t *http = json_object_get(o, "http");
    const json_t *sig = json_object_get(o, "signal");
    const json_t *port = json_object_get(o, "port");
    const char *k;
    json_t *v;
    char sub[96];

    json_object_foreach((json_t *)o, k, v) {
        if (strcmp(k, "preset") && strcmp(k, "port") && strcmp(k, "http") &&
            strcmp(k, "signal") && strcmp(k, "orStop")) {
            *cause = xasprintf("%s.%s is not a known field (preset, port, "
                               "http, signal, orStop)", path, k);
            return ACCEL_EINVAL;
        }
    }
    if ((pre != NULL) + (http != NULL) + (sig != NULL) != 1) {
        *cause = xasprintf("%s must say one way to give memory back: preset, "
                           "http or signal", path);
        return ACCEL_EINVAL;
    }
    if (port != NULL && pre == NULL) {
        *cause = xasprintf("%s.port goes with preset (http has its own "
                           "port)", path);
        return ACCEL_EINVAL;
    }
    v = json_object_get(o, "orStop");
    if (v != NULL && !json_is_boolean(v)) {
        *cause = xasprintf("%s.orStop must be true or false", path);
        return ACCEL_EINVAL;
    }
    r->or_stop = json_is_true(v);
    if (pre != NULL) {
        snprintf(sub, sizeof sub, "%s.preset", path);
        if (preset_of(pre, sub, r, cause) != ACCEL_OK)
            return ACCEL_EINVAL;
        snprintf(sub, sizeof sub, "%s.port", path);
        return port == NULL ? ACCEL_OK : port_of(port, sub, &r->port, cause);
    }
    if (http != NULL)
        return parse_http(http, path, r, cause);
    return parse_signal(sig, path, r, cause);
}

enum accel_err manifest_reclaim_parse(const json_t *entry, size_t idx,
                                      struct manifest_reclaim *r,
                                      char **cause)
{
    const json_t *v = json_object_get(entry, "reclaim");
    const json_t *p = json_object_get(entry, "priority");
    char path[64];

    memset(r, 0, sizeof(*r));
    if (p != NULL && !json_is_null(p)) {
        if (!json_is_integer(p) || json_integer_value(p) < -PRIORITY_MAX ||
            json_integer_value(p) > PRIORITY_MAX) {
            *cause = xasprintf("spec.accelerator[%zu].priority must be an "
                               "integer from %d to %d (default 0; an app is "
                               "asked to give memory back only for apps of "
                               "its priority or higher)", idx, -PRIORITY_MAX,
                               PRIORITY_MAX);
            return ACCEL_EINVAL;
        }
        r->priority = (int)json_integer_value(p);
    }
    if (v == NULL || json_is_null(v))
        return ACCEL_OK;
    snprintf(path, sizeof path, "spec.accelerator[%zu].reclaim", idx);
    if (json_is_string(v))
        return preset_of(v, path, r, cause);
    if (json_is_object(v))
        return parse_object(v, path, r, cause);
    *cause = xasprintf("%s must be a preset (ollama, vllm, comfyui, "
                       "llama-server) or an object {preset, port}, {http} or "
                       "{signal}", path);
    return ACCEL_EINVAL;
}

void manifest_reclaim_release(struct manifest_reclaim *r)
{
    free(r->path);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

bool manifest_port_reached(const char *spec, unsigned port)
{
    const char *rest = NULL, *slash;
    char *end;
    unsigned long host;

    if (spec == NULL)
        return false;
    if (strncmp(spec, "127.0.0.1:", 10) == 0)
        rest = spec + 10;
    else if (strncmp(spec, "0.0.0.0:", 8) == 0)
        rest = spec + 8;
    if (rest == NULL)
        return false;
    host = strtoul(rest, &end, 10);
    if (end == rest || *end != ':')
        return false;
    slash = strchr(end, '/');
    return host == port && (slash == NULL || strcmp(slash, "/tcp") == 0);
}

/* Does the container publish host port `port` where the call lands? */
static bool publishes(const struct manifest_container *c, unsigned port)
{
    for (size_t i = 0; c->ports != NULL && c->ports[i] != NULL; i++)
        if (manifest_port_reached(c->ports[i], port))
            return true;
    return false;
}

enum accel_err manifest_reclaim_check(const struct manifest *m, bool admin,
                                      char **cause)
{
    for (size_t i = 0; m->reclaim != NULL && i < m->nreq; i++) {
        const struct manifest_reclaim *r = &m->reclaim[i];
        /* a priority above the default takes memory from every app of a
         * lower one and is never asked back: between members, that is an
         * admin's call (a member may rank its own app lower) */
        if (!admin && r->priority > 0) {
            *cause = xasprintf("spec.accelerator[%zu].priority: a member's "
                               "app may not rank above the default 0 (got "
                               "%d): it would take memory from other "
                               "members' apps and never give it back; an "
                               "admin may set it", i, r->priority);
            return ACCEL_EFORBIDDEN;
        }
        if (r->kind != MANIFEST_RECLAIM_PRESET &&
            r->kind != MANIFEST_RECLAIM_HTTP)
            continue;
        if (!manifest_runs(m)) {
            *cause = xasprintf("spec.accelerator[%zu].reclaim: an external "
                               "app has no processes of acceld's to answer "
                               "on 127.0.0.1:%u; use a manifest with run",
                               i, (unsigned)r->port);
            return ACCEL_EINVAL;
        }
        if (admin)
            continue;
        if (m->run.ctr.image != NULL && !publishes(&m->run.ctr, r->port)) {
            *cause = xasprintf("spec.accelerator[%zu].reclaim: a member's "
                               "action may reach only its own app: port %u "
                               "is not one its container publishes "
                               "on 127.0.0.1 over TCP (run.ports)", i,
                               (unsigned)r->port);
            return ACCEL_EFORBIDDEN;
        }
        if (r->port < MEMBER_PORT_MIN) {
            *cause = xasprintf("spec.accelerator[%zu].reclaim: a member's "
                               "action may reach only its own app, on a "
                               "port from %d up (%u is below)", i,
                               MEMBER_PORT_MIN, (unsigned)r->port);
            return ACCEL_EFORBIDDEN;
        }
    }
    return ACCEL_OK;
}

json_t *manifest_reclaim_json(const struct manifest_reclaim *r)
{
    json_t *o;

    switch (r->kind) {
    case MANIFEST_RECLAIM_PRESET:
        o = json_pack("{s:s, s:i}", "preset", manifest_preset_name(r->preset),
                      "port", (int)r->port);
        break;
    case MANIFEST_RECLAIM_HTTP:
        o = json_pack("{s:{s:s, s:i, s:s, s:s?}}", "http", "method",
                      r->method, "port", (int)r->port, "path", r->path,
                      "body", r->body);
        break;
    case MANIFEST_RECLAIM_SIGNAL:
        o = json_pack("{s:s}", "signal", manifest_signal_name(r->signal));
        break;
    default:
        return json_null();
    }
    json_object_set_new(o, "orStop", json_boolean(r->or_stop));
    return o;
}
