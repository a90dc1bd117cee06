/* SPDX-License-Identifier: MIT */
/*
 * share.c: VMM memory shared between the processes of an app
 * (cuMemExportToShareableHandle in one, cuMemImportFromShareableHandle in
 * another). The driver keeps the memory while any process holds a handle
 * or a mapping of it, so its charge must not leave with its creator: when
 * the creator exports a handle it charged, the charge moves out of the
 * creator's slot into one of the ledger's `shares` (include/accel/ledger.h,
 * minor 3), still counted in `used`; each process holding the handle
 * (the creator, each importer) holds one reference; the last one to
 * release and unmap it gives the charge back.
 *
 * A shared handle is known by what the processes pass each other: for a
 * file descriptor, its file (device and inode, which the descriptor passed
 * over a socket or inherited keeps); for a fabric handle, its 64 bytes.
 * Where two live exports give the same identity (a driver whose exported
 * descriptors are all one file), the second is not shared: its charge
 * stays with its creator, as before, and the shim says so once.
 *
 * Not covered: an importer killed while holding a reference keeps the
 * charge in `used` until every process of the app has gone (then the
 * ledger starts from 0); a time-sliced card's ledger is not told of
 * shares (the creator keeps charging the card).
 */
#include "shim/shim.h"

#include <string.h>
#include <sys/stat.h>

#define SHARE_LOCAL 64        /* shared handles this process holds */

static struct {
    pthread_mutex_t mu;
    struct {
        uint64_t handle;      /* this process's handle, 0 free */
        int ordinal;          /* the device whose ledger holds the share */
        int entry;            /* index in ledger->shares */
    } h[SHARE_LOCAL];
} sh = { .mu = PTHREAD_MUTEX_INITIALIZER };

static _Atomic int collision_said;

/* What identifies the shared handle os (as the export wrote it, or the
 * import was given) of type; 0 when it cannot be told. */
static uint64_t share_id(CUmemAllocationHandleType type, const void *os)
{
    uint64_t h = 1469598103934665603ULL;
    struct stat st;

    if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
        int fd = (int)(intptr_t)os;
        if (fd < 0 || fstat(fd, &st) != 0)
            return 0;
        h = ((uint64_t)st.st_dev << 40) ^ (uint64_t)st.st_ino;
        return h | 1;
    }
    if (type == CU_MEM_HANDLE_TYPE_FABRIC && os != NULL) {
        for (int i = 0; i < 64; i++)
            h = (h ^ ((const unsigned char *)os)[i]) * 1099511628211ULL;
        return h | 1;
    }
    return 0;
}

/* The ledger entry of id on d, or -1. */
static int entry_of(struct shim_dev *d, uint64_t id)
{
    for (int i = 0; i < ACCEL_LEDGER_SHARES; i++)
        if (atomic_load(&d->ledger->shares[i].id) == id)
            return i;
    return -1;
}

