/* SPDX-License-Identifier: MIT */
/*
 * test_ledger.c: the reclaim protocol of include/accel/ledger.h, as the
 * shim runs it, and acceld's reads of it (ledger_read, which never maps
 * the file an app can resize). A slot is reclaimed only when its
 * owner is certainly dead: a /proc that cannot be read (EMFILE here) used
 * to count as "dead", and the live process's charge was given away for
 * good (the app's usage read 0 from then on, its quota no longer held).
 */
#include "common/accel_setup.h"
#include "daemon/node/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "accel/ledger.h"
#include "common/util.h"
#include "harness.h"

#define MiB (UINT64_C(1) << 20)

/* A fresh ledger file (acceld's way), mapped; *path gets its name. */
static struct accel_ledger *new_ledger(char **path)
{
    struct accel_ledger *l;
    int fd;
    *path = xasprintf("%s/app-0.ledger", harness_tmp());
    ASSERT_EQ(ledger_create(*path, "app", 0, "GPU-x", 1024 * MiB,
                            (uid_t)-1, (gid_t)-1),
              ACCEL_OK);
    fd = open(*path, O_RDWR | O_CLOEXEC);
    ASSERT(fd >= 0);
    l = mmap(NULL, ACCEL_LEDGER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
             0);
    close(fd);
    ASSERT(l != MAP_FAILED);
    return l;
}

/* Undo new_ledger: unmap l and free its path (the file goes with the
 * test's directory). */
static void drop_ledger(struct accel_ledger *l, char *path)
{
    munmap(l, ACCEL_LEDGER_SIZE);
    free(path);
}

/* Charge `bytes` to slot i under key (what the shim's reserve does). */
static void charge(struct accel_ledger *l, unsigned i, uint64_t key,
                   int64_t bytes)
{
    atomic_store(&l->slots[i].key, key);
    atomic_fetch_add(&l->used, bytes);
    atomic_fetch_add(&l->slots[i].used, bytes);
}

static uint64_t my_key(void)
{
    uint64_t start = accel_ledger_proc_start(getpid());
    ASSERT(start != 0 && start != ACCEL_LEDGER_START_UNKNOWN);
    return accel_ledger_key(getpid(), start);
}

/* The regression: with no descriptor left, /proc cannot be opened; the
 * live owner's 768 MiB must stay charged. */
TEST(ledger_unreadable_proc_is_not_death)
{
    char *path;
    struct accel_ledger *l = new_ledger(&path);
    struct rlimit rl;
    int lowest;
    charge(l, 0, my_key(), (int64_t)(768 * MiB));
    lowest = dup(0);
    ASSERT(lowest >= 0);
    close(lowest);
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = (rlim_t)lowest; /* the next open fails with EMFILE */
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    ASSERT(accel_ledger_proc_start(getpid()) == ACCEL_LEDGER_START_UNKNOWN);
    ASSERT_EQ(errno, EMFILE);
    ASSERT_EQ(accel_ledger_reclaim_all(l), 1); /* still one live slot */
    ASSERT_EQ(atomic_load(&l->used), (int64_t)(768 * MiB));
    ASSERT_EQ(atomic_load(&l->slots[0].used), (int64_t)(768 * MiB));
    rl.rlim_cur = rl.rlim_max;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    ASSERT(atomic_load(&l->slots[0].key) == my_key());
    drop_ledger(l, path);
}

/* A dead owner's charge is left out of acceld's figures and still comes
 * back at the shim's reclaim; a live one's stays. acceld only reads: the
 * file is not changed by ledger_read. */
TEST(ledger_dead_owner_reclaimed_live_kept)
{
    char *path;
    struct accel_ledger *l = new_ledger(&path);
    struct ledger_usage u;
    int status;
    pid_t child = fork();
    ASSERT(child >= 0);
    if (child == 0) {
        uint64_t start = accel_ledger_proc_start(getpid());
        charge(l, 1, accel_ledger_key(getpid(), start),
               (int64_t)(256 * MiB));
        _exit(0);
    }
    ASSERT_EQ(waitpid(child, &status, 0), child);
    charge(l, 0, my_key(), (int64_t)(512 * MiB));
    ASSERT_EQ(atomic_load(&l->used), (int64_t)(768 * MiB));
    ASSERT_EQ(ledger_read(path, &u), ACCEL_OK);
    ASSERT_U64_EQ(u.used, 512 * MiB);
    ASSERT_EQ(u.processes, 1);
    ASSERT(atomic_load(&l->slots[1].key) != 0); /* read, not reclaimed */
    ASSERT_EQ(atomic_load(&l->used), (int64_t)(768 * MiB));
    ASSERT_EQ(accel_ledger_reclaim_all(l), 1); /* the shim's reclaim */
    ASSERT(atomic_load(&l->slots[1].key) == 0);
    ASSERT_EQ(atomic_load(&l->used), (int64_t)(512 * MiB));
    ASSERT_EQ(ledger_read(path, &u), ACCEL_OK);
    ASSERT_U64_EQ(u.used, 512 * MiB);
    drop_ledger(l, path);
}

/* No process attached: a `used` left by one killed between its two
 * updates reads 0, as the reclaim would leave it. */
TEST(ledger_no_process_reads_zero)
{
    char *path;
    struct accel_ledger *l = new_ledger(&path);
    struct ledger_usage u;
    atomic_store(&l->used, (int64_t)(64 * MiB));
    ASSERT_EQ(ledger_read(path, &u), ACCEL_OK);
    ASSERT_U64_EQ(u.used, 0);
    ASSERT_EQ(u.processes, 0);
    ASSERT_U64_EQ(u.limit, 1024 * MiB);
    drop_ledger(l, path);
}

