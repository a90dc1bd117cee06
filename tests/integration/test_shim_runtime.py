# SPDX-License-Identifier: MIT
"""Memory slicing enforced through acceld: the runtime creates the app's
ledger and read-only shim config, preloads libaccelshim.so, the quota holds,
the live usage shows in the API, and the files go with the binding.

The app is cuda_hold linked against the tests' fake libcuda.so.1: this
proves the wiring and the shim's logic, not the real driver."""
import glob
import os
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import (BUILD_DIR, device, inventory, manifest,  # noqa: E402
                           node, wait_for)

HOLD = os.path.join(BUILD_DIR, "tests", "integration", "cuda_hold")
HIP_HOLD = os.path.join(BUILD_DIR, "tests", "integration", "hip_hold")
SHIM = os.path.join(BUILD_DIR, "src", "shim", "libaccelshim.so")
GPU = "GPU-1ab00000-0000-4000-8000-00000000000a"
MiB = 1 << 20

INVENTORY = inventory(node(
    "lab", device(GPU),
    device("GPU-9b100000-0000-4000-8000-0000000000b1", "Stand-in GB10",
           type="nvidia-gb10"),
    device("lab-amd-0", "Stand-in Strix Halo", type="amd")))


def ledger_state(path):
    """The ledger's counters and owned slots (include/accel/ledger.h)."""
    try:
        with open(path, "rb") as f:
            b = f.read()
    except OSError as e:
        return "unreadable: %s" % e
    header = struct.unpack_from("<I", b, 12)[0]
    limit, used, peak, epoch = struct.unpack_from("<QqQQ", b, 24)
    slots = []
    for i in range(struct.unpack_from("<I", b, 16)[0]):
        key, sused, allocs = struct.unpack_from("<QqQ", b, header + 64 * i)
        if key:
            slots.append({"slot": i, "pid": key & 0x3fffff,
                          "start": key >> 22, "used": sused,
                          "allocs": allocs})
    return {"limit": limit, "used": used, "peak": peak, "epoch": epoch,
            "slots": slots}


def app(name, *mib):
    m = manifest(name, "1Gi", mem="64Mi", cpu="100m", disk="1Mi")
    m["run"] = {"command": [HOLD] + [str(x) for x in mib],
                "env": {"ASAN_OPTIONS":
                        "verify_asan_link_order=0:detect_leaks=0"},
                "stopTimeoutSeconds": 2}
    return m

# The hostile app of test_app_resizing_its_ledger_cannot_kill_acceld: it
# finds its ledger in the shim config acceld gave it and flips the file's
# size between one page and the whole ledger for 32 s, then says how often.
FLIPPER = r"""
import os, sys, time
cfg = os.environ["ACCEL_CONFIG"]
path = [ln.split()[3] for ln in open(cfg) if ln.startswith("device ")][0]
fd = os.open(path, os.O_RDWR)
print("flipping", path, flush=True)
n, end = 0, time.time() + 32
while time.time() < end:
    os.ftruncate(fd, 4096)
    os.ftruncate(fd, 16888)
    n += 1
print("flips", n, flush=True)
time.sleep(3600)
"""


@unittest.skipUnless(os.path.exists(HOLD) and os.path.exists(SHIM),
                     "cuda_hold or libaccelshim.so not built")
