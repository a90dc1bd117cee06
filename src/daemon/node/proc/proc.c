/* SPDX-License-Identifier: MIT */
/*
 * proc.c: fork/setsid/exec of app processes with a synchronous launch-error
 * channel, identity by (pid, start time) read from /proc, group-wide stop
 * with escalation, and log rotation. Linux only (/proc). errno is turned into
 * accel errors and sentences here (STYLE 6).
 */
#include "common/accel_setup.h"
#include "daemon/node/proc/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

extern char **environ;

#define PROC_STAT_MAX 1024       /* /proc/<pid>/stat is one short line */
#define PROC_ENVIRON_MAX (1 << 20) /* read at most 1 MiB of an environment */
#define PROC_POLL_MS 10          /* stop loop granularity */

/* What the child writes to the error pipe when a step fails. */
enum launch_stage { STAGE_CHDIR = 1, STAGE_EXEC = 2, STAGE_CRED = 3 };

struct launch_report {
    int stage;                   /* enum launch_stage */
    int err;                     /* errno */
};

/* Everything the child needs, prepared before fork (no malloc after it). */
struct launch {
    char *const *argv;           /* to execvp */
    char **envp;                 /* merged environment */
    const char *workdir;         /* or NULL */
    const struct proc_cred *cred; /* or NULL: keep the daemon's */
    int devnull;                 /* stdin */
    int logfd;                   /* stdout + stderr */
    int errfd;                   /* write end of the CLOEXEC report pipe */
    int gofd;                    /* read end of the go pipe, -1 = none */
    int gowr;                    /* its write end (the child closes it) */
};

/* Fields of /proc/<pid>/stat we use. */
struct stat_info {
    char state;                  /* R S D Z T ... */
    pid_t pgrp;                  /* field 5 */
    uint64_t start;              /* field 22 */
};

static void set_cause(char **cause, char *msg)
{
    if (cause != NULL)
        *cause = msg;
    else
        free(msg);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}
/* Parse /proc/<pid>/stat; the comm field may hold spaces and ')'. */
static int read_stat(pid_t pid, struct stat_info *si)
{
    char path[64], buf[PROC_STAT_MAX];
    char *p, *end;
    unsigned long long v;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (util_read_small(path, buf, sizeof(buf)) <= 0)
        return -1;
    p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return -1;
    p += 2; /* field 3: state */
    si->state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return -1;
        p++;
        if (field + 1 == 5)
            si->pgrp = (pid_t)strtol(p, NULL, 10);
    }
    errno = 0;
    v = strtoull(p, &end, 10);
    if (errno != 0 || end == p)
        return -1;
    si->start = v;
    return 0;
}

enum accel_err proc_start_time(pid_t pid, uint64_t *out_start)
{
    struct stat_info si;

    if (pid <= 0 || read_stat(pid, &si) < 0)
        return ACCEL_ENOTFOUND;
    *out_start = si.start;
    return ACCEL_OK;
}

int proc_alive(pid_t pid, uint64_t start_time)
{
    struct stat_info si;

    if (pid <= 0 || read_stat(pid, &si) < 0)
        return 0;
    return si.start == start_time && si.state != 'Z' && si.state != 'X';
}

/* Call fn for every numeric /proc entry until it returns non-zero. */
static int for_each_pid(int (*fn)(pid_t, void *), void *ctx)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int rc = 0;

    if (d == NULL)
        return -1;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (*end != '\0' || v <= 0)
            continue;
        rc = fn((pid_t)v, ctx);
    }
    closedir(d);
    return rc;
}

struct pid_list {
    pid_t *v;                    /* pids */
    size_t n;                    /* used */
    pid_t match;                 /* pgid to match (group scans) */
    const char *needle;          /* "KEY=VALUE" (env scans) */
    size_t needle_len;           /* strlen(needle) + 1, the NUL included */
    int first_only;              /* stop at the first match */
};

