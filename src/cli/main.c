/* SPDX-License-Identifier: MIT */
/*
 * main.c: accelctl's entry point. It parses the options (global ones and
 * those of the command, anywhere on the line), finds the command in the
 * table, checks its arity and options once (STYLE 14), works out where
 * acceld is and which token to send, and runs the handler. Handlers live in
 * cmd_*.c; the HTTP details in client.c.
 */
#include "common/accel_setup.h"
#include "cli/cli.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/config.h"
#include "common/util.h"

#define DEFAULT_SERVER "http://127.0.0.1:7390"
#define DEFAULT_DATA_DIR "./accel-data"
#define TOKEN_FILE_MAX 4096 /* bytes read from admin.token */

static const struct accel_cli_cmd commands[] = {
    { .name = "list", .usage = "", .min_args = 0, .max_args = 0,
      .summary = "nodes and devices: model, VRAM, mode, allocated, free, apps",
      .handler = cmd_cluster_list },
    { .name = "set-type", .usage = "NODE DEVICE --type "
      "Exclusive|MemorySlice|TimeSlice [--yes]", .min_args = 2,
      .max_args = 2, .flags = ACCEL_CLI_OPT_TYPE | ACCEL_CLI_OPT_YES,
      .summary = "switch a device's sharing mode (stops the apps on it)",
      .handler = cmd_cluster_set_type },
    { .name = "set-timeslice", .usage = "NODE DEVICE [--quantum MS] "
      "[--idle MS | --idle-us US] [--oversubscribed-quantum MS] [--grace MS]",
      .min_args = 2,
      .max_args = 2, .flags = ACCEL_CLI_OPT_TIMESLICE,
      .summary = "a TimeSlice device's turn length, idle release and "
                 "revocation grace",
      .handler = cmd_timeslice_set },
    { .name = "set-meter", .usage = "NODE DEVICE [--over-quota report|stop] "
      "[--tolerance SIZE]", .min_args = 2, .max_args = 2,
      .flags = ACCEL_CLI_OPT_METER,
      .summary = "what the outside meter does with an app over its VRAM "
                 "quota on an NVIDIA device, and how far over is tolerated",
      .handler = cmd_meter_set },
    { .name = "set-elastic", .usage = "NODE DEVICE [--overcommit RATIO] "
      "[--reclaim-wait MS]", .min_args = 2, .max_args = 2,
      .flags = ACCEL_CLI_OPT_ELASTIC,
      .summary = "elastic memory on a MemorySlice device: how far its "
                 "quotas may sum past its memory (1 = off, at most 4) and "
                 "how long a short allocation waits for a reclaim",
      .handler = cmd_elastic_set },
    { .name = "timeslice", .usage = "NODE DEVICE", .min_args = 2,
      .max_args = 2,
      .summary = "a TimeSlice device: holder, queue, turns and waits per "
      "app, handoff p50/p99, settings",
      .handler = cmd_timeslice_show },
    { .name = "app install", .usage = "FILE [--compute-mode TYPE] "
      "[--compute-binding NODE:DEVICE[:MEM]]... [--owner NAME]",
      .min_args = 1, .max_args = 1,
      .flags = ACCEL_CLI_OPT_MODE | ACCEL_CLI_OPT_BINDING | ACCEL_CLI_OPT_OWNER,
      .summary = "install an app from a JSON or YAML manifest ('-' = stdin)",
      .handler = cmd_app_install },
    { .name = "app list", .usage = "", .min_args = 0, .max_args = 0,
      .summary = "apps with state, owner, type and devices",
      .handler = cmd_app_list },
    { .name = "app show", .usage = "NAME", .min_args = 1, .max_args = 1,
      .summary = "one app: requirements, allocations, usage",
      .handler = cmd_app_show },
    { .name = "app attach-help", .usage = "NAME", .min_args = 1,
      .max_args = 1,
      .summary = "the lines that attach your own containers to an external "
      "app: podman, Docker (CDI or --runtime accel), each compose tool",
      .handler = cmd_app_attach_help },
    { .name = "app logs", .usage = "NAME [--follow]", .min_args = 1,
      .max_args = 1, .flags = ACCEL_CLI_OPT_FOLLOW,
      .summary = "an app's output (-f, --follow: keep printing what it "
      "writes)",
      .handler = cmd_app_logs },
    { .name = "app resume", .usage = "NAME "
      "[--compute-binding NODE:DEVICE[:MEM]]...", .min_args = 1,
      .max_args = 1, .flags = ACCEL_CLI_OPT_BINDING,
      .summary = "start an app again (MEM: 8 = 8 Gi, or 8Gi / 512Mi)",
      .handler = cmd_app_resume },
    { .name = "app stop", .usage = "NAME", .min_args = 1, .max_args = 1,
      .summary = "stop an app and release its GPUs",
      .handler = cmd_app_stop },
    { .name = "app set-quota", .usage = "APP DEVICE SIZE", .min_args = 3,
      .max_args = 3,
      .summary = "change a bound app's VRAM quota on a Memory slicing GPU "
      "(SIZE: 8 = 8 Gi, or 8Gi / 512Mi; a raise must fit)",
      .handler = cmd_quota_set },
    { .name = "app uninstall", .usage = "NAME", .min_args = 1, .max_args = 1,
      .summary = "stop, release and delete an app",
      .handler = cmd_app_uninstall },
    { .name = "unbind", .usage = "NAME [--yes]", .min_args = 1, .max_args = 1,
      .flags = ACCEL_CLI_OPT_YES,
      .summary = "remove an app from all its GPUs (stops it)",
      .handler = cmd_cluster_unbind },
    { .name = "preflight", .usage = "FILE... [--compute-mode TYPE] "
      "[--owner NAME]", .min_args = 1, .max_args = CLI_MAX_POS,
      .flags = ACCEL_CLI_OPT_MODE | ACCEL_CLI_OPT_OWNER,
      .summary = "would these manifests install, in this order?",
      .handler = cmd_misc_preflight },
    { .name = "gpu status", .usage = "", .min_args = 0, .max_args = 0,
      .summary = "NVML/driver state and this node's devices: mode, health, "
      "presence, foreign processes, enforcement",
      .handler = cmd_gpu_status },
    { .name = "gpu enable", .usage = "[NODE]", .min_args = 0, .max_args = 1,
      .summary = "put a node's accelerators back into scheduling",
      .handler = cmd_cluster_gpu_enable },
    { .name = "gpu disable", .usage = "[NODE]", .min_args = 0, .max_args = 1,
      .summary = "take a node's accelerators out of scheduling",
      .handler = cmd_cluster_gpu_disable },
    { .name = "node remove", .usage = "NODE [--force]", .min_args = 1,
      .max_args = 1, .flags = ACCEL_CLI_OPT_FORCE,
      .summary = "forget a cluster node that will not return (admin; "
      "--force stops the apps bound there)",
      .handler = cmd_cluster_node_remove },
    { .name = "user add", .usage = "NAME [--admin]", .min_args = 1,
      .max_args = 1, .flags = ACCEL_CLI_OPT_ADMIN,
      .summary = "create a user; prints the token once",
      .handler = cmd_misc_user_add },
    { .name = "user list", .usage = "", .min_args = 0, .max_args = 0,
      .summary = "users and roles", .handler = cmd_misc_user_list },
    { .name = "user remove", .usage = "NAME [--force]", .min_args = 1,
      .max_args = 1, .flags = ACCEL_CLI_OPT_FORCE,
      .summary = "delete a user, their token and uid (refused while they "
      "own apps; --force stops and uninstalls those)",
      .handler = cmd_misc_user_remove },
    { .name = "settings", .usage = "", .min_args = 0, .max_args = 0,
      .summary = "acceld's settings: the local images members may run",
      .handler = cmd_misc_settings },
    { .name = "set-member-images", .usage = "[NAME|PATTERN]...",
      .min_args = 0, .max_args = CLI_MAX_POS,
      .summary = "the local images members may run without pulling them "
                 "(admin; '*' any characters; none: only their own pulls)",
      .handler = cmd_misc_set_member_images },
    { .name = "user set-limits", .usage = "NAME [--max-apps N|default] "
      "[--max-gpu-memory QUANTITY|none]", .min_args = 1, .max_args = 1,
      .flags = ACCEL_CLI_OPT_LIMITS,
      .summary = "how many apps and how much GPU memory a member may hold",
      .handler = cmd_misc_user_limits },
    { .name = "cdi-hook", .usage = "[--record DIR [--instance ID]] "
      "CGROUP-DIR... | --stopped APP", .min_args = 0, .max_args = 8,
      .flags = ACCEL_CLI_OPT_HOOK,
      .summary = "the OCI createContainer hook of accel's CDI devices (run "
      "by the container runtime): the container into the app's cgroups, "
      "its engine and ID recorded in DIR (acceld stops it through its "
      "engine); --instance: refused when the container joined another "
      "install of the app's name; --stopped: refused, the app is stopped",
      .handler = cmd_hook_cdi },
    { .name = "events", .usage = "[--since ID] [--app NAME] [--limit N] "
      "[--follow]", .min_args = 0, .max_args = 0,
      .flags = ACCEL_CLI_OPT_SINCE | ACCEL_CLI_OPT_FOLLOW,
      .summary = "state changes and refusals recorded by acceld (--follow: "
      "and new ones as they happen)",
      .handler = cmd_misc_events },
    { .name = "gpu install", .usage = "[--yes]", .min_args = 0,
      .max_args = 0, .flags = ACCEL_CLI_OPT_YES,
      .summary = "this machine: show, then install the NVIDIA driver and NVML "
      "packages for the GPUs lspci sees (root, admin)",
      .handler = cmd_gpu_pkg_install },
    { .name = "gpu uninstall", .usage = "[--yes]", .min_args = 0,
      .max_args = 0, .flags = ACCEL_CLI_OPT_YES,
      .summary = "this machine: show, then remove those packages (root, "
      "admin)",
      .handler = cmd_gpu_pkg_uninstall },
    { .name = "login", .usage = "URL [--token T]", .min_args = 1,
      .max_args = 1,
      .summary = "check URL and the token (--token, else read from stdin) "
      "and save both in ~/.config/accel/config",
      .handler = cmd_login },
    { .name = "open", .usage = "", .min_args = 0, .max_args = 0,
      .summary = "print the web page's link, with #token= to log in",
      .handler = cmd_login_open },
    { .name = "dashboard", .usage = "gpu list|tasks|get UUID", .min_args = 2,
      .max_args = 3,
      .summary = "the HAMi-compatible dashboard view: GPUs, their tasks, "
      "one GPU",
      .handler = cmd_dashboard },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/* Option ids (what apply_option does). */
enum opt_id {
    OPT_SERVER, OPT_TOKEN, OPT_DATA_DIR, OPT_OUTPUT, OPT_HELP, OPT_YES,
    OPT_TYPE, OPT_MODE, OPT_BINDING, OPT_ADMIN, OPT_SINCE, OPT_LIMIT,
    OPT_APP, OPT_OWNER, OPT_FOLLOW, OPT_QUANTUM, OPT_IDLE, OPT_IDLE_US,
    OPT_OVERSUB, OPT_GRACE, OPT_MAX_APPS, OPT_MAX_GPU_MEMORY, OPT_FORCE,
    OPT_RECORD, OPT_STOPPED, OPT_INSTANCE,
    OPT_VERSION, OPT_OVER_QUOTA, OPT_TOLERANCE, OPT_OVERCOMMIT,
    OPT_RECLAIM_WAIT,
};

/* One option of the command line. */
struct opt {
    const char *name; /* "--server" */
    char shortname;   /* 'o', or 0 */
    bool value;       /* takes a value */
    unsigned flag;    /* ACCEL_CLI_OPT_* it needs; 0 = global */
    enum opt_id id;   /* what it sets */
};

static const struct opt options[] = {
    { "--server", 0, true, 0, OPT_SERVER },
    { "--token", 0, true, 0, OPT_TOKEN },
    { "--data-dir", 0, true, 0, OPT_DATA_DIR },
    { "--output", 'o', true, 0, OPT_OUTPUT },
    { "--help", 'h', false, 0, OPT_HELP },
    { "--version", 0, false, 0, OPT_VERSION },
    { "--yes", 'y', false, ACCEL_CLI_OPT_YES, OPT_YES },
    { "--type", 0, true, ACCEL_CLI_OPT_TYPE, OPT_TYPE },
    { "--compute-mode", 0, true, ACCEL_CLI_OPT_MODE, OPT_MODE },
    { "--compute-binding", 0, true, ACCEL_CLI_OPT_BINDING, OPT_BINDING },
    { "--admin", 0, false, ACCEL_CLI_OPT_ADMIN, OPT_ADMIN },
    { "--force", 0, false, ACCEL_CLI_OPT_FORCE, OPT_FORCE },
    { "--since", 0, true, ACCEL_CLI_OPT_SINCE, OPT_SINCE },
    { "--limit", 0, true, ACCEL_CLI_OPT_SINCE, OPT_LIMIT },
    { "--app", 0, true, ACCEL_CLI_OPT_SINCE, OPT_APP },
    { "--owner", 0, true, ACCEL_CLI_OPT_OWNER, OPT_OWNER },
    { "--follow", 'f', false, ACCEL_CLI_OPT_FOLLOW, OPT_FOLLOW },
    { "--quantum", 0, true, ACCEL_CLI_OPT_TIMESLICE, OPT_QUANTUM },
    { "--idle", 0, true, ACCEL_CLI_OPT_TIMESLICE, OPT_IDLE },
    { "--idle-us", 0, true, ACCEL_CLI_OPT_TIMESLICE, OPT_IDLE_US },
    { "--oversubscribed-quantum", 0, true, ACCEL_CLI_OPT_TIMESLICE,
      OPT_OVERSUB },
    { "--grace", 0, true, ACCEL_CLI_OPT_TIMESLICE, OPT_GRACE },
    { "--over-quota", 0, true, ACCEL_CLI_OPT_METER, OPT_OVER_QUOTA },
    { "--tolerance", 0, true, ACCEL_CLI_OPT_METER, OPT_TOLERANCE },
    { "--overcommit", 0, true, ACCEL_CLI_OPT_ELASTIC, OPT_OVERCOMMIT },
    { "--reclaim-wait", 0, true, ACCEL_CLI_OPT_ELASTIC, OPT_RECLAIM_WAIT },
    { "--max-apps", 0, true, ACCEL_CLI_OPT_LIMITS, OPT_MAX_APPS },
    { "--max-gpu-memory", 0, true, ACCEL_CLI_OPT_LIMITS, OPT_MAX_GPU_MEMORY },
    { "--record", 0, true, ACCEL_CLI_OPT_HOOK, OPT_RECORD },
    { "--stopped", 0, true, ACCEL_CLI_OPT_HOOK, OPT_STOPPED },
    { "--instance", 0, true, ACCEL_CLI_OPT_HOOK, OPT_INSTANCE },
};

/* Everything on the command line. */
struct cmdline {
    const char *words[CLI_MAX_POS + 2]; /* command words and positionals */
    int nwords;                         /* how many */
    const char *server;                 /* --server */
    const char *token;                  /* --token */
    const char *data_dir;               /* --data-dir */
    const char *output;                 /* -o */
    bool help;                          /* -h */
    bool version;                       /* --version */
    struct cli_args args;               /* command options */
};

static void usage(FILE *f)
{
    fprintf(f, "usage: accelctl [--server URL] [--token T] [--data-dir DIR] "
            "[-o table|json] COMMAND\n       accelctl --version\n\n"
            "commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %s%s%s\n      %s\n", commands[i].name,
                commands[i].usage[0] ? " " : "", commands[i].usage,
                commands[i].summary);
    fprintf(f, "\nserver: --server, $ACCEL_SERVER, the saved login's, else "
            "%s\n"
            "token: --token, $ACCEL_TOKEN, DATA-DIR/admin.token when "
            "--data-dir or $ACCEL_DATA_DIR is given, the saved login's (for "
            "its server only), else %s/admin.token\n"
            "saved login: $XDG_CONFIG_HOME/accel/config, else "
            "~/.config/accel/config (accelctl login)\n"
            "exit: 0 done, 1 refused, 2 usage, 3 acceld unreachable\n",
            DEFAULT_SERVER, DEFAULT_DATA_DIR);
}

static int apply_option(struct cmdline *cl, enum opt_id id, const char *v)
{
    struct cli_args *a = &cl->args;
    switch (id) {
    case OPT_SERVER: cl->server = v; break;
    case OPT_TOKEN: cl->token = v; break;
    case OPT_DATA_DIR: cl->data_dir = v; break;
    case OPT_OUTPUT: cl->output = v; break;
    case OPT_HELP: cl->help = true; break;
    case OPT_VERSION: cl->version = true; break;
    case OPT_YES: a->yes = true; break;
    case OPT_TYPE: a->type = v; break;
    case OPT_MODE: a->compute_mode = v; break;
    case OPT_ADMIN: a->admin = true; break;
    case OPT_FORCE: a->force = true; break;
    case OPT_SINCE: a->since = v; break;
    case OPT_LIMIT: a->limit = v; break;
    case OPT_APP: a->app = v; break;
    case OPT_OWNER: a->owner = v; break;
    case OPT_FOLLOW: a->follow = true; break;
    case OPT_QUANTUM: a->quantum = v; break;
    case OPT_IDLE: a->idle = v; break;
    case OPT_IDLE_US: a->idle_us = v; break;
    case OPT_OVERSUB: a->oversub_quantum = v; break;
    case OPT_GRACE: a->grace = v; break;
    case OPT_OVER_QUOTA: a->over_quota = v; break;
    case OPT_TOLERANCE: a->tolerance = v; break;
    case OPT_OVERCOMMIT: a->overcommit = v; break;
    case OPT_RECLAIM_WAIT: a->reclaim_wait = v; break;
    case OPT_MAX_APPS: a->max_apps = v; break;
    case OPT_MAX_GPU_MEMORY: a->max_gpu_memory = v; break;
    case OPT_RECORD: a->record = v; break;
    case OPT_STOPPED: a->stopped = v; break;
    case OPT_INSTANCE: a->instance = v; break;
    case OPT_BINDING:
        if (a->nbindings >= CLI_MAX_BINDINGS) {
            fprintf(stderr, "accelctl: at most %d --compute-binding\n",
                    CLI_MAX_BINDINGS);
            return CLI_EXIT_USAGE;
        }
        a->bindings[a->nbindings++] = v;
        break;
    }
    return CLI_EXIT_OK;
}

static const struct opt *find_option(const char *arg, size_t len)
{
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
        const struct opt *o = &options[i];
        if (len == 2 && arg[0] == '-' && arg[1] == o->shortname &&
            o->shortname != 0)
            return o;
        if (strlen(o->name) == len && strncmp(o->name, arg, len) == 0)
            return o;
    }
    return NULL;
}

