/* SPDX-License-Identifier: MIT */
/*
 * ociedit.c: an app's CDI edits applied to a container's OCI config
 * (ociedit.h), the way CDI-aware engines (podman, Docker 25 and later)
 * apply them, for the engines that have no CDI (Docker 20.10).
 */
#include "common/accel_setup.h"
#include "runc/ociedit.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "common/util.h"
#include "common/yamljson.h"

#define SPEC_MAX (4u << 20) /* a CDI spec file; NVIDIA's are ~100 KiB */

const char *ociedit_app(const json_t *config)
{
    const char *a = json_string_value(json_object_get(
        json_object_get(config, "annotations"), OCIEDIT_ANNOTATION));
    const json_t *env = json_object_get(json_object_get(config, "process"),
                                        "env");
    size_t i, len = strlen(OCIEDIT_ENV);
    json_t *e;

    if (a != NULL && a[0] != '\0')
        return a;
    json_array_foreach(env, i, e) {
        const char *s = json_string_value(e);
        if (s != NULL && strncmp(s, OCIEDIT_ENV, len) == 0 &&
            s[len] == '=' && s[len + 1] != '\0')
            a = s + len + 1;
    }
    return a;
}

/* The device named name of an accel.dev/app spec at path: its
 * containerEdits (a new reference), or NULL. */
static json_t *spec_device(const char *path, const char *name)
{
    char *buf = xmalloc(SPEC_MAX), *err = NULL;
    ssize_t n = util_read_small(path, buf, SPEC_MAX);
    json_t *spec = NULL, *dev, *hit = NULL;
    const char *kind;
    size_t i;

    if (n > 0 && yamljson_parse_any(buf, (size_t)n, &spec, &err) != 0)
        spec = NULL;
    free(err);
    free(buf);
    kind = json_string_value(json_object_get(spec, "kind"));
    if (kind != NULL && strcmp(kind, OCIEDIT_KIND) == 0)
        json_array_foreach(json_object_get(spec, "devices"), i, dev) {
            const char *nm = json_string_value(json_object_get(dev, "name"));
            if (hit == NULL && nm != NULL && strcmp(nm, name) == 0)
                hit = json_incref(json_object_get(dev, "containerEdits"));
        }
    json_decref(spec);
    return hit;
}

/* Is a directory entry a spec file (by its extension)? */
static bool spec_name(const char *nm)
{
    const char *ext = strrchr(nm, '.');
    return ext != NULL && (strcmp(ext, ".json") == 0 ||
                           strcmp(ext, ".yaml") == 0 ||
                           strcmp(ext, ".yml") == 0);
}

