/* SPDX-License-Identifier: MIT */
/*
 * ctxprobe.c: acceld's own measure of a context on each local NVIDIA
 * device (ctxprobe.h). One thread; one probe at a time; its files under
 * <run>/ctxprobe (a ledger, the shim's config, the child's output),
 * removed after each probe.
 */
#include "common/accel_setup.h"
#include "daemon/node/devices/ctxprobe.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accel/ledger.h"
#include "common/util.h"
#include "daemon/log.h"
#include "daemon/node/devices/nvml.h"
#include "daemon/node/ledger.h"
#include "daemon/node/proc/proc.h"
#include "daemon/paths.h"

#define CTXPROBE_APP "accel-ctxprobe" /* the probe's app name (its ledger) */
#define PASS_MS 1000  /* between two looks for a device to probe */
#define REAP_MS 20    /* between two looks at the child */

enum probe_state {
    PROBE_SKIPPED,    /* the card had too little free memory (said once) */
    PROBE_DONE,       /* measured: bytes */
    PROBE_FAILED,     /* tried and failed (said once): not tried again */
};

struct probe_dev {
    char uuid[ACCEL_ID_MAX + 1]; /* the device */
    enum probe_state state;      /* what became of it */
    uint64_t bytes;              /* PROBE_DONE: a context's size */
};

struct ctxprobe {
    pthread_mutex_t mu;       /* guards stop, devs, n, cap and running */
    pthread_cond_t wake;      /* signalled by ctxprobe_stop (monotonic) */
    bool stop;                /* ctxprobe_stop asked */
    pthread_t thread;         /* the probing thread */
    struct probe_dev *devs;   /* the devices looked at */
    size_t n, cap;            /* entries of devs */
    char *program;            /* accel-ctxprobe's path (read-only) */
    char *dir;                /* <run>/ctxprobe (read-only) */
    struct accel_daemon *d;   /* the daemon it serves */
    pid_t running;            /* the probe's pid while it runs, else 0 */
    struct nvml *nvml;        /* the thread's own NVML handle, NULL until
                                 its first look (the thread's alone) */
};

/* One device to probe, copied out from under d->lock. */
struct pick {
    char uuid[ACCEL_ID_MAX + 1]; /* its id */
    uint64_t total;              /* the card's memory: the probe's limit */
    uint64_t free_b;             /* its free memory as acceld last read it
                                    (a unified-memory part, which NVML
                                    cannot tell) */
};

/* Cards looked at in one pass (more wait for the next). */
#define PICKS 64

/* The entry of uuid (mu held), or NULL. */
static struct probe_dev *find(struct ctxprobe *p, const char *uuid)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->devs[i].uuid, uuid) == 0)
            return &p->devs[i];
    return NULL;
}

/* Record uuid's state (mu held). */
static void record(struct ctxprobe *p, const char *uuid, enum probe_state st,
                   uint64_t bytes)
{
    struct probe_dev *e = find(p, uuid);

    if (e == NULL) {
        if (p->n == p->cap) {
            p->cap = p->cap ? 2 * p->cap : 8;
            p->devs = xrealloc(p->devs, p->cap * sizeof(*p->devs));
        }
        e = &p->devs[p->n++];
        util_strlcpy(e->uuid, uuid, sizeof e->uuid);
    }
    e->state = st;
    e->bytes = bytes;
}

/* A local NVIDIA device in Memory slicing (the one mode whose apps have
 * ledgers to seed), present (d->lock held). */
static bool probeable(struct accel_daemon *d, size_t i)
{
    const struct adm_device *x = &d->snap.devs[i];

    return x->present && d->ninfo[x->node].local &&
           (x->type == ACCEL_TYPE_NVIDIA ||
            x->type == ACCEL_TYPE_NVIDIA_GB10) &&
           x->st == ACCEL_SUPPORT_MEMSLICE;
}

/* The devices due a probe (never tried, or short of room last time)
 * into k[0..PICKS): their number. Takes d->lock, then mu. */
static size_t due(struct accel_daemon *d, struct ctxprobe *p, struct pick *k)
{
    size_t n = 0;

    pthread_mutex_lock(&d->lock);
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < d->snap.ndevs && n < PICKS && !p->stop; i++) {
        const struct adm_device *x = &d->snap.devs[i];
        const struct probe_dev *e;
        uint64_t used = d->dinfo[i].used_mem;
        if (!probeable(d, i))
            continue;
        e = find(p, x->id);
        if (e != NULL && e->state != PROBE_SKIPPED)
            continue;
        util_strlcpy(k[n].uuid, x->id, sizeof k[n].uuid);
        k[n].total = x->memory;
        k[n].free_b = x->memory > used ? x->memory - used : 0;
        n++;
    }
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&d->lock);
    return n;
}

