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
#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"
#include "daemon/rules/admission.h"

#define MANIFEST_MAX_ENTRIES ACCEL_TYPE_COUNT

/* run.volumes[i] of a container app (SPEC 8.2.1). */
struct manifest_volume {
    char *source;         /* host path: absolute, or relative to the
                             owner's home (resolved when it runs) */
    char *target;         /* absolute path in the container */
    bool read_only;       /* readOnly */
};

/* What run.image adds (SPEC 8.2.1); image NULL = a host command. */
struct manifest_container {
    char *image;          /* run.image: a reference (manifest_image_ref) */
    char *pull;           /* run.pull: "missing" (default), "always", "never" */
    char **entrypoint;    /* run.entrypoint, or NULL (the image's) */
    char **ports;         /* run.ports as "ip:host:container/proto",
                             NULL-terminated (empty when absent) */
    struct manifest_volume *volumes; /* run.volumes [nvolumes] */
    size_t nvolumes;
    uint64_t shm_size;    /* run.shmSize bytes, 0 = podman's default */
    bool privileged;      /* run.privileged (admin only) */
    char *network;        /* run.network: NULL (podman's), "none", "host"
                             (admin only) */
    bool host_pid;        /* run.pid: "host" (admin only) */
    char **cap_add;       /* run.capAdd (admin only), NULL-terminated
                             (empty when absent) */
};

struct manifest_run {
    char **argv;          /* NULL-terminated command, NULL when external
                             (or, with an image, the image's CMD) */
    char **env;           /* NULL-terminated "KEY=VALUE" list */
    char *workdir;        /* or NULL (= the owner's private home) */
    char *user;           /* run.user: a user name or uid, admin-only;
                             NULL = the owner's own uid (SPEC 3) */
    char **preload;       /* run.preload: absolute paths of libraries
                             preloaded after the shim, NULL-terminated
                             (empty list when absent) */
    int stop_timeout_s;   /* stopTimeoutSeconds, default 10 */
    struct manifest_container ctr; /* run.image and what goes with it */
};

/* How an entry's app gives memory back (SPEC 4.4, manifest_reclaim.c). */
enum manifest_reclaim_kind {
    MANIFEST_RECLAIM_NONE = 0, /* never asked: all it holds counts as held */
    MANIFEST_RECLAIM_PRESET,   /* the app's own routes, by name */
    MANIFEST_RECLAIM_HTTP,     /* one request to 127.0.0.1:port */
    MANIFEST_RECLAIM_SIGNAL,   /* a signal to the app's processes */
};

enum manifest_preset {
    MANIFEST_PRESET_OLLAMA = 0, /* GET /api/ps; POST /api/generate
                                   {model, keep_alive: 0} each (11434) */
    MANIFEST_PRESET_VLLM,       /* POST /sleep?level=1; /wake_up (8000) */
    MANIFEST_PRESET_COMFYUI,    /* POST /free {unload_models, free_memory}
                                   (8188) */
    MANIFEST_PRESET_LLAMA_SERVER, /* router mode: GET /models; POST
                                   /models/unload {model} each (8080) */
};

struct manifest_reclaim {
    enum manifest_reclaim_kind kind;
    enum manifest_preset preset; /* kind PRESET */
    uint16_t port;        /* PRESET, HTTP: on 127.0.0.1 */
    char method[8];       /* HTTP: GET, POST, PUT, DELETE */
    char *path;           /* HTTP: "/free" */
    char *body;           /* HTTP: sent as it is, or NULL */
    int signal;           /* SIGNAL: SIGUSR1, SIGUSR2, SIGHUP */
    bool or_stop;         /* orStop: stopped when the action frees too
                             little in time */
    int priority;         /* spec.accelerator[].priority, default 0 */
};

