# SPDX-License-Identifier: MIT
"""The node runtime through the real binaries (SPEC 2.7, 2.9, 8): apps with
`run` started and stopped for real, exits, launch failures, SIGTERM ignored,
daemons forked, an acceld killed with SIGKILL and restarted, the Olares
1.12.5 steps with a shared app, and the reconciler (foreign processes, GPUs
vanishing, NVML errors, releases that wait for the GPU to be free).

acceld runs with the tests' fake libnvidia-ml.so.1 (ACCEL_NVML_LIB), whose
state file (ACCEL_FAKE_NVML) the tests edit while it runs, and with
--reconcile-interval-ms 100 so a reconciler pass comes quickly."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import (Acceld, BUILD_DIR, device, failed_check,  # noqa: E402
                           inventory, node, wait_for)

FAKE_NVML = os.path.join(BUILD_DIR, "fake", "libnvidia-ml.so.1")
NODE = "rt"
GPU_A = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
GPU_B = "GPU-bbbbbbbb-0000-4000-8000-000000000002"
GiB = 1 << 30

HEADER = "driver 550.54.14\ncuda 12040\n"
GPU_LINE = ("gpu uuid=%s total=25769803776 used=1073741824 util=37 ecc=0 "
            "err=0 uuid_err=0 name=NVIDIA GeForce RTX 4090\n")


# The local node is declared (so the machine's own load cannot refuse an
# install); its GPUs carry the UUIDs the fake NVML lists, so the reconciler
# treats them as the driver's.
INVENTORY = inventory(node(NODE, *(
    device(g, "NVIDIA GeForce RTX 4090", "24Gi", "Exclusive", index=i)
    for i, g in enumerate((GPU_A, GPU_B)))))


# Under the ThreadSanitizer stage (scripts/test.sh sets TSAN_OPTIONS) an
# app's processes carry TSan's runtime (the TSan-built shim), which maps an
# unlinked /tmp/tsan.rodata.<pid> of a few hundred KiB per process: on the
# tests' filesystem, acceld counts it against the app's limitedDisk (files
# its processes hold open unlinked), and four apps of one owner passed 1Mi
# and were stopped (a CI run of test_slow_ops). The runtime's, not the app's.
APP_DISK = "64Mi" if os.environ.get("TSAN_OPTIONS") else "1Mi"


def manifest(name, cmd, stop=2, shared=False):
    m = accel_harness.manifest(name, "1Gi", mem="16Mi", cpu="10m",
                               disk=APP_DISK, shared=shared)
    m["metadata"]["title"] = name
    m["run"] = {"command": cmd, "stopTimeoutSeconds": stop}
    return m


def proc_stat(pid):
    """(state, pgrp) of pid, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()
    return rest[0], int(rest[2])


def alive(pid):
    st = proc_stat(pid)
    return st is not None and st[0] != "Z"


def group_alive(pgid):
    for e in os.listdir("/proc"):
        if e.isdigit():
            st = proc_stat(int(e))
            if st and st[1] == pgid and st[0] != "Z":
                return True
    return False


def tagged(key, value):
    """Live pids whose environment holds key=value exactly."""
    want = ("%s=%s" % (key, value)).encode()
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % e, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if want in env and alive(int(e)):
            out.append(int(e))
    return out


def pids_of_app(name):
    """Live processes whose environment holds ACCEL_APP=name."""
    return tagged("ACCEL_APP", name)


def environ_of(pid):
    with open("/proc/%d/environ" % pid, "rb") as f:
        return dict(e.decode().split("=", 1)
                    for e in f.read().split(b"\0") if e)


@unittest.skipUnless(os.path.exists(FAKE_NVML), "fake NVML not built")
class RuntimeBase(unittest.TestCase):
    gpus = (GPU_A, GPU_B)
    inventory = INVENTORY
    acceld_args = ()  # more acceld options (e.g. --no-cgroups)
    acceld_env = {}   # more of acceld's environment

    def setUp(self):
        self.killed = []
        self.extra = []
        self.nvml_path = None
        self.d = None
        self.start_acceld()

    def start_acceld(self, extra_lines=""):
        self.d = Acceld(inventory=self.inventory, extra_args=[
            "--node-name", NODE, "--reconcile-interval-ms", "100"] +
            list(self.acceld_args))
        self.nvml_path = os.path.join(self.d.tmp, "nvml.txt")
        self.d.env = {"ACCEL_NVML_LIB": FAKE_NVML,
                      "ACCEL_FAKE_NVML": self.nvml_path}
        self.d.env.update(self.acceld_env)
        self.write_nvml(extra_lines)
        self.d.start()

    def tearDown(self):
        if self.d is not None:
            for a in self.d.http("GET", "/api/apps")[1]["data"] or []:
                if a.get("pid"):
                    try:
                        os.killpg(a["pid"], signal.SIGKILL)
                    except OSError:
                        pass
            self.d.close()
            # SPEC 8.2: acceld leaves no cgroup behind
            self.assertEqual(self.d.cgroups_left, [],
                             "cgroups left: %s" % self.d.cgroups_left)
        for p in self.killed:
            try:
                p.kill()
                p.wait()
            except OSError:
                pass

    # ---- helpers ----

    def write_nvml(self, extra="", gpus=None):
        text = HEADER
        for g in (self.gpus if gpus is None else gpus):
            text += GPU_LINE % g
        with open(self.nvml_path + ".tmp", "w") as f:
            f.write(text + extra)
        os.replace(self.nvml_path + ".tmp", self.nvml_path)

    def set_mode(self, gpu, mode):
        st, b = self.d.http(
            "PUT", "/api/compute-resources/nodes/%s/devices/%s/support-type"
            % (NODE, gpu), {"supportType": mode})
        self.assertEqual(st, 200, b)

    def install(self, m, gpu=GPU_A, expect=200):
        body = {"manifest": m}
        if gpu:
            body["computeBinding"] = [{"nodeName": NODE, "deviceId": gpu}]
        st, b = self.d.http("POST", "/api/apps", body)
        self.assertEqual(st, expect, b)
        return b["data"]

    def app(self, name):
        return self.d.data("/api/apps/" + name)

    def device(self, gpu):
        return self.d.device(gpu)

    def events(self, kind=None):
        st, b = self.d.http("GET", "/api/events?limit=1000")
        self.assertEqual(st, 200, b)
        return [e for e in b["data"] if kind is None or e["kind"] == kind]

    def wait_for(self, pred, what, timeout=10):
        return wait_for(self, pred, what, timeout, log=self.d)

    def environ(self, pid):
        """The environment app process pid runs with. An install answers
        with the pid of a child that may still be between fork and exec,
        with acceld's own environment: wait for the exec (every app has
        ACCEL_APP)."""
        def env():
            e = environ_of(pid)
            return e if "ACCEL_APP" in e else None
        return self.wait_for(env, "process %d to exec" % pid)

    def wait_state(self, name, state, timeout=10):
        return self.wait_for(
            lambda: self.app(name)["state"] == state and self.app(name),
            "app %s to be %s (is %s)" % (name, state,
                                          self.app(name)["state"]), timeout)

    def stop_app(self, name, method="POST", suffix="/suspend"):
        """A stop (SPEC 5.6) answers without waiting for the processes: 200
        with the app `stopping` (or, where the server parks the request,
        the state reached). Wait for it to leave `stopping` and return
        (status of the answer, the app now, or None once uninstalled)."""
        st, b = self.d.http(method, "/api/apps/" + name + suffix)
        self.assertEqual(st, 200, b)

        def settled():
            code, a = self.d.http("GET", "/api/apps/" + name)
            if code == 404:
                return {"gone": True}
            return a["data"]["state"] != "stopping" and a["data"]
        a = self.wait_for(settled, "app %s to leave stopping" % name)
        return st, (None if a.get("gone") else a)

    def foreign_process(self):
        p = subprocess.Popen(["sleep", "300"])
        self.killed.append(p)
        return p.pid


