# SPDX-License-Identifier: MIT
"""NVML telemetry, the metric history and the monitor routes (SPEC 5.4,
5.5) through the real acceld with the tests' fake NVML: utilization, power
and temperature (null plus a reason when NVML does not give them), the
history sampled every second (--history-interval 1) and kept across a
restart, GET /api/metrics/history with its nulls and member filtering, and
the HAMi monitor routes answering the queries the Olares Dashboard and
olares-cli send."""
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
import test_runtime as rt  # noqa: E402
from accel_harness import (ACCELD, SOURCE_DIR, end_process,  # noqa: E402
                           free_port, start_prometheus, temp_dir)

GPU_A, GPU_B, NODE = rt.GPU_A, rt.GPU_B, rt.NODE
HAMI = "/hami/api/vgpu/v1/monitor/query/"
QUERIES = os.path.join(SOURCE_DIR, "tests", "data", "monitor_queries.txt")


def client_queries():
    """[(source:key, query)] from tests/data/monitor_queries.txt."""
    out = []
    with open(QUERIES) as f:
        for line in f:
            if line.startswith("#") or "\t" not in line:
                continue
            key, q = line.rstrip("\n").split("\t", 1)
            out.append((key, q))
    return out
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
        a = self.wait_for(lambda: (lambda x: x["power"] is not None and x)(
            self.device(GPU_A)), "A's power")
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

    def test_scan_failure_is_unknown(self):
        self.wait_for(lambda: self.device(GPU_A)["temperature"] == 61, "61")
        self.write_nvml("count_err 999\n")  # NVML cannot list the GPUs
        a = self.wait_for(lambda: (lambda x: x["temperature"] is None and x)(
            self.device(GPU_A)), "stale values dropped")
        self.assertIsNone(a["power"])
        self.assertIn("not measured", a["temperatureReason"])
        self.write_nvml()
        self.wait_for(lambda: self.device(GPU_A)["temperature"] == 61,
                      "measured again")


