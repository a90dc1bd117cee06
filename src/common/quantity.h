/* SPDX-License-Identifier: MIT */
/*
 * quantity.h: Kubernetes quantities ("8Gi", "512Mi", "1.5G", "500m", "2")
 * and plain numbers, parsed with overflow checks. Pure, no allocation.
 */
#ifndef ACCEL_COMMON_QUANTITY_H
#define ACCEL_COMMON_QUANTITY_H

#include <stdbool.h>
#include <stdint.h>

#include "accel/accel.h"

/* Largest quantity accepted: 2^62 (keeps sums of a few thousand safe). */
#define QUANTITY_MAX (UINT64_C(1) << 62)

/*
 * Parse a byte quantity into *out (set only on success). Fractions round up
 * to a whole byte. Returns ACCEL_EPARSE for bad syntax ("12Qi", "-1", ""),
 * ACCEL_ERANGE above QUANTITY_MAX.
 */
enum accel_err quantity_parse_bytes(const char *s, uint64_t *out);

/*
 * Parse a CPU quantity ("2", "500m", "1.5") into millicores in *out (set only
 * on success). Same errors as quantity_parse_bytes.
 */
enum accel_err quantity_parse_millicores(const char *s, uint64_t *out);

/*
 * Format bytes the way the CLI and messages show them: "8Gi", "512Mi",
 * "36 Gi"-style is not done here; this gives the shortest exact binary form
 * or "<n>" when none. Writes at most len bytes including the NUL.
 */
void quantity_format_bytes(uint64_t bytes, char *buf, size_t len);

/* bytes / GiB with two decimals, rounded half up ("34.79"). */
void quantity_format_gib(uint64_t bytes, char *buf, size_t len);

#endif /* ACCEL_COMMON_QUANTITY_H */
