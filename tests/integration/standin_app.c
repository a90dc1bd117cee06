/* SPDX-License-Identifier: MIT */
/*
 * standin_app.c: a stand-in for Ollama, vLLM, ComfyUI and llama-server in
 * the elastic
 * memory tests (SPEC 4.4): a small HTTP server on 127.0.0.1 that answers
 * the app's real routes and holds its "model" in device memory of the
 * tests' stand-in driver (cuMemAlloc_v2, with the shim preloaded by
 * acceld), so what it frees is what the card then has free. Built twice:
 * standin_app over the stand-in libcuda, and with STANDIN_HIP
 * standin_app_hip over the stand-in libamdhip64 (hipMalloc, hipFree: an
 * app on an AMD card, issue 46).
 *
 *   standin_app KIND PORT MODEL_MIB [options]
 *     KIND ollama:  GET /api/ps lists the loaded model; POST /api/generate
 *                   {"model":M,"keep_alive":0} unloads it, any other
 *                   generate loads it (again) and answers
 *           vllm:   POST /sleep?level=1 frees it, POST /wake_up takes it
 *                   again, GET /is_sleeping
 *           comfyui: POST /prompt allocates MODEL_MIB for a job and keeps
 *                   it; POST /free {"unload_models":true,...} frees it
 *           llama-server: router mode, two models: GET /models lists
 *                   m1.gguf ("status":{"value":"loaded"} while it holds
 *                   MODEL_MIB, else "unloaded") and m2.gguf (never
 *                   loaded); POST /models/unload {"model":"m1.gguf"}
 *                   frees it, any other model is 400 (not loaded);
 *                   POST /models/load or /v1/chat/completions
 *                   {"model":"m1.gguf"} loads it (again)
 *     --preload     load the model at start (ollama, vllm, llama-server)
 *     --unload-ms N the app's own unload time (before it frees)
 *     --hang        the freeing route never answers (sleeps 120 s)
 *     --hang-ms N   the freeing route answers late: after N ms, then as
 *                   the app does (frees, answers 200)
 *     --lie         the freeing route answers 200 and frees nothing
 *     --log PATH    appends "alloc MIB rc MS" and "free MIB MS" lines,
 *                   and "unload MODEL" for each llama-server unload asked
 *
 * Every answer is JSON. One request at a time (the routes are quick, and
 * an allocation that waits for a reclaim blocks only this app).
 */
#include "common/accel_setup.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef STANDIN_HIP
#include "shim/hip_types.h"

hipError_t hipMalloc(void **p, size_t bytes);
hipError_t hipFree(void *p);
typedef void *devptr;
#define dev_alloc(p, b) hipMalloc((p), (b))
#define dev_free(p) hipFree(p)
#else
#include "shim/cuda_types.h"

CUresult cuInit(unsigned flags);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes);
CUresult cuMemFree_v2(CUdeviceptr p);
typedef CUdeviceptr devptr;
#define dev_alloc(p, b) cuMemAlloc_v2((p), (b))
#define dev_free(p) cuMemFree_v2(p)
#endif

#define MiB (1ULL << 20)

static const char *kind;
static uint64_t model_bytes;
static devptr held;     /* the model (or the job), 0 none */
static int unload_ms, hang, hang_ms, lie, sleeping;
static FILE *logfp;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The runtime's answer: 0 success, 2 out of memory (CUDA's and HIP's). */
static int take(void)
{
    double t0 = now_ms();
    int rc = 0;

    if (held == 0)
        rc = dev_alloc(&held, model_bytes);
    if (rc != 0)
        held = 0;
    if (logfp != NULL) {
        fprintf(logfp, "alloc %llu %d %.3f\n",
                (unsigned long long)(model_bytes / MiB), (int)rc,
                now_ms() - t0);
        fflush(logfp);
    }
    return rc;
}