json_t *ociedit_find(const char *const *dirs, const char *name)
{
    json_t *hit = NULL;

    for (; *dirs != NULL && hit == NULL; dirs++) {
        DIR *dp = opendir(*dirs);
        struct dirent *e;
        while (dp != NULL && hit == NULL && (e = readdir(dp)) != NULL) {
            char *path;
            struct stat st;
            if (!spec_name(e->d_name))
                continue;
            path = xasprintf("%s/%s", *dirs, e->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
                hit = spec_device(path, name);
            free(path);
        }
        if (dp != NULL)
            closedir(dp);
    }
    return hit;
}

/* The array at key of obj, made when absent. */
static json_t *array_at(json_t *obj, const char *key)
{
    json_t *a = json_object_get(obj, key);
    if (!json_is_array(a)) {
        a = json_array();
        json_object_set_new(obj, key, a);
    }
    return a;
}

/* The object at key of obj, made when absent. */
static json_t *object_at(json_t *obj, const char *key)
{
    json_t *o = json_object_get(obj, key);
    if (!json_is_object(o)) {
        o = json_object();
        json_object_set_new(obj, key, o);
    }
    return o;
}

/* Each "K=V" of from set in process.env, replacing K's entry. */
static void apply_env(json_t *config, const json_t *from)
{
    json_t *env = array_at(object_at(config, "process"), "env"), *e;
    size_t i;

    json_array_foreach(from, i, e) {
        const char *s = json_string_value(e), *eq;
        size_t k, klen;
        json_t *x;
        bool done = false;
        if (s == NULL || (eq = strchr(s, '=')) == NULL)
            continue;
        klen = (size_t)(eq - s) + 1;
        json_array_foreach(env, k, x) {
            const char *t = json_string_value(x);
            if (!done && t != NULL && strncmp(t, s, klen) == 0) {
                json_array_set_new(env, k, json_string(s));
                done = true;
            }
        }
        if (!done)
            json_array_append_new(env, json_string(s));
    }
}

/* Each CDI mount of from added to mounts (a bind unless it says). */
static void apply_mounts(json_t *config, const json_t *from)
{
    json_t *mounts = array_at(config, "mounts"), *m;
    size_t i;

    json_array_foreach(from, i, m) {
        const char *type = json_string_value(json_object_get(m, "type"));
        json_t *opts = json_object_get(m, "options");
        json_array_append_new(
            mounts,
            json_pack("{s:O, s:O, s:s, s:O}", "destination",
                      json_object_get(m, "containerPath"), "source",
                      json_object_get(m, "hostPath"), "type",
                      type ? type : "bind", "options",
                      json_is_array(opts) ? opts : json_array()));
    }
}

/* One CDI device node into linux.devices and the device cgroup's allow
 * list; false with *cause when its host node cannot be read. */
static bool apply_node(json_t *linux_, const json_t *n, char **cause)
{
    const char *path = json_string_value(json_object_get(n, "path"));
    const char *host = json_string_value(json_object_get(n, "hostPath"));
    const char *perm = json_string_value(json_object_get(n, "permissions"));
    struct stat st;
    const char *type;

    if (path == NULL) {
        *cause = xstrdup("a device node of the app's CDI device has no path");
        return false;
    }
    if (host == NULL)
        host = path;
    if (stat(host, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) {
        *cause = xasprintf("device node %s of the app's CDI device: %s", host,
                           errno ? strerror(errno) : "not a device");
        return false;
    }
    type = S_ISCHR(st.st_mode) ? "c" : "b";
    json_array_append_new(
        array_at(linux_, "devices"),
        json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "path", path,
                  "type", type, "major", (json_int_t)major(st.st_rdev),
                  "minor", (json_int_t)minor(st.st_rdev), "fileMode",
                  (json_int_t)0666, "uid", (json_int_t)0, "gid",
                  (json_int_t)0));
    json_array_append_new(
        array_at(object_at(linux_, "resources"), "devices"),
        json_pack("{s:b, s:s, s:I, s:I, s:s}", "allow", 1, "type", type,
                  "major", (json_int_t)major(st.st_rdev), "minor",
                  (json_int_t)minor(st.st_rdev), "access",
                  perm ? perm : "rwm"));
    return true;
}

/* Each CDI hook of from added to hooks.<hookName>. */
static void apply_hooks(json_t *config, const json_t *from)
{
    json_t *hooks = object_at(config, "hooks"), *h;
    size_t i;

    json_array_foreach(from, i, h) {
        const char *name = json_string_value(json_object_get(h, "hookName"));
        json_t *one;
        if (name == NULL)
            continue;
        one = json_pack("{s:O}", "path", json_object_get(h, "path"));
        if (json_object_get(h, "args") != NULL)
            json_object_set(one, "args", json_object_get(h, "args"));
        if (json_object_get(h, "env") != NULL)
            json_object_set(one, "env", json_object_get(h, "env"));
        if (json_object_get(h, "timeout") != NULL)
            json_object_set(one, "timeout", json_object_get(h, "timeout"));
        json_array_append_new(array_at(hooks, name), one);
    }
}

bool ociedit_apply(json_t *config, const json_t *edits, char **cause)
{
    json_t *n;
    size_t i;

    apply_env(config, json_object_get(edits, "env"));
    apply_mounts(config, json_object_get(edits, "mounts"));
    json_array_foreach(json_object_get(edits, "deviceNodes"), i, n) {
        errno = 0;
        if (!apply_node(object_at(config, "linux"), n, cause))
            return false;
    }
    apply_hooks(config, json_object_get(edits, "hooks"));
    return true;
}
