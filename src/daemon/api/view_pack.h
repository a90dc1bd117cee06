/* SPDX-License-Identifier: MIT */
/*
 * view_pack.h: a compact form of the cached device texts (view.c). Most of
 * a device's JSON is the same key runs in every device and binding
 * ("\",\"requiredMemory\":" and so on); a packed text stores each such run
 * as one byte (and each stretch between runs behind a one-byte length),
 * which takes the cache to about a third (12.85 MB to 4.0 MB
 * at 1,000 nodes x 8 GPUs x 20,000 bindings; SPEC 11: <= 50 MiB resident).
 * Unpacking is two memcpy per run. Lossless for any bytes.
 */
#ifndef ACCEL_DAEMON_API_VIEW_PACK_H
#define ACCEL_DAEMON_API_VIEW_PACK_H

#include <stddef.h>

/* s[0..n) packed into out, which holds view_pack_bound(n) bytes; returns
 * the packed length. */
size_t view_pack(const char *s, size_t n, char *out);
/* The most bytes view_pack may write for n bytes of text. */
size_t view_pack_bound(size_t n);
/* p[0..n), packed by view_pack, unpacked into out, which holds cap bytes,
 * at least the unpacked length; returns that length. The bytes of out
 * past it, up to cap, may be overwritten (the more room, the faster). */
size_t view_unpack(const char *p, size_t n, char *out, size_t cap);

#endif /* ACCEL_DAEMON_API_VIEW_PACK_H */
