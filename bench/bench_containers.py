#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A container app through acceld against a bare podman (issue 36 item 10):
install-to-running (POST /api/apps until the container's process is in the
app's cgroup) and stop-to-released (POST suspend until the app is stopped
with its GPU released, the container removed) of the tests' image, against
`podman run -d` (until it returns: the container runs) and `podman stop`
(until it returns, then `podman rm`) of the same image and command, in the
same run, rounds alternating. acceld runs in the tests' private mount
namespace with the stand-in nvidia.com/gpu CDI spec (tests/integration/
test_containers.py), on a Memory-slicing stand-in GPU. Prints the medians
and the ratios.

usage: bench/bench_containers.py BUILD_DIR [ROUNDS]
"""
import os
import statistics
import subprocess
import sys
import tempfile
import shutil
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
if len(sys.argv) > 1:
    os.environ["ACCEL_BUILD_DIR"] = os.path.abspath(sys.argv[1])
import accel_harness  # noqa: E402
import test_containers as tc  # noqa: E402

ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
PARENT = "/accel-bench-%d" % os.getpid()  # the bare containers' cgroups
BARE = ["podman", "run", "-d", "--rm", "--runtime=runc", "--network=none",
        "--init", "--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024",
        "--cgroup-parent=" + PARENT]


def remove_parent():
    """The bare containers' cgroups in every hierarchy (podman leaves the
    parent it was given)."""
    for h in os.listdir("/sys/fs/cgroup"):
        top = os.path.join("/sys/fs/cgroup", h) + PARENT
        for dirpath, _, _ in sorted(os.walk(top), reverse=True):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass


def procs(inst, app):
    top = "/sys/fs/cgroup/unified/accel.slice/%s/%s" % (inst, app)
    if not os.path.isdir(top):
        top = "/sys/fs/cgroup/accel.slice/%s/%s" % (inst, app)
    out = []
    for dirpath, _, files in os.walk(top):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(dirpath, "cgroup.procs")) as f:
                    out += f.read().split()
            except OSError:
                pass
    return out


def wait(pred, what, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.005)
    raise RuntimeError("timed out waiting for " + what)


def acceld_round(d, inst, i):
    name = "b%d" % i
    m = tc.ctr_manifest(name, ["/bin/sleep", "1000"], stopTimeoutSeconds=10)
    t0 = time.monotonic()
    st, b = d.http("POST", "/api/apps", {"manifest": m})
    assert st == 200, b
    wait(lambda: len(procs(inst, name)) >= 2, "the container's process")
    up = time.monotonic() - t0
    t0 = time.monotonic()
    st, b = d.http("POST", "/api/apps/%s/suspend" % name)
    assert st == 200, b
    wait(lambda: d.http("GET", "/api/apps/" + name)[1]["data"]["state"] ==
         "stopped", "stopped")
    down = time.monotonic() - t0
    d.http("DELETE", "/api/apps/" + name)
    return up, down


def bare_round(i):
    name = "accel-bench-bare-%d-%d" % (os.getpid(), i)
    t0 = time.monotonic()
    r = subprocess.run(BARE + ["--name=" + name, tc.IMAGE, "/bin/sleep",
                               "1000"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    up = time.monotonic() - t0
    t0 = time.monotonic()
    subprocess.run(["podman", "stop", "-t", "10", name], capture_output=True)
    subprocess.run(["podman", "rm", "--force", "--ignore", name],
                   capture_output=True)
    down = time.monotonic() - t0
    return up, down


def main():
    tmp = tempfile.mkdtemp(prefix="accel-bench-ctr-")
    d = None
    try:
        tc.build_image(tmp)
        d = accel_harness.Acceld(
            inventory=tc.INVENTORY, extra_args=["--node-name", "ctr"],
            wrapper=tc.cdi_wrapper(tempfile.mkdtemp(dir=tmp),
                                   tc.cdi_spec(tc.GPU))).start()
        inst = d.cgroup_instance()
        a_up, a_down, b_up, b_down = [], [], [], []
        for i in range(ROUNDS):
            u, w = bare_round(i)
            b_up.append(u)
            b_down.append(w)
            u, w = acceld_round(d, inst, i)
            a_up.append(u)
            a_down.append(w)
        mu = statistics.median
        print("rounds %d, load average %s" % (ROUNDS, os.getloadavg()))
        print("%-18s %10s %10s %7s" % ("", "acceld", "bare", "ratio"))
        print("%-18s %8.0f ms %8.0f ms %6.2fx" % (
            "install-to-running", mu(a_up) * 1e3, mu(b_up) * 1e3,
            mu(a_up) / mu(b_up)))
        print("%-18s %8.0f ms %8.0f ms %6.2fx" % (
            "stop-to-released", mu(a_down) * 1e3, mu(b_down) * 1e3,
            mu(a_down) / mu(b_down)))
    finally:
        if d is not None:
            d.close()
        subprocess.run(["podman", "rmi", "--force", tc.IMAGE],
                       capture_output=True)
        remove_parent()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
