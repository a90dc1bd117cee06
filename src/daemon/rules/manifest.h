/* SPDX-License-Identifier: MIT */
/*
 * manifest.h: the app manifest of SPEC 1.1 (JSON, or YAML with the same
 * fields) turned into requirements and a run spec, with messages that name
 * the field and the rule. Pure: no I/O.
 */
#ifndef ACCEL_DAEMON_RULES_MANIFEST_H
#define ACCEL_DAEMON_RULES_MANIFEST_H

#include <jansson.h>
#include <stdbool.h>

#include "accel/accel.h"
#include "daemon/rules/admission.h"

#define MANIFEST_MAX_ENTRIES ACCEL_TYPE_COUNT

struct manifest_run {
    char **argv;          /* NULL-terminated command, NULL when external */
    char **env;           /* NULL-terminated "KEY=VALUE" list */
    char *workdir;        /* or NULL (= the owner's private home) */
    char *user;           /* run.user: a user name or uid, admin-only;
                             NULL = the owner's own uid (SPEC 3) */
    char **preload;       /* run.preload: absolute paths of libraries
                             preloaded after the shim, NULL-terminated
                             (empty list when absent) */
    int stop_timeout_s;   /* stopTimeoutSeconds, default 10 */
};

struct manifest {
    char *name;                   /* metadata.name */
    char *title;                  /* metadata.title or the name */
    bool shared;                  /* v3 + options.shared: owner "shared" */
    size_t nreq;                  /* entries of spec.accelerator */
    struct adm_req *req;          /* [nreq], owned (allocated to size:
                                     20,000 apps make it count) */
    struct manifest_run run;      /* argv NULL = external app */
};

/*
 * Parse and validate a manifest object. On success fills *m (release with
 * manifest_release) and returns ACCEL_OK; otherwise returns ACCEL_EINVAL and
 * *cause gets an allocated sentence such as
 * "spec.accelerator[0].limitedGPUMemory (4Gi) must be >= requiredGPUMemory (8Gi)".
 */
enum accel_err manifest_parse(const json_t *root, struct manifest *m,
                              char **cause);
void manifest_release(struct manifest *m);
/*
 * A new manifest's texts (metadata.title, metadata.description; the
 * Markdown spec.fullDescription and spec.upgradeDescription but for lines
 * and tabs) have no control character: ACCEL_OK, or ACCEL_EINVAL with
 * *cause naming the field. Checked at install only, not by manifest_parse,
 * so that an app stored before the rule still loads.
 */
enum accel_err manifest_check_texts(const json_t *root, char **cause);

/*
 * Is KEY one of the variables that carry enforcement and that acceld alone
 * sets (SPEC 3, 8.2): CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES,
 * LD_PRELOAD, or any ACCEL_*? key may be "KEY" or "KEY=VALUE".
 */
bool manifest_env_reserved(const char *key);

/*
 * The install-time rules of SPEC 3 that depend on who installs (pure, no
 * I/O). A manifest that sets a reserved variable in run.env is ACCEL_EINVAL
 * (400): "run.env.CUDA_VISIBLE_DEVICES is set by accel and cannot be set
 * in a manifest". For a member (admin false): run.user is ACCEL_EFORBIDDEN
 * (403) and so is a run.workdir outside `home` (the owner's private home,
 * <data-dir>/home/<owner>), each with a sentence naming the field. Returns
 * ACCEL_OK or that code with *cause allocated.
 */
enum accel_err manifest_check_install(const struct manifest *m, bool admin,
                                      const char *home, char **cause);

/* The requirement for a type, or NULL when the manifest has none. */
const struct adm_req *manifest_req(const struct manifest *m,
                                   enum accel_type t);

/* A requirement as the API shows it (SPEC 5, Requirement). New reference. */
json_t *manifest_req_json(const struct adm_req *r);

#endif /* ACCEL_DAEMON_RULES_MANIFEST_H */