class HistoryTest(HistoryBase):
    history_args = ["--history-interval", "1"]

    def hist(self, query="range=60&step=1", token=None, status=200):
        st, b = self.d.http("GET", "/api/metrics/history?" + query,
                            token=token)
        self.assertEqual(st, status, b)
        return b["data"] if status == 200 else b

    @staticmethod
    def series(data, dev):
        return next((x for x in data["devices"] if x["id"] == dev),
                    {k: [None] for k in ("utilization", "power",
                                         "temperature", "memoryUsed")})

    def hist_when(self, pred, what):
        """The first answer of the history route for which pred holds. The
        answer returned is the one tested: a second request could fall in
        a new last bucket that no sample has reached yet (null)."""
        def once():
            h = self.hist()
            return h if pred(h) else None
        return self.wait_for(once, what)

    def wait_last(self, field, dev, want, what):
        return self.hist_when(
            lambda h: self.series(h, dev)[field][-1] == want, what)

    def test_values_over_time_and_nulls(self):
        self.wait_last("utilization", GPU_A, 37, "A at 37 %")
        self.write_nvml(util=80, power=200000, temp=70, used=3 << 30)
        data = self.wait_last("utilization", GPU_A, 80, "A at 80 %")
        # one sample of the fake NVML may mix the old file and the new one
        # (it re-reads the file on every call): wait for a last point that
        # is wholly the new values
        a = self.series(self.hist_when(
            lambda h: (self.series(h, GPU_A)["power"][-1],
                       self.series(h, GPU_A)["temperature"][-1],
                       self.series(h, GPU_A)["memoryUsed"][-1]) ==
            (200, 70, 3 << 30), "A at 200 W, 70 C, 3 GiB"), GPU_A)
        self.assertEqual(a["temperature"][-1], 70)
        self.assertEqual(a["memoryUsed"][-1], 3 << 30)
        self.assertEqual(a["memoryTotal"], 24 << 30)
        self.assertIn(37, a["utilization"])  # the earlier value is kept
        self.assertEqual((a["nodeName"], a["index"], a["model"]),
                         (NODE, 0, "NVIDIA GeForce RTX 4090"))
        # before acceld started: nothing measured
        self.assertIsNone(a["utilization"][0])
        self.assertIsNone(a["memoryUsed"][0])
        self.assertEqual(len(data["timestamps"]), 60)
        self.assertEqual(data["step"], 1)
        self.assertEqual(data["end"] - data["start"], 60)
        self.assertEqual(data["timestamps"][-1], data["end"])
        # B: NVML does not report them: null at every point
        b = self.series(self.hist(), GPU_B)
        for k in ("utilization", "power", "temperature"):
            self.assertEqual(set(b[k]), {None}, k)
        self.assertIn(0, b["memoryUsed"])
        # the default step keeps a day to 240 points at most
        day = self.hist("range=86400")
        self.assertEqual(day["step"], 360)
        self.assertEqual(len(day["timestamps"]), 240)
        self.assertEqual(self.hist("range=3600")["step"], 15)
        for q, word in (("range=59", "range"), ("range=86401", "range"),
                        ("step=0", "step"), ("range=60&step=61", "step"),
                        ("range=abc", "range")):
            b = self.hist(q, status=400)
            self.assertIn(word + " must be", b["message"], q)

    def test_apps_and_members(self):
        st, b = self.d.http("POST", "/api/users", {"name": "bob"})
        self.assertEqual(st, 200, b)
        bob = b["data"]["token"]
        self.install(rt.manifest("mine", ["sh", "-c", "sleep 1000"]))
        body = {"manifest": rt.manifest("his", ["sh", "-c", "sleep 1000"]),
                "computeBinding": [{"nodeName": NODE, "deviceId": GPU_B}]}
        st, b = self.d.http("POST", "/api/apps", body, token=bob)
        self.assertEqual(st, 200, b)
        data = self.hist_when(
            lambda h: len([a for a in h["apps"]
                           if a["memoryUsed"][-1] is not None]) == 2,
            "both apps sampled")
        apps = {a["name"]: a for a in data["apps"]}
        self.assertEqual(apps["mine"]["owner"], "admin")
        self.assertEqual(apps["mine"]["deviceIds"], [GPU_A])
        self.assertEqual(apps["his"]["owner"], "bob")
        self.assertEqual(apps["his"]["memoryAllocated"][-1], 24 << 30)
        self.assertEqual(apps["mine"]["memoryUsed"][-1], 0)  # no shim here
        # bob sees his app only; devices are everyone's
        mine = self.hist(token=bob)
        self.assertEqual([a["name"] for a in mine["apps"]], ["his"])
        self.assertEqual(len(mine["devices"]), 2)
        # stopped: nothing measured from then on
        st, b = self.d.http("POST", "/api/apps/mine/suspend")
        self.assertEqual(st, 200, b)  # data.state may be stopping (SPEC 5.6)
        self.wait_for(lambda: {a["name"]: a for a in self.hist()["apps"]}
                      ["mine"]["memoryUsed"][-1] is None, "mine stopped")

    def test_per_app_utilization(self):
        """NVML's per-process samples give the app its own utilization (12 %
        of a card that is 37 % busy); without them, the card's figure while
        the app is alone on it."""
        a = self.install(rt.manifest("mine", ["sh", "-c", "sleep 1000"]))
        q = 'hami_container_core_used{container_name="mine"}'

        def core_used():
            st, b = self.query("instant-vector", q)
            self.assertEqual(st, 200, b)
            return b["data"] and b["data"][0]["value"]
        self.wait_for(lambda: core_used() == 37, "the card's 37 % (alone)")
        pid = self.app("mine")["pid"]
        self.write_nvml("proc %s %d 1048576 compute\nputil %s %d 12\n"
                        % (GPU_A, pid, GPU_A, pid))
        self.wait_for(lambda: core_used() == 12, "the app's own 12 %")
        apps = self.wait_for(
            lambda: [x for x in self.hist()["apps"]
                     if x["name"] == "mine" and x["utilization"][-1] == 12],
            "12 % in the history route")
        self.assertIn(None, apps[0]["utilization"])  # before it ran
        self.assertIsNotNone(a)

    def query(self, kind, q, token=None, prefix=HAMI, **rng):
        body = {"query": q}
        if kind == "range-vector":
            body["range"] = rng
        return self.d.http("POST", prefix + kind, body, token=token)

    def test_client_queries(self):
        self.install(rt.manifest("mine", ["sh", "-c", "sleep 1000"]))
        sub = {"$deviceuuid": GPU_A, "$container": "mine", "$pod": "mine",
               "$namespace": "admin"}
        want = {"alloc_core": 100, "alloc_core_total": 100,
                "alloc_core_pct": 100, "alloc_mem": 24, "alloc_mem_total": 24,
                "alloc_mem_pct": 100, "util_core": 37, "util_core_pct": 37,
                "util_mem": 1, "util_mem_total": 24,
                "util_mem_pct": 100 / 24, "power": 123.5, "temperature": 61,
                "core_used": 37, "core_alloc": 100, "core_pct": 37,
                "mem_used": 0, "mem_alloc": 24, "mem_pct": 0,
                "core_trend": 37, "mem_trend": 0, "vram_usage": 0,
                "vram_alloc": 24, "compute_trend": 37, "vram_trend": 0}
        queries = client_queries()
        self.assertGreaterEqual(len(queries), 29)

        def instant(q):
            st, b = self.query("instant-vector", q)
            self.assertEqual(st, 200, (q, b))
            return b["data"]
        self.wait_for(lambda: instant(
            'avg(sum(hami_container_core_used{container_name="mine"}) '
            'by (instance))'), "the app sampled")
        now = time.time()
        start = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now - 10))
        end = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        for key, q in queries:
            for k, v in sub.items():
                q = q.replace(k, v)
            data = instant(q)
            self.assertEqual(len(data), 1, (key, q, data))
            s = data[0]
            self.assertIsInstance(s["metric"], dict)
            self.assertTrue(s["timestamp"].isdigit(), s)
            self.assertAlmostEqual(s["value"], want[key.split(":")[1]],
                                   places=6, msg=key)
            st, b = self.query("range-vector", q, start=start, end=end,
                               step="1s")
            self.assertEqual(st, 200, (key, b))
            self.assertEqual(len(b["data"]), 1, (key, b))
            vals = b["data"][0]["values"]
            self.assertEqual(len(vals), 11, key)
            ts = [int(v["timestamp"]) for v in vals]
            self.assertEqual(ts[1] - ts[0], 1000)
            last = [v for v in vals if not v["missing"]][-1]
            self.assertAlmostEqual(last["value"], want[key.split(":")[1]],
                                   places=6, msg=key)
        # the labels the GPU page reads off the power series
        m = instant(queries[11][1].replace("$deviceuuid", GPU_A))[0]["metric"]
        self.assertEqual(m, {"device_no": "nvidia0",
                             "driver_version": "550.54.14"})
        # upstream HAMi-WebUI's path, RFC 3339 and unix-seconds bodies
        st, b = self.query("range-vector", "hami_core_util", prefix=
                           "/api/vgpu/v1/monitor/query/",
                           start=int(now - 5), end=int(now), step=1)
        self.assertEqual(st, 200, b)
        self.assertEqual(len(b["data"]), 1)  # B reports no utilization
        st, b = self.d.http("POST", "/api/vgpu/v1/monitor/query/range-vector",
                            {"query": "hami_core_size", "start":
                             time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                           time.gmtime(now - 4)),
                             "end": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                  time.gmtime(now)),
                             "step": "2s"})
        self.assertEqual(st, 200, b)
        self.assertEqual(len(b["data"]), 2)
        self.assertEqual(len(b["data"][0]["values"]), 3)

    def test_member_and_errors(self):
        st, b = self.d.http("POST", "/api/users", {"name": "bob"})
        bob = b["data"]["token"]
        self.install(rt.manifest("mine", ["sh", "-c", "sleep 1000"]))
        q = 'hami_container_vmemory_allocated{container_name="mine"}'
        self.wait_for(lambda: self.query("instant-vector", q)[1]["data"],
                      "the app sampled")
        st, b = self.query("instant-vector", q, token=bob)
        self.assertEqual((st, b["data"]), (200, []))
        for q, part in (("rate(hami_core_util[5m])",
                         "functions are not supported"),
                        ("hami_core_util > 5", "comparisons"),
                        ("hami_unknown_metric", "hami_unknown_metric")):
            st, b = self.query("instant-vector", q)
            self.assertEqual(st, 400, b)
            self.assertIn(part, b["message"])
        st, b = self.query("instant-vector", "")
        self.assertEqual(st, 400, b)
        self.assertIn("query is required", b["message"])
        for rng, part in (({"start": "yesterday", "end": "now", "step": "1m"},
                           "range.start"),
                          ({"start": 1000, "end": 2000, "step": "0s"},
                           "range.step"),
                          ({"start": 2000, "end": 1000, "step": "1s"},
                           "range.end"),
                          ({"start": 1, "end": 100000, "step": "1s"},
                           "at most"),
                          ({"start": 1e300, "end": 1e300, "step": "1s"},
                           "range.start"),
                          ({"start": 1000, "end": 2000, "step": 1e300},
                           "range.step"),
                          ({"start": 1000, "end": 2000, "step": "1e400s"},
                           "range.step")):
            st, b = self.query("range-vector", "hami_core_util", **rng)
            self.assertEqual(st, 400, (rng, b))
            self.assertIn(part, b["message"])


