/* SPDX-License-Identifier: MIT */
/*
 * sentence.h: the sentences accelctl prints for acceld's refusal codes
 * (SPEC 2.6 and 7), kept in one table, and the printing of a refused answer.
 * A code is "name" or "name:subject" (device-vram-insufficient:GPU-1); the
 * subject is put into the sentence where it names one.
 */
#ifndef ACCEL_CLI_SENTENCE_H
#define ACCEL_CLI_SENTENCE_H

#include <jansson.h>
#include <stddef.h>

#include "cli/client.h"

/*
 * The sentence for code, written into buf (len bytes). Returns buf, or NULL
 * when the code is not in the table (buf is then untouched).
 */
const char *sentence_for_code(const char *code, char *buf, size_t len);

/*
 * Print a Validation object (docs/api.md) to stderr: the sentence of its
 * code (else its reason, else the code), then the node-pressure detail line
 * ("Memory: Total X Gi, Used Y Gi, Needed Z Gi") when there is one.
 */
void sentence_print_validation(const json_t *validation);
/* One "Memory: Total X Gi, Used Y Gi, Needed Z Gi" line on stderr per
 * pressured entry of dims ([{resource, capacity, used, required,
 * pressured}]). */
void sentence_print_dimensions(const json_t *dims);

/*
 * Print why an answer is a refusal, to stderr: a 422 check (with its
 * validation, modes, blocked apps or availability reason), else the sentence
 * of the error code, else the server's message, else the HTTP status.
 * Returns CLI_EXIT_REFUSED, so callers can `return sentence_report(&r);`.
 */
int sentence_report(const struct client_resp *resp);

/*
 * Print a refusal and, with -o json, also the answer's data on stdout.
 * Same return as sentence_report.
 */
int sentence_report_ctx(const struct cli_ctx *ctx,
                        const struct client_resp *resp);

#endif /* ACCEL_CLI_SENTENCE_H */
