/* SPDX-License-Identifier: MIT */
/*
 * cmd_quota.c: accelctl app set-quota APP DEVICE SIZE, a bound app's
 * quota changed live (SPEC 4.4): PUT /api/apps/APP/compute-resources/
 * bindings/DEVICE {memory}. A raise the rules refuse prints acceld's
 * sentence, with the numbers, and exits 1.
 */
#include "common/accel_setup.h"
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/client.h"
#include "cli/compute.h"
#include "cli/request.h"
#include "common/quantity.h"
#include "common/util.h"

struct quota_line {
    const char *app, *device;
};

/* "Quota of APP on DEVICE: 8 Gi (it holds 2 Gi)." from the app answered. */
static void print_quota(const json_t *app, const void *arg)
{
    const struct quota_line *l = arg;
    const json_t *allocs = json_object_get(app, "allocations"), *x;
    size_t i;

    json_array_foreach(allocs, i, x) {
        const char *dev = json_string_value(json_object_get(x, "deviceId"));
        const json_t *used = json_object_get(x, "usedMemory");
        char q[32], u[32];
        if (dev == NULL || strcmp(dev, l->device) != 0)
            continue;
        quantity_format_bytes(
            (uint64_t)json_integer_value(json_object_get(x, "memory")), q,
            sizeof q);
        if (json_is_integer(used)) {
            quantity_format_bytes((uint64_t)json_integer_value(used), u,
                                  sizeof u);
            printf("Quota of %s on %s: %s (it holds %s).\n", l->app,
                   l->device, q, u);
        } else {
            printf("Quota of %s on %s: %s.\n", l->app, l->device, q);
        }
        return;
    }
    printf("Quota of %s on %s changed.\n", l->app, l->device);
}

int cmd_quota_set(struct cli_ctx *ctx, const struct cli_args *args)
{
    struct quota_line line = {args->pos[0], args->pos[1]};
    char *dev, *suffix, *path;
    uint64_t bytes = 0;
    json_t *body;
    int rc;

    if (compute_parse_mem(args->pos[2], &bytes) != ACCEL_OK) {
        fprintf(stderr, "accelctl: SIZE \"%s\" is not a positive quantity "
                "(8 = 8 Gi, or 8Gi, 512Mi)\n", args->pos[2]);
        return CLI_EXIT_USAGE;
    }
    dev = client_escape(args->pos[1]);
    suffix = xasprintf("/compute-resources/bindings/%s", dev);
    path = client_path("/api/apps/", args->pos[0], suffix);
    body = json_pack("{s:I}", "memory", (json_int_t)bytes);
    rc = request_report(ctx, "PUT", path, body, print_quota, &line);
    json_decref(body);
    free(path);
    free(suffix);
    free(dev);
    return rc;
}
