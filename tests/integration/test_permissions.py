# SPDX-License-Identifier: MIT
"""Permissions (SPEC 3): no route lets a member stop, unbind or replace an
app it does not own, force included; members see other owners' apps only
as "another user's app" in every view that shows bindings; every 403."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import Acceld  # noqa: E402
import compat_contract as cc  # noqa: E402

G4090 = "GPU-4090aaaa-0000-4000-8000-000000000001"
G4060 = "GPU-4060bbbb-0000-4000-8000-000000000002"
HIDDEN_KEYS = {"appName": "", "owner": "", "hidden": True}


def manifest(name, gpu="4Gi", shared=False):
    return accel_harness.manifest(name, gpu, shared=shared)


class PermissionTest(unittest.TestCase):
    def setUp(self):
        self.d = Acceld().start()
        self.addCleanup(self.d.close)  # also when the rest of setUp fails
        self.alice = self.user("alice")
        self.bob = self.user("bob")

    def call(self, method, path, body=None, token=None):
        return self.d.http(method, path, body, token=token)

    def user(self, name):
        st, b = self.call("POST", "/api/users", {"name": name})
        self.assertEqual(st, 200, b)
        return b["data"]["token"]

    def install(self, m, token=None, **kw):
        body = {"manifest": m}
        body.update(kw)
        st, b = self.call("POST", "/api/apps", body, token=token)
        self.assertEqual(st, 200, b)
        return b["data"]

    def exclusive(self, dev):
        st, b = self.call("PUT", "/api/compute-resources/nodes/homelab/"
                          "devices/" + dev + "/support-type",
                          {"supportType": "Exclusive"})
        self.assertEqual(st, 200, b)

    def state(self, name):
        st, b = self.call("GET", "/api/apps/" + name)
        return b["data"]["state"], [a["deviceId"]
                                    for a in b["data"]["allocations"]]

    def test_member_force_never_evicts(self):
        """A member's force bind on an Exclusive GPU held by another
        member's app, or by a shared app, is 403 and changes nothing; the
        owner's own force still works."""
        self.exclusive(G4060)
        self.exclusive(G4090)
        self.install(manifest("al"), token=self.alice,
                     computeBinding=[{"nodeName": "homelab",
                                      "deviceId": G4060}])
        self.install(manifest("sh", shared=True),
                     computeBinding=[{"nodeName": "homelab",
                                      "deviceId": G4090}])
        # bob's app, installed where it can go and stopped
        st, b = self.call("POST", "/api/apps", {"manifest": manifest("bo")},
                          token=self.bob)
        self.assertEqual(st, 200, b)
        st, b = self.call("POST", "/api/apps/bo/suspend", token=self.bob)
        self.assertEqual(st, 200, b)
        before = {n: self.state(n) for n in ("al", "sh")}
        for dev, victim in ((G4060, "al"), (G4090, "sh")):
            st, b = self.call("POST", "/api/gpu/update/app",
                              {"id": dev, "mode": "0", "appName": "bo",
                               "memory": "0", "force": True}, token=self.bob)
            self.assertEqual(st, 403, b)
            self.assertEqual(b["error"], "forbidden")
            if victim == "al":  # never named to another member
                self.assertNotIn("al", b["message"].replace("alloc", ""))
                self.assertIn("another user's app", b["message"])
            # without force: 409, still without the name
            st, b = self.call("POST", "/api/gpu/update/app",
                              {"id": dev, "mode": "0", "appName": "bo"},
                              token=self.bob)
            self.assertEqual(st, 409, b)
        self.assertEqual({n: self.state(n) for n in ("al", "sh")}, before)
        self.assertEqual(before["al"], ("running", [G4060]))
        self.assertEqual(self.state("bo"), ("stopped", []))
        # the admin may replace
        st, b = self.call("POST", "/api/gpu/update/app",
                          {"id": G4060, "mode": "0", "appName": "bo",
                           "force": True})
        self.assertEqual(st, 200, b)
        self.assertEqual(self.state("al")[0], "stopped")

    def test_every_403_and_404(self):
        self.install(manifest("al", gpu="2Gi"), token=self.alice)
        self.install(manifest("sh", gpu="2Gi", shared=True))
        sh_dev = self.state("sh")[1][0]
        # another member's app: it does not exist for bob
        for method, path, body in [
                ("GET", "/api/apps/al", None),
                ("POST", "/api/apps/al/suspend", None),
                ("POST", "/api/apps/al/resume", {}),
                ("DELETE", "/api/apps/al", None),
                ("GET", "/api/apps/al/compute-resources/bindings", None),
                ("DELETE", "/api/apps/al/compute-resources/bindings", None),
                ("GET", "/api/apps/al/compute-resources/availability", None),
                ("POST", "/api/gpu/update/app",
                 {"id": G4060, "mode": "0", "appName": "al"}),
                ("POST", "/api/gpu/unassign/app",
                 {"id": self.state("al")[1][0], "mode": "0",
                  "appName": "al"}),
                ("PUT", "/api/gpu/assignments/bulk",
                 {"appName": "al", "unassign": [], "assign": []})]:
            st, b = self.call(method, path, body, token=self.bob)
            self.assertEqual(st, 404, (method, path, b))
            self.assertNotIn("alice", b["message"])
        # a shared app: visible, not changeable
        for method, path, body in [
                ("POST", "/api/apps/sh/suspend", None),
                ("DELETE", "/api/apps/sh", None),
                ("DELETE", "/api/apps/sh/compute-resources/bindings", None),
                ("POST", "/api/gpu/update/app",
                 {"id": G4060, "mode": "0", "appName": "sh", "force": True}),
                ("POST", "/api/gpu/unassign/app",
                 {"id": sh_dev, "mode": "0", "appName": "sh"}),
                ("PUT", "/api/gpu/assignments/bulk",
                 {"appName": "sh", "unassign": [{"id": sh_dev}],
                  "assign": []})]:
            st, b = self.call(method, path, body, token=self.bob)
            self.assertEqual(st, 403, (method, path, b))
            self.assertEqual(b["error"], "forbidden")
        # admin-only routes
        for method, path, body in [
                ("PUT", "/api/compute-resources/nodes/homelab/devices/" +
                 G4060 + "/support-type", {"supportType": "Exclusive"}),
                ("PUT", "/api/compute-resources/nodes/homelab/devices/" +
                 G4060 + "/time-slice", {"enabled": True}),
                ("PUT", "/api/nodes/homelab", {"enabled": False}),
                ("POST", "/api/gpu/mode", {"id": G4060, "mode": "2"}),
                ("GET", "/api/users", None),
                ("POST", "/api/users", {"name": "carol"}),
                ("DELETE", "/api/users/alice", None),
                ("POST", "/api/apps", {"manifest": manifest("x"),
                                       "owner": "alice"}),
                ("POST", "/api/apps", {"manifest": manifest("y",
                                                            shared=True)}),
                ("POST", "/api/compute-resources/preflight",
                 {"demands": [{"id": "1", "application": "x",
                               "owner": "alice", "mode": "nvidia",
                               "requiredCPU": "1", "requiredGPU": "1Gi",
                               "limitedGPU": "1Gi", "requiredMemory": "1Gi",
                               "limitedMemory": "1Gi",
                               "requiredDisk": "1Gi"}]})]:
            st, b = self.call(method, path, body, token=self.bob)
            self.assertEqual(st, 403, (method, path, b))
            self.assertEqual(b["code"], 403)
        self.assertEqual(self.state("al")[0], "running")
        self.assertEqual(self.state("sh")[0], "running")

    def test_members_see_other_apps_only_as_hidden(self):
        al = self.install(manifest("al", gpu="2Gi"), token=self.alice)
        bo = self.install(manifest("bo", gpu="2Gi"), token=self.bob)
        self.install(manifest("sh", gpu="2Gi", shared=True))
        self.assertEqual(al["allocations"][0]["deviceId"],
                         bo["allocations"][0]["deviceId"])  # binpack
        dev = al["allocations"][0]["deviceId"]
        # GET /api/apps: own and shared only
        st, b = self.call("GET", "/api/apps", token=self.bob)
        self.assertEqual(sorted(a["name"] for a in b["data"]), ["bo", "sh"])
        st, b = self.call("GET", "/api/apps")
        self.assertEqual(sorted(a["name"] for a in b["data"]),
                         ["al", "bo", "sh"])

        def bindings(token):
            st, b = self.call("GET", "/api/compute-resources", token=token)
            self.assertEqual(st, 200)
            return [x for n in b["data"] for d in n["devices"]
                    if d["id"] == dev for x in d["bindings"]]
        mine = bindings(self.bob)
        hidden = [x for x in mine if x.get("hidden")]
        self.assertEqual(len(hidden), 1, mine)
        for k, v in HIDDEN_KEYS.items():
            self.assertEqual(hidden[0][k], v)
        self.assertEqual(hidden[0]["memory"], 2 << 30)
        self.assertEqual(hidden[0]["deviceId"], dev)
        self.assertEqual(sorted(x["appName"] for x in mine
                                if not x.get("hidden")), ["bo", "sh"])
        self.assertNotIn("alice", str(mine))
        # the admin's view right after is whole (cache not poisoned)
        self.assertEqual(sorted(x["appName"] for x in bindings(None)),
                         ["al", "bo", "sh"])
        self.assertNotIn("alice", str(bindings(self.bob)))
        # availability of the member's own app
        self.call("POST", "/api/apps/bo/suspend", token=self.bob)
        st, b = self.call("GET", "/api/apps/bo/compute-resources/"
                          "availability", token=self.bob)
        self.assertEqual(st, 200, b)
        text = str(b["data"])
        self.assertNotIn("'al'", text)
        self.assertNotIn("alice", text)
        self.assertIn("'hidden': True", text)
        # legacy list
        st, lst = self.call("GET", "/api/gpu/list", token=self.bob)
        apps = [a for g in lst["data"] if g["id"] == dev for a in g["apps"]]
        self.assertIn({"appName": "", "owner": "", "hidden": True,
                       "memory": 2048}, apps)
        self.assertNotIn("al", [a["appName"] for a in apps])
        # HAMi containers: omitted for members
        st, b = self.call("POST", "/hami/api/vgpu/v1/containers", {},
                          token=self.bob)
        self.assertNotIn("al", [c["appName"] for c in b["items"]])
        # metrics: no series of another user's app
        import urllib.request
        req = urllib.request.Request(self.d.url + "/metrics", headers={
            "Authorization": "Bearer " + self.bob})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        self.assertNotIn('app="al"', text)
        self.assertIn('app="sh"', text)
        # events: none of al's
        st, b = self.call("GET", "/api/events?limit=10000", token=self.bob)
        self.assertNotIn("al", [e.get("app") for e in b["data"]])
        self.assertIn("bo", [e.get("app") for e in b["data"]])



