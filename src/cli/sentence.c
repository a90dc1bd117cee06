/* SPDX-License-Identifier: MIT */
/*
 * sentence.c: the one code → sentence table of accelctl, and the printing of
 * refusals. The SPEC 7 sentences are the page's inline advice; the others
 * say what went wrong and what to do, with "{}" standing for the code's
 * subject (a device, a node).
 */
#include "common/accel_setup.h"
#include "cli/sentence.h"

#include <stdio.h>
#include <string.h>

#include "common/quantity.h"
#include "common/util.h"
#include "cli/table.h"

/* One refusal code and what accelctl says about it. */
struct sentence {
    const char *code; /* the code without ":subject" */
    const char *text; /* the sentence; "{}" = the subject */
};

static const struct sentence sentences[] = {
    /* SPEC 2.6 selection validation, in its order */
    { "empty-selection", "No GPU was selected. Select at least one device." },
    { "node-not-found", "Node {} does not exist." },
    { "device-not-found", "Device {} does not exist on the selected node." },
    { "duplicate-selection", "Device {} was selected more than once." },
    { "multi-card-not-supported",
      "This app runs on a single card. Select only one GPU." },
    { "multi-node-not-supported",
      "This app cannot span nodes. Select GPUs on one node only." },
    { "non-nvidia-must-single-selection",
      "Only NVIDIA GPUs can be combined. Select exactly one device." },
    { "device-unhealthy", "Device {} is unhealthy. Select another GPU." },
    { "gpu-type-mismatch",
      "The selected device is not of the app's accelerator type." },
    { "exclusive-already-bound",
      "Device {} is in App exclusive mode and already assigned to another "
      "app. Remove that app from the GPU first, or select another GPU." },
    { "memory-required",
      "Device {} is in Memory slicing mode: give the app a memory quota "
      "(NODE:DEVICE:MEM)." },
    { "memory-below-required",
      "The memory quota on device {} is below the app's requirement." },
    { "total-vram-below-requirement",
      "This GPU's total VRAM is below the app's requirement. Removing apps "
      "will not help; select another GPU." },
    { "device-vram-insufficient",
      "This GPU does not have enough free VRAM. Remove apps from this GPU to "
      "free up VRAM first." },
    { "aggregate-vram-insufficient",
      "The selected GPUs do not have enough combined VRAM. Add more GPUs or "
      "pick another node." },
    { "device-memory-insufficient",
      "The node for this GPU does not have enough memory. Pick another GPU "
      "or node." },
    { "node-pressure",
      "Scheduling the app to this node would overload it. Retry later or "
      "pick another node." },
    /* availability and placement reasons (SPEC 2.4, 2.5) */
    { "no-matching-node", "No node has an accelerator of the app's type." },
    { "no-card-with-enough-vram",
      "No GPU has enough total VRAM for the app's requirement." },
    { "no-node-with-enough-cards",
      "No node has enough GPUs to cover the app's requirement together." },
    { "insufficient-cluster-vram",
      "The cluster does not have enough VRAM in total for the app." },
    { "insufficient-resources",
      "No accelerator has enough free resources for the app right now; it "
      "stays stopped until it is resumed with a GPU selection." },
    /* preflight reasons (app-service's vocabulary, SPEC 5.1) */
    { "cluster_capacity",
      "The cluster does not have enough CPU, memory or disk in total for "
      "this demand." },
    { "cluster_pressure",
      "The cluster's CPU, memory or disk would pass 90 % of its total." },
    { "owner_quota", "The owner's quota would be exceeded." },
    { "node_pressure",
      "Scheduling the demand would overload the node it fits on." },
    { "unschedulable",
      "No accelerator can take this demand: none of its type is large "
      "enough, or free enough, for it." },
    /* request errors (docs/api.md envelopes) */
    { "unauthorized",
      "The token is missing or invalid. Pass --token, set ACCEL_TOKEN, or "
      "point --data-dir at the data directory holding admin.token." },
    { "forbidden", "Your token is not allowed to do this." },
};

