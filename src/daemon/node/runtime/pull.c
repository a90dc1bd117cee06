/* SPDX-License-Identifier: MIT */
/*
 * pull.c: a container app's image pulled as a job (pull.h, SPEC 8.2.1).
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/pull.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/lifecycle.h"
#include "daemon/log.h"
#include "daemon/node/proc/disk.h"
#include "daemon/node/runtime/image.h"
#include "daemon/node/runtime/podman.h"
#include "daemon/node/runtime/runtime.h"
#include "daemon/rules/manifest.h"

/* Must a's image be pulled before a start here (lock held)? An image app
 * with no pin on this node (an app installed in a cluster, or whose pin
 * file went) whose image acceld may pull (pull missing or always, or an
 * archive). A pull: never image stays podman run's to find. */
static bool pull_needed(struct accel_daemon *d, struct app *a)
{
    const char *ref = a->m.run.ctr.image;
    if (ref == NULL || !state_app_runs_here(d, a) ||
        image_pinned_id(d, a) != NULL)
        return false;
    return strcmp(a->m.run.ctr.pull, "never") != 0 ||
           manifest_image_archive(ref);
}

/* The ID a is pinned to when acceld may pull its image again (an image
 * app, pull not never or an archive), else NULL (lock held). */
static const char *pin_pullable(struct accel_daemon *d, struct app *a)
{
    if (a->m.run.ctr.image == NULL ||
        (strcmp(a->m.run.ctr.pull, "never") == 0 &&
         !manifest_image_archive(a->m.run.ctr.image)))
        return NULL;
    return image_pinned_id(d, a);
}

/* Is the image of ID id gone from this machine (podman, no lock)? False
 * when podman cannot tell: its run says why. */
static bool image_gone(const char *id)
{
    char *cause = NULL;
    json_t *pin = NULL;
    bool gone = image_pin(id, &pin, &cause) == ACCEL_ENOTFOUND;

    json_decref(pin);
    free(cause);
    return gone;
}

enum runner_seen pull_look(struct accel_daemon *d, const char *name)
{
    char *id = NULL;
    struct app *a;
    bool gone;

    pthread_mutex_lock(&d->lock);
    a = state_app_find(d, name);
    if (a != NULL && pin_pullable(d, a) != NULL)
        id = xstrdup(pin_pullable(d, a));
    pthread_mutex_unlock(&d->lock);
    if (id == NULL)
        return RUNNER_SEEN;
    gone = image_gone(id);
    free(id);
    return gone ? RUNNER_GONE : RUNNER_SEEN;
}

/* fn(arg) on a detached thread counted in d->slow_ops (which fn takes
 * back when it ends); false, nothing counted, when no thread can be had. */
static bool slow_thread(struct accel_daemon *d, void *(*fn)(void *), void *arg)
{
    pthread_t t;
    pthread_attr_t at;
    bool ok;

    atomic_fetch_add(&d->slow_ops, 1);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    ok = pthread_create(&t, &at, fn, arg) == 0;
    pthread_attr_destroy(&at);
    if (!ok)
        atomic_fetch_sub(&d->slow_ops, 1);
    return ok;
}

static void pull_begin(struct accel_daemon *d, struct app *a, runner_go_fn go,
                       runner_commit_fn commit);

struct check_job {
    struct accel_daemon *d;
    char *app;
    char *id;       /* the pinned image's ID */
    uint64_t n;     /* the check's number (a->pin_check) */
    runner_go_fn go;         /* a's start, once it may */
    runner_commit_fn commit; /* go's commit */
};

static _Atomic uint64_t checks; /* the last check's number */

/* The check off the lock, then (the app still resuming for this check,
 * with no process) its pull or its start. Counted in slow_ops. */
