# SPDX-License-Identifier: MIT
"""GET /metrics of the real acceld: valid for `promtool check metrics`, label
values escaped, the gauges and counters of SPEC 5.5; and Debian's prometheus
scraping a live acceld with the bearer token file and answering a query for
one of its metrics. Skips only where promtool / prometheus are absent."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import (Acceld, end_process, free_port,  # noqa: E402
                           start_prometheus, temp_dir)

G4090 = "GPU-4090aaaa-0000-4000-8000-000000000001"
G4060 = "GPU-4060bbbb-0000-4000-8000-000000000002"

# A model name with every character the exposition format escapes.
ODD = accel_harness.inventory(accel_harness.node(
    "box", accel_harness.device(G4090, 'Odd "quoted" \\ card', "24Gi"),
    memory=("64Gi", "8Gi"), cpu=("16", "2"), disk=("2Ti", "300Gi")))


def manifest(name, gpu="8Gi"):
    return accel_harness.manifest(name, gpu)


def scrape(d, token=None):
    req = urllib.request.Request(d.url + "/metrics", headers={
        "Authorization": "Bearer " + (token or d.token)})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def exercise(d):
    """Requests that fill every family: a binding, a refusal, a stop."""
    d.http("POST", "/api/apps", {"manifest": manifest("comfy")})
    d.http("POST", "/api/apps", {"manifest": manifest("huge", gpu="30Gi")})
    d.http("POST", "/api/apps/huge/resume", {"computeBinding": [
        {"nodeName": "box", "deviceId": G4090}]})
    d.http("GET", "/api/compute-resources")
    d.http("GET", "/api/apps/nope")


class MetricsTest(unittest.TestCase):
    def test_promtool_and_content(self):
        promtool = shutil.which("promtool")
        with Acceld(inventory=ODD) as d:
            exercise(d)
            st, _ = d.http("GET", "/metrics", token="")
            self.assertEqual(st, 401)
            status, ctype, text = scrape(d)
            self.assertEqual(status, 200)
            self.assertTrue(ctype.startswith("text/plain"), ctype)
            for name in ("accel_device_memory_total_bytes",
                         "accel_device_memory_allocated_bytes",
                         "accel_device_memory_free_bytes",
                         "accel_device_memory_used_bytes",
                         "accel_device_utilization_ratio",
                         "accel_device_healthy", "accel_device_share_mode",
                         "accel_device_foreign_processes",
                         "accel_device_foreign_memory_bytes",
                         "accel_app_quota_bytes", "accel_app_memory_used_bytes",
                         "accel_app_state", "accel_apps",
                         "accel_admission_refusals_total",
                         "accel_http_requests_total",
                         "accel_http_request_duration_seconds",
                         "accel_store_commit_duration_seconds"):
                self.assertIn("# TYPE %s " % name, text)
            self.assertIn('model="Odd \\"quoted\\" \\\\ card"', text)
            self.assertIn('accel_app_quota_bytes{app="comfy",owner="admin",'
                          'node="box",device="%s"} %d' % (G4090, 8 << 30), text)
            self.assertIn('accel_app_state{app="huge",owner="admin",'
                          'state="installed"} 1', text)
            self.assertIn('accel_admission_refusals_total{reason='
                          '"total-vram-below-requirement"} 1', text)
            self.assertIn('accel_http_requests_total{method="GET",'
                          'route="/api/apps/{}",status="404"} 1', text)
            self.assertRegex(text, r"accel_store_commit_duration_seconds_count"
                                   r" [1-9]")
            if promtool is None:
                self.skipTest("promtool is not installed (Debian package "
                              "prometheus)")
            r = subprocess.run([promtool, "check", "metrics"], input=text,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class PrometheusTest(unittest.TestCase):
    """Debian's prometheus scrapes acceld (1 s) and answers a query."""

    def setUp(self):
        self.prom = shutil.which("prometheus")
        if self.prom is None:
            raise unittest.SkipTest("prometheus is not installed")
        self.tmp = temp_dir(self, "accel-prom-")
        self.proc = None

    def tearDown(self):
        end_process(self.proc, 10)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_prometheus(self, d):
        self.port = free_port()
        self.proc = start_prometheus(self.prom, self.tmp, d, self.port)

    def query(self, q):
        url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (
            self.port, urllib.parse.quote(q))
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())

    def prom_log(self):
        with open(os.path.join(self.tmp, "prometheus.log"),
                  errors="replace") as f:
            return f.read()[-3000:]

    def test_scrape_and_query(self):
        with Acceld() as d:
            exercise(d)
            self.start_prometheus(d)
            q = 'accel_device_memory_total_bytes{device="%s"}' % G4060
            deadline = time.time() + 60
            result, last = [], None
            while time.time() < deadline and not result:
                time.sleep(1)
                if self.proc.poll() is not None:
                    self.fail("prometheus exited:\n" + self.prom_log())
                try:
                    ans = self.query(q)
                    result = ans["data"]["result"]
                except OSError as e:  # not listening yet
                    last = e
            self.assertTrue(result, "no sample within 60 s (%s)\n%s" %
                            (last, self.prom_log()))
            self.assertEqual(float(result[0]["value"][1]), 16 * 2**30)
            self.assertEqual(result[0]["metric"]["job"], "accel")
            up = self.query('up{job="accel"}')["data"]["result"]
            self.assertEqual(up[0]["value"][1], "1")


if __name__ == "__main__":
    unittest.main()
