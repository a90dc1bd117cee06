# SPDX-License-Identifier: MIT
"""Elastic memory on AMD (SPEC 4.4, issue 46): two apps on an AMD
Memory-slicing card at overcommit 1.5. A HIP allocation within its quota
that finds the card short asks acceld (the shim's HIP hooks), acceld calls
the other app's reclaim action and answers once the card's free memory,
as the amdgpu driver counts it (sysfs mem_info_vram_total minus
mem_info_vram_used, else the DRM clients' fdinfo: the outside meter's
reading, issue 45), covers the request; with nothing freed in time the
allocation fails as on a full card and the event names who holds it.

acceld runs with no inventory on a fixture sysfs (test_discovery.py's
Strix Halo APU, the AMD type that has Memory slicing, SPEC 1, with a
carve-out of 4 GiB and no GTT, so that the device is a card of 4 GiB) and
a fixture proc root (test_meter_amd.py). The apps are standin_app_hip (standin_app.c over the
stand-in libamdhip64, tests/shim/fake_hip.c) with the shim preloaded: one
card of 4 GiB shared by every process (FAKE_CUDA_SHM), which the stand-in
writes into the fixture's mem_info_vram_used after every allocation and
free, as amdgpu's counter says it. This proves acceld's and the shim's
logic, not the real amdgpu driver's figures."""
import os
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import BUILD_DIR, Acceld, free_port  # noqa: E402
from test_discovery import RAM, put, strix_halo  # noqa: E402
from test_elastic import call  # noqa: E402
from test_runtime import FAKE_NVML, NODE, RuntimeBase  # noqa: E402

STANDIN = os.path.join(BUILD_DIR, "tests", "integration", "standin_app_hip")
SHIM = os.path.join(BUILD_DIR, "src", "shim", "libaccelshim.so")
FAKEHIP = os.path.join(BUILD_DIR, "tests", "shim", "fakehip")
APU = NODE + "-amd-0"  # the fixture's card0, discovered
PDEV = "0000:c3:00.0"  # its PCI address (strix_halo)
GiB = 1 << 30
CARD = 4 * GiB


def apu_4g(sys_root, card="card0"):
    """The Strix Halo fixture with a 4 GiB carve-out and no GTT, whose
    mem_info_vram_used the stand-in runtime rewrites (its directory open
    to the apps' users); the path of that file."""
    strix_halo(sys_root, card, busy="0\n", vram="%d\n" % CARD)
    dev = os.path.join(sys_root, "devices/pci0000:00/0000:c3:00.0")
    for name in ("mem_info_vram_used", "mem_info_gtt_total",
                 "mem_info_gtt_used"):
        put(dev, name, "0\n")
    os.chmod(dev, 0o777)
    os.chmod(os.path.join(dev, "mem_info_vram_used"), 0o666)
    return os.path.join(dev, "mem_info_vram_used")


@unittest.skipUnless(os.path.exists(STANDIN) and os.path.exists(SHIM),
                     "standin_app_hip or libaccelshim.so not built")
