/* SPDX-License-Identifier: MIT */
/*
 * pull.c: a container app's image pulled as a job (pull.h, SPEC 8.2.1).
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/pull.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/util.h"
#include "daemon/lifecycle.h"
#include "daemon/log.h"
#include "daemon/node/proc/disk.h"
#include "daemon/node/runtime/image.h"
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

struct pull_job {
    struct accel_daemon *d;
    char *app;
    char *ref;
    runner_go_fn go;         /* a's start, once it may */
    runner_commit_fn commit; /* go's commit */
};

/* a's pull: state, progress and message (their control characters
 * escaped), and an app.pull event. */
static void pull_note(struct accel_daemon *d, struct app *a, const char *state,
                      const char *progress, const char *message)
{
    /* podman's words may carry a registry's bytes: no control
     * character reaches a terminal */
    char *pe = util_ctrl_escape(progress, strlen(progress));
    char *me = util_ctrl_escape(message, strlen(message));
    json_t *p = json_pack("{s:s, s:s, s:s}", "state", state, "progress",
                          pe ? pe : progress, "message", me ? me : message);

    free(pe);
    free(me);
    json_decref(a->pull);
    a->pull = p;
    state_event(d, "app.pull", a->name, NULL, NULL, json_deep_copy(p),
                "app %s: pull of %s %s%s%s", a->name, a->m.run.ctr.image,
                state, message[0] ? ": " : "",
                json_string_value(json_object_get(p, "message")));
}

/* A line of podman pull's output: the app's progress (no lock held). */
static void pull_line(void *ctx, const char *line)
{
    struct pull_job *j = ctx;
    struct app *a;

    pthread_mutex_lock(&j->d->lock);
    a = state_app_find(j->d, j->app);
    if (a != NULL && a->pull != NULL)
        pull_note(j->d, a, "pulling", line, "");
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
                                                   &pin, &cause);
    struct app *a;

    pthread_mutex_lock(&d->lock);
    a = state_app_find(d, j->app);
    if (a != NULL && a->pull != NULL && a->state == APP_RESUMING &&
        a->pid == 0 && !d->stopping) {
        if (rc == ACCEL_OK) {
            pull_note(d, a, "done", json_string_value(json_object_get(
                                        pin, "id")), "");
            image_pin_set(d, a, pin);
            pin = NULL;
            j->go(d, a, j->commit);
        } else {
            pull_note(d, a, "failed", "", cause);
            lifecycle_commit_release(d, a, APP_FAILED, cause);
        }
    }
    pthread_mutex_unlock(&d->lock);
    json_decref(pin);
    free(cause);
    free(j->app);
    free(j->ref);
    free(j);
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
    pull_note(d, a, "pulling", "", "");
    if (slow_thread(d, pull_main, j))
        return;
    free(j->app);
    free(j->ref);
    free(j);
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