struct manifest {
    char *name;                   /* metadata.name */
    char *title;                  /* metadata.title or the name */
    bool shared;                  /* v3 + options.shared: owner "shared" */
    size_t nreq;                  /* entries of spec.accelerator */
    struct adm_req *req;          /* [nreq], owned (allocated to size:
                                     20,000 apps make it count) */
    struct manifest_run run;      /* argv NULL = external app */
    struct manifest_reclaim *reclaim; /* [nreq] reclaim and priority by
                                     entry; NULL when no entry says either */
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

/* manifest_reclaim.c (SPEC 4.4). An entry's reclaim and priority into *r
 * (kind NONE and priority 0 when absent); ACCEL_EINVAL with *cause naming
 * the field otherwise. */
enum accel_err manifest_reclaim_parse(const json_t *entry, size_t idx,
                                      struct manifest_reclaim *r,
                                      char **cause);
void manifest_reclaim_release(struct manifest_reclaim *r);
/* Who may install it: an HTTP action needs an app acceld runs; a
 * member's reaches only its own app (a port its container publishes, or
 * from 1024 up: a host command's is checked against the listener when
 * called). ACCEL_OK, or ACCEL_EINVAL / ACCEL_EFORBIDDEN with *cause. */
enum accel_err manifest_reclaim_check(const struct manifest *m, bool admin,
                                      char **cause);
/* The reclaim of an entry, for its app's JSON (null for NONE). */
/*
 * Does the run.ports entry `spec` ("ip:host:container/proto", as parsed)
 * publish host port `port` where acceld's call to 127.0.0.1:port lands:
 * TCP on 127.0.0.1 or 0.0.0.0? One on [::1] (or another address) is not:
 * the call would reach whatever else listens on 127.0.0.1:port.
 */
bool manifest_port_reached(const char *spec, unsigned port);

json_t *manifest_reclaim_json(const struct manifest_reclaim *r);
const char *manifest_preset_name(enum manifest_preset p);
const char *manifest_signal_name(int sig);
/* The reclaim of m's entry of type t, or NULL when it has none. */
const struct manifest_reclaim *manifest_reclaim_of(const struct manifest *m,
                                                   enum accel_type t);

/* Does acceld start the app (a command or an image), or is it external? */
bool manifest_runs(const struct manifest *m);

/* manifest_container.c: the container fields of run (SPEC 8.2.1). */
/* Is k a field of run that only a container app has? */
bool manifest_container_key(const char *k);
/* Parse run's container fields into r (run.image present); ACCEL_EINVAL
 * with *cause naming the field otherwise. */
enum accel_err manifest_container_parse(const json_t *run,
                                        struct manifest_run *r, char **cause);
void manifest_container_release(struct manifest_container *c);
/* Does ref parse as an image reference: [host[:port]/]path[:tag][@digest],
 * path components lower case ([a-z0-9] separated by '.', '_', "__" or
 * '-'), a tag [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}, a digest
 * sha256:<64 hex>? At most 255 bytes. */
bool manifest_image_ref(const char *ref);

/* Does run.image name an image archive on this machine
 * (oci-archive:/path or docker-archive:/path: an absolute path of
 * letters, digits and . _ - + /, no "..", at most 255 characters)?
 * acceld loads it (podman pull) at install; admin-only. */
bool manifest_image_archive(const char *ref);
/* The member rules of a container (SPEC 8.2.1): ports on loopback from
 * 1024, volumes inside home, no privileged, host network or pid, added
 * capabilities. ACCEL_OK for an admin or a host command; else
 * ACCEL_EFORBIDDEN with *cause naming the field and the rule. */
enum accel_err manifest_container_check(const struct manifest *m, bool admin,
                                        const char *home, char **cause);
#define MEMBER_IMAGES_MAX 256 /* patterns in the memberImages setting */

/* The memberImages setting (SPEC 8.2.1: the local images an admin lets
 * members run without pulling): a list of at most MEMBER_IMAGES_MAX image
 * names or patterns ('*' any characters, '/' and ':' included; one with no
 * tag matches every tag). ACCEL_OK, or ACCEL_EINVAL with *cause naming
 * memberImages[i]. */
enum accel_err manifest_member_images_check(const json_t *v, char **cause);

/* The first pattern of patterns (a checked memberImages) that one of
 * names (an image's names as podman lists them, host/path:tag) matches,
 * or NULL: an image's names, never a member's reference, are matched. */
const char *manifest_member_image_allowed(const json_t *patterns,
                                          const json_t *names);

/* A non-empty list of at most 256 non-empty strings at path (for the
 * messages), NULL-terminated, or NULL with *cause; and its release. */
char **manifest_strings(const json_t *arr, const char *path, char **cause);
void manifest_strings_free(char **l);
/* Is path home or below it, with no "." or ".." component? */
bool manifest_inside_home(const char *path, const char *home);

/* The requirement for a type, or NULL when the manifest has none. */
const struct adm_req *manifest_req(const struct manifest *m,
                                   enum accel_type t);

/* A requirement as the API shows it (SPEC 5, Requirement). New reference. */
json_t *manifest_req_json(const struct adm_req *r);

#endif /* ACCEL_DAEMON_RULES_MANIFEST_H */
