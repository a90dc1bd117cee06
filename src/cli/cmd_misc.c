/* SPDX-License-Identifier: MIT */
/*
 * cmd_misc.c: the remaining commands of accelctl: preflight (would these
 * manifests install, in order?), users (add with a one-time token, list,
 * remove) and events (the state changes and refusals acceld recorded).
 */
#include "common/accel_setup.h"
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/client.h"
#include "cli/compute.h"
#include "cli/request.h"
#include "cli/sentence.h"
#include "cli/table.h"
#include "common/quantity.h"
#include "common/util.h"

/* ---- preflight ---- */

/* A manifest quantity (string or number) as bytes or millicores; 0 if none. */
static json_int_t qty(const json_t *entry, const char *key, bool cpu)
{
    const json_t *v = json_object_get(entry, key);
    uint64_t out = 0;
    if (json_is_integer(v))
        return cpu ? json_integer_value(v) * 1000 : json_integer_value(v);
    if (json_is_real(v))
        return (json_int_t)(json_real_value(v) * (cpu ? 1000.0 : 1.0));
    if (!json_is_string(v))
        return 0;
    enum accel_err err = cpu ? quantity_parse_millicores(json_string_value(v),
                                                         &out)
                             : quantity_parse_bytes(json_string_value(v), &out);
    return err == ACCEL_OK ? (json_int_t)out : 0;
}

/* The first accelerator entry of the manifest (of type mode, if given). */
static const json_t *pick_entry(const json_t *manifest, const char *mode)
{
    const json_t *list =
        json_object_get(json_object_get(manifest, "spec"), "accelerator");
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        if (mode == NULL || strcmp(table_str(e, "mode"), mode) == 0)
            return e;
    }
    return NULL;
}

/* A byte or millicore count as a quantity string ("1500m" for CPU). */
static json_t *qty_string(json_int_t v, bool cpu)
{
    char *s = xasprintf(cpu ? "%lldm" : "%lld", (long long)v);
    json_t *j = json_string(s);
    free(s);
    return j;
}

/* One preflight demand from a manifest, in app-service's wire form (SPEC
 * 5.1: quantity strings, requiredCPU/requiredGPU/limitedGPU; docs/api.md).
 * A manifest without an entry of the type sends no quantities, which
 * acceld refuses naming the first missing key. */
static json_t *demand_of(json_t *manifest, const char *id, const char *owner,
                         const char *mode)
{
    json_t *d = json_object();
    json_object_set_new(d, "id", json_string(id));
    json_object_set_new(d, "application", json_string(id));
    if (owner != NULL)
        json_object_set_new(d, "owner", json_string(owner));
    const json_t *e = pick_entry(manifest, mode);
    if (e != NULL) {
        json_int_t rg = qty(e, "requiredGPUMemory", false);
        json_int_t lg = qty(e, "limitedGPUMemory", false);
        json_int_t rm = qty(e, "requiredMemory", false);
        json_int_t lm = qty(e, "limitedMemory", false);
        json_object_set_new(d, "mode", json_string(table_str(e, "mode")));
        json_object_set_new(d, "requiredCPU",
                            qty_string(qty(e, "requiredCpu", true), true));
        json_object_set_new(d, "requiredGPU", qty_string(rg, false));
        json_object_set_new(d, "limitedGPU", qty_string(lg ? lg : rg, false));
        json_object_set_new(d, "requiredMemory", qty_string(rm, false));
        json_object_set_new(d, "limitedMemory", qty_string(lm ? lm : rm, false));
        json_object_set_new(d, "requiredDisk",
                            qty_string(qty(e, "requiredDisk", false), false));
        json_object_set_new(
            d, "supportMultiCards",
            json_boolean(json_is_true(json_object_get(e, "supportMultiCards"))));
        json_object_set_new(
            d, "supportMultiNodes",
            json_boolean(json_is_true(json_object_get(e, "supportMultiNodes"))));
    }
    json_object_set_new(d, "manifest", manifest);
    return d;
}

