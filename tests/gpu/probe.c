/* SPDX-License-Identifier: MIT */
/*
 * probe.c: asks the driver's lookup for every name the shim hooks, at every
 * version and flag, and says whose address came back (dladdr: the shim's or
 * the driver's). Built two ways:
 *   cc                   cuGetProcAddress_v2 (or cuGetProcAddress) from
 *                        libcuda.so.1 (dlopen; no CUDA header needed)
 *   nvcc -x cu -DPROBE_RUNTIME
 *                        cudaGetDriverEntryPointByVersion (CUDA >= 12.5)
 *
 *   probe NAMES_FILE     NAMES_FILE: names.c's output; CUDA names with
 *                        HOOKED 1 are probed by their base name (the _vN,
 *                        _ptsz and _ptds suffixes taken off)
 * Prints one line a lookup:
 *   probe BASE VERSION FLAGS rc RC owner OWNER sym SYMBOL
 * (OWNER: shim, driver, none or another object; SYMBOL: the exported name
 * at exactly that address, "-" for an address inside a function or none),
 * then "lookups N". Exit status 0, 2 when the lookup is missing.
 */
#include "gpucheck.h"

#ifdef PROBE_RUNTIME
#include <cuda_runtime.h>
#endif

#define MAX_NAMES 512

static int base_of(const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);

    if (n + 1 > cap)
        return -1;
    memcpy(out, name, n + 1);
    if (n > 5 && (strcmp(out + n - 5, "_ptsz") == 0 ||
                  strcmp(out + n - 5, "_ptds") == 0))
        out[n -= 5] = '\0';
    while (n > 0 && out[n - 1] >= '0' && out[n - 1] <= '9')
        n--;
    if (n > 2 && out[n - 1] == 'v' && out[n - 2] == '_' && out[n] != '\0')
        out[n - 2] = '\0';
    return 0;
}

typedef int (*gpa2_t)(const char *, void **, int, unsigned long long, int *);
typedef int (*gpa1_t)(const char *, void **, int, unsigned long long);

int main(int argc, char **argv)
{
    static char names[MAX_NAMES][96];
    int versions[16] = { 3000, 3020, 4000, 7000, 11020, 12000, 12080, 13000 };
    int nv = 8, nn = 0, drv = 0, lookups = 0;
    char line[256], lib[16], name[96], base[96];
    int hooked;
    FILE *f;

    if (argc < 2 || (f = fopen(argv[1], "r")) == NULL) {
        fprintf(stderr, "usage: probe NAMES_FILE\n");
        return 2;
    }
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "%15s %d %95s", lib, &hooked, name) == 3 &&
            strcmp(lib, "CUDA") == 0 && hooked == 1 &&
            base_of(name, base, sizeof(base)) == 0) {
            int seen = 0;

            for (int i = 0; i < nn && !seen; i++)
                seen = strcmp(names[i], base) == 0;
            if (!seen && nn < MAX_NAMES)
                snprintf(names[nn++], sizeof(names[0]), "%s", base);
        }
    fclose(f);

#ifdef PROBE_RUNTIME
    if (cudaDriverGetVersion(&drv) != cudaSuccess || cudaFree(0) != cudaSuccess) {
        printf("error the CUDA runtime found no device\n");
        return 2;
    }
#else
    void *cu = dlopen("libcuda.so.1", RTLD_NOW);
    gpa2_t gpa2 = NULL;
    gpa1_t gpa1 = NULL;
    int (*init)(unsigned) = NULL;
    int (*version)(int *) = NULL;

    if (cu == NULL) {
        printf("error no libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    *(void **)&gpa2 = dlsym(cu, "cuGetProcAddress_v2");
    *(void **)&gpa1 = dlsym(cu, "cuGetProcAddress");
    *(void **)&init = dlsym(cu, "cuInit");
    *(void **)&version = dlsym(cu, "cuDriverGetVersion");
    if ((gpa2 == NULL && gpa1 == NULL) || init == NULL || init(0) != 0) {
        printf("error libcuda.so.1 has no cuGetProcAddress or cuInit fails\n");
        return 2;
    }
    if (version != NULL)
        version(&drv);
#endif
    if (drv > 0) { /* the driver's own version too */
        int seen = 0;

        for (int i = 0; i < nv; i++)
            seen |= versions[i] == drv;
        if (!seen)
            versions[nv++] = drv;
    }
    printf("driver_version %d names %d versions %d\n", drv, nn, nv);
    for (int i = 0; i < nn; i++)
        for (int v = 0; v < nv; v++)
            for (unsigned long long fl = 0; fl <= 2; fl++) {
                void *p = NULL;
                const char *sym, *own;
                int rc, st = -1;

#ifdef PROBE_RUNTIME
                cudaDriverEntryPointQueryResult q;

                rc = (int)cudaGetDriverEntryPointByVersion(
                    names[i], &p, (unsigned)versions[v], fl, &q);
                st = (int)q;
#else
                rc = gpa2 ? gpa2(names[i], &p, versions[v], fl, &st)
                          : gpa1(names[i], &p, versions[v], fl);
#endif
                if (rc != 0)
                    p = NULL;
                own = gc_owner(p, &sym);
                printf("probe %s %d %llu rc %d status %d owner %s sym %s\n",
                       names[i], versions[v], fl, rc, st, own, sym);
                lookups++;
            }
    printf("lookups %d\n", lookups);
    return 0;
}
