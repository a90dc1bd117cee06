/* SPDX-License-Identifier: MIT */
/*
 * table.h: accelctl's output: aligned text tables (columns as wide as their
 * widest cell, two spaces apart), memory in Gi as the page shows it, and the
 * -o json printer. A table holds at most TABLE_MAX_ROWS rows (STYLE 12).
 */
#ifndef ACCEL_CLI_TABLE_H
#define ACCEL_CLI_TABLE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TABLE_MAX_COLS 12
#define TABLE_MAX_ROWS 1000000

/* A table being filled; table_init it, table_release it. */
struct table {
    size_t ncols;                       /* columns */
    const char *head[TABLE_MAX_COLS];   /* headings (borrowed literals) */
    char **cells;                       /* nrows * ncols owned strings */
    size_t nrows;                       /* rows so far */
    size_t cap;                         /* rows allocated */
};

/* Start a table with ncols (<= TABLE_MAX_COLS) headings; cannot fail. */
void table_init(struct table *t, size_t ncols, const char *const *head);

/*
 * Append a row of ncols cells (copied; NULL prints as "-"). Rows past
 * TABLE_MAX_ROWS are dropped and a note is printed once by table_print.
 */
void table_add(struct table *t, const char *const *cells);

/* Print the headings and rows to f. */
void table_print(const struct table *t, FILE *f);

/* Free the cells; t can be table_init'ed again. */
void table_release(struct table *t);

/* Print a table of ncols headings and one row per item of the JSON array
 * items, each added by row (which fills its cells and calls table_add). */
void table_print_items(size_t ncols, const char *const *head,
                       const json_t *items,
                       void (*row)(struct table *t, const json_t *item));

/* bytes as "24 Gi" / "7.41 Gi" (two decimals, as SPEC 7), into buf. */
void table_fmt_gib(int64_t bytes, char *buf, size_t len);

/* o's string member k, or "" when it is absent or not a string: what a
 * cell or a sentence shows for a field the answer lacks. */
const char *table_str(const json_t *o, const char *k);

/* Append item number i, "item" or "item (8 Gi)" when mem > 0, to the
 * comma-separated list *list (allocated; replaced by a longer one): a
 * comma before every item but number 0, even one whose text is empty. */
void table_append_item(char **list, size_t i, const char *item, int64_t mem);

/* v dumped as JSON (json_dumps's flags) on f, DEL and the C1 characters
 * written as \u escapes too (jansson escapes only C0), so that no string
 * of it drives the terminal. */
void table_dump_json(const json_t *v, size_t flags, FILE *f);
/* Print v as indented JSON and a newline to stdout (-o json). */
void table_print_json(const json_t *v);

#endif /* ACCEL_CLI_TABLE_H */
