/* SPDX-License-Identifier: MIT */
/*
 * auth.h: tokens and users (SPEC 3). Tokens are 32 random bytes in hex;
 * only their SHA-256 is stored. The admin token is written at first start
 * to <data-dir>/admin.token (mode 0600).
 */
#ifndef ACCEL_DAEMON_API_AUTH_H
#define ACCEL_DAEMON_API_AUTH_H

#include <stdbool.h>

#include "accel/accel.h"
#include "daemon/state.h"

/* A new random token (64 hex chars + NUL) into out[65]. */
enum accel_err auth_token_new(char out[65]);
/* Hex SHA-256 of a token into out[65]. */
void auth_hash(const char *token, char out[65]);
/*
 * The user whose token is token, checked against d->users' hashes in
 * constant time: true with *out set (set only on success), else false.
 * Takes d->lock: the caller holds no lock.
 */
bool auth_find(struct accel_daemon *d, const char *token,
               struct auth_user *out);
/* Can this user act on an app owned by owner? (admins: all; members: own) */
bool auth_may_act(const struct auth_user *u, const char *owner);

#endif /* ACCEL_DAEMON_API_AUTH_H */