/* Remember (handle, ordinal, entry) in this process; 0, or -1 when full. */
static int local_add(uint64_t handle, int ordinal, int entry)
{
    int rc = -1;

    pthread_mutex_lock(&sh.mu);
    for (int i = 0; i < SHARE_LOCAL && rc != 0; i++) {
        if (sh.h[i].handle == 0) {
            sh.h[i].handle = handle;
            sh.h[i].ordinal = ordinal;
            sh.h[i].entry = entry;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&sh.mu);
    return rc;
}

/* Take one reference on entry e of d (it must hold one already). */
static int entry_ref(struct accel_ledger_share *e, uint64_t id)
{
    uint64_t w = atomic_load(&e->word);

    do {
        if (atomic_load(&e->id) != id || ACCEL_LEDGER_SHARE_REFS(w) == 0 ||
            ACCEL_LEDGER_SHARE_REFS(w) == 0xffff)
            return -1;
    } while (!atomic_compare_exchange_weak(&e->word, &w, w + 1));
    return 0;
}

void share_export(uint64_t handle, CUmemAllocationHandleType type,
                  const void *os)
{
    uint64_t id, bytes = 0, zero = 0;
    int ordinal = 0, e = -1;
    struct shim_dev *d;

    /* the export wrote the descriptor into *os; an import is given it */
    if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && os != NULL)
        os = (const void *)(intptr_t) * (const int *)os;
    id = share_id(type, os);
    if (id == 0 || !track_take(SHIM_KIND_HANDLE, handle, &ordinal, &bytes,
                               NULL))
        return;
    d = (ordinal & SHIM_ORD_CARD) ? NULL : quota_dev(ordinal);
    if (d != NULL && entry_of(d, id) >= 0) {
        if (atomic_exchange(&collision_said, 1) == 0)
            shim_log("an exported VMM handle looks like another live one: "
                     "its charge stays with its creator");
        d = NULL;
    }
    for (int i = 0; d != NULL && i < ACCEL_LEDGER_SHARES && e < 0; i++) {
        zero = 0;
        if (atomic_compare_exchange_strong(&d->ledger->shares[i].id, &zero,
                                           id))
            e = i;
    }
    if (e < 0 || local_add(handle, ordinal, e) != 0) {
        if (e >= 0)
            atomic_store(&d->ledger->shares[e].id, 0);
        track_put(SHIM_KIND_HANDLE, handle, ordinal, bytes, 0);
        return;
    }
    atomic_store(&d->ledger->shares[e].word, bytes << 16 | 1);
    quota_unslot(ordinal, bytes); /* the share holds it now */
    track_put(SHIM_KIND_HANDLE, handle, ordinal, 0, 0);
}

void share_import(uint64_t handle, CUmemAllocationHandleType type,
                  const void *os, int here)
{
    uint64_t id = share_id(type, os);

    /* the devices this process charges on, and the current one */
    for (int ord = 0; id != 0 && ord < SHIM_MAX_DEV; ord++) {
        struct shim_dev *d;
        int e;
        if (ord != here && atomic_load(&shim_state.dev[ord].state) !=
                               SHIM_DEV_READY)
            continue;
        d = quota_dev(ord);
        if (d == NULL || (e = entry_of(d, id)) < 0)
            continue;
        if (entry_ref(&d->ledger->shares[e], id) != 0)
            continue;
        if (local_add(handle, ord, e) != 0) {
            share_drop(d, e);
            return;
        }
        /* a record of no bytes: its release and unmapping come to
         * share_gone through the same paths as the creator's */
        track_put(SHIM_KIND_HANDLE, handle, ord, 0, 0);
        return;
    }
}

void share_drop(struct shim_dev *d, int e)
{
    struct accel_ledger_share *s = &d->ledger->shares[e];
    uint64_t w = atomic_load(&s->word);

    while (!atomic_compare_exchange_weak(&s->word, &w, w - 1))
        ;
    if (ACCEL_LEDGER_SHARE_REFS(w) != 1)
        return;
    /* the last holder: the memory is gone */
    atomic_store(&s->word, 0);
    atomic_store(&s->id, 0);
    quota_unshared((int)(d - shim_state.dev), ACCEL_LEDGER_SHARE_BYTES(w));
}

void share_gone(uint64_t handle)
{
    int ordinal = -1, entry = -1;

    if (handle == 0)
        return;
    pthread_mutex_lock(&sh.mu);
    for (int i = 0; i < SHARE_LOCAL; i++) {
        if (sh.h[i].handle == handle) {
            ordinal = sh.h[i].ordinal;
            entry = sh.h[i].entry;
            sh.h[i].handle = 0;
            break;
        }
    }
    pthread_mutex_unlock(&sh.mu);
    if (entry >= 0 && quota_dev(ordinal) != NULL)
        share_drop(quota_dev(ordinal), entry);
}

void share_fork_child(void)
{
    pthread_mutex_init(&sh.mu, NULL);
    memset(sh.h, 0, sizeof(sh.h)); /* the parent's handles */
}
