/* SPDX-License-Identifier: MIT */
/*
 * cmd_gpu_pkg.c: `accelctl gpu install` and `gpu uninstall` (admin, this
 * machine): the NVIDIA driver and NVML packages of Debian's non-free
 * section for the GPUs lspci sees. Both show a plan first (the GPUs, the
 * packages, what is installed, what apt would do: apt-get -s), refuse
 * with the reason when there is nothing to do or it cannot be done (no
 * NVIDIA GPU, non-free not in the package sources, not root, not an
 * admin), ask (or take --yes), run apt-get, then ask acceld to scan NVML
 * again (POST /api/gpu/rediscover) so new GPUs are scheduled without a
 * restart.
 *
 * For tests only (docs/cli.md): ACCEL_TEST_LSPCI names a file read
 * instead of running `lspci -nn`; ACCEL_TEST_APT_ROOT a directory whose
 * etc/apt/ is read instead of /etc/apt/; ACCEL_TEST_APT_GET and
 * ACCEL_TEST_DPKG_QUERY commands run instead of apt-get and dpkg-query.
 */
#include "common/accel_setup.h"
#include "cli/cli.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/client.h"
#include "cli/prompt.h"
#include "cli/sentence.h"
#include "common/util.h"

#define OUT_MAX (1u << 20) /* bytes kept of a command's output */
#define MAX_GPUS 32

/* Debian's packages (non-free): the driver and the NVML library. */
static const char *const packages[] = {"nvidia-driver", "libnvidia-ml1"};
#define NPKG (sizeof(packages) / sizeof(packages[0]))

struct plan {
    char *gpus[MAX_GPUS];   /* lspci's lines of NVIDIA display devices */
    size_t ngpus;
    bool nonfree;           /* some enabled deb source has non-free */
    bool installed[NPKG];   /* dpkg-query says installed */
    char *apt;              /* apt-get -s's output */
    int apt_status;         /* its exit status */
};

/* Run argv (stdin /dev/null), its stdout (and stderr when err) into *out;
 * without err its stderr goes to /dev/null: a query's own complaints
 * ("dpkg-query: no packages found matching nvidia-driver") are its answer,
 * read from the exit status, not lines for the user above ours. Returns the
 * exit status, 127 when it could not be run. */