/* A ledger its app cut short (it holds the file open for writing) reads
 * as "not a ledger"; acceld's create makes it whole again with the limit
 * and a set limit on it is refused. With a mapping, acceld died of SIGBUS
 * on the slots past the end of the file. */
TEST(ledger_cut_short_is_not_a_ledger)
{
    char *path;
    struct accel_ledger *l = new_ledger(&path);
    struct ledger_usage u;
    int fd;
    munmap(l, ACCEL_LEDGER_SIZE);
    fd = open(path, O_RDWR | O_CLOEXEC);
    ASSERT(fd >= 0);
    ASSERT_EQ(ftruncate(fd, 4096), 0);
    ASSERT_EQ(ledger_read(path, &u), ACCEL_EPARSE);
    ASSERT_EQ(ledger_set_limit(path, 1), ACCEL_EPARSE);
    ASSERT_EQ(ftruncate(fd, 0), 0);
    ASSERT_EQ(ledger_read(path, &u), ACCEL_EPARSE);
    ASSERT_EQ(ledger_create(path, "app", 0, "GPU-x", 7 * MiB, (uid_t)-1,
                            (gid_t)-1),
              ACCEL_OK);
    ASSERT_EQ(ledger_read(path, &u), ACCEL_OK);
    ASSERT_U64_EQ(u.limit, 7 * MiB);
    ASSERT_EQ(ledger_set_limit(path, 5 * MiB), ACCEL_OK);
    ASSERT_EQ(ledger_read(path, &u), ACCEL_OK);
    ASSERT_U64_EQ(u.limit, 5 * MiB);
    close(fd);
    free(path);
}

/* A ledger its app made longer (a write far past the end, on acceld's
 * disk) is cut back to a ledger's size by the next read, and its content
 * and the app's mapping stay whole. */
TEST(ledger_grown_is_cut_back)
{
    char *path;
    struct accel_ledger *l = new_ledger(&path);
    struct ledger_usage u;
    struct stat st;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    ASSERT(fd >= 0);
    charge(l, 0, my_key(), (int64_t)(3 * MiB));
    ASSERT_EQ(pwrite(fd, "x", 1, (off_t)(64 * MiB)), 1);
    ASSERT_EQ(ledger_read(path, &u), ACCEL_OK);
    ASSERT_U64_EQ(u.used, 3 * MiB);
    ASSERT_EQ(fstat(fd, &st), 0);
    ASSERT_EQ(st.st_size, (off_t)ACCEL_LEDGER_SIZE);
    ASSERT_EQ(atomic_load(&l->slots[0].used), (int64_t)(3 * MiB));
    close(fd);
    drop_ledger(l, path);
}

/* A restart of acceld keeps the slots and usage of a valid ledger and
 * only gives it the new limit (bumping the epoch). */
/* The shim config's "reclaim" line (elastic memory, SPEC 4.4): before its
 * device's line, only for a device that has one; a path with a space is
 * refused; the socket's path is absolute, and short enough for an
 * address (or a /tmp one). */
TEST(ledger_config_reclaim_line)
{
    struct ledger_device dev[2] = {
        {0, 1024, "/r/a-dev0.ledger", "GPU-a", NULL, NULL, "/r/reclaim.sock"},
        {1, 2048, "/r/a-dev1.ledger", "GPU-b", NULL, NULL, NULL},
    };
    char *text = NULL, path[200], longdir[160];

    ASSERT_EQ(ledger_config_text("a", dev, 2, &text), ACCEL_OK);
    ASSERT_STR_EQ(text, "accel-shim 1\napp a\n"
                        "reclaim 0 /r/reclaim.sock\n"
                        "device 0 1024 /r/a-dev0.ledger GPU-a\n"
                        "device 1 2048 /r/a-dev1.ledger GPU-b\n");
    free(text);
    dev[0].reclaim = "/r/re claim.sock";
    ASSERT_EQ(ledger_config_text("a", dev, 1, &text), ACCEL_EINVAL);
    ASSERT_EQ(ledger_reclaim_socket_path(path, sizeof path, "/data/run"),
              ACCEL_OK);
    ASSERT_STR_EQ(path, "/data/run/reclaim.sock");
    memset(longdir, 'x', sizeof longdir - 1);
    longdir[0] = '/';
    longdir[sizeof longdir - 1] = '\0';
    ASSERT_EQ(ledger_reclaim_socket_path(path, sizeof path, longdir),
              ACCEL_OK);
    ASSERT(strncmp(path, "/tmp/accel-rc-", 14) == 0);
    ASSERT(strlen(path) < 108);
}

TEST(ledger_create_again_keeps_usage)
{
    char *path;
    struct accel_ledger *l = new_ledger(&path);
    struct ledger_usage u;
    uint64_t epoch = atomic_load(&l->epoch);
    charge(l, 3, my_key(), (int64_t)(100 * MiB));
    ASSERT_EQ(ledger_create(path, "app", 0, "GPU-x", 2048 * MiB, (uid_t)-1,
                            (gid_t)-1),
              ACCEL_OK);
    ASSERT_U64_EQ(atomic_load(&l->limit), 2048 * MiB);
    ASSERT_U64_EQ(atomic_load(&l->epoch), epoch + 1);
    ASSERT(atomic_load(&l->slots[3].key) == my_key());
    ASSERT_EQ(ledger_read(path, &u), ACCEL_OK);
    ASSERT_U64_EQ(u.used, 100 * MiB);
    ASSERT_EQ(u.processes, 1);
    drop_ledger(l, path);
}

