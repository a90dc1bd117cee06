/* SPDX-License-Identifier: MIT */
/*
 * yamljson.h: read a YAML document into a jansson value, so manifests and
 * inventories in YAML go through the same validation as JSON. Plain scalars
 * become null/bool/integer/real when they look like one; quoted scalars stay
 * strings. Anchors and aliases are refused (no billion-laughs expansion).
 */
#ifndef ACCEL_COMMON_YAMLJSON_H
#define ACCEL_COMMON_YAMLJSON_H

#include <jansson.h>
#include <stddef.h>

#include "accel/accel.h"

/*
 * Parse len bytes of YAML. On success *out gets a new reference (caller
 * json_decref's it). On failure returns ACCEL_EPARSE and *cause gets an
 * allocated message with the line ("line 3: mapping values are not allowed
 * here"), which the caller frees.
 */
enum accel_err yamljson_parse(const char *buf, size_t len, json_t **out,
                              char **cause);

/*
 * Parse JSON or YAML: text whose first non-blank byte is '{' or '[' is JSON,
 * anything else YAML. Same contract as yamljson_parse.
 */
enum accel_err yamljson_parse_any(const char *buf, size_t len, json_t **out,
                                  char **cause);

#endif /* ACCEL_COMMON_YAMLJSON_H */
