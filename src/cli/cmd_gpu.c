/* SPDX-License-Identifier: MIT */
/*
 * cmd_gpu.c: `accelctl gpu status` (SPEC 6): what the node acceld runs on
 * sees of its accelerators: whether NVML is loaded (and if not, why, so a
 * machine without a GPU says so plainly), the driver and CUDA versions,
 * and each device of the node with its sharing mode, health, presence,
 * processes that use it without a binding, the enforcement tier (and per
 * device which tier holds its VRAM quotas: the kernel's dmem, the driver's
 * limits, or why neither), and the apps the outside meter found over their
 * quota. It
 * reads GET /api/runtime. `gpu enable|disable` live in cmd_cluster.c.
 */
#include "common/accel_setup.h"
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/client.h"
#include "cli/request.h"
#include "cli/sentence.h"
#include "cli/table.h"
#include "common/util.h"

/* "pid 4242 (512 Mi), pid 7 of app x" or "-"; the caller frees it. */
static char *foreign_of(const json_t *dev)
{
    char *out = xstrdup("");
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(dev, "foreignUsage"), i, e) {
        char mem[32];
        const char *app = json_string_value(json_object_get(e, "app"));
        char *next;
        table_fmt_gib(json_integer_value(json_object_get(e, "usedMemory")),
                      mem, sizeof mem);
        const json_t *ctr = json_object_get(e, "container");
        char in[96] = "";
        if (ctr != NULL) /* a container given the GPU past accel */
            snprintf(in, sizeof in, " in %s container %.12s",
                     table_str(ctr, "engine"), table_str(ctr, "id"));
        next = xasprintf("%s%spid %lld (%s)%s%s%s", out, i ? ", " : "",
                         (long long)json_integer_value(
                             json_object_get(e, "pid")),
                         mem, app ? " of app " : "", app ? app : "", in);
        free(out);
        out = next;
    }
    if (out[0] == '\0') {
        free(out);
        out = xstrdup("-");
    }
    return out;
}

/* "memory shim, compute none" from the device's enforcement object; a
 * device with a memoryNote gets a "*": the note, a sentence, is printed
 * under the table (print_notes), not in the column. */
static char *tier_of(const json_t *dev)
{
    const json_t *e = json_object_get(dev, "enforcement");
    return xasprintf("memory %s%s, compute %s", table_str(e, "memory"),
                     json_object_get(e, "memoryNote") ? "*" : "",
                     table_str(e, "compute"));
}

/* "* DEVICE memory none: the CPU fallback has no device runtime: ..." */
static void print_notes(const json_t *devs)
{
    size_t i;
    const json_t *dev;
    json_array_foreach(devs, i, dev) {
        const json_t *e = json_object_get(dev, "enforcement");
        if (json_is_string(json_object_get(e, "memoryNote")))
            printf("* %s memory %s: %s\n", table_str(dev, "id"),
                   table_str(e, "memory"), table_str(e, "memoryNote"));
    }
}

static void add_row(struct table *t, const json_t *dev)
{
    char vram[32], idx[24];
    char *foreign = foreign_of(dev), *tier = tier_of(dev);
    bool present = !json_is_false(json_object_get(dev, "present"));
    json_int_t index = json_integer_value(json_object_get(dev, "index"));
    const char *row[9];

    table_fmt_gib(json_integer_value(json_object_get(dev, "memory")), vram,
                  sizeof vram);
    if (index >= 0)
        snprintf(idx, sizeof idx, "%lld", (long long)index);
    else
        snprintf(idx, sizeof idx, "-");
    row[0] = table_str(dev, "id");
    row[1] = idx;
    row[2] = table_str(dev, "cardModel");
    row[3] = vram;
    row[4] = table_str(dev, "supportType");
    row[5] = table_str(dev, "health");
    row[6] = present ? "yes" : "NO (gone)";
    row[7] = tier;
    row[8] = foreign;
    table_add(t, row);
    free(foreign);
    free(tier);
}

/* "App limits: containment cgroup-v2, memory cgroup-v1, ..., disk watched
 * (cgroup X)"
 * and a line per tier that is none, with its reason (SPEC 8.2). */
static void print_limits(const json_t *e)
{
    static const char *const keys[] = { "containment", "memory", "cpu",
                                        "pids", "disk" };
    const json_t *why = json_object_get(e, "reasons");

    if (!json_is_object(e))
        return;
    printf("App limits: containment %s, memory %s, cpu %s, pids %s, "
           "disk %s", table_str(e, "containment"), table_str(e, "memory"),
           table_str(e, "cpu"), table_str(e, "pids"),
           json_is_string(json_object_get(e, "disk")) ? table_str(e, "disk")
                                                      : "none");
    if (json_is_string(json_object_get(e, "cgroup")))
        printf(" (cgroups under %s)", table_str(e, "cgroup"));
    printf("\n");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (json_is_string(json_object_get(why, keys[i])))
            printf("  %s not enforced: %s\n", keys[i], table_str(why, keys[i]));
}