/* Read every file into a demands array; CLI_EXIT_USAGE on a bad file. */
static int read_demands(const struct cli_args *args, json_t *demands)
{
    for (int i = 0; i < args->npos; i++) {
        json_t *m = NULL;
        int rc = compute_read_manifest(args->pos[i], &m);
        if (rc != CLI_EXIT_OK)
            return rc;
        const char *name = compute_manifest_name(m, args->pos[i]);
        char *id = xstrdup(name);
        json_array_append_new(demands, demand_of(m, id, args->owner,
                                                 args->compute_mode));
        free(id);
    }
    return CLI_EXIT_OK;
}

/* "pressure": [{source, dimensions:[{resource, capacity, used, required,
 * pressured}]}] as app-service answers it: one line per pressured
 * dimension, as the resume dialogue prints a node-pressure refusal. */
static void print_pressure(const json_t *p)
{
    size_t i;
    json_t *item;
    json_array_foreach(p, i, item) {
        fprintf(stderr, "%s:\n", table_str(item, "source"));
        sentence_print_dimensions(json_object_get(item, "dimensions"));
    }
}

static int print_preflight(const json_t *data, int n)
{
    if (json_is_true(json_object_get(data, "installable"))) {
        printf("Installable: all %d app(s) fit, in this order.\n", n);
        return CLI_EXIT_OK;
    }
    const char *id = table_str(data, "failedDemandId");
    printf("Not installable: %s does not fit.\n", id[0] ? id : "a demand");
    char buf[512];
    const char *reason = table_str(data, "reason");
    const char *s = sentence_for_code(reason, buf, sizeof(buf));
    fprintf(stderr, "%s\n", s != NULL ? s : reason);
    print_pressure(json_object_get(data, "pressure"));
    return CLI_EXIT_REFUSED;
}

int cmd_misc_preflight(struct cli_ctx *ctx, const struct cli_args *args)
{
    json_t *demands = json_array();
    int rc = read_demands(args, demands);
    if (rc != CLI_EXIT_OK) {
        json_decref(demands);
        return rc;
    }
    json_t *body = json_pack("{s:o}", "demands", demands);
    struct client_resp r;
    rc = client_call(ctx, "POST", "/api/compute-resources/preflight", body,
                     &r);
    if (rc == CLI_EXIT_REFUSED) {
        rc = sentence_report_ctx(ctx, &r);
    } else if (rc == CLI_EXIT_OK && ctx->output == CLI_OUTPUT_JSON) {
        table_print_json(r.data);
        rc = json_is_true(json_object_get(r.data, "installable"))
                 ? CLI_EXIT_OK : CLI_EXIT_REFUSED;
    } else if (rc == CLI_EXIT_OK) {
        rc = print_preflight(r.data, args->npos);
    }
    client_resp_release(&r);
    json_decref(body);
    return rc;
}

/* ---- users ---- */

int cmd_misc_user_add(struct cli_ctx *ctx, const struct cli_args *args)
{
    const char *role = args->admin ? "admin" : "member";
    json_t *body =
        json_pack("{s:s, s:s}", "name", args->pos[0], "role", role);
    struct client_resp r;
    int rc = client_call(ctx, "POST", "/api/users", body, &r);
    if (request_outcome(ctx, &rc, &r))
        printf("Created user %s (%s).\nToken (shown only once; keep it): "
               "%s\n", table_str(r.data, "name"),
               table_str(r.data, "role")[0] ? table_str(r.data, "role") : role,
               table_str(r.data, "token"));
    client_resp_release(&r);
    json_decref(body);
    return rc;
}

/* "2024-05-01 12:00:00" (local time) from milliseconds since the epoch. */
static void fmt_ms(json_int_t ms, char *buf, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0 || localtime_r(&t, &tm) == NULL) {
        snprintf(buf, len, "-");
        return;
    }
    strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

