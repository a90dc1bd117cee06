#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""limitedCpu enforced by the app's cgroup (SPEC 8.2): a CPU burner (two
shell busy loops: it would take two cores) run by acceld with limitedCpu
500m, then the same with limitedCpu 2 as the control, each measured alone
from its processes' utime+stime over a window, with the cgroup's throttling
counters. The burners are reniced to -20 so that on a loaded machine they
get the CPU the limit is there to bound, and their cgroups (and the parents
up to accel.slice) get the largest cpu weight for the window, then the
default back (otherwise the machine's load, not the limit, decides). Prints the cores each used, the tier acceld reports,
and the load average.

usage: bench/bench_cgroup_cpu.py BUILD_DIR [SECONDS]
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
if len(sys.argv) > 1:
    os.environ["ACCEL_BUILD_DIR"] = os.path.abspath(sys.argv[1])
import accel_harness  # noqa: E402

INVENTORY = accel_harness.inventory(accel_harness.node(
    "bench", accel_harness.device("GPU-bench-0", "bench", "24Gi",
                                  "Exclusive", index=0)))


def manifest(name, cpu):
    return {"apiVersion": "v2", "metadata": {"name": name, "title": name},
            "spec": {"accelerator": [{
                "mode": "nvidia", "requiredGPUMemory": "1Gi",
                "limitedGPUMemory": "1Gi", "requiredMemory": "16Mi",
                "limitedMemory": "64Mi", "requiredCpu": "100m",
                "limitedCpu": cpu, "requiredDisk": "1Mi",
                "limitedDisk": "1Mi"}]},
            "run": {"command": ["sh", "-c", "while :; do :; done & "
                                "while :; do :; done"],
                    "stopTimeoutSeconds": 1}}


def app_pids(d, name):
    for base in accel_harness.cgroup_dirs(d.cgroup_instance()):
        try:
            with open(os.path.join(base, name, "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            continue
    return []


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(rest[11]) + int(rest[12])  # utime + stime
    return total


def cpu_stat(d, name):
    """The app's cpu controller: (quota file text, {nr_periods,
    nr_throttled, throttled_*}) from whichever hierarchy enforces it."""
    for base in accel_harness.cgroup_dirs(d.cgroup_instance()):
        app = os.path.join(base, name)
        for qf in ("cpu.max", "cpu.cfs_quota_us"):
            if os.path.exists(os.path.join(app, qf)) and \
                    os.path.exists(os.path.join(app, "cpu.stat")):
                with open(os.path.join(app, qf)) as f:
                    quota = f.read().strip()
                with open(os.path.join(app, "cpu.stat")) as f:
                    st = dict((k, int(v)) for k, v in
                              (ln.split() for ln in f if ln.strip()))
                return "%s=%s" % (qf, quota), st
    return "no cpu controller", {}


def weigh(d, name, heavy):
    """Give the app's cpu cgroup and its parents (accel.slice/<instance>,
    accel.slice) the largest weight for the window, then the default back:
    a cgroup competes with its siblings as one entity, so renicing its
    processes alone does not win them the CPU on a loaded machine."""
    for base in accel_harness.cgroup_dirs(d.cgroup_instance()):
        for path, v1, v2 in (
                (os.path.join(base, name), "262144", "10000"),
                (base, "262144", "10000"),
                (os.path.dirname(base), "262144", "10000")):
            for f, val, dflt in (("cpu.shares", v1, "1024"),
                                 ("cpu.weight", v2, "100")):
                try:
                    with open(os.path.join(path, f), "w") as fh:
                        fh.write(val if heavy else dflt)
                except OSError:
                    pass


def burn(d, name, cpu, seconds):
    st, b = d.http("POST", "/api/apps", {
        "manifest": manifest(name, cpu),
        "computeBinding": [{"nodeName": "bench", "deviceId": "GPU-bench-0"}]})
    assert st in (200, 201), b
    app = b["data"]
    time.sleep(1.0)  # past the start
    pids = app_pids(d, name)
    for pid in pids:
        os.setpriority(os.PRIO_PROCESS, pid, -20)
    weigh(d, name, True)
    t0, c0 = time.monotonic(), cpu_ticks(pids)
    q, s0 = cpu_stat(d, name)
    time.sleep(seconds)
    t1, c1 = time.monotonic(), cpu_ticks(pids)
    q, s1 = cpu_stat(d, name)
    weigh(d, name, False)
    cores = (c1 - c0) / os.sysconf("SC_CLK_TCK") / (t1 - t0)
    per = max(1, s1.get("nr_periods", 0) - s0.get("nr_periods", 0))
    thr = s1.get("nr_throttled", 0) - s0.get("nr_throttled", 0)
    print("  %s: %s, throttled in %d of %d periods" % (name, q, thr, per))
    d.http("POST", "/api/apps/%s/suspend" % name)
    deadline = time.time() + 15
    while time.time() < deadline:
        if d.http("GET", "/api/apps/" + name)[1]["data"]["state"] == "stopped":
            break
        time.sleep(0.1)
    return cores, app["enforcement"]


def main():
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    d = accel_harness.Acceld(
        inventory=INVENTORY, extra_args=["--node-name", "bench"],
        env={"ACCEL_NVML_LIB": "/nonexistent/libnvidia-ml.so.1"})
    with d:
        for name, cpu in (("burn500m", "500m"), ("burn2", "2")):
            cores, enf = burn(d, name, cpu, seconds)
            print("limitedCpu %-5s %.3f cores over %.0f s (cpu %s, "
                  "cgroup %s)" % (cpu, cores, seconds, enf["cpu"],
                                  enf.get("cgroup")))
    print("loadavg %s" % open("/proc/loadavg").read().strip())
    print("cgroups left: %s" % (d.cgroups_left or "none"))


if __name__ == "__main__":
    main()