/* The attack of issue 25 in miniature: a child flips the file's size
 * between one page and the whole ledger while this process reads and
 * re-creates it 20,000 times. Every call answers; none faults. */
TEST(ledger_reads_survive_a_flipping_size)
{
    char *path;
    struct accel_ledger *l = new_ledger(&path);
    struct ledger_usage u;
    int status, ok = 0, bad = 0;
    pid_t child;
    munmap(l, ACCEL_LEDGER_SIZE);
    child = fork();
    ASSERT(child >= 0);
    if (child == 0) {
        int fd = open(path, O_RDWR | O_CLOEXEC);
        /* gone with the test, even when a fault kills it */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1)
            _exit(1);
        for (;;) {
            if (fd < 0 || ftruncate(fd, 4096) != 0 ||
                ftruncate(fd, (off_t)ACCEL_LEDGER_SIZE) != 0)
                _exit(1);
        }
    }
    for (int i = 0; i < 20000; i++) {
        enum accel_err rc = ledger_read(path, &u);
        if (rc == ACCEL_OK)
            ok++;
        else if (rc == ACCEL_EPARSE)
            bad++;
        else
            break;
        if (i % 1000 == 0)
            ASSERT_EQ(ledger_create(path, "app", 0, "GPU-x", MiB,
                                    (uid_t)-1, (gid_t)-1),
                      ACCEL_OK);
    }
    kill(child, SIGKILL);
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT(WIFSIGNALED(status)); /* the child was still flipping */
    ASSERT_EQ(ok + bad, 20000);
    free(path);
}

/* An owner that could not read its own start time (key bit 63, start 0)
 * is judged by its pid alone: kept while it lives. */
TEST(ledger_owner_without_start_time_kept_while_alive)
{
    char *path;
    struct accel_ledger *l = new_ledger(&path);
    charge(l, 0, accel_ledger_key(getpid(), 0), (int64_t)(64 * MiB));
    ASSERT_EQ(accel_ledger_reclaim_all(l), 1);
    ASSERT_EQ(atomic_load(&l->used), (int64_t)(64 * MiB));
    drop_ledger(l, path);
}

/* The card's ledger of a time-sliced device: a memfd sealed against
 * shrinking, growing and further seals, so that an app that holds it
 * (every time-sliced app of the card does, to reserve) can neither cut it
 * short under the others' mappings (SIGBUS) nor seal it against their
 * writes; acceld reads and re-limits it through its own descriptor, and a
 * restarted acceld finds the same memfd again through a process holding
 * it (here: this one), never another file. */
TEST(ledger_card_memfd_resists_its_members)
{
    struct ledger_usage u;
    struct stat st, st2;
    uint64_t v = 7;
    int fd = ledger_card_memfd("GPU-x", 8192 * MiB), fd2, plain;
    void *map;

    ASSERT_GE(fd, 0);
    ASSERT_EQ(fstat(fd, &st), 0);
    ASSERT_EQ(st.st_size, (off_t)ACCEL_LEDGER_SIZE);
    ASSERT_EQ(ledger_read_fd(fd, &u), ACCEL_OK);
    ASSERT_EQ(u.limit, 8192 * MiB);
    /* a member's games: no shrink, no grow, no seal against writes */
    ASSERT_EQ(ftruncate(fd, 0), -1);
    ASSERT_EQ(errno, EPERM);
    ASSERT_EQ(ftruncate(fd, (off_t)ACCEL_LEDGER_SIZE + 4096), -1);
    ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
    ASSERT_EQ(errno, EPERM);
    ASSERT_EQ(fstat(fd, &st2), 0);
    ASSERT_EQ(st2.st_size, (off_t)ACCEL_LEDGER_SIZE);
    /* writing stays open to all (a reservation is a write) */
    ASSERT_EQ(pwrite(fd, &v, sizeof v,
                     (off_t)offsetof(struct accel_ledger, unused)),
              (ssize_t)sizeof v);
    /* acceld's new limit */
    ASSERT_EQ(ledger_card_set_limit(fd, 4096 * MiB), ACCEL_OK);
    ASSERT_EQ(ledger_read_fd(fd, &u), ACCEL_OK);
    ASSERT_EQ(u.limit, 4096 * MiB);
    /* adoption after a restart: the same inode, a new descriptor */
    fd2 = ledger_card_adopt((uint64_t)st.st_dev, (uint64_t)st.st_ino);
    ASSERT_GE(fd2, 0);
    ASSERT_NE(fd2, fd);
    ASSERT_EQ(fstat(fd2, &st2), 0);
    ASSERT_EQ(st2.st_ino, st.st_ino);
    ASSERT_EQ(st2.st_dev, st.st_dev);
    close(fd2);
    /* a file of that identity that is not sealed is not adopted */
    plain = memfd_create("accel-card", MFD_CLOEXEC);
    ASSERT_GE(plain, 0);
    ASSERT_EQ(ftruncate(plain, (off_t)ACCEL_LEDGER_SIZE), 0);
    ASSERT_EQ(fstat(plain, &st2), 0);
    ASSERT_EQ(ledger_card_adopt((uint64_t)st2.st_dev, (uint64_t)st2.st_ino),
              -1);
    close(plain);
    /* a process that closed its descriptor but maps it: found through
     * /proc/<pid>/map_files (root only) */
    map = mmap(NULL, ACCEL_LEDGER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
               fd, 0);
    ASSERT(map != MAP_FAILED);
    close(fd);
    if (geteuid() == 0) {
        fd2 = ledger_card_adopt((uint64_t)st.st_dev, (uint64_t)st.st_ino);
        ASSERT_GE(fd2, 0);
        ASSERT_EQ(fstat(fd2, &st2), 0);
        ASSERT_EQ(st2.st_ino, st.st_ino);
        close(fd2);
    }
    munmap(map, ACCEL_LEDGER_SIZE);
    /* nobody holds it any more: nothing to adopt */
    ASSERT_EQ(ledger_card_adopt((uint64_t)st.st_dev, (uint64_t)st.st_ino), -1);
}

