/* SPDX-License-Identifier: MIT */
/*
 * promql.c: a recursive-descent parser for the PromQL subset of promql.h
 * and its evaluator. The grammar:
 *   expr    := term (('+' | '-') term)*
 *   term    := unary (('*' | '/') unary)*
 *   unary   := '-' unary | primary
 *   primary := NUMBER | '(' expr ')' | aggr | clamp | selector
 *   clamp   := 'clamp_min' '(' expr ',' expr ')'
 *   aggr    := AGGOP [grouping] '(' [NUMBER ','] expr ')' [grouping]
 *   grouping:= ('by' | 'without') '(' [IDENT (',' IDENT)*] ')'
 *   selector:= IDENT ['{' [matcher (',' matcher)* [',']] '}']
 *   matcher := IDENT ('=' | '!=' | '=~' | '!~') STRING
 */
#include "common/accel_setup.h"
#include "daemon/api/promql.h"

#include <ctype.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define MAX_MATCHERS 16 /* per selector */
#define MAX_DEPTH 64    /* nesting */
#define MAX_NODES 512   /* nodes per query */

enum node_type { N_NUM, N_SEL, N_AGG, N_BIN, N_NEG, N_CLAMP_MIN };
enum match_op { M_EQ, M_NE, M_RE, M_NRE };
enum agg_op { A_SUM, A_AVG, A_MAX, A_MIN, A_COUNT, A_TOPK, A_BOTTOMK };

struct matcher {
    char *name;          /* label */
    enum match_op op;    /* = != =~ !~ */
    char *value;         /* string */
    regex_t re;          /* for =~ !~, anchored */
};

struct node {
    enum node_type type;
    double num;                        /* N_NUM */
    char *metric;                      /* N_SEL */
    struct matcher m[MAX_MATCHERS];    /* N_SEL */
    size_t nm;
    enum agg_op agg;                   /* N_AGG */
    bool without;                      /* N_AGG: without (...) */
    char *by[PROMQL_MAX_LABELS];       /* N_AGG grouping labels */
    size_t nby;
    double k;                          /* N_AGG topk/bottomk parameter */
    char op;                           /* N_BIN: + - * / */
    struct node *a, *b;                /* operands / argument; N_CLAMP_MIN:
                                          the vector and the minimum */
};

struct promql_query {
    struct node *root;
};

struct parser {
    const char *text;    /* whole query */
    const char *p;       /* position */
    char *err;           /* first error, allocated */
    int depth;           /* recursion */
    size_t nodes;        /* nodes made */
};

/* ---- helpers ---- */

static void node_free(struct node *n)
{
    if (n == NULL)
        return;
    free(n->metric);
    for (size_t i = 0; i < n->nm; i++) {
        free(n->m[i].name);
        free(n->m[i].value);
        if (n->m[i].op == M_RE || n->m[i].op == M_NRE)
            regfree(&n->m[i].re);
    }
    for (size_t i = 0; i < n->nby; i++)
        free(n->by[i]);
    node_free(n->a);
    node_free(n->b);
    free(n);
}

static void fail(struct parser *ps, const char *what)
{
    if (ps->err)
        return;
    ps->err = xasprintf("query not understood at offset %d (\"%.24s\"): %s",
                        (int)(ps->p - ps->text), ps->p, what);
}

static void skip_ws(struct parser *ps)
{
    while (isspace((unsigned char)*ps->p))
        ps->p++;
}

static bool accept(struct parser *ps, const char *tok)
{
    size_t n = strlen(tok);
    skip_ws(ps);
    if (strncmp(ps->p, tok, n) != 0)
        return false;
    ps->p += n;
    return true;
}

static bool ident_char(char c, bool first)
{
    return isalpha((unsigned char)c) || c == '_' || c == ':' ||
           (!first && isdigit((unsigned char)c));
}

/* An identifier at the position, allocated, or NULL (nothing consumed). */
static char *ident(struct parser *ps)
{
    const char *s;
    skip_ws(ps);
    s = ps->p;
    if (!ident_char(*s, true))
        return NULL;
    while (ident_char(*ps->p, false))
        ps->p++;
    return xasprintf("%.*s", (int)(ps->p - s), s);
}