class LifecycleTest(RuntimeBase):
    def test_start_and_stop(self):
        a = self.install(manifest("web", ["sh", "-c", "sleep 1000"]))
        self.assertEqual(a["state"], "running", a)
        pid = a["pid"]
        self.assertTrue(alive(pid))
        self.assertEqual(proc_stat(pid)[1], pid)  # own group
        env = self.environ(pid)
        self.assertEqual(env["CUDA_VISIBLE_DEVICES"], GPU_A)
        self.assertEqual(env["ACCEL_APP"], "web")
        self.assertEqual([b["appName"] for b in
                          self.device(GPU_A)["bindings"]], ["web"])
        st, b = self.stop_app("web")
        self.assertEqual(b["state"], "stopped", b)
        self.assertEqual(b["allocations"], [])
        self.assertFalse(group_alive(pid))
        self.assertEqual(self.device(GPU_A)["bindings"], [])

    def test_exit_zero_is_stopped_and_released(self):
        self.install(manifest("once", ["sh", "-c", "sleep 0.3; exit 0"]))
        a = self.wait_state("once", "stopped")
        self.assertEqual(a["allocations"], [])
        self.assertEqual(self.device(GPU_A)["bindings"], [])

    def test_exit_three_is_failed_with_status(self):
        self.install(manifest("bad", ["sh", "-c", "sleep 0.3; exit 3"]))
        a = self.wait_state("bad", "failed")
        self.assertIn("exited with status 3", a.get("reason", ""))
        self.assertEqual(a["allocations"], [])
        ev = [e for e in self.events("app.state") if e.get("app") == "bad"]
        self.assertTrue(any("exited with status 3" in e["message"]
                            for e in ev), ev)

    def test_launch_failure_missing_binary(self):
        a = self.install(manifest("ghost", ["/nonexistent/accel-no-such"]))
        self.assertEqual(a["state"], "failed", a)
        self.assertIn("cannot run", a.get("reason", ""))
        self.assertIn("No such file", a.get("reason", ""))
        self.assertEqual(a["allocations"], [])

    def test_ignores_sigterm_is_killed_after_timeout(self):
        a = self.install(manifest(
            "stubborn", ["sh", "-c", "trap '' TERM; echo ready; "
                         "while :; do sleep 0.1; done"], stop=1))
        pid = a["pid"]
        # a SIGTERM before the trap would end it at once
        self.wait_for(lambda: "ready" in self.d.app_log("stubborn"),
                      "the trap")
        t0 = time.time()
        st, b = self.stop_app("stubborn")
        took = time.time() - t0
        said = self.d.app_log("stubborn")
        # the kill waited its timeout (seen once under ASan on a loaded
        # machine at 0.4 s: the answer, the app's log and acceld's say why)
        self.assertGreaterEqual(took, 0.9, "%s\n--- app log ---\n%s\n"
                                "--- acceld log ---\n%s" %
                                (b, said[-2000:], self.d.log()))
        self.assertEqual(b["state"], "stopped")
        self.assertFalse(group_alive(pid))

    def test_forked_daemon_is_stopped_too(self):
        self.install(manifest("forker", [
            "sh", "-c", "setsid sleep 1000 & exec sleep 1000"]))
        pids = self.wait_for(lambda: len(pids_of_app("forker")) >= 2 and
                             pids_of_app("forker"), "the daemon child")
        st, b = self.stop_app("forker")
        for p in pids:
            self.assertFalse(alive(p), "pid %d survived the stop" % p)
        self.assertEqual(b["allocations"], [])

    def test_a_child_left_by_an_exited_leader_keeps_the_card(self):
        """The app's leader exits, a child it put in its own session runs
        on: the app's run is not over (with a cgroup or without one: there
        the child carries the app's tag), so the card is not released
        under it. Once the child ends too, the app is stopped and the card
        free. Without a cgroup the release came at the leader's exit."""
        a = self.install(manifest("leaver", [
            "sh", "-c", "setsid sleep 1000 & sleep 2; exit 0"]))
        leader = a["pid"]
        # this acceld's run (another run of the suite has its own tag)
        tag = self.environ(leader)["ACCEL_APP_ID"]
        self.addCleanup(lambda: [os.kill(p, signal.SIGKILL)
                                 for p in tagged("ACCEL_APP_ID", tag)])
        self.wait_for(lambda: not alive(leader), "the leader's exit")
        kids = tagged("ACCEL_APP_ID", tag)  # the child alone now
        self.assertEqual(len(kids), 1, kids)
        time.sleep(1.0)  # ten supervisor rounds
        g = self.app("leaver")
        self.assertEqual(g["state"], "running", g)
        self.assertEqual([x["deviceId"] for x in g["allocations"]], [GPU_A])
        self.assertEqual([b["appName"] for b in
                          self.device(GPU_A)["bindings"]], ["leaver"])
        for p in kids:
            os.kill(p, signal.SIGKILL)
        g = self.wait_state("leaver", "stopped")
        self.assertEqual(g["allocations"], [])
        self.assertEqual(self.device(GPU_A)["bindings"], [])

    def test_log_dir_not_writable(self):
        logs = os.path.join(self.d.data_dir, "logs")
        if os.path.isdir(logs):
            os.rmdir(logs)
        with open(logs, "w") as f:
            f.write("not a directory\n")
        a = self.install(manifest("nolog", ["sh", "-c", "sleep 1000"]))
        self.assertEqual(a["state"], "failed", a)
        self.assertIn("log file", a.get("reason", ""))
        self.assertEqual(a["allocations"], [])
        ev = [e for e in self.events("app.state") if e.get("app") == "nolog"]
        self.assertTrue(any("log file" in e["message"] for e in ev), ev)


