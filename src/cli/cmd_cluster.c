/* SPDX-License-Identifier: MIT */
/*
 * cmd_cluster.c: the cluster commands of accelctl: list (nodes and devices),
 * set-type (switch a device's sharing mode, naming the apps it stops),
 * unbind (remove an app from its GPUs) and gpu enable/disable (take a
 * node's accelerators in or out of scheduling). The commands that stop apps
 * ask first on a terminal, and refuse without --yes elsewhere.
 */
#include "common/accel_setup.h"
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "accel/accel.h"
#include "cli/client.h"
#include "cli/compute.h"
#include "cli/request.h"
#include "cli/prompt.h"
#include "cli/sentence.h"
#include "cli/table.h"
#include "common/util.h"

#define SWITCH_WARNING                                                         \
    "Switching modes stops all apps currently using this GPU and removes "    \
    "their assigned GPU resources."
#define UNBIND_WARNING                                                         \
    "Removing an app from a GPU stops the app and releases all its GPU "      \
    "resources."

/* "app (8 Gi), other" from a device's bindings; the caller frees it. */
static char *apps_of(const json_t *dev)
{
    char *out = xstrdup("");
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(dev, "bindings"), i, b)
        table_append_item(&out, i, table_str(b, "appName"),
                          json_integer_value(json_object_get(b, "memory")));
    return out;
}

static void add_device_row(struct table *t, const json_t *node,
                           const json_t *dev)
{
    char vram[32], alloc[32], free_[32];
    table_fmt_gib(json_integer_value(json_object_get(dev, "memory")), vram,
                  sizeof(vram));
    json_int_t a = json_integer_value(json_object_get(dev, "allocated"));
    if (a == 0 && json_array_size(json_object_get(dev, "bindings")) > 0)
        snprintf(alloc, sizeof(alloc), "whole card"); /* Exclusive/TimeSlice */
    else
        table_fmt_gib(a, alloc, sizeof(alloc));
    table_fmt_gib(json_integer_value(json_object_get(dev, "free")), free_,
                  sizeof(free_));
    char *apps = apps_of(dev);
    bool off = json_is_false(json_object_get(node, "enabled"));
    bool sick = strcmp(table_str(dev, "health"), "no") == 0;
    char *nodename = xasprintf("%s%s", table_str(node, "nodeName"),
                               off ? " (disabled)" : "");
    char *mode = xasprintf("%s%s", table_str(dev, "supportType"),
                           sick ? " (unhealthy)" : "");
    const char *row[] = { nodename,          table_str(dev, "id"),
                          table_str(dev, "cardModel"), vram, mode, alloc, free_,
                          apps };
    table_add(t, row);
    free(apps);
    free(nodename);
    free(mode);
}

/* Warnings of the reconciler (SPEC 8.3): gone devices, foreign usage. */
static void print_device_warnings(const json_t *dev)
{
    size_t i;
    json_t *e;
    if (json_is_false(json_object_get(dev, "present")))
        printf("warning: %s on %s is gone (NVML no longer lists it)\n",
               table_str(dev, "id"), table_str(dev, "nodeName"));
    json_array_foreach(json_object_get(dev, "foreignUsage"), i, e) {
        const char *app = json_string_value(json_object_get(e, "app"));
        const json_t *ctr = json_object_get(e, "container");
        char in[96] = "";
        if (ctr != NULL) /* a container given the GPU past accel */
            snprintf(in, sizeof in, " (%s container %.12s)",
                     table_str(ctr, "engine"), table_str(ctr, "id"));
        printf("warning: %s on %s: process %lld %s%s%s uses it without a "
               "binding (foreign usage)\n", table_str(dev, "id"),
               table_str(dev, "nodeName"),
               (long long)json_integer_value(json_object_get(e, "pid")),
               app ? "of app " : "of no app", app ? app : "", in);
    }
}

static void print_nodes(const json_t *nodes)
{
    static const char *const head[] = { "NODE", "DEVICE",    "MODEL",
                                        "VRAM", "MODE",      "ALLOCATED",
                                        "FREE", "APPS" };
    struct table t;
    size_t i, j;
    json_t *node, *dev;
    table_init(&t, 8, head);
    json_array_foreach(nodes, i, node) {
        json_array_foreach(json_object_get(node, "devices"), j, dev)
            add_device_row(&t, node, dev);
    }
    table_print(&t, stdout);
    table_release(&t);
    json_array_foreach(nodes, i, node) {
        json_array_foreach(json_object_get(node, "devices"), j, dev)
            print_device_warnings(dev);
    }
}

static void show_nodes(const json_t *data, const void *arg)
{
    (void)arg;
    print_nodes(data);
}

int cmd_cluster_list(struct cli_ctx *ctx, const struct cli_args *args)
{
    (void)args;
    return request_report(ctx, "GET", "/api/compute-resources", NULL,
                          show_nodes, NULL);
}

/* ---- set-type ---- */

