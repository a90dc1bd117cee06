/* SPDX-License-Identifier: MIT */
/*
 * cli.h: what the files of accelctl share: the invocation context, the
 * parsed arguments of one command, the command table entry, the exit codes
 * and the command handlers. Only src/cli/ includes it; accelctl uses nothing
 * of the daemon (STYLE 1), only include/accel/ and src/common/.
 */
#ifndef ACCEL_CLI_CLI_H
#define ACCEL_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>

/* Exit statuses of accelctl. */
enum cli_exit {
    CLI_EXIT_OK = 0,      /* the request succeeded */
    CLI_EXIT_REFUSED = 1, /* acceld refused or failed the request */
    CLI_EXIT_USAGE = 2,   /* bad command line or unreadable input file */
    CLI_EXIT_CONNECT = 3, /* acceld could not be reached */
};

/* Output formats (-o). */
enum cli_output {
    CLI_OUTPUT_TABLE = 0, /* human-readable tables and sentences */
    CLI_OUTPUT_JSON = 1,  /* the API's data, as JSON */
};

/* Options a command accepts (struct accel_cli_cmd.flags). */
#define ACCEL_CLI_OPT_YES (1u << 0)     /* --yes: do not ask */
#define ACCEL_CLI_OPT_TYPE (1u << 1)    /* --type SUPPORTTYPE */
#define ACCEL_CLI_OPT_MODE (1u << 2)    /* --compute-mode TYPE */
#define ACCEL_CLI_OPT_BINDING (1u << 3) /* --compute-binding N:D[:M], repeated */
#define ACCEL_CLI_OPT_ADMIN (1u << 4)   /* --admin */
#define ACCEL_CLI_OPT_SINCE (1u << 5)   /* --since ID, --limit N, --app NAME */
#define ACCEL_CLI_OPT_OWNER (1u << 6)   /* --owner NAME */
#define ACCEL_CLI_OPT_FOLLOW (1u << 7)  /* --follow: keep printing new events */
#define ACCEL_CLI_OPT_TIMESLICE (1u << 8) /* --quantum, --idle, --oversubscribed-quantum MS */
#define ACCEL_CLI_OPT_LIMITS (1u << 9)  /* --max-apps N|default, --max-gpu-memory Q|none */
#define ACCEL_CLI_OPT_FORCE (1u << 10)  /* --force */
#define ACCEL_CLI_OPT_METER (1u << 11)  /* --over-quota report|stop, --tolerance Q */
#define ACCEL_CLI_OPT_HOOK (1u << 12)   /* cdi-hook: --record DIR, --stopped APP, --instance ID */
#define ACCEL_CLI_OPT_ELASTIC (1u << 13) /* --overcommit R, --reclaim-wait MS */

#define CLI_MAX_POS 64      /* positional arguments per command */
#define CLI_MAX_BINDINGS 64 /* --compute-binding options per command */

/* How accelctl was invoked: where acceld is and how to talk to it. */
struct cli_ctx {
    const char *server;     /* base URL, no trailing slash */
    char *token;            /* bearer token or NULL (owned) */
    enum cli_output output; /* -o */
    bool interactive;       /* stdin and stdout are terminals */
    bool raw_text;          /* the command escapes the answer itself
                             * (app logs: its lines kept, util.h) */
};

/* The arguments of one command, after the generic option parser. */
struct cli_args {
    const char *pos[CLI_MAX_POS];           /* positional args after the name */
    int npos;                               /* how many */
    unsigned seen;                          /* ACCEL_CLI_OPT_* given */
    bool yes;                               /* --yes */
    bool admin;                             /* --admin */
    bool force;                             /* --force */
    const char *type;                       /* --type */
    const char *compute_mode;               /* --compute-mode */
    const char *owner;                      /* --owner */
    const char *since;                      /* --since */
    const char *limit;                      /* --limit */
    const char *app;                        /* --app */
    bool follow;                            /* --follow */
    const char *quantum;                    /* --quantum MS */
    const char *idle;                       /* --idle MS */
    const char *idle_us;                    /* --idle-us US */
    const char *oversub_quantum;            /* --oversubscribed-quantum MS */
    const char *grace;                      /* --grace MS (revocation) */
    const char *max_apps;                   /* --max-apps N|default */
    const char *max_gpu_memory;             /* --max-gpu-memory Q|none */
    const char *over_quota;                 /* --over-quota report|stop */
    const char *tolerance;                  /* --tolerance Q */
    const char *record;                     /* --record DIR (cdi-hook) */
    const char *stopped;                    /* --stopped APP (cdi-hook) */
    const char *instance;                   /* --instance ID (cdi-hook) */
    const char *overcommit;                 /* --overcommit RATIO */
    const char *reclaim_wait;               /* --reclaim-wait MS */
    const char *bindings[CLI_MAX_BINDINGS]; /* --compute-binding values */
    int nbindings;                          /* how many */
};