static void *check_main(void *arg)
{
    struct check_job *j = arg;
    struct accel_daemon *d = j->d;
    bool gone = image_gone(j->id);
    struct app *a;

    pthread_mutex_lock(&d->lock);
    a = state_app_find(d, j->app);
    if (a != NULL && a->pin_check == j->n) {
        a->pin_check = 0;
        if (a->state == APP_RESUMING && a->pid == 0 && !d->stopping &&
            state_app_runs_here(d, a)) {
            if (gone) {
                log_info("app %s: its pinned image %s is gone from node "
                         "%s: pulled again", a->name, j->id,
                         d->cfg.node_name);
                pull_begin(d, a, j->go, j->commit);
            } else {
                j->go(d, a, j->commit);
            }
        }
    }
    pthread_mutex_unlock(&d->lock);
    free(j->app);
    free(j->id);
    free(j);
    atomic_fetch_sub(&d->slow_ops, 1);
    return NULL;
}

/* The look for a's pinned image off the lock (lock held, a resuming and
 * bound here, pin_pullable): gone, it is pulled first (pull_begin); else,
 * or when podman cannot tell, go runs (lock held, a still resuming with no
 * process and no newer check). Meanwhile a->pin_check is the check's
 * number and a's container.pull is as it was. go runs at once when no
 * thread can be had. */
static void check_begin(struct accel_daemon *d, struct app *a, runner_go_fn go,
                        runner_commit_fn commit)
{
    struct check_job *j = xcalloc(1, sizeof(*j));

    j->d = d;
    j->app = xstrdup(a->name);
    j->id = xstrdup(pin_pullable(d, a));
    j->n = atomic_fetch_add(&checks, 1) + 1;
    j->go = go;
    j->commit = commit;
    a->pin_check = j->n;
    if (slow_thread(d, check_main, j))
        return;
    a->pin_check = 0;
    free(j->app);
    free(j->id);
    free(j);
    go(d, a, commit);
}

/* "18.1MiB", "409.0b", "1.2GiB" (go-units' binary sizes, podman's bars)
 * at *s into *out, *s past it; false when it is not one. */
static bool size_parse(const char **s, uint64_t *out)
{
    static const struct {
        const char *unit;
        double scale;
    } units[] = {
        {"TiB", 1099511627776.0}, {"GiB", 1073741824.0}, {"MiB", 1048576.0},
        {"KiB", 1024.0},          {"B", 1.0},            {"b", 1.0},
    };
    char *end = NULL;
    double v = strtod(*s, &end);

    if (end == *s || v < 0)
        return false;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strncmp(end, units[i].unit, strlen(units[i].unit)) == 0) {
            *out = (uint64_t)(v * units[i].scale + 0.5);
            *s = end + strlen(units[i].unit);
            return true;
        }
    return false;
}

/* The layer named id in p, added when new; NULL when p is full. */
static struct pull_blob *blob_of(struct pull_progress *p, const char *id,
                                 size_t len)
{
    struct pull_blob *b;

    if (len >= PULL_BLOB_ID)
        len = PULL_BLOB_ID - 1;
    for (size_t i = 0; i < p->n; i++)
        if (strncmp(p->blobs[i].id, id, len) == 0 &&
            p->blobs[i].id[len] == '\0')
            return &p->blobs[i];
    if (p->n == PULL_BLOBS_MAX)
        return NULL;
    b = &p->blobs[p->n++];
    memset(b, 0, sizeof(*b));
    memcpy(b->id, id, len);
    return b;
}

/* "ID [====>---] 18.1MiB / 28.6MiB": the figures after the bar into b. */
static void blob_bar(struct pull_blob *b, const char *rest)
{
    const char *close = strchr(rest, ']');
    uint64_t done, total;

    if (close == NULL)
        return;
    rest = close + 1 + strspn(close + 1, " ");
    if (!size_parse(&rest, &done))
        return;
    rest += strspn(rest, " ");
    if (*rest != '/')
        return;
    rest++;
    rest += strspn(rest, " ");
    if (!size_parse(&rest, &total) || done > total)
        return;
    b->done = done;
    b->total = total;
}

