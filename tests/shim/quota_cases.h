/* SPDX-License-Identifier: MIT */
/*
 * quota_cases.h: the memory-quota cases that CUDA (shim_case.c) and HIP
 * (hip_case.c) share, run against either API through a table of what
 * differs: the allocation paths, the plain allocation and free, the
 * out-of-memory code and the fake's record. The same ledger, the same quota
 * rules, the same races (processes on one quota, fork, kill -9).
 */
#ifndef ACCEL_TESTS_SHIM_QUOTA_CASES_H
#define ACCEL_TESTS_SHIM_QUOTA_CASES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "check.h"
#include "fake_cuda.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

/* What an allocation hands back, as each API keeps it: CUDA a number
 * (CUdeviceptr, or a handle), HIP a pointer. */
union gpu_key {
    unsigned long long dptr;
    void *ptr;
};

/* One allocation path of an API: allocate about `bytes` into *key, release
 * key. fill: how many more allocations of the path the quota takes before
 * the one refused (contexts: 256 MiB each on the stand-in of that test, so
 * three more after the first fill 1 GiB; 0 for the others, whose first
 * takes 768 MiB). settle: what makes the device really give the memory
 * back after the release (a stream-ordered pool's synchronize), or NULL. */
struct alloc_path {
    const char *name;
    int (*alloc)(uint64_t bytes, union gpu_key *key);
    int (*release)(union gpu_key key);
    int fill;
    int (*settle)(void);
};

/* What the shared cases need of an API; its codes are 0 for success. */
struct gpu_api {
    const char *prog;    /* this program's name, for the children it execs */
    const char *fake;    /* what messages call the fake ("driver", "HIP") */
    int oom;             /* the API's out-of-memory code */
    int (*alloc)(uint64_t bytes, union gpu_key *key); /* the plain one */
    int (*release)(union gpu_key key);                /* its free */
    struct fake_cuda_stats *(*record)(void);     /* the fake's record */
    const struct alloc_path *paths;
    size_t npaths;
};

/* The ledger of this test's app (XDG_RUNTIME_DIR, ACCEL_APP) on its device
 * (FAKE_CUDA_DEVICE, the fakes' current device; 0 when unset). */
const char *ledger_path_env(void);
/* Its used bytes: 0 before anything was charged, all ones when unreadable. */
uint64_t ledger_used(void);

unsigned rnd(unsigned *s);
pid_t spawn(char *const argv[], int out_fd);
int wait_ok(pid_t pid);

/* A process of the same app run in step with this one (the importer of a
 * shared VMM handle): "prog what arg" with its stdin and stdout on pipes
 * of ours. peer_start: 0, or -1; peer_hear: whether it said `want` (one
 * byte); peer_go: tell it to go on; peer_end: whether it exited 0. In the
 * peer, peer_say and peer_wait talk back. */
struct peer {
    pid_t pid;
    int to, from;         /* its stdin, its stdout */
};
int peer_start(struct peer *p, const char *prog, const char *what,
               const char *arg);
int peer_hear(struct peer *p, char want);
int peer_go(struct peer *p);
int peer_end(struct peer *p);
int peer_say(char c);
int peer_wait(void);

/* Allocate 768 MiB (of the tests' 1 GiB), say "ready" on stdout, wait to
 * be killed. */
void case_hold(const struct gpu_api *api);

/*
 * The shared cases by argv: refuse PATH, driver_fail, worker ITERS MAX
 * SEED START [fixed], stress NPROC ITERS MAX LIMIT [fixed], hold, full,
 * kill, fork. 1 when argv named one (it ran), 0 otherwise.
 */
int run_quota_case(const struct gpu_api *api, int argc, char **argv);

/* The program's end: the physical peak of this app (ACCEL_APP) on the
 * stand-in card checked against the quota its environment sets (the
 * smallest of ACCEL_MEMORY_LIMIT and CUDA_DEVICE_MEMORY_LIMIT[_i]), then
 * the line of failures and the exit status. */
int cases_done(const struct gpu_api *api, const char *name);

#endif /* ACCEL_TESTS_SHIM_QUOTA_CASES_H */
