#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The cluster's bars (SPEC 10, 11) on one machine: three etcd members on
loopback and three acceld agents (tests/cluster/cluster_harness.py), in one
run:

1. durable binds per second through the API: installs with an explicit
   binding (2 Gi of a MemorySlice card), sent by bench_http (C, libcurl)
   over the three API servers (request k of a client goes to server k % 3;
   each server binds its own user's apps to its own node's card, so the
   servers never race for one guard), with one sequential client and with
   CLIENTS concurrent ones; next to the bare guarded etcd transaction loop
   (etcd_txn_bench, same client library, same members, same thread count),
   the two interleaved, and the ratio (bar: at least 0.5); also the bare
   loop with a bind's shape (6 puts, ~900 bytes), and the CPU each op cost
   the etcd members, the agents and the client, to show where a bind's
   time goes;
2. watch latency: an install acknowledged by node A until node B's API
   shows its event (a long-poll GET /api/events?app=NAME&wait= parked on B
   before the install), A and B rotating over the three nodes; p50/p99;
3. agent death: SIGKILL one agent, time until both other nodes'
   /api/compute-resources show it reachable:false (polled every 20 ms);
   the lease TTL is the harness's; bar TTL + 2 s. The agent is started
   again before the next kill, victims rotating.

usage: bench/bench_cluster.py BUILD_DIR [BINDS CLIENTS WATCH KILLS]
  BINDS binds per measurement (default 2000), CLIENTS concurrent clients
  (default 4; a comma-separated list, e.g. 4,16, measures each), WATCH
  watch rounds (default 300), KILLS kills (default 5).
Needs acceld, bench/bench_http and bench/etcd_txn_bench built in BUILD_DIR.
"""
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cluster"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import accel_harness  # noqa: E402
import cluster_harness  # noqa: E402

GiB = 1 << 30
NODES = ("n1", "n2", "n3")
# what one bind's transaction writes: app, allocation, two events and the
# two guarded counters, about 900 bytes of values in all
BIND_SHAPE = (6, 150)


def devices(node):
    """Two big MemorySlice cards per node: room for every bind of a run."""
    return [("%s-big%d" % (node, k), "8192Gi", "MemorySlice")
            for k in range(2)]


def big_inventory(node, devs=None, _small=cluster_harness.inventory):
    """The harness's inventory with room on the node for every app of a
    run (each asks 100m CPU, 256Mi RAM, 1Gi disk)."""
    return (_small(node, devs)
            .replace("memory: {total: 64Gi", "memory: {total: 64Ti")
            .replace('cpu: {total: "16"', 'cpu: {total: "100000"')
            .replace("disk: {total: 2Ti", "disk: {total: 64Pi"))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def cpu_s(pid):
    """CPU seconds (user + system) process pid has used so far."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            f = f.read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class Cpu:
    """CPU seconds spent by the etcd members, the agents and this script's
    children (the load generators) between start() and stop()."""

    def __init__(self, c):
        self.c = c

    def sample(self):
        members = [m.proc.pid for m in self.c.etcd.members if m.proc]
        agents = [a.proc.pid for a in self.c.agents.values() if a.proc]
        ch = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (sum(map(cpu_s, members)), sum(map(cpu_s, agents)),
                ch.ru_utime + ch.ru_stime, time.monotonic())

    def start(self):
        self.t0 = self.sample()

    def stop(self, ops):
        """'etcd X ms, agents Y ms, client Z ms per op; N cores busy'."""
        t1 = self.sample()
        d = [b - a for a, b in zip(self.t0, t1)]
        return ("CPU per op: etcd %.2f ms, agents %.2f ms, client %.2f ms; "
                "%.2f cores busy" % (d[0] * 1000 / ops, d[1] * 1000 / ops,
                                     d[2] * 1000 / ops,
                                     (d[0] + d[1] + d[2]) / d[3]))


def commit_stats(c):
    """(sum of seconds, count) of store commits over every agent."""
    tot = [0.0, 0.0]
    for a in c.agents.values():
        st, _ = a.http("GET", "/healthz", token="")
        req = urllib.request.Request(a.url + "/metrics", headers={
            "Authorization": "Bearer " + a.token})
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
        for k, name in enumerate(("sum", "count")):
            m = re.search(r"^accel_store_commit_duration_seconds_%s (\S+)" %
                          name, text, re.M)
            tot[k] += float(m.group(1)) if m else 0.0
    return tot


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("%s: rc %d\n%s%s" % (cmd[0], r.returncode,
                                               r.stdout, r.stderr))
    return r.stdout


