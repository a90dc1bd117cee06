/* SPDX-License-Identifier: MIT */
/*
 * accel-runc: an OCI runtime that wraps runc, for engines without CDI
 * (Debian 12's Docker 20.10; docs/containers.md "Docker"). Registered as a
 * Docker runtime (daemon.json "runtimes", or dockerd --add-runtime), it
 * is called exactly as runc is. On `create` (and `run`) of a container
 * that names an app (-e ACCEL_APP=NAME, or the annotation accel.dev/app),
 * it applies the app's CDI device, the one acceld writes for people's own
 * containers (kind accel.dev/app: the shim, the app's config, ledgers and
 * GPUs, and the hook that puts the container into the app's cgroup), to
 * the bundle's config.json, then runs runc with the same arguments. A
 * container that names an app no spec here lists is refused, with the
 * reason, and runc never runs; every other call goes to runc unchanged.
 * It talks to no acceld: the spec is what acceld lets a container have
 * (written while the app is bound here; a stopped app's refuses through
 * its hook).
 */
#include "common/accel_setup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "runc/ociedit.h"

/* set on a config once the app's edits are in it: the app's name */
#define APPLIED_ANNOTATION "accel.dev/applied"

/* runc's global options that take a value (runc 1.1 `runc --help`) */
static const char *const valued[] = { "--log", "--log-format", "--root",
                                      "--criu", "--rootless", NULL };

/* Does option arg take the next argument as its value? */
static bool takes_value(const char *arg)
{
    for (const char *const *v = valued; *v; v++)
        if (strcmp(arg, *v) == 0)
            return true;
    return false;
}

/* The value of global option name (--name VALUE or --name=VALUE) before
 * argv[cmd], or NULL. */
static const char *global_opt(char **argv, int cmd, const char *name)
{
    size_t len = strlen(name);
    for (int i = 1; i < cmd; i++) {
        if (strcmp(argv[i], name) == 0 && i + 1 < cmd)
            return argv[i + 1];
        if (strncmp(argv[i], name, len) == 0 && argv[i][len] == '=')
            return argv[i] + len + 1;
    }
    return NULL;
}

/* The index of runc's command word (create, start, delete, ...), or -1. */
static int command_index(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] != '-')
            return i;
        if (takes_value(argv[i]))
            i++;
    }
    return -1;
}

/* The bundle of the command at argv[cmd]: --bundle/-b, else ".". */
static const char *bundle_of(int argc, char **argv, int cmd)
{
    for (int i = cmd + 1; i < argc; i++) {
        const char *a = argv[i];
        if ((strcmp(a, "--bundle") == 0 || strcmp(a, "-b") == 0) &&
            i + 1 < argc)
            return argv[i + 1];
        if (strncmp(a, "--bundle=", 9) == 0)
            return a + 9;
        if (strncmp(a, "-b=", 3) == 0)
            return a + 3;
    }
    return ".";
}

/* The runc to run: $ACCEL_RUNC, else the first runc on PATH, else
 * /usr/sbin/runc (caller frees). */
static char *runc_path(void)
{
    const char *env = getenv("ACCEL_RUNC"), *path = getenv("PATH");
    char *copy, *dir, *save = NULL, *found = NULL;

    if (env != NULL && env[0] == '/')
        return xstrdup(env);
    copy = xstrdup(path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                 "/usr/bin:/sbin:/bin");
    for (dir = strtok_r(copy, ":", &save); dir && !found;
         dir = strtok_r(NULL, ":", &save)) {
        char *p = xasprintf("%s/runc", dir);
        if (dir[0] == '/' && access(p, X_OK) == 0)
            found = p;
        else
            free(p);
    }
    free(copy);
    return found ? found : xstrdup("/usr/sbin/runc");
}

/* runc with our arguments: returns only on failure. */
static int exec_runc(char **argv)
{
    char *runc = runc_path();
    argv[0] = runc;
    execv(runc, argv);
    fprintf(stderr, "accel-runc: cannot run %s: %s\n", runc, strerror(errno));
    free(runc);
    return 127;
}

/*
 * A refusal: msg on stderr and, where the engine gave runc a log (Docker's
 * containerd shim reads its last error from there, in runc's JSON lines),
 * in the log. Returns runc's failure status.
 */
static int refuse(char **argv, int cmd, const char *msg)
{
    const char *log = global_opt(argv, cmd, "--log");
    const char *fmt = global_opt(argv, cmd, "--log-format");
    FILE *f;

    fprintf(stderr, "accel-runc: %s\n", msg);
    if (log == NULL || (f = fopen(log, "a")) == NULL)
        return 1;
    if (fmt != NULL && strcmp(fmt, "json") == 0) {
        json_t *line = json_pack("{s:s, s:s}", "level", "error", "msg", msg);
        char ts[40];
        time_t now = time(NULL);
        struct tm tm;
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
        json_object_set_new(line, "time", json_string(ts));
        char *text = json_dumps(line, JSON_COMPACT);
        fprintf(f, "%s\n", text);
        free(text);
        json_decref(line);
    } else {
        fprintf(f, "accel-runc: %s\n", msg);
    }
    fclose(f);
    return 1;
}