/* Parse argv[*i] (an option) and maybe its value; advances *i. */
static int parse_option(struct cmdline *cl, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    size_t len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
    const struct opt *o = find_option(arg, len);
    if (o == NULL) {
        fprintf(stderr, "accelctl: unknown option %s\n", arg);
        return CLI_EXIT_USAGE;
    }
    const char *v = NULL;
    if (o->value && eq != NULL) {
        v = eq + 1;
    } else if (o->value) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "accelctl: %s needs a value\n", o->name);
            return CLI_EXIT_USAGE;
        }
        v = argv[++*i];
    } else if (eq != NULL) {
        fprintf(stderr, "accelctl: %s takes no value\n", o->name);
        return CLI_EXIT_USAGE;
    }
    cl->args.seen |= o->flag;
    return apply_option(cl, o->id, v);
}

static int parse_cmdline(struct cmdline *cl, int argc, char **argv)
{
    bool opts = true;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (opts && strcmp(arg, "--") == 0) {
            opts = false;
        } else if (opts && arg[0] == '-' && arg[1] != '\0') {
            int rc = parse_option(cl, argc, argv, &i);
            if (rc != CLI_EXIT_OK)
                return rc;
        } else if (cl->nwords < CLI_MAX_POS + 2) {
            cl->words[cl->nwords++] = arg;
        } else {
            fprintf(stderr, "accelctl: too many arguments\n");
            return CLI_EXIT_USAGE;
        }
    }
    return CLI_EXIT_OK;
}

