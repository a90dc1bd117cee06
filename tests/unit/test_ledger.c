/* SPDX-License-Identifier: MIT */
/*
 * test_ledger.c: the reclaim protocol of include/accel/ledger.h, as acceld
 * (ledger_read) and the shim run it. A slot is reclaimed only when its
 * owner is certainly dead: a /proc that cannot be read (EMFILE here) used
 * to count as "dead", and the live process's charge was given away for
 * good (the app's usage read 0 from then on, its quota no longer held).
 */
#include "common/accel_setup.h"
#include "daemon/node/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

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
    munmap(l, ACCEL_LEDGER_SIZE);
    free(path);
}

/* A dead owner's charge still comes back, and a live one's stays. */
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
    ASSERT_EQ(ledger_read(path, &u), ACCEL_OK); /* acceld's read reclaims */
    ASSERT_U64_EQ(u.used, 512 * MiB);
    ASSERT_EQ(u.processes, 1);
    ASSERT(atomic_load(&l->slots[1].key) == 0);
    munmap(l, ACCEL_LEDGER_SIZE);
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
    munmap(l, ACCEL_LEDGER_SIZE);
    free(path);
}

#define LIST(XX)                                                               \
    XX(ledger_unreadable_proc_is_not_death)                                    \
    XX(ledger_dead_owner_reclaimed_live_kept)                                  \
    XX(ledger_owner_without_start_time_kept_while_alive)
TEST_MAIN(LIST)