class ShimRuntimeTest(accel_harness.OwnAcceld):
    inventory = INVENTORY
    acceld_args = ("--node-name", "lab")

    def wait_for(self, pred, what, timeout=10):
        return wait_for(self, pred, what, timeout, step=0.1)

    def log(self, name):
        return self.d.app_log(name)

    def test_quota_enforced_and_usage_reported(self):
        st, b = self.d.http("POST", "/api/apps",
                            {"manifest": app("holder", 512, 256, 512)})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["state"], "running", b)
        self.wait_for(lambda: "ready" in self.log("holder"), "the app")
        out = self.log("holder")
        self.assertIn("alloc 512 MiB: 0", out)
        self.assertIn("alloc 256 MiB: 0", out)
        self.assertIn("alloc 512 MiB: 2", out)  # over the 1 GiB quota
        self.assertIn("total 1024 MiB free 256 MiB", out)
        # the ledger and the read-only config exist while bound
        ledgers = glob.glob(os.path.join(self.d.data_dir, "run", "ledgers",
                                         "holder-*"))
        self.assertEqual(len(ledgers), 1, ledgers)
        cfg = os.path.join(self.d.data_dir, "run", "apps", "holder",
                           "shim.conf")
        self.assertEqual(os.stat(cfg).st_mode & 0o777, 0o444)
        # live usage from the ledger, in the app and in the binding
        seen = []

        def usage_is_768():
            u = self.d.http("GET", "/api/apps/holder")[1]["data"]["usage"]
            if not seen or seen[-1][1] != u["memory"]:
                seen.append((round(time.time(), 2), u["memory"]))
            return u["memory"] == 768 * MiB
        try:
            self.wait_for(usage_is_768, "usage in /api/apps")
        except AssertionError:
            # say why: what the API showed, what the ledger holds, what
            # the shim and acceld logged (a flake seen once in three full
            # -j2 runs was not reproduced in 51 runs under load)
            self.fail("usage never 768 MiB; seen %s\nledger %s\n--- app "
                      "log ---\n%s\n--- acceld log ---\n%s" %
                      (seen, ledger_state(ledgers[0]), self.log("holder"),
                       self.d.log()))
        st, nodes = self.d.http("GET", "/api/compute-resources")
        dev = [x for n in nodes["data"] for x in n["devices"]
               if x["id"] == GPU][0]
        self.assertEqual(dev["enforcement"]["memory"], "shim")
        self.assertEqual(dev["bindings"][0]["usedMemory"], 768 * MiB)
        # stop: the process group goes, then the binding and the files
        st, b = self.d.http("POST", "/api/apps/holder/suspend")
        self.assertEqual(st, 200, b)  # data.state may be stopping (SPEC 5.6)
        b = self.wait_for(
            lambda: (lambda a: a["state"] == "stopped" and a)(
                self.d.http("GET", "/api/apps/holder")[1]["data"]),
            "holder to be stopped")
        self.assertEqual(b["allocations"], [])
        self.assertFalse(os.path.exists(ledgers[0]))
        self.assertFalse(os.path.exists(cfg))

    def unified_hold(self, name, mode, hold, device_id):
        """App name of a unified-memory mode (its quota the RAM figure,
        1 Gi, SPEC 2.1) running hold (512, 256, then 512 MiB more), placed
        on device_id: the third allocation is refused (code 2 in both
        APIs) and the view is the quota. Returns the app's log."""
        m = app(name, 512, 256, 512)
        acc = m["spec"]["accelerator"][0]
        acc["mode"] = mode
        del acc["requiredGPUMemory"], acc["limitedGPUMemory"]
        acc["requiredMemory"] = acc["limitedMemory"] = "1Gi"
        m["run"]["command"][0] = hold
        st, b = self.d.http("POST", "/api/apps", {"manifest": m})
        self.assertEqual(st, 200, b)
        self.assertEqual([x["deviceId"] for x in b["data"]["allocations"]],
                         [device_id], b)
        self.wait_for(lambda: "ready" in self.log(name), "the app")
        out = self.log(name)
        self.assertIn("alloc 512 MiB: 0", out)
        self.assertIn("alloc 256 MiB: 0", out)
        # hipErrorOutOfMemory, CUDA_ERROR_OUT_OF_MEMORY
        self.assertIn("alloc 512 MiB: 2", out)
        self.assertIn("total 1024 MiB free 256 MiB", out)
        return out

    @unittest.skipUnless(os.path.exists(HIP_HOLD), "hip_hold not built")
    def test_hip_quota_enforced_on_amd(self):
        """Issue 22: a memory slice on an AMD APU (SPEC: `amd` allows
        MemorySlice, `amd-gpu` only Exclusive), through the HIP hooks (the
        stand-in libamdhip64, not ROCm)."""
        out = self.unified_hold("hiphold", "amd", HIP_HOLD, "lab-amd-0")
        self.assertIn("HIP_VISIBLE_DEVICES=0", out)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/hiphold")[1][
            "data"]["usage"]["memory"] == 768 * MiB, "usage from the ledger")
        enf = self.d.device("lab-amd-0")["enforcement"]
        self.assertEqual(enf["memory"], "shim")
        self.assertIn("HIP", enf["memoryNote"])
        self.d.http("DELETE", "/api/apps/hiphold")

    def test_cuda_quota_enforced_on_gb10(self):
        """Issue 22: a GB10's memory slice through the CUDA hooks."""
        gb10 = "GPU-9b100000-0000-4000-8000-0000000000b1"
        self.unified_hold("gbhold", "nvidia-gb10", HOLD, gb10)
        self.assertEqual(self.d.device(gb10)["enforcement"]["memory"], "shim")
        self.d.http("DELETE", "/api/apps/gbhold")

    def test_two_processes_share_one_quota(self):
        """Two processes of one app draw on the same ledger."""
        m = app("pair", 600)
        m["run"]["command"] = ["sh", "-c", "%s 600 & exec %s 600" %
                               (HOLD, HOLD)]
        st, b = self.d.http("POST", "/api/apps", {"manifest": m})
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.log("pair").count("alloc 600") == 2,
                      "both processes")
        out = self.log("pair")
        self.assertEqual(out.count("alloc 600 MiB: 0"), 1, out)
        self.assertEqual(out.count("alloc 600 MiB: 2"), 1, out)
        self.d.http("DELETE", "/api/apps/pair")

    def test_app_resizing_its_ledger_cannot_kill_acceld(self):
        """Issue 25: the app's ledger is 0660 root:<app gid>, so its
        processes can ftruncate it. acceld used to map it and walk its
        slots; a loop flipping the size between one page and the full
        ledger made it die of SIGBUS within seconds. For 30 s such a loop
        runs as the app while every request must be answered."""
        m = app("flipper")
        m["spec"]["accelerator"][0]["limitedCpu"] = "500m"  # half a core
        m["run"]["command"] = ["python3", "-c", FLIPPER]
        st, b = self.d.http("POST", "/api/apps", {"manifest": m})
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: "flipping" in self.log("flipper"),
                      "the app to open its ledger")
        answered, deadline = 0, time.time() + 30
        while time.time() < deadline:
            for path in ("/healthz", "/api/apps/flipper",
                         "/api/compute-resources"):
                try:
                    st, b = self.d.http("GET", path, timeout=10)
                except OSError as e:
                    self.fail("acceld stopped answering after %d requests "
                              "(%s); exit status %s\n%s" %
                              (answered, e, self.d.proc.poll(), self.d.log()))
                self.assertEqual(st, 200, (path, b))
                answered += 1
            time.sleep(0.05)
        self.assertIsNone(self.d.proc.poll(), self.d.log())
        flips = self.wait_for(
            lambda: [int(x.split()[1]) for x in
                     self.log("flipper").splitlines()
                     if x.startswith("flips ")], "the app's count")
        self.assertGreater(flips[-1], 1000, "the loop hardly ran")
        # acceld still reads the (now whole) ledger and still stops the app
        a = self.d.http("GET", "/api/apps/flipper")[1]["data"]
        self.assertEqual(a["state"], "running", a)
        st, b = self.d.http("DELETE", "/api/apps/flipper")
        self.assertEqual(st, 200, b)


if __name__ == "__main__":
    unittest.main(verbosity=2)