/* Is the next identifier exactly word (not consumed)? */
static bool peek_word(struct parser *ps, const char *word)
{
    size_t n = strlen(word);
    skip_ws(ps);
    return strncmp(ps->p, word, n) == 0 && !ident_char(ps->p[n], false);
}

/* A quoted string ("..." or '...', backslash escapes), allocated. */
static char *string_lit(struct parser *ps)
{
    char q, *out;
    size_t len = 0;
    skip_ws(ps);
    q = *ps->p;
    if (q != '"' && q != '\'') {
        fail(ps, "expected a quoted string");
        return NULL;
    }
    out = xmalloc(strlen(ps->p) + 1);
    for (ps->p++; *ps->p && *ps->p != q; ps->p++) {
        if (*ps->p == '\\' && ps->p[1])
            ps->p++;
        out[len++] = *ps->p;
    }
    out[len] = '\0';
    if (*ps->p != q) {
        fail(ps, "unterminated string");
        free(out);
        return NULL;
    }
    ps->p++;
    return out;
}

/* ---- parser ---- */

static struct node *expr(struct parser *ps);
static struct node *expr_body(struct parser *ps);

/* A new node; past MAX_NODES the parse fails (evaluation recurses over
 * the tree, so its size is bounded as its depth is). */
static struct node *new_node(struct parser *ps, enum node_type t)
{
    struct node *n = xcalloc(1, sizeof(*n));
    n->type = t;
    if (++ps->nodes > MAX_NODES)
        fail(ps, "the query is too long");
    return n;
}

#define RE_MAX_LEN 256        /* bytes of a label regex */
#define RE_MAX_EXPANSION 64 /* bound on what its repeats may multiply */

/*
 * Would glibc's regcomp build a reasonable automaton for re? It expands a
 * repeat by copying what it repeats (x+ is x x*, x{2,5} five copies of x),
 * so stacked or nested repeats multiply: "p++++...+" with forty pluses
 * made it allocate gigabytes (the fuzzer found it; any user may send a
 * query), and matching such a pattern backtracks for minutes ("p++++*+++++"
 * took 183 s in the fuzzer). Every repeat is counted as if it nested all
 * the others, and the product of their copies is bounded: the client queries use one or two
 * (".*", "a|b"). NULL, or why not.
 */
static const char *re_too_costly(const char *re)
{
    uint64_t product = 1;
    size_t len = strlen(re);
    if (len > RE_MAX_LEN)
        return "the regular expression is longer than 256 bytes";
    for (const char *p = re; *p; p++) {
        uint64_t copies = 0;
        if (*p == '\\' && p[1]) {
            p++;
            continue;
        }
        if (*p == '+' || *p == '*' || *p == '?') {
            copies = 2;
        } else if (*p == '{') {
            char *end = NULL;
            unsigned long lo = strtoul(p + 1, &end, 10), hi = lo;
            if (end && *end == ',')
                hi = end[1] == '}' ? lo : strtoul(end + 1, &end, 10);
            copies = (lo > hi ? lo : hi) + 1;
            if (copies > RE_MAX_EXPANSION)
                copies = RE_MAX_EXPANSION + 1;
        }
        if (copies) {
            product *= copies;
            if (product > RE_MAX_EXPANSION)
                return "the regular expression repeats too much (its "
                       "repeats, stacked or nested, would expand past 64 "
                       "copies)";
        }
    }
    return NULL;
}

static bool compile_re(struct parser *ps, struct matcher *m)
{
    const char *why = re_too_costly(m->value);
    char *anchored;
    int rc;
    if (why) {
        fail(ps, why);
        return false;
    }
    anchored = xasprintf("^(%s)$", m->value);
    rc = regcomp(&m->re, anchored, REG_EXTENDED | REG_NOSUB);
    free(anchored);
    if (rc != 0) {
        fail(ps, "the regular expression does not compile");
        return false;
    }
    return true;
}

