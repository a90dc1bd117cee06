/* SPDX-License-Identifier: MIT */
/*
 * ops_limits.c: per-member limits (SPEC 3, PUT /api/users/{name}): how
 * many apps a member may hold and how much GPU memory may be bound to
 * them, checked at install and whenever rows are about to be bound
 * (install, resume, the legacy moves). Admins and the shared owner are
 * not limited. A member without a limit of its own may hold
 * ACCEL_MEMBER_MAX_APPS_DEFAULT apps and any GPU memory.
 */
#include "common/accel_setup.h"
#include "daemon/ops_int.h"

#include <string.h>

#include "common/quantity.h"

/* The member whose limits apply to owner's apps, or NULL (d->lock held). */
static const struct user_rec *limited(struct accel_daemon *d,
                                      const char *owner)
{
    const struct user_rec *u = daemon_user_find(d, owner);
    return u && !u->admin ? u : NULL;
}

/* The bytes one row holds: its quota, or the whole card (0 = all). */
static uint64_t row_bytes(struct accel_daemon *d, const struct adm_row *row)
{
    return row->memory ? row->memory : d->snap.devs[row->dev].memory;
}

bool ops_limits_apps(struct accel_daemon *d, const char *owner,
                     struct op_result *res)
{
    const struct user_rec *u = limited(d, owner);
    int64_t max;
    size_t n = 0;
    if (u == NULL)
        return true;
    max = u->max_apps >= 0 ? u->max_apps : ACCEL_MEMBER_MAX_APPS_DEFAULT;
    for (size_t i = 0; i < d->napps; i++)
        n += strcmp(d->apps[i]->owner, owner) == 0;
    if ((int64_t)n < max)
        return true;
    ops_res_error(res, 403, "user-limit",
                  "%s may hold at most %lld apps (has %zu); uninstall one or "
                  "ask an admin to raise maxApps",
                  owner, (long long)max, n);
    return false;
}

bool ops_limits_gpu(struct accel_daemon *d, const struct app *a,
                    const struct adm_row *rows, size_t n,
                    struct op_result *res)
{
    const struct user_rec *u = limited(d, a->owner);
    uint64_t held = 0, need = 0;
    char smax[32], sheld[32], sneed[32];
    if (u == NULL || u->max_gpu_mem < 0)
        return true;
    for (size_t i = 0; i < d->napps; i++) {
        const struct app *x = d->apps[i];
        if (x == a || strcmp(x->owner, a->owner) != 0)
            continue;
        for (size_t k = 0; k < x->nrows; k++)
            held += row_bytes(d, &x->rows[k]);
    }
    for (size_t k = 0; k < n; k++)
        need += row_bytes(d, &rows[k]);
    if (held + need <= (uint64_t)u->max_gpu_mem)
        return true;
    quantity_format_bytes((uint64_t)u->max_gpu_mem, smax, sizeof smax);
    quantity_format_bytes(held, sheld, sizeof sheld);
    quantity_format_bytes(need, sneed, sizeof sneed);
    ops_res_error(res, 403, "user-limit",
                  "%s may hold at most %s of GPU memory (holds %s; %s needs "
                  "%s more); stop an app or ask an admin to raise "
                  "maxGpuMemory",
                  a->owner, smax, sheld, a->name, sneed);
    return false;
}