static int list_add(struct pid_list *l, pid_t pid)
{
    l->v = xrealloc(l->v, (l->n + 1) * sizeof(*l->v));
    l->v[l->n++] = pid;
    return l->first_only;
}

static int pgrp_match(pid_t pid, void *ctx)
{
    struct pid_list *l = ctx;
    struct stat_info si;

    if (read_stat(pid, &si) < 0 || si.pgrp != l->match)
        return 0;
    if (si.state == 'Z' || si.state == 'X')
        return 0;
    return list_add(l, pid);
}

static void group_members(pid_t pgid, int first_only, struct pid_list *l)
{
    memset(l, 0, sizeof(*l));
    l->match = pgid;
    l->first_only = first_only;
    for_each_pid(pgrp_match, l);
}

int proc_group_alive(pid_t pgid)
{
    struct pid_list l;
    int alive;

    if (pgid <= 1)
        return 0;
    group_members(pgid, 1, &l);
    alive = l.n > 0;
    free(l.v);
    return alive;
}

/* Does the NUL-separated environment hold exactly the needle entry? */
static int env_has(const char *env, size_t len, const char *needle,
                   size_t needle_len)
{
    size_t i = 0;

    while (i < len) {
        size_t n = strnlen(env + i, len - i) + 1;
        if (n == needle_len && memcmp(env + i, needle, needle_len - 1) == 0)
            return 1;
        i += n;
    }
    return 0;
}

static int env_match(pid_t pid, void *ctx)
{
    struct pid_list *l = ctx;
    char path[64];
    char *buf;
    ssize_t n;
    int found;

    if (pid == getpid())
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    buf = xmalloc(PROC_ENVIRON_MAX);
    n = util_read_small(path, buf, PROC_ENVIRON_MAX);
    found = n > 0 && env_has(buf, (size_t)n, l->needle, l->needle_len);
    free(buf);
    return found ? list_add(l, pid) : 0;
}

enum accel_err proc_find_by_env(const char *key, const char *value,
                                pid_t **out, size_t *n)
{
    struct pid_list l;
    char *needle = xasprintf("%s=%s", key, value);

    memset(&l, 0, sizeof(l));
    l.needle = needle;
    l.needle_len = strlen(needle) + 1;
    if (for_each_pid(env_match, &l) < 0) {
        free(needle);
        free(l.v);
        return ACCEL_ESYS;
    }
    free(needle);
    *out = l.v;
    *n = l.n;
    return ACCEL_OK;
}

struct tagged_list {
    struct proc_tagged *v;
    size_t n;
    const char *needle;          /* "KEY=PREFIX" */
    size_t needle_len;           /* strlen(needle) */
};

/* The value after needle of the environment's entry that starts with it. */
static const char *env_rest(const char *env, size_t len, const char *needle,
                            size_t needle_len)
{
    size_t i = 0;

    while (i < len) {
        size_t n = strnlen(env + i, len - i);
        if (i + n < len && n >= needle_len &&
            memcmp(env + i, needle, needle_len) == 0)
            return env + i + needle_len;
        i += n + 1;
    }
    return NULL;
}

static int env_prefix_match(pid_t pid, void *ctx)
{
    struct tagged_list *l = ctx;
    char path[64];
    char *buf;
    const char *rest = NULL;
    ssize_t n;

    if (pid == getpid())
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    buf = xmalloc(PROC_ENVIRON_MAX);
    n = util_read_small(path, buf, PROC_ENVIRON_MAX);
    if (n > 0)
        rest = env_rest(buf, (size_t)n, l->needle, l->needle_len);
    if (rest != NULL) {
        l->v = xrealloc(l->v, (l->n + 1) * sizeof(*l->v));
        l->v[l->n++] = (struct proc_tagged){pid, xstrdup(rest)};
    }
    free(buf);
    return 0;
}