/* "3/100" (held / limit) or "3" when there is no limit. */
static void fmt_held(const json_t *u, const char *held, const char *max,
                     bool bytes, char *buf, size_t len)
{
    char h[32], m[32];
    const json_t *mv = json_object_get(u, max);
    uint64_t hv = (uint64_t)json_integer_value(json_object_get(u, held));
    if (bytes)
        quantity_format_bytes(hv, h, sizeof h);
    else
        snprintf(h, sizeof h, "%llu", (unsigned long long)hv);
    if (!json_is_integer(mv)) {
        snprintf(buf, len, "%s", h);
        return;
    }
    if (bytes)
        quantity_format_bytes((uint64_t)json_integer_value(mv), m, sizeof m);
    else
        snprintf(m, sizeof m, "%lld", (long long)json_integer_value(mv));
    snprintf(buf, len, "%s/%s", h, m);
}

static void user_row(struct table *t, const json_t *u)
{
    char when[32], apps[48], mem[72], logs[72];
    fmt_ms(json_integer_value(json_object_get(u, "createdAt")), when,
           sizeof(when));
    fmt_held(u, "apps", "maxApps", false, apps, sizeof apps);
    fmt_held(u, "gpuMemory", "maxGpuMemory", true, mem, sizeof mem);
    fmt_held(u, "logBytes", "maxLogBytes", true, logs, sizeof logs);
    const char *row[] = { table_str(u, "name"), table_str(u, "role"), apps,
                          mem, logs, when };
    table_add(t, row);
}

static void print_users(const json_t *users)
{
    static const char *const head[] = { "NAME", "ROLE", "APPS", "GPU MEMORY",
                                        "LOGS", "CREATED" };
    table_print_items(6, head, users, user_row);
}

int cmd_misc_user_list(struct cli_ctx *ctx, const struct cli_args *args)
{
    (void)args;
    struct client_resp r;
    int rc = client_call(ctx, "GET", "/api/users", NULL, &r);
    if (request_outcome(ctx, &rc, &r))
        print_users(r.data);
    client_resp_release(&r);
    return rc;
}

/* "Removed user carol; …", then a line per fate of its apps
 * ("Uninstalled: carol1.", "Stopping (uninstalled once stopped): carol2.")
 * from DELETE /api/users/NAME's answer. */
static void print_removed(const char *name, const json_t *apps)
{
    static const char *const states[] = {"uninstalled", "stopping",
                                         "releasing"};
    static const char *const heads[] = {
        "Uninstalled", "Stopping (uninstalled once stopped)",
        "Releasing (uninstalled once its processes are gone)"};
    const json_t *a;
    size_t i;

    printf("Removed user %s; their token no longer works.\n", name);
    for (size_t k = 0; k < 3; k++) {
        bool first = true;
        json_array_foreach(apps, i, a) {
            const char *st = json_string_value(json_object_get(a, "state"));
            if (st == NULL || strcmp(st, states[k]) != 0)
                continue;
            printf("%s%s%s", first ? heads[k] : ", ", first ? ": " : "",
                   json_string_value(json_object_get(a, "name")));
            first = false;
        }
        if (!first)
            printf(".\n");
    }
}

int cmd_misc_user_remove(struct cli_ctx *ctx, const struct cli_args *args)
{
    char *path = client_path("/api/users/", args->pos[0],
                             args->force ? "?force=true" : "");
    struct client_resp r;
    int rc = client_call(ctx, "DELETE", path, NULL, &r);
    if (request_outcome(ctx, &rc, &r))
        print_removed(args->pos[0], json_object_get(r.data, "apps"));
    client_resp_release(&r);
    free(path);
    return rc;
}

/* The body of PUT /api/users/NAME from --max-apps / --max-gpu-memory:
 * "default"/"none" send null, a number of apps an integer, a memory a
 * quantity string (acceld validates both). NULL (usage printed) when
 * neither option is given or --max-apps is not a number. */
