/* SPDX-License-Identifier: MIT */
/*
 * ops_limits.c: per-member limits (SPEC 3, PUT /api/users/{name}): how
 * many apps a member may hold and how much GPU memory may be bound to
 * them, checked at install and whenever rows are about to be bound
 * (install, resume, the legacy moves). Admins and the shared owner are
 * not limited. A member without a limit of its own may hold
 * ACCEL_MEMBER_MAX_APPS_DEFAULT apps and any GPU memory. The preflight
 * (SPEC 2.8) answers owner_quota by the same limits (ops_limits_preflight).
 */
#include "common/accel_setup.h"
#include "daemon/api/ops_int.h"

#include <string.h>

#include "common/quantity.h"

/* The member whose limits apply to owner's apps, or NULL (d->lock held). */
static const struct user_rec *limited(struct accel_daemon *d,
                                      const char *owner)
{
    const struct user_rec *u;
    if (strcmp(owner, "shared") == 0)
        return NULL;
    u = state_user_find(d, owner);
    return u && !u->admin ? u : NULL;
}

int64_t ops_limits_max_apps(const struct user_rec *u)
{
    return u->max_apps >= 0 ? u->max_apps : ACCEL_MEMBER_MAX_APPS_DEFAULT;
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
    size_t n;
    if (u == NULL)
        return true;
    max = ops_limits_max_apps(u);
    n = state_owner_apps(d, owner);
    if ((int64_t)n < max)
        return true;
    ops_res_error(res, 403, "user-limit",
                  "%s may hold at most %lld apps (has %zu); uninstall one or "
                  "ask an admin to raise maxApps",
                  owner, (long long)max, n);
    return false;
}

/* The apps owner holds and the GPU memory bound to them, skip's rows not
 * counted. */
static void owner_usage(struct accel_daemon *d, const char *owner,
                        const struct app *skip, uint64_t *apps,
                        uint64_t *bytes)
{
    size_t n;
    struct app *const *v = state_owned(d, owner, &n);
    *apps = n;
    *bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const struct app *x = v[i];
        if (x == skip)
            continue;
        for (size_t k = 0; k < x->nrows; k++)
            *bytes += row_bytes(d, &x->rows[k]);
    }
}

void ops_limits_held(struct accel_daemon *d, const char *owner,
                     uint64_t *apps, uint64_t *bytes)
{
    owner_usage(d, owner, NULL, apps, bytes);
}

static uint64_t rows_bytes(struct accel_daemon *d, const struct adm_row *rows,
                           size_t n)
{
    uint64_t need = 0;
    for (size_t k = 0; k < n; k++)
        need += row_bytes(d, &rows[k]);
    return need;
}

bool ops_limits_gpu(struct accel_daemon *d, const struct app *a,
                    const struct adm_row *rows, size_t n,
                    struct op_result *res)
{
    const struct user_rec *u = limited(d, a->owner);
    uint64_t held, need, napps;
    char smax[32], sheld[32], sneed[32];
    if (u == NULL || u->max_gpu_mem < 0)
        return true;
    owner_usage(d, a->owner, a, &napps, &held);
    need = rows_bytes(d, rows, n);
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

/* The running totals of owner in q, added on first use. */
static struct ops_quota_use *quota_use(struct ops_quota *q, const char *owner)
{
    for (size_t k = 0; k < q->nuse; k++)
        if (strcmp(q->use[k].owner, owner) == 0)
            return &q->use[k];
    q->use[q->nuse] = (struct ops_quota_use){.owner = owner};
    return &q->use[q->nuse++];
}

/* One pressured dimension of the owner_quota answer. */
static json_t *quota_dim(const char *resource, uint64_t required,
                         uint64_t used, uint64_t capacity)
{
    return json_pack("{s:s, s:I, s:I, s:I, s:I, s:b}", "resource", resource,
                     "required", (json_int_t)required, "used",
                     (json_int_t)used, "capacity", (json_int_t)capacity,
                     "available",
                     (json_int_t)(capacity > used ? capacity - used : 0),
                     "pressured", 1);
}

bool ops_limits_preflight(void *ctx, size_t i, const struct adm_row *rows,
                          size_t n, uint64_t min_gpu)
{
    struct ops_quota *q = ctx;
    const struct user_rec *u = limited(q->d, q->owners[i]);
    struct ops_quota_use *use;
    uint64_t apps, bytes, need;
    json_t *dims;
    if (u == NULL)
        return true;
    use = quota_use(q, q->owners[i]);
    owner_usage(q->d, use->owner, NULL, &apps, &bytes);
    apps += use->apps;
    bytes += use->bytes;
    /* before placement the least the demand can hold; then its rows */
    need = rows != NULL ? rows_bytes(q->d, rows, n) : min_gpu;
    dims = json_array();
    if ((int64_t)apps + 1 > ops_limits_max_apps(u))
        json_array_append_new(
            dims, quota_dim("apps", 1, apps, (uint64_t)ops_limits_max_apps(u)));
    if (u->max_gpu_mem >= 0 && bytes + need > (uint64_t)u->max_gpu_mem)
        json_array_append_new(dims, quota_dim("gpu-memory", need, bytes,
                                              (uint64_t)u->max_gpu_mem));
    if (json_array_size(dims) == 0) {
        json_decref(dims);
        if (rows != NULL) { /* the demand is placed: it counts from now */
            use->apps += 1;
            use->bytes += need;
        }
        return true;
    }
    q->pressure = json_pack("[{s:s, s:o}]", "source", "owner_quota",
                            "dimensions", dims);
    return false;
}