bool pull_progress_feed(struct pull_progress *p, const char *line)
{
    static const char prefix[] = "Copying blob ";
    const char *id, *rest;
    struct pull_blob *b;
    size_t len;

    if (strncmp(line, prefix, sizeof(prefix) - 1) != 0)
        return false;
    id = line + sizeof(prefix) - 1;
    if (strncmp(id, "sha256:", 7) == 0)
        id += 7;
    len = strcspn(id, " ");
    if (len == 0)
        return false;
    b = blob_of(p, id, len);
    if (b == NULL)
        return true;
    rest = id + len + strspn(id + len, " ");
    if (strncmp(rest, "done", 4) == 0 || strncmp(rest, "skipped", 7) == 0) {
        b->finished = true;
        if (b->total != 0)
            b->done = b->total;
    } else if (*rest == '[') {
        blob_bar(b, rest);
    }
    return true;
}

json_t *pull_progress_json(const struct pull_progress *p)
{
    uint64_t done = 0, total = 0;
    size_t finished = 0;

    for (size_t i = 0; i < p->n; i++) {
        finished += p->blobs[i].finished;
        done += p->blobs[i].done;
        total += p->blobs[i].total;
    }
    return json_pack("{s:{s:I, s:I}, s:{s:I, s:I}}", "layers", "done",
                     (json_int_t)finished, "total", (json_int_t)p->n,
                     "bytes", "done", (json_int_t)done, "total",
                     (json_int_t)total);
}

#define PULL_NOTE_MS 250 /* a layer's bytes are said at most so often */

struct pull_job {
    struct accel_daemon *d;
    char *app;
    char *ref;
    runner_go_fn go;         /* a's start, once it may */
    runner_commit_fn commit; /* go's commit */
    struct podman_watch watch; /* its cancel, its stall (podman.h) */
    char *tmpdir;            /* podman's TMPDIR, removed after the pull */
    bool cancelled;          /* under pulls_lock: a stop took the app */
    struct pull_progress prog; /* its layers so far (the pull's thread) */
    uint64_t noted_ns;       /* when a layer's bytes were last said */
    struct pull_job *next;   /* in pulls */
};

/* The pulls under way, every daemon's (pull_cancel finds them). */
static pthread_mutex_t pulls_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pull_job *pulls;
static _Atomic uint64_t pull_seq; /* names each pull's TMPDIR */

/* The no-progress time of a pull: ACCEL_PULL_STALL_SECONDS, else
 * PULL_STALL_S_DEFAULT; 0 never ends a pull for it. */