static json_t *limits_body(const struct cli_args *args)
{
    json_t *b = json_object();
    if (args->max_apps) {
        char *end;
        long long n = strtoll(args->max_apps, &end, 10);
        if (strcmp(args->max_apps, "default") == 0) {
            json_object_set_new(b, "maxApps", json_null());
        } else if (*args->max_apps == '\0' || *end != '\0') {
            fprintf(stderr, "accelctl user set-limits: --max-apps must be a "
                    "number or \"default\" (got \"%s\")\n", args->max_apps);
            json_decref(b);
            return NULL;
        } else {
            json_object_set_new(b, "maxApps", json_integer(n));
        }
    }
    if (args->max_gpu_memory)
        json_object_set_new(b, "maxGpuMemory",
                            strcmp(args->max_gpu_memory, "none") == 0
                                ? json_null()
                                : json_string(args->max_gpu_memory));
    if (json_object_size(b) == 0) {
        fprintf(stderr, "accelctl user set-limits: give --max-apps and/or "
                "--max-gpu-memory\n");
        json_decref(b);
        return NULL;
    }
    return b;
}

int cmd_misc_user_limits(struct cli_ctx *ctx, const struct cli_args *args)
{
    json_t *body = limits_body(args);
    char *e, *path;
    struct client_resp r;
    int rc;
    if (body == NULL)
        return CLI_EXIT_USAGE;
    e = client_escape(args->pos[0]);
    path = xasprintf("/api/users/%s", e);
    rc = client_call(ctx, "PUT", path, body, &r);
    if (rc == CLI_EXIT_REFUSED) {
        rc = sentence_report_ctx(ctx, &r);
    } else if (rc == CLI_EXIT_OK && ctx->output == CLI_OUTPUT_JSON) {
        table_print_json(r.data);
    } else if (rc == CLI_EXIT_OK) {
        json_t *one = json_pack("[O]", r.data);
        print_users(one);
        json_decref(one);
    }
    client_resp_release(&r);
    json_decref(body);
    free(path);
    free(e);
    return rc;
}

/* ---- events ---- */

/* "/api/events?since=..&app=..&limit=..[&wait=..]" from the options; since
 * and wait (seconds, 0 = none) are given by the caller. */
static char *events_path(const struct cli_args *args, const char *since,
                         int wait)
{
    char *p = xstrdup("/api/events");
    char w[16];
    const char *keys[] = { "since", "app", "limit", "wait" };
    const char *vals[] = { since, args->app, args->limit,
                           wait > 0 ? w : NULL };
    char sep = '?';
    snprintf(w, sizeof(w), "%d", wait);
    for (int i = 0; i < 4; i++) {
        if (vals[i] == NULL)
            continue;
        char *e = client_escape(vals[i]);
        char *next = xasprintf("%s%c%s=%s", p, sep, keys[i], e);
        free(e);
        free(p);
        p = next;
        sep = '&';
    }
    return p;
}