/* Copy text into buf with every "{}" replaced by subject. */
static void fill(char *buf, size_t len, const char *text, const char *subject)
{
    size_t o = 0;
    for (const char *p = text; *p != '\0' && o + 1 < len; p++) {
        if (p[0] == '{' && p[1] == '}') {
            for (const char *s = subject; *s != '\0' && o + 1 < len; s++)
                buf[o++] = *s;
            p++;
            continue;
        }
        buf[o++] = *p;
    }
    buf[o] = '\0';
}

const char *sentence_for_code(const char *code, char *buf, size_t len)
{
    if (code == NULL || len == 0)
        return NULL;
    const char *colon = strchr(code, ':');
    size_t n = colon != NULL ? (size_t)(colon - code) : strlen(code);
    const char *subject = colon != NULL ? colon + 1 : "";
    for (size_t i = 0; i < sizeof(sentences) / sizeof(sentences[0]); i++) {
        if (strlen(sentences[i].code) == n &&
            strncmp(sentences[i].code, code, n) == 0) {
            fill(buf, len, sentences[i].text, subject);
            return buf;
        }
    }
    return NULL;
}

/* "Memory: Total X Gi, Used Y Gi, Needed Z Gi" for one pressured dimension;
 * "Apps: Limit …" and "GPU memory: Limit …" for an owner_quota one. */
static void print_dimension(const json_t *dim)
{
    const char *res = json_string_value(json_object_get(dim, "resource"));
    json_int_t cap = json_integer_value(json_object_get(dim, "capacity"));
    json_int_t used = json_integer_value(json_object_get(dim, "used"));
    json_int_t req = json_integer_value(json_object_get(dim, "required"));
    if (res == NULL || !json_is_true(json_object_get(dim, "pressured")))
        return;
    if (strcmp(res, "apps") == 0) { /* an owner_quota dimension */
        fprintf(stderr, "Apps: Limit %lld, Held %lld, Needed %lld\n",
                (long long)cap, (long long)used, (long long)req);
        return;
    }
    if (strcmp(res, "cpu") == 0) {
        fprintf(stderr, "CPU: Total %.2f Core, Used %.2f Core, Needed %.2f "
                "Core\n", cap / 1000.0, used / 1000.0, req / 1000.0);
        return;
    }
    char c[32], u[32], r[32];
    quantity_format_gib((uint64_t)(cap > 0 ? cap : 0), c, sizeof(c));
    quantity_format_gib((uint64_t)(used > 0 ? used : 0), u, sizeof(u));
    quantity_format_gib((uint64_t)(req > 0 ? req : 0), r, sizeof(r));
    if (strcmp(res, "gpu-memory") == 0) /* an owner_quota dimension */
        fprintf(stderr, "GPU memory: Limit %s Gi, Held %s Gi, Needed %s Gi\n",
                c, u, r);
    else
        fprintf(stderr, "%s: Total %s Gi, Used %s Gi, Needed %s Gi\n",
                strcmp(res, "disk") == 0 ? "Disk" : "Memory", c, u, r);
}

void sentence_print_dimensions(const json_t *dims)
{
    size_t i;
    json_t *dim;
    json_array_foreach(dims, i, dim)
        print_dimension(dim);
}

void sentence_print_validation(const json_t *validation)
{
    char buf[512];
    const char *code = json_string_value(json_object_get(validation, "code"));
    const char *reason =
        json_string_value(json_object_get(validation, "reason"));
    const char *s = sentence_for_code(code, buf, sizeof(buf));
    if (s == NULL)
        s = reason != NULL ? reason : (code != NULL ? code : "invalid");
    fprintf(stderr, "%s\n", s);
    const char *detail =
        json_string_value(json_object_get(validation, "detail"));
    if (detail != NULL) {
        fprintf(stderr, "%s\n", detail);
        return;
    }
    const json_t *np = json_object_get(validation, "nodePressure");
    size_t i;
    json_t *dim;
    json_array_foreach(json_object_get(np, "dimensions"), i, dim)
        print_dimension(dim);
}

