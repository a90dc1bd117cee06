# SPDX-License-Identifier: MIT
"""Live quotas (SPEC 4.4, issue 46 item 4): PUT /api/apps/{name}/
compute-resources/bindings/{deviceId} {memory} and accelctl app set-quota,
through a real acceld started the README's way (from its directory, with
a relative --data-dir).

A cut lands at once in the shim's ledger and config: a running stand-in
app (cuda_hold, linked against the tests' fake libcuda.so.1, with
libaccelshim.so preloaded by acceld) above its new quota gets its next
allocation refused; a raise past the quota it started with is taken by the
same process at its next allocation. A raise passes SPEC 2's checks and
the owner's limits, and a refusal names the numbers; bad input and a
member acting on another's app change nothing. The legacy and HAMi views
and the app's JSON show the quota; an event app.quota says old, new and
who."""
import glob
import os
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import (BUILD_DIR, Acceld, device, inventory,  # noqa: E402
                           manifest, node, wait_for)

HOLD = os.path.join(BUILD_DIR, "tests", "integration", "cuda_hold")
SHIM = os.path.join(BUILD_DIR, "src", "shim", "libaccelshim.so")
GPU = "GPU-1ab00000-0000-4000-8000-0000000000c1"
EXCL = "GPU-1ab00000-0000-4000-8000-0000000000c2"
MiB = 1 << 20
GiB = 1 << 30

INVENTORY = inventory(node("lab", device(GPU),
                           device(EXCL, support="Exclusive")))


def quota_path(app, dev=GPU):
    return "/api/apps/%s/compute-resources/bindings/%s" % (app, dev)


def ledger_limit(path):
    """The limit and epoch of a ledger file (include/accel/ledger.h)."""
    with open(path, "rb") as f:
        b = f.read(64)
    limit, _used, _peak, epoch = struct.unpack_from("<QqQQ", b, 24)
    return limit, epoch