static bool matcher(struct parser *ps, struct matcher *m)
{
    m->name = ident(ps);
    if (m->name == NULL) {
        fail(ps, "expected a label name");
        return false;
    }
    if (accept(ps, "=~"))
        m->op = M_RE;
    else if (accept(ps, "!~"))
        m->op = M_NRE;
    else if (accept(ps, "!="))
        m->op = M_NE;
    else if (accept(ps, "="))
        m->op = M_EQ;
    else {
        fail(ps, "expected =, !=, =~ or !~");
        m->op = M_EQ;
        return false;
    }
    m->value = string_lit(ps);
    if (m->value == NULL) {
        m->op = M_EQ; /* nothing compiled */
        return false;
    }
    if ((m->op == M_RE || m->op == M_NRE) && !compile_re(ps, m)) {
        m->op = M_EQ;
        return false;
    }
    return true;
}

static struct node *selector(struct parser *ps, char *name)
{
    struct node *n = new_node(ps, N_SEL);
    n->metric = name;
    skip_ws(ps);
    if (*ps->p == '(') {
        fail(ps, "functions are not supported (only clamp_min is)");
        return n;
    }
    if (!accept(ps, "{"))
        goto tail;
    while (!accept(ps, "}")) {
        if (n->nm == MAX_MATCHERS) {
            fail(ps, "too many label matchers");
            return n;
        }
        if (!matcher(ps, &n->m[n->nm++]))
            return n;
        if (!accept(ps, ",") && !accept(ps, "}")) {
            fail(ps, "expected , or }");
            return n;
        } else if (ps->p[-1] == '}') {
            break;
        }
    }
tail:
    skip_ws(ps);
    if (*ps->p == '[')
        fail(ps, "range selectors are not supported");
    else if (peek_word(ps, "offset"))
        fail(ps, "offset is not supported");
    return n;
}

static bool grouping(struct parser *ps, struct node *n)
{
    n->without = peek_word(ps, "without");
    if (!accept(ps, n->without ? "without" : "by"))
        return false;
    if (n->without) {
        fail(ps, "without (...) is not supported");
        return true;
    }
    if (!accept(ps, "(")) {
        fail(ps, "expected ( after by");
        return true;
    }
    while (!accept(ps, ")")) {
        char *l = ident(ps);
        if (l == NULL || n->nby == PROMQL_MAX_LABELS) {
            free(l);
            fail(ps, "expected a label name in by (...)");
            return true;
        }
        n->by[n->nby++] = l;
        if (!accept(ps, ",") && !peek_word(ps, ")") && *ps->p != ')') {
            fail(ps, "expected , or ) in by (...)");
            return true;
        }
    }
    return true;
}

static bool agg_of(const char *w, enum agg_op *out)
{
    static const char *const names[] = {"sum", "avg", "max", "min",
                                        "count", "topk", "bottomk"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(w, names[i]) == 0) {
            *out = (enum agg_op)i;
            return true;
        }
    return false;
}

static double number(struct parser *ps, bool *ok);

static struct node *aggregation(struct parser *ps, enum agg_op op)
{
    struct node *n = new_node(ps, N_AGG);
    bool had_by;
    n->agg = op;
    had_by = grouping(ps, n);
    if (ps->err)
        return n;
    if (!accept(ps, "(")) {
        fail(ps, "expected ( after the aggregation");
        return n;
    }
    if (op == A_TOPK || op == A_BOTTOMK) {
        bool ok = false;
        n->k = number(ps, &ok);
        if (!ok || !accept(ps, ",")) {
            fail(ps, "expected topk(<number>, <expression>)");
            return n;
        }
    }
    n->a = expr(ps);
    if (ps->err)
        return n;
    if (!accept(ps, ")")) {
        fail(ps, "expected ) after the aggregation's argument");
        return n;
    }
    if (!had_by)
        grouping(ps, n);
    return n;
}

static double number(struct parser *ps, bool *ok)
{
    char *end = NULL;
    double v;
    skip_ws(ps);
    v = strtod(ps->p, &end);
    *ok = end != ps->p && (isdigit((unsigned char)*ps->p) || *ps->p == '.');
    if (*ok)
        ps->p = end;
    return v;
}

