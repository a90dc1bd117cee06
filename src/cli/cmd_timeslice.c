/* SPDX-License-Identifier: MIT */
/*
 * cmd_timeslice.c: `accelctl set-timeslice NODE DEVICE [--quantum MS]
 * [--idle MS] [--oversubscribed-quantum MS] [--grace MS]` (PUT
 * .../devices/{d}/time-slice)
 * `accelctl set-meter NODE DEVICE [--over-quota report|stop] [--tolerance
 * SIZE]` (PUT .../devices/{d}/meter, the outside meter's settings: they
 * are a device's settings as the time slice's are)
 * `accelctl set-elastic NODE DEVICE [--overcommit RATIO] [--reclaim-wait
 * MS]` (PUT .../devices/{d}/elastic, elastic memory: SPEC 4.4,
 * docs/elastic.md)
 * and `accelctl timeslice NODE DEVICE` (the device's `timeSlice` object of
 * GET /api/compute-resources: holder, queue, turns and waiting time per app,
 * handoff p50/p99, settings in force). SPEC 4.3, docs/internals/timeslice.md.
 *
 * The values are checked here for form (a positive whole number of
 * milliseconds, naming the option) and by acceld for range (its answer
 * names the API field; we add the option's name), so nothing is sent that
 * acceld would have to guess about and nothing changes on a refusal.
 */
#include "common/accel_setup.h"
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/client.h"
#include "cli/compute.h"
#include "cli/sentence.h"
#include "cli/table.h"
#include "common/util.h"

/* One setting: the option, the API field, the value given (or NULL). */
struct ts_opt {
    const char *flag;  /* "--quantum" */
    const char *field; /* "quantumMs" */
    const char *value; /* from the command line, NULL = not given */
};

/*
 * Parse a positive whole number of milliseconds; prints why not (naming
 * the option) and returns false. Values above what acceld accepts are
 * passed on: acceld states the range.
 */
static bool parse_ms(const struct ts_opt *o, json_int_t *out)
{
    const char *s = o->value;
    char *end = NULL;
    long long v;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (s[0] == '\0' || end == NULL || *end != '\0' ||
        !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))) {
        fprintf(stderr, "accelctl set-timeslice: %s must be a whole number "
                "of %s (got \"%s\"); nothing changed\n", o->flag,
                strstr(o->flag, "-us") ? "microseconds" : "milliseconds", s);
        return false;
    }
    if (errno == ERANGE) {
        fprintf(stderr, "accelctl set-timeslice: %s %s is out of range (at "
                "most 600000 ms); nothing changed\n", o->flag, s);
        return false;
    }
    if (v <= 0) {
        fprintf(stderr, "accelctl set-timeslice: %s must be a positive "
                "number of milliseconds (got %s); nothing changed\n", o->flag,
                s);
        return false;
    }
    *out = (json_int_t)v;
    return true;
}

/* A 400 naming one of our fields: say which option it was. */
static int report_refusal(const char *cmd, const struct client_resp *r,
                          const struct ts_opt *opts, size_t n)
{
    const char *msg = json_string_value(json_object_get(r->body, "message"));
    if (r->status == 400 && msg != NULL) {
        for (size_t i = 0; i < n; i++) {
            size_t l = strlen(opts[i].field);
            if (opts[i].value != NULL &&
                strncmp(msg, opts[i].field, l) == 0 && msg[l] == ' ') {
                fprintf(stderr, "accelctl %s: %s %s: %s; nothing changed\n",
                        cmd, opts[i].flag, opts[i].value, msg);
                return CLI_EXIT_REFUSED;
            }
        }
    }
    return sentence_report(r);
}

