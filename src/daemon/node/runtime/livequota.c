/* SPDX-License-Identifier: MIT */
/*
 * livequota.c: a live quota change carried to this node (livequota.h).
 */
#include "common/accel_setup.h"
#include "daemon/node/runtime/livequota.h"

#include <stdlib.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/log.h"
#include "daemon/node/ledger.h"
#include "daemon/node/limits/vram.h"
#include "daemon/node/runtime/appsetup.h"
#include "daemon/node/runtime/cdi.h"
#include "daemon/node/runtime/runtime.h"

/* The container's copy of the config (cdi.c: the container's paths), if
 * a has one: rewritten in its folder, which the container mounts, so the
 * shim in the container reads the new quota at its ledger's next epoch. */
static enum accel_err rewrite_container_copy(struct accel_daemon *d,
                                             const struct app *a,
                                             const struct appsetup_files *f)
{
    char *path = xasprintf("%s/run/apps/%s/" CDI_CTR_CONFIG_FILE,
                           d->cfg.data_dir, a->name);
    char *text = NULL, *cause = NULL;
    enum accel_err rc = ACCEL_OK;
    json_t *m;

    if (access(path, F_OK) == 0) {
        m = cdi_shim_mounts(d, a->name, f->devs, f->n, &text, &cause);
        rc = m != NULL ? ledger_write_text(path, text) : ACCEL_EIO;
        if (m == NULL)
            log_warn("app %s: %s", a->name, cause);
        json_decref(m);
    }
    free(cause);
    free(text);
    free(path);
    return rc;
}

/* The shim config of a (if it has one: a running app's) and a container's
 * copy of it, with every row's quota as it is now. */
static enum accel_err rewrite_config(struct accel_daemon *d,
                                     const struct app *a)
{
    struct appsetup_files *f = xcalloc(1, sizeof(*f));
    char *cfg = appsetup_config_path(d, a->name), *text = NULL;
    enum accel_err rc = ACCEL_OK;

    if (access(cfg, F_OK) != 0)
        goto out; /* not started here: its start writes the quotas */
    rc = appsetup_plan(d, a, f);
    if (rc == ACCEL_OK)
        rc = ledger_config_text(a->name, f->devs, f->n, &text);
    if (rc == ACCEL_OK)
        rc = ledger_write_text(cfg, text);
    if (rc == ACCEL_OK)
        rc = rewrite_container_copy(d, a, f);
out:
    free(text);
    free(cfg);
    free(f);
    return rc;
}

enum accel_err livequota_apply(struct accel_daemon *d, struct app *a,
                               size_t k, uint64_t *out_held)
{
    char path[512];
    struct ledger_usage u;
    enum accel_err rc = ACCEL_OK;

    if (out_held)
        *out_held = 0;
    if (k >= a->nrows || !appsetup_row_local(d, a, k) ||
        !runtime_ledger_of(d, a, k, path, sizeof path) ||
        access(path, F_OK) != 0)
        goto tiers; /* no ledger here: the shim holds nothing of it */
    rc = rewrite_config(d, a);
    if (rc != ACCEL_OK)
        log_warn("app %s: its shim config cannot be rewritten with the "
                 "new quota (%s): a raise waits for its next start",
                 a->name, accel_strerror(rc));
    /* the limit lands even when the config could not be written: a cut
     * holds through the ledger alone (the shim obeys the lower) */
    {
        enum accel_err lrc = ledger_set_limit(path, a->rows[k].memory);
        if (lrc != ACCEL_OK) {
            log_warn("app %s: the ledger %s does not take the new quota "
                     "(%s)", a->name, path, accel_strerror(lrc));
            rc = lrc;
        }
    }
    if (ledger_read(path, &u) == ACCEL_OK) {
        /* the answer shows the usage as the ledger has it now, as the
         * usage refresh would (runtime.c) */
        if (a->row_usage != NULL) {
            a->usage -= a->row_usage[k] < a->usage ? a->row_usage[k]
                                                    : a->usage;
            a->row_usage[k] = u.used;
            a->usage += u.used;
        }
        if (out_held)
            *out_held = u.used + u.untracked;
    }
tiers:
    /* the kernel's dmem.max or the driver's limit of a row a start
     * applied (row_vram set): written again with every row's quota */
    if (a->row_vram != NULL && appsetup_row_local(d, a, k) &&
        (a->row_vram[k] == VRAM_KERNEL || a->row_vram[k] == VRAM_DRIVER))
        vram_app_apply(d, a);
    return rc;
}
