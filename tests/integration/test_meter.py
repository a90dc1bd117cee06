# SPDX-License-Identifier: MIT
"""The outside meter (SPEC 4.2, issue 35 item 3): acceld reads what the
driver holds for a Memory-slicing app (NVML's per-process figures, host
pids) every reconcile pass, charges what it holds beyond the shim's charges
into the app's ledger as untracked memory so the app's next allocation is
refused, reports an app over its quota beyond the device's tolerance and
stops it where the device's setting says so.

The driver is the tests' stand-in NVML (tests/fake/fake_nvml.c), whose
state file the test writes as a real driver would count the app: the
shim's charges plus what it cannot see (an NVENC session, a Vulkan
context). The app is cuda_hold on the stand-in libcuda with the shim
preloaded. This proves acceld's and the shim's logic, not the real
driver's figures (tests/gpu/ does that on a GPU)."""
import os
import re
import struct
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import (BUILD_DIR, device, inventory, node,  # noqa: E402
                           wait_for)
import accel_harness  # noqa: E402
from test_runtime import NODE, RuntimeBase  # noqa: E402

HOLD = os.path.join(BUILD_DIR, "tests", "integration", "cuda_hold")
SHIM = os.path.join(BUILD_DIR, "src", "shim", "libaccelshim.so")
GPU_A = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
GPU_B = "GPU-bbbbbbbb-0000-4000-8000-000000000002"
MiB = 1 << 20

INVENTORY = inventory(node(NODE, *(
    device(g, "NVIDIA GeForce RTX 4090", "24Gi", "MemorySlice", index=i)
    for i, g in enumerate((GPU_A, GPU_B))),
    device("rt-amd-0", "Stand-in Strix Halo", type="amd"),
    device("rt-intel-0", "Stand-in Lunar Lake", type="intel")))

UNTRACKED_AT = 184  # include/accel/ledger.h: the first reserved word
CTX_COST_AT = 448  # include/accel/ledger.h: ctx_cost
CTX_MEASURED, CTX_SEEDED = 1 << 63, 1 << 62


def ledger_untracked(path):
    with open(path, "rb") as f:
        b = f.read(UNTRACKED_AT + 8)
    minor = struct.unpack_from("<H", b, 10)[0]
    return minor, struct.unpack_from("<q", b, UNTRACKED_AT)[0]


@unittest.skipUnless(os.path.exists(HOLD) and os.path.exists(SHIM),
                     "cuda_hold or libaccelshim.so not built")