static void report_modes(const json_t *modes)
{
    size_t i;
    json_t *m;
    fprintf(stderr, "The app can run on several accelerator types; choose "
            "one with --compute-mode TYPE:\n");
    json_array_foreach(modes, i, m) {
        const char *t = json_string_value(json_object_get(m, "computeType"));
        const char *st = json_string_value(json_object_get(m, "status"));
        const char *why = json_string_value(json_object_get(m, "reason"));
        fprintf(stderr, "  %s (%s%s%s)\n", t ? t : "?", st ? st : "?",
                why ? ": " : "", why ? why : "");
    }
}

static void report_blocked(const json_t *data)
{
    size_t i;
    json_t *a;
    fprintf(stderr, "Cannot switch the mode: these apps could not be "
            "stopped:\n");
    json_array_foreach(json_object_get(data, "blockedApps"), i, a) {
        const char *n = json_string_value(json_object_get(a, "appName"));
        const char *why = json_string_value(json_object_get(a, "reason"));
        fprintf(stderr, "  - %s: %s\n", n ? n : "?", why ? why : "busy");
    }
}

static void report_availability(const json_t *data)
{
    char buf[512];
    const json_t *av = json_object_get(data, "availability");
    const char *reason = json_string_value(json_object_get(av, "reason"));
    fprintf(stderr, "The app needs a GPU selection; re-run with "
            "--compute-binding NODE:DEVICE[:MEM].\n");
    if (reason != NULL) {
        const char *s = sentence_for_code(reason, buf, sizeof(buf));
        fprintf(stderr, "%s\n", s != NULL ? s : reason);
    }
}

/* A failed check; false when the answer is not one. */
static bool report_check(const struct client_resp *resp)
{
    const char *type = client_check_type(resp);
    const json_t *data = client_check_data(resp);
    if (type == NULL)
        return false;
    if (strcmp(type, "computeBindingUnavailable") == 0)
        sentence_print_validation(json_object_get(data, "validation"));
    else if (strcmp(type, "computeModeSelect") == 0)
        report_modes(data);
    else if (strcmp(type, "computeDeviceSwitchBlocked") == 0)
        report_blocked(data);
    else if (strcmp(type, "computeBindingRequired") == 0)
        report_availability(data);
    else
        fprintf(stderr, "acceld refused the request (%s)\n", type);
    return true;
}

int sentence_report(const struct client_resp *resp)
{
    char buf[512];
    if (report_check(resp))
        return CLI_EXIT_REFUSED;
    const char *code = json_string_value(json_object_get(resp->body, "error"));
    const char *msg = json_string_value(json_object_get(resp->body, "message"));
    const char *s = sentence_for_code(code, buf, sizeof(buf));
    if (s != NULL && msg != NULL && strcmp(code, "unauthorized") != 0)
        fprintf(stderr, "%s (%s)\n", s, msg);
    else if (s != NULL)
        fprintf(stderr, "%s\n", s);
    else if (msg != NULL)
        fprintf(stderr, "%s\n", msg);
    else
        fprintf(stderr, "acceld answered HTTP %ld\n", resp->status);
    return CLI_EXIT_REFUSED;
}

int sentence_report_ctx(const struct cli_ctx *ctx,
                        const struct client_resp *resp)
{
    if (ctx->output == CLI_OUTPUT_JSON && resp->body != NULL) {
        const json_t *v = resp->data != NULL ? resp->data : resp->body;
        struct client_resp shown = *resp;
        int rc;

        table_dump_json(v, JSON_INDENT(2), stdout);
        fputc('\n', stdout);
        /* the sentences on stderr: escaped as in a table (client.h) */
        shown.body = json_deep_copy(resp->body);
        client_escape_controls(shown.body);
        shown.data = json_object_get(shown.body, "data");
        rc = sentence_report(&shown);
        json_decref(shown.body);
        return rc;
    }
    return sentence_report(resp);
}
