/* SPDX-License-Identifier: MIT */
/*
 * compute.h: accelctl's side of the compute dialogue of install and resume:
 * parsing --compute-binding NODE:DEVICE[:MEM], and sending a request that
 * acceld may answer with a 422 question (computeModeSelect: which type?
 * computeBindingRequired: which GPU?). On a terminal the question is asked
 * and the request resent with the answer; elsewhere it is explained with the
 * option that answers it, and the command fails.
 */
#ifndef ACCEL_CLI_COMPUTE_H
#define ACCEL_CLI_COMPUTE_H

#include <jansson.h>
#include <stdint.h>

#include "accel/accel.h"
#include "cli/cli.h"
#include "cli/client.h"

/*
 * Parse a quota: a bare number is GiB ("8", "1.5"), else a quantity
 * ("8Gi", "512Mi"). *out (bytes) is set only on success; ACCEL_EPARSE or
 * ACCEL_ERANGE otherwise. A zero quota is ACCEL_ERANGE.
 */
enum accel_err compute_parse_mem(const char *s, uint64_t *out);

/*
 * Parse "NODE:DEVICE[:MEM]" into a new object {nodeName, deviceId,
 * memory?} (*out, the caller json_decref's it; set only on success). On
 * failure returns ACCEL_EPARSE/ACCEL_ERANGE and *cause gets an allocated
 * message the caller frees.
 */
enum accel_err compute_parse_binding(const char *spec, json_t **out,
                                     char **cause);

/*
 * The --compute-binding options of args as a computeBinding array in *out
 * (NULL when none were given). Prints the problem and returns
 * CLI_EXIT_USAGE for a malformed one, else CLI_EXIT_OK.
 */
int compute_bindings_from_args(const struct cli_args *args, json_t **out);

/*
 * Read a manifest file (JSON or YAML, at most ACCEL_MAX_BODY bytes) into a
 * new object *out (caller json_decref's it; set only on success). Prints
 * the problem and returns CLI_EXIT_USAGE when the file cannot be read or
 * parsed, else CLI_EXIT_OK.
 */
int compute_read_manifest(const char *file, json_t **out);

/* The manifest's metadata.name, or fallback. Borrowed from manifest. */
const char *compute_manifest_name(const json_t *manifest,
                                  const char *fallback);

/*
 * POST body (borrowed; amended with selectedGpuType or computeBinding when
 * the person answers a question) to path, for the app named app, and fill
 * *out with the final answer (release it whatever the result). Refusals are
 * printed. Returns an enum cli_exit value.
 */
int compute_send(const struct cli_ctx *ctx, const char *path, json_t *body,
                 const char *app, struct client_resp *out);

/*
 * The device node/id in a GET /api/compute-resources answer (nodes, its
 * data), or NULL after saying on stderr which of the two is not there.
 */
const json_t *compute_find_device(const json_t *nodes, const char *node,
                                  const char *id);

#endif /* ACCEL_CLI_COMPUTE_H */
