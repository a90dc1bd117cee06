/* SPDX-License-Identifier: MIT */
/*
 * cmd_app.c: the app commands of accelctl: install, list, show, resume,
 * stop, uninstall. Each is: build the request, send it (compute.c walks the
 * 422 questions of install and resume), print the App or a refusal.
 */
#include "common/accel_setup.h"
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/client.h"
#include "cli/compute.h"
#include "cli/request.h"
#include "cli/sentence.h"
#include "cli/table.h"
#include "common/util.h"

/* "node/device" or "node/device (8 Gi)" per allocation, comma separated. */
static char *devices_of(const json_t *app)
{
    char *out = xstrdup("");
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(app, "allocations"), i, a) {
        char *dev = xasprintf("%s/%s", table_str(a, "nodeName"),
                              table_str(a, "deviceId"));
        table_append_item(&out, i, dev,
                          json_integer_value(json_object_get(a, "memory")));
        free(dev);
    }
    return out;
}

/*
 * An app's state in the page's words (issue 47 item 9): an external app
 * that is `running` (its GPU bound; another system runs its processes)
 * is "assigned", as the page's badge says; every other state as acceld
 * names it. -o json keeps acceld's name.
 */
static const char *shown_state(const json_t *app)
{
    const char *st = table_str(app, "state");
    if (json_is_true(json_object_get(app, "external")) &&
        strcmp(st, "running") == 0)
        return "assigned";
    return st;
}

/* One line about an app after a change: "App x is running on n/d", "App
 * y is assigned to n/d" (an external app). */
static void print_app_line(const json_t *app)
{
    char *devs = devices_of(app);
    const char *reason = table_str(app, "reason"), *st = shown_state(app);
    printf("App %s is %s", table_str(app, "name"), st);
    if (devs[0] != '\0')
        printf(" %s %s", strcmp(st, "assigned") == 0 ? "to" : "on", devs);
    if (reason[0] != '\0')
        printf(" (%s)", reason);
    printf(".\n");
    free(devs);
}

/* Print data per -o and return CLI_EXIT_OK. */
static int print_app(const struct cli_ctx *ctx, const json_t *app)
{
    if (ctx->output == CLI_OUTPUT_JSON)
        table_print_json(app);
    else
        print_app_line(app);
    return CLI_EXIT_OK;
}

static char *app_path(const char *name, const char *suffix)
{
    return client_path("/api/apps/", name, suffix);
}

/* ---- a pull followed on a terminal ---- */

#define PULL_WAIT_S 5      /* each long-poll of the pull's events */
#define PULL_PHASES 5      /* podman pull's steps, below */
#define PULL_BAR 20        /* the bar's width in characters */
#define PULL_SETTLE_US 250000 /* how often the start after it is asked */
#define PULL_SETTLE_TRIES 240 /* at most a minute */

/* What podman pull has printed so far: its steps, resolving the
 * reference and its signatures (1), the layers ("Copying blob", 2), the
 * config (3), the manifest (4), the signatures stored (5); and, from
 * acceld's reading of podman's bars (app.pull's layers and bytes), the
 * layers copied and their bytes. While the layers are copied the bar is
 * their bytes copied; else the step reached. */
struct pull_view {
    int phase;      /* 0 (nothing yet) .. PULL_PHASES */
    int layers;     /* "Copying blob" lines */
    long long layers_done, layers_total; /* app.pull's layers */
    long long bytes_done, bytes_total;   /* app.pull's bytes (0: none) */
    char step[96];  /* what the bar says */
};

/* n bytes as "18.1 MiB" into buf. */
static void pull_size(long long n, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    size_t u = 0;

    while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%lld B", n);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
}

/* An app.pull event's figures (data: its layers and bytes) into v. */
static void pull_view_figures(struct pull_view *v, const json_t *data)
{
    const json_t *l = json_object_get(data, "layers");
    const json_t *b = json_object_get(data, "bytes");
    char done[32], total[32];

    if (!json_is_object(l) || !json_is_object(b))
        return;
    v->layers_done = json_integer_value(json_object_get(l, "done"));
    v->layers_total = json_integer_value(json_object_get(l, "total"));
    v->bytes_done = json_integer_value(json_object_get(b, "done"));
    v->bytes_total = json_integer_value(json_object_get(b, "total"));
    if (v->phase > 2 || v->layers_total <= 0)
        return; /* past the layers: the step */
    if (v->bytes_total <= 0) { /* podman off a terminal: no bytes */
        snprintf(v->step, sizeof(v->step), "%lld/%lld layers",
                 v->layers_done, v->layers_total);
        return;
    }
    pull_size(v->bytes_done, done, sizeof done);
    pull_size(v->bytes_total, total, sizeof total);
    snprintf(v->step, sizeof(v->step), "%lld/%lld layers, %s / %s",
             v->layers_done, v->layers_total, done, total);
}

