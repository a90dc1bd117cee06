/* SPDX-License-Identifier: MIT */
/*
 * hostinfo.h: what this machine says about itself, for the node fields of
 * HAMi's NodeReply (architecture, kernel, OS image) and the cluster's
 * registration: uname(2) and os-release(5).
 */
#ifndef ACCEL_DAEMON_NODE_DEVICES_HOSTINFO_H
#define ACCEL_DAEMON_NODE_DEVICES_HOSTINFO_H

#include <jansson.h>

/*
 * {"arch": uname machine ("x86_64"), "kernel": uname release, "os": the
 * lower-cased uname sysname ("linux"), "osImage": os-release's PRETTY_NAME
 * ("Debian GNU/Linux 12 (bookworm)"), "ip": the host of listen when it
 * names one address (not a wildcard, not a name)}; "" for what is not
 * known. os_release: the file to read (NULL: /etc/os-release, then
 * /usr/lib/os-release). A new object.
 */
json_t *hostinfo_json(const char *listen, const char *os_release);

#endif /* ACCEL_DAEMON_NODE_DEVICES_HOSTINFO_H */
