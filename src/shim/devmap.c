/* SPDX-License-Identifier: MIT */
/*
 * devmap.c: which NVML device is which CUDA ordinal. The quota is kept per
 * CUDA ordinal (the app's numbering, after CUDA_VISIBLE_DEVICES), NVML
 * numbers every card of the machine: they differ as soon as
 * CUDA_VISIBLE_DEVICES names a subset. Both are tied by the card's UUID.
 *
 *   NVML device -> ordinal: the UUID ACCEL_CONFIG gave (under acceld: a
 *   card the app is not bound to has no ordinal, so it shows no quota);
 *   standalone, the CUDA ordinal whose cuDeviceGetUuid_v2 is that UUID, or,
 *   before cuInit, the position of its index or UUID in
 *   CUDA_VISIBLE_DEVICES (the NVML index itself when that is unset).
 *   ordinal -> NVML device: by the UUID cuDeviceGetUuid_v2 gives.
 */
#include "shim/shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NVML's spelling of a 16-byte UUID. */
static void uuid_str(const unsigned char u[16], char *s, size_t cap)
{
    snprintf(s, cap,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
             "%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
             u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* The UUID of CUDA ordinal as NVML spells it; 0, or -1 if CUDA cannot
 * tell (no such ordinal, not initialised). */
static int cuda_uuid(int ordinal, char *s, size_t cap)
{
    CUresult (*fn)(unsigned char *, CUdevice) =
        SHIM_CUDA_REAL(cuDeviceGetUuid_v2);
    unsigned char u[16];

    if (fn == NULL || fn(u, ordinal) != CUDA_SUCCESS)
        return -1;
    uuid_str(u, s, cap);
    return 0;
}

nvmlDevice_t devmap_nvml(int ordinal)
{
    nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *) =
        SHIM_NVML_REAL(nvmlDeviceGetHandleByUUID);
    char s[64];
    nvmlDevice_t d = NULL;

    if (by_uuid == NULL || cuda_uuid(ordinal, s, sizeof(s)) != 0 ||
        by_uuid(s, &d) != NVML_SUCCESS)
        return NULL;
    return d;
}

/* The position of NVML card (uuid, idx) in CUDA_VISIBLE_DEVICES (entries
 * are indices or UUIDs, a UUID may be shortened; CUDA stops at the first
 * entry it cannot use); the index itself when it is unset; -1 if absent. */
static int visible_position(const char *uuid, unsigned idx)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    int k = 0;

    if (v == NULL)
        return (int)idx;
    while (*v != '\0') {
        size_t n = strcspn(v, ",");
        char *end;
        unsigned long i = strtoul(v, &end, 10);
        if (n >= 4 && strncmp(v, "GPU-", 4) == 0) {
            if (strncmp(uuid, v, n) == 0)
                return k;
        } else if (end == v + n && n > 0) {
            if (i == idx)
                return k;
        } else {
            return -1; /* MIG-..., or not a device: CUDA stops here */
        }
        k++;
        v += n;
        v += *v == ',';
    }
    return -1;
}

int devmap_ordinal(const char *uuid, unsigned idx, int have_idx)
{
    int configured = 0;
    char s[64];

    for (int i = 0; i < SHIM_MAX_DEV; i++) {
        if (shim_state.dev[i].uuid[0] == '\0')
            continue;
        configured = 1;
        if (uuid != NULL && strcmp(shim_state.dev[i].uuid, uuid) == 0)
            return i;
    }
    if (configured || uuid == NULL)
        return configured || !have_idx ? -1 : (int)idx;
    for (int i = 0; i < SHIM_MAX_DEV; i++) {
        if (cuda_uuid(i, s, sizeof(s)) != 0)
            break;
        if (strcmp(s, uuid) == 0)
            return i;
    }
    if (cuda_uuid(0, s, sizeof(s)) == 0) /* CUDA knows: not one of its */
        return -1;
    return have_idx ? visible_position(uuid, idx) : -1;
}