/* Start time of the calling process from /proc/self/stat (its pid in the
 * /proc mounted here may not be its getpid(): another pid namespace). */
static uint64_t self_start(void)
{
    char buf[1024], *p;
    int field = 2, fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    for (p = strrchr(buf, ')'); p && *p && field < 22; p++)
        field += *p == ' ';
    return p ? strtoull(p, NULL, 10) : 0;
}

/*
 * Issue 36, item 3: a process in a container (its own pid namespace, where
 * it is pid 1) and a host process share a ledger. The host's reclaim used
 * to judge the container's slot by the host's pid 1 (another start time):
 * "dead", and the live charge given away. Now each slot carries its
 * namespace: the container's live charge stays, acceld reads it as live
 * (through NSpid), and once the container's process is gone the host (in
 * the initial namespace, which sees every process) takes it back.
 */
TEST(ledger_other_pid_namespace_kept_while_alive)
{
    char *path;
    struct accel_ledger *l;
    struct ledger_usage u;
    int ready[2], go[2], status;
    pid_t child;
    char c = 0;

    if (geteuid() != 0 || accel_ledger_pidns_self() != ACCEL_LEDGER_PIDNS_INIT)
        return; /* a new pid namespace needs root; the end needs the init one */
    l = new_ledger(&path);
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(go), 0);
    child = fork();
    ASSERT(child >= 0);
    if (child == 0) { /* the container's runtime: a new pid namespace */
        pid_t inner;
        if (unshare(CLONE_NEWPID) != 0)
            _exit(2);
        inner = fork();
        if (inner == 0) { /* pid 1 of the new namespace: the app */
            uint64_t key = accel_ledger_key(getpid(), self_start());
            int i = accel_ledger_claim_slot(l, key, accel_ledger_pidns_self());
            if (getpid() != 1 || i < 0)
                _exit(3);
            atomic_fetch_add(&l->used, (int64_t)(256 * MiB));
            atomic_fetch_add(&l->slots[i].used, (int64_t)(256 * MiB));
            (void)!write(ready[1], "r", 1);
            (void)!read(go[0], &c, 1);
            _exit(0);
        }
        _exit(inner > 0 && waitpid(inner, &status, 0) == inner &&
                      WIFEXITED(status) ? WEXITSTATUS(status) : 4);
    }
    close(ready[1]);
    close(go[0]);
    ASSERT_EQ(read(ready[0], &c, 1), 1);
    charge(l, 1, my_key(), (int64_t)(512 * MiB)); /* the host's process */
    ASSERT_EQ(accel_ledger_reclaim_all(l), 2);  /* both live: none taken */
    ASSERT_EQ(atomic_load(&l->used), (int64_t)(768 * MiB));
    ASSERT_EQ(ledger_read(path, &u), ACCEL_OK);
    ASSERT_U64_EQ(u.used, 768 * MiB);
    ASSERT_EQ(u.processes, 2);
    ASSERT_EQ(write(go[1], "g", 1), 1);
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_EQ(ledger_read(path, &u), ACCEL_OK);
    ASSERT_U64_EQ(u.used, 512 * MiB); /* the container's process is gone */
    ASSERT_EQ(accel_ledger_reclaim_all(l), 1);
    ASSERT_EQ(atomic_load(&l->used), (int64_t)(512 * MiB));
    close(ready[0]);
    close(go[1]);
    drop_ledger(l, path);
}

/* Run accel_ledger_reclaim_all on l as uid (and gid) `uid`, with no
 * capability (an app's process: its shim reclaims at attach and on a
 * refusal); the live slots it saw, or -1. */
static int reclaim_as(struct accel_ledger *l, uid_t uid)
{
    int status;
    pid_t pid = fork();

    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 ||
            setresuid(uid, uid, uid) != 0)
            _exit(255);
        _exit((int)accel_ledger_reclaim_all(l) & 0x7f);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) == 255)
        return -1;
    return WEXITSTATUS(status);
}

/*
 * A container's process of another uid (or a non-dumpable one) and a host
 * process of the app share a ledger. The host's shim runs without
 * CAP_SYS_PTRACE, so it cannot stat the container process's ns/pid: it
 * used to pass over that process, see no process of the slot's namespace
 * and, being in the initial namespace, take the namespace for gone and the
 * live charge with it. And the container's process, whose /proc is its
 * own, keeps the host's slot it cannot see. Once it is gone, only its
 * charge is taken back.
 */