enum accel_err proc_find_by_env_prefix(const char *key, const char *prefix,
                                       struct proc_tagged **out, size_t *n)
{
    struct tagged_list l;
    char *needle = xasprintf("%s=%s", key, prefix);

    memset(&l, 0, sizeof(l));
    l.needle = needle;
    l.needle_len = strlen(needle);
    if (for_each_pid(env_prefix_match, &l) < 0) {
        free(needle);
        proc_tagged_free(l.v, l.n);
        return ACCEL_ESYS;
    }
    free(needle);
    *out = l.v;
    *n = l.n;
    return ACCEL_OK;
}

void proc_tagged_free(struct proc_tagged *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].rest);
    free(v);
}

enum accel_err proc_reap(pid_t pid, int *status)
{
    int st = 0;
    pid_t r;

    do {
        r = waitpid(pid, &st, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == 0)
        return ACCEL_EBUSY;
    if (r < 0)
        return ACCEL_ENOTFOUND;
    if (status != NULL)
        *status = st;
    return ACCEL_OK;
}

void proc_exit_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status)) {
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        const char *abbrev = sigabbrev_np(WTERMSIG(status));
        snprintf(buf, len, "killed by signal %d (SIG%s)%s", WTERMSIG(status),
                 abbrev ? abbrev : "?",
                 WCOREDUMP(status) ? ", core dumped" : "");
    } else {
        snprintf(buf, len, "wait status 0x%x", (unsigned)status);
    }
}

enum accel_err proc_boot_id(char *buf, size_t len)
{
    ssize_t n = util_read_small("/proc/sys/kernel/random/boot_id", buf, len);

    if (n <= 0)
        return ACCEL_EIO;
    buf[strcspn(buf, "\n")] = '\0';
    return ACCEL_OK;
}

/* ---- Logs ---- */

static uint64_t log_cap(uint64_t max_bytes)
{
    return max_bytes != 0 ? max_bytes : PROC_LOG_MAX_DEFAULT;
}

/* Before a start nobody writes the log: a rename is enough. */
static void rotate_by_rename(const char *path, uint64_t max_bytes)
{
    struct stat sb;
    char *old;

    if (stat(path, &sb) < 0 || (uint64_t)sb.st_size <= log_cap(max_bytes))
        return;
    old = xasprintf("%s.1", path);
    rename(path, old);
    free(old);
}

/* Copy at most max bytes of in to out. */
static int copy_fd(int in, int out, uint64_t max)
{
    char buf[65536];
    ssize_t n;

    for (;;) {
        size_t want = max < sizeof(buf) ? (size_t)max : sizeof(buf);
        if (want == 0)
            return 0;
        n = read(in, buf, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return (int)n;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                return -1;
            off += w;
        }
        max -= (uint64_t)n;
    }
}

enum accel_err proc_rotate_log(const char *path, uint64_t max_bytes)
{
    enum accel_err result = ACCEL_EIO;
    char *tmp = xasprintf("%s.1.tmp", path);
    char *old = xasprintf("%s.1", path);
    struct stat sb;
    int in = -1, out = -1;

    if (stat(path, &sb) < 0 || (uint64_t)sb.st_size <= log_cap(max_bytes)) {
        result = ACCEL_OK;
        goto out;
    }
    in = open(path, O_RDONLY | O_CLOEXEC);
    out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    /* only the last cap bytes: a writer that seeked far ahead made a
     * sparse file whose holes would be written out in full */
    if (in < 0 || out < 0 ||
        lseek(in, (off_t)(sb.st_size - (off_t)log_cap(max_bytes)),
              SEEK_SET) < 0 ||
        copy_fd(in, out, log_cap(max_bytes)) < 0)
        goto out;
    if (rename(tmp, old) < 0 || truncate(path, 0) < 0)
        goto out;
    result = ACCEL_OK;
out:
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    if (result != ACCEL_OK)
        unlink(tmp);
    free(tmp);
    free(old);
    return result;
}

/* ---- Start ---- */