/* A line per app the outside meter found over its quota beyond the
 * device's tolerance (docs/api.md, Allocation.overQuota). */
static void print_over_quota(const json_t *dev)
{
    size_t i;
    json_t *b;

    json_array_foreach(json_object_get(dev, "bindings"), i, b) {
        const char *app = table_str(b, "appName");
        if (!json_is_true(json_object_get(b, "overQuotaReported")))
            continue;
        printf("warning: %s over quota by %lld MiB: memory the shim cannot "
               "see (on %s the driver holds %lld MiB for it, quota %lld "
               "MiB)\n",
               app[0] ? app : "another user's app",
               (long long)(json_integer_value(json_object_get(b, "overQuota"))
                           >> 20),
               table_str(dev, "id"),
               (long long)(json_integer_value(
                               json_object_get(b, "driverMemory")) >> 20),
               (long long)(json_integer_value(json_object_get(b, "memory")) >>
                           20));
    }
}

/* The metric history's series the last sample could not keep: said, and
 * named, never dropped in silence (issue 51). */
static void print_history(const json_t *h)
{
    const json_t *miss = json_object_get(h, "notRecorded"), *m;
    size_t i, n = json_array_size(miss);

    if (n == 0)
        return;
    printf("warning: the metric history is full (%lld of %lld MiB, "
           "acceld --history-max-bytes): %zu series not recorded:",
           (long long)(json_integer_value(json_object_get(h, "bytes")) >> 20),
           (long long)(json_integer_value(json_object_get(h, "maxBytes")) >>
                       20),
           n);
    json_array_foreach(miss, i, m) {
        if (i == 8) {
            printf(" and %zu more", n - i);
            break;
        }
        if (json_object_get(m, "app"))
            printf("%s %s on %s", i ? "," : "", table_str(m, "app"),
                   table_str(m, "device"));
        else
            printf("%s %s", i ? "," : "", table_str(m, "device"));
    }
    printf("\n");
}

static void print_status(const json_t *data)
{
    static const char *const head[] = { "DEVICE", "INDEX",   "MODEL",
                                        "VRAM",   "MODE",    "HEALTH",
                                        "PRESENT", "ENFORCEMENT",
                                        "FOREIGN PROCESSES" };
    const json_t *nv = json_object_get(data, "nvml");
    const json_t *devs = json_object_get(data, "devices");
    struct table t;
    size_t i;
    json_t *dev;

    printf("Node %s\n", table_str(data, "nodeName"));
    if (json_is_true(json_object_get(nv, "loaded")))
        printf("NVML: loaded (driver %s, CUDA %s)\n", table_str(nv, "driver"),
               table_str(nv, "cuda"));
    else
        printf("NVML: not loaded: no NVIDIA GPU can be used on this node\n");
    printf("Status: %s\n", table_str(nv, "status"));
    print_limits(json_object_get(data, "enforcement"));
    if (json_array_size(devs) == 0) {
        printf("No devices on this node.\n");
        return;
    }
    table_init(&t, 9, head);
    json_array_foreach(devs, i, dev)
        add_row(&t, dev);
    table_print(&t, stdout);
    table_release(&t);
    print_notes(devs);
    /* per device, which tier holds its VRAM quotas, or why no stronger
     * one than the shim (the kernel's dmem, the driver's limits) */
    json_array_foreach(devs, i, dev) {
        const json_t *e = json_object_get(dev, "enforcement");
        if (json_is_string(json_object_get(e, "vramQuotas")))
            printf("%s: %s\n", table_str(dev, "id"),
                   table_str(e, "vramQuotas"));
    }
    /* what the shim charges a context there, as acceld measured it */
    json_array_foreach(devs, i, dev) {
        const json_t *c = json_object_get(json_object_get(dev, "enforcement"),
                                          "contextMemory");
        if (json_is_integer(c))
            printf("%s: a context takes %lld MiB (measured by acceld)\n",
                   table_str(dev, "id"),
                   (long long)(json_integer_value(c) >> 20));
    }
    json_array_foreach(devs, i, dev)
        if (json_array_size(json_object_get(dev, "foreignUsage")) > 0)
            printf("warning: %s is used by processes that hold no binding "
                   "on it (see FOREIGN PROCESSES)\n", table_str(dev, "id"));
    json_array_foreach(devs, i, dev)
        print_over_quota(dev);
    print_history(json_object_get(data, "history"));
}

static void show_status(const json_t *data, const void *arg)
{
    (void)arg;
    print_status(data);
}

int cmd_gpu_status(struct cli_ctx *ctx, const struct cli_args *args)
{
    (void)args;
    return request_report(ctx, "GET", "/api/runtime", NULL, show_status,
                          NULL);
}