class MeterTest(RuntimeBase):
    inventory = INVENTORY

    def hold(self, name, *steps, quota="1Gi", env=None):
        """Install cuda_hold as app name on GPU_A with a quota, its steps
        (MiB to allocate, "?NAME" to look NAME up, or "@PATH" to wait for
        PATH), env added to its environment; returns its pid once it waits
        at its first "@"."""
        m = accel_harness.manifest(name, quota, mem="64Mi", cpu="100m",
                                   disk="1Mi")
        m["run"] = {"command": [HOLD] + [str(s) for s in steps],
                    "env": dict({"ASAN_OPTIONS":
                                 "verify_asan_link_order=0:detect_leaks=0"},
                                **(env or {})),
                    "stopTimeoutSeconds": 2}
        a = self.install(m, GPU_A)
        self.wait_for(lambda: "waiting" in self.d.app_log(name),
                      "app %s to wait" % name)
        return a["pid"]

    def driver_holds(self, pid, mib):
        """The stand-in driver lists pid on GPU_A with mib MiB."""
        self.write_nvml("proc %s %d %d compute\n" % (GPU_A, pid, mib * MiB))

    def row(self, name):
        return self.app(name)["allocations"][0]

    def ledger(self, name):
        return os.path.join(self.d.data_dir, "run", "ledgers",
                            "%s-dev0.ledger" % name)

    def go(self, name):
        path = os.path.join(self.d.tmp, "go-" + name)
        open(path, "w").close()
        return path

    def test_unheld_lookup_is_an_event(self):
        """A name cuGetProcAddress hands out at an address the shim cannot
        hold (the stand-in's internal cuCtxCreate, FAKE_CUDA_INTERNAL)
        shows in the app's events as `shim.unheld`, once though looked up
        twice (issue 35: before, only an ACCEL_LOG line said so)."""
        go = os.path.join(self.d.tmp, "go-lookup")
        self.hold("lookup", "?cuCtxCreate", "?cuCtxCreate", "@" + go,
                  env={"FAKE_CUDA_INTERNAL": "1"})
        self.assertIn("lookup cuCtxCreate: 0", self.d.app_log("lookup"))
        ev = self.wait_for(lambda: self.events("shim.unheld"),
                           "the shim.unheld event", timeout=20)
        self.assertEqual(ev[0]["app"], "lookup", ev)
        self.assertEqual(ev[0]["data"]["name"], "cuCtxCreate", ev)
        self.assertEqual(ev[0]["data"]["version"], 12000, ev)
        self.assertEqual(ev[0]["data"]["flags"], 0, ev)
        self.assertIn("not held to the quota", ev[0]["message"], ev)
        # more reconcile passes (100 ms each): still one event
        time.sleep(1.0)
        self.assertEqual(len(self.events("shim.unheld")), 1)
        events = os.path.join(self.d.data_dir, "run", "apps", "lookup",
                              "shim.events")
        with open(events) as f:
            self.assertEqual(f.read(), "unheld cuCtxCreate 12000 0\n")

    def test_shim_events_cannot_grow(self):
        """shim.events lies outside the member's home and is writable by
        the app's group (the shim appends to it), so any process of the
        app's owner can: past 64 KiB acceld cuts it back to nothing within
        a pass, says so in its log, and reads the shim's next lines anew."""
        go = os.path.join(self.d.tmp, "go-grow")
        self.hold("grow", "@" + go)
        events = os.path.join(self.d.data_dir, "run", "apps", "grow",
                              "shim.events")
        with open(events, "a") as f:
            f.write("x" * (4 << 20))
        self.wait_for(lambda: os.path.getsize(events) <= 64 * 1024,
                      "the grown shim.events cut back", timeout=20)
        # the cut comes off the daemon's lock, its log line after it,
        # when the pass applies what it read: wait for both
        self.wait_for(lambda: "was cut back to nothing" in self.d.log(),
                      "the cut said in acceld's log", timeout=20)
        with open(events, "a") as f:
            f.write("unheld cuFoo 12000 0\n")
        ev = self.wait_for(lambda: self.events("shim.unheld"),
                           "the line after the cut read", timeout=20)
        self.assertEqual(ev[0]["data"]["name"], "cuFoo", ev)

    def test_untracked_memory_refuses_the_next_allocation(self):
        """The app holds 512 MiB through the shim; the driver counts 310
        MiB more for it (what a video session takes). The meter charges
        310 MiB into the ledger, so 256 MiB more (768 + 310 > 1024) is
        refused and the app is told 202 MiB are free. Without the meter
        the allocation passes (768 <= 1024)."""
        go = os.path.join(self.d.tmp, "go-enc")
        pid = self.hold("enc", 512, "@" + go, 256)
        self.driver_holds(pid, 512 + 310)
        row = self.wait_for(
            lambda: (lambda r: r.get("untrackedMemory") == 310 * MiB and
                     r["usedMemory"] == 512 * MiB and r)(self.row("enc")),
            "310 MiB charged as untracked")
        self.assertEqual(row["driverMemory"], 822 * MiB, row)
        self.assertEqual(row["usedMemory"], 512 * MiB, row)
        self.assertEqual(row["overQuota"], 0, row)
        self.assertEqual(ledger_untracked(self.ledger("enc")),
                         (4, 310 * MiB))  # minor 4: `active_ms`
        self.assertEqual(self.app("enc")["usage"]["untrackedMemory"],
                         310 * MiB)
        req = urllib.request.Request(self.d.url + "/metrics", headers={
            "Authorization": "Bearer " + self.d.token})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        labels = 'app="enc",owner="admin",node="%s",device="%s"' % (NODE,
                                                                     GPU_A)
        self.assertIn("accel_app_untracked_memory_bytes{%s} %d" %
                      (labels, 310 * MiB), text)
        self.assertIn("accel_app_over_quota_bytes{%s} 0" % labels, text)
        self.go("enc")
        self.wait_for(lambda: "alloc 256 MiB: " in self.d.app_log("enc"),
                      "the second allocation")
        out = self.d.app_log("enc")
        self.assertIn("info total 1024 MiB free 202 MiB", out)
        self.assertIn("alloc 256 MiB: 2", out)  # CUDA_ERROR_OUT_OF_MEMORY
        # within the quota: no over-quota event
        self.assertEqual(self.events("meter.over-quota"), [])
        # the driver lets go of it: the charge goes at the next pass
        self.driver_holds(pid, 512)
        self.wait_for(lambda: self.row("enc").get("untrackedMemory") == 0,
                      "the untracked charge to go")
        self.assertEqual(ledger_untracked(self.ledger("enc"))[1], 0)

    def ctx_cost(self, name, value=None):
        """The app's ledger's ctx_cost; written first if value is given
        (what the app's shim, or the app itself, can write there)."""
        with open(self.ledger(name), "r+b") as f:
            if value is not None:
                f.seek(CTX_COST_AT)
                f.write(struct.pack("<Q", value))
                f.flush()
            f.seek(CTX_COST_AT)
            return struct.unpack("<Q", f.read(8))[0]

    def test_context_size_seeded_and_a_bigger_one_metered(self):
        """A context's size is the device's, not the app's: acceld starts a
        new app's ledger on GPU_A with the size the other apps' processes
        measured there (the median, when more than half of at least three
        agree), marked measured and seeded, so the new app's first process
        charges it without loading NVML (tests/shim ctx_seeded). A hostile
        app's 0 is outvoted; and a context the driver shows bigger than
        the seed is the outside meter's: charged as untracked."""
        for name in ("m1", "m2", "evil"):
            self.hold(name, "@" + os.path.join(self.d.tmp, "go-" + name),
                      quota="2Gi")
        # their shims measured (the stand-ins' contexts cost nothing here):
        # two say 384 MiB, as a real driver's would; evil says 0
        self.ctx_cost("m1", CTX_MEASURED | 384 * MiB)
        self.ctx_cost("m2", CTX_MEASURED | 384 * MiB)
        self.ctx_cost("evil", CTX_MEASURED | 0)
        pid = self.hold("seeded", 512, "@" + os.path.join(self.d.tmp, "go-s"),
                        quota="2Gi")
        self.assertEqual(self.ctx_cost("seeded"),
                         CTX_MEASURED | CTX_SEEDED | 384 * MiB)
        self.wait_for(lambda: self.row("seeded")["usedMemory"] ==
                      (384 + 512) * MiB, "the seed and 512 MiB charged")
        # the driver shows its context at 484 MiB: 100 MiB past the seed
        self.driver_holds(pid, 484 + 512)
        self.wait_for(lambda: self.row("seeded").get("untrackedMemory") ==
                      100 * MiB, "the context past the seed as untracked")

    def test_every_meter_row_is_charged(self):
        """Issue 45 item 4: every driver entry point docs/shim-inventory.md
        leaves to the outside meter (module and library loads, a linker,
        graph instantiation and upload, an external memory import) takes
        memory on the stand-in card the shim never sees; the stand-in NVML
        lists what the card holds for the process (`card`), and the meter
        charges it as untracked (from its second pass that sees it, at 100
        ms a pass) and lets it go when the matching end frees it."""
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "..", "docs",
                               "shim-inventory.md")) as f:
            rows = re.findall(r"^\| `(cu\w+)` \| driver \| meter \|",
                              f.read(), re.M)
        ends = {r for r in rows if re.search("Unload|Destroy", r)}
        takes = [r for r in rows if r not in ends]
        self.assertTrue(takes and ends, rows)
        card = os.path.join(self.d.tmp, "card.shm")
        with open(card, "wb") as f:  # the app's user writes it
            f.write(bytes(4096))
        os.chmod(card, 0o666)
        self.write_nvml("card %s %s\n" % (GPU_A, card))
        size = 96 * MiB  # FAKE_CUDA_OUTSIDE_BYTES
        steps, plan = [], []
        for i, name in enumerate(takes):
            pre = (["!cuGraphInstantiateWithFlags"]
                   if name.startswith("cuGraphUpload") else [])
            a = os.path.join(self.d.tmp, "take-%d" % i)
            b = os.path.join(self.d.tmp, "end-%d" % i)
            steps += pre + ["!" + name, "@" + a, "!free", "@" + b]
            plan.append((name, size * (1 + len(pre)), a, b))
        self.hold("outside", *steps, env={"FAKE_CUDA_SHM": card})
        seen_ends = set()
        for name, want, a, b in plan:
            self.wait_for(lambda: "call %s: 0" % name in
                          self.d.app_log("outside"), name)
            t0 = time.monotonic()
            self.wait_for(lambda: self.row("outside").get(
                "untrackedMemory") == want, "%s charged (%s)" % (
                name, self.row("outside")))
            took = time.monotonic() - t0
            # the ends printed so far, counted before the app may print
            # the next (after the file exists it can at once)
            end = re.findall(r"free (\w+): 0", self.d.app_log("outside"))
            open(a, "w").close()
            self.wait_for(lambda: len(re.findall(
                r"free \w+: 0", self.d.app_log("outside"))) > len(end),
                "%s's end" % name)
            seen_ends.add(re.findall(r"free (\w+): 0",
                                     self.d.app_log("outside"))[-1])
            self.wait_for(lambda: self.row("outside").get(
                "untrackedMemory") == 0, "%s given back" % name)
            open(b, "w").close()
            print("%s: charged %.2f s after the call" % (name, took))
        self.assertEqual(seen_ends, ends)

    def test_over_quota_is_reported_and_told_by_gpu_status(self):
        """900 MiB through the shim, then 310 MiB the shim cannot see: 186
        MiB over the 1 GiB quota, beyond the default 64 MiB tolerance: an
        event, the row's overQuota and a line in `accelctl gpu status`;
        the app keeps running (the device says report)."""
        pid = self.hold("vk", 900, "@" + os.path.join(self.d.tmp, "never"))
        self.driver_holds(pid, 900 + 310)
        ev = self.wait_for(lambda: self.events("meter.over-quota"),
                           "the over-quota event")
        self.assertEqual(len(ev), 1, ev)
        self.assertEqual(ev[0]["app"], "vk")
        self.assertIn("over quota by 186 MiB: memory the shim cannot see",
                      ev[0]["message"])
        row = self.row("vk")
        self.assertEqual(row["overQuota"], 186 * MiB, row)
        self.assertTrue(row["overQuotaReported"], row)
        r = self.d.ctl("gpu", "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("vk over quota by 186 MiB: memory the shim cannot see",
                      r.stdout)
        self.assertEqual(self.app("vk")["state"], "running")
        # back within: one event, the line goes
        self.driver_holds(pid, 900)
        self.wait_for(lambda: self.events("meter.within-quota"),
                      "the within-quota event")
        self.assertNotIn("over quota", self.d.ctl("gpu", "status").stdout)
        self.assertEqual(len(self.events("meter.over-quota")), 1)

    def test_the_device_setting_stops_an_app_over_quota(self):
        st, b = self.d.http(
            "PUT", "/api/compute-resources/nodes/%s/devices/%s/meter"
            % (NODE, GPU_A), {"overQuotaAction": "stop", "tolerance": "16Mi"})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["meter"],
                         {"overQuotaAction": "stop", "tolerance": 16 * MiB})
        self.assertEqual(self.device(GPU_A)["meter"], b["data"]["meter"])
        pid = self.hold("gl", 1000, "@" + os.path.join(self.d.tmp, "never"))
        self.driver_holds(pid, 1000 + 48)  # 24 MiB over, beyond 16 MiB
        ev = self.wait_for(lambda: self.events("meter.over-quota"),
                           "the over-quota event")
        self.wait_for(lambda: self.app("gl")["state"] != "running",
                      "the stop")
        self.write_nvml()  # the driver lets go of its context
        a = self.wait_state("gl", "stopped")
        self.assertEqual(a["reason"], "over-quota")
        self.assertEqual(a["allocations"], [])
        self.assertEqual(len(ev), 1, ev)
        self.assertIn("over quota by 24 MiB", ev[0]["message"])
        self.assertIn("the device's setting stops it", ev[0]["message"])

    def test_a_tolerance_keeps_a_small_excess_quiet(self):
        pid = self.hold("small", 1000, "@" +
                        os.path.join(self.d.tmp, "never"))
        self.driver_holds(pid, 1000 + 48)  # 24 MiB over, within 64 MiB
        self.wait_for(lambda: self.row("small").get("overQuota") == 24 * MiB,
                      "the excess measured")
        self.assertFalse(self.row("small")["overQuotaReported"])
        self.assertEqual(self.events("meter.over-quota"), [])
        self.assertNotIn("over quota", self.d.ctl("gpu", "status").stdout)

    def test_meter_settings_are_validated(self):
        url = ("/api/compute-resources/nodes/%s/devices/%%s/meter" % NODE)
        before = self.device(GPU_B)["meter"]
        self.assertEqual(before, {"overQuotaAction": "report",
                                  "tolerance": 64 * MiB})
        for body, field in (
                ({"overQuotaAction": "kill"}, "overQuotaAction"),
                ({"overQuotaAction": 1}, "overQuotaAction"),
                ({"tolerance": -1}, "tolerance"),
                ({"tolerance": "lots"}, "tolerance"),
                ({"tolerance": "25Gi"}, "tolerance"),
                ({"overQuotaAction": "stop", "tolerance": "1Ti"},
                 "tolerance"),
                ({"stop": True}, "stop")):
            st, b = self.d.http("PUT", url % GPU_B, body)
            self.assertEqual(st, 400, (body, b))
            self.assertIn(field, b["message"], (body, b))
            self.assertEqual(self.device(GPU_B)["meter"], before, body)
        # AMD devices are metered too (the amdgpu fdinfo, issue 45;
        # test_meter_amd.py), Intel ones not
        st, b = self.d.http("PUT", url % "rt-amd-0", {"tolerance": 0})
        self.assertEqual(st, 200, b)
        st, b = self.d.http("PUT", url % "rt-intel-0", {"tolerance": 0})
        self.assertEqual(st, 400, b)
        self.assertIn("not an NVIDIA or AMD GPU", b["message"])
        self.assertIsNone(self.device("rt-intel-0")["meter"])
        st, b = self.d.http("PUT", url % "GPU-nope", {"tolerance": 0})
        self.assertEqual(st, 404, b)
        # an absent field keeps its value
        self.assertEqual(self.d.http("PUT", url % GPU_B,
                                     {"tolerance": 0})[0], 200)
        st, b = self.d.http("PUT", url % GPU_B, {"overQuotaAction": "stop"})
        self.assertEqual(b["data"]["meter"],
                         {"overQuotaAction": "stop", "tolerance": 0})
        # members may not
        st, b = self.d.http("POST", "/api/users", {"name": "mia"})
        self.assertEqual(st, 200, b)
        st, b = self.d.http("PUT", url % GPU_B, {"tolerance": 0},
                            token=b["data"]["token"])
        self.assertEqual(st, 403, b)

    def test_set_meter_from_the_command_line(self):
        r = self.d.ctl("set-meter", NODE, GPU_B, "--over-quota", "stop",
                       "--tolerance", "16Mi")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Outside meter of device %s on node %s: an app over "
                      "its quota by more than 16 MiB is stopped." %
                      (GPU_B, NODE), r.stdout)
        self.assertEqual(self.device(GPU_B)["meter"],
                         {"overQuotaAction": "stop", "tolerance": 16 * MiB})
        # a refusal names the option, and nothing changes
        r = self.d.ctl("set-meter", NODE, GPU_B, "--over-quota", "kill")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("accelctl set-meter: --over-quota kill: "
                      "overQuotaAction", r.stderr)
        self.assertIn("nothing changed", r.stderr)
        r = self.d.ctl("set-meter", NODE, GPU_B)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertEqual(self.device(GPU_B)["meter"],
                         {"overQuotaAction": "stop", "tolerance": 16 * MiB})
        r = self.d.ctl("set-meter", NODE, GPU_B, "--tolerance", "1000")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("by more than 1000 bytes is stopped.", r.stdout)


if __name__ == "__main__":
    unittest.main()
