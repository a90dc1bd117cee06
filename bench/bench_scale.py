#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The cluster's cost as it grows (issue 51): three etcd members on
loopback and N acceld agents (tests/cluster/cluster_harness.py: declared
inventories, two cards each, lease TTL 3 s), for each N given:

1. idle: the watch events etcd sends (etcd_debugging_mvcc_events_total,
   summed over the members) and the CPU of the busiest member, per
   second over IDLE seconds;
2. binds through one API server (n1): sequential installs with an
   explicit binding to n1's card, then uninstalls, for BINDS seconds,
   and the CPU each bind (install and uninstall) cost the etcd members,
   n1 and the other agents, each group summed;
3. a killed node: SIGKILL the last agent, then poll every other agent's
   /api/compute-resources until all show it reachable:false (TTL + 2 s).

usage: bench/bench_scale.py BUILD_DIR [N,N,...] [IDLE BINDS]
       ACCELD=path: another acceld (the same run's "before", say)
       --apart: n1 alone under the prefix /accel/, the other N - 1
       agents a cluster of their own under /accel-rest/ on the same etcd
       members (their own monitors and beats): what a bind through n1
       costs when no other agent watches the keys it writes, the bound
       of a design where agents watch only their own node's keys (the
       killed node is then one of the N - 1, seen by the others of them);
       APART_API=K with --apart: n1 to nK under /accel/ (K API servers
       that watch every bind), the other N - K apart
       --agents: n1 an API server (the default role), the other N - 1
       acceld --role agent (docs/cluster.md, "Roles"): each watches only
       its own node's index and the small tables, so a bind through n1
       on n1's card reaches no agent; the killed node (an agent) is timed
       until the API servers show it unreachable; AGENTS_API=K: n1 to
       nK API servers, the other N - K agents
       --short: N = 8, IDLE 4, BINDS 3, and exit 1 if a bar is missed
       (idle events < 3 N; the killed node within TTL + 2 s)
       (the CI form: cluster.bench_scale, well under a minute)
