/* SPDX-License-Identifier: MIT */
/*
 * manifest_container.c: the fields of run that make an app an OCI
 * container (SPEC 8.2.1): run.image and docker-compose's image, pull,
 * entrypoint, ports, volumes, shmSize, and the admin-only privileged,
 * network, pid and capAdd; and the rules that hold a member's container
 * to its home and to loopback. Pure: no I/O.
 */
#include "common/accel_setup.h"
#include "daemon/rules/manifest.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "common/quantity.h"
#include "common/util.h"

#define IMAGE_REF_MAX 255
#define TAG_MAX 128
#define PORTS_MAX 64
#define VOLUMES_MAX 64
#define MEMBER_PORT_MIN 1024

static bool lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool alnum(char c)
{
    return lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

/* A path component: [a-z0-9]+ joined by '.', '_', "__" or '-'s. */
static bool path_component(const char *s, size_t n)
{
    size_t i = 0;
    if (n == 0 || !lower_alnum(s[0]) || !lower_alnum(s[n - 1]))
        return false;
    while (i < n) {
        if (lower_alnum(s[i])) {
            i++;
            continue;
        }
        if (s[i] == '.' || (s[i] == '_' && s[i + 1] != '_')) {
            i++;
        } else if (s[i] == '_') {
            i += 2;
        } else if (s[i] == '-') {
            while (i < n && s[i] == '-')
                i++;
        } else {
            return false;
        }
        if (i >= n || !lower_alnum(s[i]))
            return false;
    }
    return true;
}

/* A registry host: letters, digits, '.', '-', an optional ":port". */
static bool host_component(const char *s, size_t n)
{
    const char *colon = memchr(s, ':', n);
    size_t hn = colon ? (size_t)(colon - s) : n;
    if (hn == 0 || !alnum(s[0]) || !alnum(s[hn - 1]))
        return false;
    for (size_t i = 0; i < hn; i++)
        if (!alnum(s[i]) && s[i] != '.' && s[i] != '-')
            return false;
    if (colon == NULL)
        return true;
    if (n - hn < 2 || n - hn > 6)
        return false;
    for (size_t i = hn + 1; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

bool manifest_image_archive(const char *ref)
{
    static const char *const kinds[] = {"oci-archive:", "docker-archive:",
                                        NULL};
    for (const char *const *k = kinds; *k; k++) {
        const char *path = ref + strlen(*k);
        if (strncmp(ref, *k, strlen(*k)) != 0)
            continue;
        return path[0] == '/' && strlen(ref) <= IMAGE_REF_MAX &&
               strspn(path, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
                            "TUVWXYZ0123456789._-+/") == strlen(path) &&
               strstr(path, "/../") == NULL &&
               (strlen(path) < 3 || strcmp(path + strlen(path) - 3, "/..")) &&
               path[strlen(path) - 1] != '/';
    }
    return false;
}

bool manifest_image_ref(const char *ref)
{
    size_t len = strlen(ref), name_len;
    const char *at = strchr(ref, '@'), *slash, *tag, *p;

    if (len == 0 || len > IMAGE_REF_MAX)
        return false;
    if (at != NULL) { /* @sha256:<64 hex> */
        if (strncmp(at + 1, "sha256:", 7) != 0 || strlen(at + 8) != 64 ||
            strspn(at + 8, "0123456789abcdef") != 64)
            return false;
        name_len = (size_t)(at - ref);
    } else {
        name_len = len;
    }
    /* a tag is after the last '/' */
    slash = NULL;
    for (p = ref; p < ref + name_len; p++)
        if (*p == '/')
            slash = p;
    tag = memchr(slash ? slash : ref, ':', name_len - (size_t)((slash ? slash : ref) - ref));
    if (tag != NULL) {
        size_t tn = name_len - (size_t)(tag + 1 - ref);
        if (tn == 0 || tn > TAG_MAX || !(alnum(tag[1]) || tag[1] == '_'))
            return false;
        for (size_t i = 1; i <= tn; i++)
            if (!alnum(tag[i]) && tag[i] != '_' && tag[i] != '.' &&
                tag[i] != '-')
                return false;
        name_len = (size_t)(tag - ref);
    }
    /* components; the first may be a registry host */
    for (p = ref; p < ref + name_len;) {
        const char *e = memchr(p, '/', (size_t)(ref + name_len - p));
        size_t n = e ? (size_t)(e - p) : (size_t)(ref + name_len - p);
        bool host = p == ref && e != NULL &&
                    (memchr(p, '.', n) || memchr(p, ':', n) ||
                     (n == 9 && strncmp(p, "localhost", 9) == 0));
        if (!(host ? host_component(p, n) : path_component(p, n)))
            return false;
        if (e == NULL)
            return true;
        p = e + 1;
        if (p == ref + name_len)
            return false; /* a trailing '/' */
    }
    return false;
}

/* "[ip:]host:container[/tcp|udp]" into "ip:host:container/proto", the ip
 * 127.0.0.1 when absent (loopback unless the manifest says otherwise). */
static char *port_spec(const char *s, size_t i, char **cause)
{
    char ip[64] = "127.0.0.1", proto[4] = "tcp";
    unsigned long host, ctr;
    const char *p = s, *slash = strchr(s, '/'), *last;
    char *end;
    size_t body = slash ? (size_t)(slash - s) : strlen(s);

    if (slash && strcmp(slash, "/tcp") != 0 && strcmp(slash, "/udp") != 0)
        goto bad;
    if (slash)
        memcpy(proto, slash + 1, 4);
    last = NULL;
    for (const char *q = s; q < s + body; q++)
        if (*q == ':')
            last = q;
    if (last == NULL)
        goto bad;
    /* the ip, when there is one, ends at the first ':' ("[v6]:" for v6) */
    if (s[0] == '[' || memchr(s, ':', (size_t)(last - s)) != NULL) {
        const char *ipend = s[0] == '[' ? strchr(s, ']') : strchr(s, ':');
        size_t n;
        if (ipend == NULL || ipend >= last)
            goto bad;
        if (s[0] == '[')
            ipend++;
        n = (size_t)(ipend - s);
        if (n == 0 || n >= sizeof ip || *ipend != ':' ||
            strspn(s, "0123456789.abcdefABCDEF:[]") < n)
            goto bad;
        memcpy(ip, s, n);
        ip[n] = '\0';
        p = ipend + 1;
    }
    host = strtoul(p, &end, 10);
    if (end != last || p == last || host < 1 || host > 65535)
        goto bad;
    ctr = strtoul(last + 1, &end, 10);
    if (end != s + body || end == last + 1 || ctr < 1 || ctr > 65535)
        goto bad;
    return xasprintf("%s:%lu:%lu/%s", ip, host, ctr, proto);
bad:
    *cause = xasprintf("run.ports[%zu] (\"%s\") must be "
                       "\"[ip:]hostPort:containerPort[/tcp|/udp]\" with "
                       "ports from 1 to 65535", i, s);
    return NULL;
}

static enum accel_err parse_ports(const json_t *v, struct manifest_container *c,
                                  char **cause)
{
    size_t i, n = json_array_size(v);
    const json_t *e;

    c->ports = xcalloc(n + 1, sizeof(char *));
    if (v == NULL || json_is_null(v))
        return ACCEL_OK;
    if (!json_is_array(v) || n > PORTS_MAX) {
        *cause = xasprintf("run.ports must be a list of at most %d strings",
                           PORTS_MAX);
        return ACCEL_EINVAL;
    }
    json_array_foreach(v, i, e) {
        if (!json_is_string(e)) {
            *cause = xasprintf("run.ports[%zu] must be a string", i);
            return ACCEL_EINVAL;
        }
        c->ports[i] = port_spec(json_string_value(e), i, cause);
        if (c->ports[i] == NULL)
            return ACCEL_EINVAL;
    }
    return ACCEL_OK;
}

/* A volume path: no ',' or ':' (podman's -v separators), no newline. */
static bool volume_path(const char *s, size_t len)
{
    return len > 0 && len < 4096 && strlen(s) == len &&
           strpbrk(s, ",:\n") == NULL;
}

static enum accel_err parse_volumes(const json_t *v,
                                    struct manifest_container *c, char **cause)
{
    size_t i, n = json_array_size(v);
    const json_t *e;

    if (v == NULL || json_is_null(v))
        return ACCEL_OK;
    if (!json_is_array(v) || n > VOLUMES_MAX) {
        *cause = xasprintf("run.volumes must be a list of at most %d "
                           "{source, target, readOnly}", VOLUMES_MAX);
        return ACCEL_EINVAL;
    }
    c->volumes = xcalloc(n, sizeof(*c->volumes));
    json_array_foreach(v, i, e) {
        const json_t *src = json_object_get(e, "source");
        const json_t *dst = json_object_get(e, "target");
        const json_t *ro = json_object_get(e, "readOnly");
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)e, k, x) {
            if (strcmp(k, "source") && strcmp(k, "target") &&
                strcmp(k, "readOnly")) {
                *cause = xasprintf("run.volumes[%zu].%s is not a known field",
                                   i, k);
                return ACCEL_EINVAL;
            }
        }
        if (!json_is_string(src) ||
            !volume_path(json_string_value(src), json_string_length(src))) {
            *cause = xasprintf("run.volumes[%zu].source must be a path "
                               "without ',' or ':'", i);
            return ACCEL_EINVAL;
        }
        if (!json_is_string(dst) || json_string_value(dst)[0] != '/' ||
            !volume_path(json_string_value(dst), json_string_length(dst))) {
            *cause = xasprintf("run.volumes[%zu].target must be an absolute "
                               "path without ',' or ':'", i);
            return ACCEL_EINVAL;
        }
        if (ro != NULL && !json_is_boolean(ro)) {
            *cause = xasprintf("run.volumes[%zu].readOnly must be true or "
                               "false", i);
            return ACCEL_EINVAL;
        }
        c->volumes[i] = (struct manifest_volume){
            xstrdup(json_string_value(src)), xstrdup(json_string_value(dst)),
            json_is_true(ro)};
        c->nvolumes = i + 1;
    }
    return ACCEL_OK;
}

/* A capability name: CAP_ and upper case letters, digits, '_'. */
static enum accel_err parse_caps(const json_t *v, struct manifest_container *c,
                                 char **cause)
{
    if (v == NULL || json_is_null(v)) {
        c->cap_add = xcalloc(1, sizeof(char *));
        return ACCEL_OK;
    }
    c->cap_add = manifest_strings(v, "run.capAdd", cause);
    if (c->cap_add == NULL)
        return ACCEL_EINVAL;
    for (size_t i = 0; c->cap_add[i]; i++) {
        const char *s = c->cap_add[i];
        if (strncmp(s, "CAP_", 4) != 0 || strlen(s) > 32 ||
            strspn(s + 4, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") !=
                strlen(s + 4) || s[4] == '\0') {
            *cause = xasprintf("run.capAdd[%zu] must be a capability name "
                               "such as CAP_NET_ADMIN", i);
            return ACCEL_EINVAL;
        }
    }
    return ACCEL_OK;
}

/* One of the words in set (NULL-terminated), or NULL when absent. */
static enum accel_err one_of(const json_t *v, const char *field,
                             const char *const *set, char **out, char **cause)
{
    if (v == NULL || json_is_null(v))
        return ACCEL_OK;
    for (const char *const *w = set; json_is_string(v) && *w; w++)
        if (strcmp(json_string_value(v), *w) == 0) {
            *out = xstrdup(*w);
            return ACCEL_OK;
        }
    *cause = xasprintf("run.%s must be one of %s%s%s%s%s", field, set[0],
                       set[1] ? ", " : "", set[1] ? set[1] : "",
                       set[1] && set[2] ? ", " : "",
                       set[1] && set[2] ? set[2] : "");
    return ACCEL_EINVAL;
}

enum accel_err manifest_container_parse(const json_t *run,
                                        struct manifest_run *r, char **cause)
{
    static const char *const pulls[] = {"missing", "always", "never", NULL};
    static const char *const nets[] = {"bridge", "none", "host", NULL};
    static const char *const pids[] = {"host", NULL};
    struct manifest_container *c = &r->ctr;
    const json_t *img = json_object_get(run, "image");
    const json_t *v;
    char *pid = NULL;

    if (!json_is_string(img) ||
        !(manifest_image_ref(json_string_value(img)) ||
          manifest_image_archive(json_string_value(img)))) {
        *cause = xasprintf("run.image must be an image reference such as "
                           "docker.io/ollama/ollama:0.6.5 or "
                           "name@sha256:<64 hex digits> (lower-case path, "
                           "at most %d characters), or an archive "
                           "oci-archive:/path or docker-archive:/path",
                           IMAGE_REF_MAX);
        return ACCEL_EINVAL;
    }
    c->image = xstrdup(json_string_value(img));
    if (one_of(json_object_get(run, "pull"), "pull", pulls, &c->pull,
               cause) != ACCEL_OK ||
        one_of(json_object_get(run, "network"), "network", nets, &c->network,
               cause) != ACCEL_OK ||
        one_of(json_object_get(run, "pid"), "pid", pids, &pid, cause) !=
            ACCEL_OK)
        return ACCEL_EINVAL;
    if (c->pull == NULL)
        c->pull = xstrdup("missing");
    c->host_pid = pid != NULL;
    free(pid);
    v = json_object_get(run, "entrypoint");
    if (v != NULL && !json_is_null(v)) {
        c->entrypoint = manifest_strings(v, "run.entrypoint", cause);
        if (c->entrypoint == NULL)
            return ACCEL_EINVAL;
    }
    v = json_object_get(run, "shmSize");
    if (v != NULL && !json_is_null(v) &&
        (!json_is_string(v) ||
         quantity_parse_bytes(json_string_value(v), &c->shm_size) != ACCEL_OK ||
         c->shm_size == 0)) {
        *cause = xasprintf("run.shmSize must be a quantity of bytes above "
                           "0, such as 2Gi");
        return ACCEL_EINVAL;
    }
    v = json_object_get(run, "privileged");
    if (v != NULL && !json_is_boolean(v)) {
        *cause = xasprintf("run.privileged must be true or false");
        return ACCEL_EINVAL;
    }
    c->privileged = json_is_true(v);
    if (parse_ports(json_object_get(run, "ports"), c, cause) != ACCEL_OK ||
        parse_volumes(json_object_get(run, "volumes"), c, cause) != ACCEL_OK ||
        parse_caps(json_object_get(run, "capAdd"), c, cause) != ACCEL_OK)
        return ACCEL_EINVAL;
    return ACCEL_OK;
}

void manifest_container_release(struct manifest_container *c)
{
    free(c->image);
    free(c->pull);
    manifest_strings_free(c->entrypoint);
    manifest_strings_free(c->ports);
    for (size_t i = 0; i < c->nvolumes; i++) {
        free(c->volumes[i].source);
        free(c->volumes[i].target);
    }
    free(c->volumes);
    free(c->network);
    manifest_strings_free(c->cap_add);
    memset(c, 0, sizeof(*c));
}

/* A member's port: on loopback, from MEMBER_PORT_MIN. */
static enum accel_err member_port(const char *spec, size_t i, char **cause)
{
    const char *host = strrchr(spec, ':');
    const char *ipend = host;
    unsigned long port;

    while (ipend > spec && ipend[-1] != ':')
        ipend--;
    port = strtoul(ipend, NULL, 10);
    if (!((ipend - spec == 10 && strncmp(spec, "127.0.0.1", 9) == 0) ||
          (ipend - spec == 6 && strncmp(spec, "[::1]", 5) == 0))) {
        *cause = xasprintf("run.ports[%zu]: a member's app may publish "
                           "ports on loopback only (127.0.0.1 or [::1]); "
                           "other addresses are admin-only", i);
        return ACCEL_EFORBIDDEN;
    }
    if (port < MEMBER_PORT_MIN) {
        *cause = xasprintf("run.ports[%zu]: a member's app may publish "
                           "host ports from %d up only (%lu is a "
                           "privileged port)", i, MEMBER_PORT_MIN, port);
        return ACCEL_EFORBIDDEN;
    }
    return ACCEL_OK;
}

/* Does ref name an image by its ID (podman takes a bare ID, a prefix of
 * one or sha256:<ID> for a reference): lower-case hex with no host, path,
 * tag or digest? */
static bool bare_id(const char *ref)
{
    if (strncmp(ref, "sha256:", 7) == 0)
        return true;
    return ref[0] != '\0' && strspn(ref, "0123456789abcdef") == strlen(ref);
}

/* Is a volume's source inside home (relative ones resolve below it)? */
static bool source_in_home(const char *src, const char *home)
{
    char *full;
    bool in;

    if (src[0] == '/')
        return manifest_inside_home(src, home);
    full = xasprintf("%s/%s", home, src);
    in = manifest_inside_home(full, home);
    free(full);
    return in;
}

enum accel_err manifest_container_check(const struct manifest *m, bool admin,
                                        const char *home, char **cause)
{
    const struct manifest_container *c = &m->run.ctr;
    static const char *const admin_only =
        "is admin-only: a member's container runs with every capability "
        "dropped, no-new-privileges, in its own namespaces";

    if (admin || c->image == NULL)
        return ACCEL_OK;
    if (manifest_image_archive(c->image)) {
        *cause = xasprintf("run.image: an archive (%s) is admin-only: "
                           "acceld reads it as root", c->image);
        return ACCEL_EFORBIDDEN;
    }
    if (bare_id(c->image)) {
        *cause = xasprintf("run.image: %s names an image by its ID, which "
                           "is admin-only: a member names an image by its "
                           "reference", c->image);
        return ACCEL_EINVAL;
    }
    if (c->privileged) {
        *cause = xasprintf("run.privileged %s", admin_only);
        return ACCEL_EFORBIDDEN;
    }
    if (c->network != NULL && strcmp(c->network, "host") == 0) {
        *cause = xasprintf("run.network: host %s", admin_only);
        return ACCEL_EFORBIDDEN;
    }
    if (c->network != NULL && strcmp(c->network, "bridge") == 0) {
        *cause = xasprintf("run.network: bridge (podman's shared bridge, "
                           "where other containers and every user of the "
                           "machine reach the container's address) is "
                           "admin-only: a member's container has a network "
                           "of its own, reached only through its published "
                           "ports, or none");
        return ACCEL_EFORBIDDEN;
    }
    if (c->host_pid) {
        *cause = xasprintf("run.pid: host %s", admin_only);
        return ACCEL_EFORBIDDEN;
    }
    if (c->cap_add != NULL && c->cap_add[0] != NULL) {
        *cause = xasprintf("run.capAdd %s", admin_only);
        return ACCEL_EFORBIDDEN;
    }
    for (size_t i = 0; c->ports && c->ports[i]; i++)
        if (member_port(c->ports[i], i, cause) != ACCEL_OK)
            return ACCEL_EFORBIDDEN;
    for (size_t i = 0; i < c->nvolumes; i++)
        if (!source_in_home(c->volumes[i].source, home)) {
            *cause = xasprintf("run.volumes[%zu].source: a member's app may "
                               "only mount what is inside its owner's home "
                               "%s (a relative source is below it; outside "
                               "it is admin-only)", i, home);
            return ACCEL_EFORBIDDEN;
        }
    return ACCEL_OK;
}

/* A memberImages pattern: 1 to 255 of [A-Za-z0-9._/:-] and '*', no "..",
 * not an image ID (no '@', no "sha256:"). */
static bool image_pattern(const char *p)
{
    size_t n = strlen(p);

    if (n == 0 || n > IMAGE_REF_MAX || strstr(p, "..") != NULL ||
        strncmp(p, "sha256:", 7) == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!alnum(p[i]) && strchr("._/:-*", p[i]) == NULL)
            return false;
    return true;
}

enum accel_err manifest_member_images_check(const json_t *v, char **cause)
{
    size_t i;
    const json_t *e;

    if (!json_is_array(v) || json_array_size(v) > MEMBER_IMAGES_MAX) {
        *cause = xasprintf("memberImages must be a list of at most %d image "
                           "names or name patterns (\"docker.io/library/"
                           "ubuntu:22.04\", \"localhost/lab/*\")",
                           MEMBER_IMAGES_MAX);
        return ACCEL_EINVAL;
    }
    json_array_foreach(v, i, e) {
        if (!json_is_string(e) || !image_pattern(json_string_value(e))) {
            *cause = xasprintf("memberImages[%zu] must be an image name or "
                               "name pattern of at most %d characters: "
                               "letters, digits, '.', '_', '/', "
                               "':', '-' and '*' (any characters), not an "
                               "image ID or digest", i, IMAGE_REF_MAX);
            return ACCEL_EINVAL;
        }
    }
    return ACCEL_OK;
}

/* Does name (host/path:tag, as podman lists an image's names) match
 * pattern? A pattern with no tag after its last '/' matches every tag. */
static bool image_name_matches(const char *pattern, const char *name)
{
    const char *slash = strrchr(pattern, '/');
    const char *colon = strrchr(name, ':');
    bool tagless = strchr(slash != NULL ? slash : pattern, ':') == NULL;
    char *bare;
    bool ok;

    if (fnmatch(pattern, name, 0) == 0)
        return true;
    if (!tagless || colon == NULL || strchr(colon, '/') != NULL)
        return false;
    bare = xasprintf("%.*s", (int)(colon - name), name);
    ok = fnmatch(pattern, bare, 0) == 0;
    free(bare);
    return ok;
}

const char *manifest_member_image_allowed(const json_t *patterns,
                                          const json_t *names)
{
    size_t i, j;
    const json_t *p, *n;

    json_array_foreach(patterns, i, p) {
        json_array_foreach(names, j, n) {
            if (json_is_string(p) && json_is_string(n) &&
                image_name_matches(json_string_value(p),
                                   json_string_value(n)))
                return json_string_value(p);
        }
    }
    return NULL;
}
