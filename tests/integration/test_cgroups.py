# SPDX-License-Identifier: MIT
"""Apps are cgroups (SPEC 8.2) and stops do not hold the server (SPEC 5.6),
through the real binaries on this machine's cgroup hierarchies:

- the escape tricks (setsid, a double fork, `env -i`, a daemon whose leader
  exits 0) are still the app's: the app stays `running` while an orphan
  lives, and after a stop nothing is left;
- an app that allocates past its limitedMemory ends `failed`, killed by the
  kernel, with the reason said;
- four apps that ignore SIGTERM stopped at once: every request answers at
  once while they wait for their kill, /healthz and GET /api/apps meanwhile
  in well under a second;
- acceld SIGKILLed and restarted finds a running app by its cgroup (even
  when its leader died meanwhile) and a stop under way, and finishes both;
- the enforcement tiers are reported per node and per app;
- no cgroup is left behind (RuntimeBase.tearDown checks accel.slice/<inst>).

Skipped where the machine offers no writable cgroup hierarchy."""
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import (cgroup_dirs, cgroup_instance, device,  # noqa: E402
                           inventory, node)
from test_runtime import (NODE, RuntimeBase, alive, manifest,  # noqa: E402
                          proc_stat)

GPUS = tuple("GPU-%08x-0000-4000-8000-%012x" % (0xc0000000 + i, i)
             for i in range(1, 5))

INVENTORY4 = inventory(node(NODE, *(
    device(g, "NVIDIA GeForce RTX 4090", "24Gi", "Exclusive", index=i)
    for i, g in enumerate(GPUS))))


def app_procs(instance, name):
    """Live pids whose /proc/<pid>/cgroup puts them in the app's cgroup,
    read independently of acceld."""
    tail = "/accel.slice/%s/%s" % (instance, name)
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open("/proc/%s/cgroup" % e) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        if any(ln.endswith(tail) for ln in lines) and alive(int(e)):
            out.append(int(e))
    return out