static void print_set(const json_t *data, const char *node, const char *dev)
{
    const json_t *ts = json_object_get(data, "timeSlice");
    const char *keys[] = { "quantumMs", "idleReleaseMs", "idleReleaseUs",
                           "oversubscribedQuantumMs", "revokeGraceMs",
                           "minTurnUs", "pagingPercent" };
    const char *names[] = { "quantum", "idle release", "idle release",
                            "oversubscribed quantum", "revocation grace",
                            "minimum turn", "paging at most" };
    const char *units[] = { "ms", "ms", "us", "ms", "ms", "us", "%" };
    bool any = false;

    printf("Time-slice settings of device %s on node %s:", dev, node);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const json_t *v = json_object_get(ts, keys[i]);
        if (!json_is_integer(v))
            continue;
        printf("%s %s %lld %s", any ? "," : "", names[i],
               (long long)json_integer_value(v), units[i]);
        any = true;
    }
    printf("%s.\n", any ? "" : " defaults");
}

/*
 * PUT body (the settings given, taken) to the device's `what` settings
 * for command cmd: an empty body is a usage error naming what to give
 * (`give`), a refusal names the option (report_refusal), -o json prints
 * the answer. CLI_EXIT_OK with *r to print from (the caller releases it).
 */
static int put_settings(struct cli_ctx *ctx, const struct cli_args *args,
                        const char *cmd, const char *what, const char *give,
                        json_t *body, const struct ts_opt *opts, size_t n,
                        struct client_resp *r)
{
    char *path;
    int rc;

    memset(r, 0, sizeof(*r));
    if (json_object_size(body) == 0) {
        fprintf(stderr, "accelctl %s: give %s\n", cmd, give);
        json_decref(body);
        return CLI_EXIT_USAGE;
    }
    path = client_device_path(args->pos[0], args->pos[1], what);
    rc = client_call(ctx, "PUT", path, body, r);
    if (rc == CLI_EXIT_REFUSED)
        rc = report_refusal(cmd, r, opts, n);
    else if (rc == CLI_EXIT_OK && ctx->output == CLI_OUTPUT_JSON)
        table_print_json(r->data);
    json_decref(body);
    free(path);
    return rc;
}

int cmd_timeslice_set(struct cli_ctx *ctx, const struct cli_args *args)
{
    struct ts_opt opts[] = {
        { "--quantum", "quantumMs", args->quantum },
        { "--idle", "idleReleaseMs", args->idle },
        { "--idle-us", "idleReleaseUs", args->idle_us },
        { "--oversubscribed-quantum", "oversubscribedQuantumMs",
          args->oversub_quantum },
        { "--grace", "revokeGraceMs", args->grace },
    };
    const size_t nopts = sizeof(opts) / sizeof(opts[0]);
    json_t *body = json_object();
    struct client_resp r;
    int rc;

    for (size_t i = 0; i < nopts; i++) {
        json_int_t v;
        if (opts[i].value == NULL)
            continue;
        if (!parse_ms(&opts[i], &v)) {
            json_decref(body);
            return CLI_EXIT_USAGE;
        }
        json_object_set_new(body, opts[i].field, json_integer(v));
    }
    rc = put_settings(ctx, args, "set-timeslice", "time-slice",
                      "--quantum MS, --idle MS, --idle-us US, "
                      "--oversubscribed-quantum MS or --grace MS", body, opts,
                      nopts, &r);
    if (rc == CLI_EXIT_OK && ctx->output != CLI_OUTPUT_JSON)
        print_set(r.data, args->pos[0], args->pos[1]);
    client_resp_release(&r);
    return rc;
}

