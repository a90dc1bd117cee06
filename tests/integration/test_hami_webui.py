# SPDX-License-Identifier: MIT
"""Contract of upstream HAMi-WebUI's frontend (tests/data/hami_webui_*.txt,
the routes it calls and every query it builds, commit 8f42445d) against the
real acceld, over a cluster of several node and device kinds: this node
with two NVIDIA cards under the fake NVML (one measured, one whose NVML
gives nothing), a Mac mini with an Apple card and an AMD box, both only
declared. Every route and every query, instant and range, answers 200
(never 400 or 405), in the shape the pages read, with the labels they read
and a plausible value; the figures a page shows side by side (a tile from
the metrics, a count from the routes) agree."""
import json
import math
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_runtime as rt  # noqa: E402
from accel_harness import SOURCE_DIR, device, inventory, node  # noqa: E402

GPU_A, GPU_B, NODE = rt.GPU_A, rt.GPU_B, rt.NODE
AMD = "GPU-amd00000-0000-4000-8000-000000000003"
APPLE = "macmini-apple-m-0"
DATA = os.path.join(SOURCE_DIR, "tests", "data")
PREFIX = "/api/vgpu"

INVENTORY = inventory(
    node(NODE, device(GPU_A, "NVIDIA GeForce RTX 4090", "24Gi", index=0),
         device(GPU_B, "NVIDIA GeForce RTX 4090", "24Gi", "Exclusive",
                index=1)),
    node("macmini", device(APPLE, "Apple M4 Pro", None, None,
                           type="apple-m"),
         memory=("32Gi", "6Gi"), cpu=("10", "1"), disk=("1Ti", "200Gi")),
    node("amdbox", device(AMD, "AMD Radeon RX 7900 XTX", "24Gi", None,
                          type="amd-gpu"),
         memory=("128Gi", "8Gi"), cpu=("32", "2"), disk=("2Ti", "100Gi")))

LINE_A = ("gpu uuid=%s total=25769803776 used=2147483648 util=37 "
          "power=123456 limit=450000 temp=61 name=NVIDIA GeForce RTX 4090\n"
          % GPU_A)
LINE_B = ("gpu uuid=%s total=25769803776 used=0 util=ns power=ns limit=ns "
          "temp=ns name=NVIDIA GeForce RTX 4090\n" % GPU_B)


def read_table(name, ncols):
    out = []
    with open(os.path.join(DATA, name)) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            assert len(cols) == ncols, (name, line)
            out.append(cols)
    return out


