/* SPDX-License-Identifier: MIT */
/*
 * base64.h: the standard base64 alphabet (RFC 4648 section 4, "+/" and "="
 * padding), as etcd's JSON gateway writes keys and values. Not the URL-safe
 * alphabet, and no line breaks: neither is used by anything accel talks to.
 */
#ifndef ACCEL_COMMON_BASE64_H
#define ACCEL_COMMON_BASE64_H

#include <stdbool.h>
#include <stddef.h>

/* The encoded length of n bytes, without the terminating NUL. */
size_t base64_encoded_len(size_t n);

/* Encode n bytes of src into a new NUL-terminated string (xmalloc: aborts
 * on exhaustion); the caller frees it. src may be NULL when n is 0. */
char *base64_encode(const void *src, size_t n);

/*
 * Decode len characters of src (padded; no whitespace). On success *out
 * gets a new buffer of the decoded bytes followed by a NUL that is not
 * counted (so text comes out as a C string), *out_len their count, and it
 * returns true. Returns false, setting neither, when src is not canonical
 * base64 (a length not a multiple of 4, a foreign character, padding
 * anywhere but at the end, or non-zero bits under the padding).
 */
bool base64_decode(const char *src, size_t len, char **out, size_t *out_len);

#endif /* ACCEL_COMMON_BASE64_H */