int cmd_meter_set(struct cli_ctx *ctx, const struct cli_args *args)
{
    struct ts_opt opts[] = {
        { "--over-quota", "overQuotaAction", args->over_quota },
        { "--tolerance", "tolerance", args->tolerance },
    };
    json_t *body = json_object();
    struct client_resp r;
    int rc;

    /* both values go as given: acceld checks them (a quantity string is
     * one of its forms of tolerance) and its refusal names the field */
    for (size_t i = 0; i < 2; i++)
        if (opts[i].value != NULL)
            json_object_set_new(body, opts[i].field,
                                json_string(opts[i].value));
    rc = put_settings(ctx, args, "set-meter", "meter",
                      "--over-quota report|stop or --tolerance SIZE", body,
                      opts, 2, &r);
    if (rc == CLI_EXIT_OK && ctx->output != CLI_OUTPUT_JSON) {
        const json_t *m = json_object_get(r.data, "meter");
        long long t = json_integer_value(json_object_get(m, "tolerance"));
        printf("Outside meter of device %s on node %s: an app over its "
               "quota by more than %lld %s is %s.\n", args->pos[1],
               args->pos[0], t % (1 << 20) ? t : t >> 20,
               t % (1 << 20) ? "bytes" : "MiB",
               strcmp(table_str(m, "overQuotaAction"), "stop") == 0
                   ? "stopped" : "reported");
    }
    client_resp_release(&r);
    return rc;
}