static void pull_view_line(struct pull_view *v, const char *line)
{
    static const struct {
        const char *prefix;
        int phase;
        const char *say;
    } steps[] = {
        {"Trying to pull", 1, "resolving"},
        {"Getting image source signatures", 1, "resolving"},
        {"Copying blob", 2, NULL},
        {"Copying config", 3, "copying its config"},
        {"Writing manifest", 4, "writing its manifest"},
        {"Storing signatures", 5, "storing"},
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        if (strncmp(line, steps[i].prefix, strlen(steps[i].prefix)) != 0)
            continue;
        if (steps[i].phase < v->phase)
            return; /* podman's steps only go forward */
        v->phase = steps[i].phase;
        if (steps[i].say != NULL)
            snprintf(v->step, sizeof(v->step), "%s", steps[i].say);
        else
            snprintf(v->step, sizeof(v->step), "copying layer %d",
                     ++v->layers);
        return;
    }
}

/* "\rPulling IMAGE [=====     ] step" within the terminal's width (a
 * wrapped line cannot be redrawn): a long image loses its start ("...")
 * before the bar or the step is cut. */
static void pull_view_draw(const struct pull_view *v, const char *image)
{
    char bar[PULL_BAR + 1], *tail, *text;
    int filled = v->phase * PULL_BAR / PULL_PHASES;

    if (v->bytes_total > 0) /* podman's figures: the layers' bytes */
        filled = v->phase > 2 ? PULL_BAR
                 : (int)(v->bytes_done * PULL_BAR / v->bytes_total);
    struct winsize ws;
    size_t cols = 80, room, len = strlen(image);

    for (int i = 0; i < PULL_BAR; i++)
        bar[i] = i < filled ? '=' : ' ';
    bar[PULL_BAR] = '\0';
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
        cols = ws.ws_col;
    tail = xasprintf(" [%s] %s", bar, v->step[0] ? v->step : "starting");
    room = cols - 1 > strlen("Pulling ") + strlen(tail)
               ? cols - 1 - strlen("Pulling ") - strlen(tail) : 0;
    if (len <= room)
        text = xasprintf("Pulling %s%s", image, tail);
    else if (room > 8)
        text = xasprintf("Pulling ...%s%s", image + len - (room - 3), tail);
    else
        text = xasprintf("Pulling%s", tail);
    if (strlen(text) >= cols)
        text[cols - 1] = '\0';
    printf("\r\033[K%s", text);
    fflush(stdout);
    free(tail);
    free(text);
}

/* A pull's layers and bytes as podman reported them (app show), when
 * acceld read them: "Layers:      1/2, 18.1 MiB / 28.6 MiB". */
static void print_pull_layers(const json_t *pull)
{
    const json_t *l = json_object_get(pull, "layers");
    const json_t *b = json_object_get(pull, "bytes");
    long long total = json_integer_value(json_object_get(b, "total"));
    char done_s[32], total_s[32];

    if (!json_is_object(l))
        return;
    printf("Layers:      %lld/%lld",
           (long long)json_integer_value(json_object_get(l, "done")),
           (long long)json_integer_value(json_object_get(l, "total")));
    if (total > 0) {
        pull_size(json_integer_value(json_object_get(b, "done")), done_s,
                  sizeof done_s);
        pull_size(total, total_s, sizeof total_s);
        printf(", %s / %s", done_s, total_s);
    }
    printf("\n");
}

/* GET the app; NULL when it is gone or acceld does not answer. */
static json_t *get_app(struct cli_ctx *ctx, const char *name)
{
    struct client_resp r;
    char *path = app_path(name, "");
    json_t *app = NULL;
    if (client_call(ctx, "GET", path, NULL, &r) == CLI_EXIT_OK)
        app = json_incref(r.data);
    client_resp_release(&r);
    free(path);
    return app;
}

