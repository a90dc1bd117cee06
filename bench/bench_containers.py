#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A container app through acceld against a bare podman (issue 36 item 10):
install-to-running (POST /api/apps until the container's process is in the
app's cgroup) and stop-to-released (POST suspend until the app is stopped
with its GPU released; and until its podman run has removed the
container) of the tests' image, against
`podman run -d` (until it returns: the container runs) and `podman stop`
(until it returns, then `podman rm`) of the same image and command, in the
same run, in interleaved pairs whose order is drawn at random. Each step
is taken at a random moment (issue 47 item 8): the install after a random
pause, the stop after the container has run a random while (0.3 to
MAX_PAUSE seconds, default 2), not right after its start, when the
container's engine is still settling. acceld runs in the tests' private mount
namespace with the stand-in nvidia.com/gpu CDI spec (tests/integration/
test_containers.py), on a Memory-slicing stand-in GPU. Prints the medians
and the ratios.

usage: bench/bench_containers.py BUILD_DIR [PAIRS [MAX_PAUSE]]
"""
import os
import random
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

ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 40
MAX_PAUSE = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0


def pause():
    """A random moment: 0.3 s to MAX_PAUSE s from now."""
    time.sleep(random.uniform(0.3, max(0.3, MAX_PAUSE)))
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


def ended(pid):
    """Has pid exited (gone, or a zombie not yet reaped)?"""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


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
    pause()
    t0 = time.monotonic()
    st, b = d.http("POST", "/api/apps", {"manifest": m})
    assert st == 200, b
    wait(lambda: len(procs(inst, name)) >= 2, "the container's process")
    up = time.monotonic() - t0
    leader = d.http("GET", "/api/apps/" + name)[1]["data"]["pid"]
    pause()
    t0 = time.monotonic()
    st, b = d.http("POST", "/api/apps/%s/suspend" % name)
    assert st == 200, b
    wait(lambda: d.http("GET", "/api/apps/" + name)[1]["data"]["state"] ==
         "stopped", "stopped")
    down = time.monotonic() - t0
    # its podman run ended (--rm: the container removed)
    wait(lambda: ended(leader), "podman run")
    gone = time.monotonic() - t0
    d.http("DELETE", "/api/apps/" + name)
    return up, down, gone


def bare_round(i):
    name = "accel-bench-bare-%d-%d" % (os.getpid(), i)
    pause()
    t0 = time.monotonic()
    r = subprocess.run(BARE + ["--name=" + name, tc.IMAGE, "/bin/sleep",
                               "1000"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    up = time.monotonic() - t0
    pause()
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
        a_up, a_down, a_gone, b_up, b_down = [], [], [], [], []
        for i in range(ROUNDS):
            for which in random.sample(("bare", "acceld"), 2):
                if which == "bare":
                    u, w = bare_round(i)
                    b_up.append(u)
                    b_down.append(w)
                else:
                    u, w, g = acceld_round(d, inst, i)
                    a_up.append(u)
                    a_down.append(w)
                    a_gone.append(g)
        mu = statistics.median
        print("pairs %d, pauses 0.3-%.1f s, load average %s" % (
            ROUNDS, MAX_PAUSE, os.getloadavg()))
        print("%-18s %10s %10s %7s" % ("", "acceld", "bare", "ratio"))
        print("%-18s %8.0f ms %8.0f ms %6.2fx" % (
            "install-to-running", mu(a_up) * 1e3, mu(b_up) * 1e3,
            mu(a_up) / mu(b_up)))
        print("%-18s %8.0f ms %8.0f ms %6.2fx" % (
            "stop-to-released", mu(a_down) * 1e3, mu(b_down) * 1e3,
            mu(a_down) / mu(b_down)))
        print("%-18s %8.0f ms %8.0f ms %6.2fx" % (
            "stop-to-removed", mu(a_gone) * 1e3, mu(b_down) * 1e3,
            mu(a_gone) / mu(b_down)))
    finally:
        if d is not None:
            d.close()
        subprocess.run(["podman", "rmi", "--force", tc.IMAGE],
                       capture_output=True)
        remove_parent()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