/* clamp_min(vector, scalar), the one function the clients send (HAMi-WebUI's
 * task page divides by clamp_min(..., 1)). Both arguments are expressions;
 * their kinds are checked when evaluated. */
static struct node *clamp_min(struct parser *ps)
{
    struct node *n = new_node(ps, N_CLAMP_MIN);
    if (!accept(ps, "(")) {
        fail(ps, "expected ( after clamp_min");
        return n;
    }
    n->a = expr(ps);
    if (ps->err)
        return n;
    if (!accept(ps, ",")) {
        fail(ps, "expected clamp_min(<vector>, <number>)");
        return n;
    }
    n->b = expr(ps);
    if (ps->err)
        return n;
    if (!accept(ps, ")"))
        fail(ps, "expected ) after clamp_min's arguments");
    return n;
}

static struct node *primary(struct parser *ps)
{
    struct node *n;
    enum agg_op op;
    bool ok;
    char *w;
    double v;

    if (accept(ps, "(")) {
        n = expr(ps);
        if (!ps->err && !accept(ps, ")"))
            fail(ps, "expected )");
        return n;
    }
    v = number(ps, &ok);
    if (ok) {
        n = new_node(ps, N_NUM);
        n->num = v;
        return n;
    }
    w = ident(ps);
    if (w == NULL) {
        fail(ps, "expected a number, a metric name, an aggregation or (");
        return NULL;
    }
    if (agg_of(w, &op)) {
        free(w);
        return aggregation(ps, op);
    }
    if (strcmp(w, "clamp_min") == 0 && (skip_ws(ps), *ps->p == '(')) {
        free(w);
        return clamp_min(ps);
    }
    return selector(ps, w);
}

/* Recursion is bounded: every nested expr and unary minus counts. */
static bool enter(struct parser *ps)
{
    if (++ps->depth <= MAX_DEPTH)
        return true;
    fail(ps, "nested too deep");
    return false;
}

static struct node *unary(struct parser *ps)
{
    struct node *n;
    if (!accept(ps, "-"))
        return primary(ps);
    n = new_node(ps, N_NEG);
    if (enter(ps))
        n->a = unary(ps);
    ps->depth--;
    if (n->a == NULL && ps->err == NULL)
        fail(ps, "expected an expression after -");
    return n;
}

static struct node *binary(struct parser *ps, struct node *a, char op,
                           struct node *(*next)(struct parser *))
{
    struct node *n = new_node(ps, N_BIN);
    n->op = op;
    n->a = a;
    n->b = next(ps);
    return n;
}

static struct node *term(struct parser *ps)
{
    struct node *n = unary(ps);
    while (!ps->err) {
        if (accept(ps, "*"))
            n = binary(ps, n, '*', unary);
        else if (accept(ps, "/"))
            n = binary(ps, n, '/', unary);
        else
            break;
    }
    return n;
}

static struct node *expr(struct parser *ps)
{
    struct node *n = NULL;
    if (enter(ps))
        n = expr_body(ps);
    ps->depth--;
    return n;
}

static struct node *expr_body(struct parser *ps)
{
    struct node *n = term(ps);
    while (!ps->err) {
        if (accept(ps, "+"))
            n = binary(ps, n, '+', term);
        else if (accept(ps, "-"))
            n = binary(ps, n, '-', term);
        else
            break;
    }
    return n;
}

enum accel_err promql_parse(const char *text, struct promql_query **out,
                            char **cause)
{
    struct parser ps = {text, text, NULL, 0, 0};
    struct node *root = expr(&ps);
    skip_ws(&ps);
    if (ps.err == NULL && *ps.p != '\0')
        fail(&ps, strchr("<>=!", *ps.p) ? "comparisons are not supported"
                                        : "unexpected text");
    if (ps.err == NULL && root == NULL)
        fail(&ps, "empty query");
    if (ps.err != NULL) {
        node_free(root);
        if (cause)
            *cause = ps.err;
        else
            free(ps.err);
        return ACCEL_EPARSE;
    }
    *out = xcalloc(1, sizeof(**out));
    (*out)->root = root;
    return ACCEL_OK;
}

