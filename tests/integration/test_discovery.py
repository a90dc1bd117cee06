# SPDX-License-Identifier: MIT
"""Discovery without the hardware (issue 22): acceld with no inventory on a
fixture sysfs (--sysfs-root) and proc (--proc-root) tree written here, and
the tests' fake NVML. A Strix Halo APU, a discrete Radeon, an Intel Arc and
a GB10 are each found with their type, memory (and where it came from) and
readings; malformed files are logged and survived. The fixtures copy the
files' documented formats: they prove acceld's logic, not a real driver.
"""
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import accel_harness  # noqa: E402
from accel_harness import (BUILD_DIR, GiB, MiB, Acceld, require_binaries,
                           temp_dir)

FAKE_NVML = os.path.join(BUILD_DIR, "fake", "libnvidia-ml.so.1")
NODE = "box"
RAM = 32 * GiB


def put(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def link(root, rel, target):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink(target, path)


def strix_halo(sys_root, card, busy="42\n", vram="103079215104\n"):
    dev = "devices/pci0000:00/0000:c3:00.0"
    link(sys_root, "class/drm/%s/device" % card, "../../../" + dev)
    for name, text in {"vendor": "0x1002\n", "device": "0x1586\n",
                       "mem_info_vram_total": vram,
                       "mem_info_vram_used": "1073741824\n",
                       "mem_info_gtt_total": "17179869184\n",
                       "mem_info_gtt_used": "536870912\n",
                       "gpu_busy_percent": busy,
                       "hwmon/hwmon4/power1_average": "45000000\n",
                       "hwmon/hwmon4/power1_cap": "120000000\n",
                       "hwmon/hwmon4/temp1_input": "51000\n",
                       "drm/renderD128/dev": "226:128\n"}.items():
        put(sys_root, dev + "/" + name, text)


def radeon(sys_root, card):
    base = "class/drm/%s/device/" % card
    for name, text in {"vendor": "0x1002\n", "device": "0x744c\n",
                       "uevent": "PCI_SLOT_NAME=0000:03:00.0\n",
                       "product_name": "AMD Radeon RX 7900 XTX\n",
                       "mem_info_vram_total": "25753026560\n",
                       "mem_info_vram_used": "2147483648\n",
                       "gpu_busy_percent": "7\n",
                       "hwmon/hwmon1/temp1_input": "44000\n"}.items():
        put(sys_root, base + name, text)


def arc(sys_root, card):
    base = "class/drm/%s/" % card
    put(sys_root, base + "device/vendor", "0x8086\n")
    put(sys_root, base + "device/device", "0x56a0\n")
    link(sys_root, base + "device/driver", "../../bus/pci/drivers/i915")
    put(sys_root, base + "lmem_total_bytes", "17179869184\n")
    put(sys_root, base + "lmem_avail_bytes", "16106127360\n")
    put(sys_root, base + "device/hwmon/hwmon2/power1_max", "190000000\n")


class DiscoveryTest(unittest.TestCase):
    def setUp(self):
        require_binaries(FAKE_NVML)
        self.tmp = temp_dir(self, "accel-disc-")
        self.sys = os.path.join(self.tmp, "sys")
        self.proc = os.path.join(self.tmp, "proc")
        os.makedirs(os.path.join(self.sys, "class", "drm"))
        put(self.proc, "meminfo", "MemTotal:       %d kB\n"
            "MemAvailable:   %d kB\n" % (RAM // 1024, RAM // 2048))
        # an idle machine: the real load of a busy test run would put the
        # node under CPU pressure and refuse the apps the tests install
        put(self.proc, "loadavg", "0.00 0.00 0.00 1/100 1\n")
        self.nvml = os.path.join(self.tmp, "nvml.txt")
        put(self.tmp, "nvml.txt", "")
        put(self.tmp, "pci.ids",
            "1002  Advanced Micro Devices, Inc. [AMD/ATI]\n"
            "\t1586  Strix Halo [Radeon Graphics / 8050S / 8060S]\n"
            "8086  Intel Corporation\n\t56a0  DG2 [Arc A770]\n")

    def start(self):
        self.d = Acceld(inventory="", extra_args=[
            "--node-name", NODE, "--sysfs-root", self.sys,
            "--proc-root", self.proc, "--reconcile-interval-ms", "100"],
            env={"ACCEL_NVML_LIB": FAKE_NVML, "ACCEL_FAKE_NVML": self.nvml,
                 "ACCEL_PCI_IDS": os.path.join(self.tmp, "pci.ids")})
        self.addCleanup(self.d.close)
        self.d.start()

    def devices(self):
        st, body = self.d.http("GET", "/api/runtime")
        self.assertEqual(st, 200, body)
        return {x["id"]: x for x in body["data"]["devices"]}

    def test_strix_halo_radeon_arc(self):
        strix_halo(self.sys, "card0")
        radeon(self.sys, "card1")
        arc(self.sys, "card2")
        # one client of the APU: 1 GiB VRAM + 256 MiB GTT in its fdinfo
        link(self.proc, "4242/fd/7", "/dev/dri/renderD128")
        put(self.proc, "4242/fdinfo/7", "drm-pdev:\t0000:c3:00.0\n"
            "drm-client-id:\t3\ndrm-memory-vram:\t1048576 KiB\n"
            "drm-memory-gtt:\t262144 KiB\n")
        self.start()
        devs = self.devices()
        self.assertEqual(sorted(devs), ["box-amd-0", "box-amd-gpu-0",
                                        "box-intel-gpu-0"], devs)
        apu = devs["box-amd-0"]
        self.assertEqual(apu["mode"], "amd")
        self.assertEqual(apu["cardModel"],
                         "Strix Halo [Radeon Graphics / 8050S / 8060S]")
        self.assertEqual(apu["memory"], 96 * GiB + 16 * GiB)
        self.assertIn("carve-out", apu["memorySource"])
        self.assertEqual(apu["supportType"], "MemorySlice")
        self.assertEqual(apu["utilization"], 42)
        self.assertEqual(apu["power"], 45.0)
        self.assertEqual(apu["temperature"], 51)
        self.assertEqual(apu["usedMemory"], GiB + 512 * MiB)
        self.assertIn("memoryNote", apu["enforcement"])
        self.assertEqual(apu["readingsSource"]["usedMemory"],
                         "amdgpu sysfs mem_info_vram_used + mem_info_gtt_used")
        dgpu = devs["box-amd-gpu-0"]
        self.assertEqual(dgpu["mode"], "amd-gpu")
        self.assertEqual(dgpu["memory"], 25753026560)
        self.assertEqual(dgpu["cardModel"], "AMD Radeon RX 7900 XTX")
        self.assertEqual(dgpu["supportType"], "Exclusive")
        self.assertIsNone(dgpu["power"])
        self.assertIn("sysfs", dgpu["powerReason"])
        intel = devs["box-intel-gpu-0"]
        self.assertEqual(intel["mode"], "intel-gpu")
        self.assertEqual(intel["memory"], 16 * GiB)
        self.assertEqual(intel["usedMemory"], GiB)
        self.assertEqual(intel["cardModel"], "DG2 [Arc A770]")
        # no CPU fallback: the node has accelerators
        st, body = self.d.http("GET", "/api/runtime")
        self.assertNotIn("box-cpu-0", devs)
        # the readings follow the files (the reconciler's pass)
        put(self.sys, "devices/pci0000:00/0000:c3:00.0/gpu_busy_percent",
            "88\n")
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.devices()["box-amd-0"]["utilization"] == 88:
                break
            time.sleep(0.1)
        self.assertEqual(self.devices()["box-amd-0"]["utilization"], 88)

    def test_intel_igpu_used_from_fdinfo(self):
        put(self.sys, "class/drm/card0/device/vendor", "0x8086\n")
        put(self.sys, "class/drm/card0/device/device", "0x7d55\n")
        put(self.sys, "class/drm/card0/device/uevent",
            "PCI_SLOT_NAME=0000:00:02.0\n")
        link(self.sys, "class/drm/card0/device/driver",
             "../../bus/pci/drivers/xe")
        link(self.proc, "9/fd/4", "/dev/dri/renderD128")
        put(self.proc, "9/fdinfo/4", "drm-driver:\txe\n"
            "drm-pdev:\t0000:00:02.0\ndrm-client-id:\t1\n"
            "drm-total-gtt:\t64 MiB\ndrm-total-vram0:\t0\n")
        self.start()
        dev = self.devices()["box-intel-0"]
        self.assertEqual(dev["mode"], "intel")
        self.assertEqual(dev["memory"], RAM // 4 * 3)
        self.assertEqual(dev["usedMemory"], 64 * MiB)
        self.assertIn("fdinfo", dev["readingsSource"]["usedMemory"])
        self.assertEqual(dev["supportType"], "MemorySlice")
        self.assertEqual(dev["enforcement"]["memory"] in ("cgroup", "none"),
                         True, dev["enforcement"])

    def test_fdinfo_clients_are_the_apps_use_or_foreign(self):
        """A process of an app with a DRM client on its device counts as
        the binding's use there (usedMemory); one of no app is the
        device's foreignUsage."""
        put(self.sys, "class/drm/card0/device/vendor", "0x8086\n")
        put(self.sys, "class/drm/card0/device/device", "0x7d55\n")
        put(self.sys, "class/drm/card0/device/uevent",
            "PCI_SLOT_NAME=0000:00:02.0\n")
        self.start()
        manifest = accel_harness.manifest("igpu", None, "1Gi", "100m", "1Mi",
                                          mode="intel")
        manifest["run"] = {"command": ["sleep", "60"],
                           "stopTimeoutSeconds": 1}
        st, b = self.d.http("POST", "/api/apps", {"manifest": manifest})
        self.assertEqual(st, 200, b)
        self.addCleanup(self.d.http, "DELETE", "/api/apps/igpu")
        pid = b["data"]["pid"]
        client = ("drm-pdev:\t0000:00:02.0\ndrm-client-id:\t%d\n"
                  "drm-total-system0:\t%d KiB\n")
        link(self.proc, "%d/fd/3" % pid, "/dev/dri/renderD128")
        put(self.proc, "%d/fdinfo/3" % pid, client % (1, 256 * 1024))
        # pid 9999999: above Linux's PID_MAX_LIMIT (2^22), so no process
        link(self.proc, "9999999/fd/3", "/dev/dri/renderD128")
        put(self.proc, "9999999/fdinfo/3", client % (2, 64 * 1024))
        # the two fdinfo files are written one after the other, so a scan
        # may see the first alone: wait for one that saw both
        deadline = time.time() + 10
        usage = dev = None
        while time.time() < deadline:
            usage = self.d.http("GET", "/api/apps/igpu")[1]["data"][
                "allocations"][0].get("usedMemory")
            dev = self.devices()["box-intel-0"]
            if usage == 256 * MiB and dev["usedMemory"] == 320 * MiB:
                break
            time.sleep(0.1)
        self.assertEqual(usage, 256 * MiB)
        self.assertEqual(dev["usedMemory"], 320 * MiB)
        self.assertEqual(dev["foreignUsage"],
                         [{"pid": 9999999, "usedMemory": 64 * MiB}])

    def test_gb10_unified_memory(self):
        put(self.tmp, "nvml.txt", "driver 580.95.05\ncuda 13000\n"
            "gpu uuid=GPU-gb10 total=ns util=5 name=NVIDIA GB10\n")
        self.start()
        devs = self.devices()
        self.assertEqual(list(devs), ["GPU-gb10"])
        gb = devs["GPU-gb10"]
        self.assertEqual(gb["mode"], "nvidia-gb10")
        self.assertEqual(gb["memory"], RAM // 4 * 3)
        self.assertIn("NOT_SUPPORTED", gb["memorySource"])
        self.assertEqual(gb["health"], "yes")
        self.assertEqual(gb["supportType"], "MemorySlice")
        self.assertEqual(gb["readingsSource"],
                         {"usedMemory": "NVML", "telemetry": "NVML"})

    def test_no_accelerator_cpu_fallback_says_cgroup_only(self):
        self.start()
        devs = self.devices()
        self.assertEqual(list(devs), ["box-cpu-0"])
        cpu = devs["box-cpu-0"]
        self.assertEqual(cpu["memory"], RAM // 4 * 3)
        self.assertIn("CPU fallback", cpu["enforcement"]["memoryNote"])
        r = self.d.ctl("gpu", "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("CPU fallback has no device runtime", r.stdout)
        # the note is a line under the table, not a paragraph in the
        # ENFORCEMENT column (issue 40 item 6): no row runs past 120 columns
        rows = r.stdout.splitlines()
        head = next(i for i, ln in enumerate(rows) if "ENFORCEMENT" in ln)
        self.assertRegex(rows[head + 1], r"memory (cgroup|none)\*, compute none")
        self.assertLess(max(len(ln) for ln in rows[head:head + 2]), 120,
                        r.stdout)
        self.assertTrue(any(ln.startswith("* box-cpu-0 memory ") and
                            "CPU fallback has no device runtime" in ln
                            for ln in rows), r.stdout)

    def test_malformed_files_logged_no_crash(self):
        strix_halo(self.sys, "card0", busy="busy\n", vram="\n")
        put(self.sys, "class/drm/card1/device/vendor", "0xzz\n")
        link(self.proc, "77/fd/3", "/dev/dri/renderD128")
        put(self.proc, "77/fdinfo/3", "drm-pdev:\t0000:c3:00.0\n"
            "drm-memory-vram:\tlots KiB\n\x00\x01garbage")
        self.start()
        dev = self.devices()["box-amd-0"]
        self.assertEqual(dev["health"], "no")
        self.assertEqual(dev["memory"], 0)
        self.assertIsNone(dev["utilization"])
        self.assertIn("malformed", dev["utilizationReason"])
        log = self.d.log()
        self.assertIn('gpu_busy_percent holds "busy", not a number', log)
        self.assertIn('card1/device/vendor holds "0xzz"', log)


if __name__ == "__main__":
    unittest.main()