static int run_capture(char *const argv[], bool err, char **out)
{
    int fd[2], st = 0;
    size_t len = 0;
    char *buf = xcalloc(1, OUT_MAX + 1);
    pid_t pid;
    ssize_t n;

    *out = buf;
    if (pipe(fd) != 0)
        return 127;
    pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return 127;
    }
    if (pid == 0) {
        dup2(fd[1], 1);
        if (err)
            dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        if (freopen("/dev/null", "r", stdin) == NULL ||
            (!err && freopen("/dev/null", "w", stderr) == NULL))
            _exit(127);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    while ((n = read(fd[0], buf + len, OUT_MAX - len)) > 0)
        len += (size_t)n;
    close(fd[0]);
    while (waitpid(pid, &st, 0) < 0)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* At most max bytes of path, NUL-terminated, or NULL. */
static char *read_file(const char *path, size_t max)
{
    FILE *f = fopen(path, "re");
    char *buf;
    size_t n;
    if (f == NULL)
        return NULL;
    buf = xcalloc(1, max + 1);
    n = fread(buf, 1, max, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static const char *cmd_of(const char *env, const char *dflt)
{
    const char *v = getenv(env);
    return v != NULL && v[0] != '\0' ? v : dflt;
}

/* NVIDIA (vendor 10de) VGA / 3D / display controllers in lspci -nn. */
static void find_gpus(struct plan *p)
{
    const char *fake = getenv("ACCEL_TEST_LSPCI");
    char *text = NULL, *save = NULL, *line;
    if (fake != NULL) {
        text = read_file(fake, OUT_MAX);
    } else {
        char *argv[] = {"lspci", "-nn", NULL};
        run_capture(argv, false, &text);
    }
    for (line = text ? strtok_r(text, "\n", &save) : NULL; line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        bool display = strstr(line, "VGA compatible controller") ||
                       strstr(line, "3D controller") ||
                       strstr(line, "Display controller");
        if (display && strstr(line, "[10de:") && p->ngpus < MAX_GPUS)
            p->gpus[p->ngpus++] = xstrdup(line);
    }
    free(text);
}

/* Does one sources file enable a deb source with non-free? One-line
 * ("deb [opts] URI SUITE COMP...") and deb822 (Types/Components/Enabled)
 * forms; a stanza or line that is commented out or Enabled: no is not. */
static bool file_has_nonfree(const char *path, bool deb822)
{
    char *text = read_file(path, OUT_MAX), *save = NULL, *line;
    bool found = false, deb = false, comp = false, enabled = true;
    for (line = text ? strtok_r(text, "\n", &save) : NULL; line && !found;
         line = strtok_r(NULL, "\n", &save)) {
        line += strspn(line, " \t");
        if (line[0] == '#')
            continue;
        if (!deb822) {
            found = strncmp(line, "deb ", 4) == 0 &&
                    (strstr(line, " non-free ") ||
                     strstr(line, " non-free\t") ||
                     (strlen(line) >= 9 &&
                      strcmp(line + strlen(line) - 9, " non-free") == 0));
            continue;
        }
        if (strncmp(line, "Types:", 6) == 0) {
            if (deb && comp && enabled)
                found = true;
            deb = strstr(line, " deb") != NULL &&
                  (strstr(line, " deb ") || strstr(line, " deb\t") ||
                   line[strlen(line) - 1] == 'b');
            comp = false;
            enabled = true;
        } else if (strncmp(line, "Components:", 11) == 0) {
            char *c = line + 11;
            comp = strstr(c, " non-free ") != NULL ||
                   (strlen(c) >= 9 &&
                    strcmp(c + strlen(c) - 9, " non-free") == 0);
        } else if (strncmp(line, "Enabled:", 8) == 0) {
            enabled = strstr(line, "no") == NULL;
        }
    }
    if (deb822 && deb && comp && enabled)
        found = true;
    free(text);
    return found;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

static void find_sources(struct plan *p)
{
    const char *root = getenv("ACCEL_TEST_APT_ROOT");
    char *etc = xasprintf("%s/etc/apt", root ? root : "");
    char *list = xasprintf("%s/sources.list", etc);
    char *dir = xasprintf("%s/sources.list.d", etc);
    DIR *dh = opendir(dir);
    struct dirent *e;

    p->nonfree = file_has_nonfree(list, false);
    while (dh != NULL && !p->nonfree && (e = readdir(dh)) != NULL) {
        bool one = ends_with(e->d_name, ".list");
        bool stanza = ends_with(e->d_name, ".sources");
        if (one || stanza) {
            char *f = xasprintf("%s/%s", dir, e->d_name);
            p->nonfree = file_has_nonfree(f, stanza);
            free(f);
        }
    }
    if (dh)
        closedir(dh);
    free(etc);
    free(list);
    free(dir);
}

static void find_installed(struct plan *p)
{
    const char *q = cmd_of("ACCEL_TEST_DPKG_QUERY", "dpkg-query");
    for (size_t i = 0; i < NPKG; i++) {
        char *out = NULL;
        char *argv[] = {(char *)q, "-W", "-f=${Status}", (char *)packages[i],
                        NULL};
        int st = run_capture(argv, false, &out);
        p->installed[i] = st == 0 && strstr(out, "install ok installed");
        free(out);
    }
}

/* apt-get -s install|remove of the packages that need it. */
static void simulate(struct plan *p, bool install)
{
    const char *argv[4 + NPKG + 1];
    size_t n = 0;
    argv[n++] = cmd_of("ACCEL_TEST_APT_GET", "apt-get");
    argv[n++] = "-s";
    argv[n++] = install ? "install" : "remove";
    for (size_t i = 0; i < NPKG; i++)
        if (p->installed[i] != install)
            argv[n++] = packages[i];
    argv[n] = NULL;
    if (n == 3)
        return;
    p->apt_status = run_capture((char *const *)argv, true, &p->apt);
}

static void plan_release(struct plan *p)
{
    for (size_t i = 0; i < p->ngpus; i++)
        free(p->gpus[i]);
    free(p->apt);
}

/* apt's "Inst "/"Remv " lines (what it would do), indented. */
static void print_apt(const char *apt)
{
    const char *l = apt;
    while (l != NULL && *l) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        if (strncmp(l, "Inst ", 5) == 0 || strncmp(l, "Remv ", 5) == 0)
            printf("    %.*s\n", (int)n, l);
        l = e ? e + 1 : NULL;
    }
}

/* Show the plan; returns CLI_EXIT_OK when there is something to do that
 * can be done (*todo > 0) or nothing to do (*todo == 0), else a refusal
 * (printed). */
static int show_plan(struct plan *p, bool install, size_t *todo_out)
{
    size_t todo = 0;
    printf("NVIDIA GPUs (lspci): %s\n", p->ngpus ? "" : "none");
    for (size_t i = 0; i < p->ngpus; i++)
        printf("  %s\n", p->gpus[i]);
    printf("Packages (Debian non-free):\n");
    for (size_t i = 0; i < NPKG; i++) {
        printf("  %-16s %s\n", packages[i],
               p->installed[i] ? "installed" : "not installed");
        todo += p->installed[i] != install;
    }
    if (install && p->ngpus == 0) {
        fprintf(stderr, "accelctl gpu install: lspci shows no NVIDIA GPU "
                "on this machine; nothing to install\n");
        return CLI_EXIT_REFUSED;
    }
    *todo_out = todo;
    if (todo == 0) {
        printf("Nothing to %s.\n", install ? "install" : "remove");
        return CLI_EXIT_OK;
    }
    if (install && !p->nonfree) {
        fprintf(stderr, "accelctl gpu install: the package sources do not "
                "enable Debian's non-free section, where %s and %s are.\n"
                "Add \"non-free non-free-firmware\" to the Components: of "
                "/etc/apt/sources.list.d/debian.sources (or to the deb lines "
                "of /etc/apt/sources.list), run apt-get update, then try "
                "again.\n", packages[0], packages[1]);
        return CLI_EXIT_REFUSED;
    }
    if (p->apt_status != 0) {
        fprintf(stderr, "accelctl gpu %s: apt-get -s %s refused (exit %d):"
                "\n%s", install ? "install" : "uninstall",
                install ? "install" : "remove", p->apt_status,
                p->apt ? p->apt : "");
        return CLI_EXIT_REFUSED;
    }
    printf("apt-get would %s:\n", install ? "install" : "remove");
    print_apt(p->apt);
    return CLI_EXIT_OK;
}

/* An admin's token? GET /api/users answers admins only. */
static int check_admin(struct cli_ctx *ctx, const char *what)
{
    struct client_resp r;
    int rc = client_call(ctx, "GET", "/api/users", NULL, &r);
    if (rc == CLI_EXIT_REFUSED)
        fprintf(stderr, "accelctl gpu %s: only an admin may change the "
                "drivers (acceld answered HTTP %ld)\n", what, r.status);
    client_resp_release(&r);
    return rc;
}

/* Ask acceld to scan NVML again. After a removal NVML is expected to be
 * gone: acceld's refusal is then reported, not failed on. */
static int rediscover(struct cli_ctx *ctx, bool install)
{
    struct client_resp r;
    int rc = client_call(ctx, "POST", "/api/gpu/rediscover", NULL, &r);
    if (rc == CLI_EXIT_REFUSED && !install && r.status == 409) {
        printf("acceld: %s; the GPUs it knew go missing at its next "
               "check.\n", json_string_value(json_object_get(r.body,
                                                              "message")));
        rc = CLI_EXIT_OK;
    } else if (rc == CLI_EXIT_OK) {
        const json_t *added = json_object_get(r.data, "added");
        printf("acceld: %s; %zu new GPU%s.\n",
               json_string_value(json_object_get(r.data, "nvml")),
               json_array_size(added), json_array_size(added) == 1 ? "" : "s");
    } else if (rc == CLI_EXIT_REFUSED) {
        rc = sentence_report_ctx(ctx, &r);
    }
    client_resp_release(&r);
    return rc;
}

static int gpu_packages(struct cli_ctx *ctx, const struct cli_args *args,
                        bool install)
{
    const char *what = install ? "install" : "uninstall";
    struct plan p;
    char *out = NULL;
    size_t todo = 0;
    int rc;

    memset(&p, 0, sizeof(p));
    find_gpus(&p);
    find_sources(&p);
    find_installed(&p);
    simulate(&p, install);
    rc = show_plan(&p, install, &todo);
    if (rc == CLI_EXIT_OK && todo == 0) {
        /* installed already (a reboot loaded the driver since?): only
         * the rediscovery, which acceld allows admins only */
        rc = install ? rediscover(ctx, true) : CLI_EXIT_OK;
        plan_release(&p);
        return rc;
    }
    if (rc == CLI_EXIT_OK)
        rc = check_admin(ctx, what);
    if (rc == CLI_EXIT_OK && geteuid() != 0) {
        fprintf(stderr, "accelctl gpu %s: apt-get needs root: run it as "
                "root (sudo accelctl gpu %s)\n", what, what);
        rc = CLI_EXIT_REFUSED;
    }
    if (rc == CLI_EXIT_OK && !args->yes &&
        !(ctx->interactive && prompt_confirm(install ? "Install them?"
                                                     : "Remove them?"))) {
        fprintf(stderr, "accelctl gpu %s: not confirmed%s; nothing "
                "changed\n", what, ctx->interactive ? "" : " (--yes)");
        rc = CLI_EXIT_REFUSED;
    }
    if (rc == CLI_EXIT_OK) {
        const char *argv[4 + NPKG + 1];
        size_t n = 0;
        argv[n++] = cmd_of("ACCEL_TEST_APT_GET", "apt-get");
        argv[n++] = install ? "install" : "remove";
        argv[n++] = "-y";
        for (size_t i = 0; i < NPKG; i++)
            if (p.installed[i] != install)
                argv[n++] = packages[i];
        argv[n] = NULL;
        fflush(stdout);
        rc = run_capture((char *const *)argv, true, &out);
        fputs(out, stdout);
        if (rc != 0) {
            fprintf(stderr, "accelctl gpu %s: apt-get failed (exit %d)\n",
                    what, rc);
            rc = CLI_EXIT_REFUSED;
        } else {
            rc = rediscover(ctx, install);
        }
    }
    free(out);
    plan_release(&p);
    return rc;
}

int cmd_gpu_pkg_install(struct cli_ctx *ctx, const struct cli_args *args)
{
    return gpu_packages(ctx, args, true);
}

int cmd_gpu_pkg_uninstall(struct cli_ctx *ctx, const struct cli_args *args)
{
    return gpu_packages(ctx, args, false);
}
