/* SPDX-License-Identifier: MIT */
/*
 * peer.h: who is at the other end of a TCP connection that a process of
 * this machine opened to one of acceld's listeners: the uid that created
 * the peer's socket, which is the socket whose local end is the peer's
 * address and whose remote end is the listener's. Asked of the kernel
 * with one exact NETLINK_SOCK_DIAG query (its hash lookup), or, where
 * netlink is refused, found in /proc/net/tcp and tcp6 (every TCP socket
 * of acceld's network namespace with its uid). A peer on another machine
 * (or in another network namespace, behind a bridge) is found in neither.
 * Not for UNIX sockets (SO_PEERCRED answers those, broker.c).
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef ACCEL_DAEMON_NODE_PROC_PEER_H
#define ACCEL_DAEMON_NODE_PROC_PEER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "accel/accel.h"

/*
 * The uid owning the socket of peer (an AF_INET or AF_INET6 address, an
 * IPv4 one also found as a dual-stack socket's ::ffff:a.b.c.d) connected
 * to local (the accepted socket's getsockname, same family). proc_root:
 * "/proc" or a test's, for the tables. ACCEL_OK with *out_uid (set only on
 * success); ACCEL_ENOTFOUND when no socket of this namespace is that peer
 * (a remote one); ACCEL_EIO when neither netlink nor the tables answer.
 */
enum accel_err peer_tcp_uid(const char *proc_root, const struct sockaddr *peer,
                            const struct sockaddr *local, uint32_t *out_uid);

/*
 * One table's text (the contents of /proc/net/tcp, v6 false, or tcp6):
 * the uid of the socket whose local address is addr (4 words as in
 * struct in6_addr, or the first word alone for IPv4, in network order)
 * and port, and whose remote port is rport. false when none is.
 */
bool peer_table_find(const char *table, bool v6, const uint32_t addr[4],
                     uint16_t port, uint16_t rport, uint32_t *out_uid);

#endif /* ACCEL_DAEMON_NODE_PROC_PEER_H */