/* The card's free memory now, as the driver counts it (NVML, opened at
 * the first look and kept), into *free_b: 0, or -1 with *why (caller
 * frees). A unified-memory part, whose memory NVML does not tell, is
 * taken at acceld's last reading. */
static int card_free(struct ctxprobe *p, const struct pick *k,
                     uint64_t *free_b, char **why)
{
    uint64_t total = 0, used = 0;
    char *cause = NULL;
    enum accel_err rc;

    if (p->nvml == NULL && nvml_open(&p->nvml, &cause) != ACCEL_OK) {
        *why = xasprintf("NVML cannot tell the card's free memory: %s",
                         cause ? cause : "not loaded");
        free(cause);
        return -1;
    }
    rc = nvml_memory_now(p->nvml, k->uuid, &total, &used, &cause);
    if (rc == ACCEL_ENOTSUP) {
        *free_b = k->free_b;
    } else if (rc == ACCEL_OK) {
        *free_b = total > used ? total - used : 0;
    } else {
        *why = xasprintf("NVML cannot tell the card's free memory: %s",
                         cause ? cause : accel_strerror(rc));
        free(cause);
        return -1;
    }
    free(cause);
    return 0;
}

/* Whether k has room for a probe now (a card without, said once, is
 * looked at again next pass); -1 with *why when it cannot be told. */
static int has_room(struct ctxprobe *p, const struct pick *k, char **why)
{
    uint64_t free_b = 0;
    const struct probe_dev *e;
    bool said;

    if (card_free(p, k, &free_b, why) != 0)
        return -1;
    if (free_b >= CTXPROBE_MARGIN)
        return 1;
    pthread_mutex_lock(&p->mu);
    e = find(p, k->uuid);
    said = e != NULL && e->state == PROBE_SKIPPED;
    record(p, k->uuid, PROBE_SKIPPED, 0);
    pthread_mutex_unlock(&p->mu);
    if (!said)
        log_info("device %s: %llu MiB free, under the %llu MiB a context's "
                 "probe leaves alone: not measured until it has room (the "
                 "apps' first processes measure)", k->uuid,
                 (unsigned long long)(free_b >> 20),
                 (unsigned long long)(CTXPROBE_MARGIN >> 20));
    return 0;
}

/* "<dir>/<name>" (caller frees). */
static char *file_of(const struct ctxprobe *p, const char *name)
{
    return xasprintf("%s/%s", p->dir, name);
}

static const char *const probe_files[] = { "probe.ledger", "shim.conf",
                                           "probe.log" };

/* Remove the probe's files and its directory (what a killed acceld left
 * too). */
static void clean_files(const struct ctxprobe *p)
{
    for (size_t i = 0; i < sizeof probe_files / sizeof *probe_files; i++) {
        char *f = file_of(p, probe_files[i]);
        (void)unlink(f);
        free(f);
    }
    (void)rmdir(p->dir);
}

/* Sleep ms or until ctxprobe_stop: whether a stop was asked. */
static bool pause_ms(struct ctxprobe *p, unsigned ms)
{
    struct timespec until = util_deadline(CLOCK_MONOTONIC, ms);
    bool stop;

    pthread_mutex_lock(&p->mu);
    while (!p->stop &&
           pthread_cond_timedwait(&p->wake, &p->mu, &until) != ETIMEDOUT)
        ;
    stop = p->stop;
    pthread_mutex_unlock(&p->mu);
    return stop;
}

/* The probe's environment: acceld's, with these entries replacing its own
 * (caller frees each entry and the array). */
static char **probe_env(struct accel_daemon *d, const char *cfg,
                        const char *uuid)
{
    char **env = xcalloc(6, sizeof(char *));
    const char *lib = getenv(CTXPROBE_LIBDIR_ENV);
    const char *old = getenv("LD_LIBRARY_PATH");
    size_t n = 0;

    env[n++] = xasprintf("LD_PRELOAD=%s", d->shim_path);
    env[n++] = xasprintf("ACCEL_CONFIG=%s", cfg);
    env[n++] = xstrdup("ACCEL_APP=" CTXPROBE_APP);
    env[n++] = xasprintf("CUDA_VISIBLE_DEVICES=%s", uuid);
    if (lib != NULL && lib[0] != '\0')
        env[n++] = xasprintf("LD_LIBRARY_PATH=%s%s%s", lib,
                             old && old[0] ? ":" : "", old ? old : "");
    return env;
}

