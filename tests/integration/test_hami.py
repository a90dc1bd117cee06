# SPDX-License-Identifier: MIT
"""The HAMi-WebUI-compatible routes (SPEC 5.4) of the real acceld: the bodies
HAMi-WebUI and olares-cli send (with and without filters, empty), the fields
and MiB units they read, tokens; `accelctl dashboard`; the events long-poll
and `accelctl events --follow` seeing an event appended after it started."""
import calendar
import json
import os
import queue
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import Acceld, require_binaries, ACCELCTL  # noqa: E402

G4090 = "GPU-4090aaaa-0000-4000-8000-000000000001"
G4060 = "GPU-4060bbbb-0000-4000-8000-000000000002"
H = "/hami/api/vgpu/v1"
# comfy's series as HAMi-WebUI's task pages select them, and as the
# kube-state-metrics queries do
COMFY_TASK = 'container_name="comfy",pod_name=~"comfy",namespace_name="admin"'
COMFY_POD = 'namespace="admin", pod=~"comfy", container="comfy"'
GPU_FIELDS = {"uuid", "nodeName", "type", "vgpuUsed", "vgpuTotal", "coreUsed",
              "coreTotal", "memoryUsed", "memoryTotal", "health", "mode",
              "shareMode", "coreUtilizedPercent", "memoryUtilized",
              "memoryUtilizedPercent", "power", "powerLimit", "temperature"}
CTR_FIELDS = {"name", "status", "appName", "nodeName", "allocatedDevices",
              "allocatedCores", "allocatedMem", "type", "createTime", "podUid",
              "deviceIds", "deviceShareModes", "devicesMemUtilized",
              "devicesCoreUtilizedPercent"}


def manifest(name, gpu="8Gi"):
    return accel_harness.manifest(name, gpu)


class HamiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Acceld().start()
        st, b = cls.d.http("POST", "/api/apps", {"manifest": manifest("comfy")})
        assert st == 200, b  # binpack: 8 Gi on the 4090 (Memory slicing)
        st, b = cls.d.http("POST", "/api/users", {"name": "bob"})
        cls.bob = b["data"]["token"]
        st, b = cls.d.http("POST", "/api/apps",
                           {"manifest": manifest("bobs", gpu="2Gi")},
                           token=cls.bob)
        assert st == 200, b

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def call(self, method, path, body=None, token=None):
        return self.d.http(method, path, body, token=token)

    def gpus(self, body, token=None):
        st, b = self.call("POST", H + "/gpus", body, token=token)
        self.assertEqual(st, 200, b)
        self.assertEqual(set(b), {"list"})  # no envelope
        return {g["uuid"]: g for g in b["list"]}

    def test_gpus_bodies_with_and_without_filters(self):
        olares = {"filters": {}, "pageRequest": {"sort": "DESC",
                                                 "sortField": "id"}}
        for body in (olares, {}, b"", {"filters": None}):
            g = self.gpus(body)
            self.assertEqual(set(g), {G4090, G4060, "macmini-apple-m-0"},
                             body)  # the synthetic cpu device is no GPU
        g = self.gpus({"filters": {"uid": "", "type": "", "nodeName": "",
                                   "provider": ""}})
        self.assertEqual(len(g), 3)
        self.assertEqual(set(self.gpus({"filters": {"nodeName": "homelab"}})),
                         {G4090, G4060})
        self.assertEqual(set(self.gpus({"filters": {"uid": G4060}})), {G4060})
        self.assertEqual(set(self.gpus({"filters": {"provider": "nvidia"}})),
                         {G4090, G4060})
        st, b = self.call("POST", H + "/gpus", {"filters": {"uid": 5}})
        self.assertEqual(st, 400, b)
        st, b = self.call("POST", H + "/gpus", {"filters": []})
        self.assertEqual(st, 400, b)

    def test_gpu_fields_and_units(self):
        g = self.gpus({"filters": {}})
        for x in g.values():
            self.assertTrue(GPU_FIELDS <= set(x), x)
        a = g[G4090]
        self.assertEqual(a["memoryTotal"], 24 * 1024)  # MiB
        self.assertEqual(a["memoryUsed"], 10 * 1024)   # 8 Gi + 2 Gi quotas
        self.assertEqual(a["vgpuUsed"], 2)
        self.assertEqual(a["shareMode"], "1")
        self.assertIs(a["health"], True)
        self.assertEqual(a["coreTotal"], 100)
        self.assertEqual(g[G4060]["shareMode"], "2")
        self.assertEqual(g[G4060]["memoryUsed"], 0)
        self.assertEqual(g["macmini-apple-m-0"]["shareMode"], "0")
        self.assertEqual(g["macmini-apple-m-0"]["vgpuTotal"], 1)

    def test_gpu_by_uid(self):
        st, b = self.call("GET", H + "/gpu?uid=" + G4060)
        self.assertEqual(st, 200, b)
        self.assertEqual(b["uuid"], G4060)
        self.assertEqual(b["memoryTotal"], 16 * 1024)
        st, b = self.call("GET", H + "/gpu?uid=GPU-nope")
        self.assertEqual((st, b), (200, {}))  # HAMi: unknown is 200 {}
        st, b = self.call("GET", H + "/gpu")
        self.assertEqual(st, 400, b)

    def test_containers_and_container(self):
        for body in ({"filters": {}, "pageSize": {"pageSize": 20,
                                                  "pageNo": 1}}, {}, b""):
            st, b = self.call("POST", H + "/containers", body)
            self.assertEqual(st, 200, b)
            self.assertEqual(set(b), {"items"})
            self.assertEqual({c["name"] for c in b["items"]}, {"comfy", "bobs"})
        c = [x for x in b["items"] if x["name"] == "comfy"][0]
        self.assertTrue(CTR_FIELDS <= set(c), c)
        self.assertEqual(c["allocatedMem"], 8 * 1024)  # MiB
        self.assertEqual(c["deviceIds"], [G4090])
        self.assertEqual(c["allocatedDevices"], 1)
        self.assertEqual(c["status"], "success")  # HAMi's word for running
        self.assertEqual(c["type"], "NVIDIA")      # the vendor
        self.assertEqual(c["deviceShareModes"], ["1"])
        self.assertEqual(len(c["devicesMemUtilized"]), 1)
        self.assertEqual(len(c["devicesCoreUtilizedPercent"]), 1)
        self.assertEqual(c["namespace"], "admin")
        # the podUid is stable: the same on every call
        st, b2 = self.call("POST", H + "/containers", {"filters": {}})
        self.assertIn(c["podUid"], {x["podUid"] for x in b2["items"]})
        st, one = self.call("GET", H + "/container?name=comfy&podUid=" +
                            c["podUid"])
        self.assertEqual(st, 200, one)
        self.assertEqual(one, c)
        st, b = self.call("GET", H + "/container?name=comfy&podUid=x")
        self.assertEqual((st, b), (200, {}))
        st, b = self.call("POST", H + "/containers",
                          {"filters": {"deviceId": G4060}})
        self.assertEqual(b["items"], [])
        # deviceId is a prefix match, as in HAMi
        st, b = self.call("POST", H + "/containers",
                          {"filters": {"deviceId": G4090[:12]}})
        self.assertEqual({x["name"] for x in b["items"]}, {"comfy", "bobs"})
        st, b = self.call("POST", H + "/containers",
                          {"filters": {"status": "success"}})
        self.assertEqual({x["name"] for x in b["items"]}, {"comfy", "bobs"})
        st, b = self.call("POST", H + "/containers",
                          {"filters": {"status": "closed"}})
        self.assertEqual(b["items"], [])
        # members see their own (and shared) apps only
        st, b = self.call("POST", H + "/containers", {}, token=self.bob)
        self.assertEqual([x["name"] for x in b["items"]], ["bobs"])
        st, b = self.call("GET", H + "/container?name=comfy", token=self.bob)
        self.assertEqual((st, b), (200, {}))
        # paging
        st, b = self.call("POST", H + "/containers",
                          {"pageSize": {"pageSize": 1, "pageNo": 2}})
        self.assertEqual(len(b["items"]), 1)

    def test_summary(self):
        for body in ({"filters": {}}, {}, b""):
            st, s = self.call("POST", H + "/summary", body)
            self.assertEqual(st, 200, s)
            self.assertEqual(s["gpuCount"], 3)
            self.assertEqual(s["nodeCount"], 2)
            self.assertEqual(s["memoryTotal"], (24 + 16 + 24) * 1024)
            self.assertEqual(s["memoryUsed"], 10 * 1024)
            self.assertEqual(s["vgpuUsed"], 2)
        st, s = self.call("POST", H + "/summary",
                          {"filters": {"deviceId": G4060}})
        self.assertEqual((s["gpuCount"], s["memoryTotal"]), (1, 16 * 1024))

    def test_nodes_and_upstream_prefix(self):
        for prefix in (H, "/api/vgpu/v1"):
            st, b = self.call("POST", prefix + "/nodes", {"filters": {}})
            self.assertEqual(st, 200, b)
            n = {x["name"]: x for x in b["list"]}
            self.assertEqual(set(n), {"homelab", "macmini"})
            self.assertEqual(n["homelab"]["cardCnt"], 2)
            self.assertEqual(n["homelab"]["memoryTotal"], (24 + 16) * 1024)
            self.assertEqual(n["homelab"]["memoryUsed"], 10 * 1024)
            self.assertIs(n["homelab"]["isSchedulable"], True)
            st, g = self.call("POST", prefix + "/gpus", {"filters": {}})
            self.assertEqual(len(g["list"]), 3)
            st, one = self.call("GET", prefix + "/node?uid=homelab")
            self.assertEqual(one, n["homelab"])
            st, one = self.call("GET", prefix + "/node?uid=nope")
            self.assertEqual((st, one), (200, {}))
        st, b = self.call("POST", H + "/nodes",
                          {"filters": {"isSchedulable": "false"}})
        self.assertEqual(b["list"], [])

    def test_gpu_types_and_monitor_summary(self):
        # card.proto GetAllGPUTypes: {list: [GPUReply]}, one per type; the
        # cards and nodes pages read list[].type
        for prefix in (H, "/api/vgpu/v1"):
            for body in ({"filters": {}}, {}, b""):
                st, b = self.call("POST", prefix + "/gpu-types", body)
                self.assertEqual(st, 200, b)
                types = [g["type"] for g in b["list"]]
                self.assertEqual(len(types), len(set(types)), types)
                self.assertEqual(len(types), 3, types)  # 4090, 4060, Apple
                self.assertTrue(all(t for t in types), types)
        st, b = self.call("POST", H + "/gpu-types",
                          {"filters": {"provider": "Apple"}})
        self.assertEqual(len(b["list"]), 1, b)
        st, b = self.call("POST", H + "/gpu-types", {"filters": []})
        self.assertEqual(st, 400, b)
        self.assertIn("filters", b["message"])
        # monitor.proto Summary: percent allocated, and the scaling
        for prefix in (H, "/api/vgpu/v1"):
            st, s = self.call("POST", prefix + "/monitor/summary", {})
            self.assertEqual(st, 200, s)
            self.assertEqual(set(s), {"distributionRate", "scaling"})
            self.assertAlmostEqual(s["distributionRate"]["memory"],
                                   10 * 100 / (24 + 16 + 24), places=3)
            self.assertEqual(s["scaling"], {"vgpu": 1, "memory": 1, "core": 1})
        st, s = self.call("POST", H + "/monitor/summary", {"device": G4090})
        self.assertAlmostEqual(s["distributionRate"]["memory"], 10 * 100 / 24,
                               places=3)
        st, s = self.call("POST", H + "/monitor/summary", {"node": 3})
        self.assertEqual(st, 400, s)
        self.assertIn("node must be a string", s["message"])

    def instant(self, q, token=None):
        st, b = self.call("POST", "/api/vgpu/v1/monitor/query/instant-vector",
                          {"query": q}, token=token)
        self.assertEqual(st, 200, (q, b))
        return b["data"]

    def value(self, q, token=None):
        data = self.instant(q, token)
        self.assertEqual(len(data), 1, (q, data))
        return data[0]["value"]

    def test_monitor_allocation_metrics(self):
        # the metrics HAMi-WebUI's pages query, from the inventory, the
        # nodes and the manifests: two rows on the 4090 (comfy 8 Gi, bobs
        # 2 Gi, Memory slicing: no cores)
        self.assertEqual(self.value(
            "sum(hami_container_vgpu_allocated)"), 2)
        self.assertEqual(self.value(
            "sum(hami_container_vgpu_allocated{%s})" % COMFY_TASK), 1)
        self.assertAlmostEqual(self.value(
            "sum(hami_container_vmemory_allocated{%s}) / clamp_min(sum("
            "hami_container_vgpu_allocated{%s}), 1) / 1024"
            % (COMFY_TASK, COMFY_TASK)), 8)
        # the vendor and type pies
        pies = {x["metric"]["provider"]: x["value"] for x in self.instant(
            "count by (provider) (sum by (node,provider) (hami_vgpu_count))")}
        self.assertEqual(pies, {"NVIDIA": 1, "Apple": 1})
        types = {x["metric"]["device_type"]: x["value"] for x in self.instant(
            "count by (device_type) (sum by (device_uuid, device_type) "
            "(hami_vgpu_count))")}
        self.assertEqual(types, {"NVIDIA GeForce RTX 4090": 1,
                                 "NVIDIA GeForce RTX 4060 Ti": 1,
                                 "Apple M4 Pro": 1})
        # total cores and memory (kube-state-metrics' names), of every
        # node: homelab, macmini and this machine's own
        st, b = self.call("GET", "/api/nodes")
        nodes = {n["nodeName"]: n for n in b["data"]}
        self.assertEqual(len(nodes), 3)
        self.assertEqual(self.value(
            'sum(kube_node_status_allocatable{resource="cpu"})'),
            sum(n["cpu"]["total"] for n in nodes.values()) / 1000)
        self.assertEqual(self.value(
            'sum(kube_node_status_allocatable{resource="memory"})'),
            sum(n["memory"]["total"] for n in nodes.values()))
        self.assertEqual(self.value(
            'kube_node_status_allocatable{resource="cpu",node="macmini"}'),
            10)
        # the task's CPU and memory limits (manifest: 1 core, 1 Gi)
        self.assertEqual(self.value(
            'sum(kube_pod_container_resource_limits{resource="cpu", %s})'
            % COMFY_POD), 1)
        self.assertEqual(self.value(
            'sum(kube_pod_container_resource_limits{resource="memory", %s}) '
            "/ 1024 / 1024 / 1024" % COMFY_POD), 1)
        # a member sees the series of its own apps only
        self.assertEqual(self.value(
            "sum(hami_container_vgpu_allocated)", token=self.bob), 1)

    def test_monitor_container_labels(self):
        # HAMi-WebUI's exporter labels; container_pod_uuid is
        # "<container>:<pod uid>", so the task Top5 has a bar per workload
        st, b = self.call("POST", H + "/containers", {})
        uids = {c["name"]: c["podUid"] for c in b["items"]}
        data = self.instant("topk(5, avg by (container_pod_uuid) "
                            "(hami_container_vgpu_allocated))")
        self.assertEqual({x["metric"]["container_pod_uuid"] for x in data},
                         {"%s:%s" % (n, u) for n, u in uids.items()})
        for m in ("hami_container_vgpu_allocated",
                  "hami_container_vcore_allocated",
                  "hami_container_vmemory_allocated"):
            for x in self.instant(m):
                self.assertTrue({"node", "provider", "device_type",
                                 "device_uuid", "pod_name", "container_name",
                                 "namespace_name", "container_pod_uuid"}
                                <= set(x["metric"]), (m, x))
        for m in ("hami_core_size", "hami_memory_size", "hami_vgpu_count"):
            for x in self.instant(m):
                self.assertTrue({"node", "provider", "device_type",
                                 "device_uuid", "driver_version", "device_no"}
                                <= set(x["metric"]), (m, x))

    def test_monitor_capacity_of_every_device(self):
        # every device of every node has capacity series, the Apple card too,
        # and the total agrees with /v1/summary on the same page
        sizes = {x["metric"]["device_uuid"]: x["value"]
                 for x in self.instant("hami_memory_size")}
        self.assertEqual(sizes, {G4090: 24 * 1024, G4060: 16 * 1024,
                                 "macmini-apple-m-0": 24 * 1024})
        st, s = self.call("POST", "/api/vgpu/v1/summary", {})
        # the overview's own query is the cluster's total (two nodes: 40 Gi
        # and 24 Gi), not their average (issue 40 item 1); the node page's
        # is its node's
        self.assertEqual(self.value(
            "avg(sum(hami_memory_size) by (instance))"), s["memoryTotal"])
        self.assertEqual(self.value(
            'avg(sum(hami_memory_size{node=~"homelab"}) by (instance))'),
            40 * 1024)
        self.assertEqual(self.value("sum(hami_memory_size)"),
                         s["memoryTotal"])
        self.assertEqual(len(self.instant("hami_core_size")), 3)
        self.assertEqual(self.value(
            'sum(hami_container_vmemory_allocated{node=~"homelab"})'),
            10 * 1024)

    def test_token_required(self):
        for method, path in (("POST", "/gpus"), ("GET", "/gpu?uid=" + G4060),
                             ("POST", "/containers"),
                             ("GET", "/container?name=comfy"),
                             ("POST", "/summary"), ("POST", "/nodes")):
            st, b = self.call(method, H + path,
                              {} if method == "POST" else None, token="")
            self.assertEqual(st, 401, (path, b))
            st, b = self.call(method, H + path,
                              {} if method == "POST" else None, token="bad")
            self.assertEqual(st, 401, (path, b))

    def test_dashboard_cli(self):
        r = self.d.ctl("dashboard", "gpu", "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(G4090, r.stdout)
        self.assertIn("Memory slicing", r.stdout)
        self.assertIn("10 Gi / 24 Gi", r.stdout)
        r = self.d.ctl("-o", "json", "dashboard", "gpu", "list")
        self.assertEqual(len(json.loads(r.stdout)["list"]), 3)
        r = self.d.ctl("dashboard", "gpu", "tasks")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("comfy", r.stdout)
        self.assertIn("bobs", r.stdout)
        r = self.d.ctl("dashboard", "gpu", "get", G4090)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Memory slicing", r.stdout)
        self.assertIn("comfy", r.stdout)
        r = self.d.ctl("dashboard", "gpu", "get", "GPU-nope")
        self.assertEqual(r.returncode, 1)
        r = self.d.ctl("dashboard", "gpu", "frob")
        self.assertEqual(r.returncode, 2)


def os_image():
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("PRETTY_NAME="):
                        return line[12:].strip().strip('"').strip("'")
        except OSError:
            pass
    return ""


class NodeFieldsTest(unittest.TestCase):
    """NodeReply's machine fields: what the node knows of itself (uname,
    os-release, the address it listens on); "" for Kubernetes' own."""

    def test_local_node_fields(self):
        with Acceld(extra_args=("--node-name", "homelab")) as d:
            st, b = d.http("POST", "/api/vgpu/v1/nodes", {"filters": {}})
            self.assertEqual(st, 200, b)
            n = {x["name"]: x for x in b["list"]}
            u = os.uname()
            home = n["homelab"]  # this machine (--node-name)
            self.assertEqual(home["kernelVersion"], u.release)
            self.assertEqual(home["architecture"], u.machine)
            self.assertEqual(home["operatingSystem"], u.sysname.lower())
            self.assertEqual(home["osImage"], os_image())
            self.assertEqual(home["ip"], "127.0.0.1")  # its --listen
            for k in ("kubeletVersion", "kubeProxyVersion",
                      "containerRuntimeVersion"):
                self.assertEqual(home[k], "", k)
            # macmini is only declared: nothing known of its machine
            self.assertEqual((n["macmini"]["kernelVersion"],
                              n["macmini"]["ip"],
                              n["macmini"]["creationTimestamp"]),
                             ("", "", ""))
            # this machine's first registration: the store's creation,
            # the same after a restart
            created = home["creationTimestamp"]
            t = calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ"))
            self.assertLess(abs(time.time() - t), 3600, created)
            time.sleep(1.1)  # a renewed time would differ in its seconds
            d.stop()
            d.start()
            st, b = d.http("POST", "/api/vgpu/v1/nodes", {"filters": {}})
            home = {x["name"]: x for x in b["list"]}["homelab"]
            self.assertEqual(home["creationTimestamp"], created)
            st, one = d.http("GET", "/api/vgpu/v1/node?uid=homelab")
            self.assertEqual(one, home)
            # the ip filter now finds the node by its address
            st, b = d.http("POST", "/api/vgpu/v1/nodes",
                           {"filters": {"ip": "127.0.0.1"}})
            self.assertEqual([x["name"] for x in b["list"]], ["homelab"])
            st, b = d.http("POST", "/api/vgpu/v1/nodes",
                           {"filters": {"ip": "10.9.9.9"}})
            self.assertEqual(b["list"], [])


# A stand-in for HAMi-WebUI's own server (its NestJS proxy): what reaches
# /api/vgpu/... goes to the backend with /api/vgpu stripped, no token, the
# JSON body re-sent with its length. Written here, not upstream's code.
STAND_IN = r"""
const http = require('http');
const [port, backend] = process.argv.slice(2).map(Number);
http.createServer((req, res) => {
  if (!req.url.startsWith('/api/vgpu/')) {
    res.writeHead(404);
    res.end();
    return;
  }
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const headers = {'content-type': 'application/json'};
    if (body.length) headers['content-length'] = body.length;
    const path = req.url.slice('/api/vgpu'.length);
    const up = http.request({host: '127.0.0.1', port: backend,
                             method: req.method, path, headers}, (r) => {
      res.writeHead(r.statusCode, {'content-type': 'application/json'});
      r.pipe(res);
    });
    up.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
    up.end(body);
  });
}).listen(port, '127.0.0.1', () => console.log('ready'));
"""


class HamiListenTest(unittest.TestCase):
    """--hami-listen: HAMi-WebUI's backend, behind its own server."""

    @classmethod
    def setUpClass(cls):
        from accel_harness import free_port
        cls.hport = free_port()
        cls.d = Acceld(extra_args=("--hami-listen",
                                   "127.0.0.1:%d" % cls.hport)).start()
        st, b = cls.d.http("POST", "/api/apps", {"manifest": manifest("comfy")})
        assert st == 200, b
        cls.script = os.path.join(cls.d.tmp, "stand_in.js")
        with open(cls.script, "w") as f:
            f.write(STAND_IN)
        cls.pport = free_port()
        cls.node = subprocess.Popen(
            ["node", cls.script, str(cls.pport), str(cls.hport)],
            stdout=subprocess.PIPE, text=True)
        assert cls.node.stdout.readline().strip() == "ready"

    @classmethod
    def tearDownClass(cls):
        cls.node.terminate()
        cls.node.wait(timeout=10)
        cls.node.stdout.close()
        cls.d.close()

    def raw(self, port, method, path, body=None):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        data = None if body is None else json.dumps(body)
        c.request(method, path, body=data,
                  headers={"Content-Type": "application/json"}
                  if data is not None else {})
        r = c.getresponse()
        text = r.read()
        c.close()
        return r.status, json.loads(text) if text else None

    def test_through_hami_webuis_server(self):
        p = self.pport
        st, b = self.raw(p, "POST", "/api/vgpu/v1/gpus", {"filters": {}})
        self.assertEqual(st, 200, b)
        self.assertEqual(len(b["list"]), 3)
        st, b = self.raw(p, "POST", "/api/vgpu/v1/gpu-types", {"filters": {}})
        self.assertEqual((st, len(b["list"])), (200, 3), b)
        st, b = self.raw(p, "GET", "/api/vgpu/v1/gpu?uid=" + G4090)
        self.assertEqual(b["uuid"], G4090)
        st, b = self.raw(p, "POST", "/api/vgpu/v1/containers", {"filters": {}})
        self.assertEqual([c["name"] for c in b["items"]], ["comfy"])
        st, b = self.raw(p, "POST", "/api/vgpu/v1/nodes", {"filters": {}})
        self.assertEqual({n["name"] for n in b["list"]}, {"homelab", "macmini"})
        st, b = self.raw(p, "POST", "/api/vgpu/v1/monitor/query/instant-vector",
                         {"query": "sum(hami_memory_size)"})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"][0]["value"], 64 * 1024)
        st, b = self.raw(p, "POST", "/api/vgpu/v1/monitor/summary", {})
        self.assertEqual(st, 200, b)

    def test_only_the_hami_routes_and_read_only(self):
        h = self.hport
        st, b = self.raw(h, "GET", "/v1/gpu?uid=" + G4090)
        self.assertEqual((st, b["uuid"]), (200, G4090))  # no token asked
        for method, path, body in (("GET", "/api/apps", None),
                                   ("POST", "/api/apps",
                                    {"manifest": manifest("x")}),
                                   ("GET", "/api/vgpu/v1/nodes", None),
                                   ("POST", "/v1/../api/users",
                                    {"name": "eve"}),
                                   ("GET", "/v1/apps", None),
                                   ("GET", "/metrics", None)):
            st, b = self.raw(h, method, path, body)
            self.assertEqual(st, 404, (path, b))
        st, b = self.d.http("GET", "/api/apps")
        self.assertEqual([a["name"] for a in b["data"]], ["comfy"])
        st, b = self.d.http("GET", "/api/users")
        self.assertNotIn("eve", [u["name"] for u in b["data"]])
        # a HAMi route with another method: 405 as on the main listener;
        # both messages name the path that was asked (issue 40 item 2)
        st, b = self.raw(h, "GET", "/v1/gpus")
        self.assertEqual(st, 405, b)
        self.assertIn("GET is not allowed on /v1/gpus", json.dumps(b))
        self.assertNotIn("/api/vgpu", json.dumps(b))
        st, b = self.raw(h, "GET", "/v1/apps")
        self.assertIn("no route for GET /v1/apps", json.dumps(b))
        self.assertNotIn("/api/vgpu", json.dumps(b))

    def test_loopback_only_unless_told(self):
        from accel_harness import free_port
        d = Acceld(extra_args=("--hami-listen",
                               "0.0.0.0:%d" % free_port()))
        try:
            with self.assertRaises(RuntimeError) as e:
                d.start()
            self.assertIn("loopback address (127.0.0.0/8) only",
                          str(e.exception))
        finally:
            d.close()


class EventsTest(unittest.TestCase):
    def setUp(self):
        self.d = Acceld().start()

    def tearDown(self):
        self.d.close()

    def last_id(self):
        st, b = self.d.http("GET", "/api/events?limit=10000")
        return b["data"][-1]["id"] if b["data"] else 0

    def test_long_poll_wakes_on_append(self):
        since = self.last_id()
        t0 = time.time()
        st, b = self.d.http("GET", "/api/events?since=%d&wait=1" % since)
        self.assertEqual((st, b["data"]), (200, []))
        self.assertGreaterEqual(time.time() - t0, 0.9)
        out = {}

        def poll():
            t = time.time()
            out["r"] = self.d.http(
                "GET", "/api/events?since=%d&wait=20&kind=user.add" % since)
            out["t"] = time.time() - t
        th = threading.Thread(target=poll)
        th.start()
        time.sleep(0.5)
        self.d.http("POST", "/api/users", {"name": "carol"})
        th.join(30)
        st, b = out["r"]
        self.assertEqual(st, 200, b)
        self.assertEqual([e["kind"] for e in b["data"]], ["user.add"])
        self.assertLess(out["t"], 10)
        st, b = self.d.http("GET", "/api/events?wait=x")
        self.assertEqual(st, 400, b)

    def test_many_long_polls_hold_no_server_thread(self):
        """Twelve waiting followers (the server has 4 threads): other
        requests are still answered at once, and one event wakes them all."""
        since = self.last_id()
        out = []

        def poll():
            t = time.time()
            r = self.d.http("GET", "/api/events?since=%d&wait=30" % since,
                            timeout=60)
            out.append((r, time.time() - t))
        ths = [threading.Thread(target=poll) for _ in range(12)]
        for th in ths:
            th.start()
        time.sleep(1.0)
        t = time.time()
        st, _ = self.d.http("GET", "/api/apps")
        self.assertEqual(st, 200)
        self.assertLess(time.time() - t, 2.0)  # not queued behind the polls
        self.assertEqual(out, [])              # they are all still waiting
        self.d.http("POST", "/api/users", {"name": "dave"})
        for th in ths:
            th.join(30)
        self.assertEqual(len(out), 12)
        for (st, b), took in out:
            self.assertEqual(st, 200, b)
            self.assertIn("user.add", [e["kind"] for e in b["data"]])
            self.assertLess(took, 15)

    def test_events_recorded_and_queryable(self):
        t0 = int(time.time() * 1000)
        self.d.http("POST", "/api/apps", {"manifest": manifest("a1")})
        self.d.http("POST", "/api/apps", {"manifest": manifest("huge",
                                                               gpu="30Gi")})
        self.d.http("POST", "/api/apps/huge/resume", {"computeBinding": [
            {"nodeName": "homelab", "deviceId": G4060}]})
        self.d.http("PUT", "/api/compute-resources/nodes/homelab/devices/%s/"
                    "support-type" % G4060, {"supportType": "Exclusive"})
        self.d.http("PUT", "/api/nodes/macmini", {"enabled": False})
        self.d.http("POST", "/api/apps/a1/suspend")
        st, b = self.d.http("GET", "/api/events?sinceMs=%d" % t0)
        kinds = [e["kind"] for e in b["data"]]
        for k in ("binding.add", "app.state", "refusal", "device.mode",
                  "node.enable", "binding.release"):
            self.assertIn(k, kinds)
        ref = [e for e in b["data"] if e["kind"] == "refusal"][0]
        self.assertIn("total-vram-below-requirement", ref["data"]["code"])
        self.assertEqual(ref["data"]["requiredGpu"], 30 << 30)
        self.assertEqual(ref["data"]["devices"][0]["deviceId"], G4060)
        self.assertEqual(ref["data"]["devices"][0]["total"], 16 << 30)
        self.assertIn("free", ref["data"]["devices"][0])
        st, b = self.d.http("GET", "/api/events?app=a1")
        self.assertTrue(b["data"])
        self.assertTrue(all(e.get("app") == "a1" for e in b["data"]))
        st, b = self.d.http("GET", "/api/events?device=" + G4060)
        self.assertTrue(all(e.get("device") == G4060 for e in b["data"]))
        st, b = self.d.http("GET", "/api/events?kind=device.mode")
        self.assertEqual(len(b["data"]), 1)
        st, b = self.d.http("GET", "/api/events?sinceMs=%d" %
                            (int(time.time() * 1000) + 60000))
        self.assertEqual(b["data"], [])

    def test_follow_sees_new_event(self):
        require_binaries(ACCELCTL)
        env = dict(os.environ)
        for k in ("ACCEL_SERVER", "ACCEL_TOKEN", "ACCEL_DATA_DIR"):
            env.pop(k, None)
        p = subprocess.Popen(self.d.ctl_args("-o", "json", "events",
                                             "--follow"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in p.stdout],
                         daemon=True).start()
        try:
            first = json.loads(lines.get(timeout=10))  # the history
            self.assertEqual(first["kind"], "user.add")
            time.sleep(1)  # now it waits in the long-poll
            st, b = self.d.http("POST", "/api/apps",
                                {"manifest": manifest("late")})
            self.assertEqual(st, 200, b)
            deadline = time.time() + 10
            seen = []
            while time.time() < deadline:
                try:
                    ev = json.loads(lines.get(timeout=1))
                except queue.Empty:
                    continue
                seen.append(ev)
                if ev.get("app") == "late" and ev["kind"] == "app.state":
                    break
            self.assertIn(("late", "binding.add"),
                          [(e.get("app"), e["kind"]) for e in seen])
            self.assertEqual(p.poll(), None)  # still following
        finally:
            p.terminate()
            p.wait(5)
            p.stdout.close()
            p.stderr.close()


if __name__ == "__main__":
    unittest.main()
