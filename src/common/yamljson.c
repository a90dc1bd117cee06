/* SPDX-License-Identifier: MIT */
/*
 * yamljson.c: libyaml's event stream folded into a jansson tree with an
 * explicit stack (bounded depth, so hostile nesting cannot blow the C stack).
 */
#include "common/accel_setup.h"
#include "common/yamljson.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "common/util.h"

#define YJ_MAX_DEPTH 64

struct frame {
    json_t *node; /* the open mapping or sequence */
    char *key;    /* pending key inside a mapping, or NULL */
};

static json_t *scalar_value(const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    char *end;

    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return json_stringn(v, n);
    if (n == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
        strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0)
        return json_null();
    if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0 ||
        strcmp(v, "TRUE") == 0)
        return json_true();
    if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0 ||
        strcmp(v, "FALSE") == 0)
        return json_false();
    if ((v[0] >= '0' && v[0] <= '9') || v[0] == '-' || v[0] == '+') {
        long long ll;
        double d;
        errno = 0;
        ll = strtoll(v, &end, 10);
        if (*end == '\0' && errno == 0)
            return json_integer(ll);
        errno = 0;
        d = strtod(v, &end);
        if (*end == '\0' && errno == 0)
            return json_real(d);
    }
    return json_stringn(v, n);
}

/* Attach v to the top frame (or make it the root). Steals v. */
static int attach(struct frame *st, int depth, json_t **root, json_t *v,
                  bool is_scalar_key_candidate)
{
    struct frame *top;
    if (v == NULL)
        return -1;
    if (depth == 0) {
        *root = v;
        return 0;
    }
    top = &st[depth - 1];
    if (json_is_array(top->node))
        return json_array_append_new(top->node, v);
    if (top->key == NULL) {
        /* v is a key: must be a scalar */
        if (!is_scalar_key_candidate || !json_is_string(v)) {
            json_decref(v);
            return -1;
        }
        top->key = xstrdup(json_string_value(v));
        json_decref(v);
        return 0;
    }
    {
        int rc = json_object_set_new(top->node, top->key, v);
        free(top->key);
        top->key = NULL;
        return rc;
    }
}

static char *mkcause(const char *what, const yaml_mark_t *m)
{
    return xasprintf("line %zu: %s", m->line + 1, what);
}

enum accel_err yamljson_parse(const char *buf, size_t len, json_t **out,
                              char **cause)
{
    yaml_parser_t p;
    yaml_event_t ev;
    struct frame st[YJ_MAX_DEPTH];
    int depth = 0, done = 0;
    json_t *root = NULL;
    enum accel_err result = ACCEL_EPARSE;

    memset(st, 0, sizeof st);
    if (!yaml_parser_initialize(&p)) {
        *cause = xstrdup("yaml parser init failed");
        return ACCEL_ENOMEM;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
    while (!done) {
        json_t *v = NULL;
        int rc = 0;
        if (!yaml_parser_parse(&p, &ev)) {
            *cause = xasprintf("line %zu: %s", p.problem_mark.line + 1,
                               p.problem ? p.problem : "invalid YAML");
            goto out;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
        case YAML_DOCUMENT_END_EVENT:
            done = ev.type == YAML_STREAM_END_EVENT || root != NULL;
            break;
        case YAML_ALIAS_EVENT:
            *cause = mkcause("anchors and aliases are not supported",
                             &ev.start_mark);
            yaml_event_delete(&ev);
            goto out;
        case YAML_SCALAR_EVENT:
            if (ev.data.scalar.anchor) {
                *cause = mkcause("anchors and aliases are not supported",
                                 &ev.start_mark);
                yaml_event_delete(&ev);
                goto out;
            }
            v = scalar_value(&ev);
            /* keys stay strings whatever they look like */
            if (depth > 0 && json_is_object(st[depth - 1].node) &&
                st[depth - 1].key == NULL) {
                json_decref(v);
                v = json_stringn((const char *)ev.data.scalar.value,
                                 ev.data.scalar.length);
            }
            rc = attach(st, depth, &root, v, true);
            break;
        case YAML_MAPPING_START_EVENT:
        case YAML_SEQUENCE_START_EVENT:
            if (depth >= YJ_MAX_DEPTH) {
                *cause = mkcause("nesting too deep", &ev.start_mark);
                yaml_event_delete(&ev);
                goto out;
            }
            v = ev.type == YAML_MAPPING_START_EVENT ? json_object()
                                                    : json_array();
            if (depth > 0 && json_is_object(st[depth - 1].node) &&
                st[depth - 1].key == NULL) {
                *cause = mkcause("complex mapping keys are not supported",
                                 &ev.start_mark);
                json_decref(v);
                yaml_event_delete(&ev);
                goto out;
            }
            rc = attach(st, depth, &root, json_incref(v), false);
            st[depth].node = v;
            st[depth].key = NULL;
            depth++;
            break;
        case YAML_MAPPING_END_EVENT:
        case YAML_SEQUENCE_END_EVENT:
            depth--;
            json_decref(st[depth].node);
            free(st[depth].key);
            st[depth].node = NULL;
            st[depth].key = NULL;
            break;
        default:
            break;
        }
        if (rc != 0) {
            *cause = mkcause("duplicate or invalid key", &ev.start_mark);
            yaml_event_delete(&ev);
            goto out;
        }
        yaml_event_delete(&ev);
    }
    if (root == NULL) {
        *cause = xstrdup("empty document");
        goto out;
    }
    *out = root;
    root = NULL;
    result = ACCEL_OK;
out:
    while (depth > 0) {
        depth--;
        json_decref(st[depth].node);
        free(st[depth].key);
    }
    json_decref(root);
    yaml_parser_delete(&p);
    return result;
}

enum accel_err yamljson_parse_any(const char *buf, size_t len, json_t **out,
                                  char **cause)
{
    size_t i = 0;
    while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' ||
                       buf[i] == '\r'))
        i++;
    if (i < len && (buf[i] == '{' || buf[i] == '[')) {
        json_error_t e;
        json_t *v = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &e);
        if (v == NULL) {
            *cause = xasprintf("line %d column %d: %s", e.line, e.column,
                               e.text);
            return ACCEL_EPARSE;
        }
        *out = v;
        return ACCEL_OK;
    }
    return yamljson_parse(buf, len, out, cause);
}
