/* SPDX-License-Identifier: MIT */
/*
 * peer.h: who is at the other end of a TCP connection that a process of
 * this machine opened to one of acceld's listeners. The kernel lists every
 * TCP socket of acceld's network namespace in /proc/net/tcp and
 * /proc/net/tcp6 with the uid that created it; the peer's socket is the
 * one whose local address is the peer's address and whose remote port is
 * the listener's. A peer on another machine (or in another network
 * namespace, behind a bridge) is in neither table. Not for UNIX sockets
 * (SO_PEERCRED answers those, broker.c).
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef ACCEL_DAEMON_NODE_PEER_H
#define ACCEL_DAEMON_NODE_PEER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "accel/accel.h"

/*
 * The uid owning the socket of peer (an AF_INET or AF_INET6 address, an
 * IPv4 one also found as ::ffff:a.b.c.d in tcp6) connected to local_port.
 * proc_root: "/proc" or a test's copy. ACCEL_OK with *out_uid (set only on
 * success); ACCEL_ENOTFOUND when no socket of this namespace is that peer
 * (a remote one), ACCEL_EIO when neither table can be read.
 */
enum accel_err peer_tcp_uid(const char *proc_root, const struct sockaddr *peer,
                            uint16_t local_port, uint32_t *out_uid);

/*
 * One table's text (the contents of /proc/net/tcp, v6 false, or tcp6):
 * the uid of the socket whose local address is addr (4 words as in
 * struct in6_addr, or the first word alone for IPv4, in network order)
 * and port, and whose remote port is rport. false when none is.
 */
bool peer_table_find(const char *table, bool v6, const uint32_t addr[4],
                     uint16_t port, uint16_t rport, uint32_t *out_uid);

#endif /* ACCEL_DAEMON_NODE_PEER_H */
