/* SPDX-License-Identifier: MIT */
/* auth.c: bearer tokens checked against SHA-256 hashes, in constant time. */
#include "common/accel_setup.h"
#include "daemon/api/auth.h"

#include <errno.h>
#include <nettle/sha2.h>
#include <string.h>
#include <sys/random.h>

#include "common/util.h"

static void to_hex(const unsigned char *in, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[in[i] >> 4];
        out[2 * i + 1] = hx[in[i] & 15];
    }
    out[2 * n] = '\0';
}

enum accel_err auth_token_new(char out[65])
{
    unsigned char b[32];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return ACCEL_ESYS;
        }
        got += (size_t)n;
    }
    to_hex(b, sizeof b, out);
    return ACCEL_OK;
}

void auth_hash(const char *token, char out[65])
{
    struct sha256_ctx ctx;
    unsigned char dig[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(token), (const uint8_t *)token);
    sha256_digest(&ctx, sizeof dig, dig);
    to_hex(dig, sizeof dig, out);
}

static bool ct_equal(const char *a, const char *b, size_t n)
{
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

bool auth_find(struct accel_daemon *d, const char *token,
               struct auth_user *out)
{
    char hash[65];
    bool ok = false;

    auth_hash(token, hash);
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->nusers; i++) {
        if (ct_equal(d->users[i].hash, hash, 64)) {
            util_strlcpy(out->name, d->users[i].name, sizeof out->name);
            out->admin = d->users[i].admin;
            ok = true;
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return ok;
}

bool auth_may_act(const struct auth_user *u, const char *owner)
{
    return u->admin || strcmp(u->name, owner) == 0;
}