/* How many of words the command's name takes, or 0 if it does not match. */
static int match_command(const struct accel_cli_cmd *c,
                         const char *const *words, int n)
{
    const char *sp = strchr(c->name, ' ');
    if (sp == NULL)
        return n >= 1 && strcmp(c->name, words[0]) == 0 ? 1 : 0;
    size_t l = (size_t)(sp - c->name);
    if (n >= 2 && strlen(words[0]) == l && strncmp(c->name, words[0], l) == 0
        && strcmp(sp + 1, words[1]) == 0)
        return 2;
    return 0;
}

static const struct accel_cli_cmd *find_command(const struct cmdline *cl,
                                                int *used)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        *used = match_command(&commands[i], cl->words, cl->nwords);
        if (*used > 0)
            return &commands[i];
    }
    return NULL;
}

/* Arity and options of the command, checked once for every handler. */
static int check_command(const struct accel_cli_cmd *c, struct cmdline *cl,
                         int used)
{
    int n = cl->nwords - used;
    if (n < c->min_args || n > c->max_args) {
        fprintf(stderr, "usage: accelctl %s %s\n", c->name, c->usage);
        return CLI_EXIT_USAGE;
    }
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
        unsigned f = options[i].flag;
        if (f != 0 && (cl->args.seen & f) && !(c->flags & f)) {
            fprintf(stderr, "accelctl %s: %s is not an option of this "
                    "command\nusage: accelctl %s %s\n", c->name,
                    options[i].name, c->name, c->usage);
            return CLI_EXIT_USAGE;
        }
    }
    for (int i = 0; i < n; i++)
        cl->args.pos[i] = cl->words[used + i];
    cl->args.npos = n;
    return CLI_EXIT_OK;
}