static int env_key_eq(const char *a, const char *b)
{
    size_t ka = strcspn(a, "="), kb = strcspn(b, "=");
    return ka == kb && memcmp(a, b, ka) == 0;
}

/* Does extra[from..m) hold an entry with e's key? */
static int key_in(char *const *extra, size_t from, size_t m, const char *e)
{
    for (size_t j = from; j < m; j++)
        if (env_key_eq(e, extra[j]))
            return 1;
    return 0;
}

/* The inherited environ entries inherit() keeps and extra does not
 * override, then extra where a later entry replaces an earlier one of the
 * same key. Caller frees the array (the strings are borrowed). */
static char **merge_env(char *const *extra, int (*inherit)(const char *))
{
    size_t n = 0, m = 0, k = 0;
    char **out;

    while (environ != NULL && environ[n] != NULL)
        n++;
    while (extra != NULL && extra[m] != NULL)
        m++;
    out = xcalloc(n + m + 1, sizeof(*out));
    for (size_t i = 0; i < n; i++)
        if ((inherit == NULL || inherit(environ[i])) &&
            !key_in(extra, 0, m, environ[i]))
            out[k++] = environ[i];
    for (size_t j = 0; j < m; j++)
        if (!key_in(extra, j + 1, m, extra[j]))
            out[k++] = extra[j];
    out[k] = NULL;
    return out;
}

/* Move fd to >= 3 with CLOEXEC so dup2 onto 0..2 always clears CLOEXEC. */
static int high_fd(int fd)
{
    int h;

    if (fd < 0 || fd >= 3)
        return fd;
    h = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return h;
}

static void report_and_exit(int errfd, int stage)
{
    struct launch_report r = { stage, errno };
    ssize_t w;

    do {
        w = write(errfd, &r, sizeof(r));
    } while (w < 0 && errno == EINTR);
    _exit(127);
}

/*
 * In the child: no new privileges, then become cred. Raw system calls: the
 * libc wrappers of set*id broadcast to every thread of the process, which
 * is not async-signal-safe after a fork of a threaded parent (the child
 * has one thread, and the kernel applies these to the calling thread).
 * Every value is checked afterwards: running as root by accident is worse
 * than not running.
 */
static void child_drop(const struct launch *l)
{
    const struct proc_cred *c = l->cred;
    gid_t groups[1];

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        report_and_exit(l->errfd, STAGE_CRED);
    if (c == NULL)
        return;
    groups[0] = c->gid;
    if (syscall(SYS_setgroups, 1, groups) != 0 ||
        syscall(SYS_setresgid, c->gid, c->gid, c->gid) != 0 ||
        syscall(SYS_setresuid, c->uid, c->uid, c->uid) != 0)
        report_and_exit(l->errfd, STAGE_CRED);
    if (getuid() != c->uid || geteuid() != c->uid || getgid() != c->gid ||
        getegid() != c->gid) {
        errno = EPERM;
        report_and_exit(l->errfd, STAGE_CRED);
    }
}

/* In the child: wait for the parent's go byte; EOF means "do not run". */
static int await_go(int fd)
{
    char c;
    ssize_t n;

    do {
        n = read(fd, &c, 1);
    } while (n < 0 && errno == EINTR);
    return n == 1;
}

/* In the child: async-signal-safe calls only. */
static void child_exec(const struct launch *l)
{
    struct sigaction sa;
    sigset_t none;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &sa, NULL); /* SIGKILL/SIGSTOP and RT gaps fail: fine */
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (l->gowr >= 0)
        close(l->gowr); /* or the parent's close would not be an EOF */
    if (l->gofd >= 0 && !await_go(l->gofd))
        _exit(127); /* the parent could not place us: never run */
    setsid();
    if (dup2(l->devnull, 0) < 0 || dup2(l->logfd, 1) < 0 ||
        dup2(l->logfd, 2) < 0)
        report_and_exit(l->errfd, STAGE_EXEC);
    if (l->errfd > 3)
        close_range(3, (unsigned)l->errfd - 1, 0);
    close_range((unsigned)l->errfd + 1, ~0U, 0);
    child_drop(l);
    if (l->workdir != NULL && chdir(l->workdir) < 0)
        report_and_exit(l->errfd, STAGE_CHDIR);
    environ = l->envp;
    execvp(l->argv[0], l->argv);
    report_and_exit(l->errfd, STAGE_EXEC);
}