static double jnum(const json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

int cmd_elastic_set(struct cli_ctx *ctx, const struct cli_args *args)
{
    struct ts_opt opts[] = {
        { "--overcommit", "overcommit", args->overcommit },
        { "--reclaim-wait", "reclaimWaitMs", args->reclaim_wait },
    };
    json_t *body = json_object();
    struct client_resp r;
    char *end = NULL;
    int rc;

    if (opts[0].value != NULL) {
        double v = strtod(opts[0].value, &end);
        if (opts[0].value[0] == '\0' || end == NULL || *end != '\0') {
            fprintf(stderr, "accelctl set-elastic: --overcommit must be a "
                    "number such as 1.5 (got \"%s\"); nothing changed\n",
                    opts[0].value);
            json_decref(body);
            return CLI_EXIT_USAGE;
        }
        json_object_set_new(body, "overcommit", json_real(v));
    }
    if (opts[1].value != NULL) {
        json_int_t v;
        if (strcmp(opts[1].value, "0") == 0) {
            v = 0;
        } else if (!parse_ms(&opts[1], &v)) {
            json_decref(body);
            return CLI_EXIT_USAGE;
        }
        json_object_set_new(body, "reclaimWaitMs", json_integer(v));
    }
    rc = put_settings(ctx, args, "set-elastic", "elastic",
                      "--overcommit RATIO or --reclaim-wait MS", body, opts,
                      2, &r);
    if (rc == CLI_EXIT_OK && ctx->output != CLI_OUTPUT_JSON) {
        const json_t *e = json_object_get(r.data, "elastic");
        double oc = jnum(e, "overcommit");
        long long cap = json_integer_value(json_object_get(e,
                                                           "quotaCapacity"));
        if (oc <= 1.0)
            printf("Elastic memory of device %s on node %s is off: its "
                   "quotas may sum to its memory (%.1f GiB).",
                   args->pos[1], args->pos[0], (double)cap / (1 << 30));
        else
            printf("Elastic memory of device %s on node %s: its quotas may "
                   "sum to %.3g x its memory (%.1f GiB).", args->pos[1],
                   args->pos[0], oc, (double)cap / (1 << 30));
        printf(" A short allocation waits up to %lld ms for apps to give "
               "memory back.\n",
               (long long)json_integer_value(json_object_get(e,
                                                             "reclaimWaitMs")));
    }
    client_resp_release(&r);
    return rc;
}


static void print_apps(const json_t *ts)
{
    static const char *const head[] = { "APP", "PROCESSES", "HOLDING",
                                        "WAITING", "TURNS", "WAITED" };
    const json_t *apps = json_object_get(ts, "apps");
    struct table t;
    size_t i;
    json_t *a;

    if (json_array_size(apps) == 0) {
        printf("No app is connected.\n");
        return;
    }
    table_init(&t, 6, head);
    json_array_foreach(apps, i, a) {
        char procs[24], turns[24], waited[32];
        const char *row[6];
        snprintf(procs, sizeof procs, "%lld",
                 (long long)json_integer_value(json_object_get(a,
                                                               "processes")));
        snprintf(turns, sizeof turns, "%lld",
                 (long long)json_integer_value(json_object_get(a, "turns")));
        snprintf(waited, sizeof waited, "%.3f s", jnum(a, "waitSeconds"));
        row[0] = table_str(a, "app");
        row[1] = procs;
        row[2] = json_is_true(json_object_get(a, "holding")) ? "yes" : "no";
        row[3] = json_is_true(json_object_get(a, "waiting")) ? "yes" : "no";
        row[4] = turns;
        row[5] = waited;
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
}

static void print_timeslice(const json_t *ts, const char *node,
                            const char *dev)
{
    const json_t *q = json_object_get(ts, "queue");
    const json_t *h = json_object_get(ts, "handoff");
    const char *holder = json_string_value(json_object_get(ts, "holder"));
    size_t i;
    json_t *e;

    printf("Device %s on node %s: time slicing, broker %s\n", dev, node,
           json_is_true(json_object_get(ts, "running")) ? "running"
                                                        : "not running yet");
    printf("Settings: quantum %lld ms, idle release %lld us, revocation "
           "grace %lld ms\n",
           (long long)json_integer_value(json_object_get(ts, "quantumMs")),
           json_is_integer(json_object_get(ts, "idleReleaseUs"))
               ? (long long)json_integer_value(json_object_get(
                     ts, "idleReleaseUs"))
               : 1000 * (long long)json_integer_value(json_object_get(
                            ts, "idleReleaseMs")),
           (long long)json_integer_value(json_object_get(ts,
                                                         "revokeGraceMs")));
    if (!json_is_true(json_object_get(ts, "running")))
        return;
    if (holder != NULL)
        printf("Holder: %s (for %.3f s)\n", holder, jnum(ts, "heldSeconds"));
    else
        printf("Holder: none\n");
    printf("Queue: ");
    if (json_array_size(q) == 0)
        printf("empty");
    json_array_foreach(q, i, e)
        printf("%s%s", i ? ", " : "", json_string_value(e));
    printf("\nTurns granted: %lld, revoked: %lld, waited in all: %.3f s\n",
           (long long)json_integer_value(json_object_get(ts, "turns")),
           (long long)json_integer_value(json_object_get(ts, "revocations")),
           jnum(ts, "waitSeconds"));
    printf("Handoffs: %lld", (long long)json_integer_value(
                                 json_object_get(h, "count")));
    if (json_integer_value(json_object_get(h, "count")) > 0)
        printf(", p50 %.2f ms, p99 %.2f ms", jnum(h, "p50Ms"),
               jnum(h, "p99Ms"));
    printf("\n");
    print_apps(ts);
}

int cmd_timeslice_show(struct cli_ctx *ctx, const struct cli_args *args)
{
    struct client_resp r;
    const json_t *dev, *ts;
    int rc = client_call(ctx, "GET", "/api/compute-resources", NULL, &r);

    if (rc != CLI_EXIT_OK) {
        if (rc == CLI_EXIT_REFUSED)
            rc = sentence_report_ctx(ctx, &r);
        client_resp_release(&r);
        return rc;
    }
    dev = compute_find_device(r.data, args->pos[0], args->pos[1]);
    ts = dev != NULL ? json_object_get(dev, "timeSlice") : NULL;
    if (dev == NULL) {
        rc = CLI_EXIT_REFUSED;
    } else if (!json_is_object(ts)) {
        fprintf(stderr, "Device %s on node %s is not time-sliced (mode %s, "
                "or not on the node acceld runs on); `accelctl set-type %s %s "
                "--type TimeSlice` switches it.\n", args->pos[1],
                args->pos[0], table_str(dev, "supportType"), args->pos[0],
                args->pos[1]);
        rc = CLI_EXIT_REFUSED;
    } else if (ctx->output == CLI_OUTPUT_JSON) {
        table_print_json(ts);
    } else {
        print_timeslice(ts, args->pos[0], args->pos[1]);
    }
    client_resp_release(&r);
    return rc;
}
