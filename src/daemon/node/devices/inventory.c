/* SPDX-License-Identifier: MIT */
/* inventory.c: inventory validation with field-naming messages. */
#include "common/accel_setup.h"
#include "daemon/node/devices/inventory.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/quantity.h"
#include "common/util.h"
#include "common/yamljson.h"

#define INV_MAX_FILE (16u << 20)
#define INV_MAX_NODES 4096
#define INV_MAX_DEVS 64

static enum accel_err qty(const json_t *o, const char *key, bool cpu,
                          uint64_t *out, const char *path, char **cause)
{
    const json_t *v = json_object_get(o, key);
    char buf[32];
    const char *s = buf;
    enum accel_err rc;

    *out = 0;
    if (v == NULL || json_is_null(v))
        return ACCEL_OK;
    if (json_is_integer(v) && json_integer_value(v) >= 0)
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v) && json_real_value(v) >= 0)
        snprintf(buf, sizeof buf, "%.6f", json_real_value(v));
    else if (json_is_string(v))
        s = json_string_value(v);
    else
        s = "-";
    rc = cpu ? quantity_parse_millicores(s, out) : quantity_parse_bytes(s, out);
    if (rc == ACCEL_ERANGE) {
        *cause = xasprintf("%s.%s (%s) is too large (at most 4Ei bytes or "
                           "4611686018427387.904 CPUs)", path, key, s);
        return ACCEL_EINVAL;
    }
    if (rc != ACCEL_OK) {
        *cause = xasprintf("%s.%s must be a non-negative quantity such as "
                           "\"16Gi\" or \"8\"", path, key);
        return ACCEL_EINVAL;
    }
    return ACCEL_OK;
}

static enum accel_err pair(const json_t *n, const char *key, bool cpu,
                           uint64_t *total, uint64_t *used, const char *path,
                           char **cause)
{
    const json_t *o = json_object_get(n, key);
    char p[96];
    snprintf(p, sizeof p, "%s.%s", path, key);
    if (o == NULL)
        return ACCEL_OK;
    if (!json_is_object(o)) {
        *cause = xasprintf("%s must be an object {total, used}", p);
        return ACCEL_EINVAL;
    }
    if (qty(o, "total", cpu, total, p, cause) != ACCEL_OK ||
        qty(o, "used", cpu, used, p, cause) != ACCEL_OK)
        return ACCEL_EINVAL;
    if (*used > *total) {
        *cause = xasprintf("%s.used must be <= %s.total", p, p);
        return ACCEL_EINVAL;
    }
    return ACCEL_OK;
}

static enum accel_err parse_device(const json_t *v, const char *path,
                                   struct inv_device *d, char **cause)
{
    const char *id = json_string_value(json_object_get(v, "id"));
    const char *type = json_string_value(json_object_get(v, "type"));
    const json_t *st = json_object_get(v, "supportType");
    const json_t *h = json_object_get(v, "health");
    const json_t *model = json_object_get(v, "model");
    const json_t *idx = json_object_get(v, "index");

    d->index = -1;
    d->healthy = true;
    if (!json_is_object(v) || id == NULL || id[0] == '\0' ||
        strlen(id) > ACCEL_ID_MAX) {
        *cause = xasprintf("%s.id is required (1-%d characters)", path,
                           ACCEL_ID_MAX);
        return ACCEL_EINVAL;
    }
    d->id = xstrdup(id);
    if (!accel_type_parse(type, &d->type)) {
        *cause = xasprintf("%s.type must be an accelerator type such as "
                           "nvidia, apple-m or cpu", path);
        return ACCEL_EINVAL;
    }
    if (qty(v, "memory", false, &d->memory, path, cause) != ACCEL_OK)
        return ACCEL_EINVAL;
    if (accel_type_has_vram(d->type) && d->memory == 0) {
        *cause = xasprintf("%s.memory is required for type %s", path,
                           accel_type_name(d->type));
        return ACCEL_EINVAL;
    }
    if (st && !json_is_null(st)) {
        if (!json_is_string(st) ||
            !accel_support_parse(json_string_value(st), &d->st) ||
            !accel_type_allows(d->type, d->st)) {
            *cause = xasprintf("%s.supportType must be one of the modes "
                               "type %s allows", path,
                               accel_type_name(d->type));
            return ACCEL_EINVAL;
        }
        d->has_support = true;
    }
    if (h && !json_is_null(h)) {
        const char *hs = json_string_value(h);
        if (json_is_boolean(h))
            d->healthy = json_is_true(h);
        else if (hs && (strcmp(hs, "yes") == 0 || strcmp(hs, "no") == 0))
            d->healthy = strcmp(hs, "yes") == 0;
        else {
            *cause = xasprintf("%s.health must be \"yes\" or \"no\"", path);
            return ACCEL_EINVAL;
        }
    }
    if (json_is_string(model))
        d->model = xstrdup(json_string_value(model));
    if (json_is_integer(idx) && json_integer_value(idx) >= 0 &&
        json_integer_value(idx) < 1024)
        d->index = (int)json_integer_value(idx);
    return ACCEL_OK;
}