TEST(ledger_unprivileged_and_inner_reclaimers_keep_live_charges)
{
    char *path;
    struct accel_ledger *l;
    int ready[2], go[2], status, host;
    pid_t child;
    char c = 0;

    if (geteuid() != 0 || accel_ledger_pidns_self() != ACCEL_LEDGER_PIDNS_INIT)
        return; /* a new pid namespace needs root; the end needs the init one */
    l = new_ledger(&path);
    host = accel_ledger_claim_slot(l, my_key(), accel_ledger_pidns_self());
    ASSERT(host >= 0);
    atomic_fetch_add(&l->used, (int64_t)(512 * MiB));
    atomic_fetch_add(&l->slots[host].used, (int64_t)(512 * MiB));
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(go), 0);
    child = fork();
    ASSERT(child >= 0);
    if (child == 0) { /* the container's runtime */
        pid_t inner;
        /* a failed assertion above ends the test: go reads EOF then */
        close(ready[0]);
        close(go[1]);
        if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0)
            _exit(2);
        inner = fork();
        if (inner == 0) { /* pid 1, with a /proc of its namespace */
            int i;
            if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
                mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                      NULL) != 0)
                _exit(3);
            i = accel_ledger_claim_slot(l, accel_ledger_self_key(),
                                        accel_ledger_pidns_self());
            if (getpid() != 1 || i < 0)
                _exit(4);
            atomic_fetch_add(&l->used, (int64_t)(256 * MiB));
            atomic_fetch_add(&l->slots[i].used, (int64_t)(256 * MiB));
            /* the host's process is not in this /proc: kept */
            if (accel_ledger_reclaim_all(l) != 2 ||
                atomic_load(&l->used) != (int64_t)(768 * MiB))
                _exit(5);
            /* another uid (which also makes it non-dumpable) */
            if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) ||
                setresuid(65534, 65534, 65534) != 0)
                _exit(6);
            (void)!write(ready[1], "r", 1);
            (void)!read(go[0], &c, 1);
            _exit(0);
        }
        _exit(inner > 0 && waitpid(inner, &status, 0) == inner &&
                      WIFEXITED(status) ? WEXITSTATUS(status) : 7);
    }
    close(ready[1]);
    close(go[0]);
    if (read(ready[0], &c, 1) != 1) { /* the child failed: say where */
        ASSERT_EQ(waitpid(child, &status, 0), child);
        ASSERT_EQ(WEXITSTATUS(status), 0);
    }
    /* the app's host process, uid 65533 and no capability: both kept */
    ASSERT_EQ(reclaim_as(l, 65533), 2);
    ASSERT_EQ(atomic_load(&l->used), (int64_t)(768 * MiB));
    ASSERT_EQ(write(go[1], "g", 1), 1);
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* the container's process is gone: its charge only */
    ASSERT_EQ(reclaim_as(l, 65533), 1);
    ASSERT_EQ(atomic_load(&l->used), (int64_t)(512 * MiB));
    ASSERT(atomic_load(&l->slots[host].key) == my_key());
    close(ready[0]);
    close(go[1]);
    drop_ledger(l, path);
}

/*
 * A pid namespace whose /proc is the host's (unshare --pid --fork without
 * --mount-proc): getpid() is 2 there, /proc/2 another process. The shim
 * took its start time from /proc/<getpid()>/stat, so the host's reclaim
 * found the namespace's pid 2 with another start time and took its live
 * charge; and a process of that namespace judged its own namespace's slots
 * by the host's processes of the same numbers. Now the key's start time is
 * /proc/self's, and a reclaimer whose /proc is not its namespace's judges
 * every slot by the namespace's processes (NSpid).
 */
TEST(ledger_namespace_without_its_own_proc)
{
    char *path;
    struct accel_ledger *l;
    int claimed[2], up[2], go[2], status, host;
    pid_t child;
    char c = 0;

    if (geteuid() != 0 || accel_ledger_pidns_self() != ACCEL_LEDGER_PIDNS_INIT)
        return;
    l = new_ledger(&path);
    host = accel_ledger_claim_slot(l, my_key(), accel_ledger_pidns_self());
    ASSERT(host >= 0);
    atomic_fetch_add(&l->used, (int64_t)(512 * MiB));
    atomic_fetch_add(&l->slots[host].used, (int64_t)(512 * MiB));
    ASSERT_EQ(pipe(claimed), 0);
    ASSERT_EQ(pipe(up), 0);
    ASSERT_EQ(pipe(go), 0);
    child = fork();
    ASSERT(child >= 0);
    if (child == 0) {
        pid_t init;
        /* a failed assertion above ends the test: go reads EOF then */
        close(up[0]);
        close(go[1]);
        if (unshare(CLONE_NEWPID) != 0)
            _exit(2);
        init = fork();
        if (init == 0) { /* pid 1: forks the owner, then reclaims */
            pid_t owner = fork();
            if (owner == 0) { /* pid 2: claims and charges */
                int i = accel_ledger_claim_slot(l, accel_ledger_self_key(),
                                                accel_ledger_pidns_self());
                if (getpid() != 2 || i < 0)
                    _exit(3);
                atomic_fetch_add(&l->used, (int64_t)(256 * MiB));
                atomic_fetch_add(&l->slots[i].used, (int64_t)(256 * MiB));
                (void)!write(claimed[1], "c", 1);
                (void)!read(go[0], &c, 1);
                _exit(0);
            }
            close(claimed[1]);
            close(go[0]);
            if (owner < 0 || read(claimed[0], &c, 1) != 1)
                _exit(4);
            if (accel_ledger_proc_is_own() || accel_ledger_reclaim_all(l) != 2 ||
                atomic_load(&l->used) != (int64_t)(768 * MiB))
                _exit(5); /* both live: none taken */
            (void)!write(up[1], "u", 1);
            if (waitpid(owner, &status, 0) != owner || !WIFEXITED(status) ||
                WEXITSTATUS(status) != 0)
                _exit(6);
            if (accel_ledger_reclaim_all(l) != 1 ||
                atomic_load(&l->used) != (int64_t)(512 * MiB))
                _exit(7); /* the owner's only */
            _exit(0);
        }
        _exit(init > 0 && waitpid(init, &status, 0) == init &&
                      WIFEXITED(status) ? WEXITSTATUS(status) : 8);
    }
    close(claimed[1]);
    close(up[1]);
    close(go[0]);
    if (read(up[0], &c, 1) != 1) {
        ASSERT_EQ(waitpid(child, &status, 0), child);
        ASSERT_EQ(WEXITSTATUS(status), 0);
    }
    ASSERT_EQ(accel_ledger_reclaim_all(l), 2); /* the host's reclaim */
    ASSERT_EQ(atomic_load(&l->used), (int64_t)(768 * MiB));
    ASSERT_EQ(write(go[1], "g", 1), 1);
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_EQ(atomic_load(&l->used), (int64_t)(512 * MiB));
    close(claimed[0]);
    close(up[0]);
    close(go[1]);
    drop_ledger(l, path);
}

