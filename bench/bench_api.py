#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""acceld at cluster scale (SPEC 11): 1,000 nodes x 8 GPUs, 20,000 apps
installed through the API (each a durable bind: app row + allocation row +
events, committed before the answer), then:

- durable binds per second through the API (4 concurrent clients), next to
  a bare SQLite INSERT+COMMIT loop with the same settings (bench_store),
  in the same run and on the same file system;
- GET /api/compute-resources latency (median and p99 of 30);
- acceld's resident memory (VmRSS, VmHWM).

usage: bench/bench_api.py BUILD_DIR [NODES GPUS APPS CLIENTS]
"""
import http.client
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "integration"))
import accel_harness  # noqa: E402


def inventory(nodes, gpus):
    out = ["nodes:"]
    for n in range(nodes):
        out.append("- name: n%04d" % n)
        out.append("  memory: {total: 512Gi, used: 16Gi}")
        out.append("  cpu: {total: \"64\", used: \"4\"}")
        out.append("  disk: {total: 8Ti, used: 1Ti}")
        out.append("  devices:")
        for g in range(gpus):
            out.append("  - id: GPU-%04d-%02d" % (n, g))
            out.append("    type: nvidia")
            out.append("    model: NVIDIA H100")
            out.append("    memory: 80Gi")
            out.append("    supportType: %s" %
                       ("MemorySlice" if g % 4 else "TimeSlice"))
    return "\n".join(out) + "\n"


def manifest(i):
    return {"metadata": {"name": "app-%06d" % i}, "spec": {"accelerator": [{
        "mode": "nvidia", "requiredGPUMemory": "2Gi",
        "limitedGPUMemory": "2Gi", "requiredMemory": "256Mi",
        "limitedMemory": "256Mi", "requiredCpu": "100m",
        "limitedCpu": "100m", "requiredDisk": "1Gi", "limitedDisk": "1Gi"}]}}


def install_range(port, token, k, apps, clients):
    """Install every clients-th app starting at k over one connection."""
    c = http.client.HTTPConnection("127.0.0.1", port)
    h = {"Authorization": "Bearer " + token,
         "Content-Type": "application/json"}
    errors = []
    for i in range(k, apps, clients):
        c.request("POST", "/api/apps", json.dumps({"manifest": manifest(i)}),
                  h)
        r = c.getresponse()
        b = json.loads(r.read())
        if r.status != 200 or b["data"]["state"] != "running":
            errors.append((i, r.status, b))
    return errors


def rss(pid):
    vals = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                vals[k] = int(v.split()[0]) / 1024.0
    return vals


def main():
    build = sys.argv[1]
    nodes, gpus, apps, clients = (list(map(int, sys.argv[2:6])) or
                                  [1000, 8, 20000, 4])
    accel_harness.BUILD_DIR = build
    accel_harness.ACCELD = os.path.join(build, "acceld")
    d = accel_harness.Acceld(inventory=inventory(nodes, gpus),
                             extra_args=["--log-level", "warn"],
                             start_timeout=120)
    d.start()
    try:
        print("acceld: %d nodes x %d GPUs, RSS at start %.1f MiB" %
              (nodes, gpus, rss(d.proc.pid)["VmRSS"]))
        http_bench = os.path.join(build, "bench", "bench_http")
        t0 = time.time()
        if os.path.exists(http_bench):
            # a C client: on 2 cores the Python client's own CPU would
            # otherwise decide the figure
            out = subprocess.run([http_bench, d.url, d.token, "binds",
                                  str(apps), str(clients), "1"],
                                 capture_output=True, text=True).stdout
            print("durable binds through the API (C client): " + out.strip())
        else:
            with multiprocessing.Pool(clients) as pool:
                errors = sum(pool.starmap(
                    install_range,
                    [(d.port, d.token, k, apps, clients)
                     for k in range(clients)]), [])
            dt = time.time() - t0
            if errors:
                print("errors:", len(errors), errors[:2])
            print("durable binds through the API: %d in %.1f s = %.0f/s "
                  "(%d client processes)" % (apps, dt, apps / dt, clients))
        print("acceld resident memory after the binds, before any "
              "listing: %.1f MiB" % rss(d.proc.pid)["VmRSS"])
        lat = []
        c = http.client.HTTPConnection("127.0.0.1", d.port)
        t1 = time.perf_counter()
        c.request("GET", "/api/compute-resources",
                  headers={"Authorization": "Bearer " + d.token})
        size = len(c.getresponse().read())
        print("GET /api/compute-resources, first (builds every device's "
              "JSON): %.1f ms, %.1f KiB" % ((time.perf_counter() - t1) * 1000,
                                             size / 1024))
        if os.path.exists(http_bench):
            out = subprocess.run([http_bench, d.url, d.token, "get", "30"],
                                 capture_output=True, text=True).stdout
            print("C client: " + out.strip())
        for _ in range(30):
            t1 = time.perf_counter()
            c.request("GET", "/api/compute-resources",
                      headers={"Authorization": "Bearer " + d.token})
            c.getresponse().read()
            lat.append((time.perf_counter() - t1) * 1000)
        lat.sort()
        print("Python client: GET /api/compute-resources median %.1f ms, "
              "p99 %.1f ms" % (statistics.median(lat), lat[-1]))
        m = rss(d.proc.pid)
        print("acceld resident memory: %.1f MiB (peak %.1f MiB)" %
              (m["VmRSS"], m["VmHWM"]))
        # the bare SQLite loop, same settings, same file system (after the
        # API run; bench_store also runs it before, see main)
        bench_store = os.path.join(build, "bench", "bench_store")
        if os.path.exists(bench_store):
            out = subprocess.run([bench_store, d.tmp, "5000"],
                                 capture_output=True, text=True).stdout
            print("bench_store (same file system):")
            print("  " + out.strip().replace("\n", "\n  "))
    finally:
        d.close()


if __name__ == "__main__":
    main()
