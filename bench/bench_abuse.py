#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The HTTP server under abuse (SPEC 5.6), measured: N slow-loris
connections (a header byte every 3 s) and the latency of /healthz and an
authenticated GET /api/apps meanwhile; 520 long-polls whose clients close
after 1 s and how long their connections take to be freed; the daemon CPU
that 300 members' long-polls cost over 20 events none of them may see.

    python3 bench/bench_abuse.py [--connections 2000]

Uses the harness of tests/integration (ACCEL_BUILD_DIR as there). Loopback
only; about 30 s."""
import argparse
import os
import resource
import socket
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from accel_harness import Acceld  # noqa: E402
from accel_harness import cpu_seconds as cpu, open_fds as fds  # noqa: E402


def timed(d, path, token=None):
    t = time.monotonic()
    st, _ = d.http("GET", path, token=token, timeout=10)
    assert st == 200, (path, st)
    return time.monotonic() - t


def slow_loris(d, n):
    socks = []
    t0 = time.monotonic()
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall(b"G")
        socks.append(s)
    print("%d slow connections open in %.2f s" % (n, time.monotonic() - t0))
    lat = []
    for i in range(100):
        if i % 25 == 0:
            for s in socks:
                try:
                    s.send(b"E")
                except OSError:
                    pass
        lat.append(timed(d, "/healthz", token=""))
        lat.append(timed(d, "/api/apps"))
    lat.sort()
    print("  200 requests meanwhile: median %.2f ms, p99 %.2f ms, max %.2f ms"
          % (1000 * statistics.median(lat), 1000 * lat[197],
             1000 * lat[-1]))
    for s in socks:
        s.close()


def wait_until(cond, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end and not cond():
        time.sleep(0.01)
    return cond()


def closed_polls(d):
    pid = d.proc.pid
    # the slow connections closed before are gone first
    assert wait_until(lambda: fds(pid) < 100, 30), fds(pid)
    base = fds(pid)
    req = ("GET /api/events?wait=60&since=999999 HTTP/1.1\r\nHost: x\r\n"
           "Authorization: Bearer %s\r\n\r\n" % d.token).encode()
    socks = [socket.create_connection(("127.0.0.1", d.port))
             for _ in range(520)]
    for s in socks:
        s.sendall(req)
    assert wait_until(lambda: fds(pid) >= base + 450, 30), fds(pid)
    time.sleep(1)
    t0 = time.monotonic()
    for s in socks:
        s.close()
    freed = wait_until(lambda: fds(pid) <= base + 10, 60)
    print("520 closed long-polls %s in %.0f ms" %
          ("freed" if freed else "NOT all freed",
           1000 * (time.monotonic() - t0)))


def member_waiters(d):
    st, b = d.http("POST", "/api/users", {"name": "bench"})
    tok = b["data"]["token"]
    for i in range(1000):
        d.http("PUT", "/api/nodes/macmini", {"enabled": i % 2 == 1})
    req = ("GET /api/events?wait=60&since=0 HTTP/1.1\r\nHost: x\r\n"
           "Authorization: Bearer %s\r\n\r\n" % tok).encode()
    socks = [socket.create_connection(("127.0.0.1", d.port))
             for _ in range(300)]
    for s in socks:
        s.sendall(req)
    time.sleep(2)
    c0, t0 = cpu(d.proc.pid), time.monotonic()
    for i in range(20):
        d.http("PUT", "/api/nodes/macmini", {"enabled": i % 2 == 1})
    print("300 member long-polls behind 1,000 events they may not see, 20 "
          "more such events: %.2f s of daemon CPU in %.2f s" %
          (cpu(d.proc.pid) - c0, time.monotonic() - t0))
    for s in socks:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=2000)
    n = ap.parse_args().connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 1000), hard))
    with Acceld() as d:
        slow_loris(d, n)
        closed_polls(d)
        member_waiters(d)


if __name__ == "__main__":
    main()