static void print_events(const json_t *events)
{
    static const char *const head[] = { "ID",  "TIME",   "KIND",   "APP",
                                        "NODE", "DEVICE", "MESSAGE" };
    struct table t;
    size_t i;
    json_t *ev;
    table_init(&t, 7, head);
    json_array_foreach(events, i, ev) {
        char id[32], when[32];
        snprintf(id, sizeof(id), "%lld",
                 (long long)json_integer_value(json_object_get(ev, "id")));
        fmt_ms(json_integer_value(json_object_get(ev, "ts")), when,
               sizeof(when));
        const char *row[] = { id,
                              when,
                              table_str(ev, "kind"),
                              table_str(ev, "app"),
                              table_str(ev, "node"),
                              table_str(ev, "device"),
                              table_str(ev, "message") };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
}

#define FOLLOW_WAIT 25 /* seconds per long-poll, under the client's 60 s */

/* One event on one line (--follow): JSON, or time, id, kind, app, text. */
static void print_event_line(const json_t *ev, bool json)
{
    char when[32];
    if (json) {
        table_dump_json(ev, JSON_COMPACT, stdout);
        fputc('\n', stdout);
    } else {
        fmt_ms(json_integer_value(json_object_get(ev, "ts")), when,
               sizeof(when));
        printf("%s  %6lld  %-18s %-16s %s\n", when,
               (long long)json_integer_value(json_object_get(ev, "id")),
               table_str(ev, "kind"),
               *table_str(ev, "app") ? table_str(ev, "app") : "-",
               table_str(ev, "message"));
    }
    fflush(stdout);
}

/*
 * --follow: print the events after --since (all kept ones by default), then
 * every new one as acceld appends it, by long-polling GET /api/events with
 * wait=FOLLOW_WAIT. Runs until interrupted or acceld goes away.
 */
static int events_follow(struct cli_ctx *ctx, const struct cli_args *args)
{
    long long since = 0;
    char *end;
    if (args->since != NULL) {
        since = strtoll(args->since, &end, 10);
        if (*args->since == '\0' || *end != '\0' || since < 0) {
            fprintf(stderr, "accelctl events: --since must be an event id\n");
            return CLI_EXIT_USAGE;
        }
    }
    for (;;) {
        char cur[24];
        struct client_resp r;
        uint64_t t0 = util_now_ns();
        snprintf(cur, sizeof(cur), "%lld", since);
        char *path = events_path(args, cur, FOLLOW_WAIT);
        int rc = client_call(ctx, "GET", path, NULL, &r);
        free(path);
        if (rc == CLI_EXIT_REFUSED)
            rc = sentence_report_ctx(ctx, &r);
        size_t i, n = json_array_size(r.data);
        json_t *ev;
        json_array_foreach(r.data, i, ev) {
            print_event_line(ev, ctx->output == CLI_OUTPUT_JSON);
            since = json_integer_value(json_object_get(ev, "id"));
        }
        client_resp_release(&r);
        if (rc != CLI_EXIT_OK)
            return rc;
        /* acceld answered at once with nothing (no waiting slot free):
         * poll once a second instead */
        if (n == 0 && util_now_ns() - t0 < 1000000000ULL)
            sleep(1);
    }
}

int cmd_misc_events(struct cli_ctx *ctx, const struct cli_args *args)
{
    if (args->follow)
        return events_follow(ctx, args);
    char *path = events_path(args, args->since, 0);
    struct client_resp r;
    int rc = client_call(ctx, "GET", path, NULL, &r);
    if (request_outcome(ctx, &rc, &r))
        print_events(r.data);
    client_resp_release(&r);
    free(path);
    return rc;
}

/* "Member images (...): a, b." from GET /api/settings' answer. */
static void print_settings(const json_t *s)
{
    const json_t *l = json_object_get(s, "memberImages"), *e;
    size_t i;

    printf("Member images (local images members may run without pulling "
           "them):");
    if (json_array_size(l) == 0)
        printf(" none");
    json_array_foreach(l, i, e)
        printf("%s %s", i ? "," : "", json_string_value(e));
    printf(".\n");
}

int cmd_misc_settings(struct cli_ctx *ctx, const struct cli_args *args)
{
    (void)args;
    struct client_resp r;
    int rc = client_call(ctx, "GET", "/api/settings", NULL, &r);
    if (request_outcome(ctx, &rc, &r))
        print_settings(r.data);
    client_resp_release(&r);
    return rc;
}

int cmd_misc_set_member_images(struct cli_ctx *ctx,
                               const struct cli_args *args)
{
    json_t *l = json_array(), *body;
    struct client_resp r;
    int rc;

    for (int i = 0; i < args->npos; i++)
        json_array_append_new(l, json_string(args->pos[i]));
    body = json_pack("{s:o}", "memberImages", l);
    rc = client_call(ctx, "PUT", "/api/settings", body, &r);
    json_decref(body);
    if (request_outcome(ctx, &rc, &r))
        print_settings(r.data);
    client_resp_release(&r);
    return rc;
}
