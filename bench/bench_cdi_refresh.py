#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The CDI refresh of an idle acceld (cdi_refresh, every supervisor
second): APPS external apps bound to Memory-slicing stand-in GPUs that the
stand-in nvidia.com/gpu CDI spec lists (each has a CDI device, its shim
config, the container's copy and a ledger), nothing changing. For each
build, over SECONDS after the spec lists every app:

- window 1 (nothing attached): acceld's CPU time (utime + stime of
  /proc/PID/stat), its write syscalls and bytes (/proc/PID/io syscw and
  wchar), and how many of the apps' shim.conf were replaced (inode);
- window 2: `strace -c -f` on every thread of acceld: the syscalls of the
  refresh's file I/O (openat, write, pwrite64, fsync, rename, ...).

Two builds are measured in the same run, rounds alternating, acceld
started afresh each round in the tests' private mount namespace
(tests/integration/test_containers.py: /etc/cdi an overlay). Needs root,
unshare and strace. Prints the medians per build.

usage: bench/bench_cdi_refresh.py BEFORE_BUILD AFTER_BUILD [APPS [SECONDS
       [ROUNDS]]]
"""
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
BUILDS = [os.path.abspath(p) for p in sys.argv[1:3]]
if len(BUILDS) != 2:
    sys.exit(__doc__)
os.environ["ACCEL_BUILD_DIR"] = BUILDS[1]
import accel_harness  # noqa: E402
import test_containers as tc  # noqa: E402

APPS = int(sys.argv[3]) if len(sys.argv) > 3 else 20
SECONDS = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
ROUNDS = int(sys.argv[5]) if len(sys.argv) > 5 else 2
GPUS = ["GPU-1ab00000-0000-4000-8000-0000000bc%03d" % i for i in range(4)]
INVENTORY = accel_harness.inventory(accel_harness.node(
    "ctr", *[accel_harness.device(g, memory="64Gi") for g in GPUS]))
TRACED = ("openat", "write", "pwrite64", "pread64", "read", "fsync",
          "rename", "unlink", "ftruncate", "fchmod", "chmod", "newfstatat",
          "lstat", "statx", "mkdir", "close")


def spec(devs):
    """The stand-in NVIDIA CDI spec listing devs."""
    s = tc.cdi_spec(devs[0])
    s["devices"] = [dict(s["devices"][0], name=g) for g in devs]
    return s


def wait(pred, what, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def io(pid):
    out = {}
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            k, v = line.split(":")
            out[k] = int(v)
    return out


def inodes(d, names):
    out = {}
    for n in names:
        try:
            out[n] = os.stat(os.path.join(d.data_dir, "run", "apps", n,
                                          "shim.conf")).st_ino
        except OSError:
            out[n] = None
    return out


def strace_counts(pid, seconds, tmp):
    """{syscall: calls} of every thread of pid over seconds."""
    out = os.path.join(tmp, "strace.txt")
    args = ["strace", "-c", "-f", "-o", out]
    for tid in os.listdir("/proc/%d/task" % pid):
        args += ["-p", tid]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(seconds)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=30)
    counts = {}
    with open(out) as f:
        for line in f:
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?"
                         r"(\w+)\s*$", line)
            if m:
                counts[m.group(2)] = int(m.group(1))
    return counts


def one_round(build, tmp):
    accel_harness.ACCELD = os.path.join(build, "acceld")
    d = accel_harness.Acceld(
        inventory=INVENTORY, extra_args=["--node-name", "ctr"],
        env={"ACCEL_CDI_DIR": "/etc/cdi"},
        wrapper=tc.cdi_wrapper(tempfile.mkdtemp(dir=tmp), spec(GPUS)))
    d.start()
    try:
        names = ["c%02d" % i for i in range(APPS)]
        for n in names:
            st, b = d.http("POST", "/api/apps", {"manifest": tc.manifest(
                n, "1Gi", mem="64Mi", cpu="100m", disk="1Mi")})
            assert st == 200, b
        cdi = "/proc/%d/root/etc/cdi" % d.proc.pid
        inst = d.cgroup_instance()

        def listed():  # a spec file per app (accel-<instance>-<app>.json)
            n = 0
            for name in names:
                try:
                    with open("%s/accel-%s-%s.json" % (cdi, inst, name)) as f:
                        n += len(json.load(f)["devices"])
                except (OSError, ValueError):
                    return False
            return n == APPS
        wait(listed, "the spec listing every app")
        time.sleep(2)  # settle: the installs' own writes are done
        pid = d.proc.pid
        t0, io0, ino0 = cpu_ticks(pid), io(pid), inodes(d, names)
        time.sleep(SECONDS)
        t1, io1, ino1 = cpu_ticks(pid), io(pid), inodes(d, names)
        hz = os.sysconf("SC_CLK_TCK")
        r = {"cpu_ms": (t1 - t0) * 1000.0 / hz,
             "syscw": io1["syscw"] - io0["syscw"],
             "wchar": io1["wchar"] - io0["wchar"],
             "replaced": sum(ino0[n] != ino1[n] for n in names)}
        r.update(strace_counts(pid, SECONDS, tmp))
        return r
    finally:
        d.close()


def main():
    tmp = tempfile.mkdtemp(prefix="accel-bench-cdi-")
    runs = {b: [] for b in BUILDS}
    try:
        for _ in range(ROUNDS):
            for b in BUILDS:
                runs[b].append(one_round(b, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mu = statistics.median
    print("%d external apps with a CDI device, %.0f s idle, %d rounds, "
          "load average %s" % (APPS, SECONDS, ROUNDS, os.getloadavg()))
    keys = ["cpu_ms", "syscw", "wchar", "replaced"] + [
        k for k in TRACED if any(k in r for rs in runs.values() for r in rs)]
    print("%-12s %14s %14s" % ("", "before", "after"))
    for k in keys:
        print("%-12s %14.0f %14.0f" % (
            k, mu([r.get(k, 0) for r in runs[BUILDS[0]]]),
            mu([r.get(k, 0) for r in runs[BUILDS[1]]])))


if __name__ == "__main__":
    main()
