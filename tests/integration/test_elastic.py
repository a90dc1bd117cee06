# SPDX-License-Identifier: MIT
"""Elastic memory, the device setting (SPEC 4.4, issue 46 item 1): a
Memory-slicing device's `elastic: {overcommit, reclaimWaitMs}`, set by
`PUT .../devices/{device}/elastic` or `accelctl set-elastic`, checked
field by field (a 400 naming the field and its rule), stored with the
device (it outlives a restart), shown in the device's JSON, and read by
admission: the quotas may sum to overcommit x the card, each still at most
the card. The home-lab case: a 24 GiB card, Ollama's 20 GiB and ComfyUI's
16 GiB, refused at 1 and admitted at 1.5."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import (Acceld, failed_check, manifest)  # noqa: E402

G4090 = "GPU-4090aaaa-0000-4000-8000-000000000001"  # examples/homelab.yaml
G4060 = "GPU-4060bbbb-0000-4000-8000-000000000002"  # TimeSlice there
GiB = 1 << 30
PATH = "/api/compute-resources/nodes/homelab/devices/%s/elastic"


class ElasticSettingTest(unittest.TestCase):
    def setUp(self):
        self.d = Acceld().start()
        self.addCleanup(self.d.close)

    def put(self, body, dev=G4090, token=None):
        return self.d.http("PUT", PATH % dev, body, token=token)

    def install(self, name, gpu):
        return self.d.http("POST", "/api/apps", {
            "manifest": manifest(name, gpu=gpu, mem="64Mi", cpu="100m",
                                 disk="1Mi"),
            "computeBinding": [{"nodeName": "homelab", "deviceId": G4090}]})

    def elastic(self):
        return self.d.device(G4090)["elastic"]

    def test_each_field_checked_naming_it(self):
        for body, field in [
                ({"overcommit": 0.5}, "overcommit"),
                ({"overcommit": 0}, "overcommit"),
                ({"overcommit": 4.01}, "overcommit"),
                ({"overcommit": 5}, "overcommit"),
                ({"overcommit": "1.5"}, "overcommit"),
                ({"overcommit": True}, "overcommit"),
                ({"overcommit": None}, "overcommit"),
                ({"reclaimWaitMs": -1}, "reclaimWaitMs"),
                ({"reclaimWaitMs": 600001}, "reclaimWaitMs"),
                ({"reclaimWaitMs": 1.5}, "reclaimWaitMs"),
                ({"ratio": 2}, "ratio")]:
            st, b = self.put(body)
            self.assertEqual(st, 400, (body, b))
            self.assertTrue(b["message"].startswith(field + " "),
                            (body, b["message"]))
        st, b = self.put([1.5])
        self.assertEqual(st, 400, b)
        # nothing changed by any of them
        self.assertEqual(self.elastic()["overcommit"], 1, self.elastic())
        self.assertEqual(self.elastic()["reclaimWaitMs"], 10000)
        # a TimeSlice card takes no overcommit, but may be set to 1 (off)
        st, b = self.put({"overcommit": 1.5}, dev=G4060)
        self.assertEqual(st, 400, b)
        self.assertIn("Memory-slicing", b["message"])
        self.assertEqual(self.put({"overcommit": 1}, dev=G4060)[0], 200)
        # unknown device, and a member may not
        self.assertEqual(self.put({"overcommit": 2}, dev="GPU-x")[0], 404)
        st, b = self.put({"overcommit": 4, "reclaimWaitMs": 0})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["elastic"]["overcommit"], 4)
        self.assertEqual(b["data"]["elastic"]["quotaCapacity"], 96 * GiB)
        self.assertEqual(b["data"]["elastic"]["reclaimWaitMs"], 0)

    def test_home_lab_case_admitted_at_one_and_a_half(self):
        st, b = self.install("ollama", "20Gi")
        self.assertEqual((st, b["code"]), (200, 200), b)
        st, b = self.install("comfyui", "16Gi")
        _, data = failed_check(st, b, "computeBindingUnavailable")
        self.assertEqual(data["validation"]["code"],
                         "device-vram-insufficient:" + G4090)
        self.d.http("DELETE", "/api/apps/comfyui")

        r = self.d.ctl("set-elastic", "homelab", G4090, "--overcommit", "1.5",
                       "--reclaim-wait", "5000")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("1.5 x its memory (36.0 GiB)", r.stdout)
        self.assertIn("5000 ms", r.stdout)
        e = self.elastic()
        self.assertEqual((e["overcommit"], e["reclaimWaitMs"],
                          e["quotaCapacity"], e["inForce"]),
                         (1.5, 5000, 36 * GiB, True), e)
        self.assertEqual(self.d.device(G4090)["free"], 16 * GiB)

        st, b = self.install("comfyui", "16Gi")
        self.assertEqual((st, b["code"]), (200, 200), b)
        dev = self.d.device(G4090)
        self.assertEqual((dev["allocated"], dev["free"]), (36 * GiB, 0), dev)
        # full to the ratio: one more is refused
        st, b = self.install("third", "1Gi")
        _, data = failed_check(st, b, "computeBindingUnavailable")
        self.d.http("DELETE", "/api/apps/third")

        # lowering below what is bound: 409 naming the sums, nothing changed
        st, b = self.put({"overcommit": 1.2})
        self.assertEqual(st, 409, b)
        self.assertIn("36", b["message"])
        self.assertEqual(self.elastic()["overcommit"], 1.5)
        r = self.d.ctl("set-elastic", "homelab", G4090, "--overcommit", "x")
        self.assertEqual(r.returncode, 2, (r.stdout, r.stderr))
        self.assertIn("--overcommit", r.stderr)

        # stored with the device: the same after a restart
        self.d.stop()
        self.d.start()
        e = self.elastic()
        self.assertEqual((e["overcommit"], e["reclaimWaitMs"]), (1.5, 5000))
        self.assertEqual(self.d.device(G4090)["allocated"], 36 * GiB)

    def test_quota_stays_within_the_card(self):
        self.assertEqual(self.put({"overcommit": 4})[0], 200)
        st, b = self.install("huge", "30Gi")
        _, data = failed_check(st, b, "computeBindingUnavailable")
        self.assertEqual(data["validation"]["code"],
                         "total-vram-below-requirement:" + G4090)


    def test_manifest_reclaim_checked_at_install(self):
        """spec.accelerator[].reclaim and priority: a 400 naming the field
        and its rule; the manifest's reclaim shown with the app."""
        m = manifest("ollama", gpu="4Gi", mem="64Mi", cpu="100m", disk="1Mi")
        m["spec"]["accelerator"][0]["reclaim"] = "olama"
        st, b = self.d.http("POST", "/api/apps", {"manifest": m})
        self.assertEqual(st, 400, b)
        self.assertIn("spec.accelerator[0].reclaim must be one of ollama",
                      b["message"])
        m["spec"]["accelerator"][0]["reclaim"] = {"signal": "SIGKILL"}
        st, b = self.d.http("POST", "/api/apps", {"manifest": m})
        self.assertEqual(st, 400, b)
        self.assertIn("spec.accelerator[0].reclaim.signal", b["message"])
        m["spec"]["accelerator"][0]["reclaim"] = {"signal": "SIGUSR1"}
        m["spec"]["accelerator"][0]["priority"] = "high"
        st, b = self.d.http("POST", "/api/apps", {"manifest": m})
        self.assertEqual(st, 400, b)
        self.assertIn("spec.accelerator[0].priority", b["message"])


if __name__ == "__main__":
    unittest.main()