static enum accel_err parse_node(const json_t *v, size_t i, struct inv_node *n,
                                 char **cause)
{
    char path[64];
    const char *name = json_string_value(json_object_get(v, "name"));
    const json_t *devs = json_object_get(v, "devices");
    size_t k;
    const json_t *dv;

    snprintf(path, sizeof path, "nodes[%zu]", i);
    if (!json_is_object(v) || !accel_name_valid(name)) {
        *cause = xasprintf("%s.name is required: 1-63 characters of a-z, 0-9 "
                           "and '-'", path);
        return ACCEL_EINVAL;
    }
    n->name = xstrdup(name);
    if (pair(v, "memory", false, &n->mem_total, &n->mem_used, path, cause) ||
        pair(v, "cpu", true, &n->cpu_total, &n->cpu_used, path, cause) ||
        pair(v, "disk", false, &n->disk_total, &n->disk_used, path, cause))
        return ACCEL_EINVAL;
    if (n->mem_total == 0) {
        *cause = xasprintf("%s.memory.total is required", path);
        return ACCEL_EINVAL;
    }
    if (devs && !json_is_null(devs) &&
        (!json_is_array(devs) || json_array_size(devs) > INV_MAX_DEVS)) {
        *cause = xasprintf("%s.devices must be a list of at most %d devices",
                           path, INV_MAX_DEVS);
        return ACCEL_EINVAL;
    }
    n->devs = xcalloc(json_array_size(devs) + 1, sizeof(*n->devs));
    json_array_foreach(devs, k, dv) {
        char dp[96];
        snprintf(dp, sizeof dp, "%s.devices[%zu]", path, k);
        n->ndevs = k + 1;
        if (parse_device(dv, dp, &n->devs[k], cause) != ACCEL_OK)
            return ACCEL_EINVAL;
    }
    return ACCEL_OK;
}

static bool duplicates(const struct inventory *inv, char **cause)
{
    for (size_t i = 0; i < inv->nnodes; i++) {
        for (size_t j = 0; j < i; j++)
            if (strcmp(inv->nodes[i].name, inv->nodes[j].name) == 0) {
                *cause = xasprintf("nodes[%zu].name \"%s\" is declared twice",
                                   i, inv->nodes[i].name);
                return true;
            }
        for (size_t k = 0; k < inv->nodes[i].ndevs; k++)
            for (size_t a = 0; a <= i; a++)
                for (size_t b = 0; b < (a == i ? k : inv->nodes[a].ndevs); b++)
                    if (strcmp(inv->nodes[i].devs[k].id,
                               inv->nodes[a].devs[b].id) == 0) {
                        *cause = xasprintf("device id \"%s\" is declared "
                                           "twice",
                                           inv->nodes[i].devs[k].id);
                        return true;
                    }
    }
    return false;
}

enum accel_err inventory_parse(const char *buf, size_t len,
                               struct inventory *out, char **cause)
{
    json_t *root = NULL;
    const json_t *nodes, *v;
    size_t i;
    struct inventory inv = {0};

    if (yamljson_parse_any(buf, len, &root, cause) != ACCEL_OK)
        return ACCEL_EPARSE;
    nodes = json_object_get(root, "nodes");
    if (!json_is_array(nodes) || json_array_size(nodes) > INV_MAX_NODES) {
        *cause = xasprintf("nodes must be a list of at most %d nodes",
                           INV_MAX_NODES);
        goto bad;
    }
    inv.nodes = xcalloc(json_array_size(nodes) + 1, sizeof(*inv.nodes));
    json_array_foreach(nodes, i, v) {
        inv.nnodes = i + 1;
        if (parse_node(v, i, &inv.nodes[i], cause) != ACCEL_OK)
            goto bad;
    }
    if (duplicates(&inv, cause))
        goto bad;
    json_decref(root);
    *out = inv;
    return ACCEL_OK;
bad:
    json_decref(root);
    inventory_release(&inv);
    return ACCEL_EINVAL;
}

enum accel_err inventory_load(const char *path, struct inventory *out,
                              char **cause)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t n;
    enum accel_err rc;
    char *inner = NULL;

    if (f == NULL) {
        *cause = xasprintf("cannot read inventory %s: %s", path,
                           strerror(errno));
        return ACCEL_EIO;
    }
    buf = xmalloc(INV_MAX_FILE + 1);
    n = fread(buf, 1, INV_MAX_FILE + 1, f);
    fclose(f);
    if (n > INV_MAX_FILE) {
        free(buf);
        *cause = xasprintf("inventory %s is larger than 16 MiB", path);
        return ACCEL_ETOOBIG;
    }
    rc = inventory_parse(buf, n, out, &inner);
    free(buf);
    if (rc != ACCEL_OK) {
        *cause = xasprintf("inventory %s: %s", path, inner);
        free(inner);
    }
    return rc;
}

void inventory_release(struct inventory *inv)
{
    for (size_t i = 0; i < inv->nnodes; i++) {
        for (size_t k = 0; k < inv->nodes[i].ndevs; k++) {
            free(inv->nodes[i].devs[k].id);
            free(inv->nodes[i].devs[k].model);
        }
        free(inv->nodes[i].devs);
        free(inv->nodes[i].name);
    }
    free(inv->nodes);
    memset(inv, 0, sizeof(*inv));
}
