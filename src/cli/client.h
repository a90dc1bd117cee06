/* SPDX-License-Identifier: MIT */
/*
 * client.h: accelctl's one door to acceld. It sends a JSON request over HTTP
 * (libcurl, bounded time, bounded answer size), parses the JSON answer and
 * translates the outcome into an exit status, in this module only (STYLE 6):
 * 2xx whose body's "code" (if any) is 0 or 200 → CLI_EXIT_OK, any other
 * answer (another status, or a failed check: HTTP 200 with code 422) →
 * CLI_EXIT_REFUSED,
 * no answer → CLI_EXIT_CONNECT. It does not print refusals; callers do that
 * with sentence.h, since some refusals (422 checks) are questions to ask.
 */
#ifndef ACCEL_CLI_CLIENT_H
#define ACCEL_CLI_CLIENT_H

#include <jansson.h>

#include "cli/cli.h"

/* Hard cap on an answer's size: above it the request fails (STYLE 12). */
#define CLIENT_MAX_RESPONSE (64u * 1024 * 1024)
/* Seconds to connect, and for a whole request. */
#define CLIENT_CONNECT_TIMEOUT 5L
#define CLIENT_TIMEOUT 60L

/* The answer to one request. */
struct client_resp {
    long status;  /* HTTP status; 0 when acceld did not answer */
    json_t *body; /* the parsed answer (owned), or NULL if not JSON */
    json_t *data; /* body's "data" member (borrowed from body) or NULL */
};

/*
 * Send method path (path begins with "/api/...", already escaped) with an
 * optional JSON body (borrowed; NULL sends none) and fill *out, which the
 * caller releases with client_resp_release whatever the result. Prints
 * "cannot reach acceld at URL: ..." itself when there is no answer.
 * Returns an enum cli_exit value as described above.
 */
int client_call(const struct cli_ctx *ctx, const char *method,
                const char *path, json_t *body, struct client_resp *out);

/* Write every control character (a C0 byte, DEL, a C1 character) of v's
 * strings and keys escaped, as "\x1b" or "\u009b" (util_ctrl_escape), so
 * that nothing acceld answers can drive the terminal it is printed on:
 * what client_call answers is escaped so, but with -o json (whose output
 * escapes them the JSON way, table_dump_json). */
void client_escape_controls(json_t *v);

/* Free what *resp holds; the struct can be reused. NULL-safe. */
void client_resp_release(struct client_resp *resp);

/*
 * Escape one path segment (a node, device or app name) for a URL. The caller
 * frees the result.
 */
char *client_escape(const char *segment);

/* prefix, then name escaped as one path segment, then suffix (a query or
 * a further path, as it is): "/api/apps/" "my app" "/resume". Allocated. */
char *client_path(const char *prefix, const char *name, const char *suffix);

/* "/api/compute-resources/nodes/NODE/devices/DEV/what", both names
 * escaped: a device's settings (what: "support-type", "time-slice"). */
char *client_device_path(const char *node, const char *dev, const char *what);

/* The failed check of an answer, {"code":422,"data":{"type","Data"}}
 * (SPEC 5): its type ("computeModeSelect"...), or NULL when it is none. */
const char *client_check_type(const struct client_resp *resp);
/* The check's result `Data` (borrowed from resp), or NULL. */
const json_t *client_check_data(const struct client_resp *resp);

#endif /* ACCEL_CLI_CLIENT_H */
