/* SPDX-License-Identifier: MIT */
/*
 * bench_history.c: what the metric history costs (docs/benchmarks.md): a
 * day at 15 s for 8 GPUs and N app bindings (default 20): memory, the time
 * of one sample, of one save (write, fsync, rename) and of the load at
 * start, and the file's size.
 *   bench_history [BINDINGS [DIR]]
 */
#include "common/accel_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/node/history/history.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    int nb = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 20;
    const char *dir = argc > 2 ? argv[2] : "/tmp";
    char *path = xasprintf("%s/bench-history-%d.bin", dir, (int)getpid());
    struct history_dev_sample dev[8];
    struct history_bind_sample *b = xcalloc((size_t)nb + 1, sizeof(*b));
    char ids[8][32], apps[nb + 1][32];
    struct history *h = NULL;
    double t0, rec, save, load;
    struct stat st;

    for (int i = 0; i < 8; i++) {
        snprintf(ids[i], sizeof ids[i], "GPU-%02d", i);
        dev[i] = (struct history_dev_sample){ids[i], "node", "H100", "550",
                                             i, 50, 1e9, 8e10, 300, 60};
    }
    for (int i = 0; i < nb; i++) {
        snprintf(apps[i], sizeof apps[i], "app-%04d", i);
        b[i] = (struct history_bind_sample){apps[i], "alice", ids[i % 8],
                                            "node", 2e9, 4e9, 0, 30};
    }
    history_new(&h, 15, 86400, path, NULL);
    t0 = now_s();
    for (int k = 0; k < 5760; k++) {
        dev[k % 8].util = k % 100;
        history_record(h, 1000000 + 15 * (int64_t)k, dev, 8, b, (size_t)nb);
    }
    rec = (now_s() - t0) / 5760;
    t0 = now_s();
    history_save(h, NULL);
    save = now_s() - t0;
    printf("8 GPUs + %d bindings, 24 h at 15 s (5760 samples)\n", nb);
    printf("memory            %zu bytes (%.2f MiB)\n", history_bytes(h),
           history_bytes(h) / 1048576.0);
    history_free(h);
    stat(path, &st);
    t0 = now_s();
    history_new(&h, 15, 86400, path, NULL);
    load = now_s() - t0;
    printf("one sample        %.1f us\n", rec * 1e6);
    printf("one save          %.1f ms (file %lld bytes)\n", save * 1e3,
           (long long)st.st_size);
    printf("load at start     %.1f ms\n", load * 1e3);
    history_free(h);
    unlink(path);
    free(path);
    free(b);
    return 0;
}