static enum accel_err errno_code(int err)
{
    if (err == ENOENT || err == ENOTDIR)
        return ACCEL_ENOTFOUND;
    if (err == EACCES || err == EPERM)
        return ACCEL_EFORBIDDEN;
    return ACCEL_ESYS;
}

static char *launch_cause(const struct proc_spec *spec,
                          const struct launch_report *r)
{
    if (r->stage == STAGE_CRED && spec->cred != NULL)
        return xasprintf("cannot run '%s' as uid %u: %s",
                         spec->name ? spec->name : spec->argv[0],
                         (unsigned)spec->cred->uid, strerror(r->err));
    if (r->stage == STAGE_CRED)
        return xasprintf("cannot run '%s' without new privileges: %s",
                         spec->name ? spec->name : spec->argv[0],
                         strerror(r->err));
    if (r->stage == STAGE_CHDIR)
        return xasprintf("cannot use workdir '%s' for '%s': %s", spec->workdir,
                         spec->name ? spec->name : spec->argv[0],
                         strerror(r->err));
    return xasprintf("cannot run '%s': %s", spec->argv[0], strerror(r->err));
}

/* Read the child's report; 0 bytes means exec succeeded. */
static ssize_t read_report(int fd, struct launch_report *r)
{
    ssize_t n;

    do {
        n = read(fd, r, sizeof(*r));
    } while (n < 0 && errno == EINTR);
    return n;
}