void promql_free(struct promql_query *q)
{
    if (q == NULL)
        return;
    node_free(q->root);
    free(q);
}

/* ---- values ---- */

static void labels_release(struct promql_labels *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->k[i]);
        free(l->v[i]);
    }
    l->n = 0;
}

static void labels_set(struct promql_labels *l, const char *k, const char *v)
{
    size_t i = 0;
    while (i < l->n && strcmp(l->k[i], k) < 0)
        i++;
    if (i < l->n && strcmp(l->k[i], k) == 0) {
        free(l->v[i]);
        l->v[i] = xstrdup(v);
        return;
    }
    if (l->n == PROMQL_MAX_LABELS)
        return;
    memmove(&l->k[i + 1], &l->k[i], (l->n - i) * sizeof(char *));
    memmove(&l->v[i + 1], &l->v[i], (l->n - i) * sizeof(char *));
    l->k[i] = xstrdup(k);
    l->v[i] = xstrdup(v);
    l->n++;
}

static const char *labels_get(const struct promql_labels *l, const char *k)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->k[i], k) == 0)
            return l->v[i];
    return NULL;
}

static void labels_copy(struct promql_labels *dst,
                        const struct promql_labels *src)
{
    dst->n = 0;
    for (size_t i = 0; i < src->n; i++)
        labels_set(dst, src->k[i], src->v[i]);
}

char *promql_labels_key(const struct promql_labels *l)
{
    size_t len = 1;
    char *out, *p;
    for (size_t i = 0; i < l->n; i++)
        len += strlen(l->k[i]) + strlen(l->v[i]) + 2;
    out = p = xmalloc(len);
    *p = '\0';
    for (size_t i = 0; i < l->n; i++)
        p += snprintf(p, len - (size_t)(p - out), "%s=%s\x1f", l->k[i],
                      l->v[i]);
    return out;
}

static bool labels_eq(const struct promql_labels *a,
                      const struct promql_labels *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->k[i], b->k[i]) != 0 || strcmp(a->v[i], b->v[i]) != 0)
            return false;
    return true;
}

static struct promql_sample *push(struct promql_value *out)
{
    if (out->n == out->cap) {
        out->cap = out->cap ? out->cap * 2 : 8;
        out->s = xrealloc(out->s, out->cap * sizeof(*out->s));
    }
    memset(&out->s[out->n], 0, sizeof(out->s[0]));
    return &out->s[out->n++];
}

void promql_add(struct promql_value *out, const char *const *kv, size_t nkv,
                double v)
{
    struct promql_sample *s = push(out);
    for (size_t i = 0; i < nkv; i++)
        labels_set(&s->l, kv[2 * i], kv[2 * i + 1]);
    s->v = v;
}

void promql_value_release(struct promql_value *v)
{
    for (size_t i = 0; i < v->n; i++)
        labels_release(&v->s[i].l);
    free(v->s);
    memset(v, 0, sizeof(*v));
}

/* ---- evaluation ---- */

struct ev {
    int64_t t;               /* evaluation time */
    promql_fetch_fn fetch;   /* the source */
    void *ctx;
    char *err;               /* first error */
};

static void eval(struct ev *e, const struct node *n, struct promql_value *out);

static bool matches(const struct matcher *m, const struct promql_labels *l)
{
    const char *v = labels_get(l, m->name);
    bool hit;
    if (v == NULL)
        v = "";
    switch (m->op) {
    case M_EQ: return strcmp(v, m->value) == 0;
    case M_NE: return strcmp(v, m->value) != 0;
    default:
        hit = regexec(&m->re, v, 0, NULL, 0) == 0;
        return m->op == M_RE ? hit : !hit;
    }
}