/* A command handler: returns an enum cli_exit value. */
typedef int (*accel_cli_handler)(struct cli_ctx *ctx,
                                 const struct cli_args *args);

/* One entry of the command table (main.c). */
struct accel_cli_cmd {
    const char *name;          /* "list", "app install" (one or two words) */
    const char *usage;         /* arguments and options, for help */
    const char *summary;       /* one line: what it does */
    int min_args;              /* positional arguments after the name */
    int max_args;              /* ditto, upper bound */
    unsigned flags;            /* ACCEL_CLI_OPT_* accepted */
    accel_cli_handler handler; /* runs the command */
};

/* cmd_cluster.c: nodes, devices and modes. */
int cmd_cluster_list(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_cluster_set_type(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_cluster_unbind(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_cluster_gpu_enable(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_cluster_gpu_disable(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_cluster_node_remove(struct cli_ctx *ctx, const struct cli_args *args);

/* cmd_gpu.c: the node's accelerators as acceld sees them. */
int cmd_gpu_status(struct cli_ctx *ctx, const struct cli_args *args);

/* cmd_app.c: the app lifecycle. */
int cmd_app_install(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_app_list(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_app_show(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_app_attach_help(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_app_logs(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_app_resume(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_app_stop(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_app_uninstall(struct cli_ctx *ctx, const struct cli_args *args);
/* cmd_quota.c */
int cmd_quota_set(struct cli_ctx *ctx, const struct cli_args *args);

/* cmd_misc.c: preflight, users, events. */
int cmd_misc_preflight(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_misc_user_add(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_misc_user_list(struct cli_ctx *ctx, const struct cli_args *args);
/* `accelctl settings`: acceld's settings (GET /api/settings); `accelctl
 * set-member-images [NAME|PATTERN]...`: memberImages (admin; none clears
 * it). */
int cmd_misc_settings(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_misc_set_member_images(struct cli_ctx *ctx,
                               const struct cli_args *args);
int cmd_misc_user_remove(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_misc_user_limits(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_misc_events(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_hook_cdi(struct cli_ctx *ctx, const struct cli_args *args);

/* cmd_dashboard.c: the HAMi-compatible view (dashboard gpu list|tasks|get). */
int cmd_dashboard(struct cli_ctx *ctx, const struct cli_args *args);

/* cmd_gpu_pkg.c: gpu install / gpu uninstall (NVIDIA driver packages). */
int cmd_gpu_pkg_install(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_gpu_pkg_uninstall(struct cli_ctx *ctx, const struct cli_args *args);

/* cmd_login.c: login URL (check and save the server and token) and open
 * (the web page's link with #token=). */
int cmd_login(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_login_open(struct cli_ctx *ctx, const struct cli_args *args);

/* cmd_timeslice.c: time-slice settings and state of a device. */
int cmd_timeslice_set(struct cli_ctx *ctx, const struct cli_args *args);
int cmd_timeslice_show(struct cli_ctx *ctx, const struct cli_args *args);
/* The outside meter's settings of a device (PUT .../devices/{d}/meter). */
int cmd_meter_set(struct cli_ctx *ctx, const struct cli_args *args);
/* Elastic memory of a device (PUT .../devices/{d}/elastic; SPEC 4.4). */
int cmd_elastic_set(struct cli_ctx *ctx, const struct cli_args *args);

#endif /* ACCEL_CLI_CLI_H */
