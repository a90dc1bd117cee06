# SPDX-License-Identifier: MIT
"""NVML telemetry, the metric history and the monitor routes (SPEC 5.4,
5.5) through the real acceld with the tests' fake NVML: utilization, power
and temperature (null plus a reason when NVML does not give them), the
history sampled every second (--history-interval 1) and kept across a
restart, GET /api/metrics/history with its nulls and member filtering, and
the HAMi monitor routes answering the queries the Olares Dashboard and
olares-cli send."""
import os
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runtime as rt  # noqa: E402

GPU_A, GPU_B, NODE = rt.GPU_A, rt.GPU_B, rt.NODE
# A: everything measured; B: NVML says "not supported" for util, power, temp
LINE_A = ("gpu uuid=%s total=25769803776 used=%d util=%d power=%d "
          "limit=450000 temp=%d name=NVIDIA GeForce RTX 4090\n")
LINE_B = ("gpu uuid=%s total=25769803776 used=0 util=ns power=ns limit=ns "
          "temp=ns name=NVIDIA GeForce RTX 4090\n" % GPU_B)


def scrape(d):
    req = urllib.request.Request(d.url + "/metrics", headers={
        "Authorization": "Bearer " + d.token})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read().decode()


class HistoryBase(rt.RuntimeBase):
    history_args = []

    def start_acceld(self, extra_lines=""):
        self.values = dict(used=1 << 30, util=37, power=123456, temp=61)
        self.d = rt.Acceld(inventory=rt.INVENTORY, extra_args=[
            "--node-name", NODE, "--reconcile-interval-ms", "100"]
            + self.history_args)
        self.nvml_path = os.path.join(self.d.tmp, "nvml.txt")
        self.d.env = {"ACCEL_NVML_LIB": rt.FAKE_NVML,
                      "ACCEL_FAKE_NVML": self.nvml_path}
        self.write_nvml(extra_lines)
        self.d.start()

    def write_nvml(self, extra="", gpus=None, **values):
        self.values.update(values)
        v = self.values
        text = rt.HEADER + LINE_A % (GPU_A, v["used"], v["util"], v["power"],
                                     v["temp"]) + LINE_B
        with open(self.nvml_path + ".tmp", "w") as f:
            f.write(text + extra)
        os.replace(self.nvml_path + ".tmp", self.nvml_path)


class TelemetryTest(HistoryBase):
    def test_device_fields(self):
        a = self.wait_for(lambda: self.device(GPU_A)["power"] is not None
                          and self.device(GPU_A), "A's power")
        self.assertEqual(a["utilization"], 37)
        self.assertAlmostEqual(a["power"], 123.456)
        self.assertEqual(a["powerLimit"], 450)
        self.assertEqual(a["temperature"], 61)
        for k in ("utilizationReason", "powerReason", "temperatureReason"):
            self.assertNotIn(k, a)
        b = self.device(GPU_B)
        for k in ("utilization", "power", "powerLimit", "temperature"):
            self.assertIsNone(b[k], k)
            self.assertIn("not supported", b[k + "Reason"], k)
        # /metrics: A's samples, none for B's unknowns
        text = scrape(self.d)
        self.assertRegex(text, r'accel_device_power_watts\{[^}]*%s[^}]*\} '
                         r'123\.456' % GPU_A)
        self.assertRegex(text, r'accel_device_temperature_celsius\{[^}]*%s'
                         r'[^}]*\} 61' % GPU_A)
        self.assertNotRegex(text, r'accel_device_power_watts\{[^}]*%s' % GPU_B)
        self.assertNotRegex(text, r'accel_device_utilization_ratio\{[^}]*%s'
                            % GPU_B)
        # HAMi: 0 where unknown (no null in the proto)
        st, b = self.d.http("POST", "/hami/api/vgpu/v1/gpus", {"filters": {}})
        self.assertEqual(st, 200, b)
        g = {x["uuid"]: x for x in b["list"]}
        self.assertAlmostEqual(g[GPU_A]["power"], 123.456)
        self.assertEqual(g[GPU_A]["powerLimit"], 450)
        self.assertEqual(g[GPU_A]["temperature"], 61)
        self.assertEqual(g[GPU_A]["coreUtilizedPercent"], 37)
        self.assertEqual(g[GPU_B]["power"], 0)
        self.assertEqual(g[GPU_B]["temperature"], 0)
        self.assertEqual(g[GPU_B]["coreUtilizedPercent"], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