static const char *pull_state(const json_t *app)
{
    return table_str(json_object_get(json_object_get(app, "container"),
                                     "pull"), "state");
}

/*
 * The answer to an install or resume whose image is being pulled
 * (container.pull.state "pulling"), on a terminal: a bar that follows the
 * pull's app.pull events (long-polled from the app's last change on),
 * then the app once it has left `resuming`. An interrupt leaves the pull
 * running in acceld. Returns the exit status (refused when the pull
 * failed).
 */
static int follow_pull(struct cli_ctx *ctx, const json_t *app)
{
    const char *name = table_str(app, "name");
    const char *image = table_str(json_object_get(app, "container"), "image");
    char *esc = client_escape(name), *why = NULL;
    long long since = 0,
              since_ms = json_integer_value(json_object_get(app, "updatedAt"));
    struct pull_view v = {0};
    json_t *last = NULL;
    int rc = CLI_EXIT_OK, tries;
    bool ended = false;

    pull_view_draw(&v, image);
    while (!ended) {
        struct client_resp r;
        size_t i;
        json_t *ev;
        char *path = since > 0
            ? xasprintf("/api/events?app=%s&kind=app.pull&since=%lld&wait=%d",
                        esc, since, PULL_WAIT_S)
            : xasprintf("/api/events?app=%s&kind=app.pull&sinceMs=%lld"
                        "&wait=%d", esc, since_ms, PULL_WAIT_S);
        rc = client_call(ctx, "GET", path, NULL, &r);
        free(path);
        if (rc != CLI_EXIT_OK) {
            fputc('\n', stdout);
            if (rc == CLI_EXIT_REFUSED)
                rc = sentence_report_ctx(ctx, &r);
            client_resp_release(&r);
            free(esc);
            return rc;
        }
        json_array_foreach(r.data, i, ev) {
            const json_t *data = json_object_get(ev, "data");
            const char *st = table_str(data, "state");
            since = json_integer_value(json_object_get(ev, "id"));
            if (strcmp(st, "pulling") == 0) {
                pull_view_line(&v, table_str(data, "progress"));
                pull_view_figures(&v, data);
            } else if (strcmp(st, "done") == 0) {
                v.phase = PULL_PHASES;
                snprintf(v.step, sizeof(v.step), "done");
                ended = true;
            } else if (strcmp(st, "failed") == 0 ||
                       strcmp(st, "cancelled") == 0) { /* a stop's */
                snprintf(v.step, sizeof(v.step), "%s", st);
                free(why);
                why = xstrdup(table_str(data, "message"));
                ended = true;
            }
            pull_view_draw(&v, image); /* each step, however fast */
        }
        if (json_array_size(r.data) == 0) {
            /* nothing new: the pull may have ended before the first
             * event this asked for, or the app gone */
            json_t *now = get_app(ctx, name);
            ended = now == NULL || strcmp(pull_state(now), "pulling") != 0;
            json_decref(now);
        }
        client_resp_release(&r);
    }
    fputc('\n', stdout);
    free(esc);
    /* the start follows the pull under acceld's lock: the app has left
     * resuming by now but for a start that waits for its turn */
    for (tries = 0; tries < PULL_SETTLE_TRIES; tries++) {
        last = get_app(ctx, name);
        if (last == NULL || strcmp(table_str(last, "state"), "resuming") != 0)
            break;
        json_decref(last);
        last = NULL;
        usleep(PULL_SETTLE_US);
    }
    if (last != NULL) {
        print_app_line(last);
        if (strcmp(pull_state(last), "failed") == 0 ||
            strcmp(pull_state(last), "cancelled") == 0)
            rc = CLI_EXIT_REFUSED;
        json_decref(last);
    } else if (why != NULL) {
        printf("%s\n", why);
        rc = CLI_EXIT_REFUSED;
    }
    free(why);
    return rc;
}

/* Send body (taken) to path through the compute dialogue (compute_send,
 * label naming the app in its questions) and print the App it answers;
 * a pull it started is followed with a bar on a terminal. */