class RestartTest(RuntimeBase):
    def kill_acceld(self):
        self.d.kill()

    def test_sigkill_restart_keeps_running_apps(self):
        a = self.install(manifest("keep", ["sh", "-c", "sleep 1000"]))
        gone = self.install(manifest("gone", ["sh", "-c", "sleep 1000"]),
                            gpu=GPU_B)
        pid, gpid = a["pid"], gone["pid"]
        self.kill_acceld()
        self.assertTrue(alive(pid), "the app died with acceld")
        os.killpg(gpid, signal.SIGKILL)  # dies while acceld is down
        self.wait_for(lambda: not group_alive(gpid), "the app to die")
        self.d.start()
        a = self.app("keep")
        self.assertEqual(a["state"], "running", a)
        self.assertEqual(a["pid"], pid)
        self.assertEqual([x["deviceId"] for x in a["allocations"]], [GPU_A])
        g = self.wait_for(
            lambda: self.app("gone")["state"] in ("stopped", "failed") and
            self.app("gone"), "the dead app to be noticed")
        self.assertEqual(g["allocations"], [])
        self.assertEqual(self.device(GPU_B)["bindings"], [])
        # the adopted app can be stopped
        st, b = self.stop_app("keep")
        self.assertEqual(b["state"], "stopped")
        self.assertFalse(group_alive(pid))
        self.assertEqual(self.device(GPU_A)["bindings"], [])


    def unrecorded_resume(self, name, gpu, kill_first):
        """An app running on gpu; acceld killed; the store edited to say
        what a start that never reached it leaves: resuming, no pid. With
        kill_first its process died too (the start never happened)."""
        a = self.install(manifest(name, ["sh", "-c", "sleep 1000"]), gpu=gpu)
        self.kill_acceld()
        if kill_first:
            os.killpg(a["pid"], signal.SIGKILL)
            self.wait_for(lambda: not group_alive(a["pid"]), "the app dead")
        db = sqlite3.connect(os.path.join(self.d.data_dir, "accel.db"))
        with db:
            db.execute("UPDATE apps SET state = 'resuming', pid = 0, "
                       "pid_start = 0 WHERE name = ?", (name,))
        db.close()
        return a["pid"]

    def assert_resumed(self, name, gpu, old_pid):
        """The acknowledged resume went on: running again, a new process,
        its card kept (SPEC 9: no acknowledged change lost across a kill
        -9; before, the next acceld released the app)."""
        g = self.wait_for(lambda: self.app(name)["state"] == "running" and
                          self.app(name), "%s started again" % name)
        self.assertNotEqual(g["pid"], old_pid, g)
        self.assertTrue(group_alive(g["pid"]), g)
        self.assertEqual([x["deviceId"] for x in g["allocations"]], [gpu])
        self.assertEqual([b["appName"] for b in self.device(gpu)["bindings"]],
                         [name])

    def test_orphan_of_an_unrecorded_resume_is_killed(self):
        """acceld died after starting an app but before its leader reached
        the store (a cluster node cut off from etcd, killed meanwhile): the
        store says resuming with no pid. The next acceld kills what runs of
        the app, in its cgroup or with its tag (nothing runs untracked),
        and only then starts it again, as the resume asked."""
        keep = self.install(manifest("kept", ["sh", "-c", "sleep 1000"]),
                            gpu=GPU_B)
        pid = self.unrecorded_resume("lost", GPU_A, kill_first=False)
        self.assertTrue(group_alive(pid))
        self.d.start()
        self.wait_for(lambda: not group_alive(pid), "the orphan killed")
        ev = self.wait_for(lambda: self.events("runtime.orphan"),
                           "the orphan event")
        self.assertEqual([e["app"] for e in ev], ["lost"], ev)
        self.assert_resumed("lost", GPU_A, pid)
        # the app acceld did record is adopted, untouched
        k = self.app("kept")
        self.assertEqual((k["state"], k["pid"]), ("running", keep["pid"]))
        self.assertTrue(alive(keep["pid"]))

    def test_a_resume_that_never_started_starts_after_a_restart(self):
        """The same store with no process left (acceld died between the
        resume's answer and its start): the app starts, no orphan said."""
        pid = self.unrecorded_resume("late", GPU_B, kill_first=True)
        self.d.start()
        self.assert_resumed("late", GPU_B, pid)
        self.assertEqual(self.events("runtime.orphan"), [])


