// SPDX-License-Identifier: MIT
//
// rt.cu: CUDA-runtime workloads for run-all.sh (built with nvcc, also with
// --default-stream per-thread). The runtime reaches the driver through
// cuGetProcAddress, as PyTorch does; the VMM mode also calls the driver
// directly (linked -lcuda), as llama.cpp does.
//
//   rt ctx | cublas           context (and cuBLAS handle; GPUCHECK_CUBLAS names
//                             the library when it is off the path): "ctx|cublas
//                             physical P charged C"
//   rt fill CHUNK_MIB HOLD_MS cudaMalloc until refused: "held H err E
//                             physical P charged C"
//   rt vmm POOL_MIB CHUNK_MIB HOLD_MS
//                             llama.cpp's VMM pool, then cudaMalloc to the
//                             refusal: "vmm V held H err E physical P ..."
//   rt calls MIB              each allocation call's effect: "call NAME
//                             charged_delta A physical_delta B freed_charged
//                             C freed_physical D"
//   rt graph HOLD_MS          fill, give 512 MiB back, then a captured graph
//                             with a 1 GiB memory node: "graph ..."
//   rt launch N | allocfree N "launch_ns X" | "allocfree_ns X"
//   rt view                   "rt_total T rt_free F"
//   rt ts SECONDS FILE        2 ms kernels for SECONDS; each kernel's
//                             %globaltimer start and end go to FILE
// physical: the device's used memory (meter, outside this process) minus
// what it was before the first CUDA call; charged: total - free of
// cudaMemGetInfo (the shim's view under the shim).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gpucheck.h"

static long long base_used = -1;

static long long physical()
{
    long long used, proc;
    if (base_used < 0 || gc_outside(&used, &proc) != 0)
        return -1;
    return used - base_used;
}

static long long charged()
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        return -1;
    return (long long)tot - (long long)fr;
}