static int send_app(struct cli_ctx *ctx, const char *path, json_t *body,
                    const char *label)
{
    struct client_resp r;
    int rc = compute_send(ctx, path, body, label, &r);
    if (rc == CLI_EXIT_OK && ctx->output != CLI_OUTPUT_JSON &&
        isatty(STDOUT_FILENO) && strcmp(pull_state(r.data), "pulling") == 0)
        rc = follow_pull(ctx, r.data);
    else if (rc == CLI_EXIT_OK)
        rc = print_app(ctx, r.data);
    client_resp_release(&r);
    json_decref(body);
    return rc;
}

int cmd_app_install(struct cli_ctx *ctx, const struct cli_args *args)
{
    json_t *manifest = NULL, *binding = NULL;
    int rc = compute_read_manifest(args->pos[0], &manifest);
    if (rc != CLI_EXIT_OK)
        return rc;
    rc = compute_bindings_from_args(args, &binding);
    if (rc != CLI_EXIT_OK) {
        json_decref(manifest);
        return rc;
    }
    const char *name = compute_manifest_name(manifest, args->pos[0]);
    char *label = xstrdup(name);
    json_t *body = json_object();
    json_object_set_new(body, "manifest", manifest);
    if (args->compute_mode != NULL)
        json_object_set_new(body, "selectedGpuType",
                            json_string(args->compute_mode));
    if (binding != NULL)
        json_object_set_new(body, "computeBinding", binding);
    if (args->owner != NULL)
        json_object_set_new(body, "owner", json_string(args->owner));
    rc = send_app(ctx, "/api/apps", body, label);
    free(label);
    return rc;
}

static void add_app_row(struct table *t, const json_t *app)
{
    char *devs = devices_of(app);
    const char *type = table_str(app, "selectedType");
    if (type[0] == '\0')
        type = table_str(json_object_get(app, "requirement"), "mode");
    const char *row[] = { table_str(app, "name"), table_str(app, "owner"),
                          shown_state(app), type, devs,
                          table_str(app, "reason") };
    table_add(t, row);
    free(devs);
}

int cmd_app_list(struct cli_ctx *ctx, const struct cli_args *args)
{
    static const char *const head[] = { "NAME", "OWNER",   "STATE",
                                        "TYPE", "DEVICES", "REASON" };
    (void)args;
    struct client_resp r;
    int rc = client_call(ctx, "GET", "/api/apps", NULL, &r);
    if (request_outcome(ctx, &rc, &r)) {
        struct table t;
        size_t i;
        json_t *app;
        table_init(&t, 6, head);
        json_array_foreach(r.data, i, app)
            add_app_row(&t, app);
        table_print(&t, stdout);
        table_release(&t);
    }
    client_resp_release(&r);
    return rc;
}

static void print_requirement(const char *label, const json_t *req)
{
    char rg[32], lg[32], rm[32], lm[32];
    table_fmt_gib(json_integer_value(json_object_get(req, "requiredGpu")), rg,
                  sizeof(rg));
    table_fmt_gib(json_integer_value(json_object_get(req, "limitedGpu")), lg,
                  sizeof(lg));
    table_fmt_gib(json_integer_value(json_object_get(req, "requiredMemory")),
                  rm, sizeof(rm));
    table_fmt_gib(json_integer_value(json_object_get(req, "limitedMemory")),
                  lm, sizeof(lm));
    double cpu =
        (double)json_integer_value(json_object_get(req, "requiredCpu")) /
        1000.0;
    printf("%-12s %s: GPU memory %s (limit %s), memory %s (limit %s), "
           "CPU %.2f Core%s%s\n", label, table_str(req, "mode"), rg, lg, rm, lm,
           cpu,
           json_is_true(json_object_get(req, "supportMultiCards"))
               ? ", multi-card" : "",
           json_is_true(json_object_get(req, "supportMultiNodes"))
               ? ", multi-node" : "");
}

