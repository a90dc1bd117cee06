/* SPDX-License-Identifier: MIT */
/*
 * ops_quota.c: a bound app's quota changed live (SPEC 4.4, issue 46):
 * PUT /api/apps/{name}/compute-resources/bindings/{deviceId} {memory}.
 * A raise is admitted by the rules of section 2 (adm_quota_change) and
 * the owner's limits (section 3); a cut lands at once. Either is one
 * store transaction (the app's rows and the event app.quota), then
 * memory, then the node: the app's shim config, its ledger's limit and
 * the kernel's or driver's limit (livequota_apply). An app left holding
 * more than its new quota is refused new allocations by the shim until
 * it is under, and asked to give memory back through d->hooks.quota_over.
 */
#include "common/accel_setup.h"
#include "daemon/api/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/quantity.h"
#include "common/util.h"
#include "daemon/api/metrics.h"
#include "daemon/api/ops_int.h"
#include "daemon/api/view.h"
#include "daemon/node/runtime/livequota.h"
#include "daemon/state.h"

#define QUOTA_RULE                                                             \
    "memory must be the new quota in bytes: a positive integer, or a "        \
    "quantity such as \"8Gi\" or \"512Mi\""

/* The body {memory} into *out: false with res set to a 400 naming the
 * field and the rule. */
static bool parse_body(const json_t *body, uint64_t *out,
                       struct op_result *res)
{
    const json_t *v;
    const char *k;
    json_t *x;
    uint64_t b = 0;
    bool ok;

    if (!json_is_object(body)) {
        ops_res_error(res, 400, "invalid-argument",
                      "the body must be a JSON object {\"memory\": ...}");
        return false;
    }
    json_object_foreach((json_t *)body, k, x) {
        if (strcmp(k, "memory") != 0) {
            ops_res_error(res, 400, "invalid-argument",
                          "%s is not a field of a quota change (memory)", k);
            return false;
        }
    }
    v = json_object_get(body, "memory");
    if (v == NULL || json_is_null(v)) {
        ops_res_error(res, 400, "invalid-argument",
                      "memory is required: " QUOTA_RULE);
        return false;
    }
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        ok = i > 0 && (uint64_t)i <= QUANTITY_MAX;
        b = ok ? (uint64_t)i : 0;
    } else {
        ok = json_is_string(v) &&
             quantity_parse_bytes(json_string_value(v), &b) == ACCEL_OK &&
             b > 0;
    }
    if (!ok) {
        ops_res_error(res, 400, "invalid-argument", QUOTA_RULE
                      " (at most the card's memory)");
        return false;
    }
    *out = b;
    return true;
}

/* The row of a on device, or -1 with res set (404). */
static int row_of(struct accel_daemon *d, const struct app *a,
                  const char *device, struct op_result *res)
{
    int dev = state_dev_find(d, device);

    for (size_t k = 0; dev >= 0 && k < a->nrows; k++)
        if (a->rows[k].dev == (uint32_t)dev)
            return (int)k;
    if (dev < 0)
        ops_res_error(res, 404, "device-not-found",
                      "there is no device %s", device);
    else
        ops_res_error(res, 404, "binding-not-found",
                      "app \"%s\" is not bound to %s", a->name, device);
    return -1;
}

/* A raise the rules refuse: 409 with the code and the numbers, and the
 * refusal's event. */
static void refused(struct accel_daemon *d, const struct app *a, size_t k,
                    uint64_t memory, const struct adm_verdict *v,
                    struct op_result *res)
{
    const struct adm_device *x = &d->snap.devs[a->rows[k].dev];
    uint64_t others = x->allocated - a->rows[k].memory;
    /* what the quotas may sum to: the card, or more with overcommit (issue
     * 46); a quota never passes the card itself */
    uint64_t cap = adm_memslice_capacity(x);
    uint64_t free_b = cap > others ? cap - others : 0;
    char code[2 * ACCEL_ID_MAX + 64], want[32], cur[32], total[32],
        freeq[32], capq[32], detail[256] = "", over[80] = "";

    if (free_b > x->memory)
        free_b = x->memory;
    if (cap != x->memory) {
        quantity_format_bytes(cap, capq, sizeof capq);
        snprintf(over, sizeof over, " (its quotas may add up to %s with "
                 "overcommit)", capq);
    }

    adm_verdict_format(v, code, sizeof code);
    quantity_format_bytes(memory, want, sizeof want);
    quantity_format_bytes(a->rows[k].memory, cur, sizeof cur);
    quantity_format_bytes(x->memory, total, sizeof total);
    quantity_format_bytes(free_b, freeq, sizeof freeq);
    if (v->code == ADM_NODE_PRESSURE)
        adm_pressure_format(&v->pressure, detail, sizeof detail);
    metrics_refusal(d, adm_code_name(v->code));
    state_event_refusal(
        d, a->name,
        json_pack("{s:s, s:s, s:I, s:I, s:I, s:I}", "code", code, "deviceId",
                  x->id, "old", (json_int_t)a->rows[k].memory, "new",
                  (json_int_t)memory, "total", (json_int_t)x->memory, "free",
                  (json_int_t)free_b),
        "app %s: quota on %s not raised from %s to %s: %s (%s)", a->name,
        x->id, cur, want, code, view_code_sentence(v->code));
    /* the code's own sentence is the client's to add (accelctl and the
     * page put it before the message) */
    ops_res_error(res, 409, adm_code_name(v->code),
                  "the quota of %s on %s cannot be raised from %s to %s: "
                  "%s%s%s; the card has %s%s, of which %s is not assigned "
                  "to other apps (this app holds %s of it now)",
                  a->name, x->id, cur, want, code, detail[0] ? ", " : "",
                  detail, total, over, freeq, cur);
    util_strlcpy(res->code_buf, code, sizeof res->code_buf);
    res->code = res->code_buf;
}

