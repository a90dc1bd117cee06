// SPDX-License-Identifier: MIT
//
// ts_turns.cu: the workloads of ts_turns.sh (issue 49, item 5): what the
// stand-in driver's time-slicing figures assume, measured on a real GPU.
//
//   ts_turns busy SECONDS FILE        200 us kernels, a synchronize every 8
//   ts_turns burst SECONDS GAP_US FILE
//                                     bursts of 20 kernels of 50 us, a
//                                     synchronize, a host gap of GAP_US
//   ts_turns migrate MIB              managed memory moved to the host and
//                                     back by prefetch: "to_host_gbps X
//                                     to_dev_gbps Y" (the link a switch
//                                     pages over)
// busy/burst: each kernel's %globaltimer start and end go to FILE; prints
// "units N device_us D p99_wait_us P" (the wait: each burst's first launch,
// the turn's, the first burst's left out).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpucheck.h"

#define TRY(call)                                                          \
    do {                                                                   \
        cudaError_t e_ = (call);                                           \
        if (e_ != cudaSuccess) {                                           \
            printf("error %s at %s\n", cudaGetErrorName(e_), #call);       \
            return 2;                                                      \
        }                                                                  \
    } while (0)

__global__ void spin(unsigned long long *iv, int i, unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
    iv[2 * i] = t0;
    iv[2 * i + 1] = t;
}

__global__ void touch(char *p, size_t n)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x * 4096)
        p[i * 4096 % n] = 1;
}

/* cudaMemPrefetchAsync to the host (dev < 0) or device dev: CUDA 13 takes
 * a cudaMemLocation, earlier releases a device number. */
static cudaError_t prefetch(void *p, size_t n, int dev)
{
#if CUDART_VERSION >= 13000
    cudaMemLocation loc;
    memset(&loc, 0, sizeof(loc));
    loc.type = dev < 0 ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    loc.id = dev < 0 ? 0 : dev;
    return cudaMemPrefetchAsync(p, n, loc, 0, 0);
#else
    return cudaMemPrefetchAsync(p, n, dev < 0 ? cudaCpuDeviceId : dev, 0);
#endif
}

static int cmp_ull(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a;
    unsigned long long y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

static int work(int bursty, double seconds, unsigned gap_us, const char *file)
{
    const int cap = 200000;
    unsigned long long *iv, *h, *waits, t_end;
    int n = 0, nw = 0, units = 0;
    double dev_us = 0;
    TRY(cudaMalloc(&iv, 2 * sizeof(*iv) * cap));
    waits = (unsigned long long *)calloc(cap, sizeof(*waits));
    if (waits == NULL)
        return 2;
    t_end = gc_now_ns() + (unsigned long long)(seconds * 1e9);
    while (n < cap - 20 && gc_now_ns() < t_end) {
        int k = bursty ? 20 : 8;
        unsigned long long ns = bursty ? 50000ull : 200000ull;
        unsigned long long t0 = gc_now_ns();
        for (int b = 0; b < k; b++, n++) {
            spin<<<1, 1>>>(iv, n, ns);
            if (b == 0 && units > 0)
                waits[nw++] = gc_now_ns() - t0;
        }
        TRY(cudaDeviceSynchronize());
        dev_us += k * ns / 1e3;
        units += bursty ? 1 : k;
        if (bursty && gap_us > 0) {
            struct timespec g = {(time_t)(gap_us / 1000000),
                                 (long)(gap_us % 1000000) * 1000L};
            nanosleep(&g, NULL);
        }
    }
    h = (unsigned long long *)malloc(2 * sizeof(*h) * n);
    if (h == NULL)
        return 2;
    TRY(cudaMemcpy(h, iv, 2 * sizeof(*h) * n, cudaMemcpyDeviceToHost));
    FILE *f = fopen(file, "w");
    if (f == NULL)
        return 2;
    for (int i = 0; i < n; i++)
        fprintf(f, "%llu %llu\n", h[2 * i], h[2 * i + 1]);
    fclose(f);
    qsort(waits, nw, sizeof(*waits), cmp_ull);
    printf("units %d device_us %.0f p99_wait_us %.1f\n", units, dev_us,
           nw ? waits[(nw * 99 + 99) / 100 - 1] / 1e3 : 0.0);
    return 0;
}

static int migrate(size_t mib)
{
    size_t n = mib << 20;
    char *p;
    int dev = 0;
    cudaEvent_t a, b, c;
    float to_host = 0, to_dev = 0;
    TRY(cudaMallocManaged(&p, n));
    TRY(cudaEventCreate(&a));
    TRY(cudaEventCreate(&b));
    TRY(cudaEventCreate(&c));
    touch<<<256, 256>>>(p, n); // resident on the device
    TRY(cudaDeviceSynchronize());
    for (int round = 0; round < 3; round++) { // best of 3
        float h, d;
        TRY(cudaEventRecord(a));
        TRY(prefetch(p, n, -1));
        TRY(cudaEventRecord(b));
        TRY(prefetch(p, n, dev));
        TRY(cudaEventRecord(c));
        TRY(cudaEventSynchronize(c));
        TRY(cudaEventElapsedTime(&h, a, b));
        TRY(cudaEventElapsedTime(&d, b, c));
        if (to_host == 0 || h < to_host)
            to_host = h;
        if (to_dev == 0 || d < to_dev)
            to_dev = d;
    }
    printf("to_host_gbps %.2f to_dev_gbps %.2f\n", n / (to_host * 1e6),
           n / (to_dev * 1e6));
    TRY(cudaFree(p));
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "busy") == 0 && argc == 4)
        return work(0, atof(argv[2]), 0, argv[3]);
    if (strcmp(mode, "burst") == 0 && argc == 5)
        return work(1, atof(argv[2]), (unsigned)strtoul(argv[3], NULL, 10),
                    argv[4]);
    if (strcmp(mode, "migrate") == 0 && argc == 3)
        return migrate(strtoull(argv[2], NULL, 10));
    fprintf(stderr, "usage: see the head of ts_turns.cu\n");
    return 2;
}