/* Open the descriptors the child inherits; *rfd gets the pipe's read end. */
static enum accel_err open_fds(const struct proc_spec *spec, struct launch *l,
                               int *rfd, char **cause)
{
    const char *who = spec->name ? spec->name : spec->argv[0];
    int p[2];

    if (spec->has_out_fd) {
        l->logfd = fcntl(spec->out_fd, F_DUPFD_CLOEXEC, 3);
    } else if (spec->log_path != NULL) {
        rotate_by_rename(spec->log_path, spec->log_max_bytes);
        l->logfd = open(spec->log_path,
                        O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    } else {
        l->logfd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    }
    l->logfd = high_fd(l->logfd);
    if (l->logfd < 0) {
        set_cause(cause, xasprintf("cannot open log file '%s' for '%s': %s",
                                   spec->log_path ? spec->log_path
                                                  : "/dev/null",
                                   who, strerror(errno)));
        return ACCEL_EIO;
    }
    l->devnull = high_fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (l->devnull < 0 || pipe2(p, O_CLOEXEC) < 0) {
        set_cause(cause, xasprintf("cannot start '%s': %s", who,
                                   strerror(errno)));
        return ACCEL_ESYS;
    }
    *rfd = p[0];
    l->errfd = high_fd(p[1]);
    if (l->errfd < 0) {
        set_cause(cause, xasprintf("cannot start '%s': %s", who,
                                   strerror(errno)));
        return ACCEL_ESYS;
    }
    return ACCEL_OK;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* The go pipe: the child reads l->gofd, the parent writes *wr. */
static enum accel_err open_go(const struct proc_spec *spec, struct launch *l,
                              int *wr, char **cause)
{
    int p[2];

    if (pipe2(p, O_CLOEXEC) < 0) {
        set_cause(cause, xasprintf("cannot start '%s': %s",
                                   spec->name ? spec->name : spec->argv[0],
                                   strerror(errno)));
        return ACCEL_ESYS;
    }
    l->gofd = high_fd(p[0]);
    *wr = p[1];
    l->gowr = p[1];
    return ACCEL_OK;
}

/* Place the waiting child, then let it run (true), or make it exit
 * unexecuted and reap it (false, *cause set). */
static bool release_child(const struct proc_spec *spec, pid_t pid, int *wr,
                          char **cause)
{
    char *why = NULL;
    ssize_t w;

    if (spec->place(pid, spec->place_arg, &why) != 0) {
        close_fd(wr); /* EOF: the child exits before running anything */
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        set_cause(cause, why ? why : xasprintf("cannot place '%s'",
                                                spec->argv[0]));
        return false;
    }
    free(why);
    do {
        w = write(*wr, "g", 1);
    } while (w < 0 && errno == EINTR);
    close_fd(wr);
    return true;
}

/* After the fork: wait for exec or the child's report. */
static enum accel_err await_exec(const struct proc_spec *spec, pid_t pid,
                                 int rfd, struct proc_handle *out,
                                 char **cause)
{
    struct launch_report r;
    ssize_t n = read_report(rfd, &r);
    uint64_t start = 0;

    if (n == (ssize_t)sizeof(r)) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        set_cause(cause, launch_cause(spec, &r));
        return r.stage == STAGE_CRED ? ACCEL_ESYS : errno_code(r.err);
    }
    /* exec'd and unreaped, so /proc/<pid> is there even if it exited */
    if (proc_start_time(pid, &start) != ACCEL_OK)
        start = 0;
    out->pid = pid;
    out->start_time = start;
    return ACCEL_OK;
}

enum accel_err proc_start(const struct proc_spec *spec, struct proc_handle *out,
                          char **cause)
{
    struct launch l = { spec->argv, NULL, spec->workdir, spec->cred,
                        -1, -1, -1, -1, -1 };
    enum accel_err result;
    int rfd = -1, gowr = -1;
    pid_t pid;

    if (spec->argv == NULL || spec->argv[0] == NULL || !*spec->argv[0]) {
        set_cause(cause, xstrdup("no command to run"));
        return ACCEL_EINVAL;
    }
    result = open_fds(spec, &l, &rfd, cause);
    if (result == ACCEL_OK && spec->place != NULL)
        result = open_go(spec, &l, &gowr, cause);
    if (result != ACCEL_OK)
        goto out;
    l.envp = merge_env(spec->env, spec->inherit);
    pid = fork();
    if (pid < 0) {
        result = ACCEL_ESYS;
        set_cause(cause, xasprintf("cannot start '%s': fork: %s",
                                   spec->argv[0], strerror(errno)));
        goto out;
    }
    if (pid == 0)
        child_exec(&l);
    close_fd(&l.errfd); /* else read_report would never see EOF */
    close_fd(&l.gofd);
    if (spec->place != NULL && !release_child(spec, pid, &gowr, cause)) {
        result = ACCEL_ESYS;
        goto out;
    }
    result = await_exec(spec, pid, rfd, out, cause);
out:
    close_fd(&gowr);
    close_fd(&l.gofd);
    close_fd(&l.devnull);
    close_fd(&l.logfd);
    close_fd(&l.errfd);
    close_fd(&rfd);
    free(l.envp);
    return result;
}

/* ---- Stop ---- */

/* The leader is alive but left its group (setpgid): signal it by pid. */
static int leader_outside_group(const struct proc_handle *h)
{
    struct stat_info si;

    return h->pid > 1 && h->start_time != 0 &&
           proc_alive(h->pid, h->start_time) && read_stat(h->pid, &si) == 0 &&
           si.pgrp != h->pid;
}

/* Signal the group, the leader, and the processes tagged key=value. */
static void signal_all(const struct proc_handle *h, const char *key,
                       const char *value, int sig)
{
    pid_t *v = NULL;
    size_t n = 0;

    if (h->pid > 1)
        kill(-h->pid, sig);
    if (leader_outside_group(h))
        kill(h->pid, sig);
    if (key == NULL || proc_find_by_env(key, value, &v, &n) != ACCEL_OK)
        return;
    for (size_t i = 0; i < n; i++)
        kill(v[i], sig);
    free(v);
}

/* Live processes left: group members then tagged ones (may repeat). */
static void survivors(const struct proc_handle *h, const char *key,
                      const char *value, struct pid_list *l)
{
    pid_t *v = NULL;
    size_t n = 0;

    group_members(h->pid, 0, l);
    if (leader_outside_group(h))
        list_add(l, h->pid);
    if (key == NULL || proc_find_by_env(key, value, &v, &n) != ACCEL_OK)
        return;
    for (size_t i = 0; i < n; i++)
        list_add(l, v[i]);
    free(v);
}

/* Reap the leader if it is our child; remember its status. */
static void reap_leader(const struct proc_handle *h, int *status)
{
    int st;

    if (h->pid > 1 && proc_reap(h->pid, &st) == ACCEL_OK && status != NULL)
        *status = st;
}

/* Poll until nothing is left or ms elapse; returns 1 when all are gone. */
static int wait_gone(const struct proc_handle *h, const char *key,
                     const char *value, unsigned ms, int *status)
{
    uint64_t deadline = util_now_ns() + (uint64_t)ms * 1000000ULL;
    struct pid_list l;

    for (;;) {
        reap_leader(h, status);
        survivors(h, key, value, &l);
        free(l.v);
        if (l.n == 0) {
            reap_leader(h, status); /* it may have died since the first */
            return 1;
        }
        if (util_now_ns() >= deadline)
            return 0;
        sleep_ms(PROC_POLL_MS);
    }
}

static char *survivor_cause(const struct proc_handle *h, const char *key,
                            const char *value)
{
    struct pid_list l;
    char list[256] = "";
    size_t used = 0;

    survivors(h, key, value, &l);
    for (size_t i = 0; i < l.n && used + 16 < sizeof(list); i++)
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%d",
                                 i ? ", " : "", (int)l.v[i]);
    free(l.v);
    return xasprintf("%zu process%s of group %d survived SIGKILL: %s", l.n,
                     l.n == 1 ? "" : "es", (int)h->pid, list);
}