/* The first line the probe wrote (its stderr), or "" (caller frees). */
static char *first_line(const char *path)
{
    char buf[240];
    ssize_t n = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd >= 0) {
        n = read(fd, buf, sizeof buf - 1);
        close(fd);
    }
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return xstrdup(buf);
}

/* Wait for the child, killing its group at the deadline or a stop; its
 * wait status into *status. 0 exited by itself, -1 killed. */
static int await_child(struct ctxprobe *p, pid_t pid, int *status)
{
    uint64_t until = util_now_ns() + CTXPROBE_TIMEOUT_MS * 1000000ULL;
    bool killed = false;

    for (;;) {
        enum accel_err rc = proc_reap(pid, status);
        if (rc == ACCEL_OK)
            return killed ? -1 : 0;
        if (rc != ACCEL_EBUSY) {
            *status = -1;
            return -1;
        }
        if (!killed && (pause_ms(p, REAP_MS) || util_now_ns() >= until)) {
            (void)kill(-pid, SIGKILL);
            killed = true;
        } else if (killed) {
            struct timespec t = { 0, REAP_MS * 1000000L };
            nanosleep(&t, NULL);
        }
    }
}

/* Run the probe on k: 0 with the size in *out, or -1 with *why (caller
 * frees) saying what failed. */
static int run_probe(struct accel_daemon *d, struct ctxprobe *p,
                     const struct pick *k, uint64_t *out, char **why)
{
    char *ledger = file_of(p, "probe.ledger"), *cfg = file_of(p, "shim.conf");
    char *logf = file_of(p, "probe.log"), *cause = NULL, **env = NULL;
    char *argv[] = { p->program, NULL };
    struct ledger_device dev = { 0, k->total, ledger, k->uuid, NULL, NULL,
                                 NULL };
    struct proc_spec spec = { .name = CTXPROBE_APP, .argv = argv };
    struct proc_handle h;
    int status = 0, result = -1, rc;
    uint64_t v;

    clean_files(p);
    if ((mkdir(p->dir, 0700) != 0 && errno != EEXIST) ||
        ledger_create(ledger, CTXPROBE_APP, 0, k->uuid, k->total, (uid_t)-1,
                      (gid_t)-1) != ACCEL_OK ||
        ledger_write_config(cfg, CTXPROBE_APP, &dev, 1) != ACCEL_OK) {
        *why = xasprintf("cannot write its files in %s", p->dir);
        goto out;
    }
    env = probe_env(d, cfg, k->uuid);
    spec.env = env;
    spec.log_path = logf;
    if (proc_start(&spec, &h, &cause) != ACCEL_OK) {
        *why = xasprintf("%s", cause ? cause : "cannot start it");
        goto out;
    }
    pthread_mutex_lock(&p->mu);
    p->running = h.pid;
    pthread_mutex_unlock(&p->mu);
    rc = await_child(p, h.pid, &status);
    pthread_mutex_lock(&p->mu);
    p->running = 0;
    pthread_mutex_unlock(&p->mu);
    if (rc != 0) {
        *why = xasprintf("killed after %d ms or at acceld's stop",
                         CTXPROBE_TIMEOUT_MS);
        goto out;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char *line = first_line(logf);
        *why = xasprintf("it failed (status %d): %s", status,
                         line[0] ? line : "no word from it");
        free(line);
        goto out;
    }
    v = ledger_ctx_read(ledger);
    if (!(v & ACCEL_LEDGER_CTX_MEASURED) || (v & ACCEL_LEDGER_CTX_SEEDED) ||
        ACCEL_LEDGER_CTX_BYTES(v) == 0) {
        *why = xstrdup("the shim measured no size (no NVML, or a context "
                       "of no memory)");
        goto out;
    }
    *out = ACCEL_LEDGER_CTX_BYTES(v);
    result = 0;
out:
    clean_files(p);
    for (char **e = env; e != NULL && *e != NULL; e++)
        free(*e);
    free(env);
    free(cause);
    free(logf);
    free(cfg);
    free(ledger);
    return result;
}

static void ctxprobe_free(struct ctxprobe *p)
{
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    nvml_close(p->nvml);
    free(p->devs);
    free(p->program);
    free(p->dir);
    free(p);
}

/* Say and record what became of the probe of k (rc 0: bytes measured;
 * else why). */