/* --type: the API name, or a label ("Memory slicing"); NULL if unknown. */
static const char *support_type_arg(const char *s)
{
    enum accel_support m;
    if (accel_support_parse(s, &m))
        return accel_support_name(m);
    for (int i = 0; i < ACCEL_SUPPORT_COUNT; i++) {
        enum accel_support c = (enum accel_support)i;
        if (strcasecmp(s, accel_support_label(c)) == 0 ||
            strcasecmp(s, accel_support_name(c)) == 0)
            return accel_support_name(c);
    }
    return NULL;
}

static bool type_allowed(const json_t *dev, const char *type)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(dev, "availableSupportTypes"), i, t) {
        if (json_is_string(t) && strcmp(json_string_value(t), type) == 0)
            return true;
    }
    return false;
}

/*
 * Confirm a step that stops apps: prints warning and what, asks on a
 * terminal; without one (and without --yes) refuses. True = go ahead.
 */
static bool confirm_stop(const struct cli_ctx *ctx, const char *warning,
                         const char *what, const char *question)
{
    fprintf(stderr, "%s\n%s\n", warning, what);
    if (!ctx->interactive) {
        fprintf(stderr, "accelctl: not a terminal, so not asking; re-run "
                "with --yes to confirm.\n");
        return false;
    }
    if (!prompt_confirm(question)) {
        fprintf(stderr, "Cancelled; nothing changed.\n");
        return false;
    }
    return true;
}

static bool confirm_switch(const struct cli_ctx *ctx, const json_t *dev,
                           const char *type)
{
    char *apps = apps_of(dev);
    char *what = xasprintf("Apps that will be stopped: %s", apps);
    char *q = xasprintf("Switch device %s to %s?", table_str(dev, "id"), type);
    bool ok = confirm_stop(ctx, SWITCH_WARNING, what, q);
    free(q);
    free(what);
    free(apps);
    return ok;
}

static void print_switched(const json_t *data, const char *node,
                           const char *dev, const char *type)
{
    if (strcmp(table_str(data, "status"), "unchanged") == 0) {
        printf("Device %s on node %s already uses %s; nothing changed.\n",
               dev, node, type);
        return;
    }
    printf("Switched device %s on node %s to %s", dev, node, type);
    size_t i;
    json_t *a;
    const json_t *stopped = json_object_get(data, "stoppedApps");
    json_array_foreach(stopped, i, a)
        printf("%s%s", i ? ", " : " (stopped apps: ", table_str(a, "appName"));
    printf("%s.\n", json_array_size(stopped) ? ")" : "");
}

static int put_support_type(struct cli_ctx *ctx, const char *node,
                            const char *dev, const char *type)
{
    char *path = client_device_path(node, dev, "support-type");
    json_t *body = json_pack("{s:s}", "supportType", type);
    struct client_resp r;
    int rc = client_call(ctx, "PUT", path, body, &r);
    if (request_outcome(ctx, &rc, &r))
        print_switched(r.data, node, dev, type);
    client_resp_release(&r);
    json_decref(body);
    free(path);
    return rc;
}

/* Check the device and the mode, and confirm; CLI_EXIT_OK = go ahead. */
static int check_switch(struct cli_ctx *ctx, const struct cli_args *args,
                        const char *type)
{
    struct client_resp r;
    int rc = client_call(ctx, "GET", "/api/compute-resources", NULL, &r);
    if (rc != CLI_EXIT_OK) {
        if (rc == CLI_EXIT_REFUSED)
            rc = sentence_report(&r);
        client_resp_release(&r);
        return rc;
    }
    const json_t *dev = compute_find_device(r.data, args->pos[0], args->pos[1]);
    if (dev == NULL) {
        rc = CLI_EXIT_REFUSED;
    } else if (!type_allowed(dev, type)) {
        fprintf(stderr, "Device %s does not offer %s. Its modes: ",
                args->pos[1], type);
        json_dumpf(json_object_get(dev, "availableSupportTypes"), stderr,
                   JSON_COMPACT);
        fputc('\n', stderr);
        rc = CLI_EXIT_REFUSED;
    } else if (json_array_size(json_object_get(dev, "bindings")) > 0 &&
               strcmp(table_str(dev, "supportType"), type) != 0 && !args->yes &&
               !confirm_switch(ctx, dev, type)) {
        rc = CLI_EXIT_REFUSED;
    }
    client_resp_release(&r);
    return rc;
}

int cmd_cluster_set_type(struct cli_ctx *ctx, const struct cli_args *args)
{
    if (args->type == NULL) {
        fprintf(stderr, "accelctl: set-type needs --type "
                "Exclusive|MemorySlice|TimeSlice\n");
        return CLI_EXIT_USAGE;
    }
    const char *type = support_type_arg(args->type);
    if (type == NULL) {
        fprintf(stderr, "accelctl: --type %s: expected Exclusive, "
                "MemorySlice or TimeSlice\n", args->type);
        return CLI_EXIT_USAGE;
    }
    int rc = check_switch(ctx, args, type);
    if (rc != CLI_EXIT_OK)
        return rc;
    return put_support_type(ctx, args->pos[0], args->pos[1], type);
}