class TwoInstancesTest(RuntimeBase):
    """Two accelds on one machine without cgroups (a test cluster, a second
    instance) each run an app named twin whose child left its process
    group: stopping one's finds its own child by its instance's tag and
    never touches the other's."""
    acceld_args = ("--no-cgroups",)

    def test_a_stop_reaches_only_its_own_instance(self):
        first = self.d
        self.start_acceld()
        second = self.d
        self.d = first
        self.addCleanup(second.close)
        m = manifest("twin", ["sh", "-c", "setsid sleep 1000 & exec sleep 1000"])
        a = self.install(m)
        self.d = second
        b = self.install(m)
        self.d = first
        self.assertEqual((a["state"], b["state"]), ("running", "running"))
        tags = [self.environ(x["pid"])["ACCEL_APP_ID"] for x in (a, b)]
        self.addCleanup(lambda: [os.kill(p, signal.SIGKILL) for t in tags
                                 for p in tagged("ACCEL_APP_ID", t)])
        self.assertNotEqual(tags[0], tags[1])
        self.assertTrue(tags[0].endswith("/twin"), tags)
        self.wait_for(lambda: len(tagged("ACCEL_APP_ID", tags[1])) == 2,
                      "the second's leader and its child")
        st, r = self.stop_app("twin")
        self.assertEqual(r["state"], "stopped", r)
        self.assertEqual(tagged("ACCEL_APP_ID", tags[0]), [])
        self.assertEqual(len(tagged("ACCEL_APP_ID", tags[1])), 2)
        self.d = second
        self.assertEqual(self.app("twin")["state"], "running")
        st, r = self.stop_app("twin")
        self.d = first
        self.assertEqual(tagged("ACCEL_APP_ID", tags[1]), [])


class NoCgroupLifecycleTest(LifecycleTest):
    """The same lifecycle where acceld uses no cgroup (--no-cgroups, or a
    machine without a writable hierarchy): an app is its process group and
    ACCEL_APP tag, stops are still the supervisor's (SPEC 5.6), and its
    enforcement says so with the reason."""
    acceld_args = ("--no-cgroups",)

    def test_enforcement_says_none_with_the_reason(self):
        a = self.install(manifest("plain", ["sh", "-c", "sleep 1000"]))
        e = a["enforcement"]
        for k in ("containment", "memory", "cpu", "pids"):
            self.assertEqual(e[k], "none", e)
            self.assertIn("--no-cgroups", e["reasons"][k], e)
        self.assertIsNone(e["cgroup"], e)
        st, b = self.stop_app("plain")
        self.assertEqual(b["state"], "stopped", b)


class NoCgroupRestartTest(RestartTest):
    acceld_args = ("--no-cgroups",)


class OlaresTest(RuntimeBase):
    """SPEC 2.9: a shared app exclusive on a GPU, stopped and removed, never
    reappears in the GPU's bindings, and the GPU goes to another app."""

    def shared_app(self):
        m = manifest("ollama", ["sh", "-c",
                                "setsid sleep 1000 & exec sleep 1000"],
                     shared=True)
        a = self.install(m)
        self.assertEqual(a["owner"], "shared", a)
        self.assertEqual(a["state"], "running", a)
        return a

    def assert_never_bound(self, name, seconds=0.6):
        deadline = time.time() + seconds
        while time.time() < deadline:
            self.assertNotIn(name, [b["appName"] for b in
                                    self.device(GPU_A)["bindings"]])
            st, lst = self.d.http("GET", "/api/gpu/list")
            self.assertEqual(st, 200, lst)
            self.assertEqual(lst["code"], 200, lst)
            self.assertNotIn(name, str(lst["data"]))
            time.sleep(0.1)

    def test_shared_exclusive_stop_remove_then_rebind(self):
        a = self.shared_app()
        server = self.wait_for(lambda: [p for p in pids_of_app("ollama")
                                        if p != a["pid"]],
                               "the server process")[0]
        # the driver lists the server on the GPU while it runs
        self.write_nvml("proc %s %d 2147483648 compute\n" % (GPU_A, server))
        time.sleep(0.3)
        self.assertEqual(self.device(GPU_A)["foreignUsage"], [])
        st, b = self.stop_app("ollama")
        self.assertEqual(b["state"], "stopped", b)
        self.assertFalse(alive(server), "the server kept running")
        self.write_nvml()  # its context is gone from the driver
        st, b = self.d.http("DELETE",
                            "/api/apps/ollama/compute-resources/bindings")
        self.assertEqual(st, 200, b)
        self.assertEqual(self.app("ollama")["allocations"], [])
        self.assert_never_bound("ollama")
        other = self.install(manifest("comfy", ["sh", "-c", "sleep 1000"]))
        self.assertEqual(other["state"], "running", other)
        self.assertEqual([x["appName"] for x in
                          self.device(GPU_A)["bindings"]], ["comfy"])
        self.assert_never_bound("ollama")

    def test_release_waits_until_nvml_shows_the_gpu_free(self):
        a = self.shared_app()
        # the driver still lists the leader after the stop (context teardown)
        self.write_nvml("proc %s %d 2147483648 compute\n" %
                        (GPU_A, a["pid"]))
        time.sleep(0.3)
        st, b = self.stop_app("ollama")
        self.assertEqual(b["state"], "releasing", b)
        self.assertEqual([x["deviceId"] for x in b["allocations"]],
                         [GPU_A])
        # meanwhile the GPU cannot be given away
        st, b = self.d.http("POST", "/api/apps", {
            "manifest": manifest("comfy", ["sh", "-c", "sleep 1000"]),
            "computeBinding": [{"nodeName": NODE, "deviceId": GPU_A}]})
        failed_check(st, b, "computeBindingUnavailable")
        self.assertIn("exclusive-already-bound", str(b))
        self.write_nvml()
        a = self.wait_state("ollama", "stopped")
        self.assertEqual(a["allocations"], [])
        self.install(manifest("comfy2", ["sh", "-c", "sleep 1000"]))
        self.assertEqual([x["appName"] for x in
                          self.device(GPU_A)["bindings"]], ["comfy2"])

    def test_uninstall_waits_too(self):
        a = self.shared_app()
        self.write_nvml("proc %s %d 1 compute\n" % (GPU_A, a["pid"]))
        time.sleep(0.3)
        st, b = self.stop_app("ollama", "DELETE", "")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["state"], "releasing")
        self.write_nvml()
        self.wait_for(lambda: self.d.http("GET", "/api/apps/ollama")[0] ==
                      404, "the app to be deleted")
        self.assertEqual(self.device(GPU_A)["bindings"], [])