def bare(build, endpoints, n, threads, shape=(), prefix=None):
    env = dict(os.environ)
    if prefix:
        env["ACCEL_BENCH_PREFIX"] = prefix
    r = subprocess.run([os.path.join(build, "bench", "etcd_txn_bench"),
                        endpoints, str(n // threads), str(threads)] +
                       [str(x) for x in shape], capture_output=True,
                       text=True, timeout=600, env=env)
    if r.returncode != 0:
        raise RuntimeError("etcd_txn_bench: rc %d\n%s%s" % (
            r.returncode, r.stdout, r.stderr))
    out = r.stdout
    rate = float(re.search(r"rate: ([\d.]+)", out).group(1))
    p50, p99 = map(float, re.search(r"p50 ([\d.]+) ms, p99 ([\d.]+)",
                                    out).groups())
    return rate, p50, p99


class Binder:
    """Durable binds through the three API servers, with bench_http."""

    def __init__(self, build, c):
        self.build = build
        self.c = c
        self.next = 1
        self.tokens = []
        for n in NODES:
            a = c.agent(n)
            st, b = a.http("POST", "/api/users",
                           {"name": "bench-" + n, "role": "member"})
            assert st == 200, (st, b)
            self.tokens.append(b["data"]["token"])
            st, b = a.http("PUT", "/api/users/bench-" + n,
                           {"maxApps": 100000})
            assert st == 200, (st, b)

    def binds(self, n, threads):
        agents = [self.c.agent(x) for x in NODES]
        out = run([os.path.join(self.build, "bench", "bench_http"),
                   ",".join(a.url for a in agents), ",".join(self.tokens),
                   "binds", str(n), str(threads), str(self.next),
                   ",".join("%s/%s-big0" % (x, x) for x in NODES)])
        self.next += n
        rate = float(re.search(r"= ([\d.]+)/s", out).group(1))
        p50, p99 = map(float, re.search(r"p50 ([\d.]+) ms p99 ([\d.]+)",
                                        out).groups())
        return rate, p50, p99


def bind_figures(build, c, n, clients):
    """clients: the concurrent client counts measured after the
    sequential one."""
    b = Binder(build, c)
    endpoints = c.etcd.endpoints()
    b.binds(60, 3)  # warm up: connections, first rows
    print("\n1. durable binds through the API vs the bare etcd loop "
          "(%d each, interleaved)" % n)
    rows = []
    cpu = Cpu(c)
    for threads in (1,) + clients:
        for rnd in range(2):
            cpu.start()
            e = bare(build, endpoints, n, threads)
            ecpu = cpu.stop(n)
            c0 = commit_stats(c)
            cpu.start()
            a = b.binds(n, threads)
            acpu = cpu.stop(n)
            c1 = commit_stats(c)
            cpu.start()
            s = bare(build, endpoints, n, threads, BIND_SHAPE)
            scpu = cpu.stop(n)
            # the same transaction as a bind: its puts, its guards, and
            # under the prefix the three agents watch (each reaches their
            # watches, as a bind's rows do): SPEC 11's "same guards"
            cpu.start()
            g = bare(build, endpoints, n, threads, BIND_SHAPE + (6,),
                     prefix="/accel/bench/")
            gcpu = cpu.stop(n)
            rows.append((threads, a, e, g))
            print("  %d client(s), round %d: API %.0f binds/s (p50 %.2f ms, "
                  "p99 %.2f ms), bare %.0f txns/s (p50 %.2f ms, p99 %.2f "
                  "ms), ratio %.2f" % (threads, rnd + 1, a[0], a[1], a[2],
                                       e[0], e[1], e[2], a[0] / e[0]))
            print("    API: store commit (the etcd txn) mean %.2f ms of the "
                  "bind; %s" % ((c1[0] - c0[0]) * 1000 /
                                max(1.0, c1[1] - c0[1]), acpu))
            print("    bare: %s" % ecpu)
            print("    bare, bind-shaped (%d puts of %d bytes): %.0f txns/s "
                  "(p50 %.2f ms, p99 %.2f ms); %s" %
                  (BIND_SHAPE + s + (scpu,)))
            print("    bare, a bind's transaction (%d puts of %d bytes, 6 "
                  "guards, watched by the agents): %.0f txns/s (p50 %.2f "
                  "ms, p99 %.2f ms); API ratio to it %.2f; %s" %
                  (BIND_SHAPE + g + (a[0] / g[0], gcpu)))
            sys.stdout.flush()
    for threads in (1,) + clients:
        api = sum(r[1][0] for r in rows if r[0] == threads)
        etc = sum(r[2][0] for r in rows if r[0] == threads)
        same = sum(r[3][0] for r in rows if r[0] == threads)
        print("  %d client(s), both rounds: API %.0f/s, bare one-put %.0f/s "
              "(ratio %.2f), bare with a bind's puts and guards %.0f/s "
              "(ratio %.2f)" % (threads, api / 2, etc / 2,
                                          api / etc, same / 2, api / same))


def watch_figures(c, rounds):
    print("\n2. watch latency: install acknowledged by A until B's "
          "long-poll GET /api/events?app= answers (%d rounds)" % rounds)
    lat = []
    late = 0
    for i in range(rounds):
        a = c.agent(NODES[i % 3])
        bnode = c.agent(NODES[(i + 1) % 3])
        name = "w-%05d" % i
        got = {}

        def poll():
            st, body = bnode.http("GET", "/api/events?app=%s&wait=10" % name,
                                  timeout=20)
            got["t"] = time.perf_counter()
            got["ok"] = st == 200 and bool(body["data"])

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(0.03)  # let B park the long-poll
        st, body = a.http("POST", "/api/apps", {
            "manifest": cluster_harness.manifest(name, "1Gi"),
            "computeBinding": [{"nodeName": a.node,
                                "deviceId": "%s-big1" % a.node,
                                "memory": GiB}]})
        t_ack = time.perf_counter()
        assert st == 200 and body.get("code") == 200, body
        t.join()
        if not got.get("ok"):
            late += 1
            continue
        lat.append((got["t"] - t_ack) * 1000)
    if not lat:
        print("  no round answered")
        return
    # what the long-polls answered is really in B's view
    missing = [i for i in range(0, rounds, 25)
               if not c.app_of(c.agent(NODES[(i + 1) % 3]), "w-%05d" % i)]
    print("  p50 %.2f ms, p99 %.2f ms, min %.2f ms, max %.2f ms over %d "
          "(negative: B answered before A's answer reached the client); "
          "%d not seen within 10 s; spot check of B's /api/apps: %d "
          "missing" % (pct(lat, 50), pct(lat, 99), min(lat), max(lat),
                       len(lat), late, len(missing)))


def note_unreachable(c, viewers, victim, seen, t0):
    """seen[viewer] = seconds since t0, the first time a viewer's
    /api/compute-resources shows victim reachable:false."""
    for v in viewers:
        if v.node in seen:
            continue
        try:
            if not c.nodes_of(v)[victim]["reachable"]:
                seen[v.node] = time.monotonic() - t0
        except (OSError, KeyError):
            pass


def kill_figures(c, kills):
    ttl = cluster_harness.LEASE_TTL
    print("\n3. agent SIGKILLed until unreachable in both other views "
          "(lease TTL %d s, bar %d s)" % (ttl, ttl + 2))
    took = []
    if kills < 1:
        return
    for k in range(kills):
        victim = NODES[(k + 2) % 3]
        viewers = [c.agent(x) for x in NODES if x != victim]
        t0 = time.monotonic()
        c.agent(victim).kill9()
        seen = {}
        while len(seen) < 2 and time.monotonic() - t0 < 30:
            note_unreachable(c, viewers, victim, seen, t0)
            time.sleep(0.02)
        both = max(seen.values()) if len(seen) == 2 else float("inf")
        took.append(both)
        print("  kill %d (%s): %s; both %.2f s" %
              (k + 1, victim, ", ".join("%s %.2f s" % x
                                        for x in sorted(seen.items())), both))
        sys.stdout.flush()
        c.agent(victim).restart()
        c.wait(lambda: all(c.nodes_of(c.agent(x))[victim]["reachable"]
                           for x in NODES), victim + " back", timeout=30)
    print("  min %.2f s, median %.2f s, max %.2f s (bar %d s: %s)" %
          (min(took), statistics.median(took), max(took), ttl + 2,
           "met" if max(took) <= ttl + 2 else "MISSED"))


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip())
        return 2
    build = os.path.abspath(sys.argv[1])
    args = sys.argv[2:6] + ["2000", "4", "300", "5"][len(sys.argv[2:6]):]
    binds, watch, kills = int(args[0]), int(args[2]), int(args[3])
    clients = tuple(int(x) for x in args[1].split(","))
    accel_harness.BUILD_DIR = build
    accel_harness.ACCELD = os.path.join(build, "acceld")
    for tool in ("etcd_txn_bench", "bench_http"):
        if not os.path.exists(os.path.join(build, "bench", tool)):
            print("build %s first (cmake --build %s --target %s)" %
                  (tool, build, tool))
            return 2
    cluster_harness.inventory = big_inventory
    # the agents as deployed: acceld's reconcile pass every 5 s, not the
    # tests' 200 ms (five passes a second on each agent, over every app,
    # would be charged to the binds)
    cluster_harness.RECONCILE_MS = None
    c = cluster_harness.Cluster(NODES, devices={n: devices(n) for n in NODES})
    try:
        print("cluster: 3 etcd members (loopback), agents %s, lease TTL %d s"
              % (", ".join(NODES), cluster_harness.LEASE_TTL))
        bind_figures(build, c, binds, clients)
        watch_figures(c, watch)
        kill_figures(c, kills)
    finally:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
