/* SPDX-License-Identifier: MIT */
/*
 * dmem.c: dmem.capacity parsed, dmem enabled down a cgroup path, dmem.max
 * written and read back, dmem.current read (dmem.h). Only the files of
 * the kernel's dmem controller under one cgroup root; see
 * docs/internals/enforcement.md.
 */
#include "common/accel_setup.h"
#include "daemon/node/limits/dmem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

#define DMEM_FILE_MAX 65536 /* bytes of a dmem file read */

bool dmem_pci_normalize(const char *s, char out[DMEM_PCI_LEN])
{
    unsigned dom, bus, dev, fn;
    int used = -1;

    if (strspn(s, "0123456789abcdefABCDEF:.") != strlen(s) ||
        sscanf(s, "%x:%x:%x.%x%n", &dom, &bus, &dev, &fn, &used) != 4 ||
        used != (int)strlen(s) || dom > 0xffff || bus > 0xff || dev > 0x1f ||
        fn > 7)
        return false;
    snprintf(out, DMEM_PCI_LEN, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
    return true;
}

/* The PCI address among the '/'-separated components of name, or "". */
static void region_pci(const char *name, char out[DMEM_PCI_LEN])
{
    char part[DMEM_REGION_LEN];

    out[0] = '\0';
    for (const char *p = name; *p;) {
        size_t n = strcspn(p, "/");
        if (n < sizeof part) {
            memcpy(part, p, n);
            part[n] = '\0';
            if (dmem_pci_normalize(part, out))
                return;
        }
        p += n;
        p += *p == '/';
    }
    out[0] = '\0';
}

/* One "name size" line into r; false when it is not one. */
static bool parse_line(const char *line, size_t len, struct dmem_region *r)
{
    char buf[DMEM_REGION_LEN + 32], *sp, *end;

    if (len >= sizeof buf)
        return false;
    memcpy(buf, line, len);
    buf[len] = '\0';
    sp = strchr(buf, ' ');
    if (sp == NULL || sp == buf || (size_t)(sp - buf) >= DMEM_REGION_LEN ||
        sp[1] < '0' || sp[1] > '9')
        return false;
    *sp = '\0';
    errno = 0;
    r->capacity = strtoull(sp + 1, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    util_strlcpy(r->name, buf, sizeof r->name);
    region_pci(r->name, r->pci);
    return true;
}

enum accel_err dmem_parse_capacity(const char *text, struct dmem_region **out,
                                   size_t *count, char **cause)
{
    struct dmem_region *v = NULL;
    size_t n = 0, lineno = 0;

    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        lineno++;
        if (len > 0) {
            v = xrealloc(v, (n + 1) * sizeof(*v));
            if (!parse_line(p, len, &v[n])) {
                *cause = xasprintf("dmem.capacity line %zu is not \"<region> "
                                   "<bytes>\": \"%.*s\"", lineno,
                                   (int)(len > 80 ? 80 : len), p);
                free(v);
                return ACCEL_EPARSE;
            }
            n++;
        }
        p += len;
        p += *p == '\n';
    }
    *out = v;
    *count = n;
    return ACCEL_OK;
}

enum accel_err dmem_read_capacity(const char *root, struct dmem_region **out,
                                  size_t *count, char **cause)
{
    char *path = xasprintf("%s/dmem.capacity", root);
    char *buf = xmalloc(DMEM_FILE_MAX);
    enum accel_err rc;

    if (util_read_small(path, buf, DMEM_FILE_MAX) < 0) {
        *cause = xasprintf("no %s (%s)", path, strerror(errno));
        rc = ACCEL_ENOTFOUND;
    } else {
        rc = dmem_parse_capacity(buf, out, count, cause);
    }
    free(buf);
    free(path);
    return rc;
}

/* Does dir's cgroup.subtree_control list dmem? */
static bool lists_dmem(const char *dir)
{
    char *path = xasprintf("%s/cgroup.subtree_control", dir), buf[512];
    char *save = NULL;
    bool yes = false;

    if (util_read_small(path, buf, sizeof buf) > 0)
        for (char *w = strtok_r(buf, " \n", &save); w && !yes;
             w = strtok_r(NULL, " \n", &save))
            yes = strcmp(w, "dmem") == 0;
    free(path);
    return yes;
}

/* Enable dmem in root and in every ancestor of root+rel (not rel itself),
 * the root first. */
static enum accel_err enable_down(const char *root, const char *rel,
                                  char **cause)
{
    char *dir = xstrdup(root), *path;
    const char *p = rel;
    enum accel_err rc = ACCEL_OK;

    for (;;) {
        const char *next = strchr(p + 1, '/');
        if (!lists_dmem(dir)) {
            path = xasprintf("%s/cgroup.subtree_control", dir);
            if (util_write_small(path, "+dmem") < 0) {
                *cause = xasprintf("cannot enable dmem in %s: %s", path,
                                   strerror(errno));
                rc = ACCEL_ESYS;
            }
            free(path);
        }
        if (rc != ACCEL_OK || next == NULL)
            break;
        path = xasprintf("%s%.*s", dir, (int)(next - p), p);
        free(dir);
        dir = path;
        p = next;
    }
    free(dir);
    return rc;
}

enum accel_err dmem_read(const char *root, const char *rel, const char *file,
                         const char *region, uint64_t *out)
{
    char *path = xasprintf("%s%s/%s", root, rel, file);
    char *buf = xmalloc(DMEM_FILE_MAX), *end;
    size_t rn = strlen(region);
    enum accel_err rc = ACCEL_ENOTFOUND;

    if (util_read_small(path, buf, DMEM_FILE_MAX) >= 0) {
        for (char *l = buf; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : l) {
            if (strncmp(l, region, rn) != 0 || l[rn] != ' ')
                continue;
            rc = ACCEL_EPARSE;
            if (strncmp(l + rn + 1, "max", 3) == 0 &&
                (l[rn + 4] == '\n' || l[rn + 4] == '\0')) {
                *out = UINT64_MAX;
                rc = ACCEL_OK;
            } else if (l[rn + 1] >= '0' && l[rn + 1] <= '9') {
                errno = 0;
                uint64_t v = strtoull(l + rn + 1, &end, 10);
                if (errno == 0 && (*end == '\n' || *end == '\0')) {
                    *out = v;
                    rc = ACCEL_OK;
                }
            }
            break;
        }
    }
    free(buf);
    free(path);
    return rc;
}

enum accel_err dmem_set_max(const char *root, const char *rel,
                            const char *region, uint64_t limit, char **cause)
{
    char *path = xasprintf("%s%s/dmem.max", root, rel), *line;
    uint64_t want = limit ? limit : UINT64_MAX, got = 0;
    enum accel_err rc = enable_down(root, rel, cause);

    if (rc != ACCEL_OK)
        goto out;
    rc = ACCEL_ESYS;
    if (access(path, F_OK) != 0) {
        *cause = xasprintf("no %s after dmem was enabled above it", path);
        goto out;
    }
    line = limit ? xasprintf("%s %llu", region, (unsigned long long)limit)
                 : xasprintf("%s max", region);
    if (util_write_small(path, line) < 0) {
        *cause = xasprintf("the kernel refused \"%s\" in %s: %s", line, path,
                           strerror(errno));
        free(line);
        goto out;
    }
    free(line);
    if (dmem_read(root, rel, "dmem.max", region, &got) != ACCEL_OK ||
        got != want) {
        *cause = xasprintf("%s does not hold the limit written for %s", path,
                           region);
        goto out;
    }
    rc = ACCEL_OK;
out:
    free(path);
    return rc;
}