/*
 * A host process of the app is killed while a container's process of the
 * app lives on. The container's process cannot see the host's processes,
 * so its reclaim keeps the dead one's slot, and its charge refused the
 * container's allocations for good. acceld (ledger_read, in the initial
 * namespace) marks the slot dead; the container's next reclaim takes it.
 */
TEST(ledger_dead_host_slot_marked_for_the_container)
{
    char *path;
    struct accel_ledger *l;
    struct ledger_usage u;
    int ready[2], go[2], status;
    pid_t host, child;
    char c = 0;

    if (geteuid() != 0 || accel_ledger_pidns_self() != ACCEL_LEDGER_PIDNS_INIT)
        return;
    l = new_ledger(&path);
    host = fork(); /* the host's process: charges, then dies (a kill) */
    ASSERT(host >= 0);
    if (host == 0) {
        int i = accel_ledger_claim_slot(l, accel_ledger_self_key(),
                                        accel_ledger_pidns_self());
        if (i < 0)
            _exit(2);
        atomic_fetch_add(&l->used, (int64_t)(256 * MiB));
        atomic_fetch_add(&l->slots[i].used, (int64_t)(256 * MiB));
        _exit(0);
    }
    ASSERT_EQ(waitpid(host, &status, 0), host);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(go), 0);
    child = fork();
    ASSERT(child >= 0);
    if (child == 0) {
        pid_t inner;
        close(ready[0]);
        close(go[1]);
        if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0)
            _exit(3);
        inner = fork();
        if (inner == 0) { /* the container's process, its own /proc */
            int i;
            if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
                mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                      NULL) != 0)
                _exit(4);
            i = accel_ledger_claim_slot(l, accel_ledger_self_key(),
                                        accel_ledger_pidns_self());
            if (i < 0)
                _exit(5);
            atomic_fetch_add(&l->used, (int64_t)(128 * MiB));
            atomic_fetch_add(&l->slots[i].used, (int64_t)(128 * MiB));
            if (accel_ledger_reclaim_all(l) != 2 ||
                atomic_load(&l->used) != (int64_t)(384 * MiB))
                _exit(6); /* it cannot tell the host's process is dead */
            (void)!write(ready[1], "r", 1);
            if (read(go[0], &c, 1) != 1)
                _exit(7);
            if (accel_ledger_reclaim_all(l) != 1 ||
                atomic_load(&l->used) != (int64_t)(128 * MiB))
                _exit(8); /* marked: taken back */
            _exit(0);
        }
        _exit(inner > 0 && waitpid(inner, &status, 0) == inner &&
                      WIFEXITED(status) ? WEXITSTATUS(status) : 9);
    }
    close(ready[1]);
    close(go[0]);
    if (read(ready[0], &c, 1) != 1) {
        ASSERT_EQ(waitpid(child, &status, 0), child);
        ASSERT_EQ(WEXITSTATUS(status), 0);
    }
    ASSERT_EQ(ledger_read(path, &u), ACCEL_OK); /* acceld's usage round */
    ASSERT_U64_EQ(u.used, 128 * MiB);
    ASSERT_EQ(u.processes, 1);
    ASSERT_EQ(write(go[1], "g", 1), 1);
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ASSERT_EQ(atomic_load(&l->used), (int64_t)(128 * MiB));
    close(ready[0]);
    close(go[1]);
    drop_ledger(l, path);
}

/* A ledger of app `app` on device `uuid` in dir, whose ctx_cost reads v
 * (what the app's shim, or the app itself, wrote there); its path. */
static char *ctx_ledger(const char *dir, const char *app, const char *uuid,
                        uint64_t v)
{
    char *path = xasprintf("%s/%s-dev0.ledger", dir, app);
    int fd;

    ASSERT_EQ(ledger_create(path, app, 0, uuid, 1024 * MiB, (uid_t)-1,
                            (gid_t)-1),
              ACCEL_OK);
    fd = open(path, O_RDWR | O_CLOEXEC);
    ASSERT(fd >= 0);
    ASSERT(pwrite(fd, &v, sizeof v,
                  (off_t)offsetof(struct accel_ledger, ctx_cost)) ==
           (ssize_t)sizeof v);
    close(fd);
    return path;
}

static uint64_t ctx_of(const char *path)
{
    uint64_t v = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    ASSERT(fd >= 0);
    ASSERT(pread(fd, &v, sizeof v,
                 (off_t)offsetof(struct accel_ledger, ctx_cost)) ==
           (ssize_t)sizeof v);
    close(fd);
    return v;
}

#define MEASURED(b) ((b) | ACCEL_LEDGER_CTX_MEASURED)
#define SEEDED(b) ((b) | ACCEL_LEDGER_CTX_MEASURED | ACCEL_LEDGER_CTX_SEEDED)