static void give(void)
{
    double t0 = now_ms();

    if (unload_ms > 0) {
        struct timespec ts = {unload_ms / 1000, (unload_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (held != 0)
        dev_free(held);
    held = 0;
    if (logfp != NULL) {
        fprintf(logfp, "free %llu %.3f\n",
                (unsigned long long)(model_bytes / MiB), now_ms() - t0);
        fflush(logfp);
    }
}

static void reply(int fd, int status, const char *body)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     status, status == 200 ? "OK" : "Error", strlen(body));
    (void)!write(fd, head, (size_t)n);
    (void)!write(fd, body, strlen(body));
}

/* The freeing route: as the app does, or hangs, or lies. */
static void freeing(int fd)
{
    if (hang) {
        struct timespec ts = {120, 0};
        nanosleep(&ts, NULL);
        return;
    }
    if (hang_ms > 0) {
        struct timespec ts = {hang_ms / 1000, (hang_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!lie)
        give();
    if (strcmp(kind, "vllm") == 0)
        sleeping = 1;
    reply(fd, 200, strcmp(kind, "ollama") == 0         ? "{\"done\":true}"
                   : strcmp(kind, "llama-server") == 0 ? "{\"success\":true}"
                                                       : "{}");
}

static void loading(int fd)
{
    int rc = take();
    char b[96];

    snprintf(b, sizeof b, "{\"loaded\":%s,\"cudaError\":%d}",
             rc == 0 ? "true" : "false", (int)rc);
    reply(fd, rc == 0 ? 200 : 500, b);
}

/* llama-server's router: its model list, and an unload of one. */
static void llama_models(int fd)
{
    char b[512];

    snprintf(b, sizeof b,
             "{\"object\":\"list\",\"data\":["
             "{\"id\":\"m1.gguf\",\"object\":\"model\",\"owned_by\":"
             "\"llamacpp\",\"status\":{\"value\":\"%s\"}},"
             "{\"id\":\"m2.gguf\",\"object\":\"model\",\"owned_by\":"
             "\"llamacpp\",\"status\":{\"value\":\"unloaded\"}}]}",
             held ? "loaded" : "unloaded");
    reply(fd, 200, b);
}

static void llama_unload(int fd, const char *body)
{
    const char *m = strstr(body, "\"model\"");
    char name[64] = "";

    if (m != NULL) /* a space in the format matches any, or none */
        sscanf(m, "\"model\" : \"%63[^\"]\"", name);
    if (logfp != NULL) {
        fprintf(logfp, "unload %s\n", name[0] ? name : "?");
        fflush(logfp);
    }
    if (strcmp(name, "m1.gguf") == 0 && held != 0)
        freeing(fd);
    else
        reply(fd, 400, "{\"error\":{\"code\":400,\"message\":"
                       "\"model is not loaded\"}}");
}

static void route(int fd, const char *method, const char *path,
                  const char *body)
{
    bool llama = strcmp(kind, "llama-server") == 0;

    bool post = strcmp(method, "POST") == 0;

    if (strcmp(kind, "ollama") == 0 && strcmp(path, "/api/ps") == 0) {
        reply(fd, 200, held ? "{\"models\":[{\"name\":\"m:latest\","
                              "\"model\":\"m:latest\"}]}"
                            : "{\"models\":[]}");
    } else if (strcmp(kind, "ollama") == 0 && post &&
               strcmp(path, "/api/generate") == 0) {
        if (strstr(body, "\"keep_alive\":0") != NULL ||
            strstr(body, "\"keep_alive\": 0") != NULL)
            freeing(fd);
        else
            loading(fd);
    } else if (strcmp(kind, "vllm") == 0 && post &&
               strncmp(path, "/sleep", 6) == 0) {
        freeing(fd);
    } else if (strcmp(kind, "vllm") == 0 && post &&
               strcmp(path, "/wake_up") == 0) {
        sleeping = 0;
        loading(fd);
    } else if (strcmp(kind, "vllm") == 0 &&
               strcmp(path, "/is_sleeping") == 0) {
        reply(fd, 200, sleeping ? "{\"is_sleeping\":true}"
                                : "{\"is_sleeping\":false}");
    } else if (strcmp(kind, "comfyui") == 0 && post &&
               strcmp(path, "/free") == 0) {
        freeing(fd);
    } else if (strcmp(kind, "comfyui") == 0 && post &&
               strcmp(path, "/prompt") == 0) {
        loading(fd);
    } else if (llama && strcmp(path, "/models") == 0) {
        llama_models(fd);
    } else if (llama && post && strcmp(path, "/models/unload") == 0) {
        llama_unload(fd, body);
    } else if (llama && post && strstr(body, "\"m1.gguf\"") != NULL &&
               (strcmp(path, "/models/load") == 0 ||
                strcmp(path, "/v1/chat/completions") == 0)) {
        loading(fd);
    } else {
        reply(fd, 404, "{\"error\":\"not found\"}");
    }
}

static void serve(int fd)
{
    char buf[16384], method[16], path[1024];
    size_t got = 0, need = 0;
    char *end = NULL;

    while (got + 1 < sizeof buf) {
        ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
        if (n <= 0)
            return;
        got += (size_t)n;
        buf[got] = '\0';
        end = strstr(buf, "\r\n\r\n");
        if (end != NULL) {
            const char *cl = strstr(buf, "Content-Length:");
            if (cl == NULL)
                cl = strstr(buf, "content-length:");
            need = (size_t)(end - buf) + 4 +
                   (cl != NULL && cl < end ? strtoul(cl + 15, NULL, 10) : 0);
            if (got >= need)
                break;
        }
    }
    if (end == NULL || sscanf(buf, "%15s %1023s", method, path) != 2)
        return;
    route(fd, method, path, end + 4);
}

int main(int argc, char **argv)
{
    struct sockaddr_in sa;
#ifndef STANDIN_HIP
    CUcontext ctx = NULL;
#endif
    int lfd, one = 1, preload = 0;

    if (argc < 4) {
        fprintf(stderr, "usage: standin_app KIND PORT MODEL_MIB [...]\n");
        return 2;
    }
    kind = argv[1];
    model_bytes = strtoull(argv[3], NULL, 10) * MiB;
    for (int i = 4; i < argc; i++) {
        if (strcmp(argv[i], "--preload") == 0)
            preload = 1;
        else if (strcmp(argv[i], "--hang") == 0)
            hang = 1;
        else if (strcmp(argv[i], "--lie") == 0)
            lie = 1;
        else if (strcmp(argv[i], "--hang-ms") == 0 && i + 1 < argc)
            hang_ms = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--unload-ms") == 0 && i + 1 < argc)
            unload_ms = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--log") == 0 && i + 1 < argc)
            logfp = fopen(argv[++i], "a");
    }
    signal(SIGPIPE, SIG_IGN);
#ifndef STANDIN_HIP /* HIP makes its context at the first call */
    if (cuInit(0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "no device\n");
        return 1;
    }
#endif
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)strtol(argv[2], NULL, 10));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(lfd, 16) != 0) {
        fprintf(stderr, "cannot listen on %s: %s\n", argv[2],
                strerror(errno));
        return 1;
    }
    if (preload && take() != 0)
        fprintf(stderr, "preload failed\n");
    printf("ready %s on %s, holding %llu MiB\n", kind, argv[2],
           (unsigned long long)(held ? model_bytes / MiB : 0));
    fflush(stdout);
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        serve(fd);
        close(fd);
    }
}
