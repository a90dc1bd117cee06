/* SPDX-License-Identifier: MIT */
/*
 * request.h: one request to acceld reported the way every command reports
 * it: a refusal as the sentence of SPEC 7, `-o json` as the answer's data,
 * otherwise the command's own printer.
 */
#ifndef ACCEL_CLI_REQUEST_H
#define ACCEL_CLI_REQUEST_H

#include <jansson.h>

#include "cli/cli.h"
#include "cli/client.h"

/* Prints the data of a successful answer; arg is the command's own. */
typedef void (*request_print_fn)(const json_t *data, const void *arg);

/*
 * Send method path (escaped) with body (borrowed; NULL = none) and report
 * the outcome as above. Returns an enum cli_exit value.
 */
int request_report(struct cli_ctx *ctx, const char *method, const char *path,
                   json_t *body, request_print_fn print, const void *arg);

/*
 * The same report of an answer already in hand (client_call's rc and
 * resp), for a command whose printer needs more than one argument: a
 * refusal reported (*rc becomes sentence_report_ctx's status), -o json's
 * data printed; true when the request succeeded in text output, for the
 * caller to print its own sentence.
 */
bool request_outcome(const struct cli_ctx *ctx, int *rc,
                     const struct client_resp *resp);

#endif /* ACCEL_CLI_REQUEST_H */
