/* SPDX-License-Identifier: MIT */
/*
 * peer.c: the uid behind a local TCP peer, from /proc/net/tcp{,6} (see
 * peer.h). A table's addresses are the kernel's 32-bit words printed with
 * %08X as the machine holds them, so a word parsed back from its hex
 * equals the word of struct in_addr / in6_addr on any byte order.
 */
#include "common/accel_setup.h"
#include "daemon/node/proc/peer.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

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

/* One address of a connection, as the kernel's tables hold it: 4 words
 * (IPv6, or IPv4 in the first) and the port. */
struct end {
    int family;
    uint32_t addr[4];
    uint16_t port;
};

static bool end_of(const struct sockaddr *sa, struct end *e)
{
    memset(e, 0, sizeof(*e));
    e->family = sa->sa_family;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
        memcpy(&e->addr[0], &sin->sin_addr, 4);
        e->port = ntohs(sin->sin_port);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        memcpy(e->addr, &s6->sin6_addr, 16);
        e->port = ntohs(s6->sin6_port);
        return true;
    }
    return false;
}

/*
 * The uid of the TCP socket whose local end is src and remote end dst
 * (one family), by one exact NETLINK_SOCK_DIAG query (the kernel's hash
 * lookup, whatever the number of sockets): 1 with *out_uid, 0 when there
 * is none, -1 when netlink does not answer.
 */
static int diag_lookup(const struct end *src, const struct end *dst,
                       uint32_t *out_uid)
{
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 r;
    } req;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    union {
        struct nlmsghdr h;
        char buf[4096];
    } ans;
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    struct timeval tv = {.tv_sec = 1};
    ssize_t n;
    int found = -1;

    if (fd < 0)
        return -1;
    memset(&req, 0, sizeof req);
    req.nlh.nlmsg_len = sizeof req;
    req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.nlh.nlmsg_flags = NLM_F_REQUEST;
    req.r.sdiag_family = (uint8_t)src->family;
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_states = ~0u;
    req.r.id.idiag_sport = htons(src->port);
    req.r.id.idiag_dport = htons(dst->port);
    memcpy(req.r.id.idiag_src, src->addr, sizeof src->addr);
    memcpy(req.r.id.idiag_dst, dst->addr, sizeof dst->addr);
    req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (sendto(fd, &req, sizeof req, 0, (struct sockaddr *)&kernel,
               sizeof kernel) != (ssize_t)sizeof req)
        goto out;
    n = recv(fd, ans.buf, sizeof ans.buf, 0);
    if (n < (ssize_t)sizeof(struct nlmsghdr) || !NLMSG_OK(&ans.h, (size_t)n))
        goto out;
    if (ans.h.nlmsg_type == NLMSG_ERROR) {
        const struct nlmsgerr *e = NLMSG_DATA(&ans.h);
        found = e->error == -ENOENT ? 0 : -1;
    } else if (ans.h.nlmsg_type == SOCK_DIAG_BY_FAMILY &&
               ans.h.nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
        const struct inet_diag_msg *m = NLMSG_DATA(&ans.h);
        *out_uid = m->idiag_uid;
        found = 1;
    }
out:
    close(fd);
    return found;
}

/* The same question of the text tables: 1, 0, or -1 when neither can be
 * read. */
static int table_lookup(const char *proc_root, const struct end *src,
                        const struct end *dst, uint32_t *out_uid)
{
    uint32_t mapped[4] = {0, 0, 0, 0};
    int r4 = -1, r6;

    if (src->family == AF_INET) {
        r4 = search(proc_root, "tcp", false, src->addr, src->port, dst->port,
                    out_uid);
        if (r4 == 1)
            return 1;
        memcpy(&mapped[3], &src->addr[0], 4); /* ::ffff:a.b.c.d */
        ((unsigned char *)mapped)[10] = ((unsigned char *)mapped)[11] = 0xff;
        r6 = search(proc_root, "tcp6", true, mapped, src->port, dst->port,
                    out_uid);
    } else {
        r6 = search(proc_root, "tcp6", true, src->addr, src->port, dst->port,
                    out_uid);
    }
    return r6 == 1 ? 1 : r4 < 0 && r6 < 0 ? -1 : 0;
}

enum accel_err peer_tcp_uid(const char *proc_root, const struct sockaddr *peer,
                            const struct sockaddr *local, uint32_t *out_uid)
{
    struct end src, dst;
    int r;

    if (!end_of(peer, &src) || !end_of(local, &dst) ||
        src.family != dst.family)
        return ACCEL_ENOTFOUND;
    r = diag_lookup(&src, &dst, out_uid);
    if (r == 0 && src.family == AF_INET) {
        /* a dual-stack client socket that connected to ::ffff:a.b.c.d */
        struct end s6 = src, d6 = dst;
        s6.family = d6.family = AF_INET6;
        memset(s6.addr, 0, sizeof s6.addr);
        memset(d6.addr, 0, sizeof d6.addr);
        memcpy(&s6.addr[3], &src.addr[0], 4);
        memcpy(&d6.addr[3], &dst.addr[0], 4);
        ((unsigned char *)s6.addr)[10] = ((unsigned char *)s6.addr)[11] = 0xff;
        ((unsigned char *)d6.addr)[10] = ((unsigned char *)d6.addr)[11] = 0xff;
        r = diag_lookup(&s6, &d6, out_uid);
    }
    if (r < 0) /* no netlink (a filter): the tables, line by line */
        r = table_lookup(proc_root, &src, &dst, out_uid);
    return r == 1 ? ACCEL_OK : r == 0 ? ACCEL_ENOTFOUND : ACCEL_EIO;
}