/* The votes: a median more than half agree on (within 1/16), from 3. */
TEST(ledger_ctx_vote_needs_an_agreeing_majority)
{
    uint64_t out = 7, a[] = { 384 * MiB, 0, 384 * MiB },
             b[] = { UINT64_C(1) << 61, 384 * MiB, 380 * MiB },
             c[] = { 0, 384 * MiB, 1024 * MiB },
             d[] = { 384 * MiB, 384 * MiB },
             e[] = { 0, 0, 384 * MiB, 384 * MiB };
    ASSERT_EQ(ledger_ctx_vote(a, 3, &out), 1);
    ASSERT_U64_EQ(out, 384 * MiB);
    ASSERT_EQ(ledger_ctx_vote(b, 3, &out), 1);
    ASSERT_U64_EQ(out, 384 * MiB);
    ASSERT_EQ(ledger_ctx_vote(c, 3, &out), 0); /* no two agree */
    ASSERT_EQ(ledger_ctx_vote(d, 2, &out), 0); /* too few */
    ASSERT_EQ(ledger_ctx_vote(e, 4, &out), 0); /* a tie is no majority */
    ASSERT_U64_EQ(out, 384 * MiB); /* untouched when no seed */
}

/* The voters of ledger_seed_ctx: V("a", "b") names those apps; ALL names
 * every app the tests below make. */
#define V(...)                                                                 \
    (const char *const[]){__VA_ARGS__},                                        \
        sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)
#define ALL V("a", "b", "c", "d", "e", "f", "honest", "evil", "evil2", "other")

/* Three apps measured a context of GPU-x at 384 MiB: a new app's ledger
 * on GPU-x starts known at that (measured + seeded); one on GPU-y, where
 * nobody measured, does not; a ledger measured already is left alone. */
TEST(ledger_ctx_seeded_from_other_apps)
{
    char *dir = xasprintf("%s/ledgers", harness_tmp()), *p[6], *n, *y;
    uint64_t got = 0;

    ASSERT(mkdir(dir, 0755) == 0);
    p[0] = ctx_ledger(dir, "a", "GPU-x", MEASURED(384 * MiB));
    p[1] = ctx_ledger(dir, "b", "GPU-x", MEASURED(384 * MiB));
    p[2] = ctx_ledger(dir, "c", "GPU-x", MEASURED(390 * MiB));
    p[3] = ctx_ledger(dir, "d", "GPU-y", 0);
    p[4] = ctx_ledger(dir, "e", "GPU-x", 0); /* not measured: no vote */
    p[5] = ctx_ledger(dir, "f", "GPU-x", MEASURED(100 * MiB));
    n = ctx_ledger(dir, "new", "GPU-x", 0);
    /* another member's apps (not voters) are not read at all */
    ASSERT_EQ(ledger_seed_ctx(n, "GPU-x", V("a", "b"), &got), ACCEL_OK);
    ASSERT_U64_EQ(got, UINT64_MAX);
    ASSERT_U64_EQ(ctx_of(n), 0);
    ASSERT_EQ(ledger_seed_ctx(n, "GPU-x", ALL, &got), ACCEL_OK);
    ASSERT_U64_EQ(got, 384 * MiB);
    ASSERT_U64_EQ(ctx_of(n), SEEDED(384 * MiB));
    y = ctx_ledger(dir, "newy", "GPU-y", 0);
    ASSERT_EQ(ledger_seed_ctx(y, "GPU-y", ALL, &got), ACCEL_OK);
    ASSERT_U64_EQ(got, UINT64_MAX);
    ASSERT_U64_EQ(ctx_of(y), 0);
    free(y);
    y = ctx_ledger(dir, "newy", "GPU-x", MEASURED(200 * MiB));
    ASSERT_EQ(ledger_seed_ctx(y, "GPU-x", ALL, &got), ACCEL_OK);
    ASSERT_U64_EQ(got, UINT64_MAX);
    ASSERT_U64_EQ(ctx_of(y), MEASURED(200 * MiB));
    for (int i = 0; i < 6; i++)
        free(p[i]);
    free(y);
    free(n);
    free(dir);
}

/* A hostile app writes its own ledger's ctx_cost (0, to have the others
 * under-charged, or huge, to deny them), or marks it seeded, or names
 * another device or the new app inside: none of it becomes a seed. */
