/* SPDX-License-Identifier: MIT */
/*
 * util.h: allocation helpers for the programs (acceld, accelctl). They log
 * and abort on exhaustion (STYLE 9); the shim never uses them. Also the
 * clocks, a bounded string copy and a small file's read.
 */
#ifndef ACCEL_COMMON_UTIL_H
#define ACCEL_COMMON_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
/* printf into a new string; the caller frees it. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xvasprintf(const char *fmt, va_list ap);
/* Monotonic clock in nanoseconds. */
uint64_t util_now_ns(void);
/* The time ms from now on clock clk (CLOCK_REALTIME for
 * pthread_cond_timedwait, CLOCK_MONOTONIC for a condition set to it). */
struct timespec util_deadline(clockid_t clk, unsigned ms);
/* Wall clock in milliseconds since the epoch. */
int64_t util_wall_ms(void);
/* Copy at most len-1 bytes of src into dst and terminate it. */
void util_strlcpy(char *dst, const char *src, size_t len);
/* Read at most len-1 bytes of a small file (/proc, /sys, cgroup files) into
 * buf and terminate it; the bytes read, or -1 (errno set) when it cannot be
 * opened. A read error ends the read with what was read so far. */
ssize_t util_read_small(const char *path, char *buf, size_t len);
/* Write s to an existing file (a cgroup or sysfs file: never created) in
 * one write(), as a shell's redirection does (O_TRUNC, which the kernel's
 * files ignore and a test's fixture file obeys). 0, or -1 with errno. */
int util_write_small(const char *path, const char *s);

/* The length (1 or 2) of the terminal control character at s[i] of s
 * (len bytes): a C0 byte (below 0x20), DEL (0x7f), or a C1 character
 * (U+0080-U+009F, 0xc2 0x80-0x9f in UTF-8); 0 when s[i] begins none. */
size_t util_ctrl_len(const char *s, size_t len, size_t i);
/* The offset of s's first control character (util_ctrl_len), or -1. */
ssize_t util_ctrl_find(const char *s, size_t len);
/* s (len bytes) with each control character written as "\x1b" (C0, DEL)
 * or "\u009b" (C1), allocated (the caller frees it); NULL when s has
 * none. */
char *util_ctrl_escape(const char *s, size_t len);
/* The same for text shown as lines (an app's log): newlines and tabs
 * stay as they are, every other control character is escaped. */
char *util_ctrl_escape_text(const char *s, size_t len);

#endif /* ACCEL_COMMON_UTIL_H */
