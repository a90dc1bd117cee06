/* SPDX-License-Identifier: MIT */
/*
 * net_probe.c: a TCP listener and a connector for the container tests
 * (issue 44 hole 3), small enough to copy into the test image.
 *
 *   net_probe listen PORT       accept on 0.0.0.0:PORT and [::]:PORT for
 *                               ever, writing "hello\n" to each peer;
 *                               prints "listening" once bound
 *   net_probe connect ADDR PORT connect (2 s at most), read a line: prints
 *                               "connected: <line>" and exits 0, or
 *                               "refused: <why>" and exits 1
 *   net_probe addrs             the non-loopback IPv4 and IPv6 addresses
 *                               of this network namespace, one a line
 */
#include "common/accel_setup.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int do_listen(const char *port)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0), off = 0, on = 1;
    struct sockaddr_in6 sa = { .sin6_family = AF_INET6,
                               .sin6_addr = IN6ADDR_ANY_INIT };

    if (fd < 0) { /* no IPv6 in this namespace: IPv4 alone */
        struct sockaddr_in s4 = { .sin_family = AF_INET,
                                  .sin_port = htons((uint16_t)strtoul(port, NULL, 10)) };
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on,
                                 sizeof on) != 0 ||
            bind(fd, (struct sockaddr *)&s4, sizeof s4) != 0) {
            perror("bind");
            return 1;
        }
    } else {
        sa.sin6_port = htons((uint16_t)strtoul(port, NULL, 10));
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            perror("bind");
            return 1;
        }
    }
    if (listen(fd, 16) != 0) {
        perror("listen");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    printf("listening\n");
    fflush(stdout);
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            continue;
        if (write(c, "hello\n", 6) != 6) {
            /* the peer went: nothing to say */
        }
        close(c);
    }
}

static int do_connect(const char *addr, const char *port)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICHOST }, *ai = NULL;
    char line[64];
    ssize_t n;
    int fd, err = 0, rc;
    socklen_t el = sizeof err;
    struct pollfd p;

    if ((rc = getaddrinfo(addr, port, &hints, &ai)) != 0) {
        printf("refused: %s\n", gai_strerror(rc));
        return 1;
    }
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0 || (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 &&
                   errno != EINPROGRESS)) {
        printf("refused: %s\n", strerror(errno));
        return 1;
    }
    freeaddrinfo(ai);
    p = (struct pollfd){ fd, POLLOUT, 0 };
    if (poll(&p, 1, 2000) != 1) {
        printf("refused: no answer within 2 s\n");
        return 1;
    }
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) {
        printf("refused: %s\n", strerror(err));
        return 1;
    }
    p = (struct pollfd){ fd, POLLIN, 0 };
    if (poll(&p, 1, 2000) != 1 || (n = read(fd, line, sizeof line - 1)) <= 0) {
        printf("refused: connected, but nothing read within 2 s\n");
        return 1;
    }
    line[n] = '\0';
    line[strcspn(line, "\n")] = '\0';
    printf("connected: %s\n", line);
    return 0;
}

static int do_addrs(void)
{
    struct ifaddrs *ifa = NULL;

    if (getifaddrs(&ifa) != 0)
        return 1;
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
        char buf[INET6_ADDRSTRLEN];
        const void *a;
        if (i->ifa_addr == NULL)
            continue;
        if (i->ifa_addr->sa_family == AF_INET)
            a = &((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        else if (i->ifa_addr->sa_family == AF_INET6)
            a = &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
        else
            continue;
        inet_ntop(i->ifa_addr->sa_family, a, buf, sizeof buf);
        if (strcmp(buf, "127.0.0.1") != 0 && strcmp(buf, "::1") != 0 &&
            strncmp(buf, "fe80:", 5) != 0)
            printf("%s\n", buf);
    }
    freeifaddrs(ifa);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "listen") == 0)
        return do_listen(argv[2]);
    if (argc == 4 && strcmp(argv[1], "connect") == 0)
        return do_connect(argv[2], argv[3]);
    if (argc == 2 && strcmp(argv[1], "addrs") == 0)
        return do_addrs();
    fprintf(stderr, "usage: net_probe listen PORT | connect ADDR PORT | "
                    "addrs\n");
    return 2;
}