class ModeSwitchBlockedTest(RuntimeBase):
    """SPEC 2.7 'Switch mode': an app bound to the GPU that cannot be stopped
    (it is `releasing`: stopped, but NVML still lists its process on the GPU)
    blocks the switch with the failed check computeDeviceSwitchBlocked and nothing
    changes; once the GPU is free the reconciler releases it and the same
    switch goes through."""

    def switch(self, gpu, mode):
        return self.d.http(
            "PUT", "/api/compute-resources/nodes/%s/devices/%s/support-type"
            % (NODE, gpu), {"supportType": mode})

    def stubborn(self, name):
        """An app on GPU_A that ignores SIGTERM (its stop waits out the
        3 s stop timeout), once its trap is set."""
        a = self.install(manifest(
            name, ["sh", "-c", "trap '' TERM; echo ready; "
                   "while :; do sleep 0.1; done"], stop=3))
        self.assertEqual([x["deviceId"] for x in a["allocations"]], [GPU_A])
        self.wait_for(lambda: "ready" in self.d.app_log(name), "the trap")
        return a

    def while_it_stops(self, name, method, path, body=None):
        """Send a request that stops app name on a thread of its own and
        wait until the app is stopping; a function that waits for that
        request's (status, body)."""
        done = {}
        t = threading.Thread(target=lambda: done.update(
            r=self.d.http(method, path, body, timeout=30)))
        t.start()
        self.addCleanup(t.join)
        self.wait_for(lambda: self.app(name)["state"] == "stopping",
                      "the stop of " + name)

        def answer():
            t.join(30)
            return done["r"]
        return answer

    def test_an_app_bound_while_the_switch_stops_others_blocks_it(self):
        """The switch lets the lock go while it stops the card's apps (here
        one that waits out its 3 s stop timeout); an app installed on the
        card meanwhile starts there. Before, the switch then saved it
        `stopped` with the others while its process ran on, unseen (the
        randomized test saw such an app run on two machines). Now it is
        named as blocked, keeps its card and runs; the mode stays."""
        st, b = self.switch(GPU_A, "MemorySlice")
        self.assertEqual(st, 200, b)
        slow = self.stubborn("slow")
        switched = self.while_it_stops("slow", "PUT",
                                       "/api/compute-resources/nodes/%s/"
                                       "devices/%s/support-type" %
                                       (NODE, GPU_A),
                                       {"supportType": "Exclusive"})
        st, b = self.d.http("POST", "/api/apps", {
            "manifest": manifest("late", ["sh", "-c", "sleep 1000"]),
            "computeBinding": [{"nodeName": NODE, "deviceId": GPU_A,
                                "memory": GiB}]})
        self.assertEqual(st, 200, b)
        late = b["data"]
        self.assertEqual(late["state"], "running", late)
        st, b = switched()
        _, data = failed_check(st, b, "computeDeviceSwitchBlocked")
        self.assertEqual([(x["appName"], x["reason"])
                          for x in data["blockedApps"]],
                         [("late", "stop-operation-not-allowed")], b)
        self.assertEqual([x["appName"] for x in data["stoppedApps"]],
                         ["slow"], b)
        self.assertFalse(group_alive(slow["pid"]))
        s = self.app("slow")
        self.assertEqual((s["state"], s["allocations"]), ("stopped", []), s)
        self.assertEqual(self.device(GPU_A)["supportType"], "MemorySlice")
        h = self.app("late")
        self.assertEqual((h["state"], h["pid"]), ("running", late["pid"]), h)
        self.assertTrue(group_alive(late["pid"]))
        self.assertEqual([x["deviceId"] for x in h["allocations"]], [GPU_A])

    def test_running_app_that_lingers_blocks_the_switch(self):
        """The switch's own stop leaves the app's process on the GPU: the
        mode stays, the app is named as blocked and keeps its binding."""
        a = self.install(manifest("linger", ["sh", "-c", "sleep 1000"]))
        self.assertEqual(a["state"], "running", a)
        self.write_nvml("proc %s %d 2147483648 compute\n" % (GPU_A, a["pid"]))
        st, b = self.switch(GPU_A, "TimeSlice")
        _, data = failed_check(st, b, "computeDeviceSwitchBlocked")
        self.assertEqual([x["appName"] for x in data["blockedApps"]],
                         ["linger"], b)
        self.assertEqual(data["blockedApps"][0]["reason"],
                         "processes-still-on-device", b)
        self.assertEqual(self.device(GPU_A)["supportType"], "Exclusive")
        h = self.app("linger")
        self.assertEqual(h["state"], "releasing", h)
        self.assertEqual([x["deviceId"] for x in h["allocations"]], [GPU_A])
        self.write_nvml()
        self.wait_state("linger", "stopped")
        st, b = self.switch(GPU_A, "TimeSlice")
        self.assertEqual(st, 200, b)

    def test_an_uninstall_under_way_blocks_the_switch(self):
        """An app already stopping (an uninstall's stop, waiting out the
        stop timeout of an app that ignores SIGTERM) blocks the switch:
        stopped again as the switch's own and saved `stopped`, the app
        would stay installed (the randomized test saw an acknowledged
        uninstall undone so)."""
        self.stubborn("leaving")
        # the uninstall answers once the stop is over: meanwhile the app
        # is stopping
        uninstalled = self.while_it_stops("leaving", "DELETE",
                                          "/api/apps/leaving")
        st, b = self.switch(GPU_A, "TimeSlice")
        _, data = failed_check(st, b, "computeDeviceSwitchBlocked")
        self.assertEqual([(x["appName"], x["state"], x["reason"])
                          for x in data["blockedApps"]],
                         [("leaving", "stopping", "stop-still-in-progress")],
                         b)
        self.assertEqual(self.device(GPU_A)["supportType"], "Exclusive")
        # the uninstall ends with the app gone; then the switch goes through
        st, b = uninstalled()
        self.assertEqual((st, b["data"]["state"]), (200, "uninstalled"), b)
        st, b = self.d.http("GET", "/api/apps/leaving")
        self.assertEqual(st, 404, b)
        st, b = self.switch(GPU_A, "TimeSlice")
        self.assertEqual(st, 200, b)
        self.assertEqual(self.device(GPU_A)["supportType"], "TimeSlice")

    def test_an_uninstall_under_way_blocks_a_forced_replace(self):
        """The legacy forced assign of a GPU in App exclusive mode replaces
        its holder by stopping it; a holder already stopping (its uninstall
        waiting out the stop timeout) is not replaced: 409 ops_busy, and the
        uninstall ends with the app gone, not saved `stopped` as the
        replaced one."""
        self.stubborn("leaving")
        b = self.install(manifest("newcomer", ["sh", "-c", "sleep 1000"]),
                         gpu=GPU_B)
        self.assertEqual([x["deviceId"] for x in b["allocations"]], [GPU_B])
        uninstalled = self.while_it_stops("leaving", "DELETE",
                                          "/api/apps/leaving")
        force = {"id": GPU_A, "mode": "0", "appName": "newcomer",
                 "force": True}
        st, b = self.d.http("POST", "/api/gpu/update/app", force)
        self.assertEqual(st, 409, b)
        self.assertIn("leaving", b["message"])
        self.assertIn("stopping", b["message"])
        h = self.app("newcomer")
        self.assertEqual([x["deviceId"] for x in h["allocations"]], [GPU_B])
        st, b = uninstalled()
        self.assertEqual((st, b["data"]["state"]), (200, "uninstalled"), b)
        st, b = self.d.http("GET", "/api/apps/leaving")
        self.assertEqual(st, 404, b)
        # the GPU is free now: the same assign goes through
        st, b = self.d.http("POST", "/api/gpu/update/app", force)
        self.assertEqual(st, 200, b)
        h = self.app("newcomer")
        self.assertEqual([x["deviceId"] for x in h["allocations"]], [GPU_A])
        st, b = self.d.http("GET", "/api/apps/leaving")
        self.assertEqual(st, 404, b)

    def test_a_card_taken_while_a_move_stops_its_app_refuses_the_move(self):
        """A legacy move stops a running app (lock released while it
        stops), then binds it to the new card: a card given to another app
        meanwhile refuses the move (409, exclusive-already-bound) instead
        of a second holder, and the app, stopped by then, is released."""
        self.stubborn("mover")
        moved = self.while_it_stops("mover", "POST", "/api/gpu/update/app",
                                    {"id": GPU_B, "mode": "0",
                                     "appName": "mover"})
        b = self.install(manifest("taker", ["sh", "-c", "sleep 1000"]),
                         gpu=GPU_B)
        self.assertEqual(b["state"], "running", b)
        st, b = moved()
        self.assertEqual(st, 409, b)
        self.assertIn("exclusive-already-bound", json.dumps(b))
        self.assertEqual([x["appName"] for x in
                          self.device(GPU_B)["bindings"]], ["taker"])
        m = self.app("mover")
        self.assertEqual((m["state"], m.get("reason")),
                         ("stopped", "move-refused"), m)
        self.assertEqual(m["allocations"], [])
        self.assertEqual(self.device(GPU_A)["bindings"], [])

    def test_releasing_app_blocks_the_switch_until_released(self):
        a = self.install(manifest("holder", ["sh", "-c", "sleep 1000"]))
        self.assertEqual(a["state"], "running", a)
        pid = a["pid"]
        # the driver lists the app's process on GPU A, and still does after
        # the stop (its context is torn down later)
        self.write_nvml("proc %s %d 2147483648 compute\n" % (GPU_A, pid))
        st, b = self.stop_app("holder")
        self.assertEqual(b["state"], "releasing", b)
        self.assertFalse(group_alive(pid), "the stop left the process")
        self.assertEqual([x["deviceId"] for x in b["allocations"]],
                         [GPU_A])
        before = self.device(GPU_A)
        self.assertEqual(before["supportType"], "Exclusive")
        self.assertEqual([x["appName"] for x in before["bindings"]],
                         ["holder"])
        modes_before = len(self.events("device.mode"))

        st, b = self.switch(GPU_A, "TimeSlice")
        _, data = failed_check(st, b, "computeDeviceSwitchBlocked")
        self.assertEqual(data["status"], "bound-apps-stop-blocked", b)
        self.assertEqual(data["device"]["id"], GPU_A, b)
        self.assertEqual(data["device"]["supportType"], "Exclusive", b)
        blocked = data["blockedApps"]
        self.assertEqual([x["appName"] for x in blocked], ["holder"], b)
        self.assertEqual(blocked[0]["state"], "releasing", b)
        self.assertEqual(blocked[0]["owner"], a["owner"], b)

        # nothing changed: mode, bindings, the app, no device.mode event
        after = self.device(GPU_A)
        self.assertEqual(after["supportType"], "Exclusive")
        self.assertEqual(after["bindings"], before["bindings"])
        h = self.app("holder")
        self.assertEqual(h["state"], "releasing", h)
        self.assertEqual([x["deviceId"] for x in h["allocations"]], [GPU_A])
        self.assertEqual(len(self.events("device.mode")), modes_before)
        # a second try is refused the same way (the refusal is not a stop)
        st, b = self.switch(GPU_A, "MemorySlice")
        failed_check(st, b, "computeDeviceSwitchBlocked")
        self.assertEqual(self.device(GPU_A)["supportType"], "Exclusive")

        # the driver lets go: the reconciler releases the app, the switch
        # goes through and stops nobody
        self.write_nvml()
        h = self.wait_state("holder", "stopped")
        self.assertEqual(h["allocations"], [])
        self.assertEqual(self.device(GPU_A)["bindings"], [])
        st, b = self.switch(GPU_A, "TimeSlice")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["status"], "switched", b)
        self.assertEqual(b["data"]["stoppedApps"], [], b)
        self.assertEqual(self.device(GPU_A)["supportType"], "TimeSlice")
        self.assertEqual(len(self.events("device.mode")), modes_before + 1)