static unsigned stall_ms(void)
{
    const char *e = getenv(PULL_STALL_ENV);
    char *end = NULL;
    unsigned long v = PULL_STALL_S_DEFAULT;

    if (e != NULL && e[0] != '\0') {
        v = strtoul(e, &end, 10);
        if (*end != '\0' || v > 86400) {
            log_warn("%s=\"%s\" is not a number of seconds from 0 to "
                     "86400: %d s", PULL_STALL_ENV, e, PULL_STALL_S_DEFAULT);
            v = PULL_STALL_S_DEFAULT;
        }
    }
    return (unsigned)v * 1000u;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* What a pull left in its TMPDIR (a killed podman's copies), and the
 * directory. Links are removed, never followed. */
static void tmpdir_remove(const char *dir)
{
    if (dir != NULL)
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* A fresh TMPDIR for a pull, <data-dir>/run/pulls/<n> (0700), or NULL
 * (podman's own then). */
static char *tmpdir_make(struct accel_daemon *d)
{
    char *top = xasprintf("%s/run/pulls", d->cfg.data_dir);
    char *dir = xasprintf("%s/%llu.%d", top,
                          (unsigned long long)(atomic_fetch_add(&pull_seq, 1) +
                                               1),
                          (int)getpid());

    if ((mkdir(top, 0700) != 0 && errno != EEXIST) ||
        mkdir(dir, 0700) != 0) {
        log_warn("pull: cannot make %s (%s): podman's TMPDIR is its own",
                 dir, strerror(errno));
        free(dir);
        dir = NULL;
    }
    free(top);
    return dir;
}

/* j out of pulls; was it cancelled? */
static bool unlist(struct pull_job *j)
{
    bool cancelled;

    pthread_mutex_lock(&pulls_lock);
    for (struct pull_job **p = &pulls; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            break;
        }
    cancelled = j->cancelled;
    pthread_mutex_unlock(&pulls_lock);
    return cancelled;
}

static void job_free(struct pull_job *j)
{
    free(j->app);
    free(j->ref);
    free(j->tmpdir);
    free(j);
}

/* a's pull: state, progress and message (their control characters
 * escaped), and an app.pull event. */
static void pull_note(struct accel_daemon *d, struct app *a, const char *state,
                      const char *progress, const char *message,
                      const struct pull_progress *prog)
{
    /* podman's words may carry a registry's bytes: no control
     * character reaches a terminal */
    char *pe = util_ctrl_escape(progress, strlen(progress));
    char *me = util_ctrl_escape(message, strlen(message));
    json_t *p = json_pack("{s:s, s:s, s:s}", "state", state, "progress",
                          pe ? pe : progress, "message", me ? me : message);

    free(pe);
    free(me);
    if (prog != NULL && prog->n > 0) {
        json_t *figures = pull_progress_json(prog);
        json_object_update(p, figures);
        json_decref(figures);
    }
    json_decref(a->pull);
    a->pull = p;
    state_event(d, "app.pull", a->name, NULL, NULL, json_deep_copy(p),
                "app %s: pull of %s %s%s%s", a->name, a->m.run.ctr.image,
                state, message[0] ? ": " : "",
                json_string_value(json_object_get(p, "message")));
}

/* A line of podman pull's output: the app's progress (no lock held). A
 * layer's bar, redrawn several times a second, is said when the layer is
 * new or done, else at most every PULL_NOTE_MS; every other line is. */
static void pull_line(void *ctx, const char *line)
{
    struct pull_job *j = ctx;
    size_t before = j->prog.n, finished = 0;
    uint64_t now = util_now_ns();
    struct app *a;

    for (size_t i = 0; i < j->prog.n; i++)
        finished += j->prog.blobs[i].finished;
    if (pull_progress_feed(&j->prog, line)) {
        size_t after = 0;
        for (size_t i = 0; i < j->prog.n; i++)
            after += j->prog.blobs[i].finished;
        if (j->prog.n == before && after == finished &&
            now - j->noted_ns < PULL_NOTE_MS * 1000000ULL)
            return;
    }
    j->noted_ns = now;
    pthread_mutex_lock(&j->d->lock);
    a = state_app_find(j->d, j->app);
    if (a != NULL && a->pull != NULL)
        pull_note(j->d, a, "pulling", line, "", &j->prog);
    pthread_mutex_unlock(&j->d->lock);
}

/* An archive's size; 0 for a registry's image, whose size is not known
 * before its pull, and for an archive that is not there. */
static uint64_t archive_size(const char *ref)
{
    struct stat st;
    return image_archive_stat(ref, &st) == 0
               ? (uint64_t)st.st_size : 0;
}

/* Is there room for the image beside the data directory's reserve (the
 * install's check, with the archive's size)? NULL, or the pull's cause. */
static char *pull_room(struct accel_daemon *d, const char *ref)
{
    uint64_t size = archive_size(ref);
    int status = 0;
    char *why =
        disk_check_room(d->cfg.data_dir, size,
                        size ? "the image's archive" : "the image", &status);
    char *cause;

    if (why == NULL)
        return NULL;
    cause = xasprintf("pulling %s failed: not enough disk: %s", ref, why);
    free(why);
    return cause;
}

/* The pull, then (the app still resuming for it) its pin and start, or
 * the app failed with why, released. Counted in slow_ops: acceld's
 * shutdown does not wait for it (the app, still resuming with no process,
 * is stopped at the next start). */
static void *pull_main(void *arg)
{
    struct pull_job *j = arg;
    struct accel_daemon *d = j->d;
    json_t *pin = NULL;
    char *cause = pull_room(d, j->ref);
    enum accel_err rc = cause != NULL ? ACCEL_ESYS
                                      : image_pull(j->ref, pull_line, j,
                                                   &j->watch, &pin, &cause);
    struct app *a;
    bool cancelled;

    tmpdir_remove(j->tmpdir);
    pthread_mutex_lock(&d->lock);
    cancelled = unlist(j);
    a = state_app_find(d, j->app);
    if (cancelled) {
        log_info("app %s: the pull of %s was cancelled%s", j->app, j->ref,
                 rc == ACCEL_OK ? " as it ended: the image is the app's" : "");
        if (rc == ACCEL_OK && a != NULL && a->m.run.ctr.image != NULL &&
            strcmp(a->m.run.ctr.image, j->ref) == 0) {
            image_pin_set(d, a, pin); /* its uninstall removes it */
            pin = NULL;
        }
    } else if (a != NULL && a->pull != NULL && a->state == APP_RESUMING &&
        a->pid == 0 && !d->stopping) {
        if (rc == ACCEL_OK) {
            for (size_t i = 0; i < j->prog.n; i++) { /* podman is done */
                struct pull_blob *b = &j->prog.blobs[i];
                b->finished = true;
                if (b->total != 0)
                    b->done = b->total;
            }
            pull_note(d, a, "done", json_string_value(json_object_get(
                                        pin, "id")), "", &j->prog);
            image_pin_set(d, a, pin);
            pin = NULL;
            j->go(d, a, j->commit);
        } else {
            pull_note(d, a, "failed", "", cause, &j->prog);
            lifecycle_commit_release(d, a, APP_FAILED, cause);
        }
    }
    pthread_mutex_unlock(&d->lock);
    json_decref(pin);
    free(cause);
    job_free(j);
    atomic_fetch_sub(&d->slow_ops, 1);
    return NULL;
}

/* a's pull (lock held, a resuming and bound here): answered at once, the
 * app shows `pulling`; go runs once it is pinned (lock held, a still
 * resuming with no process), or a is failed and released with the pull's
 * cause. go runs at once (podman run's own pull then) when no thread can
 * be had. */
static void pull_begin(struct accel_daemon *d, struct app *a, runner_go_fn go,
                       runner_commit_fn commit)
{
    struct pull_job *j = xcalloc(1, sizeof(*j));

    j->d = d;
    j->app = xstrdup(a->name);
    j->ref = xstrdup(a->m.run.ctr.image);
    j->go = go;
    j->commit = commit;
    j->tmpdir = tmpdir_make(d);
    j->watch.tmpdir = j->tmpdir;
    j->watch.stall_ms = stall_ms();
    j->watch.pty = true; /* podman's bars: each layer's bytes */
    atomic_init(&j->watch.cancel, false);
    pull_note(d, a, "pulling", "", "", NULL);
    pthread_mutex_lock(&pulls_lock);
    j->next = pulls;
    pulls = j;
    pthread_mutex_unlock(&pulls_lock);
    if (slow_thread(d, pull_main, j))
        return;
    unlist(j);
    tmpdir_remove(j->tmpdir);
    job_free(j);
    json_decref(a->pull);
    a->pull = NULL;
    go(d, a, commit);
}

bool pull_prepare(struct accel_daemon *d, struct app *a, enum runner_seen seen,
                  runner_go_fn go, runner_commit_fn commit)
{
    if (pull_needed(d, a) ||
        (seen == RUNNER_GONE && a->m.run.ctr.image != NULL)) {
        pull_begin(d, a, go, commit);
        return true;
    }
    if (seen == RUNNER_UNSEEN && pin_pullable(d, a) != NULL) {
        check_begin(d, a, go, commit);
        return true;
    }
    return false;
}

bool pull_cancel(struct accel_daemon *d, struct app *a)
{
    bool any = a->pin_check != 0;

    a->pin_check = 0; /* check_main finds no check of its number */
    pthread_mutex_lock(&pulls_lock);
    for (struct pull_job *j = pulls; j; j = j->next)
        if (j->d == d && !j->cancelled && strcmp(j->app, a->name) == 0) {
            j->cancelled = true;
            atomic_store(&j->watch.cancel, true);
            any = true;
        }
    pthread_mutex_unlock(&pulls_lock);
    if (any && a->pull != NULL)
        pull_note(d, a, "cancelled", "", "stopped while it pulled", NULL);
    return any;
}

void pull_sweep(struct accel_daemon *d)
{
    char *top = xasprintf("%s/run/pulls", d->cfg.data_dir);

    tmpdir_remove(top);
    free(top);
}
