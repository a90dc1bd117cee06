/* SPDX-License-Identifier: MIT */
/*
 * peer.c: the uid behind a local TCP peer, from /proc/net/tcp{,6} (see
 * peer.h). A table's addresses are the kernel's 32-bit words printed with
 * %08X as the machine holds them, so a word parsed back from its hex
 * equals the word of struct in_addr / in6_addr on any byte order.
 */
#include "common/accel_setup.h"
#include "daemon/node/peer.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define TCP_LISTEN 0x0A /* the st column of a listening socket */

/* 8 hex digits as one word; false if they are not. */
static bool hex_word(const char *s, uint32_t *out)
{
    char buf[9], *end;

    memcpy(buf, s, 8);
    buf[8] = '\0';
    *out = (uint32_t)strtoul(buf, &end, 16);
    return end == buf + 8;
}

/* One line of a table: its uid when it is the socket asked for. */
static bool line_match(const char *line, bool v6, const uint32_t addr[4],
                       uint16_t port, uint16_t rport, uint32_t *out_uid)
{
    char local[40], rem[40];
    unsigned lport, remport, st, uid;
    size_t words = v6 ? 4 : 1;

    if (sscanf(line, " %*[0-9]: %39[0-9A-Fa-f]:%x %39[0-9A-Fa-f]:%x %x "
                     "%*s %*s %*s %u", local, &lport, rem, &remport, &st,
               &uid) != 6)
        return false;
    if (strlen(local) != words * 8 || lport != port || remport != rport ||
        st == TCP_LISTEN)
        return false;
    for (size_t i = 0; i < words; i++) {
        uint32_t w;
        if (!hex_word(local + 8 * i, &w) || w != addr[i])
            return false;
    }
    *out_uid = uid;
    return true;
}

bool peer_table_find(const char *table, bool v6, const uint32_t addr[4],
                     uint16_t port, uint16_t rport, uint32_t *out_uid)
{
    for (const char *l = table; l != NULL && *l != '\0';) {
        const char *nl = strchr(l, '\n');
        size_t n = nl ? (size_t)(nl - l) : strlen(l);
        char line[256];

        if (n < sizeof line) {
            memcpy(line, l, n);
            line[n] = '\0';
            if (line_match(line, v6, addr, port, rport, out_uid))
                return true;
        }
        l = nl ? nl + 1 : NULL;
    }
    return false;
}

/* Look through <proc_root>/net/<file>; -1 when it cannot be read. */
static int search(const char *proc_root, const char *file, bool v6,
                  const uint32_t addr[4], uint16_t port, uint16_t rport,
                  uint32_t *out_uid)
{
    char *path = xasprintf("%s/net/%s", proc_root, file);
    FILE *f = fopen(path, "re");
    char *line = NULL;
    size_t cap = 0;
    int found = 0;

    free(path);
    if (f == NULL)
        return -1;
    while (!found && getline(&line, &cap, f) > 0)
        found = line_match(line, v6, addr, port, rport, out_uid);
    free(line);
    fclose(f);
    return found;
}

enum accel_err peer_tcp_uid(const char *proc_root, const struct sockaddr *peer,
                            uint16_t local_port, uint32_t *out_uid)
{
    uint32_t v4[4] = {0}, v6[4];
    uint16_t port;
    int r4 = -1, r6;

    if (peer->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)peer;
        struct in6_addr mapped = {0};
        memcpy(&v4[0], &sin->sin_addr, 4);
        mapped.s6_addr[10] = mapped.s6_addr[11] = 0xff;
        memcpy(&mapped.s6_addr[12], &sin->sin_addr, 4);
        memcpy(v6, &mapped, 16);
        port = ntohs(sin->sin_port);
        r4 = search(proc_root, "tcp", false, v4, port, local_port, out_uid);
        if (r4 == 1)
            return ACCEL_OK;
    } else if (peer->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)peer;
        memcpy(v6, &s6->sin6_addr, 16);
        port = ntohs(s6->sin6_port);
    } else {
        return ACCEL_ENOTFOUND;
    }
    r6 = search(proc_root, "tcp6", true, v6, port, local_port, out_uid);
    if (r6 == 1)
        return ACCEL_OK;
    return r4 < 0 && r6 < 0 ? ACCEL_EIO : ACCEL_ENOTFOUND;
}