class AmdElasticTest(RuntimeBase):
    gpus = ()  # the stand-in NVML lists no GPU: the card is the DRM one

    def start_acceld(self, extra_lines=""):
        self.d = Acceld(inventory="", extra_args=[
            "--node-name", NODE, "--reconcile-interval-ms", "100"])
        self.sys = os.path.join(self.d.tmp, "sys")
        self.proc = os.path.join(self.d.tmp, "proc")
        os.makedirs(os.path.join(self.sys, "class", "drm"))
        self.used_file = apu_4g(self.sys)
        self.fdinfo = False
        put(self.proc, "meminfo", "MemTotal:       %d kB\n"
            "MemAvailable:   %d kB\n" % (RAM // 1024, RAM // 2048))
        put(self.proc, "loadavg", "0.00 0.00 0.00 1/100 1\n")
        os.chmod(self.proc, 0o777)
        self.d.extra_args += ["--sysfs-root", self.sys,
                              "--proc-root", self.proc]
        self.nvml_path = os.path.join(self.d.tmp, "nvml.txt")
        self.d.env = {"ACCEL_NVML_LIB": FAKE_NVML,
                      "ACCEL_FAKE_NVML": self.nvml_path}
        self.write_nvml(extra_lines)
        self.d.start()

    def setUp(self):
        super().setUp()
        self.card = os.path.join(self.d.tmp, "card.shm")
        with open(self.card, "wb") as f:
            f.write(bytes(4096))
        os.chmod(self.card, 0o666)

    def elastic(self, ratio, wait_ms):
        """The APU at overcommit ratio with reclaimWaitMs wait_ms."""
        st, b = self.d.http(
            "PUT", "/api/compute-resources/nodes/%s/devices/%s/elastic"
            % (NODE, APU), {"overcommit": ratio, "reclaimWaitMs": wait_ms})
        self.assertEqual(st, 200, b)

    def standin(self, name, kind, quota_gib, reclaim=None, flags=()):
        """Install standin_app_hip as app name on the APU with a quota of
        quota_gib (an amd entry's memory), holding as much (at start for
        ollama); its port."""
        port = free_port()
        m = accel_harness.manifest(name, None, "%dGi" % quota_gib,
                                   cpu="100m", disk="1Mi", mode="amd")
        if reclaim is not None:
            m["spec"]["accelerator"][0]["reclaim"] = reclaim(port)
        m["run"] = {"command": [STANDIN, kind, str(port),
                                str(quota_gib * 1024)] +
                    (["--preload"] if kind == "ollama" else []) + list(flags),
                    "env": {"FAKE_CUDA_SHM": self.card,
                            "FAKE_CUDA_TOTAL": str(CARD),
                            "FAKE_HIP_SYSFS_VRAM_USED":
                                "" if self.fdinfo else self.used_file,
                            "FAKE_HIP_DRM_ROOT":
                                self.proc if self.fdinfo else "",
                            "FAKE_HIP_DRM_PDEV": PDEV,
                            "LD_LIBRARY_PATH": FAKEHIP,
                            "ASAN_OPTIONS":
                                "verify_asan_link_order=0:detect_leaks=0"},
                    "stopTimeoutSeconds": 2}
        self.install(m, APU)
        self.wait_for(lambda: "ready" in self.d.app_log(name),
                      "%s to listen" % name, timeout=20)
        return port

    def card_figures(self):
        """(used, max_used) of the stand-in card: what the device held."""
        with open(self.card, "rb") as f:
            return struct.unpack_from("<qq", f.read(16))

    def sysfs_used(self):
        with open(self.used_file) as f:
            return int(f.read())

    def test_the_apu_is_elastic(self):
        """The discovered APU (Memory slicing, a card of 4 GiB) takes the
        elastic setting; the app's shim is given acceld's reclaim socket."""
        dev = self.device(APU)
        self.assertEqual((dev["supportType"], dev["memory"]),
                         ("MemorySlice", CARD), dev)
        self.elastic(1.5, 5000)
        self.standin("one", "comfyui", 2)
        conf = os.path.join(self.d.data_dir, "run", "apps", "one",
                            "shim.conf")
        with open(conf) as f:
            self.assertRegex(f.read(), r"(?m)^reclaim 0 /\S+/reclaim\.sock$")

    def test_hip_allocation_succeeds_after_the_other_frees(self):
        """Ollama holds 3 GiB of the 4 GiB APU, ComfyUI (quota 3 GiB) asks
        for 3 GiB: its hipMalloc is refused by the card, the shim asks,
        acceld calls Ollama's unload (keep_alive 0), reads mem_info_vram_used
        fall to 0 and answers ok; the retry succeeds. The card never holds
        more than 4 GiB."""
        self.take_turns()

    def test_fdinfo_when_the_sysfs_has_no_used_figure(self):
        """The same on a card whose sysfs has no mem_info_vram_used: acceld
        sums the card's DRM clients' fdinfo (drm-total-vram), which the
        stand-in writes per process under the fixture proc root."""
        os.unlink(self.used_file)
        self.fdinfo = True
        self.take_turns(sysfs=False)

    def take_turns(self, sysfs=True):
        self.elastic(1.5, 10000)
        po = self.standin("ollama", "ollama", 3,
                          reclaim=lambda p: {"preset": "ollama", "port": p})
        pc = self.standin("comfyui", "comfyui", 3)
        self.assertEqual(self.card_figures()[0], 3 * GiB)
        if sysfs:
            self.assertEqual(self.sysfs_used(), 3 * GiB)
        t0 = time.monotonic()
        st, b = call(pc, "POST", "/prompt", {"prompt": {}})
        took = time.monotonic() - t0
        self.assertEqual((st, b["loaded"]), (200, True), b)
        self.assertLess(took, 10, "within the wait")
        print("%s: the short hipMalloc took %.3f s" %
              ("sysfs" if sysfs else "fdinfo", took))
        self.assertEqual(self.card_figures()[0], 3 * GiB)
        if sysfs:
            self.assertEqual(self.sysfs_used(), 3 * GiB)
        self.assertEqual(call(po, "GET", "/api/ps")[1]["models"], [])
        ev = self.wait_for(lambda: self.events("memory.reclaim"),
                           "memory.reclaim")
        self.assertEqual((ev[0]["data"]["asker"], ev[0]["data"]["giver"],
                          ev[0]["data"]["bytes"]),
                         ("comfyui", "ollama", 3 * GiB), ev)
        self.assertEqual(self.events("memory.reclaim.failed"), [])
        self.assertLessEqual(self.card_figures()[1], CARD)

    def test_fails_as_on_a_full_card_when_nothing_is_freed(self):
        """Ollama's unload answers 200 and frees nothing (--lie): after the
        device's wait of 1.5 s the allocation fails (hipErrorOutOfMemory,
        2), the card still holds Ollama's 3 GiB, and memory.reclaim.failed
        names the holder."""
        self.elastic(1.5, 1500)
        self.standin("ollama", "ollama", 3, flags=("--lie",),
                     reclaim=lambda p: {"preset": "ollama", "port": p})
        pc = self.standin("comfyui", "comfyui", 3)
        t0 = time.monotonic()
        st, b = call(pc, "POST", "/prompt", {})
        took = time.monotonic() - t0
        self.assertEqual((st, b["loaded"], b["cudaError"]), (500, False, 2), b)
        self.assertGreaterEqual(took, 1.4)
        self.assertEqual(self.card_figures()[0], 3 * GiB)
        ev = self.wait_for(lambda: self.events("memory.reclaim.failed"),
                           "memory.reclaim.failed")
        self.assertEqual(ev[0]["data"]["asker"], "comfyui", ev)
        self.assertIn("ollama holds 3.0 GiB", ev[0]["message"])
        self.assertEqual(ev[0]["data"]["free"], CARD - 3 * GiB, ev)


if __name__ == "__main__":
    unittest.main()
