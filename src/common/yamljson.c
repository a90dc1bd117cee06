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
    char *cur;    /* the key of the value last attached (for paths) */
};

/* The parser's state: the stack of open containers and the root. */
struct yj {
    struct frame st[YJ_MAX_DEPTH];
    int depth;
    json_t *root;
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

/*
 * The path of the value about to be attached at the top of the stack, as
 * the validators write it ("spec.accelerator[0].mode"); "(document)" for
 * the root. Allocated.
 */
static char *path_here(const struct yj *y)
{
    char *out = xstrdup("");
    for (int i = 0; i < y->depth; i++) {
        const struct frame *f = &y->st[i];
        bool last = i == y->depth - 1;
        char *n;
        if (json_is_array(f->node)) {
            size_t k = json_array_size(f->node);
            n = xasprintf("%s[%zu]", out, last || k == 0 ? k : k - 1);
        } else {
            const char *key = last ? f->key : f->cur;
            n = xasprintf("%s%s%s", out, out[0] ? "." : "",
                          key ? key : "?");
        }
        free(out);
        out = n;
    }
    if (out[0] == '\0') {
        free(out);
        out = xstrdup("(document)");
    }
    return out;
}

static char *fail_at(const struct yj *y, const yaml_mark_t *m,
                     const char *what)
{
    char *p = path_here(y);
    char *c = xasprintf("line %zu: %s: %s", m->line + 1, p, what);
    free(p);
    return c;
}

/* A mapping key arrives: refuse a NUL or a key already present. */
static enum accel_err take_key(struct yj *y, const yaml_event_t *ev,
                               char **cause)
{
    struct frame *top = &y->st[y->depth - 1];
    const char *k = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    if (memchr(k, '\0', n) != NULL) {
        top->key = xstrdup(k); /* up to the NUL, for the path */
        *cause = fail_at(y, &ev->start_mark,
                         "a key contains a NUL character");
        return ACCEL_EPARSE;
    }
    top->key = xasprintf("%.*s", (int)n, k);
    if (json_object_get(top->node, top->key) != NULL) {
        *cause = fail_at(y, &ev->start_mark, "duplicate key");
        return ACCEL_EPARSE;
    }
    return ACCEL_OK;
}

/* Attach v (stolen) at the top of the stack, or make it the root. */
static enum accel_err attach(struct yj *y, json_t *v)
{
    struct frame *top;
    int rc;
    if (v == NULL)
        return ACCEL_ENOMEM;
    if (y->depth == 0) {
        y->root = v;
        return ACCEL_OK;
    }
    top = &y->st[y->depth - 1];
    if (json_is_array(top->node))
        return json_array_append_new(top->node, v) ? ACCEL_ENOMEM : ACCEL_OK;
    rc = json_object_set_new(top->node, top->key, v);
    free(top->cur);
    top->cur = top->key;
    top->key = NULL;
    return rc ? ACCEL_ENOMEM : ACCEL_OK;
}

static bool want_key(const struct yj *y)
{
    return y->depth > 0 && json_is_object(y->st[y->depth - 1].node) &&
           y->st[y->depth - 1].key == NULL;
}

static enum accel_err on_scalar(struct yj *y, const yaml_event_t *ev,
                                char **cause)
{
    if (ev->data.scalar.anchor) {
        *cause = fail_at(y, &ev->start_mark,
                         "anchors and aliases are not supported");
        return ACCEL_EPARSE;
    }
    if (want_key(y)) /* keys stay strings whatever they look like */
        return take_key(y, ev, cause);
    if (memchr(ev->data.scalar.value, '\0', ev->data.scalar.length)) {
        *cause = fail_at(y, &ev->start_mark,
                         "a string contains a NUL character");
        return ACCEL_EPARSE;
    }
    return attach(y, scalar_value(ev));
}

static enum accel_err on_open(struct yj *y, const yaml_event_t *ev,
                              char **cause)
{
    json_t *v;
    enum accel_err rc;
    if (y->depth >= YJ_MAX_DEPTH) {
        *cause = fail_at(y, &ev->start_mark, "nesting too deep");
        return ACCEL_EPARSE;
    }
    if (want_key(y)) {
        *cause = fail_at(y, &ev->start_mark,
                         "complex mapping keys are not supported");
        return ACCEL_EPARSE;
    }
    v = ev->type == YAML_MAPPING_START_EVENT ? json_object() : json_array();
    rc = attach(y, json_incref(v));
    if (rc != ACCEL_OK) {
        json_decref(v);
        return rc;
    }
    y->st[y->depth++] = (struct frame){v, NULL, NULL};
    return ACCEL_OK;
}

static void pop(struct yj *y)
{
    struct frame *f = &y->st[--y->depth];
    json_decref(f->node);
    free(f->key);
    free(f->cur);
    *f = (struct frame){NULL, NULL, NULL};
}

/* One event; *done is set at the end of the first document. */
static enum accel_err on_event(struct yj *y, const yaml_event_t *ev,
                               bool *done, char **cause)
{
    switch (ev->type) {
    case YAML_STREAM_END_EVENT:
    case YAML_DOCUMENT_END_EVENT:
        *done = ev->type == YAML_STREAM_END_EVENT || y->root != NULL;
        return ACCEL_OK;
    case YAML_ALIAS_EVENT:
        *cause = fail_at(y, &ev->start_mark,
                         "anchors and aliases are not supported");
        return ACCEL_EPARSE;
    case YAML_SCALAR_EVENT:
        return on_scalar(y, ev, cause);
    case YAML_MAPPING_START_EVENT:
    case YAML_SEQUENCE_START_EVENT:
        return on_open(y, ev, cause);
    case YAML_MAPPING_END_EVENT:
    case YAML_SEQUENCE_END_EVENT:
        pop(y);
        return ACCEL_OK;
    default:
        return ACCEL_OK;
    }
}

enum accel_err yamljson_parse(const char *buf, size_t len, json_t **out,
                              char **cause)
{
    yaml_parser_t p;
    yaml_event_t ev;
    struct yj y;
    bool done = false;
    enum accel_err result = ACCEL_EPARSE;

    memset(&y, 0, sizeof y);
    *cause = NULL;
    if (!yaml_parser_initialize(&p)) {
        *cause = xstrdup("yaml parser init failed");
        return ACCEL_ENOMEM;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
    while (!done) {
        if (!yaml_parser_parse(&p, &ev)) {
            *cause = xasprintf("line %zu: %s", p.problem_mark.line + 1,
                               p.problem ? p.problem : "invalid YAML");
            result = ACCEL_EPARSE; /* not the last event's ACCEL_OK */
            goto out;
        }
        result = on_event(&y, &ev, &done, cause);
        yaml_event_delete(&ev);
        if (result != ACCEL_OK) {
            if (*cause == NULL)
                *cause = xstrdup("out of memory");
            goto out;
        }
    }
    result = ACCEL_EPARSE;
    if (y.root == NULL) {
        *cause = xstrdup("empty document");
        goto out;
    }
    *out = y.root;
    y.root = NULL;
    result = ACCEL_OK;
out:
    while (y.depth > 0)
        pop(&y);
    json_decref(y.root);
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
