# SPDX-License-Identifier: MIT
"""Time slicing through acceld, end to end, by the config-file path: acceld
starts apps bound to a local TimeSlice device; runtime.c writes the
`timeslice <ordinal> <socket>` line into each app's shim config; the app's
process (cuda_spin, linked against the tests' fake libcuda.so.1, with
libaccelshim.so preloaded by acceld) connects to the device's broker, and
the device's `timeSlice` object in GET /api/compute-resources shows it as
the holder; two such apps take turns (both turn counters grow), and
`accelctl timeslice` shows them.

This proves the wiring and the protocol, not a real GPU."""
import os
import struct
import socket
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import (BUILD_DIR, device, inventory, manifest,  # noqa: E402
                           node)

SPIN = os.path.join(BUILD_DIR, "tests", "integration", "cuda_spin")
HOLD = os.path.join(BUILD_DIR, "tests", "integration", "cuda_hold")
ATTACKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "card_attacker.py")
SHIM = os.path.join(BUILD_DIR, "src", "shim", "libaccelshim.so")
GPU = "GPU-1ab00000-0000-4000-8000-00000000001b"

INVENTORY = inventory(node("lab", device(GPU, support="TimeSlice")))


def app(name):
    m = manifest(name, "1Gi", mem="64Mi", cpu="100m", disk="1Mi")
    # 2 ms simulated kernels, synchronized every 8: the process sleeps
    # most of the time (the fake driver's simulated GPU time)
    m["run"] = {"command": [SPIN, "2000"],
                "env": {"FAKE_CUDA_LOG": "/dev/null",
                        "ASAN_OPTIONS":
                        "verify_asan_link_order=0:detect_leaks=0"},
                "stopTimeoutSeconds": 2}
    return m


@unittest.skipUnless(os.path.exists(SPIN) and os.path.exists(SHIM),
                     "cuda_spin or libaccelshim.so not built")
