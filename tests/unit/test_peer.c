/* SPDX-License-Identifier: MIT */
/*
 * test_peer.c: peer.c, the uid behind a local TCP peer: a table's lines
 * (IPv4, IPv6 and IPv4-mapped, a listening socket never taken for a
 * peer), and real connections of this process to a listener of its own,
 * over AF_INET and over an AF_INET6 socket to ::ffff:127.0.0.1, whose uid
 * is this process's (asked of netlink's sock_diag).
 */
#include "common/accel_setup.h"
#include "daemon/node/proc/peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

/* 127.0.0.1:40000 -> 127.0.0.1:8000, uid 65537; the listener on 8000,
 * uid 0; ::ffff:127.0.0.1:40001 -> :8000, uid 65538 */
static const char TABLE4[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when "
    "retrnsmt   uid  timeout inode\n"
    "   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 "
    "00000000     0        0 100 1 0000000000000000 100 0 0 10 0\n"
    "   1: 0100007F:9C40 0100007F:1F40 01 00000000:00000000 00:00000000 "
    "00000000 65537        0 101 1 0000000000000000 20 4 30 10 -1\n";
static const char TABLE6[] =
    "  sl  local_address                         remote_address           "
    "              st tx_queue rx_queue tr tm->when retrnsmt   uid  "
    "timeout inode\n"
    "   0: 0000000000000000FFFF00000100007F:9C41 "
    "0000000000000000FFFF00000100007F:1F40 01 00000000:00000000 "
    "00:00000000 00000000 65538        0 102 1 0000000000000000 20 4 30 "
    "10 -1\n";

TEST(peer_table_lines)
{
    uint32_t v4[4] = {0}, v6[4] = {0}, uid = 1;
    struct in6_addr m = {0};

    inet_pton(AF_INET, "127.0.0.1", &v4[0]);
    ASSERT(peer_table_find(TABLE4, false, v4, 40000, 8000, &uid));
    ASSERT_EQ(uid, 65537);
    /* another port, another listener's port, the listener itself */
    ASSERT(!peer_table_find(TABLE4, false, v4, 40001, 8000, &uid));
    ASSERT(!peer_table_find(TABLE4, false, v4, 40000, 8001, &uid));
    ASSERT(!peer_table_find(TABLE4, false, v4, 8000, 0, &uid));
    inet_pton(AF_INET6, "::ffff:127.0.0.1", &m);
    memcpy(v6, &m, 16);
    ASSERT(peer_table_find(TABLE6, true, v6, 40001, 8000, &uid));
    ASSERT_EQ(uid, 65538);
    ASSERT(!peer_table_find(TABLE6, false, v4, 40001, 8000, &uid));
    ASSERT(!peer_table_find("garbage\n\n", false, v4, 40000, 8000, &uid));
}

/* A client of family fam connected to a listener of 127.0.0.1: the
 * uid peer_tcp_uid finds for what accept saw. */
static void connect_and_find(int fam)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    struct sockaddr_storage peer;
    socklen_t len = sizeof sa;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int c = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0), s;
    uint32_t uid = 12345;

    ASSERT(ls >= 0 && c >= 0);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ASSERT_EQ(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    ASSERT_EQ(listen(ls, 4), 0);
    ASSERT_EQ(getsockname(ls, (struct sockaddr *)&sa, &len), 0);
    if (fam == AF_INET) {
        ASSERT_EQ(connect(c, (struct sockaddr *)&sa, sizeof sa), 0);
    } else {
        struct sockaddr_in6 s6 = {.sin6_family = AF_INET6,
                                  .sin6_port = sa.sin_port};
        inet_pton(AF_INET6, "::ffff:127.0.0.1", &s6.sin6_addr);
        ASSERT_EQ(connect(c, (struct sockaddr *)&s6, sizeof s6), 0);
    }
    len = sizeof peer;
    s = accept(ls, (struct sockaddr *)&peer, &len);
    ASSERT(s >= 0);
    ASSERT_EQ(peer_tcp_uid("/proc", (struct sockaddr *)&peer,
                           (struct sockaddr *)&sa, &uid), ACCEL_OK);
    ASSERT_EQ(uid, geteuid());
    /* a port nobody connects from is no peer of this machine */
    ((struct sockaddr_in *)&peer)->sin_port = htons(1);
    ASSERT_EQ(peer_tcp_uid("/proc", (struct sockaddr *)&peer,
                           (struct sockaddr *)&sa, &uid), ACCEL_ENOTFOUND);
    close(s);
    close(c);
    close(ls);
}

TEST(peer_tcp_uid_over_ipv4)
{
    connect_and_find(AF_INET);
}

TEST(peer_tcp_uid_over_ipv4_mapped_ipv6)
{
    connect_and_find(AF_INET6);
}

#define TESTS(XX)                                                              \
    XX(peer_table_lines)                                                       \
    XX(peer_tcp_uid_over_ipv4)                                                 \
    XX(peer_tcp_uid_over_ipv4_mapped_ipv6)

TEST_MAIN(TESTS)
