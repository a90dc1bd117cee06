/* SPDX-License-Identifier: MIT */
/*
 * image.c: the images of container apps (image.h, SPEC 8.2.1): looked
 * for and pulled through podman, pinned per app, removed with their last
 * app.
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/log.h"
#include "daemon/node/runtime/podman.h"

/* ---- the image an app runs, pinned ---- */

/*
 * The pins image_pin found, kept while podman's image store is as it was
 * (its images.json: the same inode, size and modification time; every
 * pull, tag, untag or removal rewrites it): an install of an image found
 * before asks no podman, whose start costs as much as a container's
 * (issue 47 item 8). A table of the process, as pull.c's pulls, because
 * image_pin is called where no daemon is at hand (runner.h's vet); the
 * store's path is asked of podman once.
 */
static struct {
    pthread_mutex_t lock;
    bool looked;        /* the store's path asked of podman */
    char *store;        /* <graphroot>/<driver>-images/images.json, or NULL */
    struct stat st;     /* the store file as the pins were found */
    json_t *pins;       /* ref -> its pin (owned) */
} pin_cache = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The store file's path, asked of podman the first time (lock held). */
static const char *cache_store(void)
{
    char out[1024];
    char *argv[] = { "podman", "info", "--format",
                     "{{.Store.GraphRoot}}/{{.Store.GraphDriverName}}"
                     "-images/images.json", NULL };

    if (!pin_cache.looked &&
        podman_call(argv, out, sizeof out, PODMAN_WAIT_MS) == 0 &&
        out[0] == '/')
        pin_cache.store = xstrdup(out);
    pin_cache.looked = true;
    return pin_cache.store;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev &&
           a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The store file now (*st); false when it cannot be read (no cache).
 * A store that changed since the pins were found drops them (lock held). */
static bool cache_look(struct stat *st)
{
    const char *store = cache_store();

    if (store == NULL || stat(store, st) != 0)
        return false;
    if (pin_cache.pins != NULL && !same_file(st, &pin_cache.st)) {
        json_decref(pin_cache.pins);
        pin_cache.pins = NULL;
    }
    return true;
}

/* A copy of ref's pin found with the store as it is now, or NULL. */
static json_t *cache_get(const char *ref, struct stat *st, bool *usable)
{
    json_t *pin = NULL;

    pthread_mutex_lock(&pin_cache.lock);
    *usable = cache_look(st);
    if (*usable && pin_cache.pins != NULL)
        pin = json_deep_copy(json_object_get(pin_cache.pins, ref));
    pthread_mutex_unlock(&pin_cache.lock);
    return pin;
}

/* Keep ref's pin, found with the store as st was before podman looked:
 * a store that changed meanwhile differs from st at the next look. */
static void cache_put(const char *ref, const json_t *pin,
                      const struct stat *st)
{
    pthread_mutex_lock(&pin_cache.lock);
    if (pin_cache.pins == NULL || !same_file(st, &pin_cache.st)) {
        json_decref(pin_cache.pins);
        pin_cache.pins = json_object();
        pin_cache.st = *st;
    }
    json_object_set_new(pin_cache.pins, ref, json_deep_copy(pin));
    pthread_mutex_unlock(&pin_cache.lock);
}

#define INSPECT_MAX 65536u
#define IDS_MAX (1u << 20) /* podman images -q: 72 bytes an image */

/* The image's own LD_PRELOAD in its configured environment (a JSON array
 * of "KEY=value"), or NULL. */
static const char *image_preload(const json_t *env)
{
    const char *v = NULL;
    size_t i;
    json_t *e;

    json_array_foreach(env, i, e)
        if (json_is_string(e) &&
            strncmp(json_string_value(e), "LD_PRELOAD=", 11) == 0)
            v = json_string_value(e) + 11; /* the last one wins */
    return v != NULL && v[0] ? v : NULL;
}

/* Does a failed podman image inspect say the image is not here (its
 * words in podman 4 and 5)? Then podman image exists says so for sure. */
static bool inspect_not_known(const char *out)
{
    return strstr(out, "image not known") != NULL ||
           strstr(out, "no such image") != NULL;
}

static enum accel_err pin_ask(const char *ref, json_t **pin, char **cause);

enum accel_err image_pin(const char *ref, json_t **pin, char **cause)
{
    struct stat st;
    bool usable;
    enum accel_err rc;

    *pin = cache_get(ref, &st, &usable);
    if (*pin != NULL) {
        log_debug("image %s: pinned as before (podman's store unchanged)",
                  ref);
        return ACCEL_OK;
    }
    log_debug("image %s: asked of podman", ref);
    rc = pin_ask(ref, pin, cause);
    if (rc == ACCEL_OK && usable)
        cache_put(ref, *pin, &st);
    return rc;
}

/* image_pin through podman. */
static enum accel_err pin_ask(const char *ref, json_t **pin, char **cause)
{
    char *exists[] = { "podman", "image", "exists", (char *)ref, NULL };
    char *inspect[] = { "podman",
                        "image",
                        "inspect",
                        "--format",
                        "{{.Id}} {{.Digest}} {{json .RepoTags}} "
                        "{{json .Config.Env}}",
                        (char *)ref,
                        NULL };
    char *out = xmalloc(INSPECT_MAX), *digest, *names_text, *env_text;
    char *save = NULL;
    const char *which = "inspect"; /* the podman command that answered */
    json_t *env = NULL, *names = NULL;
    /* one podman, not an exists and then an inspect: each costs a
     * podman's start on an install's way to running (issue 47 item 8) */
    int rc = podman_call(inspect, out, INSPECT_MAX, PODMAN_WAIT_MS);

    *pin = NULL;
    if (rc != 0 && inspect_not_known(out)) {
        which = "exists";
        rc = podman_call(exists, NULL, 0, PODMAN_WAIT_MS);
    }
    if (rc == 1) {
        free(out);
        return ACCEL_ENOTFOUND;
    }
    if (rc == 0) {
        char *id = strtok_r(out, " ", &save);
        digest = strtok_r(NULL, " ", &save);
        names_text = strtok_r(NULL, " ", &save);
        env_text = strtok_r(NULL, "", &save);
        if (env_text != NULL)
            env = json_loads(env_text, 0, NULL);
        if (names_text != NULL)
            names = json_loads(names_text, 0, NULL);
        if (id != NULL && digest != NULL && strlen(id) == 64) {
            const char *pre = image_preload(env);
            *pin = json_pack("{s:s, s:s, s:s}", "ref", ref, "id", id,
                             "digest", digest);
            if (pre != NULL)
                json_object_set_new(*pin, "preload", json_string(pre));
            json_object_set_new(*pin, "names", json_is_array(names)
                                                   ? json_incref(names)
                                                   : json_array());
        }
        json_decref(env);
        json_decref(names);
    }
    if (*pin != NULL) {
        free(out);
        return ACCEL_OK;
    }
    *cause = xasprintf("run.image: podman could not tell whether \"%s\" is "
                       "on this machine (podman image %s: %s); a container "
                       "app needs podman (docs/containers.md)",
                       ref, which, rc < 0 ? "did not run" : out[0] ? out : "failed");
    free(out);
    return ACCEL_ESYS;
}

static bool says_any(const char *line, const char *const *words)
{
    for (; *words != NULL; words++)
        if (strstr(line, *words) != NULL)
            return true;
    return false;
}

/* A failed pull's sentence: podman's last line sorted into its cause
 * (SPEC 8.2.1), the line kept after it. */
static char *pull_cause(const char *ref, const char *last)
{
    static const char *const full[] = { "no space left on device",
                                        "disk quota exceeded", NULL };
    static const char *const net[] = { "connection refused",
                                       "no such host",
                                       "network is unreachable",
                                       "no route to host",
                                       "i/o timeout",
                                       "TLS handshake timeout",
                                       "connection reset",
                                       "server misbehaving",
                                       "Temporary failure in name resolution",
                                       NULL };
    static const char *const gone[] = {
        "manifest unknown", "name unknown", "not found",
        "no such file or directory", "repository does not exist",
        "requested access to the resource is denied", NULL};
    const char *why = NULL;

    if (last[0] == '\0')
        return xasprintf("pulling %s failed: podman did not run", ref);
    if (says_any(last, full))
        why = "the disk is full (no space left for the image)";
    else if (says_any(last, net))
        why = "the registry cannot be reached (no network, or the registry "
              "is down or refuses connections)";
    else if (says_any(last, gone))
        why = manifest_image_archive(ref)
                  ? "no such image (no such archive on this machine)"
                  : "no such image (the registry has no such name or tag, "
                    "or refuses it to an anonymous pull)";
    if (why == NULL)
        return xasprintf("pulling %s failed: %s", ref, last);
    return xasprintf("pulling %s failed: %s: %s", ref, why, last);
}

int image_archive_stat(const char *ref, struct stat *st)
{
    const char *path = strchr(ref, ':');
    char *p, *colon;
    int err = ENOENT;

    if (!manifest_image_archive(ref) || path == NULL)
        return EINVAL;
    p = xstrdup(path + 1);
    colon = strrchr(p, ':');
    if (stat(p, st) == 0) {
        err = 0;
    } else {
        err = errno;
        if (colon != NULL) { /* oci-archive:/path:name */
            *colon = '\0';
            err = stat(p, st) == 0 ? 0 : err;
        }
    }
    free(p);
    return err;
}

/* The IDs of every image on the machine (podman images -q --no-trunc),
 * or NULL when podman could not tell (then nothing pulled is acceld's to
 * remove). Caller frees. */
static char *ids_here(void)
{
    char *argv[] = {"podman", "images", "--all", "--quiet", "--no-trunc",
                    NULL};
    char *out = xmalloc(IDS_MAX);

    if (podman_call(argv, out, IDS_MAX, PODMAN_WAIT_MS) != 0 ||
        strlen(out) + 1 >= IDS_MAX) {
        free(out);
        return NULL;
    }
    return out;
}

enum accel_err image_pull(const char *ref,
                          void (*line)(void *ctx, const char *line), void *ctx,
                          struct podman_watch *watch, json_t **pin,
                          char **cause)
{
    char *argv[] = {"podman", "pull", (char *)ref, NULL};
    struct podman_lines *l;
    enum accel_err rc = ACCEL_ESYS;
    struct stat st;
    char *before;
    int err;

    *pin = NULL;
    /* an archive that is not there is said without podman, whose pull of
     * one leaves its temporary directory in /var/tmp (podman 4.3) */
    if (manifest_image_archive(ref) &&
        (err = image_archive_stat(ref, &st)) != 0) {
        char *last = xasprintf("%s: %s (acceld looked before asking "
                               "podman)", strchr(ref, ':') + 1,
                               err == ENOENT ? "no such file or directory"
                                             : strerror(err));
        *cause = pull_cause(ref, last);
        free(last);
        return ACCEL_ENOTFOUND;
    }
    before = ids_here();
    l = xcalloc(1, sizeof(*l));
    l->line = line;
    l->ctx = ctx;
    l->watch = watch;
    if (podman_lines(argv, NULL, 0, PODMAN_PULL_MS, l) != 0) {
        if (watch != NULL && watch->cancelled) {
            *cause = xasprintf("pulling %s was cancelled", ref);
            rc = ACCEL_EBUSY;
        } else if (watch != NULL && watch->stalled) {
            *cause = xasprintf("pulling %s failed: no progress for %u s "
                               "(podman wrote no line and read less than "
                               "%u KiB: the registry does not answer; "
                               "ACCEL_PULL_STALL_SECONDS)%s%s",
                               ref, watch->stall_ms / 1000,
                               PODMAN_WATCH_MIN_READ / 1024,
                               l->last[0] ? ": " : "", l->last);
        } else {
            *cause = pull_cause(ref, l->last);
        }
    } else { /* its last line is the image's ID */
        rc = image_pin(l->last, pin, cause);
        if (rc == ACCEL_OK) {
            const char *id = json_string_value(json_object_get(*pin, "id"));
            json_object_set_new(*pin, "ref", json_string(ref));
            /* acceld's to remove only when the pull brought it */
            json_object_set_new(*pin, "pulled",
                                 json_boolean(before != NULL &&
                                              strstr(before, id) == NULL));
        }
    }
    free(before);
    free(l);
    return rc;
}

static char *pin_path(const struct accel_daemon *d, const char *app)
{
    return xasprintf("%s/images/%s.json", d->cfg.data_dir, app);
}

static const json_t *pin_of(const struct accel_daemon *d, struct app *a);

/* Did acceld's own pull or load bring image id for another app still
 * here (lock held)? Then it is as much acceld's for this one, whose pull
 * found it here: it goes with the last app pinned to it. */
static bool brought_for_another(const struct accel_daemon *d,
                                const struct app *self, const char *id)
{
    for (size_t i = 0; id != NULL && i < d->napps; i++) {
        const json_t *p;
        if (d->apps[i] == self || d->apps[i]->m.run.ctr.image == NULL)
            continue;
        p = pin_of(d, d->apps[i]);
        if (json_is_true(json_object_get(p, "pulled")) &&
            json_string_value(json_object_get(p, "id")) != NULL &&
            strcmp(json_string_value(json_object_get(p, "id")), id) == 0)
            return true;
    }
    return false;
}

void image_pin_set(struct accel_daemon *d, struct app *a, json_t *pin)
{
    char *dir = xasprintf("%s/images", d->cfg.data_dir);
    char *path = pin_path(d, a->name), *tmp = xasprintf("%s.tmp", path);

    json_decref(a->image_pin);
    a->image_pin = pin != NULL ? pin : json_object();
    if (pin != NULL) /* whether acceld may remove it with its last app */
        json_object_set_new(pin, "pull", json_string(a->m.run.ctr.pull));
    if (pin != NULL && !json_is_true(json_object_get(pin, "pulled")) &&
        brought_for_another(d, a, json_string_value(json_object_get(pin,
                                                                    "id"))))
        json_object_set_new(pin, "pulled", json_true());
    if (pin == NULL) {
        if (unlink(path) != 0 && errno != ENOENT)
            log_warn("cannot remove %s: %s", path, strerror(errno));
    } else if ((mkdir(dir, 0700) != 0 && errno != EEXIST) ||
               json_dump_file(pin, tmp, JSON_COMPACT) != 0 ||
               rename(tmp, path) != 0) {
        log_warn("app %s: cannot keep its image's ID in %s (%s): a start "
                 "after acceld's restart runs %s by its reference", a->name,
                 path, strerror(errno), a->m.run.ctr.image);
        unlink(tmp);
    }
    free(tmp);
    free(path);
    free(dir);
}

/* a's pin (lock held): read from its file the first time; {} when there
 * is none or it pins another reference than the manifest's. */
static const json_t *pin_of(const struct accel_daemon *d, struct app *a)
{
    if (a->image_pin == NULL) {
        char *path = pin_path(d, a->name);
        json_t *p = json_load_file(path, 0, NULL);
        const char *ref = json_string_value(json_object_get(p, "ref"));
        if (ref == NULL || a->m.run.ctr.image == NULL ||
            strcmp(ref, a->m.run.ctr.image) != 0 ||
            !json_is_string(json_object_get(p, "id"))) {
            json_decref(p);
            p = json_object();
        }
        a->image_pin = p;
        free(path);
    }
    return a->image_pin;
}

const char *image_pin_field(const struct accel_daemon *d, struct app *a,
                            const char *key)
{
    return json_string_value(json_object_get(pin_of(d, a), key));
}

bool image_pin_pulled(const struct accel_daemon *d, struct app *a)
{
    return json_is_true(json_object_get(pin_of(d, a), "pulled"));
}

const char *image_pinned_id(const struct accel_daemon *d, struct app *a)
{
    return image_pin_field(d, a, "id");
}

/* The images of the container apps seen last (a NULL-terminated list of
 * references acceld pulls: pull missing or always). Only the supervisor
 * thread uses it. */
static char **images_seen;

static bool listed(char **list, const char *ref)
{
    for (char **p = list; p && *p; p++)
        if (strcmp(*p, ref) == 0)
            return true;
    return false;
}

/* The image of a pin whose app is gone, when acceld pulled for it (pull
 * missing or always) and no app uses its reference (all): removed while
 * the reference still names the pinned image (not one tagged since), by a
 * child not waited for (one a container of someone else's uses stays).
 * An archive's image, which acceld loaded, goes by its ID when no app is
 * pinned to that ID (ids; an image tagged more than once stays). The
 * pin's file goes in any case. */
static void pin_gone(const char *path, char **all, char **ids)
{
    json_t *pin = json_load_file(path, 0, NULL);
    const char *ref = json_string_value(json_object_get(pin, "ref"));
    const char *id = json_string_value(json_object_get(pin, "id"));
    const char *pull = json_string_value(json_object_get(pin, "pull"));
    bool archive = ref != NULL && manifest_image_archive(ref);
    /* only what acceld's own pull or load brought, and no app pins */
    bool ours = json_is_true(json_object_get(pin, "pulled")) && id != NULL &&
                !listed(ids, id);

    if (ours && archive && !listed(all, ref)) {
        char *rmi[] = {"podman", "rmi", "--ignore", (char *)id, NULL};
        log_info("removing image %.12s, loaded from %s: no app uses it any "
                 "more", id, ref);
        podman_detached(rmi);
    } else if (ours && ref != NULL && pull != NULL &&
               strcmp(pull, "never") != 0 && !listed(all, ref) && !archive) {
        char *inspect[] = {"podman", "image", "inspect", "--format",
                           "{{.Id}}", (char *)ref, NULL};
        char *rmi[] = {"podman", "rmi", "--ignore", (char *)ref, NULL};
        pid_t pid;
        log_info("removing image %s (if it is still %.12s): no app uses it "
                 "any more", ref, id);
        pid = fork();
        if (pid == 0) { /* no malloc here: acceld has threads */
            if (fork() == 0) {
                char now[128];
                _exit(podman_call(inspect, now, sizeof now, PODMAN_WAIT_MS) ==
                                  0 &&
                              strcmp(now, id) == 0
                          ? podman_call(rmi, NULL, 0, PODMAN_WAIT_MS)
                          : 0);
            }
            _exit(0);
        }
        if (pid > 0)
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
    }
    json_decref(pin);
    if (unlink(path) != 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", path, strerror(errno));
}

/* The pins of apps that are gone (pin_gone). */
static void pins_gone(struct accel_daemon *d, char **all, char **ids)
{
    char *dir = xasprintf("%s/images", d->cfg.data_dir);
    DIR *dp = opendir(dir);
    struct dirent *e;

    while (dp != NULL && (e = readdir(dp)) != NULL) {
        char *dot = strrchr(e->d_name, '.'), *name, *path;
        bool gone;
        if (dot == NULL || strcmp(dot, ".json") != 0)
            continue;
        name = xasprintf("%.*s", (int)(dot - e->d_name), e->d_name);
        pthread_mutex_lock(&d->lock);
        gone = state_app_find(d, name) == NULL;
        pthread_mutex_unlock(&d->lock);
        path = xasprintf("%s/%s", dir, e->d_name);
        if (gone)
            pin_gone(path, all, ids);
        free(path);
        free(name);
    }
    if (dp != NULL)
        closedir(dp);
    free(dir);
}

void image_sweep_unused(struct accel_daemon *d)
{
    char **now, **all, **ids;
    size_t n = 0, na = 0, ni = 0;

    pthread_mutex_lock(&d->lock);
    now = xcalloc(d->napps + 1, sizeof(char *));
    all = xcalloc(d->napps + 1, sizeof(char *));
    ids = xcalloc(d->napps + 1, sizeof(char *));
    for (size_t i = 0; i < d->napps; i++) {
        struct app *a = d->apps[i];
        const struct manifest_container *c = &a->m.run.ctr;
        if (c->image == NULL)
            continue;
        if (!listed(all, c->image))
            all[na++] = xstrdup(c->image);
        if (image_pin_field(d, a, "id") != NULL &&
            !listed(ids, image_pin_field(d, a, "id")))
            ids[ni++] = xstrdup(image_pin_field(d, a, "id"));
        /* a pinned image goes with its pin (pins_gone) */
        if (strcmp(c->pull, "never") != 0 && !listed(now, c->image) &&
            image_pin_field(d, a, "id") == NULL)
            now[n++] = xstrdup(c->image);
    }
    pthread_mutex_unlock(&d->lock);
    for (char **p = images_seen; p && *p; p++) {
        if (!listed(all, *p)) { /* its last app is gone: so is the image */
            char *argv[] = {"podman", "rmi", "--ignore", *p, NULL};
            log_info("removing image %s: no app uses it any more", *p);
            podman_detached(argv);
        }
        free(*p);
    }
    free(images_seen);
    images_seen = now;
    pins_gone(d, all, ids);
    for (char **p = all; *p; p++)
        free(*p);
    free(all);
    for (char **p = ids; *p; p++)
        free(*p);
    free(ids);
}