/* Read the first line of path (at most TOKEN_FILE_MAX bytes), trimmed. */
static char *read_token_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    char buf[TOKEN_FILE_MAX];
    char *line = fgets(buf, sizeof(buf), f);
    fclose(f);
    if (line == NULL)
        return NULL;
    buf[strcspn(buf, "\r\n \t")] = '\0';
    return buf[0] != '\0' ? xstrdup(buf) : NULL;
}

/* "http://" added when no scheme is given, no trailing '/'. */
static char *normalize_server(const char *s)
{
    char *url = strstr(s, "://") != NULL ? xstrdup(s)
                                         : xasprintf("http://%s", s);
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        url[--n] = '\0';
    return url;
}

/*
 * The token: --token, $ACCEL_TOKEN, the admin.token of an explicit
 * --data-dir/$ACCEL_DATA_DIR, the saved login's when server is the saved
 * server (a saved token is never sent elsewhere), else ./accel-data's.
 */
static char *find_token(const struct cmdline *cl, const char *server,
                        const struct cli_config *saved)
{
    if (cl->token != NULL)
        return xstrdup(cl->token);
    const char *env = getenv("ACCEL_TOKEN");
    if (env != NULL && env[0] != '\0')
        return xstrdup(env);
    const char *dir = cl->data_dir;
    if (dir == NULL)
        dir = getenv("ACCEL_DATA_DIR");
    if ((dir == NULL || dir[0] == '\0') && saved->token != NULL &&
        saved->server != NULL) {
        char *s = normalize_server(saved->server);
        bool same = strcmp(s, server) == 0;
        free(s);
        if (same)
            return xstrdup(saved->token);
    }
    if (dir == NULL || dir[0] == '\0')
        dir = DEFAULT_DATA_DIR;
    char *path = xasprintf("%s/admin.token", dir);
    char *tok = read_token_file(path);
    free(path);
    return tok;
}