class LiveQuotaTest(accel_harness.OwnAcceld):
    inventory = INVENTORY
    acceld_args = ("--node-name", "lab")

    def setUp(self):
        # the README's way: from acceld's directory, --data-dir ./data
        self.d = Acceld(inventory=self.inventory, relative=True,
                        extra_args=self.acceld_args,
                        env={"ACCEL_LOG": os.environ.get("DBG_SHIM", "")})
        self.addCleanup(self.d.close)
        self.d.start()

    def wait_for(self, pred, what, timeout=20):
        return wait_for(self, pred, what, timeout, step=0.1)

    def install(self, name, mem, dev=GPU, run=None, token=None):
        m = manifest(name, "1Gi", mem="64Mi", cpu="100m", disk="1Mi")
        if run is not None:
            m["run"] = {"command": run,
                        "env": {"ASAN_OPTIONS":
                                "verify_asan_link_order=0:detect_leaks=0"},
                        "stopTimeoutSeconds": 2}
        bind = {"nodeName": "lab", "deviceId": dev}
        if mem is not None:
            bind["memory"] = mem
        st, b = self.d.http("POST", "/api/apps",
                            {"manifest": m, "computeBinding": [bind]},
                            token=token)
        self.assertEqual(st, 200, b)
        self.assertEqual(b.get("code"), 200, b)
        return b["data"]

    def quota(self, app, dev=GPU, token=None):
        st, b = self.d.http("GET", "/api/apps/" + app, token=token)
        self.assertEqual(st, 200, b)
        return [a["memory"] for a in b["data"]["allocations"]
                if a["deviceId"] == dev][0]

    def quota_events(self, app):
        st, b = self.d.http("GET", "/api/events?app=" + app)
        self.assertEqual(st, 200, b)
        return [e for e in b["data"] if e["kind"] == "app.quota"]

    def set_quota(self, app, memory, dev=GPU, token=None):
        return self.d.http("PUT", quota_path(app, dev), {"memory": memory},
                           token=token)

    @unittest.skipUnless(os.path.exists(HOLD) and os.path.exists(SHIM),
                         "cuda_hold or libaccelshim.so not built")
    def test_cut_refuses_then_raise_allows_in_the_running_app(self):
        go1 = os.path.join(self.d.tmp, "go1")
        go2 = os.path.join(self.d.tmp, "go2")
        # 512 MiB under its 1 GiB quota; then (after the cut to 256 MiB)
        # 256 MiB more; then (after the raise to 2 GiB) 1 GiB more
        self.install("hold", GiB,
                     run=[HOLD, "512", "@" + go1, "256", "@" + go2, "1024"])
        self.wait_for(lambda: "waiting" in self.d.app_log("hold"),
                      "the app's first allocation")
        self.assertIn("alloc 512 MiB: 0", self.d.app_log("hold"))
        ledger = glob.glob(os.path.join(self.d.data_dir, "run", "ledgers",
                                        "hold-*"))
        self.assertEqual(len(ledger), 1, ledger)
        limit0, epoch0 = ledger_limit(ledger[0])
        self.assertEqual(limit0, GiB)

        # the cut, over HTTP: at once in the store's view, the ledger and
        # the config; the app holds 512 MiB, above it
        st, b = self.set_quota("hold", "256Mi")
        self.assertEqual(st, 200, b)
        self.assertEqual([a["memory"] for a in b["data"]["allocations"]],
                         [256 * MiB], b)
        limit, epoch = ledger_limit(ledger[0])
        self.assertEqual(limit, 256 * MiB)
        self.assertGreater(epoch, epoch0)
        cfg = os.path.join(self.d.data_dir, "run", "apps", "hold",
                           "shim.conf")
        with open(cfg) as f:
            self.assertIn("device 0 %d " % (256 * MiB), f.read())
        self.assertEqual(os.stat(cfg).st_mode & 0o777, 0o444)
        ev = self.quota_events("hold")
        self.assertEqual(len(ev), 2, ev)  # the cut, and "holds ... above"
        cut = [e for e in ev if (e.get("data") or {}).get("change")][0]
        self.assertEqual((cut["data"]["old"], cut["data"]["new"],
                          cut["data"]["by"]), (GiB, 256 * MiB, "admin"), cut)
        over = [e for e in ev if e is not cut][0]
        self.assertIn("above its new quota", over["message"])
        self.assertEqual(over["data"]["held"], 512 * MiB, over)
        open(go1, "w").close()
        self.wait_for(lambda: "alloc 256 MiB:" in self.d.app_log("hold"),
                      "the allocation after the cut")
        self.assertIn("alloc 256 MiB: 2", self.d.app_log("hold"))

        # the raise, through accelctl: past the 1 GiB the app started with
        p = self.d.ctl("app", "set-quota", "hold", GPU, "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("Quota of hold on %s: 2Gi (it holds 512Mi)" % GPU, p.stdout)
        self.assertEqual(ledger_limit(ledger[0])[0], 2 * GiB)
        self.assertEqual(self.quota("hold"), 2 * GiB)
        open(go2, "w").close()
        self.wait_for(lambda: "ready" in self.d.app_log("hold"),
                      "the allocation after the raise")
        out = self.d.app_log("hold")
        self.assertIn("alloc 1024 MiB: 0", out)  # 1.5 GiB held, under 2
        self.assertIn("total 2048 MiB free 512 MiB", out)

        # the views follow: legacy (MiB), HAMi (MiB), the binding list
        st, b = self.d.http("GET", "/api/gpu/list")
        g = [x for x in b["data"] if x["id"] == GPU][0]
        self.assertEqual([a["memory"] for a in g["apps"]
                          if a["appName"] == "hold"], [2048], g)
        st, b = self.d.http("POST", "/hami/api/vgpu/v1/containers", {})
        c = [x for x in b["items"] if x["appName"] == "hold"][0]
        self.assertEqual(c["allocatedMem"], 2048, c)
        st, b = self.d.http("GET", "/api/apps/hold/compute-resources/"
                            "bindings")
        self.assertEqual(b["data"][0]["memory"], 2 * GiB, b)
        # and /metrics
        metrics = self.metrics()
        self.assertIn('accel_app_quota_bytes{app="hold",owner="admin",'
                      'node="lab",device="%s"} %d' % (GPU, 2 * GiB), metrics)

    def metrics(self):
        import urllib.request
        req = urllib.request.Request(
            self.d.url + "/metrics",
            headers={"Authorization": "Bearer " + self.d.token})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read().decode()

    def test_raise_admitted_by_the_rules_with_numbers(self):
        self.install("big", 12 * GiB)   # no run: holds the card's quota
        self.install("small", 2 * GiB)
        # 16 Gi card, 12 to big: small may reach 4 Gi, not one byte more
        st, b = self.set_quota("small", 4 * GiB + 1)
        self.assertEqual(st, 409, b)
        self.assertEqual(b["error"], "device-vram-insufficient:" + GPU, b)
        for figure in ("16Gi", "4Gi", "2Gi", str(4 * GiB + 1)):
            self.assertIn(figure, b["message"])
        self.assertEqual(self.quota("small"), 2 * GiB)
        self.assertEqual(self.quota_events("small"), [])
        p = self.d.ctl("app", "set-quota", "small", GPU, "5Gi")
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("device-vram-insufficient", p.stderr + p.stdout)
        self.assertIn("16Gi", p.stderr + p.stdout)
        self.assertEqual(self.quota("small"), 2 * GiB)
        # the refusal is an event with its numbers
        st, b = self.d.http("GET", "/api/events?app=small")
        ref = [e for e in b["data"] if "not raised" in e["message"]]
        self.assertTrue(ref, b["data"])
        self.assertEqual(ref[-1]["data"]["free"], 4 * GiB, ref[-1])
        st, b = self.set_quota("small", "4Gi")
        self.assertEqual(st, 200, b)
        self.assertEqual(self.quota("small"), 4 * GiB)
        # the card is full now: the legacy view says so
        st, b = self.d.http("GET", "/api/gpu/list")
        g = [x for x in b["data"] if x["id"] == GPU][0]
        self.assertEqual(g["memoryAvailable"], 0, g)
        # a cut frees room at once: big may grow into it
        st, b = self.set_quota("small", "1Gi")
        self.assertEqual(st, 200, b)
        st, b = self.set_quota("big", "15Gi")
        self.assertEqual(st, 200, b)
        # the same quota again: nothing written, no event
        n = len(self.quota_events("big"))
        st, b = self.set_quota("big", 15 * GiB)
        self.assertEqual(st, 200, b)
        self.assertEqual(len(self.quota_events("big")), n)
        # an Exclusive card's binding has no quota to change
        self.install("whole", None, dev=EXCL)
        st, b = self.set_quota("whole", "1Gi", dev=EXCL)
        self.assertEqual(st, 409, b)
        self.assertEqual(b["error"], "quota-not-editable", b)

    def test_bad_input_changes_nothing(self):
        self.install("app1", 2 * GiB)
        cases = [
            ({}, 400, "memory is required"),
            ({"memory": None}, 400, "memory is required"),
            ({"memory": ""}, 400, "memory must be"),
            ({"memory": -1}, 400, "memory must be"),
            ({"memory": 0}, 400, "memory must be"),
            ({"memory": "-1Gi"}, 400, "memory must be"),
            ({"memory": "0"}, 400, "memory must be"),
            ({"memory": "lots"}, 400, "memory must be"),
            ({"memory": "8Qi"}, 400, "memory must be"),
            ({"memory": 1.5e9}, 400, "memory must be"),
            ({"memory": True}, 400, "memory must be"),
            ({"memory": [1]}, 400, "memory must be"),
            ({"memory": "99999999999Ei"}, 400, "memory must be"),
            ({"memory": 2 ** 62 + 1}, 400, "memory must be"),
            ({"memory": "17Gi"}, 400, "at most the card's memory"),
            ({"memory": "1Gi", "force": True}, 400, "force is not a field"),
        ]
        for body, status, words in cases:
            st, b = self.d.http("PUT", quota_path("app1"), body)
            self.assertEqual(st, status, (body, b))
            self.assertIn(words, b["message"], (body, b))
            self.assertIn("memory" if "force" not in body else "force",
                          b["message"])
        # a number past JSON's integers, and a body that is not JSON
        for raw in (b'{"memory": 99999999999999999999999}', b'{"memory":',
                    b'[]'):
            st, b = self.raw_put(quota_path("app1"), raw)
            self.assertEqual(st, 400, (raw, b))
        st, b = self.set_quota("app1", "1Gi", dev="GPU-nope")
        self.assertEqual((st, b["error"]), (404, "device-not-found"), b)
        st, b = self.set_quota("app1", "1Gi", dev=EXCL)
        self.assertEqual((st, b["error"]), (404, "binding-not-found"), b)
        st, b = self.set_quota("nosuch", "1Gi")
        self.assertEqual(st, 404, b)
        self.assertEqual(self.quota("app1"), 2 * GiB)
        self.assertEqual(self.quota_events("app1"), [])
        # accelctl refuses a bad SIZE itself (exit 2), and acceld's 400
        p = self.d.ctl("app", "set-quota", "app1", GPU, "lots")
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertIn("SIZE", p.stderr)
        p = self.d.ctl("app", "set-quota", "app1", GPU, "20Gi")
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("at most the card's memory", p.stderr + p.stdout)
        self.assertEqual(self.quota("app1"), 2 * GiB)

    def raw_put(self, path, raw):
        import json
        import urllib.error
        import urllib.request
        req = urllib.request.Request(
            self.d.url + path, data=raw, method="PUT",
            headers={"Authorization": "Bearer " + self.d.token,
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def test_members_own_apps_within_their_limits(self):
        toks = {}
        for name in ("alice", "bob"):
            st, b = self.d.http("POST", "/api/users", {"name": name})
            self.assertEqual(st, 200, b)
            toks[name] = b["data"]["token"]
        st, b = self.d.http("PUT", "/api/users/alice",
                            {"maxGpuMemory": "3Gi"})
        self.assertEqual(st, 200, b)
        self.install("al", GiB, token=toks["alice"])
        self.install("adm", GiB)
        # bob cannot see alice's app, nor change it; alice not the admin's
        st, b = self.set_quota("al", "512Mi", token=toks["bob"])
        self.assertEqual(st, 404, b)
        p = self.d.ctl("app", "set-quota", "al", GPU, "512Mi",
                       token=toks["bob"])
        self.assertEqual(p.returncode, 1, p.stdout)
        st, b = self.set_quota("adm", "512Mi", token=toks["alice"])
        self.assertEqual(st, 404, b)
        self.assertEqual(self.quota("al"), GiB)
        self.assertEqual(self.quota("adm"), GiB)
        # a shared app: a member sees it, only an admin changes it
        m = manifest("sh", "1Gi", mem="64Mi", cpu="100m", disk="1Mi",
                     shared=True)
        st, b = self.d.http("POST", "/api/apps", {
            "manifest": m, "computeBinding": [{"nodeName": "lab",
                                               "deviceId": GPU,
                                               "memory": GiB}]})
        self.assertEqual((st, b.get("code")), (200, 200), b)
        st, b = self.set_quota("sh", "512Mi", token=toks["alice"])
        self.assertEqual(st, 403, b)
        self.assertIn("only an admin", b["message"])
        self.assertEqual(self.quota("sh"), GiB)
        # alice within her 3 Gi: a cut, a raise to 3 Gi; not past it
        st, b = self.set_quota("al", "512Mi", token=toks["alice"])
        self.assertEqual(st, 200, b)
        st, b = self.set_quota("al", "3Gi", token=toks["alice"])
        self.assertEqual(st, 200, b)
        st, b = self.set_quota("al", 3 * GiB + MiB,
                               token=toks["alice"])
        self.assertEqual((st, b["error"]), (403, "user-limit"), b)
        self.assertIn("at most 3Gi", b["message"])
        self.assertEqual(self.quota("al", token=toks["alice"]), 3 * GiB)
        ev = self.quota_events("al")
        self.assertEqual([(e["data"]["by"], e["data"]["new"]) for e in ev],
                         [("alice", 512 * MiB), ("alice", 3 * GiB)], ev)
        # the admin may change any app (the owner's limits still hold)
        st, b = self.set_quota("al", "2Gi")
        self.assertEqual(st, 200, b)
        self.assertEqual(self.quota_events("al")[-1]["data"]["by"], "admin")


if __name__ == "__main__":
    unittest.main()