/* config written over path through a new file renamed over it. */
static bool write_config(const char *path, const json_t *config)
{
    char *tmp = xasprintf("%s.accel-runc", path);
    struct stat st;
    bool ok = json_dump_file(config, tmp, JSON_COMPACT) == 0;

    if (ok && stat(path, &st) == 0)
        ok = chmod(tmp, st.st_mode & 07777) == 0;
    ok = ok && rename(tmp, path) == 0;
    if (!ok)
        unlink(tmp);
    free(tmp);
    return ok;
}

/* The spec directories: $ACCEL_CDI_DIR (where acceld writes when it is
 * set), then CDI's own two. */
static void spec_dirs(const char *dirs[4])
{
    const char *env = getenv("ACCEL_CDI_DIR");
    int n = 0;

    if (env != NULL && env[0] == '/')
        dirs[n++] = env;
    dirs[n++] = "/etc/cdi";
    dirs[n++] = "/var/run/cdi";
    dirs[n] = NULL;
}

/* The refusal of a container naming app, which no spec here lists. */
static int refuse_unknown(char **argv, int cmd, const char *app,
                          const char *const *dirs)
{
    char *msg = xasprintf("the container names app '%s' (%s or the "
                          "annotation %s), and no app of that name admits "
                          "containers on this machine: no CDI spec in %s%s"
                          "/etc/cdi or /var/run/cdi lists %s=%s. `accelctl "
                          "app list` shows the apps; an app admits people's "
                          "own containers while it is bound to this "
                          "machine's GPUs and has no run: of its own "
                          "(docs/containers.md)",
                          app, OCIEDIT_ENV, OCIEDIT_ANNOTATION,
                          dirs[2] ? dirs[0] : "", dirs[2] ? ", " : "",
                          OCIEDIT_KIND, app);
    int status = refuse(argv, cmd, msg);
    free(msg);
    return status;
}

/* config's annotations, made when absent. */
static json_t *annotations(json_t *config)
{
    json_t *ann = json_object_get(config, "annotations");
    if (!json_is_object(ann)) {
        ann = json_object();
        json_object_set_new(config, "annotations", ann);
    }
    return ann;
}

/* app's edits applied to config, marked, and written to path: false after
 * a refusal said why (*status runc's failure status then). */
static bool edit_config(char **argv, int cmd, const char *path,
                        json_t *config, const char *app, int *status)
{
    const char *dirs[4];
    char *cause = NULL, *msg = NULL;
    json_t *edits, *ann;

    spec_dirs(dirs);
    edits = ociedit_find(dirs, app);
    if (edits == NULL) {
        *status = refuse_unknown(argv, cmd, app, dirs);
        return false;
    }
    if (!ociedit_apply(config, edits, &cause))
        msg = xasprintf("cannot give the container app '%s': %s", app, cause);
    json_decref(edits);
    free(cause);
    if (msg == NULL) {
        ann = annotations(config);
        json_object_set_new(ann, APPLIED_ANNOTATION, json_string(app));
        if (json_object_get(ann, "io.container.manager") == NULL)
            json_object_set_new(ann, OCIEDIT_ENGINE_ANNOTATION,
                                json_string("docker"));
        if (!write_config(path, config))
            msg = xasprintf("cannot write %s: %s", path, strerror(errno));
    }
    if (msg != NULL)
        *status = refuse(argv, cmd, msg);
    free(msg);
    return *status == 0;
}

/* The bundle's config edited for the app it names, if any: false after a
 * refusal said why (*status is runc's failure status then). */
static bool edit_bundle(char **argv, int cmd, const char *bundle, int *status)
{
    char *path = xasprintf("%s/config.json", bundle), *app = NULL;
    json_t *config = json_load_file(path, 0, NULL);
    const char *named = ociedit_app(config), *done;
    bool ok = true;

    done = json_string_value(json_object_get(
        json_object_get(config, "annotations"), APPLIED_ANNOTATION));
    /* not ours (runc says what is wrong with it), or edited already (a
     * second create of one bundle) */
    if (config != NULL && named != NULL &&
        (done == NULL || strcmp(done, named) != 0)) {
        app = xstrdup(named); /* the edits replace the env entry it is in */
        *status = 0;
        ok = edit_config(argv, cmd, path, config, app, status);
    }
    free(app);
    json_decref(config);
    free(path);
    return ok;
}

int main(int argc, char **argv)
{
    int cmd = command_index(argc, argv), status = 1;

    if (cmd > 0 && (strcmp(argv[cmd], "create") == 0 ||
                    strcmp(argv[cmd], "run") == 0) &&
        !edit_bundle(argv, cmd, bundle_of(argc, argv, cmd), &status))
        return status;
    return exec_runc(argv);
}