static void settle(struct accel_daemon *d, struct ctxprobe *p,
                   const struct pick *k, int rc, uint64_t bytes,
                   const char *why, int64_t ms)
{
    int dev;

    pthread_mutex_lock(&d->lock);
    pthread_mutex_lock(&p->mu);
    record(p, k->uuid, rc == 0 ? PROBE_DONE : PROBE_FAILED, bytes);
    pthread_mutex_unlock(&p->mu);
    dev = state_dev_find(d, k->uuid);
    if (rc == 0 && dev >= 0 && d->hooks.device_changed != NULL)
        d->hooks.device_changed(d, dev); /* its contextMemory */
    pthread_mutex_unlock(&d->lock);
    if (rc == 0)
        log_info("device %s: a context takes %llu bytes (measured by "
                 "accel-ctxprobe in %lld ms): new apps' ledgers are seeded "
                 "with it", k->uuid, (unsigned long long)bytes,
                 (long long)ms);
    else
        log_warn("device %s: no context size measured by accel-ctxprobe: "
                 "%s; the apps' first processes measure it", k->uuid, why);
}

static void *probe_main(void *arg)
{
    struct ctxprobe *p = arg;
    struct accel_daemon *d = p->d;
    struct pick *k = xcalloc(PICKS, sizeof(*k));

    do {
        size_t n = due(d, p, k);
        for (size_t i = 0; i < n; i++) {
            uint64_t bytes = 0;
            char *why = NULL;
            int64_t t0 = util_wall_ms();
            int rc = has_room(p, &k[i], &why);
            if (rc == 0)
                continue;
            if (rc > 0)
                rc = run_probe(d, p, &k[i], &bytes, &why);
            settle(d, p, &k[i], rc, bytes, why, util_wall_ms() - t0);
            free(why);
        }
    } while (!pause_ms(p, PASS_MS));
    free(k);
    return NULL;
}

enum accel_err ctxprobe_start(struct accel_daemon *d)
{
    struct ctxprobe *p;
    pthread_condattr_t ca;
    char *prog, *run;

    if (d->shim_path == NULL)
        return ACCEL_OK; /* no ledgers to seed */
    prog = getenv("ACCEL_CTXPROBE") ? xstrdup(getenv("ACCEL_CTXPROBE"))
                                    : paths_find(ACCEL_CTXPROBE_REL,
                                                 ACCEL_CTXPROBE_PATH);
    if (access(prog, X_OK) != 0) {
        log_warn("no accel-ctxprobe at %s: the apps' first processes "
                 "measure a context's size", prog);
        free(prog);
        return ACCEL_OK;
    }
    p = xcalloc(1, sizeof(*p));
    p->program = prog;
    run = xasprintf("%s/run", d->cfg.data_dir);
    (void)mkdir(run, 0755);
    p->dir = xasprintf("%s/ctxprobe", run);
    free(run);
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->wake, &ca);
    pthread_condattr_destroy(&ca);
    p->d = d;
    clean_files(p); /* what a killed acceld left */
    if (pthread_create(&p->thread, NULL, probe_main, p) != 0) {
        ctxprobe_free(p);
        return ACCEL_ESYS;
    }
    pthread_mutex_lock(&d->lock); /* appsetup_plan reads it under d->lock */
    d->ctxprobe = p;
    pthread_mutex_unlock(&d->lock);
    return ACCEL_OK;
}

void ctxprobe_stop(struct accel_daemon *d)
{
    struct ctxprobe *p = d->ctxprobe;

    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_mutex_lock(&d->lock); /* appsetup_plan reads it under d->lock */
    d->ctxprobe = NULL;
    pthread_mutex_unlock(&d->lock);
    ctxprobe_free(p);
}

int ctxprobe_bytes(struct accel_daemon *d, const char *uuid, uint64_t *out)
{
    struct ctxprobe *p = d->ctxprobe;
    struct probe_dev *e;
    int found = 0;

    if (p == NULL || uuid == NULL)
        return 0;
    pthread_mutex_lock(&p->mu);
    e = find(p, uuid);
    if (e != NULL && e->state == PROBE_DONE) {
        *out = e->bytes;
        found = 1;
    }
    pthread_mutex_unlock(&p->mu);
    return found;
}

bool ctxprobe_is_probe(struct accel_daemon *d, pid_t pid)
{
    struct ctxprobe *p = d->ctxprobe;
    bool is;

    if (p == NULL || pid <= 0)
        return false;
    pthread_mutex_lock(&p->mu);
    is = p->running == pid;
    pthread_mutex_unlock(&p->mu);
    return is;
}