static void print_allocations(const json_t *app)
{
    /* "mode" of an allocation is the GPU type (nvidia, amd, ...): TYPE,
     * as app list's column and the page say */
    static const char *const head[] = { "NODE", "DEVICE", "TYPE", "QUOTA" };
    struct table t;
    size_t i;
    json_t *a;
    if (json_array_size(json_object_get(app, "allocations")) == 0) {
        printf("Allocations: none\n");
        return;
    }
    printf("Allocations:\n");
    table_init(&t, 4, head);
    json_array_foreach(json_object_get(app, "allocations"), i, a) {
        char q[32] = "whole card";
        json_int_t mem = json_integer_value(json_object_get(a, "memory"));
        if (mem > 0)
            table_fmt_gib(mem, q, sizeof(q));
        const char *row[] = { table_str(a, "nodeName"),
                              table_str(a, "deviceId"), table_str(a, "mode"),
                              q };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
}

/*
 * How people attach their own containers to an external app (the app's
 * "attach", issue 47 item 5): the lines for each engine and compose tool,
 * then the notes (the ulimits a root without CAP_SYS_RESOURCE needs, the
 * forms tools ignore). Says first when the app refuses containers now.
 */
static void print_attach(const json_t *app)
{
    const json_t *at = json_object_get(app, "attach"), *w, *x;
    const char *name = table_str(app, "name");
    size_t i, k;

    printf("Attach your own containers to %s:\n", name);
    if (!json_is_true(json_object_get(at, "admits")))
        printf("  (refused now: %s)\n", table_str(at, "reason"));
    json_array_foreach(json_object_get(at, "ways"), i, w) {
        printf("  %s:\n", table_str(w, "tool"));
        json_array_foreach(json_object_get(w, "lines"), k, x)
            printf("      %s\n", json_string_value(x));
    }
    json_array_foreach(json_object_get(at, "notes"), i, x)
        printf("%s  - %s\n", i == 0 ? "Notes:\n" : "", json_string_value(x));
}

static void print_app_details(const json_t *app)
{
    printf("Name:        %s\n", table_str(app, "name"));
    if (table_str(app, "title")[0] != '\0')
        printf("Title:       %s\n", table_str(app, "title"));
    printf("Owner:       %s\n", table_str(app, "owner"));
    printf("State:       %s\n", shown_state(app));
    if (table_str(app, "reason")[0] != '\0')
        printf("Reason:      %s\n", table_str(app, "reason"));
    printf("External:    %s\n",
           json_is_true(json_object_get(app, "external")) ? "yes" : "no");
    if (table_str(app, "selectedType")[0] != '\0')
        printf("Type:        %s\n", table_str(app, "selectedType"));
    size_t i;
    json_t *req;
    json_array_foreach(json_object_get(app, "requirements"), i, req)
        print_requirement(i == 0 ? "Requirements:" : "", req);
    const json_t *usage = json_object_get(app, "usage");
    if (json_is_object(usage)) {
        char u[32];
        table_fmt_gib(json_integer_value(json_object_get(usage, "memory")), u,
                      sizeof(u));
        printf("GPU memory in use: %s\n", u);
    }
    const json_t *ctr = json_object_get(app, "container");
    if (json_is_object(ctr)) {
        printf("Image:       %s (pull %s)\n", table_str(ctr, "image"),
               table_str(ctr, "pullPolicy"));
        printf("Container:   %s (%s)\n", table_str(ctr, "name"),
               table_str(ctr, "state"));
        if (json_is_string(json_object_get(ctr, "digest")))
            printf("Pinned:      %s (ID %.12s)\n", table_str(ctr, "digest"),
                   table_str(ctr, "imageId"));
        const json_t *pull = json_object_get(ctr, "pull");
        if (json_is_object(pull)) {
            const char *say = table_str(pull, "message");
            if (say[0] == '\0' || strcmp(say, "-") == 0)
                say = table_str(pull, "progress");
            printf("Pull:        %s%s%s\n", table_str(pull, "state"),
                   say[0] ? ": " : "", say);
            print_pull_layers(pull);
        }
    }
    print_allocations(app);
    if (json_is_object(json_object_get(app, "attach"))) {
        printf("\n");
        print_attach(app);
    }
}

static void show_app(const json_t *data, const void *arg)
{
    (void)arg;
    print_app_details(data);
}

/* attach-help's printer: the lines, or why there are none. */
static void show_attach(const json_t *data, const void *arg)
{
    (void)arg;
    if (json_is_object(json_object_get(data, "attach")))
        print_attach(data);
    else
        printf("%s runs its own %s, started by acceld: people's own "
               "containers attach to an external app (one installed "
               "without run:), docs/containers.md section 5\n",
               table_str(data, "name"),
               strcmp(table_str(data, "runner"), "container") == 0
                   ? "container" : "process");
}

int cmd_app_attach_help(struct cli_ctx *ctx, const struct cli_args *args)
{
    char *path = app_path(args->pos[0], "");
    int rc = request_report(ctx, "GET", path, NULL, show_attach, NULL);
    free(path);
    return rc;
}

int cmd_app_show(struct cli_ctx *ctx, const struct cli_args *args)
{
    char *path = app_path(args->pos[0], "");
    int rc = request_report(ctx, "GET", path, NULL, show_app, NULL);
    free(path);
    return rc;
}

#define LOGS_POLL_US 500000 /* --follow asks for more so often */

/*
 * accelctl app logs NAME [-f]: the app's log (GET /api/apps/NAME/logs, in
 * chunks from offset 0), then with --follow what it writes next, until
 * interrupted or the app is uninstalled.
 */
int cmd_app_logs(struct cli_ctx *ctx, const struct cli_args *args)
{
    long long off = 0;
    for (;;) {
        char *base = app_path(args->pos[0], "/logs"), *path;
        struct client_resp r;
        int rc;
        size_t n;
        const char *text;
        char *shown;
        path = xasprintf("%s?offset=%lld", base, off);
        ctx->raw_text = true; /* escaped below, its lines kept */
        rc = client_call(ctx, "GET", path, NULL, &r);
        ctx->raw_text = false;
        free(path);
        free(base);
        if (rc == CLI_EXIT_REFUSED) {
            client_escape_controls(r.body);
            rc = sentence_report_ctx(ctx, &r);
        }
        if (rc != CLI_EXIT_OK) {
            client_resp_release(&r);
            return rc;
        }
        text = json_string_value(json_object_get(r.data, "text"));
        n = json_string_length(json_object_get(r.data, "text"));
        /* an app's output reaches a terminal: no control byte of it but
         * its newlines and tabs (issue 39) */
        shown = text != NULL ? util_ctrl_escape_text(text, n) : NULL;
        if (shown != NULL)
            fputs(shown, stdout);
        else if (text != NULL)
            fwrite(text, 1, n, stdout);
        free(shown);
        fflush(stdout);
        off = json_integer_value(json_object_get(r.data, "offset"));
        client_resp_release(&r);
        if (n == 0 && !args->follow)
            return CLI_EXIT_OK;
        if (n == 0)
            usleep(LOGS_POLL_US);
    }
}

int cmd_app_resume(struct cli_ctx *ctx, const struct cli_args *args)
{
    json_t *binding = NULL;
    int rc = compute_bindings_from_args(args, &binding);
    if (rc != CLI_EXIT_OK)
        return rc;
    json_t *body = json_object();
    if (binding != NULL)
        json_object_set_new(body, "computeBinding", binding);
    char *path = app_path(args->pos[0], "/resume");
    rc = send_app(ctx, path, body, args->pos[0]);
    free(path);
    return rc;
}

/* Send method to /api/apps/NAME<suffix>; print "before NAME after". */
struct done_line {
    const char *before, *name, *after; /* "before NAME after" */
};

static void print_done(const json_t *data, const void *arg)
{
    const struct done_line *l = arg;
    const char *st = json_string_value(json_object_get(data, "state"));

    /* a stop answers before the processes are gone (SPEC 5.6) */
    if (st && (strcmp(st, "stopping") == 0 || strcmp(st, "releasing") == 0)) {
        printf("App %s is %s: its processes are being stopped; its GPU "
               "resources are released once they are gone.\n", l->name, st);
        return;
    }
    printf("%s %s%s\n", l->before, l->name, l->after);
}

static int simple_app_call(struct cli_ctx *ctx, const char *method,
                           const char *name, const char *suffix,
                           const char *before, const char *after)
{
    struct done_line line = {before, name, after};
    char *path = app_path(name, suffix);
    json_t *body = strcmp(method, "POST") == 0 ? json_object() : NULL;
    int rc = request_report(ctx, method, path, body, print_done, &line);
    json_decref(body);
    free(path);
    return rc;
}

int cmd_app_stop(struct cli_ctx *ctx, const struct cli_args *args)
{
    return simple_app_call(ctx, "POST", args->pos[0], "/suspend",
                           "Stopped app", "; its GPU resources were released.");
}

int cmd_app_uninstall(struct cli_ctx *ctx, const struct cli_args *args)
{
    return simple_app_call(ctx, "DELETE", args->pos[0], "",
                           "Uninstalled app", ".");
}