static void eval_selector(struct ev *e, const struct node *n,
                          struct promql_value *out)
{
    struct promql_value all = {0};
    if (!e->fetch(e->ctx, n->metric, e->t, &all)) {
        if (e->err == NULL)
            e->err = xasprintf("metric %s is not one accel keeps (see "
                               "docs/compat.md for the metrics it answers)",
                               n->metric);
        promql_value_release(&all);
        return;
    }
    for (size_t i = 0; i < all.n; i++) {
        bool ok = true;
        for (size_t k = 0; ok && k < n->nm; k++)
            ok = matches(&n->m[k], &all.s[i].l);
        if (!ok)
            continue;
        labels_copy(&push(out)->l, &all.s[i].l);
        out->s[out->n - 1].v = all.s[i].v;
    }
    promql_value_release(&all);
}

/* The grouping labels of sample s under an aggregation. */
static void group_labels(const struct node *n, const struct promql_labels *s,
                         struct promql_labels *g)
{
    g->n = 0;
    for (size_t i = 0; i < n->nby; i++) {
        const char *v = labels_get(s, n->by[i]);
        if (v != NULL)
            labels_set(g, n->by[i], v);
    }
}

static double fold(enum agg_op op, double acc, double v, size_t count)
{
    switch (op) {
    case A_SUM:
    case A_AVG: return acc + v;
    case A_MAX: return count == 0 || v > acc ? v : acc;
    case A_MIN: return count == 0 || v < acc ? v : acc;
    default: return acc + 1; /* count */
    }
}

static void aggregate(const struct node *n, const struct promql_value *in,
                      struct promql_value *out)
{
    size_t *count = xcalloc(in->n + 1, sizeof(*count));
    char **keys = xcalloc(in->n + 1, sizeof(*keys));
    for (size_t i = 0; i < in->n; i++) {
        struct promql_labels g = {0};
        char *key;
        size_t o = 0;
        group_labels(n, &in->s[i].l, &g);
        key = promql_labels_key(&g);
        while (o < out->n && strcmp(keys[o], key) != 0)
            o++;
        if (o == out->n) {
            struct promql_sample *s = push(out);
            labels_copy(&s->l, &g);
            keys[o] = key;
        } else {
            free(key);
        }
        out->s[o].v = fold(n->agg, out->s[o].v, in->s[i].v, count[o]);
        count[o]++;
        labels_release(&g);
    }
    for (size_t o = 0; o < out->n; o++) {
        if (n->agg == A_AVG)
            out->s[o].v /= (double)count[o];
        free(keys[o]);
    }
    free(keys);
    free(count);
}

