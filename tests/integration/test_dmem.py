# SPDX-License-Identifier: MIT
"""The strongest VRAM tier (issue 38, SPEC 4): the kernel's dmem
controller, the NVIDIA driver's per-cgroup limits, the shim otherwise.

This machine's kernel has no dmem controller and no GPU, so acceld runs on
fixture trees: a sysfs with a Strix Halo APU at 0000:c3:00.0 and a Radeon
at 0000:03:00.0 (--sysfs-root), the
fake NVML with a GPU at 0000:01:00.0, and a cgroup root (--cgroup-root)
holding dmem.capacity and the files the kernel would show under the app's
cgroup path. The apps run for real, contained by this machine's own
cgroups; only the dmem files are the fixture's. The tests prove acceld's
side: the right file gets the right line, nothing is written where the
kernel lacks the controller, a refused write is said (never a silent
"kernel"), a malformed dmem.capacity is an event and a fallback, and
starts, releases and usage keep the files in step.
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import (BUILD_DIR, GiB, Acceld, require_binaries,  # noqa
                           temp_dir, wait_for)
from test_discovery import put, radeon, strix_halo  # noqa: E402

FAKE_NVML = os.path.join(BUILD_DIR, "fake", "libnvidia-ml.so.1")
OLD_NVML = os.path.join(BUILD_DIR, "fake", "old", "libnvidia-ml.so.1")
NODE = "box"
AMD = NODE + "-amd-0"              # the APU: Memory slicing
DGPU = NODE + "-amd-gpu-0"         # the Radeon: Exclusive only
GPU = "GPU-dddddddd-0000-4000-8000-000000000001"
AMD_REGION = "drm/0000:c3:00.0/vram0"
DGPU_REGION = "drm/0000:03:00.0/vram0"
NV_REGION = "nvidia/0000:01:00.0/vidmem"
CAPACITY = "%s 103079215104\n%s 25753026560\n%s 25769803776\n" % (
    AMD_REGION, DGPU_REGION, NV_REGION)


def manifest(name, quota="2Gi", mode="amd"):
    """An app of one device; its quota the GPU memory, or on the APU (a
    unified-memory type, SPEC 2.1) its memory."""
    unified = mode == "amd"
    m = accel_harness.manifest(name, None if unified else quota,
                               mem=quota if unified else "16Mi", cpu="10m",
                               disk="1Mi", mode=mode)
    m["run"] = {"command": ["sleep", "300"], "stopTimeoutSeconds": 2}
    return m


class DmemBase(unittest.TestCase):
    capacity = CAPACITY  # dmem.capacity of the fixture, None: no controller
    nvml_lib = FAKE_NVML
    limits_used = 777    # what the stand-in driver counts for a cgroup

    def setUp(self):
        require_binaries(FAKE_NVML, OLD_NVML)
        self.tmp = temp_dir(self, "accel-dmem-")
        self.sys = os.path.join(self.tmp, "sys")
        self.proc = os.path.join(self.tmp, "proc")
        self.cg = os.path.join(self.tmp, "cg")
        os.makedirs(os.path.join(self.sys, "class", "drm"))
        strix_halo(self.sys, "card0")
        radeon(self.sys, "card1")
        put(self.proc, "meminfo", "MemTotal:       %d kB\n"
            "MemAvailable:   %d kB\n" % (32 * GiB // 1024, 16 * GiB // 1024))
        put(self.proc, "loadavg", "0.00 0.00 0.00 1/100 1\n")
        self.limits_log = os.path.join(self.tmp, "limits.log")
        put(self.tmp, "nvml.txt",
            "driver 550.54.14\ncuda 12040\n"
            "gpu uuid=%s total=25769803776 used=0 pci=0000:01:00.0 "
            "name=NVIDIA RTX 6000 Ada\nlimits_log %s\nlimits_used %d\n"
            % (GPU, self.limits_log, self.limits_used))
        put(self.cg, "cgroup.subtree_control", "cpu memory pids\n")
        if self.capacity is not None:
            put(self.cg, "dmem.capacity", self.capacity)
        self.d = Acceld(inventory="", extra_args=[
            "--node-name", NODE, "--sysfs-root", self.sys,
            "--proc-root", self.proc, "--cgroup-root", self.cg,
            "--reconcile-interval-ms", "100"],
            env={"ACCEL_NVML_LIB": self.nvml_lib,
                 "ACCEL_FAKE_NVML": os.path.join(self.tmp, "nvml.txt")})
        self.addCleanup(self.d.close)
        self.d.start()
        self.rel = self.runtime()["enforcement"]["cgroup"]
        if self.rel is None or self.runtime()["enforcement"][
                "containment"] != "cgroup-v2":
            self.skipTest("no cgroup v2 containment here: the app has no "
                          "cgroup v2 path for the kernel's or the driver's "
                          "limits")
        self.inst = self.rel.strip("/").split("/")

    # ---- helpers ----

    def runtime(self):
        return self.d.data("/api/runtime")

    def devices(self):
        return {x["id"]: x for x in self.runtime()["devices"]}

    def app_dir(self, name):
        return os.path.join(self.cg, self.rel.strip("/"), name)

    def kernel_files(self, name, dmem_max=""):
        """What the kernel shows under the app's path once dmem is enabled
        above it: each level's cgroup.subtree_control, the app's dmem.max
        (dmem_max None: none, as where the kernel made none)."""
        level = self.cg
        for part in self.inst:
            level = os.path.join(level, part)
            put(level, "cgroup.subtree_control", "memory pids\n")
        put(self.app_dir(name), "cgroup.subtree_control", "")
        if dmem_max is not None:
            put(self.app_dir(name), "dmem.max", dmem_max)

    def read(self, *parts):
        try:
            with open(os.path.join(*parts)) as f:
                return f.read()
        except OSError:
            return None

    def set_mode(self, dev, mode):
        st, b = self.d.http(
            "PUT", "/api/compute-resources/nodes/%s/devices/%s/support-type"
            % (NODE, dev), {"supportType": mode})
        self.assertEqual(st, 200, b)

    def install(self, m, dev):
        st, b = self.d.http("POST", "/api/apps", {
            "manifest": m,
            "computeBinding": [{"nodeName": NODE, "deviceId": dev}]})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"].get("state"), "running", b)
        return self.wait_for(
            lambda: self.app(m["metadata"]["name"])["state"] == "running" and
            self.app(m["metadata"]["name"]), "app to run")

    def app(self, name):
        return self.d.data("/api/apps/" + name)

    def uninstall(self, name):
        st, b = self.d.http("DELETE", "/api/apps/" + name)
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/" + name)[0] ==
                      404, "app %s to be gone" % name)

    def events(self, kind):
        st, b = self.d.http("GET", "/api/events?limit=1000")
        self.assertEqual(st, 200, b)
        return [e for e in b["data"] if e["kind"] == kind]

    def wait_for(self, pred, what, timeout=15):
        return wait_for(self, pred, what, timeout, log=self.d)


class KernelTierTest(DmemBase):
    def test_quota_is_dmem_max_usage_is_dmem_current_release_lifts(self):
        devs = self.devices()
        amd, nv = devs[AMD]["enforcement"], devs[GPU]["enforcement"]
        self.assertEqual(amd["vramTier"], "kernel", amd)
        self.assertIn("enforced by the kernel (dmem region " + AMD_REGION,
                      amd["vramQuotas"])
        self.assertEqual(nv["vramTier"], "kernel", nv)  # r615's vidmem
        self.assertIn(NV_REGION, nv["vramQuotas"])
        self.set_mode(AMD, "MemorySlice")
        self.kernel_files("held")
        a = self.install(manifest("held", "2Gi"), AMD)
        # the quota is the app cgroup's dmem.max for the device's region,
        # dmem enabled from the root down to the app's parent
        self.assertEqual(self.read(self.app_dir("held"), "dmem.max"),
                         "%s %d" % (AMD_REGION, 2 * GiB))
        self.assertEqual(self.read(self.cg, "cgroup.subtree_control"),
                         "+dmem")
        level = self.cg
        for part in self.inst:
            level = os.path.join(level, part)
            self.assertEqual(self.read(level, "cgroup.subtree_control"),
                             "+dmem", level)
        self.assertEqual(self.read(self.app_dir("held"),
                                   "cgroup.subtree_control"), "")
        # and it is said so: by the device and by the app
        e = self.d.device(AMD)["enforcement"]
        self.assertEqual(e["memory"], "kernel", e)
        self.assertIn(AMD_REGION, e["memoryNote"])
        vram = a["enforcement"]["vram"]
        self.assertEqual([(v["deviceId"], v["memory"]) for v in vram],
                         [(AMD, "kernel")], vram)
        # a container under the app's cgroup inherits the limit: acceld
        # writes nothing in it, and says so
        put(self.app_dir("held"), "libpod-0123/dmem.max", "")
        self.assertIn("container", vram[0]["memoryNote"])
        # the app's usage is what the kernel counts (dmem.current)
        put(self.app_dir("held"), "dmem.current",
            "%s 0\n%s 123456789\n" % (NV_REGION, AMD_REGION))
        self.wait_for(lambda: self.app("held")["allocations"][0].get(
            "usedMemory") == 123456789, "usedMemory to be dmem.current")
        self.assertEqual(self.read(self.app_dir("held"), "libpod-0123",
                                   "dmem.max"), "")
        # the gpu status says per device which tier holds the quotas
        r = self.d.ctl("gpu", "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("VRAM quotas enforced by the kernel (dmem region "
                      + AMD_REGION, r.stdout)
        # the binding goes: the limit is lifted
        self.uninstall("held")
        self.assertEqual(self.read(self.app_dir("held"), "dmem.max"),
                         AMD_REGION + " max")

    def test_live_quota_is_dmem_max_at_once(self):
        """A live quota (SPEC 4.4) of a running app lands in its cgroup's
        dmem.max: a cut and a raise, each at once."""
        self.set_mode(AMD, "MemorySlice")
        self.kernel_files("live")
        self.install(manifest("live", "2Gi"), AMD)
        self.assertEqual(self.read(self.app_dir("live"), "dmem.max"),
                         "%s %d" % (AMD_REGION, 2 * GiB))
        path = "/api/apps/live/compute-resources/bindings/" + AMD
        st, b = self.d.http("PUT", path, {"memory": "1Gi"})
        self.assertEqual(st, 200, b)
        self.assertEqual(self.read(self.app_dir("live"), "dmem.max"),
                         "%s %d" % (AMD_REGION, GiB))
        st, b = self.d.http("PUT", path, {"memory": "3Gi"})
        self.assertEqual(st, 200, b)
        self.assertEqual(self.read(self.app_dir("live"), "dmem.max"),
                         "%s %d" % (AMD_REGION, 3 * GiB))
        self.assertEqual(self.app("live")["enforcement"]["vram"][0][
            "memory"], "kernel")
        self.uninstall("live")

    def test_mode_switch_lifts_the_limit(self):
        """A mode switch stops the device's apps and releases their rows:
        their limits go with them."""
        self.set_mode(AMD, "MemorySlice")
        self.kernel_files("switched")
        self.install(manifest("switched", "1Gi"), AMD)
        self.assertEqual(self.read(self.app_dir("switched"), "dmem.max"),
                         "%s %d" % (AMD_REGION, GiB))
        self.set_mode(AMD, "Exclusive")
        a = self.wait_for(lambda: self.app("switched")["state"] != "running"
                          and self.app("switched"), "the app to stop")
        self.assertEqual(a["allocations"], [], a)
        self.assertEqual(self.read(self.app_dir("switched"), "dmem.max"),
                         AMD_REGION + " max")
        self.uninstall("switched")

    def test_restart_finds_the_limit_again(self):
        """acceld SIGKILLed and restarted: the app it finds running again
        gets its limit written and read back (here the file had lost it),
        and is reported by what the file says, not by memory."""
        self.set_mode(AMD, "MemorySlice")
        self.kernel_files("kept")
        a = self.install(manifest("kept", "1Gi"), AMD)
        self.d.kill()
        put(self.app_dir("kept"), "dmem.max", AMD_REGION + " max")
        self.d.start()
        b = self.app("kept")
        self.assertEqual((b["state"], b["pid"]), ("running", a["pid"]), b)
        self.assertEqual(self.read(self.app_dir("kept"), "dmem.max"),
                         "%s %d" % (AMD_REGION, GiB))
        self.assertEqual(b["enforcement"]["vram"][0]["memory"], "kernel", b)
        self.uninstall("kept")

    def test_exclusive_sets_no_limit(self):
        self.kernel_files("whole", dmem_max="%s 1024" % DGPU_REGION)
        a = self.install(manifest("whole", "1Gi", "amd-gpu"), DGPU)
        self.assertEqual(self.read(self.app_dir("whole"), "dmem.max"),
                         DGPU_REGION + " max")
        self.assertEqual(a["enforcement"]["vram"], [])
        self.uninstall("whole")

    def test_refused_write_is_said_and_the_shim_holds_it(self):
        self.set_mode(AMD, "MemorySlice")
        self.kernel_files("refused", dmem_max=None)
        os.makedirs(os.path.join(self.app_dir("refused"), "dmem.max"))
        a = self.install(manifest("refused", "2Gi"), AMD)
        vram = a["enforcement"]["vram"]
        self.assertEqual(vram[0]["memory"], "shim", vram)
        self.assertIn("the kernel refused", vram[0]["memoryNote"])
        self.assertNotEqual(self.d.device(AMD)["enforcement"]["memory"],
                            "kernel")
        ev = self.events("app.vram")
        self.assertEqual([e["app"] for e in ev], ["refused"], ev)
        self.uninstall("refused")


class NoControllerTest(DmemBase):
    capacity = None

    def test_nothing_written_and_the_driver_holds_nvidia(self):
        devs = self.devices()
        amd, nv = devs[AMD]["enforcement"], devs[GPU]["enforcement"]
        self.assertEqual(amd["vramTier"], "shim", amd)
        self.assertIn("this kernel has no dmem controller", amd["vramQuotas"])
        self.assertEqual(nv["vramTier"], "driver", nv)
        self.assertIn("nvmlDeviceSetMemoryLimits_v1", nv["vramQuotas"])
        # an app on the Radeon: no dmem file is touched
        self.set_mode(AMD, "MemorySlice")
        self.kernel_files("plain")
        self.install(manifest("plain", "2Gi"), AMD)
        self.assertEqual(self.read(self.app_dir("plain"), "dmem.max"), "")
        self.assertEqual(self.read(self.cg, "cgroup.subtree_control"),
                         "cpu memory pids\n")
        self.assertEqual(self.app("plain")["enforcement"]["vram"][0][
            "memory"], "shim")
        # an app on the NVIDIA GPU: the driver's limit for its cgroup
        self.set_mode(GPU, "MemorySlice")
        a = self.install(manifest("nv", "3Gi", "nvidia"), GPU)
        cgdir = self.app_dir("nv")
        self.assertEqual(self.read(self.limits_log),
                         "set %s %s %d %d\n" % (GPU, cgdir, 3 * GiB, 3 * GiB))
        self.assertEqual(a["enforcement"]["vram"][0]["memory"], "driver")
        self.assertEqual(self.d.device(GPU)["enforcement"]["memory"],
                         "driver")
        self.wait_for(lambda: self.app("nv")["allocations"][0].get(
            "usedMemory") == 777, "usedMemory to be the driver's count")
        os.makedirs(cgdir, exist_ok=True)  # the cgroup still exists
        # a live quota (SPEC 4.4): the driver's limit follows at once
        st, b = self.d.http("PUT", "/api/apps/nv/compute-resources/"
                            "bindings/" + GPU, {"memory": "2Gi"})
        self.assertEqual(st, 200, b)
        self.assertEqual(self.read(self.limits_log).splitlines()[-1],
                         "set %s %s %d %d" % (GPU, cgdir, 2 * GiB, 2 * GiB))
        self.uninstall("nv")
        self.assertEqual(self.read(self.limits_log).splitlines()[-1],
                         "set %s %s 0 %d" % (GPU, cgdir, 2 ** 64 - 1))
        self.uninstall("plain")


class DriverCountMetersTest(DmemBase):
    """The outside meter (issue 35) reads what the driver counts for the
    app's cgroup where the driver holds its quota: memory no process list
    shows (NVML lists none of the app's processes here) is charged into its
    ledger, and an app beyond its quota is reported."""
    capacity = None
    limits_used = 3 * GiB + 310 * 1024 * 1024

    def test_the_cgroup_count_feeds_the_meter(self):
        self.set_mode(GPU, "MemorySlice")
        self.install(manifest("enc", "3Gi", "nvidia"), GPU)
        self.assertEqual(self.app("enc")["enforcement"]["vram"][0]["memory"],
                         "driver")
        row = self.wait_for(lambda: (lambda r: r.get("untrackedMemory") ==
                                     self.limits_used and r)(
            self.app("enc")["allocations"][0]), "the driver's count charged")
        self.assertEqual(row["driverMemory"], self.limits_used, row)
        self.assertEqual(row["overQuota"], 310 * 1024 * 1024, row)
        self.wait_for(lambda: any(
            e.get("app") == "enc" and "over quota by 310 MiB" in e["message"]
            for e in self.events("meter.over-quota")), "the event")
        self.uninstall("enc")


class OldDriverTest(DmemBase):
    capacity = None
    nvml_lib = OLD_NVML

    def test_driver_without_memory_limits_said(self):
        nv = self.devices()
        # the old driver has no PCI query either: the device is found,
        # without a region to match
        gpu = [x for x in nv.values() if x["mode"] == "nvidia"][0]
        e = gpu["enforcement"]
        self.assertEqual(e["vramTier"], "shim", e)
        self.assertIn("this kernel has no dmem controller", e["vramQuotas"])
        self.assertIn("driver 550.54.14 has no memory limits",
                      e["vramQuotas"])


class MalformedCapacityTest(DmemBase):
    capacity = AMD_REGION + " lots\n"

    def test_malformed_is_an_event_and_the_shim(self):
        e = self.devices()[AMD]["enforcement"]
        self.assertEqual(e["vramTier"], "shim", e)
        self.assertIn("dmem.capacity line 1", e["vramQuotas"])
        ev = self.events("node.dmem")
        self.assertEqual(len(ev), 1, ev)
        self.assertIn("dmem.capacity line 1", ev[0]["message"])
        # acceld goes on: an app still runs, nothing written for it
        self.set_mode(AMD, "MemorySlice")
        self.kernel_files("after")
        self.install(manifest("after"), AMD)
        self.assertEqual(self.read(self.app_dir("after"), "dmem.max"), "")
        self.uninstall("after")


if __name__ == "__main__":
    unittest.main()
