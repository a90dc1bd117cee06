/* SPDX-License-Identifier: MIT */
/*
 * strmap.h: an open-addressing hash map from strings to a uint32_t value,
 * for O(1) lookups of nodes, devices and apps by name. Keys are copied.
 * Not thread-safe: the owner locks.
 */
#ifndef ACCEL_COMMON_STRMAP_H
#define ACCEL_COMMON_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct strmap;

struct strmap *strmap_new(void);
void strmap_free(struct strmap *m); /* accepts NULL */
/* Insert or replace. */
void strmap_put(struct strmap *m, const char *key, uint32_t value);
/* true and *out set when found. */
bool strmap_get(const struct strmap *m, const char *key, uint32_t *out);
/* true when the key was there. */
bool strmap_del(struct strmap *m, const char *key);
size_t strmap_count(const struct strmap *m);

#endif /* ACCEL_COMMON_STRMAP_H */