#define TRY(call)                                                          \
    do {                                                                   \
        cudaError_t e_ = (call);                                           \
        if (e_ != cudaSuccess) {                                           \
            printf("error %s at %s\n", cudaGetErrorName(e_), #call);       \
            return 2;                                                      \
        }                                                                  \
    } while (0)

__global__ void nop() {}

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

static unsigned long long fill(void **p, int cap, size_t chunk, int *n,
                               cudaError_t *err)
{
    *n = 0;
    *err = cudaSuccess;
    while (*n < cap) {
        *err = cudaMalloc(&p[*n], chunk);
        if (*err != cudaSuccess)
            break;
        (*n)++;
    }
    cudaGetLastError(); // the refusal is not sticky
    return (unsigned long long)*n * chunk;
}

static int vmm(size_t pool, size_t chunk, unsigned hold_ms)
{
    CUmemAllocationProp prop = {};
    CUmemAccessDesc acc = {};
    CUdeviceptr va;
    size_t gran = 0, mapped = 0;
    static void *p[4096];
    int n;
    cudaError_t err;

    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    if (cuMemGetAllocationGranularity(&gran, &prop,
                                      CU_MEM_ALLOC_GRANULARITY_MINIMUM) ||
        gran == 0)
        gran = 2 * GC_MIB;
    chunk = (chunk + gran - 1) / gran * gran;
    if (cuMemAddressReserve(&va, pool, 0, 0, 0) != CUDA_SUCCESS) {
        printf("error cuMemAddressReserve failed\n");
        return 2;
    }
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    while (mapped + chunk <= pool) {
        CUmemGenericAllocationHandle h;
        if (cuMemCreate(&h, chunk, &prop, 0) != CUDA_SUCCESS)
            break;
        if (cuMemMap(va + mapped, chunk, 0, h, 0) != CUDA_SUCCESS ||
            cuMemSetAccess(va + mapped, chunk, &acc, 1) != CUDA_SUCCESS) {
            printf("error cuMemMap/cuMemSetAccess failed\n");
            return 2;
        }
        cuMemRelease(h); // as ggml_cuda_pool_vmm does: the mapping keeps it
        mapped += chunk;
    }
    unsigned long long held = fill(p, 4096, chunk, &n, &err);
    printf("vmm %zu held %llu err %s physical %lld charged %lld\n", mapped,
           held, cudaGetErrorName(err), physical(), charged());
    fflush(stdout);
    gc_sleep_ms(hold_ms);
    return 0;
}

struct step {
    long long c0, p0, c1, p1;
};

static void before(step *s) { s->c0 = charged(); s->p0 = physical(); }
static void after(step *s) { s->c1 = charged(); s->p1 = physical(); }
static void report(const char *name, size_t bytes, const step &a,
                   const step &f)
{
    printf("call %s bytes %zu charged_delta %lld physical_delta %lld "
           "freed_charged %lld freed_physical %lld\n", name, bytes,
           a.c1 - a.c0, a.p1 - a.p0, f.c1 - a.c0, f.p1 - a.p0);
    fflush(stdout);
}

// a stream-ordered allocation (from the default pool, or from pool) and its
// free, each measured after a synchronize; *a: the allocation's step
static cudaError_t async_step(const char *name, size_t s, cudaMemPool_t pool,
                              cudaStream_t st, step *a)
{
    step f;
    void *p;
    cudaError_t e;

    before(a);
    e = pool ? cudaMallocFromPoolAsync(&p, s, pool, st)
             : cudaMallocAsync(&p, s, st);
    if (e != cudaSuccess || (e = cudaStreamSynchronize(st)) != cudaSuccess)
        return e;
    after(a);
    before(&f);
    if ((e = cudaFreeAsync(p, st)) != cudaSuccess ||
        (e = cudaStreamSynchronize(st)) != cudaSuccess)
        return e;
    after(&f);
    report(name, s, *a, f);
    return cudaSuccess;
}

static int calls(size_t s)
{
    step a, f;
    void *p;
    size_t pitch;
    cudaStream_t st;
    TRY(cudaStreamCreate(&st));

    before(&a); TRY(cudaMalloc(&p, s)); after(&a);
    before(&f); TRY(cudaFree(p)); after(&f);
    report("cudaMalloc", s, a, f);

    before(&a);
    TRY(cudaMallocManaged(&p, s));
    TRY(cudaMemset(p, 1, s)); // resident on the device
    TRY(cudaDeviceSynchronize());
    after(&a);
    before(&f); TRY(cudaFree(p)); after(&f);
    report("cudaMallocManaged", s, a, f);

    before(&a); TRY(cudaMallocPitch(&p, &pitch, 16384, s / 16384)); after(&a);
    before(&f); TRY(cudaFree(p)); after(&f);
    report("cudaMallocPitch", s, a, f);

    cudaArray_t arr;
    cudaChannelFormatDesc d = cudaCreateChannelDesc<float>();
    before(&a);
    TRY(cudaMalloc3DArray(&arr, &d, make_cudaExtent(1024, 1024, s / (4 << 20))));
    after(&a);
    before(&f); TRY(cudaFreeArray(arr)); after(&f);
    report("cudaMalloc3DArray", s, a, f);

    TRY(async_step("cudaMallocAsync", s, NULL, st, &a));

    // a pool that keeps what is freed into it (PyTorch's cudaMallocAsync
    // backend sets the default pool so): freed memory stays on the device
    cudaMemPool_t pool;
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    uint64_t keep = UINT64_MAX;
    TRY(cudaMemPoolCreate(&pool, &props));
    TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    TRY(async_step("cudaMallocFromPoolAsync(slack)", s, pool, st, &a));
    step t = a;
    TRY(cudaMemPoolTrimTo(pool, 0));
    after(&t);
    report("cudaMemPoolTrimTo", s, t, t);
    TRY(cudaMemPoolDestroy(pool));

    before(&a); TRY(cudaMallocHost(&p, s)); after(&a);
    before(&f); TRY(cudaFreeHost(p)); after(&f);
    report("cudaMallocHost", s, a, f);

    before(&a); TRY(cudaHostAlloc(&p, s, cudaHostAllocMapped)); after(&a);
    before(&f); TRY(cudaFreeHost(p)); after(&f);
    report("cudaHostAlloc(mapped)", s, a, f);
    return 0;
}

static int graph(unsigned hold_ms)
{
    static void *p[4096];
    int n;
    cudaError_t err, ei, el = cudaErrorUnknown, es = cudaErrorUnknown;
    cudaStream_t st;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    void *q;
    size_t node = 1024 * GC_MIB;

    unsigned long long held = fill(p, 4096, 64 * GC_MIB, &n, &err);
    for (int i = 0; i < 8 && n > 0; i++) // 512 MiB back under the quota
        cudaFree(p[--n]), held -= 64 * GC_MIB;
    TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    TRY(cudaMallocAsync(&q, node, st));
    TRY(cudaMemsetAsync(q, 1, node, st));
    TRY(cudaFreeAsync(q, st));
    TRY(cudaStreamEndCapture(st, &g));
    ei = cudaGraphInstantiate(&ge, g, 0);
    if (ei == cudaSuccess) {
        el = cudaGraphLaunch(ge, st);
        es = cudaStreamSynchronize(st);
    }
    cudaGetLastError();
    printf("graph node %zu held %llu instantiate %s launch %s sync %s "
           "physical %lld charged %lld\n", node, held, cudaGetErrorName(ei),
           cudaGetErrorName(el), cudaGetErrorName(es), physical(), charged());
    fflush(stdout);
    gc_sleep_ms(hold_ms);
    return 0;
}

static int ts(double seconds, const char *file)
{
    const int cap = 20000;
    unsigned long long *iv, *h;
    int n = 0;
    TRY(cudaMalloc(&iv, 2 * sizeof(*iv) * cap));
    unsigned long long t0 = gc_now_ns();
    while (n < cap && (double)(gc_now_ns() - t0) < seconds * 1e9) {
        for (int b = 0; b < 25 && n < cap; b++, n++)
            spin<<<1, 1>>>(iv, n, 2000000ull);
        TRY(cudaDeviceSynchronize());
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
    printf("kernels %d\n", n);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    unsigned long long a = gc_arg(argc, argv, 2), b = gc_arg(argc, argv, 3);
    unsigned long long c = gc_arg(argc, argv, 4);
    long long proc;

    if (gc_outside(&base_used, &proc) != 0)
        base_used = -1;
    TRY(cudaFree(0)); // the primary context
    if (strcmp(mode, "ctx") == 0 || strcmp(mode, "cublas") == 0) {
        if (strcmp(mode, "cublas") == 0) {
            const char *libs[] = { getenv("GPUCHECK_CUBLAS"), "libcublas.so",
                                   "libcublas.so.13", "libcublas.so.12", NULL };
            if (libs[0] == NULL || libs[0][0] == '\0')
                libs[0] = "libcublas.so";
            void *l = NULL, *hd = NULL;
            int (*create)(void **) = NULL;
            for (int i = 0; libs[i] && l == NULL; i++)
                l = dlopen(libs[i], RTLD_NOW);
            if (l)
                *(void **)&create = dlsym(l, "cublasCreate_v2");
            if (create == NULL) {
                printf("skipped: no libcublas with cublasCreate_v2\n");
                return GC_SKIP;
            }
            if (create(&hd) != 0) {
                printf("error cublasCreate failed\n");
                return 2;
            }
        }
        printf("%s physical %lld charged %lld\n", mode, physical(), charged());
        fflush(stdout);
        gc_sleep_ms((unsigned)a);
        return 0;
    }
    if (strcmp(mode, "fill") == 0 && a > 0) {
        static void *p[4096];
        int n;
        cudaError_t err;
        unsigned long long held = fill(p, 4096, a * GC_MIB, &n, &err);
        printf("held %llu err %s physical %lld charged %lld\n", held,
               cudaGetErrorName(err), physical(), charged());
        nop<<<1, 1>>>();
        printf("launch_after_fill %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
        fflush(stdout);
        gc_sleep_ms((unsigned)b);
        return 0;
    }
    if (strcmp(mode, "vmm") == 0 && a > 0 && b > 0)
        return vmm(a * GC_MIB, b * GC_MIB, (unsigned)c);
    if (strcmp(mode, "calls") == 0 && a > 0)
        return calls(a * GC_MIB);
    if (strcmp(mode, "graph") == 0)
        return graph((unsigned)a);
    if (strcmp(mode, "launch") == 0 && a > 0) {
        nop<<<1, 1>>>();
        TRY(cudaDeviceSynchronize());
        unsigned long long t0 = gc_now_ns();
        for (unsigned long long i = 0; i < a; i++)
            nop<<<1, 1>>>();
        TRY(cudaDeviceSynchronize());
        printf("launch_ns %.1f\n", (double)(gc_now_ns() - t0) / (double)a);
        return 0;
    }
    if (strcmp(mode, "allocfree") == 0 && a > 0) {
        void *p;
        unsigned long long t0 = gc_now_ns();
        for (unsigned long long i = 0; i < a; i++) {
            TRY(cudaMalloc(&p, GC_MIB));
            TRY(cudaFree(p));
        }
        printf("allocfree_ns %.1f\n", (double)(gc_now_ns() - t0) / (double)a);
        return 0;
    }
    if (strcmp(mode, "view") == 0) {
        size_t fr = 0, tot = 0;
        TRY(cudaMemGetInfo(&fr, &tot));
        printf("rt_total %zu rt_free %zu\n", tot, fr);
        return 0;
    }
    if (strcmp(mode, "ts") == 0 && a > 0 && argc > 3)
        return ts((double)a, argv[3]);
    fprintf(stderr, "usage: see the head of rt.cu\n");
    return 2;
}
