# SPDX-License-Identifier: MIT
"""Contract test: Olares 1.12.5 Settings > GPU and `olares-cli settings gpu`
against the real acceld (docs/compat.md, SPEC 5.3).

Client files (beclab/Olares): apps/packages/app/src/stores/settings/gpu.ts
(the calls and GPUInfo), pages/settings/GPU/GPUPage.vue (allowedShareModes),
apps/dashboard/types/gpu.ts (SettingsGPUResponse), cli/cmd/ctl/settings/
gpu/list.go (gpuInfo, decodeData). Every answer must pass the page's
response interceptor (HTTP 200, code 0 or 200) and hold the fields the page
reads, in MiB, in each sharing mode."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compat_contract as cc  # noqa: E402
import accel_harness  # noqa: E402

G4090 = "GPU-4090aaaa-0000-4000-8000-000000000001"
G4060 = "GPU-4060bbbb-0000-4000-8000-000000000002"
MODES = (("0", "Exclusive"), ("1", "MemorySlice"), ("2", "TimeSlice"))


def manifest(name, gpu="1Gi"):
    return accel_harness.manifest(name, gpu, mem="64Mi", cpu="100m",
                                  disk="1Mi")


class SettingsGpuContractTest(accel_harness.SharedAcceld):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        st, b = cls.d.http("POST", "/api/apps", {
            "manifest": manifest("comfy"),
            "computeBinding": [{"nodeName": "homelab", "deviceId": G4090,
                                "memory": 1 << 30}]})
        assert st == 200 and b["code"] == 200, b

    def page_call(self, method, path, body=None):
        """A call as the page makes it; the interceptor's rule: HTTP 200
        and code 0 or 200, else it throws."""
        st, b = self.d.http(method, path, body)
        self.assertEqual(st, 200, (path, b))
        cc.assert_holds(self, {"code": frozenset({0, 200}), "message": "s?"},
                        b, path)
        self.assertIn("data", b, path)
        return b["data"]

    def gpu_list(self):
        st, b = self.d.http("GET", "/api/gpu/list")
        self.assertEqual(st, 200, b)
        cc.assert_holds(self, cc.envelope([cc.LEGACY_GPU]), b,
                        "GET /api/gpu/list")
        for g in b["data"]:
            if g["sharemode"] == "1":
                cc.assert_holds(self, cc.LEGACY_GPU_MEMSLICE, g,
                                "Memory slicing GPU " + g["id"])
        return {g["id"]: g for g in b["data"]}

    def test_list_in_every_mode_with_an_app_bound(self):
        for code, name in MODES:
            with self.subTest(mode=name):
                # the page sends mode as a string; a number is accepted too
                self.page_call("POST", "/api/gpu/mode",
                               {"id": G4060, "mode": code})
                g = self.gpu_list()[G4060]
                self.assertEqual(g["sharemode"], code)
                self.assertEqual(g["devmem"], 16 * 1024)   # MiB
                self.assertEqual(g["index"], 1)
                self.assertIs(g["health"], True)
                self.assertEqual(set(g["allowedShareModes"]), {"0", "1", "2"})
                # bind comfy here: memory is MiB as a digit string in
                # Memory slicing, "0" otherwise (EditAppGpuDialog)
                mem = "2048" if code == "1" else "0"
                self.page_call("POST", "/api/gpu/update/app",
                               {"id": G4060, "mode": code, "appName": "comfy",
                                "memory": mem})
                g = self.gpu_list()[G4060]
                self.assertEqual([a["appName"] for a in g["apps"]], ["comfy"])
                if code == "1":
                    self.assertEqual(g["apps"][0]["memory"], 2048)
                    self.assertEqual(g["memoryAllocated"], 2048)
                    self.assertEqual(g["memoryAvailable"], 16 * 1024 - 2048)
                # move it back with the bulk route (SwitchGPUDialog)
                self.page_call("PUT", "/api/gpu/assignments/bulk",
                               {"appName": "comfy", "unassign": [{"id": G4060}],
                                "assign": [{"id": G4090, "memory": "1024"}]})
                lst = self.gpu_list()
                self.assertEqual(lst[G4060]["apps"], [])
                self.assertEqual([(a["appName"], a["memory"]) for a in
                                  lst[G4090]["apps"]], [("comfy", 1024)])

    def test_unassign_answers_in_the_envelope(self):
        self.page_call("POST", "/api/gpu/mode", {"id": G4060, "mode": 2})
        self.page_call("POST", "/api/gpu/update/app",
                       {"id": G4060, "mode": "2", "appName": "comfy",
                        "memory": "0"})
        self.page_call("POST", "/api/gpu/unassign/app",
                       {"id": G4060, "mode": "2", "appName": "comfy"})
        self.assertEqual(self.gpu_list()[G4060]["apps"], [])
        # put comfy back where the other test expects it
        self.d.http("POST", "/api/apps/comfy/resume", {"computeBinding": [
            {"nodeName": "homelab", "deviceId": G4090, "memory": 1 << 30}]})

    def test_refusals_keep_hamis_status_codes(self):
        # beclab/HAMi's gpu_manage.go answers these 409 (StatusConflict);
        # so does acceld, and nothing changes. The page shows no non-2xx
        # answer (its axios setup only logs it): docs/compat.md says what
        # it shows instead, and why the code is kept (issue 40 item 7)
        def refused(method, path, body, code):
            before = self.gpu_list()
            st, b = self.d.http(method, path, body)
            self.assertEqual((st, b["code"]), (409, 409), (path, body, b))
            self.assertIn(code, b["error"], b)
            self.assertIsInstance(b["message"], str)
            self.assertEqual(self.gpu_list(), before, (path, body))
        self.page_call("POST", "/api/gpu/mode", {"id": G4060, "mode": "1"})
        # too little VRAM: 20000 MiB on a 16 GiB card
        refused("POST", "/api/gpu/update/app", {"id": G4060, "mode": "1",
                "appName": "comfy", "memory": "20000"},
                "vram")
        # an exclusive card another app holds: assign, and Switch App
        self.page_call("POST", "/api/gpu/mode", {"id": G4060, "mode": "0"})
        st, b = self.d.http("POST", "/api/apps", {
            "manifest": manifest("holder"),
            "computeBinding": [{"nodeName": "homelab", "deviceId": G4060}]})
        self.assertEqual((st, b["code"]), (200, 200), b)
        try:
            refused("POST", "/api/gpu/update/app", {"id": G4060, "mode": "0",
                    "appName": "comfy", "memory": "0"},
                    "exclusive-already-bound")
            refused("PUT", "/api/gpu/assignments/bulk",
                    {"appName": "comfy", "unassign": [{"id": G4090}],
                     "assign": [{"id": G4060, "memory": "0"}]},
                    "exclusive-already-bound")
        finally:
            self.d.http("DELETE", "/api/apps/holder")
            self.page_call("POST", "/api/gpu/mode", {"id": G4060, "mode": "1"})

    def test_refusal_is_not_a_success(self):
        # the interceptor rejects anything but code 0/200: a refusal must
        # carry another code (here the HTTP status)
        st, b = self.d.http("POST", "/api/gpu/mode",
                            {"id": "GPU-nope", "mode": "1"})
        self.assertNotEqual(st, 200, b)
        self.assertNotIn(b["code"], (0, 200), b)
        self.assertIsInstance(b["message"], str)


if __name__ == "__main__":
    unittest.main()
