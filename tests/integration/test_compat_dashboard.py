# SPDX-License-Identifier: MIT
"""Contract test: the Olares Dashboard (Overview2/GPU), `olares-cli
dashboard overview gpu` and HAMi-WebUI against the real acceld's HAMi routes
(docs/compat.md, SPEC 5.4).

Client files: beclab/Olares apps/packages/app/src/apps/dashboard/types/
gpu.ts (Graphics, TaskItem, GPUNode), .../Overview2/GPU/config.ts
(TaskStatusOptions), .../Overview2/GPU/TasksTable.vue (the column formatters
read deviceShareModes[0], devicesCoreUtilizedPercent[0],
devicesMemUtilized[0]), cli/pkg/dashboard (top-level {list}/{items}, no
envelope; unknown = 200 {}); beclab/HAMi-WebUI server/api/v1/card.proto and
container.proto; Project-HAMi/HAMi-WebUI server/api/v1/node.proto. Both
prefixes (Olares's /hami/api/vgpu/v1, upstream's /api/vgpu/v1), each
sharing mode with an app bound."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compat_contract as cc  # noqa: E402
import accel_harness  # noqa: E402

G4090 = "GPU-4090aaaa-0000-4000-8000-000000000001"
G4060 = "GPU-4060bbbb-0000-4000-8000-000000000002"
PREFIXES = ("/hami/api/vgpu/v1", "/api/vgpu/v1")
MODES = (("0", "Exclusive"), ("1", "MemorySlice"), ("2", "TimeSlice"))
# the bodies the clients send (olares-cli's list body; the Dashboard's
# TaskListParams with pageRequest)
GPU_BODY = {"filters": {}, "pageRequest": {"sort": "DESC", "sortField": "id"}}
TASK_BODY = {"filters": {}, "pageRequest": {"pageSize": 10, "pageNo": 1}}


def manifest(name, gpu="2Gi"):
    return accel_harness.manifest(name, gpu, mem="64Mi", cpu="100m",
                                  disk="1Mi")


class DashboardContractTest(accel_harness.SharedAcceld):

    def bare(self, method, path, body=None):
        st, b = self.d.http(method, path, body)
        self.assertEqual(st, 200, (path, b))
        self.assertNotIn("code", b, path)  # no envelope on these routes
        return b

    def bind_in_mode(self, code, support):
        """Switch G4060 to the mode and bind app 'task' on it alone."""
        self.d.http("DELETE", "/api/apps/task")
        st, b = self.d.http(
            "PUT", "/api/compute-resources/nodes/homelab/devices/%s/"
            "support-type" % G4060, {"supportType": support})
        self.assertEqual((st, b["code"]), (200, 200), b)
        sel = {"nodeName": "homelab", "deviceId": G4060}
        if code == "1":
            sel["memory"] = 2 << 30
        st, b = self.d.http("POST", "/api/apps", {
            "manifest": manifest("task"), "computeBinding": [sel]})
        self.assertEqual((st, b["code"]), (200, 200), b)

    def check_gpus(self, prefix, code):
        b = self.bare("POST", prefix + "/gpus", GPU_BODY)
        cc.assert_holds(self, {"list": [cc.HAMI_GPU]}, b, prefix + "/gpus")
        g = {x["uuid"]: x for x in b["list"]}[G4060]
        self.assertEqual(g["shareMode"], code)
        self.assertEqual(g["memoryTotal"], 16 * 1024)  # MiB
        self.assertEqual(g["memoryUsed"], 2048 if code == "1" else 16 * 1024)
        one = self.bare("GET", prefix + "/gpu?uid=" + G4060)
        cc.assert_holds(self, cc.HAMI_GPU, one, prefix + "/gpu")
        self.assertEqual(one, g)
        self.assertEqual(self.bare("GET", prefix + "/gpu?uid=GPU-nope"), {})

    def check_tasks(self, prefix, code):
        b = self.bare("POST", prefix + "/containers", TASK_BODY)
        cc.assert_holds(self, {"items": [cc.HAMI_TASK]}, b,
                        prefix + "/containers")
        t = {x["name"]: x for x in b["items"]}["task"]
        # TasksTable.vue formats val[0] of each per-device array
        n = len(t["deviceIds"])
        self.assertGreaterEqual(n, 1, t)
        for key in ("deviceShareModes", "devicesMemUtilized",
                    "devicesCoreUtilizedPercent"):
            self.assertEqual(len(t[key]), n, (key, t))
        self.assertEqual((t["deviceIds"], t["deviceShareModes"]),
                         ([G4060], [code]))
        self.assertEqual(t["status"], "success")  # running
        self.assertEqual(t["type"], "NVIDIA")
        self.assertEqual(t["allocatedMem"], 2048 if code == "1" else 16384)
        # the deviceId filter is a prefix
        f = self.bare("POST", prefix + "/containers",
                      {"filters": {"deviceId": G4060[:10]}})
        self.assertEqual([x["name"] for x in f["items"]], ["task"])
        one = self.bare("GET", prefix + "/container?name=task&podUid=" +
                        t["podUid"])
        cc.assert_holds(self, cc.HAMI_TASK, one, prefix + "/container")
        self.assertEqual(one, t)
        self.assertEqual(self.bare("GET", prefix + "/container?name=nope"),
                         {})

    def check_nodes_summary(self, prefix):
        b = self.bare("POST", prefix + "/nodes", {"filters": {}})
        cc.assert_holds(self, {"list": [cc.HAMI_NODE]}, b, prefix + "/nodes")
        self.assertIn("homelab", [x["name"] for x in b["list"]])
        one = self.bare("GET", prefix + "/node?uid=homelab")
        cc.assert_holds(self, cc.HAMI_NODE, one, prefix + "/node")
        s = self.bare("POST", prefix + "/summary", {"filters": {}})
        cc.assert_holds(self, cc.HAMI_SUMMARY, s, prefix + "/summary")

    def test_every_route_every_mode_both_prefixes(self):
        for code, support in MODES:
            self.bind_in_mode(code, support)
            for prefix in PREFIXES:
                with self.subTest(mode=support, prefix=prefix):
                    self.check_gpus(prefix, code)
                    self.check_tasks(prefix, code)
                    self.check_nodes_summary(prefix)

    def test_stopped_task_is_closed_or_gone(self):
        self.bind_in_mode("1", "MemorySlice")
        self.d.http("POST", "/api/apps/task/suspend")
        b = self.bare("POST", PREFIXES[0] + "/containers",
                      {"filters": {"status": "success"}})
        self.assertNotIn("task", [x["name"] for x in b["items"]])
        b = self.bare("POST", PREFIXES[0] + "/containers", {})
        for t in b["items"]:
            self.assertIn(t["status"], cc.TASK_STATUS, t)


if __name__ == "__main__":
    unittest.main()