class LimitsTest(unittest.TestCase):
    """Per-member limits (PUT /api/users/{name}): validated, admin only,
    checked at install and resume with the numbers, kept across a
    restart, shown in GET /api/users, set by accelctl user set-limits."""

    def setUp(self):
        self.d = Acceld().start()
        self.addCleanup(self.d.close)  # also when the rest of setUp fails
        st, b = self.d.http("POST", "/api/users", {"name": "alice"})
        self.alice = b["data"]["token"]

    def user(self, name):
        st, b = self.d.http("GET", "/api/users")
        self.assertEqual(st, 200, b)
        return [u for u in b["data"] if u["name"] == name][0]

    def install(self, name, gpu, token):
        return self.d.http("POST", "/api/apps",
                           {"manifest": manifest(name, gpu=gpu)}, token=token)

    def test_bad_limits_change_nothing(self):
        before = self.user("alice")
        self.assertEqual(before["maxApps"], 100)  # the default
        self.assertIsNone(before["maxGpuMemory"])
        for body, want, field in [
                ({"maxApps": -1}, 400, "maxApps"),
                ({"maxApps": "two"}, 400, "maxApps"),
                ({"maxApps": 10 ** 9}, 400, "maxApps"),
                ({"maxGpuMemory": "lots"}, 400, "maxGpuMemory"),
                ({"maxGpuMemory": -5}, 400, "maxGpuMemory"),
                ({"maxApps": 2, "colour": "red"}, 400, "colour")]:
            st, b = self.d.http("PUT", "/api/users/alice", body)
            self.assertEqual(st, want, (body, b))
            self.assertIn(field, b["message"])
        st, b = self.d.http("PUT", "/api/users/nobody", {"maxApps": 1})
        self.assertEqual(st, 404, b)
        st, b = self.d.http("PUT", "/api/users/admin", {"maxApps": 1})
        self.assertEqual(st, 400, b)
        st, b = self.d.http("PUT", "/api/users/alice", {"maxApps": 1},
                            token=self.alice)
        self.assertEqual(st, 403, b)
        self.assertEqual(self.user("alice"), before)

    def test_limits_checked_at_install_and_resume(self):
        st, b = self.d.http("PUT", "/api/users/alice",
                            {"maxApps": 2, "maxGpuMemory": "3Gi"})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["maxApps"], 2)
        self.assertEqual(b["data"]["maxGpuMemory"], 3 << 30)
        for n in ("a1", "a2"):
            st, b = self.install(n, "1Gi", self.alice)
            self.assertEqual(st, 200, b)
        st, b = self.install("a3", "1Gi", self.alice)
        self.assertEqual(st, 403, b)
        self.assertEqual(b["error"], "user-limit")
        self.assertIn("alice may hold at most 2 apps (has 2)", b["message"])
        # the limit is the owner's, whoever installs
        st, b = self.d.http("POST", "/api/apps",
                            {"manifest": manifest("a3", gpu="1Gi"),
                             "owner": "alice"})
        self.assertEqual(st, 403, b)
        u = self.user("alice")
        self.assertEqual((u["apps"], u["gpuMemory"]), (2, 2 << 30))
        # GPU memory: 2 Gi held; 2 Gi more is over 3 Gi
        st, b = self.d.http("PUT", "/api/users/alice", {"maxApps": 3})
        self.assertEqual(b["data"]["maxGpuMemory"], 3 << 30)  # kept
        st, b = self.install("big", "2Gi", self.alice)
        self.assertEqual(st, 403, b)
        self.assertIn("alice may hold at most 3Gi of GPU memory (holds 2Gi; "
                      "big needs 2Gi more)", b["message"])
        st, b = self.d.http("GET", "/api/apps/big", token=self.alice)
        self.assertEqual(st, 404, b)  # nothing installed
        # resume: a stopped app counts nothing until it is bound again
        self.d.http("POST", "/api/apps/a2/suspend", token=self.alice)
        st, b = self.install("mid", "2Gi", self.alice)
        self.assertEqual(st, 200, b)
        st, b = self.d.http("POST", "/api/apps/a2/resume", {},
                            token=self.alice)
        self.assertEqual(st, 403, b)
        self.assertIn("holds 3Gi; a2 needs 1Gi more", b["message"])
        st, b = self.d.http("GET", "/api/apps/a2", token=self.alice)
        self.assertEqual(b["data"]["state"], "stopped")
        # admins are not limited; limits survive a restart
        for i in range(4):
            st, b = self.install("adm%d" % i, "1Gi", None)
            self.assertEqual(st, 200, b)
        self.d.stop()
        self.d.start()
        u = self.user("alice")
        self.assertEqual((u["maxApps"], u["maxGpuMemory"]), (3, 3 << 30))
        # the holdings are rebuilt at start and follow uninstalls (a1 is
        # the first of alice's apps: the others move up in her list)
        st, b = self.install("a4", "1Gi", self.alice)
        self.assertEqual(st, 403, b)
        self.assertIn("at most 3 apps (has 3)", b["message"])
        st, b = self.d.http("DELETE", "/api/apps/a1", token=self.alice)
        self.assertEqual(st, 200, b)
        u = self.user("alice")
        self.assertEqual((u["apps"], u["gpuMemory"]), (2, 2 << 30))
        st, b = self.install("a4", "1Gi", self.alice)
        self.assertEqual(st, 200, b)
        st, b = self.install("a5", "1Gi", self.alice)
        self.assertEqual(st, 403, b)
        self.assertIn("at most 3 apps (has 3)", b["message"])
        self.d.http("PUT", "/api/users/alice", {"maxApps": 4})
        st, b = self.install("a5", "1Gi", self.alice)
        self.assertEqual(st, 403, b)
        self.assertIn("holds 3Gi; a5 needs 1Gi more", b["message"])
        u = self.user("alice")
        self.assertEqual((u["apps"], u["gpuMemory"]), (3, 3 << 30))
        st, b = self.d.http("DELETE", "/api/apps/mid", token=self.alice)
        self.assertEqual(st, 200, b)  # moved to a1's place above
        u = self.user("alice")
        self.assertEqual((u["apps"], u["gpuMemory"]), (2, 1 << 30))
        st, b = self.d.http("PUT", "/api/users/alice",
                            {"maxApps": None, "maxGpuMemory": None})
        self.assertEqual((b["data"]["maxApps"], b["data"]["maxGpuMemory"]),
                         (100, None))

    def preflight(self, token, *demands):
        """POST /api/compute-resources/preflight, demands as (id, gpu,
        owner or None for the caller)."""
        ds = []
        for i, gpu, owner in demands:
            dm = {"id": i, "application": i, "mode": "nvidia",
                  "requiredCPU": "0", "requiredGPU": gpu, "limitedGPU": gpu,
                  "requiredMemory": "0", "limitedMemory": "0",
                  "requiredDisk": "0"}
            if owner is not None:
                dm["owner"] = owner
            ds.append(dm)
        st, b = self.d.http("POST", "/api/compute-resources/preflight",
                            {"demands": ds}, token=token)
        self.assertEqual(st, 200, b)
        cc.assert_holds(self, cc.PREFLIGHT_REPORT, b["data"], "preflight")
        return b["data"]

    def quota_refusal(self, failed, dims):
        return {"installable": False, "failedDemandId": failed,
                "reason": "owner_quota",
                "pressure": [{"source": "owner_quota", "dimensions": [
                    dict(d, pressured=True) for d in dims]}]}

    def test_preflight_applies_owner_quota(self):
        st, b = self.d.http("PUT", "/api/users/alice", {"maxApps": 2})
        st, b = self.install("a1", "1Gi", self.alice)
        self.assertEqual(st, 200, b)
        # one more app fits; the second demand makes three
        self.assertEqual(self.preflight(self.alice, ("p1", "1Gi", None)),
                         {"installable": True})
        self.assertEqual(
            self.preflight(self.alice, ("p1", "1Gi", None),
                           ("p2", "1Gi", "alice")),
            self.quota_refusal("p2", [{"resource": "apps", "required": 1,
                                       "used": 2, "capacity": 2,
                                       "available": 0}]))
        # the quota is the demand owner's: admin and shared are not limited,
        # and their demands do not count against alice
        self.assertEqual(
            self.preflight(None, ("s1", "1Gi", "shared"),
                           ("s2", "1Gi", "shared"), ("m1", "1Gi", None),
                           ("p1", "1Gi", "alice")),
            {"installable": True})
        # GPU memory: holds 1Gi, the demands before count
        st, b = self.d.http("PUT", "/api/users/alice",
                            {"maxApps": 10, "maxGpuMemory": "3Gi"})
        self.assertEqual(st, 200, b)
        self.assertEqual(self.preflight(self.alice, ("p1", "2Gi", None)),
                         {"installable": True})
        gib = 1 << 30
        self.assertEqual(
            self.preflight(None, ("p1", "1Gi", "alice"),
                           ("p2", "2Gi", "alice")),
            self.quota_refusal("p2", [{"resource": "gpu-memory",
                                       "required": 2 * gib, "used": 2 * gib,
                                       "capacity": 3 * gib,
                                       "available": gib}]))
        # both dimensions at once
        st, b = self.d.http("PUT", "/api/users/alice", {"maxApps": 1})
        self.assertEqual(
            self.preflight(self.alice, ("p1", "3Gi", None)),
            self.quota_refusal("p1", [
                {"resource": "apps", "required": 1, "used": 1,
                 "capacity": 1, "available": 0},
                {"resource": "gpu-memory", "required": 3 * gib,
                 "used": gib, "capacity": 3 * gib, "available": 2 * gib}]))
        # accelctl prints the limits
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "big.json")
            with open(path, "w") as f:
                json.dump(manifest("big", gpu="3Gi"), f)
            r = self.d.ctl("preflight", "--owner", "alice", path)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("The owner's quota would be exceeded.\nowner_quota:\n"
                      "Apps: Limit 1, Held 1, Needed 1\nGPU memory: Limit 3 "
                      "Gi, Held 1 Gi, Needed 3 Gi", r.stderr)
        # the preflight changed nothing
        u = self.user("alice")
        self.assertEqual((u["apps"], u["gpuMemory"]), (1, gib))

    def test_accelctl_user_set_limits(self):
        r = self.d.ctl("user", "set-limits", "alice", "--max-apps", "5",
                       "--max-gpu-memory", "24Gi")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("0/5", r.stdout)
        self.assertIn("0/24Gi", r.stdout)
        u = self.user("alice")
        self.assertEqual((u["maxApps"], u["maxGpuMemory"]), (5, 24 << 30))
        r = self.d.ctl("user", "set-limits", "alice", "--max-gpu-memory",
                       "plenty")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("maxGpuMemory", r.stderr + r.stdout)
        r = self.d.ctl("user", "set-limits", "alice")
        self.assertEqual(r.returncode, 2)
        r = self.d.ctl("user", "list")
        self.assertIn("0/5", r.stdout)


if __name__ == "__main__":
    unittest.main()