class ReconcilerTest(RuntimeBase):
    def test_foreign_process(self):
        pid = self.foreign_process()
        self.write_nvml("proc %s %d 536870912 compute\n" % (GPU_B, pid))
        fu = self.wait_for(lambda: self.device(GPU_B)["foreignUsage"],
                           "foreignUsage")
        self.assertEqual(fu[0]["pid"], pid)
        self.assertEqual(fu[0]["usedMemory"], 536870912)
        ev = self.events("reconciler.foreign")
        self.assertTrue(any(e.get("device") == GPU_B for e in ev), ev)
        r = self.d.ctl("list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("foreign usage", r.stdout)
        self.assertIn(str(pid), r.stdout)
        r = self.d.ctl("gpu", "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("pid %d" % pid, r.stdout)
        # gone from the driver: the warning goes too
        self.write_nvml()
        self.wait_for(lambda: self.device(GPU_B)["foreignUsage"] == [],
                      "foreignUsage to clear")

    def test_a_process_whose_main_thread_ended_is_still_the_apps(self):
        """A process of the app whose main thread ended (pthread_exit in
        main) shows as a zombie while its other threads run and hold its
        files (and, on a real driver, its device memory): the reconciler
        still counts it as the app's, not as foreign use of the card (before,
        a zombie's line was taken for a process that had ended)."""
        m = manifest("halfdead", [
            "sh", "-c", '"$0" -c "$1" & exec sleep 1000',
            "/usr/bin/python3",  # one an app of any uid may run
            "import ctypes, threading, time\n"
            "threading.Thread(target=time.sleep, args=(300,)).start()\n"
            "ctypes.CDLL(None).pthread_exit(None)\n"], stop=1)
        # Python needs more than the 16Mi and 10m of manifest()
        m["spec"]["accelerator"][0].update(
            {"requiredMemory": "128Mi", "limitedMemory": "128Mi",
             "requiredCpu": "100m", "limitedCpu": "100m"})
        a = self.install(m)
        def zombie_leader():  # the leader's child (sh exec'd sleep)
            try:
                with open("/proc/%d/task/%d/children"
                          % (a["pid"], a["pid"])) as f:
                    kids = [int(k) for k in f.read().split()]
                for pid in kids:
                    with open("/proc/%d/stat" % pid) as f:
                        comm, rest = f.read().rsplit(")", 1)
                    if "python" in comm and rest.split()[0] == "Z":
                        return pid
            except OSError:
                pass
            return None
        pid = self.wait_for(zombie_leader, "the main thread to end")
        other = self.foreign_process()
        self.write_nvml("proc %s %d 536870912 compute\n"
                        "proc %s %d 1048576 compute\n"
                        % (GPU_A, pid, GPU_A, other))
        # a pass read the file: the other process shows as foreign ...
        fu = self.wait_for(lambda: self.device(GPU_A)["foreignUsage"],
                           "foreignUsage")
        # ... and the app's process does not
        self.assertEqual([f["pid"] for f in fu], [other], fu)
        self.write_nvml()

    def test_process_of_stopped_app_is_releasing_then_killed(self):
        a = self.install(manifest("late", ["sh", "-c", "sleep 1000"],
                                  stop=1))
        st, b = self.stop_app("late")
        self.assertEqual(b["state"], "stopped")
        # a process tagged as the app, outside its group, appears on a GPU
        p = subprocess.Popen(["sleep", "300"], start_new_session=True,
                             env=dict(os.environ, ACCEL_APP="late"))
        self.killed.append(p)
        self.write_nvml("proc %s %d 1 compute\n" % (GPU_B, p.pid))
        self.wait_state("late", "releasing")
        ev = self.events("reconciler.lingering")
        self.assertTrue(any(e.get("app") == "late" for e in ev), ev)
        self.assertIsNotNone(p.wait(timeout=10))  # SIGTERM, then SIGKILL
        self.write_nvml()
        self.wait_state("late", "stopped")
        self.assertIsNotNone(a)

    def test_gpu_vanishes_and_returns(self):
        a = self.install(manifest("onb", ["sh", "-c", "sleep 1000"]),
                         gpu=GPU_B)
        self.assertEqual(a["state"], "running")
        self.write_nvml(gpus=[GPU_A])
        self.wait_for(lambda: self.device(GPU_B)["present"] is False,
                      "GPU B to be gone")
        dev = self.device(GPU_B)
        self.assertEqual(dev["health"], "no")
        self.assertTrue(any(e.get("device") == GPU_B
                            for e in self.events("device.missing")))
        ev = self.events("reconciler.missing-device")
        self.assertTrue(any(e.get("app") == "onb" for e in ev), ev)
        # placement avoids it: a selection is refused, automatic picks A
        st, b = self.d.http("POST", "/api/apps", {
            "manifest": manifest("x", ["sh", "-c", "sleep 1000"]),
            "computeBinding": [{"nodeName": NODE, "deviceId": GPU_B}]})
        failed_check(st, b, "computeBindingUnavailable")
        x = self.install(manifest("y", ["sh", "-c", "sleep 1000"]),
                         gpu=None)
        self.assertEqual([r["deviceId"] for r in x["allocations"]], [GPU_A])
        r = self.d.ctl("gpu", "status")
        self.assertIn("NO (gone)", r.stdout)
        self.write_nvml()
        self.wait_for(lambda: self.device(GPU_B)["present"] is True,
                      "GPU B to return")
        self.assertTrue(any(e.get("device") == GPU_B
                            for e in self.events("device.returned")))

    def test_new_gpu_is_reported(self):
        new = "GPU-cccccccc-0000-4000-8000-000000000003"
        self.write_nvml(extra=GPU_LINE % new)
        self.wait_for(lambda: any(e.get("device") == new
                                  for e in self.events("device.new")),
                      "an event about the new GPU")

    def test_nvml_error_before_the_first_pass_is_an_event(self):
        # NVML loads but its device count fails from the start: the first
        # reconciler pass tells it (before, only a change after the first
        # pass was an event, and an error that came first was never told)
        self.d.close()
        self.start_acceld("count_err 999\n")
        ev = self.wait_for(lambda: self.events("nvml.error"), "nvml.error")
        self.assertIn("NVML error", ev[0]["message"], ev)
        time.sleep(0.5)  # five more passes (100 ms each): told once, not each
        self.assertEqual(len(self.events("nvml.error")), 1)
        self.assertTrue(self.device(GPU_A)["present"])

    def test_nvml_errors(self):
        # the device count fails: an event, devices keep their presence
        self.write_nvml("count_err 999\n")
        self.wait_for(lambda: self.events("nvml.error"), "nvml.error")
        self.assertTrue(self.device(GPU_A)["present"])
        st, rt = self.d.http("GET", "/api/runtime")
        self.assertEqual(st, 200, rt)
        self.assertIn("NVML error", rt["data"]["nvml"]["status"])
        self.write_nvml()
        self.wait_for(lambda: "NVML loaded" in
                      self.d.http("GET", "/api/runtime")[1]["data"]["nvml"]
                      ["status"], "NVML back")
        # a process query that fails: a stop cannot show the GPU free
        a = self.install(manifest("pq", ["sh", "-c", "sleep 1000"]))
        self.write_nvml("proc_err %s 999\n" % GPU_A)
        st, b = self.stop_app("pq")
        self.assertEqual(b["state"], "releasing", b)
        self.write_nvml()
        self.wait_state("pq", "stopped")
        self.assertIsNotNone(a)


class EnvironmentTest(RuntimeBase):
    """Issue 25, item 4: an app starts from an allowlist, not from acceld's
    environment. acceld runs with a secret, a PATH through /root and a
    working directory of its own; none of them reaches the app, while the
    locale, TZ, TERM, run.env and acceld's own variables do."""
    SECRET = "s3cret-of-the-operator"
    acceld_env = {
        "OPERATOR_SECRET": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET,
        "PATH": "/root/.local/bin:/root/bin:" + os.environ.get(
            "PATH", "/usr/bin:/bin"),
        "PWD": "/root/private", "OLDPWD": "/root", "SHELL": "/bin/bash",
        "MAIL": "/var/mail/root", "LD_LIBRARY_PATH": "/root/lib",
        "LANG": "C.UTF-8", "LC_TIME": "C", "TZ": "UTC", "TERM": "dumb"}

    def test_app_environment_is_an_allowlist(self):
        m = manifest("envdump", ["sleep", "1000"])
        m["run"]["env"] = {"FROM_MANIFEST": "yes", "TZ": "Europe/Berlin"}
        a = self.install(m)
        self.assertEqual(a["state"], "running", a)
        env = self.environ(a["pid"])
        for k, v in env.items():  # (the build tree may be under /root)
            for leak in (self.SECRET, "/root/.local/bin", "/root/private"):
                self.assertNotIn(leak, v, k)
        for k in ("OPERATOR_SECRET", "AWS_SECRET_ACCESS_KEY", "PWD",
                  "OLDPWD", "MAIL", "LD_LIBRARY_PATH", "ACCEL_NVML_LIB",
                  "ACCEL_FAKE_NVML"):
            self.assertNotIn(k, env)
        self.assertEqual(env["PATH"], "/usr/local/bin:/usr/bin:/bin")
        self.assertEqual(env["SHELL"], "/bin/sh")
        self.assertEqual(env["LANG"], "C.UTF-8")
        self.assertEqual(env["LC_TIME"], "C")
        self.assertEqual(env["TERM"], "dumb")
        self.assertEqual(env["TZ"], "Europe/Berlin")  # run.env wins
        self.assertEqual(env["FROM_MANIFEST"], "yes")
        self.assertEqual(env["ACCEL_APP"], "envdump")
        self.assertEqual(env["CUDA_VISIBLE_DEVICES"], GPU_A)
        for k in ("HOME", "USER", "LOGNAME"):
            self.assertTrue(env.get(k), k)
        allowed = {"PATH", "SHELL", "HOME", "USER", "LOGNAME", "LANG",
                   "LC_TIME", "TZ", "TERM", "FROM_MANIFEST",
                   "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                   "LD_PRELOAD"}
        extra = [k for k in env
                 if k not in allowed and not k.startswith("ACCEL_")]
        self.assertEqual(extra, [], env)

    def test_run_env_path_is_searched(self):
        m = manifest("envpath", ["sleep", "1000"])
        m["run"]["env"] = {"PATH": "/nonexistent:/usr/bin:/bin"}
        a = self.install(m)
        self.assertEqual(a["state"], "running", a)
        self.assertEqual(self.environ(a["pid"])["PATH"],
                         "/nonexistent:/usr/bin:/bin")


class NoNvmlTest(unittest.TestCase):
    def test_init_error_then_recovery(self):
        d = Acceld(inventory="", extra_args=[
            "--node-name", NODE, "--reconcile-interval-ms", "100"])
        path = os.path.join(d.tmp, "nvml.txt")
        with open(path, "w") as f:
            f.write(HEADER + "init_err 9\n" + GPU_LINE % GPU_A)
        d.env = {"ACCEL_NVML_LIB": FAKE_NVML, "ACCEL_FAKE_NVML": path}
        with d:
            st, b = d.http("GET", "/api/runtime")
            self.assertEqual(st, 200, b)
            self.assertFalse(b["data"]["nvml"]["loaded"])
            self.assertIn("nvmlInit_v2 failed", b["data"]["nvml"]["status"])
            self.assertEqual([x["mode"] for x in b["data"]["devices"]],
                             ["cpu"])
            r = d.ctl("gpu", "status")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("not loaded", r.stdout)
            with open(path, "w") as f:
                f.write(HEADER + GPU_LINE % GPU_A)
            deadline = time.time() + 10
            while time.time() < deadline:
                st, ev = d.http("GET", "/api/events?kind=device.new")
                if any(e.get("device") == GPU_A for e in ev["data"]):
                    break
                time.sleep(0.05)
            else:
                self.fail("no device.new event after NVML came back")
            st, b = d.http("GET", "/api/runtime")
            self.assertTrue(b["data"]["nvml"]["loaded"])

    def test_no_library(self):
        with Acceld(inventory="", extra_args=["--node-name", NODE],
                    env={"ACCEL_NVML_LIB": "/nonexistent/libnvidia-ml.so.1"}
                    ) as d:
            r = d.ctl("gpu", "status")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("not loaded", r.stdout)
            self.assertIn("not found", r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