void proc_signal_app(const struct proc_handle *h, const char *env_key,
                     const char *env_value, int sig)
{
    signal_all(h, env_key, env_value, sig);
}

int proc_app_alive(const struct proc_handle *h, const char *env_key,
                   const char *env_value)
{
    struct pid_list l;

    survivors(h, env_key, env_value, &l);
    free(l.v);
    return l.n > 0;
}

enum accel_err proc_stop(const struct proc_handle *h, const char *env_key,
                         const char *env_value, unsigned term_ms,
                         unsigned kill_ms, int *out_status, char **cause)
{
    int status = -1;

    signal_all(h, env_key, env_value, SIGTERM);
    if (!wait_gone(h, env_key, env_value, term_ms, &status)) {
        signal_all(h, env_key, env_value, SIGKILL);
        if (!wait_gone(h, env_key, env_value, kill_ms, &status)) {
            set_cause(cause, survivor_cause(h, env_key, env_value));
            if (out_status != NULL)
                *out_status = status;
            return ACCEL_EBUSY;
        }
    }
    if (out_status != NULL)
        *out_status = status;
    return ACCEL_OK;
}

int proc_env_inherited(const char *entry)
{
    static const char *const keep[] = {"LANG=", "LANGUAGE=", "TZ=", "TERM="};

    if (strncmp(entry, "LC_", 3) == 0 && strchr(entry, '=') != NULL)
        return 1; /* LC_ALL, LC_CTYPE, LC_TIME, ... */
    for (size_t i = 0; i < sizeof(keep) / sizeof(*keep); i++)
        if (strncmp(entry, keep[i], strlen(keep[i])) == 0)
            return 1;
    return 0;
}