TEST(ledger_ctx_poisoned_vote_is_not_a_seed)
{
    char *dir = xasprintf("%s/ledgers", harness_tmp()), *p[4], *n;
    uint64_t got = 0;
    int fd;

    ASSERT(mkdir(dir, 0755) == 0);
    p[0] = ctx_ledger(dir, "honest", "GPU-x", MEASURED(384 * MiB));
    p[1] = ctx_ledger(dir, "evil", "GPU-x", MEASURED(0));
    n = ctx_ledger(dir, "new", "GPU-x", 0);
    /* one honest, one hostile: too few to outvote it */
    ASSERT_EQ(ledger_seed_ctx(n, "GPU-x", ALL, &got), ACCEL_OK);
    ASSERT_U64_EQ(got, UINT64_MAX);
    ASSERT_U64_EQ(ctx_of(n), 0);
    /* a vote dressed as acceld's seed is no vote */
    p[2] = ctx_ledger(dir, "evil2", "GPU-x", SEEDED(0));
    ASSERT_EQ(ledger_seed_ctx(n, "GPU-x", ALL, &got), ACCEL_OK);
    ASSERT_U64_EQ(got, UINT64_MAX);
    /* a third app that measured 384 MiB, naming the new app inside (the
     * file's name is acceld's: it is still another app's vote): 0 is
     * outvoted, 384 MiB is the seed */
    p[3] = ctx_ledger(dir, "other", "GPU-x", MEASURED(384 * MiB));
    fd = open(p[3], O_RDWR | O_CLOEXEC);
    ASSERT(fd >= 0);
    ASSERT(pwrite(fd, "new", 4, (off_t)offsetof(struct accel_ledger, app)) ==
           4);
    close(fd);
    ASSERT_EQ(ledger_seed_ctx(n, "GPU-x", ALL, &got), ACCEL_OK);
    ASSERT_U64_EQ(got, 384 * MiB);
    ASSERT_U64_EQ(ctx_of(n), SEEDED(384 * MiB));
    /* huge, to deny the others: outvoted too */
    free(p[1]);
    p[1] = ctx_ledger(dir, "evil", "GPU-x", MEASURED(UINT64_C(1) << 60));
    free(n);
    n = ctx_ledger(dir, "new2", "GPU-x", 0);
    ASSERT_EQ(ledger_seed_ctx(n, "GPU-x", ALL, &got), ACCEL_OK);
    ASSERT_U64_EQ(got, 384 * MiB);
    free(n);
    /* a member's own three apps agreeing on a huge size are a majority
     * only among the apps their owner trusts: another member's new app
     * (whose voters they are not) is not seeded by them; nor is a file
     * whose name merely begins with a voter's */
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "m%d", i);
        free(ctx_ledger(dir, name, "GPU-x", MEASURED(UINT64_C(1) << 40)));
    }
    free(ctx_ledger(dir, "honest-dev", "GPU-x", MEASURED(384 * MiB)));
    n = ctx_ledger(dir, "new3", "GPU-x", 0);
    ASSERT_EQ(ledger_seed_ctx(n, "GPU-x", V("honest", "other"), &got),
              ACCEL_OK);
    ASSERT_U64_EQ(got, UINT64_MAX);
    ASSERT_EQ(ledger_seed_ctx(n, "GPU-x", V("m0", "m1", "m2"), &got),
              ACCEL_OK);
    ASSERT_U64_EQ(got, UINT64_C(1) << 40); /* their owner's own new app */
    for (int i = 0; i < 4; i++)
        free(p[i]);
    free(n);
    free(dir);
}

/* acceld's own measure (node/devices/ctxprobe.c) seeds a new ledger with
 * no vote, marked measured and seeded, and is read back by
 * ledger_ctx_read; a ledger one of the app's processes measured already
 * keeps its figure, and flag bits in the size are not taken as bytes. */
TEST(ledger_ctx_seeded_from_acceld_measure)
{
    char *dir = xasprintf("%s/ledgers", harness_tmp()), *n, *m, *gone;

    ASSERT(mkdir(dir, 0755) == 0);
    n = ctx_ledger(dir, "new", "GPU-x", 0);
    ASSERT_EQ(ledger_seed_ctx_own(n, 300 * MiB), ACCEL_OK);
    ASSERT_U64_EQ(ctx_of(n), SEEDED(300 * MiB));
    ASSERT_U64_EQ(ledger_ctx_read(n), SEEDED(300 * MiB));
    /* once seeded (or measured), a later seed changes nothing */
    ASSERT_EQ(ledger_seed_ctx_own(n, 100 * MiB), ACCEL_OK);
    ASSERT_U64_EQ(ctx_of(n), SEEDED(300 * MiB));
    m = ctx_ledger(dir, "measured", "GPU-x", MEASURED(200 * MiB));
    ASSERT_EQ(ledger_seed_ctx_own(m, 300 * MiB), ACCEL_OK);
    ASSERT_U64_EQ(ledger_ctx_read(m), MEASURED(200 * MiB));
    free(m);
    m = ctx_ledger(dir, "flags", "GPU-x", 0);
    ASSERT_EQ(ledger_seed_ctx_own(m, MEASURED(64 * MiB)), ACCEL_OK);
    ASSERT_U64_EQ(ctx_of(m), SEEDED(64 * MiB));
    gone = xasprintf("%s/none-dev0.ledger", dir);
    ASSERT_EQ(ledger_seed_ctx_own(gone, 300 * MiB), ACCEL_ENOTFOUND);
    ASSERT_U64_EQ(ledger_ctx_read(gone), 0);
    free(gone);
    free(m);
    free(n);
    free(dir);
}

#define LIST(XX)                                                               \
    XX(ledger_unreadable_proc_is_not_death)                                    \
    XX(ledger_dead_owner_reclaimed_live_kept)                                  \
    XX(ledger_no_process_reads_zero)                                           \
    XX(ledger_cut_short_is_not_a_ledger)                                       \
    XX(ledger_create_again_keeps_usage)                                        \
    XX(ledger_grown_is_cut_back)                                               \
    XX(ledger_reads_survive_a_flipping_size)                                   \
    XX(ledger_owner_without_start_time_kept_while_alive)                       \
    XX(ledger_card_memfd_resists_its_members)                                  \
    XX(ledger_other_pid_namespace_kept_while_alive)                            \
    XX(ledger_unprivileged_and_inner_reclaimers_keep_live_charges)            \
    XX(ledger_namespace_without_its_own_proc)                                 \
    XX(ledger_dead_host_slot_marked_for_the_container)                        \
    XX(ledger_config_reclaim_line)                                             \
    XX(ledger_ctx_vote_needs_an_agreeing_majority)                             \
    XX(ledger_ctx_seeded_from_other_apps)                                      \
    XX(ledger_ctx_poisoned_vote_is_not_a_seed)                                \
    XX(ledger_ctx_seeded_from_acceld_measure)
TEST_MAIN(LIST)