class TimesliceRuntimeTest(accel_harness.OwnAcceld):
    inventory = INVENTORY
    acceld_args = ("--node-name", "lab")

    def tearDown(self):
        for a in ("ts-a", "ts-b"):
            self.d.http("DELETE", "/api/apps/" + a)

    def wait_for(self, pred, what, timeout=15):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = pred()
            if last:
                return last
            time.sleep(0.1)
        self.fail("timed out waiting for %s (last: %r; acceld log: %s)" %
                  (what, last, self.d.log()[-1500:]))

    def log(self, name):
        return self.d.app_log(name)

    def dev(self):
        st, b = self.d.http("GET", "/api/compute-resources")
        self.assertEqual(st, 200, b)
        return [x for n in b["data"] for x in n["devices"]
                if x["id"] == GPU][0]

    def ts(self):
        return self.dev()["timeSlice"]

    def turns(self):
        return {a["app"]: a["turns"] for a in self.ts().get("apps", [])}

    def test_config_line_holder_and_turns(self):
        self.wait_for(lambda: self.ts().get("running"), "the broker")
        st, b = self.d.http(
            "PUT", "/api/compute-resources/nodes/lab/devices/%s/time-slice"
            % GPU, {"quantumMs": 100, "idleReleaseMs": 50})
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.ts()["quantumMs"] == 100, "the settings")
        dev = self.dev()
        self.assertEqual(dev["enforcement"]["compute"], "broker")
        sock = self.ts()["socket"]

        # one app: the config names the broker's socket; the app holds
        st, b = self.d.http("POST", "/api/apps", {"manifest": app("ts-a")})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["state"], "running", b)
        cfg = os.path.join(self.d.data_dir, "run", "apps", "ts-a",
                           "shim.conf")
        with open(cfg) as f:
            text = f.read()
        line = [l for l in text.splitlines()
                if l.startswith("timeslice 0 %s " % sock)]
        self.assertEqual(len(line), 1, text)
        # the card's ledger (issue 35): the apps' memory that cannot be
        # evicted at a turn switch is reserved there, card-wide. No file
        # (issue cardled: an app could cut a shared file short under the
        # others' mappings): the broker hands each admitted process a
        # sealed memfd; acceld holds it; its limit is the card
        self.assertEqual(line[0].split()[3], "@broker", line)
        self.assertFalse(os.path.exists(os.path.join(self.d.data_dir, "run",
                                                     "cards")))
        card = self.wait_for(self.acceld_card, "acceld's card ledger")
        with open(card, "rb") as f:
            head = f.read(64)
        magic, major = struct.unpack_from("<QH", head, 0)
        self.assertEqual(magic, 0x52474c4443434155)
        self.assertEqual(major, 1)
        self.assertGreater(struct.unpack_from("<Q", head, 24)[0], 0)
        self.assertIn("app ts-a\n", text)
        self.wait_for(lambda: "running" in self.log("ts-a"), "ts-a to run")
        self.wait_for(lambda: self.ts().get("holder") == "ts-a",
                      "ts-a to hold the turn")
        t = self.ts()
        self.assertEqual(t["queue"], [])
        self.assertEqual(self.turns().get("ts-a"), 1)
        # alone, it keeps the turn (work-conserving): still one turn
        time.sleep(0.6)
        self.assertEqual(self.turns().get("ts-a"), 1)
        self.assertEqual(self.ts().get("holder"), "ts-a")

        # a second app: the two take turns, both counters grow
        st, b = self.d.http("POST", "/api/apps", {"manifest": app("ts-b")})
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: "running" in self.log("ts-b"), "ts-b to run")
        first = self.wait_for(
            lambda: (lambda t: t if t.get("ts-a", 0) >= 2 and
                     t.get("ts-b", 0) >= 2 else None)(self.turns()),
            "both apps to get turns")
        later = self.wait_for(
            lambda: (lambda t: t if t.get("ts-a", 0) > first["ts-a"] and
                     t.get("ts-b", 0) > first["ts-b"] else None)(
                         self.turns()),
            "the turn counters to keep growing")
        self.assertGreater(later["ts-a"], first["ts-a"])
        self.assertGreater(later["ts-b"], first["ts-b"])
        t = self.ts()
        self.assertIn(t.get("holder"), ("ts-a", "ts-b", None))
        self.assertGreaterEqual(t["handoff"]["count"], 3)
        self.assertGreater(t["handoff"]["p50Ms"], 0)
        self.assertGreater(t["waitSeconds"], 0)
        # the CLI shows both apps with their turns
        r = self.d.ctl("timeslice", "lab", GPU)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ts-a", r.stdout)
        self.assertIn("ts-b", r.stdout)
        self.assertIn("p50", r.stdout)

        # stopping the holder app hands the turn to the other at once
        st, b = self.d.http("POST", "/api/apps/ts-a/suspend")
        self.assertEqual(st, 200, b)  # data.state may be stopping (SPEC 5.6)
        def b_alone():
            t = self.ts()
            procs = {a["app"]: a["processes"] for a in t.get("apps", [])}
            return (t.get("holder") == "ts-b" and procs.get("ts-a", 0) == 0
                    and t["queue"] == [] and t) or None
        self.wait_for(b_alone, "ts-b alone to hold")
        # and then keeps it (no more handoffs while alone)
        n = self.ts()["turns"]
        time.sleep(0.6)
        self.assertEqual(self.ts()["turns"], n)
        self.assertEqual(self.ts().get("holder"), "ts-b")

    def acceld_card(self):
        """/proc/<acceld>/fd/<n> of acceld's card memfd (opening it opens
        the memfd), or None."""
        fdd = "/proc/%d/fd" % self.d.proc.pid
        for fd in os.listdir(fdd):
            try:
                if os.readlink(os.path.join(fdd, fd)).startswith(
                        "/memfd:accel-card"):
                    return os.path.join(fdd, fd)
            except OSError:
                continue
        return None

    def card_holders(self):
        """{pid: card memfd inode} of acceld and of this acceld's apps'
        processes (their environment names a config under its data dir),
        from /proc (root's view)."""
        out = {}
        mine = ("ACCEL_CONFIG=" + self.d.data_dir).encode()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if int(pid) != self.d.proc.pid:
                    with open("/proc/%s/environ" % pid, "rb") as f:
                        if mine not in f.read():
                            continue
                fdd = "/proc/%s/fd" % pid
                for fd in os.listdir(fdd):
                    link = os.readlink(os.path.join(fdd, fd))
                    if link.startswith("/memfd:accel-card"):
                        out[int(pid)] = os.stat(os.path.join(fdd, fd)).st_ino
            except OSError:
                continue
        return out

    @unittest.skipUnless(os.path.exists(HOLD), "cuda_hold not built")
    def test_card_ledger_survives_a_hostile_app(self):
        """Issue cardled: every app on a time-sliced card shares its card
        ledger. A hostile app (ts-b) gets hold of it as any app of the card
        can and tries to cut it short, grow it and seal it against writes;
        the other app (ts-a), which has it mapped, allocates on and must
        not die (a shared file cut short faults its mapping: SIGBUS). The
        ledger is a memfd sealed by acceld (no file, nothing to truncate);
        an acceld restart adopts the same memfd from the running apps."""
        self.wait_for(lambda: self.ts().get("running"), "the broker")
        flags = os.path.join(self.d.tmp, "flags")
        os.makedirs(flags)
        os.chmod(flags, 0o777)
        f1, f2 = os.path.join(flags, "attacked"), os.path.join(flags, "again")
        m = app("ts-a")
        # VMM memory (=N): never paged out, so charged to the card ledger
        m["run"]["command"] = [HOLD, "=64", "@" + f1, "=64", "@" + f2, "=64"]
        st, b = self.d.http("POST", "/api/apps", {"manifest": m})
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: "waiting" in self.log("ts-a"),
                      "ts-a's first allocation")
        self.assertIn("create 64 MiB: 0", self.log("ts-a"))

        m = app("ts-b")
        m["run"]["command"] = ["python3", ATTACKER, f1]
        st, b = self.d.http("POST", "/api/apps", {"manifest": m})
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: os.path.exists(f1), "ts-b's attack")
        attack = self.log("ts-b")
        # ts-a allocates on (and asks the card's figures): alive
        self.wait_for(lambda: self.log("ts-a").count("create 64 MiB: 0") >= 2,
                      "ts-a's allocation after the attack (%s)" % attack)
        st, b = self.d.http("GET", "/api/apps/ts-a")
        self.assertEqual(b["data"]["state"], "running", b)
        # every try refused, the ledger whole
        for what in ("truncate", "grow", "seal-write"):
            self.assertIn("%s: EPERM" % what, attack)
        sizes = [l.split()[1::2] for l in attack.splitlines()
                 if l.startswith("size ")]
        self.assertEqual(len(sizes), 1, attack)
        self.assertEqual(sizes[0][0], sizes[0][1], attack)  # unchanged
        cfg = os.path.join(self.d.data_dir, "run", "apps", "ts-a",
                           "shim.conf")
        with open(cfg) as f:
            line = [l for l in f.read().splitlines()
                    if l.startswith("timeslice 0 ")]
        self.assertEqual(len(line), 1, line)
        # no file to truncate: the broker hands the ledger over
        self.assertEqual(line[0].split()[3], "@broker", line)


        # acceld restarts, the apps run on: the new broker adopts the memfd
        # they hold (found through /proc by its identity), not a new one
        before = self.card_holders()
        self.assertIn(self.d.proc.pid, before, before)
        self.assertGreaterEqual(len(before), 3, before)  # acceld, a, b
        self.assertEqual(len(set(before.values())), 1, before)
        self.d.stop()
        self.d.start()
        self.wait_for(lambda: self.ts().get("running"), "the new broker")
        after = self.wait_for(
            lambda: (lambda h: h if self.d.proc.pid in h else None)(
                self.card_holders()), "the new acceld's card ledger")
        self.assertEqual(after[self.d.proc.pid], list(before.values())[0],
                         (before, after, self.d.log()[-1500:]))
        self.assertIn("card ledger adopted", self.d.log())
        with open(f2, "w") as f:
            f.write("go\n")
        self.wait_for(lambda: self.log("ts-a").count("create 64 MiB: 0") >= 3,
                      "ts-a's allocation after the restart")

    def hello(self, sock, name):
        """Connect as this test process (no app's process), claim app
        `name`; what the broker answers, then whether it closed."""
        c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        c.settimeout(10)
        try:
            c.connect(sock)
            c.send(("H 1 %s" % name).encode())
            try:
                c.send(b"R")
            except OSError:
                pass  # refused already
            first = c.recv(256)
            try:
                rest = c.recv(256)
            except socket.timeout:
                rest = None
            return first.decode(), rest
        finally:
            c.close()

    def test_escaped_process_of_the_app_is_admitted(self):
        """The peer check is cgroup membership (SPEC 8.2): a process of the
        app that left its session and group (setsid) is still the app's and
        gets turns; the group/session check refused it."""
        st, nodes = self.d.http("GET", "/api/compute-resources")
        enf = [n for n in nodes["data"] if n["local"]][0]["enforcement"]
        if enf["containment"] == "none":
            self.skipTest("no cgroup containment here")
        self.wait_for(lambda: self.ts().get("running"), "the broker")
        m = app("ts-a")
        m["run"]["command"] = ["sh", "-c",
                               "setsid %s 2000 & exec sleep 1000" % SPIN]
        st, b = self.d.http("POST", "/api/apps", {"manifest": m})
        self.assertIn(st, (200, 201), b)
        self.wait_for(lambda: self.turns().get("ts-a", 0) >= 1,
                      "the setsid'd process of ts-a to get a turn")
        self.assertNotIn("refused pid", self.d.log())

    def test_outsider_refused_and_grace_setting(self):
        """Issue 10, item 6: anyone on the host could connect, claim an app
        name and take the turn. Now only the app's own processes get in."""
        self.wait_for(lambda: self.ts().get("running"), "the broker")
        sock = self.ts()["socket"]
        st, b = self.d.http("POST", "/api/apps", {"manifest": app("ts-a")})
        self.assertIn(st, (200, 201), b)
        self.wait_for(lambda: self.ts().get("holder") == "ts-a",
                      "ts-a to hold the turn")
        first, rest = self.hello(sock, "ts-a")
        self.assertTrue(first.startswith("N pid %d is not a process of app "
                                         "'ts-a'" % os.getpid()), first)
        self.assertEqual(rest, b"", "the broker keeps a refused client")
        first, rest = self.hello(sock, "nosuch")
        self.assertEqual(first, "N no app named 'nosuch' is bound to this "
                         "device")
        self.assertEqual(rest, b"")
        t = self.ts()
        self.assertEqual(t["holder"], "ts-a")
        self.assertEqual(t["queue"], [])
        self.assertEqual([a["app"] for a in t["apps"]], ["ts-a"])
        self.assertEqual(t["apps"][0]["processes"], 1)
        self.assertIn("refused pid %d" % os.getpid(), self.d.log())

        # the revocation grace: default, bounds, counter
        self.assertEqual(t["revokeGraceMs"], 1000)
        self.assertEqual(t["revocations"], 0)
        path = "/api/compute-resources/nodes/lab/devices/%s/time-slice" % GPU
        st, b = self.d.http("PUT", path, {"revokeGraceMs": 5})
        self.assertEqual(st, 400, b)
        self.assertIn("revokeGraceMs must be an integer from 10 to 600000",
                      str(b))
        self.assertEqual(self.ts()["revokeGraceMs"], 1000)
        st, b = self.d.http("PUT", path, {"revokeGraceMs": 250})
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.ts()["revokeGraceMs"] == 250,
                      "the grace setting")
        req = urllib.request.Request(self.d.url + "/metrics", headers={
            "Authorization": "Bearer " + self.d.token})
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
        self.assertIn('accel_timeslice_revocations_total{device="%s"} 0'
                      % GPU, text)

    def test_revocation_event_and_counters(self):
        """A holder that does not give the turn back within the grace loses
        it: ts-a queues 8 kernels of 0.4 s before it synchronizes, so its
        handoff takes up to 3.2 s; with quantum 100 and grace 100 ms the
        broker takes the turn back and ts-b runs. Counted in the view, in
        /metrics, and an event timeslice.revoke names the app."""
        self.wait_for(lambda: self.ts().get("running"), "the broker")
        path = "/api/compute-resources/nodes/lab/devices/%s/time-slice" % GPU
        st, b = self.d.http("PUT", path, {"quantumMs": 100,
                                          "revokeGraceMs": 100})
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.ts()["revokeGraceMs"] == 100,
                      "the settings")
        hog = app("ts-a")
        hog["run"]["command"] = [SPIN, "400000"]
        st, b = self.d.http("POST", "/api/apps", {"manifest": hog})
        self.assertIn(st, (200, 201), b)
        self.wait_for(lambda: self.ts().get("holder") == "ts-a",
                      "ts-a to hold the turn")
        st, b = self.d.http("POST", "/api/apps", {"manifest": app("ts-b")})
        self.assertIn(st, (200, 201), b)
        t = self.wait_for(lambda: (lambda t: t if t["revocations"] >= 1
                                   else None)(self.ts()),
                          "a revocation", timeout=20)
        per_app = {a["app"]: a["revocations"] for a in t["apps"]}
        self.assertGreaterEqual(per_app.get("ts-a", 0), 1, t)
        self.wait_for(lambda: self.turns().get("ts-b", 0) >= 1,
                      "ts-b to get the turn")

        def revoke_events():
            st, ev = self.d.http("GET", "/api/events?kind=timeslice.revoke")
            self.assertEqual(st, 200, ev)
            ev = ev["data"] if isinstance(ev, dict) else ev
            return [e for e in ev if e.get("app") == "ts-a"] or None
        ev = self.wait_for(revoke_events, "the timeslice.revoke event")
        self.assertEqual(ev[0].get("device"), GPU, ev[0])
        self.assertIn("not given back within 100 ms", str(ev[0]))
        req = urllib.request.Request(self.d.url + "/metrics", headers={
            "Authorization": "Bearer " + self.d.token})
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
        line = [x for x in text.splitlines() if x.startswith(
            'accel_timeslice_revocations_total{device="%s"}' % GPU)]
        self.assertEqual(len(line), 1, text[-2000:])
        self.assertGreaterEqual(int(line[0].split()[-1]), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