static int by_value_desc(const void *a, const void *b)
{
    double x = ((const struct promql_sample *)a)->v;
    double y = ((const struct promql_sample *)b)->v;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* topk/bottomk: the k largest (smallest) samples of each group, labels
 * kept. Takes the samples of in (in is emptied). */
static void select_k(const struct node *n, struct promql_value *in,
                     struct promql_value *out)
{
    size_t k = !(n->k > 0) ? 0 : n->k >= (double)in->n ? in->n
                                                    : (size_t)n->k;
    if (in->n == 0)
        return;
    qsort(in->s, in->n, sizeof(*in->s), by_value_desc);
    if (n->agg == A_BOTTOMK)
        for (size_t i = 0; i < in->n / 2; i++) {
            struct promql_sample t = in->s[i];
            in->s[i] = in->s[in->n - 1 - i];
            in->s[in->n - 1 - i] = t;
        }
    for (size_t i = 0; i < in->n; i++) {
        struct promql_labels g = {0}, h = {0};
        size_t seen = 0;
        group_labels(n, &in->s[i].l, &g);
        for (size_t j = 0; j < i; j++) {
            group_labels(n, &in->s[j].l, &h);
            seen += labels_eq(&g, &h);
            labels_release(&h);
        }
        labels_release(&g);
        if (seen < k) {
            labels_copy(&push(out)->l, &in->s[i].l);
            out->s[out->n - 1].v = in->s[i].v;
        }
    }
}

static void eval_agg(struct ev *e, const struct node *n,
                     struct promql_value *out)
{
    struct promql_value in = {0};
    eval(e, n->a, &in);
    if (e->err == NULL && in.scalar)
        e->err = xstrdup("an aggregation needs a vector, not a number");
    if (e->err == NULL) {
        if (n->agg == A_TOPK || n->agg == A_BOTTOMK)
            select_k(n, &in, out);
        else
            aggregate(n, &in, out);
    }
    promql_value_release(&in);
}

static double arith(char op, double a, double b)
{
    switch (op) {
    case '+': return a + b;
    case '-': return a - b;
    case '*': return a * b;
    default: return a / b; /* IEEE: x/0 = ±Inf, 0/0 = NaN, as PromQL */
    }
}

/* vector op vector: one-to-one on equal label sets. */
static void match_vectors(char op, const struct promql_value *a,
                          const struct promql_value *b,
                          struct promql_value *out)
{
    for (size_t i = 0; i < a->n; i++)
        for (size_t j = 0; j < b->n; j++)
            if (labels_eq(&a->s[i].l, &b->s[j].l)) {
                labels_copy(&push(out)->l, &a->s[i].l);
                out->s[out->n - 1].v = arith(op, a->s[i].v, b->s[j].v);
                break;
            }
}

static void eval_bin(struct ev *e, const struct node *n,
                     struct promql_value *out)
{
    struct promql_value a = {0}, b = {0};
    eval(e, n->a, &a);
    eval(e, n->b, &b);
    if (e->err != NULL) {
        /* nothing */
    } else if (a.scalar && b.scalar) {
        out->scalar = true;
        out->v = arith(n->op, a.v, b.v);
    } else if (a.scalar || b.scalar) {
        const struct promql_value *vec = a.scalar ? &b : &a;
        for (size_t i = 0; i < vec->n; i++) {
            labels_copy(&push(out)->l, &vec->s[i].l);
            out->s[out->n - 1].v = a.scalar ? arith(n->op, a.v, vec->s[i].v)
                                            : arith(n->op, vec->s[i].v, b.v);
        }
    } else {
        match_vectors(n->op, &a, &b, out);
    }
    promql_value_release(&a);
    promql_value_release(&b);
}

/* clamp_min: every sample's value, at least the minimum (NaN stays NaN,
 * as PromQL's math.Max). The labels are kept. */
static void eval_clamp_min(struct ev *e, const struct node *n,
                           struct promql_value *out)
{
    struct promql_value lo = {0};
    eval(e, n->a, out);
    eval(e, n->b, &lo);
    if (e->err == NULL && out->scalar)
        e->err = xstrdup("clamp_min needs a vector as its first argument, "
                         "not a number");
    else if (e->err == NULL && !lo.scalar)
        e->err = xstrdup("clamp_min needs a number as its second argument, "
                         "not a vector");
    if (e->err == NULL)
        for (size_t i = 0; i < out->n; i++) {
            double v = out->s[i].v;
            out->s[i].v = isnan(v) || isnan(lo.v) ? NAN
                          : v < lo.v ? lo.v : v;
        }
    promql_value_release(&lo);
}

static void eval(struct ev *e, const struct node *n, struct promql_value *out)
{
    memset(out, 0, sizeof(*out));
    if (e->err != NULL)
        return;
    switch (n->type) {
    case N_NUM:
        out->scalar = true;
        out->v = n->num;
        break;
    case N_SEL: eval_selector(e, n, out); break;
    case N_AGG: eval_agg(e, n, out); break;
    case N_BIN: eval_bin(e, n, out); break;
    case N_CLAMP_MIN: eval_clamp_min(e, n, out); break;
    case N_NEG:
        eval(e, n->a, out);
        out->v = -out->v;
        for (size_t i = 0; i < out->n; i++)
            out->s[i].v = -out->s[i].v;
        break;
    }
}

enum accel_err promql_eval(const struct promql_query *q, int64_t t,
                           promql_fetch_fn fetch, void *ctx,
                           struct promql_value *out, char **cause)
{
    struct ev e = {t, fetch, ctx, NULL};
    eval(&e, q->root, out);
    if (e.err == NULL)
        return ACCEL_OK;
    if (cause)
        *cause = e.err;
    else
        free(e.err);
    return ACCEL_EINVAL;
}
