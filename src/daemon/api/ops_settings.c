/* SPDX-License-Identifier: MIT */
/*
 * ops_settings.c: acceld's own settings (GET and PUT /api/settings), for
 * now memberImages: the local images members may run without a pull of
 * their own (SPEC 8.2.1), kept in <data-dir>/settings.json (0600, this
 * node's: images are each node's own), and the rule an install of a
 * member's container obeys with them. Not the per-device settings
 * (ops_device.c) nor the per-member limits (ops_limits.c).
 */
#include "common/accel_setup.h"
#include "daemon/api/ops.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/api/ops_int.h"
#include "daemon/log.h"
#include "daemon/node/runtime/image.h"
#include "daemon/rules/manifest.h"

static char *settings_path(const struct accel_daemon *d)
{
    return xasprintf("%s/settings.json", d->cfg.data_dir);
}

/* d->member_images, read from the settings file the first time (lock
 * held); [] when there is none or it does not pass the check (said). */
static const json_t *member_images(struct accel_daemon *d)
{
    char *path, *cause = NULL;
    json_t *f, *v;

    if (d->member_images != NULL)
        return d->member_images;
    path = settings_path(d);
    f = json_load_file(path, 0, NULL);
    v = json_object_get(f, "memberImages");
    if (v != NULL && manifest_member_images_check(v, &cause) != ACCEL_OK) {
        log_warn("%s: %s: members may run no local image they did not "
                 "pull", path, cause);
        free(cause);
        v = NULL;
    }
    d->member_images = v != NULL ? json_incref(v) : json_array();
    json_decref(f);
    free(path);
    return d->member_images;
}

json_t *ops_settings_json(struct accel_daemon *d)
{
    return json_pack("{s:O}", "memberImages", member_images(d));
}

/* Write the settings object s to the file, atomically (0600). */
static enum accel_err settings_write(const struct accel_daemon *d,
                                     const json_t *s, char **cause)
{
    char *path = settings_path(d), *tmp = xasprintf("%s.tmp", path);
    enum accel_err rc = ACCEL_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                  0600);

    if (fd < 0 || json_dumpfd(s, fd, JSON_COMPACT) != 0 || fsync(fd) != 0 ||
        rename(tmp, path) != 0) {
        *cause = xasprintf("cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        rc = ACCEL_ESYS;
    }
    if (fd >= 0)
        close(fd);
    free(tmp);
    free(path);
    return rc;
}

void ops_settings_set(struct accel_daemon *d, const json_t *body,
                      struct op_result *res)
{
    const json_t *v = json_object_get(body, "memberImages");
    char *cause = NULL;
    const char *k;
    json_t *e, *s;

    if (!json_is_object(body)) {
        ops_res_error(res, 400, "invalid-argument", "the body must be an "
                      "object: {\"memberImages\": [...]}");
        return;
    }
    json_object_foreach((json_t *)body, k, e) {
        if (strcmp(k, "memberImages") != 0) {
            ops_res_error(res, 400, "invalid-argument", "unknown field "
                          "\"%.64s\": only memberImages can be set", k);
            return;
        }
    }
    pthread_mutex_lock(&d->lock);
    if (v == NULL)
        v = member_images(d);
    if (manifest_member_images_check(v, &cause) != ACCEL_OK) {
        ops_res_error(res, 400, "invalid-argument", "%s", cause);
        goto out;
    }
    s = json_pack("{s:O}", "memberImages", v);
    if (settings_write(d, s, &cause) != ACCEL_OK) {
        ops_res_error(res, 500, "system-error", "%s", cause);
        json_decref(s);
        goto out;
    }
    json_incref((json_t *)v);
    json_decref(d->member_images);
    d->member_images = (json_t *)v;
    ops_res_ok(res, 200, s);
    state_event(d, "settings.change", NULL, NULL, NULL,
                json_pack("{s:O}", "memberImages", v),
                "memberImages is now %zu name(s) or pattern(s)",
                json_array_size(v));
out:
    pthread_mutex_unlock(&d->lock);
    free(cause);
}

/* Did acceld's own pull bring image id for an app of owner's (its pin
 * `pulled`)? An archive's image, loaded for an admin's manifest, is not
 * the member's by that (lock held). */
static bool pulled_for(struct accel_daemon *d, const char *owner,
                       const char *id)
{
    for (size_t i = 0; i < d->napps; i++) {
        struct app *a = d->apps[i];
        const char *pid;
        if (strcmp(a->owner, owner) != 0 || a->m.run.ctr.image == NULL ||
            manifest_image_archive(a->m.run.ctr.image))
            continue;
        pid = image_pin_field(d, a, "id");
        if (pid != NULL && strcmp(pid, id) == 0 &&
            image_pin_pulled(d, a))
            return true;
    }
    return false;
}

bool ops_settings_image_allowed(struct accel_daemon *d, const char *owner,
                                const char *ref, const json_t *found,
                                struct op_result *res)
{
    const char *id = json_string_value(json_object_get(found, "id"));

    if (id == NULL || pulled_for(d, owner, id) ||
        manifest_member_image_allowed(member_images(d),
                                      json_object_get(found, "names")))
        return true;
    ops_res_error(res, 403, "forbidden",
                  "run.image: \"%s\" is an image on this machine (%.12s) "
                  "that acceld did not pull for %s's apps and that no name "
                  "in memberImages allows: a member runs only the local "
                  "images acceld pulled for its own apps or those an admin "
                  "allows (memberImages); set run.pull: always to pull it "
                  "yourself, or ask an admin", ref, id, owner);
    return false;
}
