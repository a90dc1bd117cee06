# SPDX-License-Identifier: MIT
"""accelctl set-timeslice / timeslice against the real acceld: a TimeSlice
device on the local node (an inventory declares node 'lab' and acceld runs
with --node-name lab, so it starts a broker for the device). Settings
round-trip through the API and the CLI; bad values are refused with a
sentence naming the option and change nothing; members get 403."""
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import (ACCELCTL, device, inventory, node,  # noqa: E402
                           require_binaries)

GPU = "GPU-1ab00000-0000-4000-8000-0000000000ts"
OTHER = "GPU-1ab00000-0000-4000-8000-0000000000ms"

INVENTORY = inventory(node("lab", device(GPU, support="TimeSlice"),
                           device(OTHER)))


class TimesliceCliTest(accel_harness.SharedAcceld):
    inventory = INVENTORY
    acceld_args = ("--node-name", "lab")

    @classmethod
    def setUpClass(cls):
        require_binaries(ACCELCTL)
        super().setUpClass()

    def ok(self, *args, **kw):
        r = self.d.ctl(*args, **kw)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def fails(self, code, *args, **kw):
        r = self.d.ctl(*args, **kw)
        self.assertEqual(r.returncode, code, r.stdout + r.stderr)
        return r

    def ts(self):
        st, b = self.d.http("GET", "/api/compute-resources")
        self.assertEqual(st, 200, b)
        return [x for n in b["data"] for x in n["devices"]
                if x["id"] == GPU][0]["timeSlice"]

    def stored(self):
        """The settings the PUT answers with (an empty PUT is refused by
        accelctl, so ask the API with an unchanged value of its own)."""
        t = self.ts()
        return t["quantumMs"], t["idleReleaseMs"]

    def wait_running(self):
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.ts().get("running"):
                return
            time.sleep(0.1)
        self.fail("the broker of %s did not start" % GPU)

    def test_1_show_defaults(self):
        self.wait_running()
        r = self.ok("timeslice", "lab", GPU)
        self.assertIn("broker running", r.stdout)
        # issue 49: the defaults the measurements chose
        self.assertIn("quantum 30 ms, idle release 1000 us", r.stdout)
        self.assertIn("Holder: none", r.stdout)
        self.assertIn("No app is connected", r.stdout)
        data = json.loads(self.ok("-o", "json", "timeslice", "lab",
                                  GPU).stdout)
        self.assertTrue(data["running"])
        self.assertEqual(data["quantumMs"], 30)
        self.assertEqual(data["idleReleaseUs"], 1000)
        self.assertIn("handoff", data)
        self.assertTrue(data["socket"].endswith(".sock"), data)

    def test_2_round_trip(self):
        r = self.ok("set-timeslice", "lab", GPU, "--quantum", "250",
                    "--idle", "40")
        self.assertIn("quantum 250 ms", r.stdout)
        self.assertIn("idle release 40 ms", r.stdout)
        # the broker thread applies stored settings within 500 ms
        deadline = time.time() + 5
        while self.stored() != (250, 40) and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.stored(), (250, 40))
        r = self.ok("timeslice", "lab", GPU)
        self.assertIn("quantum 250 ms, idle release 40000 us", r.stdout)
        # one field alone leaves the other as it was
        r = self.ok("-o", "json", "set-timeslice", "lab", GPU,
                    "--quantum=1200")
        data = json.loads(r.stdout)
        self.assertEqual(data["timeSlice"]["quantumMs"], 1200)
        self.assertEqual(data["timeSlice"]["idleReleaseMs"], 40)
        r = self.ok("-o", "json", "set-timeslice", "lab", GPU,
                    "--oversubscribed-quantum", "8000")
        self.assertEqual(json.loads(r.stdout)["timeSlice"]
                         ["oversubscribedQuantumMs"], 8000)
        # the revocation grace (issue 10, item 6)
        r = self.ok("set-timeslice", "lab", GPU, "--grace", "300")
        self.assertIn("revocation grace 300 ms", r.stdout)
        deadline = time.time() + 5
        while "revocation grace 300 ms" not in self.ok(
                "timeslice", "lab", GPU).stdout and time.time() < deadline:
            time.sleep(0.1)
        r = self.ok("timeslice", "lab", GPU)
        self.assertIn("revocation grace 300 ms", r.stdout)
        self.assertIn("revoked: 0", r.stdout)
        # survives a restart (stored in the device's settings)
        self.d.stop()
        self.d.start()
        self.wait_running()
        deadline = time.time() + 5
        while self.stored() != (1200, 40) and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.stored(), (1200, 40))

    def test_2b_idle_in_microseconds(self):
        """Issue 49: the idle time in microseconds; the unit given last
        wins (the other is dropped from the stored settings)."""
        r = self.ok("set-timeslice", "lab", GPU, "--idle-us", "250")
        self.assertIn("idle release 250 us", r.stdout)
        data = json.loads(self.ok("-o", "json", "set-timeslice", "lab", GPU,
                                  "--idle-us", "250").stdout)
        self.assertEqual(data["timeSlice"]["idleReleaseUs"], 250)
        self.assertNotIn("idleReleaseMs", data["timeSlice"])
        deadline = time.time() + 5
        while "idle release 250 us" not in self.ok(
                "timeslice", "lab", GPU).stdout and time.time() < deadline:
            time.sleep(0.1)
        self.assertIn("idle release 250 us",
                      self.ok("timeslice", "lab", GPU).stdout)
        r = self.fails(1, "set-timeslice", "lab", GPU, "--idle-us", "10")
        self.assertIn("--idle-us", r.stderr)
        data = json.loads(self.ok("-o", "json", "set-timeslice", "lab", GPU,
                                  "--idle", "40").stdout)
        self.assertEqual(data["timeSlice"]["idleReleaseMs"], 40)
        self.assertNotIn("idleReleaseUs", data["timeSlice"])

    def test_3_bad_values_change_nothing(self):
        self.ok("set-timeslice", "lab", GPU, "--quantum", "300", "--idle",
                "50")
        deadline = time.time() + 5
        while self.stored() != (300, 50) and time.time() < deadline:
            time.sleep(0.1)
        cases = [
            (["--quantum", "-5"], 2, "--quantum"),
            (["--quantum", "0"], 2, "--quantum"),
            (["--idle", "0"], 2, "--idle"),
            (["--quantum", "abc"], 2, "--quantum"),
            (["--idle", "12ms"], 2, "--idle"),
            (["--quantum", "1.5"], 2, "--quantum"),
            (["--quantum", ""], 2, "--quantum"),
            (["--quantum", "99999999999999999999999"], 2, "--quantum"),
            (["--quantum", "600001"], 1, "--quantum"),
            (["--quantum", "5"], 1, "--quantum"),   # below 10 ms
            (["--idle", "9999999999"], 1, "--idle"),
            (["--grace", "5"], 1, "--grace"),       # below 10 ms
            (["--grace", "x"], 2, "--grace"),
            # a good value with a bad one: neither is applied
            (["--quantum", "400", "--idle", "-1"], 2, "--idle"),
            (["--quantum", "400", "--idle", "700000"], 1, "--idle"),
            ([], 2, "--quantum"),
        ]
        for args, code, flag in cases:
            r = self.fails(code, "set-timeslice", "lab", GPU, *args)
            self.assertIn(flag, r.stderr, (args, r.stderr))
            if code == 1:
                self.assertIn("from", r.stderr)   # acceld states the range
            self.assertEqual(self.stored(), (300, 50), args)
        # the API itself refuses wrong types, naming the field
        for body in ({"quantumMs": "500"}, {"idleReleaseMs": -3},
                     {"quantumMs": 1.5}, {"quantumMs": 10 ** 12}):
            st, b = self.d.http(
                "PUT", "/api/compute-resources/nodes/lab/devices/%s/"
                "time-slice" % GPU, body)
            self.assertEqual(st, 400, b)
            self.assertIn(list(body)[0], b["message"])
        self.assertEqual(self.stored(), (300, 50))
        # unknown device / node
        r = self.fails(1, "set-timeslice", "lab", "GPU-nope", "--quantum",
                       "300")
        self.assertIn("GPU-nope", r.stderr)
        r = self.fails(1, "timeslice", "nowhere", GPU)
        self.assertIn("nowhere", r.stderr)
        # a device that is not time-sliced
        r = self.fails(1, "timeslice", "lab", OTHER)
        self.assertIn("not time-sliced", r.stderr)
        # usage
        self.fails(2, "timeslice", "lab")
        self.fails(2, "timeslice", "lab", GPU, "--quantum", "5")

    def test_4_members_get_403(self):
        st, b = self.d.http("POST", "/api/users", {"name": "mallory"})
        self.assertEqual(st, 200, b)
        token = b["data"]["token"]
        try:
            r = self.fails(1, "set-timeslice", "lab", GPU, "--quantum",
                           "20", token=token)
            self.assertIn("not allowed", r.stderr)
            st, b = self.d.http(
                "PUT", "/api/compute-resources/nodes/lab/devices/%s/"
                "time-slice" % GPU, {"quantumMs": 20}, token=token)
            self.assertEqual(st, 403, b)
            self.assertNotEqual(self.stored()[0], 20)
            # reading is allowed
            self.ok("timeslice", "lab", GPU, token=token)
        finally:
            self.d.http("DELETE", "/api/users/mallory")


if __name__ == "__main__":
    unittest.main(verbosity=2)
