/* SPDX-License-Identifier: MIT */
/*
 * unheld.c: the shim's "unheld" lines turned into the app's events
 * (unheld.h). The file is the app's to write, so nothing in it is trusted:
 * a line is at most 255 bytes of printable ASCII in three fields, read
 * with a bound per pass and per run, and only ever becomes an event of
 * that same app.
 */
#include "common/accel_setup.h"
#include "daemon/node/enforce/unheld.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/log.h"
#include "daemon/node/runtime/appsetup.h"
#include "daemon/node/runtime/runtime.h"

#define LINE_MAX_BYTES 256
/* The most the file may hold: the shim writes one short line per name it
 * cannot hold (tens of bytes, a few names). Past it the file is cut back
 * to nothing: it lies outside the member's home, so what the app's group
 * appends there (a host process of the member may) is not counted against
 * its limitedDisk, and must not grow on acceld's disk (issue 44's rule: a
 * member gets no more than a member's process). */
#define EVENTS_MAX_BYTES (64 * 1024)

static const struct unheld_mark *book_find(const struct unheld_book *b,
                                           const char *app, int64_t pid)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->m[i].pid == pid && strcmp(b->m[i].app, app) == 0)
            return &b->m[i];
    return NULL;
}

struct unheld_target *unheld_gather(struct accel_daemon *d,
                                    const struct unheld_book *b, size_t *n)
{
    struct unheld_target *t = NULL;

    *n = 0;
    if (d->shim_path == NULL)
        return NULL;
    for (size_t i = 0; i < d->napps; i++) {
        const struct app *a = d->apps[i];
        const struct unheld_mark *m;
        if (a->pid <= 0 || !state_app_runs_here(d, a))
            continue;
        t = xrealloc(t, (*n + 1) * sizeof(*t));
        memset(&t[*n], 0, sizeof(*t));
        m = book_find(b, a->name, a->pid);
        t[*n].mark.app = xstrdup(a->name);
        t[*n].mark.pid = a->pid;
        t[*n].mark.off = m ? m->off : 0;
        t[*n].mark.events = m ? m->events : 0;
        t[*n].node = xstrdup(d->cfg.node_name ? d->cfg.node_name : "");
        t[*n].path = appsetup_events_path(d, a->name);
        (*n)++;
    }
    return t;
}

/* A line the shim could have written: printable, no quotes or escapes
 * that a log reader could take for structure. */
static bool line_ok(const char *s, size_t len)
{
    if (len == 0 || len >= LINE_MAX_BYTES)
        return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] < ' ' || s[i] > '~' || s[i] == '"' || s[i] == '\\')
            return false;
    return true;
}

static void read_one(struct unheld_target *t)
{
    char buf[UNHELD_PER_PASS * LINE_MAX_BYTES];
    int fd = open(t->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    ssize_t got;
    size_t at = 0;

    if (fd < 0)
        return;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_size > (off_t)EVENTS_MAX_BYTES) {
        /* grown past anything the shim writes: cut back, read anew */
        (void)!ftruncate(fd, 0);
        t->mark.off = 0;
        t->cut = true;
    }
    got = pread(fd, buf, sizeof buf, (off_t)t->mark.off);
    close(fd);
    while (got > 0 && at < (size_t)got && t->nlines < UNHELD_PER_PASS) {
        char *nl = memchr(buf + at, '\n', (size_t)got - at);
        size_t len;
        if (nl == NULL) { /* no end yet: a line being written, or junk */
            if ((size_t)got - at >= LINE_MAX_BYTES)
                t->mark.off += (size_t)got - at; /* junk: skipped */
            break;
        }
        len = (size_t)(nl - (buf + at));
        if (line_ok(buf + at, len) && strncmp(buf + at, "unheld ", 7) == 0 &&
            t->mark.events + t->nlines < UNHELD_PER_RUN)
            t->lines[t->nlines++] = xasprintf("%.*s", (int)(len - 7),
                                              buf + at + 7);
        at += len + 1;
        t->mark.off += len + 1;
    }
}

void unheld_read(struct unheld_target *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        read_one(&t[i]);
}

/* One line "<name> <version> <flags>" as an event of t's app. */
static void event_of(struct accel_daemon *d, const struct unheld_target *t,
                     const char *line)
{
    char name[LINE_MAX_BYTES];
    long long version = 0;
    unsigned long long flags = 0;
    const char *sp = strchr(line, ' ');
    size_t len = sp ? (size_t)(sp - line) : strlen(line);

    memcpy(name, line, len);
    name[len] = '\0';
    if (sp != NULL) {
        char *end;
        version = strtoll(sp + 1, &end, 10);
        if (*end == ' ')
            flags = strtoull(end + 1, NULL, 10);
    }
    state_event(d, "shim.unheld", t->mark.app, t->node, NULL,
                json_pack("{s:s, s:I, s:I}", "name", name, "version",
                          (json_int_t)version, "flags", (json_int_t)flags),
                "app %s: cuGetProcAddress(%s, version %lld, flags %llu) "
                "handed out an address the shim cannot hold: calls through "
                "it are not held to the quota",
                t->mark.app, name, version, flags);
}

void unheld_apply(struct accel_daemon *d, struct unheld_book *b,
                  struct unheld_target *t, size_t n)
{
    unheld_book_free(b);
    b->m = n ? xcalloc(n, sizeof(*b->m)) : NULL;
    for (size_t i = 0; i < n; i++) {
        if (t[i].cut)
            log_warn("app %s: %s held more than %d KiB, more than the shim "
                     "writes there: something else of the app's group "
                     "wrote it, and it was cut back to nothing",
                     t[i].mark.app, t[i].path, EVENTS_MAX_BYTES / 1024);
        for (size_t k = 0; k < t[i].nlines; k++) {
            event_of(d, &t[i], t[i].lines[k]);
            free(t[i].lines[k]);
        }
        t[i].mark.events += (unsigned)t[i].nlines;
        b->m[b->n++] = t[i].mark; /* the name moves into the book */
        free(t[i].node);
        free(t[i].path);
    }
    free(t);
}

void unheld_book_free(struct unheld_book *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->m[i].app);
    free(b->m);
    b->m = NULL;
    b->n = 0;
}
