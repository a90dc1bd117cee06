/* SPDX-License-Identifier: MIT */
/*
 * prompt.h: questions to the person at the terminal. Questions go to stderr
 * (stdout stays for output, also with -o json), answers come from stdin, one
 * line each. Callers ask only when cli_ctx.interactive says a person is there.
 */
#ifndef ACCEL_CLI_PROMPT_H
#define ACCEL_CLI_PROMPT_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Print question and read one line into buf (len bytes, newline and
 * surrounding blanks removed). Returns false at end of input.
 */
bool prompt_line(const char *question, char *buf, size_t len);

/* Ask "question [y/N]: "; true only for y or yes. */
bool prompt_confirm(const char *question);

/*
 * Ask for a number 1..n (the caller listed the choices); re-asks on a bad
 * answer up to three times. Returns the 0-based choice, or -1 (no answer).
 */
int prompt_choose(const char *question, int n);

#endif /* ACCEL_CLI_PROMPT_H */
