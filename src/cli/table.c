/* SPDX-License-Identifier: MIT */
/*
 * table.c: aligned text tables and the small formatters of accelctl's
 * output. Widths are counted in bytes; ids and names are ASCII.
 */
#include "common/accel_setup.h"
#include "cli/table.h"

#include <stdlib.h>
#include <string.h>

#include "common/quantity.h"
#include "common/util.h"

void table_init(struct table *t, size_t ncols, const char *const *head)
{
    memset(t, 0, sizeof(*t));
    t->ncols = ncols < TABLE_MAX_COLS ? ncols : TABLE_MAX_COLS;
    for (size_t i = 0; i < t->ncols; i++)
        t->head[i] = head[i];
}

void table_add(struct table *t, const char *const *cells)
{
    if (t->nrows >= TABLE_MAX_ROWS)
        return;
    if (t->nrows == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->cells = xrealloc(t->cells, t->cap * t->ncols * sizeof(char *));
    }
    for (size_t i = 0; i < t->ncols; i++) {
        const char *c = cells[i] != NULL && cells[i][0] != '\0' ? cells[i]
                                                                : "-";
        t->cells[t->nrows * t->ncols + i] = xstrdup(c);
    }
    t->nrows++;
}

static void print_row(const struct table *t, const size_t *w,
                      const char *const *row, FILE *f)
{
    for (size_t i = 0; i < t->ncols; i++) {
        if (i + 1 == t->ncols)
            fprintf(f, "%s\n", row[i]);
        else
            fprintf(f, "%-*s  ", (int)w[i], row[i]);
    }
}

void table_print(const struct table *t, FILE *f)
{
    size_t w[TABLE_MAX_COLS];
    for (size_t i = 0; i < t->ncols; i++) {
        w[i] = strlen(t->head[i]);
        for (size_t r = 0; r < t->nrows; r++) {
            size_t l = strlen(t->cells[r * t->ncols + i]);
            if (l > w[i])
                w[i] = l;
        }
    }
    print_row(t, w, t->head, f);
    for (size_t r = 0; r < t->nrows; r++)
        print_row(t, w, (const char *const *)&t->cells[r * t->ncols], f);
    if (t->nrows >= TABLE_MAX_ROWS)
        fprintf(f, "(output cut at %d rows)\n", TABLE_MAX_ROWS);
}

void table_release(struct table *t)
{
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
    t->nrows = t->cap = 0;
}

void table_print_items(size_t ncols, const char *const *head,
                       const json_t *items,
                       void (*row)(struct table *t, const json_t *item))
{
    struct table t;
    size_t i;
    json_t *item;

    table_init(&t, ncols, head);
    json_array_foreach(items, i, item)
        row(&t, item);
    table_print(&t, stdout);
    table_release(&t);
}

void table_fmt_gib(int64_t bytes, char *buf, size_t len)
{
    char num[32];
    quantity_format_gib(bytes > 0 ? (uint64_t)bytes : 0, num, sizeof(num));
    snprintf(buf, len, "%s Gi", num);
}

const char *table_str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s != NULL ? s : "";
}

void table_append_item(char **list, size_t i, const char *item, int64_t mem)
{
    char q[48] = "";
    char *next;
    if (mem > 0) {
        char g[40]; /* table_fmt_gib's number (32) and " Gi" */
        table_fmt_gib(mem, g, sizeof(g));
        snprintf(q, sizeof(q), " (%s)", g);
    }
    next = xasprintf("%s%s%s%s", *list, i ? ", " : "", item, q);
    free(*list);
    *list = next;
}

void table_dump_json(const json_t *v, size_t flags, FILE *f)
{
    char *s = json_dumps(v, flags | JSON_ENCODE_ANY);
    size_t len = s != NULL ? strlen(s) : 0;

    /* jansson writes C0 as \u00XX but DEL and C1 as they are: only
     * inside strings, where a \u escape means the same */
    for (size_t i = 0; i < len; i++) {
        size_t k = util_ctrl_len(s, len, i);
        if (k == 1 && s[i] != 0x7f)
            k = 0; /* C0: the layout's newlines, none in a string */
        if (k == 0)
            fputc(s[i], f);
        else
            fprintf(f, "\\u%04x", k == 2 ? (unsigned char)s[i + 1]
                                          : (unsigned char)s[i]);
        i += k > 1 ? k - 1 : 0;
    }
    free(s);
}

void table_print_json(const json_t *v)
{
    if (v == NULL) {
        fputs("null\n", stdout);
        return;
    }
    table_dump_json(v, JSON_INDENT(2), stdout);
    fputc('\n', stdout);
}
