# SPDX-License-Identifier: MIT
"""Contract test: app-service's compute API (Olares 1.12.6) as its clients
read it, against the real acceld (docs/compat.md, SPEC 5, 5.1, 5.2).

Client files (beclab/Olares): framework/app-service/pkg/apiserver/api/
utils.go (HandleFailedCheck: {code, data:{type, Data}}), pkg/compute/types.go
and preflight_types.go (the objects), pkg/apiserver/
compute_preflight_types.go (the preflight demand's wire keys);
cli/cmd/ctl/market/compute.go (parseFailedCheck, resolveComputeMode,
resolveComputeBinding, humanizeBindingValidation), cli/cmd/ctl/settings/
compute/types.go (computeNode/Device/Binding, supportTypeResult and the
{type, Data} switch envelope). Every route, each sharing mode, each failed
check: computeModeSelect, computeBindingRequired, computeBindingUnavailable,
computeDeviceSwitchBlocked."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compat_contract as cc  # noqa: E402
import test_runtime  # noqa: E402
import accel_harness  # noqa: E402

G4090 = "GPU-4090aaaa-0000-4000-8000-000000000001"
G4060 = "GPU-4060bbbb-0000-4000-8000-000000000002"
SUPPORTS = ("Exclusive", "MemorySlice", "TimeSlice")


def entry(mode="nvidia", gpu="2Gi"):
    e = {"mode": mode, "requiredMemory": "64Mi", "limitedMemory": "64Mi",
         "requiredCpu": "100m", "limitedCpu": "100m", "requiredDisk": "1Mi",
         "limitedDisk": "1Mi"}
    if mode == "nvidia":
        e.update({"requiredGPUMemory": gpu, "limitedGPUMemory": gpu})
    return e


def manifest(name, *entries):
    return {"apiVersion": "v2", "metadata": {"name": name},
            "spec": {"accelerator": list(entries) or [entry()]}}


class AppServiceContractTest(accel_harness.SharedAcceld):

    def ok(self, method, path, body, model, what):
        st, b = self.d.http(method, path, body)
        self.assertEqual(st, 200, (what, b))
        cc.assert_holds(self, cc.envelope(model), b, what)
        return b["data"]

    def check(self, method, path, body, type_name, model):
        st, b = self.d.http(method, path, body)
        # HTTP 200: olares-cli and the page read the check from the body
        self.assertEqual(st, 200, (path, b))
        cc.assert_holds(self, cc.failed_check(type_name, model), b,
                        "%s %s (%s)" % (method, path, type_name))
        return b["data"]["Data"]

    def switch(self, dev, support):
        return self.ok("PUT", "/api/compute-resources/nodes/homelab/devices/"
                       "%s/support-type" % dev, {"supportType": support},
                       cc.SWITCH_RESULT, "support-type " + support)

    def test_listing_switch_validate_resume_in_every_mode(self):
        for support in SUPPORTS:
            with self.subTest(mode=support):
                self.d.http("DELETE", "/api/apps/m")
                r = self.switch(G4060, support)
                self.assertEqual(r["device"]["supportType"], support)
                sel = {"nodeName": "homelab", "deviceId": G4060}
                if support == "MemorySlice":
                    sel["memory"] = 2 << 30
                app = self.ok("POST", "/api/apps",
                              {"manifest": manifest("m"),
                               "computeBinding": [sel]},
                              {"name": "s", "state": "s",
                               "allocations": [cc.ALLOCATION]}, "install")
                self.assertEqual(app["allocations"][0]["deviceId"], G4060)
                nodes = self.ok("GET", "/api/compute-resources", None,
                                [cc.NODE], "GET /api/compute-resources")
                dev = [x for n in nodes for x in n["devices"]
                       if x["id"] == G4060][0]
                self.assertEqual(dev["supportType"], support)
                self.assertEqual([b["appName"] for b in dev["bindings"]],
                                 ["m"])
                cc.assert_holds(self, cc.REQUIREMENT,
                                dev["bindings"][0].get("spec"), "binding spec")
                self.ok("GET", "/api/apps/m/compute-resources/bindings", None,
                        [cc.ALLOCATION], "bindings")
                self.ok("POST", "/api/apps/m/suspend", None, {"name": "s"},
                        "suspend")
                for path in ("/api/apps/m/compute-resources/bindings/validate",
                             "/api/apps/m/compute-resources/validate"):
                    v = self.ok("POST", path, {"computeBinding": [sel]},
                                cc.VALIDATE_RESULT, path)
                    self.assertEqual(v["status"], "valid")
                    self.check("POST", path, {"computeBinding": [
                        {"nodeName": "homelab", "deviceId": "GPU-nope"}]},
                        "computeBindingUnavailable", cc.BINDING_UNAVAILABLE)
                self.ok("POST", "/api/apps/m/resume", {"computeBinding": [sel]},
                        {"name": "s", "state": "s"}, "resume")

    def test_mode_select(self):
        # two declared types that both fit: the install asks which
        m = manifest("two", entry("nvidia"), entry("apple-m"))
        data = self.check("POST", "/api/apps", {"manifest": m},
                          "computeModeSelect", cc.MODE_PLAN)
        # resolveComputeMode: the array itself, installable ones offered
        self.assertEqual(sorted(p["computeType"] for p in data
                                if p["status"] == "installable"),
                         ["apple-m", "nvidia"])
        self.ok("POST", "/api/apps", {"manifest": m,
                                      "selectedGpuType": "apple-m"},
                {"name": "s", "selectedType": "s"}, "install with a type")
        self.d.http("DELETE", "/api/apps/two")

    def test_binding_required_and_unavailable(self):
        # larger than any card: installed, but no GPU can be placed
        self.d.http("POST", "/api/apps", {"manifest": manifest(
            "huge", entry(gpu="30Gi"))})
        self.d.http("POST", "/api/apps/huge/suspend")
        data = self.check("POST", "/api/apps/huge/resume", {},
                          "computeBindingRequired", cc.BINDING_REQUIRED)
        self.assertFalse(data["availability"]["schedulable"])
        data = self.check("POST", "/api/apps/huge/resume", {"computeBinding": [
            {"nodeName": "homelab", "deviceId": G4060}]},
            "computeBindingUnavailable", cc.BINDING_UNAVAILABLE)
        self.assertFalse(data["validation"]["ok"])
        self.assertEqual(data["validation"]["code"],
                         "total-vram-below-requirement:" + G4060)
        self.check("POST", "/api/apps/huge/compute-resources/bindings/validate",
                   {}, "computeBindingRequired", cc.BINDING_REQUIRED)
        self.d.http("DELETE", "/api/apps/huge")

    def test_preflight_wire_form(self):
        d = {"id": "d1", "application": "llm", "owner": "admin",
             "mode": "nvidia", "requiredCPU": "1", "requiredGPU": "80Gi",
             "limitedGPU": "80Gi", "requiredMemory": "1Gi",
             "limitedMemory": "1Gi", "requiredDisk": "1Gi",
             "supportMultiCards": False, "supportMultiNodes": False}
        r = self.ok("POST", "/api/compute-resources/preflight",
                    {"demands": [d]}, cc.PREFLIGHT_REPORT, "preflight")
        self.assertEqual((r["installable"], r["reason"]),
                         (False, "unschedulable"))
        d.update(requiredMemory="1000Ti", limitedMemory="1000Ti")
        r = self.ok("POST", "/api/compute-resources/preflight",
                    {"demands": [d]}, cc.PREFLIGHT_REPORT, "preflight")
        self.assertEqual((r["installable"], r["reason"]),
                         (False, "cluster_capacity"))
        self.assertEqual(r["pressure"][0]["source"], "cluster_capacity")
        d.update(requiredGPU="1Gi", limitedGPU="1Gi", requiredMemory="1Gi",
                 limitedMemory="1Gi")
        r = self.ok("POST", "/api/compute-resources/preflight",
                    {"demands": [d]}, cc.PREFLIGHT_REPORT, "preflight")
        self.assertIs(r["installable"], True)


class SwitchBlockedContractTest(test_runtime.RuntimeBase):
    """computeDeviceSwitchBlocked as settings/compute/types.go reads it:
    {type:"computeDeviceSwitchBlocked", Data: supportTypeResult}."""

    def test_blocked_switch(self):
        a = self.install(test_runtime.manifest(
            "linger", ["sh", "-c", "sleep 1000"]))
        self.write_nvml("proc %s %d 2147483648 compute\n"
                        % (test_runtime.GPU_A, a["pid"]))
        st, b = self.d.http(
            "PUT", "/api/compute-resources/nodes/%s/devices/%s/support-type"
            % (test_runtime.NODE, test_runtime.GPU_A),
            {"supportType": "TimeSlice"})
        self.assertEqual(st, 200, b)
        cc.assert_holds(self, cc.failed_check("computeDeviceSwitchBlocked",
                                              cc.SWITCH_BLOCKED), b,
                        "blocked support-type switch")
        self.assertEqual([x["appName"] for x in b["data"]["Data"]
                          ["blockedApps"]], ["linger"])
        # accelctl reads the same check: the blocked app and why, exit 1
        r = self.d.ctl("set-type", test_runtime.NODE, test_runtime.GPU_A,
                       "--type", "TimeSlice", "--yes")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("could not be stopped", r.stderr)
        self.assertIn("linger", r.stderr)
        self.write_nvml()
        self.wait_state("linger", "stopped")


if __name__ == "__main__":
    unittest.main()
