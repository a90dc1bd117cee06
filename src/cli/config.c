/* SPDX-License-Identifier: MIT */
/*
 * config.c: the saved login of config.h. Safety: the directory is created
 * 0700; the file is written to a mkstemp file (0600, O_EXCL) in the same
 * directory, fsynced and renamed, so a reader never sees half a file and
 * the token is never readable by others, even for a moment. A file that
 * others can read is refused rather than used.
 */
#include "common/accel_setup.h"
#include "cli/config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

#define CONFIG_LINE_MAX 4096

static char *config_dir(void)
{
    const char *x = getenv("XDG_CONFIG_HOME");
    const char *h = getenv("HOME");
    if (x != NULL && x[0] == '/')
        return xasprintf("%s/accel", x);
    if (h != NULL && h[0] == '/')
        return xasprintf("%s/.config/accel", h);
    return NULL;
}

char *config_path(void)
{
    char *d = config_dir();
    char *p = d ? xasprintf("%s/config", d) : NULL;
    free(d);
    return p;
}

/* "  key = value  " -> key, value (trimmed, in place); 0 if not a pair. */
static int split_line(char *line, char **key, char **val)
{
    char *eq = strchr(line, '=');
    char *e;
    if (eq == NULL)
        return 0;
    *eq = '\0';
    *key = line + strspn(line, " \t");
    for (e = eq; e > *key && (e[-1] == ' ' || e[-1] == '\t'); e--)
        e[-1] = '\0';
    *val = eq + 1 + strspn(eq + 1, " \t");
    (*val)[strcspn(*val, "\r\n")] = '\0';
    for (e = *val + strlen(*val); e > *val && (e[-1] == ' ' || e[-1] == '\t');
         e--)
        e[-1] = '\0';
    return 1;
}

int config_load(struct cli_config *c)
{
    char line[CONFIG_LINE_MAX], *key, *val;
    struct stat st;
    char *path = config_path();
    FILE *f;
    int rc = -1;

    memset(c, 0, sizeof(*c));
    if (path == NULL)
        return 0;
    f = fopen(path, "re");
    if (f == NULL) {
        /* absent, or not this user's to read (sudo -u, setpriv with
         * another HOME): no saved login */
        rc = errno == ENOENT || errno == ENOTDIR || errno == EACCES ? 0 : -1;
        if (rc != 0)
            fprintf(stderr, "accelctl: cannot read %s: %s\n", path,
                    strerror(errno));
        goto out;
    }
    if (fstat(fileno(f), &st) != 0 || (st.st_mode & 077) != 0) {
        fprintf(stderr, "accelctl: %s is readable by others (mode %03o); "
                "chmod 600 it or run accelctl login again\n", path,
                (unsigned)(st.st_mode & 0777));
        goto out_close;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        if (line[strspn(line, " \t")] == '#' || !split_line(line, &key, &val))
            continue;
        if (strcmp(key, "server") == 0 && val[0] != '\0') {
            free(c->server);
            c->server = xstrdup(val);
        } else if (strcmp(key, "token") == 0 && val[0] != '\0') {
            free(c->token);
            c->token = xstrdup(val);
        }
    }
    rc = 0;
out_close:
    fclose(f);
out:
    free(path);
    if (rc != 0)
        config_release(c);
    return rc;
}

/* mkdir -p for the last two components (…/.config/accel), 0700. */
static int make_dir(const char *dir)
{
    char *parent = xstrdup(dir);
    char *slash = strrchr(parent, '/');
    int rc = 0;
    if (slash != NULL && slash != parent) {
        *slash = '\0';
        if (mkdir(parent, 0700) != 0 && errno != EEXIST)
            rc = -1;
    }
    if (rc == 0 && mkdir(dir, 0700) != 0 && errno != EEXIST)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "accelctl: cannot create %s: %s\n", dir,
                strerror(errno));
    free(parent);
    return rc;
}

int config_save(const char *server, const char *token)
{
    char *dir = config_dir(), *path = NULL, *tmp = NULL, *text = NULL;
    int fd = -1, rc = -1;
    bool ok;
    size_t len;

    if (dir == NULL) {
        fprintf(stderr, "accelctl: neither XDG_CONFIG_HOME nor HOME is set "
                "(an absolute path): nowhere to save the login\n");
        return -1;
    }
    if (make_dir(dir) != 0)
        goto out;
    path = xasprintf("%s/config", dir);
    tmp = xasprintf("%s/.config.XXXXXX", dir);
    fd = mkstemp(tmp); /* 0600, O_EXCL */
    if (fd < 0) {
        fprintf(stderr, "accelctl: cannot create a file in %s: %s\n", dir,
                strerror(errno));
        goto out;
    }
    text = xasprintf("# accelctl login (accelctl(1)); keep it private\n"
                     "%s%s%s%s%s%s", server ? "server = " : "",
                     server ? server : "", server ? "\n" : "",
                     token ? "token = " : "", token ? token : "",
                     token ? "\n" : "");
    len = strlen(text);
    ok = fchmod(fd, 0600) == 0 && write(fd, text, len) == (ssize_t)len &&
         fsync(fd) == 0;
    if (close(fd) != 0)
        ok = false;
    fd = -1;
    if (!ok) {
        fprintf(stderr, "accelctl: cannot write %s: %s\n", tmp,
                strerror(errno));
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        fprintf(stderr, "accelctl: cannot replace %s: %s\n", path,
                strerror(errno));
        unlink(tmp);
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    free(text);
    free(tmp);
    free(path);
    free(dir);
    return rc;
}

void config_release(struct cli_config *c)
{
    free(c->server);
    free(c->token);
    c->server = NULL;
    c->token = NULL;
}