/* The base URL: --server, $ACCEL_SERVER, the saved login's, the default. */
static char *find_server(const struct cmdline *cl,
                         const struct cli_config *saved)
{
    const char *s = cl->server;
    if (s == NULL)
        s = getenv("ACCEL_SERVER");
    if (s == NULL || s[0] == '\0')
        s = saved->server;
    if (s == NULL || s[0] == '\0')
        s = DEFAULT_SERVER;
    return normalize_server(s);
}

/* login URL: the server is URL; the token --token, else one line of
 * stdin (asked for on a terminal, not echoed by accelctl). */
static int login_ctx(const struct cmdline *cl, struct cli_ctx *ctx)
{
    char buf[TOKEN_FILE_MAX];
    ctx->server = normalize_server(cl->args.pos[0]);
    if (cl->token != NULL) {
        ctx->token = xstrdup(cl->token);
        return CLI_EXIT_OK;
    }
    if (isatty(0))
        fprintf(stderr, "Token for %s: ", ctx->server);
    if (fgets(buf, sizeof buf, stdin) == NULL)
        buf[0] = '\0';
    buf[strcspn(buf, "\r\n \t")] = '\0';
    if (buf[0] == '\0') {
        fprintf(stderr, "accelctl login: no token (give --token T or type "
                "it on stdin)\n");
        return CLI_EXIT_USAGE;
    }
    ctx->token = xstrdup(buf);
    return CLI_EXIT_OK;
}

