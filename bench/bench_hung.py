#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How soon a hung agent shows as unreachable (issue 40 item 8), and where
the time goes: three etcd members on loopback and three acceld agents
(tests/cluster/cluster_harness.py, lease TTL 3 s, acceld's own reconcile
interval), each agent running one app. For each round one agent is
stopped (SIGSTOP; or SIGKILL), and the script records, from that moment:

- the TTL etcd says the agent's lease has left (/v3/lease/timetolive,
  whole seconds, asked at once),
- when its live key (/accel/agents/<node>) is gone from etcd (polled
  every 10 ms): the lease's expiry and etcd's sweep of expired leases,
- when each of the two other agents' /api/compute-resources shows it
  reachable:false (polled every 10 ms): the watch and the agent's update.

With MOVE=<s> the etcd leader hands leadership to another member that
many seconds after the stop (/v3/maintenance/transfer-leadership), as a
leader election on a loaded machine does by itself. With LOAD=<k> the
machine is loaded meanwhile: k processes spinning on the CPU, and one
client installing and uninstalling an app through each agent that is not
the victim, without pause (issue 51: measured as a person would, under
load). The agent is continued (or started again) before the next round,
victims rotating.

usage: bench/bench_hung.py BUILD_DIR [ROUNDS [stop|kill]]
"""
import base64
import json
import os
import signal
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
from bench_cluster import note_unreachable  # noqa: E402

NODES = ("n1", "n2", "n3")


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=2) as r:
        return json.loads(r.read())


def b64(s):
    return base64.b64encode(s.encode()).decode()


def spinners(k):
    """k processes that keep a CPU busy until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(k)]


def churn(c, node, stop, counts):
    """Install and uninstall an app through node until stop is set."""
    a = c.agent(node)
    i = 0
    while not stop.is_set():
        name = "churn-%s-%d" % (node, i % 4)
        i += 1
        try:
            st, _ = a.http("POST", "/api/apps", {
                "manifest": cluster_harness.manifest(name, "1Gi"),
                "computeBinding": [{"nodeName": node,
                                    "deviceId": node + "-mem",
                                    "memory": 1 << 30}]})
            a.http("DELETE", "/api/apps/" + name)
            counts[node] = counts.get(node, 0) + (st == 200)
        except OSError:
            time.sleep(0.05)  # the victim's turn to be this node: later


def round_(c, url, victim, kill, move):
    key = "/accel/agents/" + victim
    lease = post(url, "/v3/kv/range", {"key": b64(key)})["kvs"][0]["lease"]
    viewers = [c.agent(x) for x in NODES if x != victim]
    t0 = time.monotonic()
    if kill:
        c.agent(victim).kill9()
    else:
        c.agent(victim).signal(signal.SIGSTOP)
    ttl = post(url, "/v3/lease/timetolive", {"ID": lease}).get("TTL")
    moved = None
    seen, gone = {}, None
    while (len(seen) < 2 or gone is None) and time.monotonic() - t0 < 30:
        now = time.monotonic() - t0
        if move is not None and moved is None and now >= move:
            c.etcd.move_leader()
            moved = time.monotonic() - t0
        if gone is None:
            try:
                if not post(url, "/v3/kv/range",
                            {"key": b64(key)}).get("kvs"):
                    gone = time.monotonic() - t0
            except OSError:
                pass
        note_unreachable(c, viewers, victim, seen, t0)
        time.sleep(0.01)
    both = max(seen.values()) if len(seen) == 2 else float("inf")
    print("  %s %s: lease left %s s at the stop;%s key gone +%.2f s; views "
          "%s; both %.2f s" % ("kill" if kill else "stop", victim, ttl,
                               " leader moved +%.2f s;" % moved
                               if moved is not None else "",
                               gone if gone is not None else -1,
                               ", ".join("%s +%.2f s" % x
                                         for x in sorted(seen.items())),
                               both))
    sys.stdout.flush()
    if kill:
        c.agent(victim).restart()
    else:
        c.agent(victim).signal(signal.SIGCONT)
    c.wait(lambda: all(c.nodes_of(c.agent(x))[victim]["reachable"]
                       for x in NODES), victim + " back", timeout=30)
    return both


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip())
        return 2
    build = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    kill = len(sys.argv) > 3 and sys.argv[3] == "kill"
    move = float(os.environ["MOVE"]) if os.environ.get("MOVE") else None
    load = int(os.environ.get("LOAD", "0"))
    accel_harness.BUILD_DIR = build
    accel_harness.ACCELD = os.environ.get("ACCELD",
                                          os.path.join(build, "acceld"))
    cluster_harness.RECONCILE_MS = None
    ttl = cluster_harness.LEASE_TTL
    c = cluster_harness.Cluster(NODES)
    try:
        url = c.etcd.urls()[0]
        for n in NODES:
            m = cluster_harness.manifest("run-" + n, "2Gi",
                                         run=["/bin/sleep", "3001"])
            st, b = c.agent(n).http("POST", "/api/apps", {
                "manifest": m, "computeBinding": [{
                    "nodeName": n, "deviceId": n + "-mem",
                    "memory": 2 << 30}]})
            assert st == 200 and b.get("code") == 200, b
        print("lease TTL %d s, bar %d s%s%s" % (
            ttl, ttl + 2, "; the etcd leader moves %.1f s after each stop"
            % move if move is not None else "",
            "; load: %d spinners and a bind loop per agent" % load
            if load else ""))
        took = []
        for k in range(rounds):
            victim = NODES[(k + 2) % 3]
            stop, counts, threads = threading.Event(), {}, []
            spin = spinners(load)
            for n in NODES if load else ():
                if n != victim:
                    threads.append(threading.Thread(
                        target=churn, args=(c, n, stop, counts), daemon=True))
                    threads[-1].start()
            time.sleep(1 if load else 0)
            try:
                took.append(round_(c, url, victim, kill, move))
            finally:
                stop.set()
                for t in threads:
                    t.join()
                for p in spin:
                    p.kill()
                    p.wait()
            if load:
                print("    (binds meanwhile: %s)" % counts)
        print("min %.2f s, median %.2f s, max %.2f s (bar %d s: %s)" % (
            min(took), statistics.median(took), max(took), ttl + 2,
            "met" if max(took) <= ttl + 2 else "MISSED"))
        for n in NODES:
            c.agent(n).http("POST", "/api/apps/run-%s/suspend" % n)
    finally:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
