/* SPDX-License-Identifier: MIT */
/*
 * cmd_dashboard.c: `accelctl dashboard gpu list|tasks|get UUID`, the
 * HAMi-compatible view of the cluster, read through the same routes the
 * HAMi dashboard and `olares-cli dashboard` use (/hami/api/vgpu/v1/...,
 * SPEC 5.4). Those answers have no envelope and count memory in MiB; -o
 * json prints them as they came. It changes nothing.
 */
#include "common/accel_setup.h"
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/client.h"
#include "cli/sentence.h"
#include "cli/table.h"
#include "common/util.h"

#define HAMI "/hami/api/vgpu/v1"
#define MIB (1024LL * 1024LL)

static json_int_t jint(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

/* The label of a HAMi share mode ("0"/"1"/"2"), as the Olares CLI shows. */
static const char *mode_label(const char *code)
{
    if (strcmp(code, "0") == 0)
        return "App exclusive";
    if (strcmp(code, "1") == 0)
        return "Memory slicing";
    if (strcmp(code, "2") == 0)
        return "Time slicing";
    return *code ? code : "-";
}

/* "used / total" of two members into buf; MiB members shown in Gi. */
static void used_total(const json_t *o, const char *used, const char *total,
                       bool mib, char *buf, size_t len)
{
    char a[32], b[32];
    if (mib) {
        table_fmt_gib(jint(o, used) * MIB, a, sizeof(a));
        table_fmt_gib(jint(o, total) * MIB, b, sizeof(b));
    } else {
        snprintf(a, sizeof(a), "%lld", (long long)jint(o, used));
        snprintf(b, sizeof(b), "%lld", (long long)jint(o, total));
    }
    snprintf(buf, len, "%s / %s", a, b);
}

/*
 * One request to a HAMi route; on success *out gets the whole answer (a new
 * reference). Prints the refusal itself. Returns an enum cli_exit value.
 */
static int hami_call(struct cli_ctx *ctx, const char *method,
                     const char *path, json_t *body, json_t **out)
{
    struct client_resp r;
    int rc = client_call(ctx, method, path, body, &r);
    if (rc == CLI_EXIT_REFUSED)
        rc = sentence_report(&r);
    else if (rc == CLI_EXIT_OK)
        *out = json_incref(r.body);
    client_resp_release(&r);
    return rc;
}

static void gpu_row(struct table *t, const json_t *g)
{
    char vgpu[80], core[80], mem[80];
    used_total(g, "vgpuUsed", "vgpuTotal", false, vgpu, sizeof(vgpu));
    used_total(g, "coreUsed", "coreTotal", false, core, sizeof(core));
    used_total(g, "memoryUsed", "memoryTotal", true, mem, sizeof(mem));
    const char *row[] = { table_str(g, "uuid"),
                          table_str(g, "nodeName"),
                          table_str(g, "type"),
                          mode_label(table_str(g, "shareMode")),
                          vgpu,
                          core,
                          mem,
                          json_is_true(json_object_get(g, "health"))
                              ? "healthy"
                              : "unhealthy" };
    table_add(t, row);
}

static void print_gpus(const json_t *list)
{
    static const char *const head[] = { "UUID",  "NODE",   "TYPE",
                                        "MODE",  "VGPU",   "CORE %",
                                        "MEMORY", "HEALTH" };
    table_print_items(8, head, list, gpu_row);
}

static void task_row(struct table *t, const json_t *c)
{
    char core[24], mem[32];
    snprintf(core, sizeof(core), "%lld", (long long)jint(c, "allocatedCores"));
    table_fmt_gib(jint(c, "allocatedMem") * MIB, mem, sizeof(mem));
    const char *row[] = {
        table_str(c, "name"),
        /* accel's own state word; HAMi's status from another server */
        table_str(c, table_str(c, "state")[0] != '\0' ? "state" : "status"),
        table_str(c, "namespace"),
        table_str(c, "nodeName"),
        json_string_value(json_array_get(json_object_get(c, "deviceIds"), 0)),
        core, mem, table_str(c, "podUid")
    };
    table_add(t, row);
}

static void print_tasks(const json_t *items)
{
    static const char *const head[] = { "NAME",   "STATUS", "NAMESPACE",
                                        "NODE",   "DEVICE", "CORE %",
                                        "MEMORY", "POD UID" };
    table_print_items(8, head, items, task_row);
}

/* POST a {"filters":{...}} body (filters may be empty) to path. */
static int post_filtered(struct cli_ctx *ctx, const char *path,
                         const char *key, const char *value, json_t **out)
{
    json_t *f = json_object();
    if (key != NULL)
        json_object_set_new(f, key, json_string(value));
    json_t *body = json_pack("{s:o}", "filters", f);
    int rc = hami_call(ctx, "POST", path, body, out);
    json_decref(body);
    return rc;
}

/* An unfiltered HAMI list (path): -o json as it is, else the array
 * `member` by print, or the sentence `none` when it is empty. */
static int print_list(struct cli_ctx *ctx, const char *path,
                      const char *member, const char *none,
                      void (*print)(const json_t *items))
{
    json_t *ans = NULL;
    int rc = post_filtered(ctx, path, NULL, NULL, &ans);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (ctx->output == CLI_OUTPUT_JSON)
        table_print_json(ans);
    else if (json_array_size(json_object_get(ans, member)) == 0)
        printf("%s\n", none);
    else
        print(json_object_get(ans, member));
    json_decref(ans);
    return CLI_EXIT_OK;
}

static int gpu_list(struct cli_ctx *ctx)
{
    return print_list(ctx, HAMI "/gpus", "list", "no GPU detected",
                      print_gpus);
}

static int gpu_tasks(struct cli_ctx *ctx)
{
    return print_list(ctx, HAMI "/containers", "items", "no tasks use a GPU",
                      print_tasks);
}

/* The fields of one GPU, one per line, then the tasks on it. */
static void print_gpu(const json_t *g, const json_t *tasks)
{
    char vgpu[80], core[80], mem[80];
    used_total(g, "vgpuUsed", "vgpuTotal", false, vgpu, sizeof(vgpu));
    used_total(g, "coreUsed", "coreTotal", false, core, sizeof(core));
    used_total(g, "memoryUsed", "memoryTotal", true, mem, sizeof(mem));
    printf("UUID:    %s\nNode:    %s\nType:    %s\nMode:    %s\n"
           "Health:  %s\nvGPU:    %s\nCore %%:  %s\nMemory:  %s\n",
           table_str(g, "uuid"), table_str(g, "nodeName"), table_str(g, "type"),
           mode_label(table_str(g, "shareMode")),
           json_is_true(json_object_get(g, "health")) ? "healthy"
                                                       : "unhealthy",
           vgpu, core, mem);
    if (json_array_size(tasks) == 0) {
        printf("Tasks:   none\n");
        return;
    }
    printf("Tasks:\n");
    print_tasks(tasks);
}

static int gpu_get(struct cli_ctx *ctx, const char *uuid)
{
    json_t *g = NULL, *tasks = NULL;
    char *e = client_escape(uuid);
    char *path = xasprintf(HAMI "/gpu?uid=%s", e);
    int rc = hami_call(ctx, "GET", path, NULL, &g);
    free(e);
    free(path);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (json_object_get(g, "uuid") == NULL) {
        /* HAMi (and acceld) answer an unknown GPU with 200 and {} */
        fprintf(stderr, "no GPU \"%s\"\n", uuid);
        rc = CLI_EXIT_REFUSED;
    } else if (ctx->output == CLI_OUTPUT_JSON) {
        table_print_json(g);
    } else {
        rc = post_filtered(ctx, HAMI "/containers", "deviceId", uuid, &tasks);
        if (rc == CLI_EXIT_OK)
            print_gpu(g, json_object_get(tasks, "items"));
    }
    json_decref(tasks);
    json_decref(g);
    return rc;
}

int cmd_dashboard(struct cli_ctx *ctx, const struct cli_args *args)
{
    const char *what = args->npos >= 2 ? args->pos[1] : "";
    bool get = strcmp(what, "get") == 0;
    if (strcmp(args->pos[0], "gpu") != 0 || (get && args->npos != 3) ||
        (!get && args->npos != 2)) {
        fprintf(stderr, "usage: accelctl dashboard gpu list|tasks|get UUID\n");
        return CLI_EXIT_USAGE;
    }
    if (strcmp(what, "list") == 0)
        return gpu_list(ctx);
    if (strcmp(what, "tasks") == 0)
        return gpu_tasks(ctx);
    if (get)
        return gpu_get(ctx, args->pos[2]);
    fprintf(stderr, "accelctl dashboard gpu: unknown view \"%s\" (list, "
            "tasks or get UUID)\n", what);
    return CLI_EXIT_USAGE;
}