static int setup_ctx(const struct cmdline *cl, struct cli_ctx *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
    if (cl->output == NULL || strcmp(cl->output, "table") == 0) {
        ctx->output = CLI_OUTPUT_TABLE;
    } else if (strcmp(cl->output, "json") == 0) {
        ctx->output = CLI_OUTPUT_JSON;
    } else {
        fprintf(stderr, "accelctl: -o %s: expected table or json\n",
                cl->output);
        return CLI_EXIT_USAGE;
    }
    ctx->interactive = isatty(0) && isatty(1);
    return CLI_EXIT_OK;
}

static int run(struct cmdline *cl)
{
    int used = 0;
    if (cl->version) {
        printf("accelctl %s\n", ACCEL_VERSION);
        return CLI_EXIT_OK;
    }
    if (cl->nwords == 0 || strcmp(cl->words[0], "help") == 0 || cl->help) {
        usage(cl->nwords == 0 && !cl->help ? stderr : stdout);
        return cl->nwords == 0 && !cl->help ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    const struct accel_cli_cmd *c = find_command(cl, &used);
    if (c == NULL) {
        fprintf(stderr, "accelctl: unknown command \"%s%s%s\" (accelctl "
                "help lists them)\n", cl->words[0], cl->nwords > 1 ? " " : "",
                cl->nwords > 1 ? cl->words[1] : "");
        return CLI_EXIT_USAGE;
    }
    int rc = check_command(c, cl, used);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (c->handler == cmd_hook_cdi) /* a container runtime's hook: no acceld */
        return c->handler(NULL, &cl->args);
    struct cli_ctx ctx;
    struct cli_config saved;
    char *server = NULL;
    rc = setup_ctx(cl, &ctx);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (c->handler == cmd_login) {
        rc = login_ctx(cl, &ctx);
        server = (char *)ctx.server;
    } else if (config_load(&saved) != 0) {
        rc = CLI_EXIT_USAGE;
    } else {
        server = find_server(cl, &saved);
        ctx.server = server;
        ctx.token = find_token(cl, server, &saved);
        config_release(&saved);
    }
    if (rc == CLI_EXIT_OK)
        rc = c->handler(&ctx, &cl->args);
    free(server);
    free(ctx.token);
    return rc;
}

int main(int argc, char **argv)
{
    struct cmdline cl;
    memset(&cl, 0, sizeof(cl));
    int rc = parse_cmdline(&cl, argc, argv);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "accelctl: cannot initialize libcurl\n");
        return CLI_EXIT_CONNECT;
    }
    rc = run(&cl);
    fflush(stdout);
    curl_global_cleanup();
    return rc;
}