class HamiWebUITest(rt.RuntimeBase):
    inventory = INVENTORY
    acceld_args = ("--history-interval", "1")

    def write_nvml(self, extra="", gpus=None):
        with open(self.nvml_path + ".tmp", "w") as f:
            f.write(rt.HEADER + LINE_A + LINE_B + extra)
        os.replace(self.nvml_path + ".tmp", self.nvml_path)

    def call(self, method, path, body=None, token=None):
        return self.d.http(method, PREFIX + path, body, token=token)

    def query(self, kind, q, span=6, step="2s"):
        body = {"query": q}
        if kind == "range-vector":
            now = time.time()
            body["range"] = {
                "start": time.strftime("%Y-%m-%d %H:%M:%S",
                                       time.localtime(now - span)),
                "end": time.strftime("%Y-%m-%d %H:%M:%S",
                                     time.localtime(now)),
                "step": step}
        st, b = self.call("POST", "/v1/monitor/query/" + kind, body)
        self.assertEqual(st, 200, (kind, q, b))
        self.assertEqual(set(b), {"data"}, b)
        return b["data"]

    def setUp(self):
        super().setUp()
        self.installed = int(time.time())  # the apps below, at or after
        # run1: a process on A, a 4 Gi quota (Memory slicing)
        m = rt.manifest("run1", ["sh", "-c", "sleep 1000"])
        m["spec"]["accelerator"][0].update(requiredGPUMemory="4Gi",
                                           limitedGPUMemory="4Gi")
        body = {"manifest": m, "computeBinding": [
            {"nodeName": NODE, "deviceId": GPU_A, "memory": 4 << 30}]}
        st, b = self.d.http("POST", "/api/apps", body)
        self.assertEqual(st, 200, b)
        # bob's app holds all of B (Exclusive), not started
        st, b = self.d.http("POST", "/api/users", {"name": "bob"})
        self.bob = b["data"]["token"]
        m = rt.manifest("bobs", ["sh", "-c", "sleep 1000"])
        st, b = self.d.http("POST", "/api/apps", {
            "manifest": m, "computeBinding": [
                {"nodeName": NODE, "deviceId": GPU_B}]}, token=self.bob)
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.query(
            "instant-vector", 'hami_container_core_util{container_name='
            '"run1"}'), "run1 measured", timeout=20)
        st, b = self.call("POST", "/v1/containers", {"filters": {}})
        self.pods = {c["name"]: c["podUid"] for c in b["items"]}
        self.sub = {"$device_uuid": GPU_A, "$node": NODE,
                    "$container": "run1", "$pod": "run1",
                    "$namespace": "admin", "$pod_uid": self.pods["run1"],
                    "$type": "NVIDIA GeForce RTX 4090"}

    def fill(self, s):
        for k in sorted(self.sub, key=len, reverse=True):
            s = s.replace(k, self.sub[k])
        return s

    def test_every_route(self):
        now = time.time()
        self.sub.update({
            "$start": time.strftime("%Y-%m-%d %H:%M:%S",
                                    time.localtime(now - 4)),
            "$end": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)),
            "$step": "2s"})
        routes = read_table("hami_webui_routes.txt", 6)
        self.assertGreaterEqual(len(routes), 14)
        rpcs = set()
        for method, path, rpc, arg, key, fields in routes:
            rpcs.add(rpc)
            arg = self.fill(arg)
            if method == "GET":
                st, b = self.call("GET", path + "?" + arg)
            else:
                st, b = self.call("POST", path, json.loads(arg))
            self.assertEqual(st, 200, (method, path, arg, b))
            items = [b] if key == "-" else b[key]
            self.assertIsInstance(items, list, (path, b))
            self.assertTrue(items, (path, arg, b))
            for it in items:
                for fld in fields.split(","):
                    self.assertIn(fld, it, (path, arg, it))
        # every rpc of upstream's server/api/v1/*.proto
        self.assertEqual(rpcs, {
            "card.proto:GetAllGPUs", "card.proto:GetAllGPUTypes",
            "card.proto:GetGPU", "container.proto:GetAllContainers",
            "container.proto:GetContainer", "node.proto:GetSummary",
            "node.proto:GetAllNodes", "node.proto:GetNode",
            "monitor.proto:QueryInstant", "monitor.proto:QueryRange",
            "monitor.proto:Summary"})
        # the cards and nodes pages read list[].type of gpu-types
        st, b = self.call("POST", "/v1/gpu-types", {"filters": {}})
        self.assertEqual(sorted(g["type"] for g in b["list"]),
                         ["AMD Radeon RX 7900 XTX", "Apple M4 Pro",
                          "NVIDIA GeForce RTX 4090"])

    def expected(self):
        """The values the pages should show, from the routes' answers."""
        st, g = self.call("POST", "/v1/gpus", {"filters": {}})
        gpus = g["list"]
        st, n = self.d.http("GET", "/api/nodes")
        by_node = {}
        for x in gpus:
            by_node.setdefault(x["nodeName"], []).append(x)
        self.assertEqual(sorted(by_node), ["amdbox", "macmini", NODE])

        # the overview's tiles are avg(sum(X) by (instance)): the cluster's
        # total, as with upstream's one exporter (issue 40 item 1), not the
        # average of the nodes' totals
        def total(field):
            return sum(x[field] for x in gpus)
        a = [x for x in gpus if x["uuid"] == GPU_A][0]
        return {
            "mem-total": total("memoryTotal") / 1024,
            "mem-usage-total": total("memoryTotal") / 1024,
            "compute-total": 100 * len(gpus),
            "vgpu-total": total("vgpuTotal"),
            "vgpu-alloc": total("vgpuUsed"),
            "mem-alloc": total("memoryUsed") / 1024,
            "compute-alloc": total("coreUsed"),
            "compute-usage": 37,  # the one card that reports (GPU A)
            "cluster-cpu": sum(x["cpu"]["total"] for x in n["data"]) / 1000,
            "cluster-memory": sum(x["memory"]["total"] for x in n["data"]),
            "gpu-compute-total": 100, "gpu-mem-total": 24,
            "gpu-mem-alloc": a["memoryUsed"] / 1024, "gpu-mem-alloc-pct":
            a["memoryUsed"] * 100 / a["memoryTotal"],
            "gpu-compute-usage": 37, "gpu-compute-usage-pct": 37,
            "gpu-mem-usage": 2, "gpu-temperature": 61,
            "gpu-power": 123.5,  # 123.456 W, as the history keeps it
            "node-mem-total": 48, "node-compute-total": 200,
            "node-mem-alloc": (4 + 24), "node-compute-alloc": 100,
            "task-gpu-cards": 1, "task-compute-limit": 0,
            "task-card-memory": 4, "task-cpu-limit": 0.01,
            "task-memory-limit": 16 / 1024,
            "trend-mem-alloc": (4 + 24) * 1024 * 100 / sum(
                x["memoryTotal"] for x in gpus),
        }

    def test_every_query(self):
        rows = read_table("hami_webui_queries.txt", 3)
        self.assertGreaterEqual(len(rows), 60)
        want = self.expected()
        checked = set()
        for src, labels, q in rows:
            key = src.split(":", 1)[1]
            q = self.fill(q)
            for kind in ("instant-vector", "range-vector"):
                data = self.query(kind, q)
                self.assertTrue(data, (kind, key, q))
                for s in data:
                    self.assertIsInstance(s["metric"], dict, s)
                    for lab in ([] if labels == "-" else labels.split(",")):
                        self.assertTrue(s["metric"].get(lab), (key, lab, s))
                    if kind == "instant-vector":
                        self.assertTrue(s["timestamp"].isdigit(), s)
                        vals = [s["value"]]
                    else:
                        self.assertTrue(s["values"], s)
                        vals = [p["value"] for p in s["values"]
                                if not p["missing"]]
                        self.assertTrue(vals, (key, s))
                    for v in vals:
                        self.assertIsInstance(v, (int, float), (key, s))
                        self.assertTrue(math.isfinite(v) and v >= 0,
                                        (key, v))
                        if key.endswith("-pct") or "alloc-top5" in key:
                            self.assertLessEqual(v, 100 + 1e-9, (key, v))
                if key in want and kind == "instant-vector":
                    self.assertEqual(len(data), 1, (key, data))
                    self.assertAlmostEqual(data[0]["value"], want[key],
                                           places=6, msg=key)
                    checked.add(key)
        self.assertEqual(checked, set(want))

    def test_trends_start_when_the_apps_were_installed(self):
        # the overview's allocation trends over an hour: the apps were
        # installed seconds ago, so the hour before has no points (it drew
        # today's allocation back over the whole range; issue 40 item 2)
        rows = dict((src.split(":", 1)[1], q) for src, _, q in
                    read_table("hami_webui_queries.txt", 3))
        for key in ("trend-mem-alloc", "trend-compute-alloc"):
            data = self.query("range-vector", rows[key], span=3600,
                              step="60s")
            self.assertEqual(len(data), 1, (key, data))
            pts = data[0]["values"]
            self.assertGreaterEqual(len(pts), 60, key)
            before = [p for p in pts
                      if int(p["timestamp"]) // 1000 < self.installed - 1]
            self.assertGreaterEqual(len(before), 55, (key, pts))
            self.assertTrue(all(p["missing"] for p in before), (key, before))
            self.assertFalse(pts[-1]["missing"], (key, pts[-1]))
            self.assertGreater(pts[-1]["value"], 0, (key, pts[-1]))

    def test_what_the_pages_read(self):
        # the vendor pie: one slice per vendor; the type pie per model
        pie = {s["metric"]["provider"]: s["value"] for s in self.query(
            "instant-vector", "count by (provider) (sum by (node,provider) "
            "(hami_vgpu_count))")}
        self.assertEqual(pie, {"NVIDIA": 1, "Apple": 1, "AMD": 1})
        # the task Top5: a bar per workload, named by container_pod_uuid
        top = self.query("instant-vector", "topk(5, avg by "
                         "(container_pod_uuid) (hami_container_vgpu_allocated"
                         "))")
        self.assertEqual(sorted(s["metric"]["container_pod_uuid"]
                                for s in top),
                         sorted("%s:%s" % kv for kv in self.pods.items()))
        # the node workload distribution
        dist = {s["metric"]["node"]: s["value"] for s in self.query(
            "instant-vector", "count(count by (node, container_pod_uuid) "
            "(hami_container_vgpu_allocated{})) by (node)")}
        self.assertEqual(dist, {NODE: 2})
        # the Apple card and the AMD card have their memory, not 0 GiB
        sizes = {s["metric"]["device_uuid"]: s["value"] for s in self.query(
            "instant-vector", "hami_memory_size")}
        st, g = self.call("POST", "/v1/gpus", {"filters": {}})
        self.assertEqual(sizes, {x["uuid"]: x["memoryTotal"]
                                 for x in g["list"]})
        # measured figures only where measured: B's NVML gives no
        # utilization, the declared nodes are not measured at all
        util = {s["metric"]["device_uuid"] for s in self.query(
            "instant-vector", "hami_core_util")}
        self.assertEqual(util, {GPU_A})
        # the overview's tiles, with the queries the page sends, and
        # /v1/summary agree (issue 40 item 1)
        st, s = self.call("POST", "/v1/summary", {"filters": {}})
        page = dict((src.split(":", 1)[1], q) for src, _, q in
                    read_table("hami_webui_queries.txt", 3)
                    if src.startswith("overview/index.vue:"))
        for key, field, scale in (("mem-total", "memoryTotal", 1024),
                                  ("mem-alloc", "memoryUsed", 1024),
                                  ("vgpu-total", "vgpuTotal", 1),
                                  ("vgpu-alloc", "vgpuUsed", 1),
                                  ("compute-alloc", "coreUsed", 1)):
            self.assertAlmostEqual(
                self.query("instant-vector", page[key])[0]["value"],
                s[field] / scale, places=6, msg=(key, s))
        # a member's view: its own workloads only
        st, b = self.d.http("POST", PREFIX + "/v1/monitor/query/"
                            "instant-vector", {"query": "sum(hami_container_"
                                               "vgpu_allocated)"},
                            token=self.bob)
        self.assertEqual(b["data"][0]["value"], 1)


if __name__ == "__main__":
    unittest.main()
