/* SPDX-License-Identifier: MIT */
/*
 * daemon.h: the wiring of one acceld (daemon.c): options, the store opened
 * and loaded into the state, the node's devices found, the threads and the
 * HTTP server started, the hooks of the state layer set. The types it
 * builds are the state layer's (state.h).
 */
#ifndef ACCEL_DAEMON_DAEMON_H
#define ACCEL_DAEMON_DAEMON_H


/* Parse options, open the store, build the state, listen, and serve until
 * SIGINT or SIGTERM. Returns 0 or an exit code, with the reason printed. */
int daemon_main(int argc, char **argv);

#endif /* ACCEL_DAEMON_DAEMON_H */