class RestartTest(HistoryBase):
    history_args = ["--history-interval", "1"]

    def test_history_survives_restart(self):
        def points():
            st, b = self.d.http("GET", "/api/metrics/history?range=120&step=1")
            self.assertEqual(st, 200, b)
            a = next((x for x in b["data"]["devices"] if x["id"] == GPU_A),
                     {"utilization": []})
            return [(t, u) for t, u in zip(b["data"]["timestamps"],
                                           a["utilization"]) if u is not None]
        before = self.wait_for(lambda: len(points()) >= 3 and points(),
                               "3 samples")
        self.d.stop()
        self.assertTrue(os.path.exists(os.path.join(self.d.data_dir,
                                                    "history.bin")))
        self.d.start()
        after = dict(points())
        for t, u in before:
            self.assertEqual(after.get(t), u, (t, before, after))


class HistoryBoundTest(HistoryBase):
    """The history's bound is a setting (--history-max-bytes) and what it
    keeps out is said, never dropped in silence (issue 51 item 4): at one
    sample a second for a day a card's series is 1,036,800 bytes, so a
    1 MiB bound keeps GPU_A and not GPU_B, and the log, GET /api/runtime
    and `accelctl gpu status` name GPU_B."""
    history_args = ["--history-interval", "1", "--history-retention",
                    "86400", "--history-max-bytes", "1Mi"]

    def test_what_the_bound_keeps_out_is_named(self):
        def history():
            st, b = self.d.http("GET", "/api/runtime")
            self.assertEqual(st, 200, b)
            return b["data"]["history"]
        h = self.wait_for(lambda: (lambda x: x["notRecorded"] and x)(
            history()), "a sample past the bound")
        self.assertEqual(h["notRecorded"], [{"device": GPU_B}], h)
        self.assertEqual(h["maxBytes"], 1 << 20, h)
        self.assertEqual(h["intervalSeconds"], 1, h)
        self.assertEqual(h["samples"], 86400, h)
        self.assertLessEqual(h["bytes"], 1 << 20, h)
        r = self.d.ctl("gpu", "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("warning: the metric history is full", r.stdout)
        self.assertIn("--history-max-bytes): 1 series not recorded: %s\n"
                      % GPU_B, r.stdout)
        self.assertIn("metric history full: 1 series", self.d.log())
        st, b = self.d.http("GET", "/api/metrics/history?range=60&step=1")
        self.assertEqual(st, 200, b)
        self.assertEqual([x["id"] for x in b["data"]["devices"]], [GPU_A])

    def test_the_bound_is_checked(self):
        """A bound that is not a size from 1 MiB to 64 GiB: acceld says so
        and does not start (the history's default is 16 MiB)."""
        for bad in ("10", "0", "1Ki", "65Gi", "lots", "-1Mi", ""):
            r = subprocess.run([ACCELD, "--data-dir",
                                os.path.join(self.d.tmp, "bad"),
                                "--history-max-bytes", bad],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, (bad, r.stderr))
            self.assertIn("--history-max-bytes must be a size from 1Mi to "
                          "64Gi", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(self.d.tmp, "bad")))