/* The change committed: rows and event in one transaction. */
static enum accel_err commit(struct accel_daemon *d, const struct app *a,
                             size_t k, const struct adm_row *rows,
                             uint64_t memory, bool raise)
{
    const struct adm_device *x = &d->snap.devs[a->rows[k].dev];
    char from[32], to[32];
    enum accel_err rc = state_tx_begin(d);

    if (rc != ACCEL_OK)
        return rc;
    quantity_format_bytes(a->rows[k].memory, from, sizeof from);
    quantity_format_bytes(memory, to, sizeof to);
    rc = state_save_rows(d, a, rows, a->nrows);
    if (rc == ACCEL_OK)
        state_event(d, "app.quota", a->name, d->snap.nodes[x->node].name,
                    x->id,
                    json_pack("{s:I, s:I, s:s}", "old",
                              (json_int_t)a->rows[k].memory, "new",
                              (json_int_t)memory, "change",
                              raise ? "raise" : "cut"),
                    "app %s: quota on %s %s from %s to %s", a->name, x->id,
                    raise ? "raised" : "cut", from, to);
    return state_tx_end(d, rc);
}

void ops_quota_set(struct accel_daemon *d, const struct auth_user *u,
                   const char *name, const char *device, const json_t *body,
                   struct op_result *res)
{
    struct adm_row rows[ADM_MAX_SELECTION];
    struct adm_verdict v;
    enum adm_quota q;
    enum accel_err rc;
    struct app *a;
    uint64_t memory = 0, held = 0;
    char *over_app = NULL, *over_dev = NULL;
    const struct adm_req *r;
    const struct adm_device *x;
    int k;

    if (!parse_body(body, &memory, res))
        return;
    pthread_mutex_lock(&d->lock);
    a = ops_find_app(d, u, name, res);
    if (a == NULL || ops_busy(a, res))
        goto out;
    k = row_of(d, a, device, res);
    if (k < 0)
        goto out;
    x = &d->snap.devs[a->rows[k].dev];
    if (memory > x->memory) {
        char total[32];
        quantity_format_bytes(x->memory, total, sizeof total);
        ops_res_error(res, 400, "invalid-argument",
                      QUOTA_RULE " (at most the card's memory, %s on %s)",
                      total, x->id);
        goto out;
    }
    if (ops_node_away(d, (int)a->rows[k].dev, "change the quota", res))
        goto out;
    r = state_app_req(a);
    if (r == NULL) {
        ops_res_error(res, 409, "quota-not-editable",
                      "app \"%s\" has no selected accelerator type", name);
        goto out;
    }
    q = adm_quota_change(&d->snap, r, a->rows, a->nrows, (size_t)k, memory,
                         &v, rows);
    switch (q) {
    case ADM_QUOTA_FIXED:
        ops_res_error(res, 409, "quota-not-editable",
                      "%s is in %s mode: an app there has the whole card "
                      "(App exclusive) or a fixed share (Time slicing); "
                      "only a Memory slicing GPU has a quota to change",
                      x->id, accel_support_label(x->st));
        goto out;
    case ADM_QUOTA_REFUSED:
        refused(d, a, (size_t)k, memory, &v, res);
        goto out;
    case ADM_QUOTA_SAME:
        ops_res_ok(res, 200, view_app(d, a, u));
        goto out;
    case ADM_QUOTA_RAISE:
        if (!ops_limits_gpu(d, a, rows, a->nrows, res))
            goto out;
        break;
    case ADM_QUOTA_CUT:
        break;
    }
    rc = commit(d, a, (size_t)k, rows, memory, q == ADM_QUOTA_RAISE);
    if (rc != ACCEL_OK) {
        ops_res_store_failed(res, rc);
        goto out;
    }
    state_row_set_memory(d, a, (size_t)k, memory);
    if (livequota_apply(d, a, (size_t)k, &held) != ACCEL_OK)
        state_event(d, "app.quota", a->name, d->snap.nodes[x->node].name,
                    x->id, NULL,
                    "app %s: the new quota on %s is saved but this node "
                    "could not write all of it (acceld's log says what)",
                    a->name, x->id);
    if (held > memory) {
        char h[32], m[32];
        quantity_format_bytes(held, h, sizeof h);
        quantity_format_bytes(memory, m, sizeof m);
        state_event(d, "app.quota", a->name, d->snap.nodes[x->node].name,
                    x->id,
                    json_pack("{s:I, s:I}", "held", (json_int_t)held,
                              "quota", (json_int_t)memory),
                    "app %s holds %s on %s, above its new quota of %s: its "
                    "allocations there are refused until it is under",
                    a->name, h, x->id, m);
        over_app = xstrdup(a->name);
        over_dev = xstrdup(x->id);
    }
    ops_res_ok(res, 200, view_app(d, a, u));
out:
    pthread_mutex_unlock(&d->lock);
    /* SPEC 4.4: an app above its new quota has its reclaim action called
     * (issue 46's reclaim module sets the hook) */
    if (over_app != NULL && d->hooks.quota_over != NULL)
        d->hooks.quota_over(d, over_app, over_dev, held, memory);
    free(over_app);
    free(over_dev);
}
