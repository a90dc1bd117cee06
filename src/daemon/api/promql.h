/* SPDX-License-Identifier: MIT */
/*
 * promql.h: the subset of PromQL that the Olares Dashboard and olares-cli
 * send to the HAMi monitor routes (docs/compat.md lists them), parsed and
 * evaluated against whatever series a source gives: number literals;
 * selectors `metric{label="v", label=~"re", label!="v", label!~"re"}`;
 * aggregations `sum|avg|max|min|count [by|without (labels)] (expr)` (the
 * `by` clause before or after the argument) and `topk|bottomk(k, expr)`;
 * `+ - * /` between numbers and vectors (vector-vector matching on equal
 * label sets, as PromQL's one-to-one default) and unary minus; parentheses;
 * `clamp_min(vector, number)` (HAMi-WebUI's task page).
 * Anything else (other functions, range selectors, offsets, comparisons, `on`,
 * `ignoring`) is refused with a sentence naming the part not understood.
 *
 * Pure: no I/O, no daemon state. Not thread-safe per query object; several
 * queries may be used from several threads.
 */
#ifndef ACCEL_DAEMON_API_PROMQL_H
#define ACCEL_DAEMON_API_PROMQL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accel/accel.h"

#define PROMQL_MAX_LABELS 16 /* labels per series */

/* One label set: keys sorted, strings owned by the set. */
struct promql_labels {
    size_t n;                        /* labels */
    char *k[PROMQL_MAX_LABELS];      /* names, sorted */
    char *v[PROMQL_MAX_LABELS];      /* values */
};

struct promql_sample {
    struct promql_labels l;          /* its labels (no __name__) */
    double v;                        /* value */
};

/* A result: a scalar, or a vector of samples. */
struct promql_value {
    bool scalar;                     /* true: v is the value */
    double v;                        /* scalar value */
    struct promql_sample *s;         /* vector samples */
    size_t n, cap;                   /* count, allocated */
};

/*
 * The source of series: append to out every series of `metric` that has a
 * value at unix time t (seconds), with its labels (promql_add). Returns
 * false when the metric is not one the source knows (the query is then
 * refused, naming it).
 */
typedef bool (*promql_fetch_fn)(void *ctx, const char *metric, int64_t t,
                                struct promql_value *out);

struct promql_query; /* opaque: a parsed query */

/*
 * Parse text. out: set on success, free with promql_free. cause: on
 * failure an allocated sentence naming the offset and the part not
 * understood (caller frees). ACCEL_OK or ACCEL_EPARSE.
 */
enum accel_err promql_parse(const char *text, struct promql_query **out,
                            char **cause);

void promql_free(struct promql_query *q); /* NULL-safe */

/*
 * Evaluate the query at unix time t. out: initialised by this call, release
 * with promql_value_release (also on failure). ACCEL_OK, or ACCEL_EINVAL
 * with *cause (an unknown metric, a label set over PROMQL_MAX_LABELS).
 */
enum accel_err promql_eval(const struct promql_query *q, int64_t t,
                           promql_fetch_fn fetch, void *ctx,
                           struct promql_value *out, char **cause);

/* Append a sample with these labels (copied; kv = {k0, v0, k1, v1, ...},
 * nkv pairs) to a vector. */
void promql_add(struct promql_value *out, const char *const *kv, size_t nkv,
                double v);

void promql_value_release(struct promql_value *v);

/* A stable text key of a label set ("k=v\x1f..."), allocated. */
char *promql_labels_key(const struct promql_labels *l);

#endif /* ACCEL_DAEMON_API_PROMQL_H */