def prom_up(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % port,
                                    timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


class PrometheusProxyTest(HistoryBase):
    """acceld --prometheus URL: the monitor routes ask a real Prometheus
    (Debian's), which scrapes this acceld; down = 502."""

    def start_acceld(self, extra_lines=""):
        self.prom = shutil.which("prometheus")
        if self.prom is None:
            raise unittest.SkipTest("prometheus is not installed")
        self.ptmp = temp_dir(self, "accel-prom-")
        self.pport = free_port()
        self.pproc = None
        self.history_args = ["--prometheus",
                             "http://127.0.0.1:%d/" % self.pport]
        super().start_acceld(extra_lines)

    def tearDown(self):
        end_process(self.pproc, 10)
        shutil.rmtree(self.ptmp, ignore_errors=True)
        super().tearDown()

    def start_prometheus(self):
        self.pproc = start_prometheus(self.prom, self.ptmp, self.d,
                                      self.pport)

    def test_proxy(self):
        q = 'accel_device_memory_total_bytes{device="%s"}' % GPU_A
        st, b = self.d.http("POST", HAMI + "instant-vector", {"query": q})
        self.assertEqual(st, 502, b)
        self.assertEqual(b["error"], "prometheus-unavailable")
        self.assertIn("127.0.0.1:%d" % self.pport, b["message"])
        self.start_prometheus()

        def ask():
            if self.pproc.poll() is not None:
                self.fail("prometheus exited")
            if not prom_up(self.pport):
                return None
            st, b = self.d.http("POST", HAMI + "instant-vector",
                                {"query": q})
            self.assertEqual(st, 200, b)
            return b["data"]
        data = self.wait_for(ask, "a sample through Prometheus", timeout=60)
        self.assertEqual(data[0]["value"], 24 << 30)
        self.assertEqual(data[0]["metric"]["job"], "accel")
        self.assertTrue(data[0]["timestamp"].isdigit())
        now = int(time.time())
        st, b = self.d.http("POST", HAMI + "range-vector", {
            "query": "sum(%s)" % q, "range": {"start": now - 4, "end": now,
                                             "step": "1s"}})
        self.assertEqual(st, 200, b)
        vals = b["data"][0]["values"]
        self.assertEqual(len(vals), 5)
        self.assertIn(24 << 30, [v["value"] for v in vals])
        # a query Prometheus refuses: 400 with its reason
        st, b = self.d.http("POST", HAMI + "instant-vector",
                            {"query": "sum("})
        self.assertEqual(st, 400, b)
        self.assertIn("Prometheus refused the query", b["message"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