"""
import json
import os
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cluster"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import accel_harness  # noqa: E402
import cluster_harness  # noqa: E402


def events_sent(c):
    total = 0.0
    for u in c.etcd.urls():
        with urllib.request.urlopen(u + "/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("etcd_debugging_mvcc_events_total"):
                    total += float(line.split()[-1])
    return total


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def idle(c, seconds):
    pids = [m.proc.pid for m in c.etcd.members]
    e0, c0, t0 = events_sent(c), [cpu_s(p) for p in pids], time.monotonic()
    time.sleep(seconds)
    e1, c1, t1 = events_sent(c), [cpu_s(p) for p in pids], time.monotonic()
    busiest = max(b - a for a, b in zip(c0, c1))
    return (e1 - e0) / (t1 - t0), busiest / (t1 - t0) * 60


def cpus(pids):
    out = []
    for p in pids:
        try:
            out.append(cpu_s(p))
        except OSError:
            out.append(0.0)
    return out


def binds(c, nodes, seconds):
    """Sequential binds through n1: their rate, and the CPU each bind cost
    the etcd members (together), n1 and the other agents (together), in
    ms: what grows with N is what a change costs the views."""
    a = c.agent("n1")
    groups = [[m.proc.pid for m in c.etcd.members], [a.proc.pid],
              [c.agent(x).proc.pid for x in nodes[1:]]]
    before = [cpus(g) for g in groups]
    n, i, t0 = 0, 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        name = "b%d" % i
        i += 1
        st, b = a.http("POST", "/api/apps", {
            "manifest": cluster_harness.manifest(name, "1Gi"),
            "computeBinding": [{"nodeName": "n1", "deviceId": "n1-mem",
                                "memory": 1 << 30}]})
        if st == 200 and b.get("code") == 200:
            n += 1
        a.http("DELETE", "/api/apps/" + name)
    after = [cpus(g) for g in groups]
    cost = [sum(y - x for x, y in zip(b, e)) * 1000 / max(n, 1)
            for b, e in zip(before, after)]
    return n / (time.monotonic() - t0), cost


def kill(c, nodes, apart=0, api=0):
    victim = nodes[-1]
    viewers = [c.agent(n) for n in (nodes[:api] if api else
                                    nodes[apart:-1])]
    c.agent(victim).kill9()
    t0 = time.monotonic()
    left = set(v.node for v in viewers)
    while left and time.monotonic() - t0 < 30:
        for v in viewers:
            if v.node not in left:
                continue
            try:
                if not c.nodes_of(v)[victim]["reachable"]:
                    left.discard(v.node)
            except (OSError, KeyError):
                pass
    return time.monotonic() - t0 if not left else float("inf")


REST_PREFIX = "/accel-rest/"  # sorts outside /accel/: no watch of n1's


def start_rest(c, nodes, k):
    """--apart: agents nodes[k:] as a cluster of their own under
    REST_PREFIX on c's etcd members (the first writes its own
    admin.token), added to c.agents so that c.close() stops them."""
    token = None
    for n in nodes[k:]:
        a = cluster_harness.Agent(
            n, c.etcd.endpoints(), token=token,
            extra_args=["--etcd-insecure", "--etcd-prefix", REST_PREFIX])
        a.start()
        token = a.token
        c.agents[n] = a
    rest = [c.agent(n) for n in nodes[k:]]
    c.wait(lambda: all(len(c.nodes_of(a)) == len(rest) and
                       all(x["reachable"] for x in c.nodes_of(a).values())
                       for a in rest),
           "every other agent sees the %d others reachable" % len(rest),
           timeout=120)


def one(n, idle_s, binds_s, apart=0, api=0):
    nodes = ["n%d" % (k + 1) for k in range(n)]
    t0 = time.monotonic()
    roles = {x: ["--role", "agent"] for x in nodes[api:]} if api else None
    c = cluster_harness.Cluster(nodes[:apart] if apart else nodes,
                                node_args=roles)
    try:
        if apart:
            start_rest(c, nodes, apart)
        started = time.monotonic() - t0
        time.sleep(2)  # the last agents' first rounds
        ev, cpu = idle(c, idle_s)
        rate, cost = binds(c, nodes, binds_s)
        dead = kill(c, nodes, apart, api)
    finally:
        c.close()
    print(json.dumps({"n": n, "apart": apart, "api_servers": api,
                      "started_s": round(started, 1),
                      "idle_events_per_s": round(ev, 1),
                      "busiest_etcd_cpu_s_per_min": round(cpu, 2),
                      "binds_per_s": round(rate, 1),
                      "cpu_ms_per_bind": {
                          "etcd": round(cost[0], 2), "n1": round(cost[1], 2),
                          "other_agents": round(cost[2], 2),
                          "per_other_agent": round(cost[2] / max(n - 1, 1),
                                                   3)},
                      "killed_unreachable_everywhere_s": round(dead, 2)}))
    sys.stdout.flush()
    return {"n": n, "ev": ev, "cpu": cpu, "binds": rate, "dead": dead}


def main():
    args = [a for a in sys.argv[1:]
            if a not in ("--short", "--apart", "--agents")]
    short = "--short" in sys.argv
    if not args:
        print(__doc__.strip())
        return 2
    build = os.path.abspath(args[0])
    accel_harness.BUILD_DIR = build
    accel_harness.ACCELD = os.environ.get("ACCELD",
                                          os.path.join(build, "acceld"))
    cluster_harness.RECONCILE_MS = None
    ns = [8] if short else [int(x) for x in (args[1] if len(args) > 1
                                             else "8,32").split(",")]
    idle_s = 4 if short else float(args[2]) if len(args) > 2 else 20
    binds_s = 3 if short else float(args[3]) if len(args) > 3 else 10
    apart = 0
    if "--apart" in sys.argv:
        apart = int(os.environ.get("APART_API", "1"))
        if not 1 <= apart <= min(ns) - 2:
            print("APART_API=%d: from 1 to the smallest N - 2 (the killed "
                  "node and one who sees it are apart)" % apart)
            return 2
    api = 0
    if "--agents" in sys.argv:
        if apart:
            print("--agents and --apart: one or the other")
            return 2
        api = int(os.environ.get("AGENTS_API", "1"))
        if not 1 <= api <= min(ns) - 1:
            print("AGENTS_API=%d: from 1 to the smallest N - 1 (the killed "
                  "node is an agent)" % api)
            return 2
    ttl = cluster_harness.LEASE_TTL
    print("acceld %s, lease TTL %d s, idle %g s, binds %g s%s%s" % (
        accel_harness.ACCELD, ttl, idle_s, binds_s,
        ", the agents after n%d apart (%s)" % (apart, REST_PREFIX)
        if apart else "",
        ", the nodes after n%d --role agent" % api if api else ""))
    res = [one(n, idle_s, binds_s, apart, api) for n in ns]
    ok = all(r["dead"] <= ttl + 2 for r in res)
    if short:
        # the short form's bar: an idle cluster of 8 sends fewer than 3 N
        # watch events a second (each beat to two monitors: 2 N; before
        # issue 51, every beat to every view: N^2 = 64, measured 61)
        ok = ok and res[0]["ev"] < 3 * res[0]["n"]
    if len(res) > 1:
        a, b = res[0], res[-1]
        print("N %d -> %d: idle events x%.1f, busiest etcd CPU x%.1f, "
              "binds %.2f of N = %d" % (
                  a["n"], b["n"], b["ev"] / a["ev"] if a["ev"] else 0,
                  b["cpu"] / a["cpu"] if a["cpu"] else 0,
                  b["binds"] / a["binds"] if a["binds"] else 0, a["n"]))
    print("bars: %s" % ("met" if ok else "MISSED"))
    return 0 if ok or not short else 1


if __name__ == "__main__":
    sys.exit(main())