def environ_of(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return None


class CgroupBase(RuntimeBase):
    gpus = GPUS
    inventory = INVENTORY4

    def setUp(self):
        super().setUp()
        node = [n for n in self.d.http("GET", "/api/compute-resources")[1]
                ["data"] if n["nodeName"] == NODE][0]
        self.enf = node["enforcement"]
        if self.enf["containment"] == "none":
            self.skipTest("no cgroup containment here: %s" %
                          self.enf["reasons"].get("containment"))
        self.inst = cgroup_instance(self.d.data_dir)

    def procs(self, name):
        return app_procs(self.inst, name)

    def wait_ready(self, name):
        """Wait until the app printed "ready" (a SIGTERM before its trap
        would end it at once)."""
        self.wait_for(lambda: "ready" in self.d.app_log(name),
                      "app %s to be ready" % name)

    def in_background(self, method, path):
        """Send a request that parks (a stop) from a thread; the thread's
        result is (status, body) or the OSError."""
        out = {}

        def run():
            try:
                out["r"] = self.d.http(method, path, timeout=30)
            except OSError as e:
                out["r"] = e
        t = threading.Thread(target=run)
        t.start()
        return t, out

    def install_on(self, m, i):
        return self.install(m, gpu=GPUS[i])


class InstanceTest(CgroupBase):
    def test_instance_is_the_documented_hash_and_is_removed(self):
        # the node says where its apps' cgroups are: accel.slice/<instance>
        self.assertTrue(self.enf["cgroup"].endswith(
            "/accel.slice/" + self.inst), self.enf)
        self.assertEqual(self.enf["pidsMax"], 4096)
        # the directories exist only while an app needs them
        self.assertEqual(cgroup_dirs(self.inst), [])
        for k in ("containment", "memory", "cpu", "pids"):
            self.assertIn(self.enf[k], ("cgroup-v2", "cgroup-v1", "none"))
            if self.enf[k] == "none":  # never a silent claim
                self.assertTrue(self.enf["reasons"][k], self.enf)
        # the same in /api/runtime and `accelctl gpu status`
        st, rt = self.d.http("GET", "/api/runtime")
        self.assertEqual(rt["data"]["enforcement"], self.enf)
        r = self.d.ctl("gpu", "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("App limits: containment %s, memory %s, cpu %s, "
                      "pids %s, disk %s (cgroups under %s)" % (
                          self.enf["containment"], self.enf["memory"],
                          self.enf["cpu"], self.enf["pids"],
                          self.enf["disk"], self.enf["cgroup"]), r.stdout)
        # an app: its limits and which tier enforces them
        a = self.install_on(manifest("lim", ["sleep", "1000"]), 0)
        e = a["enforcement"]
        self.assertEqual(e["containment"], self.enf["containment"])
        self.assertEqual(e["memory"], self.enf["memory"])
        self.assertEqual(e["cgroup"], self.enf["cgroup"] + "/lim")
        self.assertEqual(self.wait_for(lambda: self.procs("lim"),
                                       "the app in its cgroup"), [a["pid"]])
        dirs = cgroup_dirs(self.inst)
        self.assertTrue(dirs, "no accel.slice/%s made" % self.inst)
        for d in dirs:
            self.assertTrue(os.path.isdir(os.path.join(d, "lim")), d)
        self.stop_app("lim")
        # the app's cgroups are gone once it is, and the instance's with
        # them (it was the last app): a SIGKILLed acceld with no app
        # running leaves nothing behind
        self.assertEqual(cgroup_dirs(self.inst), [])


class EscapeTest(CgroupBase):
    """Each trick leaves a process that the old process-group stop missed:
    a new session, and (but for plain setsid) no ACCEL_APP in its
    environment."""

    def escape(self, name, script, untagged):
        a = self.install_on(manifest(name, ["sh", "-c", script]), 0)
        self.assertEqual(a["state"], "running", a)
        tag = b"ACCEL_APP=" + name.encode()

        def escaped():
            out = []
            for p in self.procs(name):
                env = environ_of(p)
                if p == a["pid"] or env is None:
                    continue  # the leader, or gone
                if untagged and tag in env:
                    continue  # an intermediate shell, not the escapee
                if proc_stat(p)[1] != a["pid"]:  # left the leader's group
                    out.append(p)
            return out
        self.wait_for(escaped, "the escaped process")
        pids = self.procs(name)
        st, b = self.stop_app(name)
        self.assertEqual(b["state"], "stopped", b)
        self.assertEqual(b["allocations"], [])
        for p in pids:
            self.assertFalse(alive(p), "pid %d survived the stop" % p)
        self.assertEqual(self.procs(name), [])

    def test_setsid(self):
        self.escape("ss", "setsid sleep 1000 & exec sleep 1000", False)

    def test_setsid_env_i(self):
        self.escape("ei", "setsid env -i /bin/sleep 1000 & exec sleep 1000",
                    True)

    def test_double_fork(self):
        self.escape("df", "(setsid env -i /bin/sleep 1000 &) ; "
                    "exec sleep 1000", True)

    def test_daemon_whose_leader_exits_zero_keeps_the_app_running(self):
        a = self.install_on(manifest(
            "dmn", ["sh", "-c", "setsid env -i /bin/sleep 1000 & exit 0"]),
            0)
        orphan = self.wait_for(lambda: [p for p in self.procs("dmn")
                                        if p != a["pid"]], "the daemon")[0]
        self.wait_for(lambda: not alive(a["pid"]), "the leader to exit")
        # the leader is gone, the cgroup is not: the app is still running
        # and keeps its GPU (several supervisor rounds later)
        deadline = time.time() + 1.0
        while time.time() < deadline:
            x = self.app("dmn")
            self.assertEqual(x["state"], "running", x)
            self.assertEqual([r["deviceId"] for r in x["allocations"]],
                             [GPUS[0]])
            time.sleep(0.1)
        self.assertTrue(alive(orphan))
        st, b = self.stop_app("dmn")
        self.assertEqual(b["state"], "stopped", b)
        self.assertFalse(alive(orphan), "the daemon survived the stop")
        self.assertEqual(self.device(GPUS[0])["bindings"], [])

    def test_daemon_that_ends_by_itself_ends_the_app(self):
        self.install_on(manifest(
            "dend", ["sh", "-c", "setsid env -i /bin/sleep 1.5 & exit 0"]), 0)
        self.wait_for(lambda: self.procs("dend"), "the daemon")
        self.assertEqual(self.app("dend")["state"], "running")
        a = self.wait_state("dend", "stopped")
        self.assertEqual(a["allocations"], [])  # released once it is empty


class MemoryLimitTest(CgroupBase):
    def test_allocating_past_limited_memory_fails_the_app(self):
        if self.enf["memory"] == "none":
            self.skipTest(self.enf["reasons"]["memory"])
        # the app runs as its owner's uid: a system python it may execute
        py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") \
            else sys.executable
        m = manifest("hog", [py, "-c",
                             "import time\n"
                             "b = bytearray(b'x') * (256 << 20)\n"
                             "time.sleep(100)\n"])
        for k in ("requiredMemory", "limitedMemory"):
            m["spec"]["accelerator"][0][k] = "64Mi"
        m["spec"]["accelerator"][0]["limitedCpu"] = "2"
        self.install_on(m, 0)
        a = self.wait_state("hog", "failed", timeout=30)
        self.assertIn("out of memory", a.get("reason", ""), a)
        self.assertIn("limitedMemory 64Mi", a["reason"], a)
        self.assertEqual(a["allocations"], [])
        ev = [e for e in self.events("app.state") if e.get("app") == "hog"]
        self.assertTrue(any("out of memory" in e["message"] for e in ev), ev)


class AsyncStopTest(CgroupBase):
    STUBBORN = ["sh", "-c", "trap '' TERM; echo ready; "
                "while :; do sleep 0.1; done"]

    def timed(self, method, path):
        t0 = time.time()
        st, b = self.d.http(method, path, timeout=30)
        return st, b, time.time() - t0

    def test_four_stubborn_stops_hold_no_server_thread(self):
        names = ["st%d" % i for i in range(4)]
        for i, n in enumerate(names):
            self.install_on(manifest(n, self.STUBBORN, stop=3), i)
        for n in names:
            self.wait_ready(n)
        answers = {}

        def stop(n):
            answers[n] = self.timed("POST", "/api/apps/%s/suspend" % n)
        threads = [threading.Thread(target=stop, args=(n,)) for n in names]
        t0 = time.time()
        for t in threads:
            t.start()
        # while the four wait for their kill, the server answers at once
        worst = 0.0
        while time.time() - t0 < 2.0:
            for path in ("/healthz", "/api/apps"):
                st, b, took = self.timed("GET", path)
                self.assertEqual(st, 200, b)
                worst = max(worst, took)
            time.sleep(0.05)
        # still stopping: SIGTERM is ignored until the 3 s timeout
        self.assertEqual(self.app("st0")["state"], "stopping")
        for t in threads:
            t.join(30)
        self.assertLess(worst, 1.0, "a request waited %.2f s" % worst)
        for n in names:
            # parked (no thread held) until the stop ended (SPEC 5.6)
            st, b, took = answers[n]
            self.assertEqual(st, 200, b)
            self.assertEqual(b["data"]["state"], "stopped", b)
            self.assertGreater(took, 2.5, "%s answered before its kill" % n)
        for n in names:
            a = self.wait_state(n, "stopped", timeout=15)
            self.assertEqual(a["allocations"], [])
            self.assertEqual(self.procs(n), [])
        evs = self.events()
        for n in names:  # each step of the stop is an event, in order
            mine = [e for e in evs if e.get("app") == n]
            stopping = [e["ts"] for e in mine if e["kind"] == "app.state"
                        and "is stopping" in e["message"]]
            kill = [e["ts"] for e in mine if e["kind"] == "app.kill"]
            stopped = [e["ts"] for e in mine if e["kind"] == "app.state"
                       and "is stopped" in e["message"]]
            self.assertTrue(stopping and kill and stopped, mine)
            # SIGTERM was ignored: the kill came after the 3 s timeout
            self.assertGreaterEqual(kill[0] - stopping[-1], 2900, mine)
            self.assertLessEqual(kill[0], stopped[-1])

    def test_other_operations_wait_their_turn(self):
        self.install_on(manifest("busy", self.STUBBORN, stop=2), 0)
        self.wait_ready("busy")
        t, out = self.in_background("POST", "/api/apps/busy/suspend")
        self.wait_state("busy", "stopping")
        st, b = self.d.http("POST", "/api/apps/busy/resume", {})
        self.assertEqual(st, 409, b)
        self.assertIn("stopping", b.get("message", str(b)))
        st, b = self.d.http("DELETE", "/api/apps/busy")
        self.assertEqual(st, 409, b)
        t.join(30)
        self.assertEqual(out["r"][0], 200, out)
        self.assertEqual(out["r"][1]["data"]["state"], "stopped", out)

    def test_uninstall_stops_then_deletes(self):
        self.install_on(manifest("gone", self.STUBBORN, stop=1), 0)
        self.wait_ready("gone")
        pids = self.procs("gone")
        st, b = self.d.http("DELETE", "/api/apps/gone", timeout=30)
        # parked until the stop (1 s, then the kill) and the delete ended
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["state"], "uninstalled", b)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/gone")[0] == 404,
                      "the app to be deleted", timeout=15)
        for p in pids:
            self.assertFalse(alive(p))
        self.assertEqual(self.device(GPUS[0])["bindings"], [])
        kinds = [e["kind"] for e in self.events() if e.get("app") == "gone"]
        self.assertIn("app.uninstall", kinds)