/* ---- unbind ---- */

static char *cards_of(const json_t *allocs)
{
    char *out = xstrdup("");
    size_t i;
    json_t *a;
    json_array_foreach(allocs, i, a) {
        char *next =
            xasprintf("%s%s%s/%s", out, i ? ", " : "", table_str(a, "nodeName"),
                      table_str(a, "deviceId"));
        free(out);
        out = next;
    }
    return out;
}

/* GET the app's bindings into *out; prints refusals. */
static int get_bindings(struct cli_ctx *ctx, const char *path,
                        struct client_resp *out)
{
    int rc = client_call(ctx, "GET", path, NULL, out);
    if (rc == CLI_EXIT_REFUSED)
        return sentence_report(out);
    return rc;
}

static bool confirm_unbind(struct cli_ctx *ctx, const char *app,
                           const json_t *allocs)
{
    char *cards = cards_of(allocs);
    char *what = xasprintf("App %s holds %zu card(s): %s", app,
                           json_array_size(allocs), cards);
    char *q = xasprintf("Remove app %s from its GPU(s)?", app);
    bool ok = confirm_stop(ctx, UNBIND_WARNING, what, q);
    free(q);
    free(what);
    free(cards);
    return ok;
}

int cmd_cluster_unbind(struct cli_ctx *ctx, const struct cli_args *args)
{
    const char *app = args->pos[0];
    char *e = client_escape(app);
    char *path = xasprintf("/api/apps/%s/compute-resources/bindings", e);
    free(e);
    struct client_resp r;
    int rc = get_bindings(ctx, path, &r);
    size_t n = json_array_size(r.data);
    if (rc == CLI_EXIT_OK && n == 0) {
        fprintf(stderr, "App %s has no GPU bindings to remove.\n", app);
        rc = CLI_EXIT_REFUSED;
    } else if (rc == CLI_EXIT_OK && !args->yes &&
               !confirm_unbind(ctx, app, r.data)) {
        rc = CLI_EXIT_REFUSED;
    }
    client_resp_release(&r);
    if (rc == CLI_EXIT_OK)
        rc = client_call(ctx, "DELETE", path, NULL, &r);
    if (rc == CLI_EXIT_REFUSED && r.status != 0)
        rc = sentence_report_ctx(ctx, &r);
    else if (rc == CLI_EXIT_OK && ctx->output == CLI_OUTPUT_JSON)
        table_print_json(r.data);
    else if (rc == CLI_EXIT_OK)
        printf("Removed app %s from the GPU (%zu card(s) released; the app "
               "was stopped).\n", app, n);
    client_resp_release(&r);
    free(path);
    return rc;
}

/* ---- gpu enable / disable ---- */

static int set_node_enabled(struct cli_ctx *ctx, const struct cli_args *args,
                            bool enabled)
{
    char host[256] = "";
    const char *node = args->npos > 0 ? args->pos[0] : NULL;
    if (node == NULL) {
        if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
            fprintf(stderr, "accelctl: give the NODE (no host name)\n");
            return CLI_EXIT_USAGE;
        }
        node = host;
    }
    char *e = client_escape(node);
    char *path = xasprintf("/api/nodes/%s", e);
    json_t *body = json_pack("{s:b}", "enabled", enabled);
    struct client_resp r;
    int rc = client_call(ctx, "PUT", path, body, &r);
    if (request_outcome(ctx, &rc, &r))
        printf("Accelerators of node %s are %s scheduling.\n", node,
               enabled ? "back in" : "out of");
    client_resp_release(&r);
    json_decref(body);
    free(path);
    free(e);
    return rc;
}

int cmd_cluster_gpu_enable(struct cli_ctx *ctx, const struct cli_args *args)
{
    return set_node_enabled(ctx, args, true);
}

int cmd_cluster_gpu_disable(struct cli_ctx *ctx, const struct cli_args *args)
{
    return set_node_enabled(ctx, args, false);
}

/* ---- node remove ---- */

/* "Node x was removed ...; 2 apps bound there were stopped ..." (arg:
 * the node's name). */
static void print_node_removed(const json_t *data, const void *arg)
{
    size_t n = json_array_size(json_object_get(data, "stoppedApps"));
    printf("Node %s was removed from the cluster", (const char *)arg);
    if (n > 0)
        printf("; %zu app%s bound there %s stopped and released", n,
               n == 1 ? "" : "s", n == 1 ? "was" : "were");
    printf(".\n");
}

int cmd_cluster_node_remove(struct cli_ctx *ctx, const struct cli_args *args)
{
    char *path = client_path("/api/nodes/", args->pos[0],
                             args->force ? "?force=true" : "");
    int rc = request_report(ctx, "DELETE", path, NULL, print_node_removed,
                            args->pos[0]);
    free(path);
    return rc;
}
