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

/* Prints the data of a successful answer; arg is the command's own. */
typedef void (*request_print_fn)(const json_t *data, const void *arg);

/*
 * Send method path (escaped) with body (borrowed; NULL = none) and report
 * the outcome as above. Returns an enum cli_exit value.
 */
int request_report(struct cli_ctx *ctx, const char *method, const char *path,
                   json_t *body, request_print_fn print, const void *arg);

#endif /* ACCEL_CLI_REQUEST_H */