class AdoptTest(CgroupBase):
    def kill_acceld(self):
        self.d.kill()

    def test_restart_adopts_by_cgroup_after_the_leader_died(self):
        a = self.install_on(manifest(
            "ad", ["sh", "-c", "setsid env -i /bin/sleep 1000 & "
                   "exec sleep 1000"]), 0)
        orphan = self.wait_for(lambda: [p for p in self.procs("ad")
                                        if p != a["pid"]], "the daemon")[0]
        self.kill_acceld()
        os.kill(a["pid"], 9)  # the leader dies while acceld is down
        self.wait_for(lambda: not alive(a["pid"]), "the leader to die")
        self.d.start()
        # its cgroup still holds the daemon: the app is running, managed
        time.sleep(0.5)  # several supervisor rounds
        x = self.app("ad")
        self.assertEqual(x["state"], "running", x)
        self.assertEqual([r["deviceId"] for r in x["allocations"]],
                         [GPUS[0]])
        st, b = self.stop_app("ad")
        self.assertEqual(b["state"], "stopped", b)
        self.assertFalse(alive(orphan), "the adopted daemon survived")
        self.assertEqual(self.device(GPUS[0])["bindings"], [])

    def test_restart_finishes_a_stop_under_way(self):
        a = self.install_on(manifest("mid", AsyncStopTest.STUBBORN, stop=2),
                            0)
        self.wait_ready("mid")
        t, _ = self.in_background("POST", "/api/apps/mid/suspend")
        self.wait_state("mid", "stopping")
        self.kill_acceld()
        t.join(30)
        self.assertTrue(alive(a["pid"]))
        self.d.start()
        self.assertEqual(self.app("mid")["state"], "stopping")
        x = self.wait_state("mid", "stopped", timeout=15)
        self.assertEqual(x["allocations"], [])
        self.assertFalse(alive(a["pid"]))
        self.assertEqual(self.procs("mid"), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
