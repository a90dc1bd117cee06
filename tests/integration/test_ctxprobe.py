# SPDX-License-Identifier: MIT
"""acceld measures a context itself, once per local NVIDIA device (issue
45, start-up; docs/internals/shim.md "A context's size, measured by
acceld"): at start, in the background, it runs accel-ctxprobe with the
shim preloaded and a ledger of its own, and seeds every new ledger on the
device with the size the shim measured there, so that even a fresh
node's first app's first process loads no NVML.

The driver is the shim tests' stand-in libcuda.so.1 and libnvidia-ml.so.1
(tests/shim/fake_cuda.c, fake_nvml.c: NVML counts the stand-in's memory
record, FAKE_CUDA_SHM), found by the probe through ACCEL_CTXPROBE_LIBDIR;
acceld's own NVML is tests/fake's. The cards carry the stand-in's UUIDs
(GPU-face0000-...-0000000000NN), so that the probe's CUDA_VISIBLE_DEVICES
names them as acceld names an app's."""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import BUILD_DIR, device, inventory, node  # noqa: E402
import accel_harness  # noqa: E402
from test_runtime import HEADER, NODE, RuntimeBase  # noqa: E402
from test_meter import (CTX_COST_AT, CTX_MEASURED, CTX_SEEDED,  # noqa: E402
                        HOLD, SHIM)

PROBE = os.path.join(BUILD_DIR, "accel-ctxprobe")
FAKELIB = os.path.join(BUILD_DIR, "tests", "shim", "fakelib")
NOLIB = os.path.join(BUILD_DIR, "tests", "shim", "nolib")
GPU_0 = "GPU-face0000-0000-0000-0000-000000000000"
GPU_1 = "GPU-face0000-0000-0000-0000-000000000001"
MiB, GiB = 1 << 20, 1 << 30
PROBE_CTX = 300 * MiB  # the probe's context on the stand-in (its env)

LINE = ("gpu uuid=%s total=25769803776 used=%d util=0 ecc=0 err=0 "
        "uuid_err=0 name=NVIDIA GeForce RTX 4090\n")


@unittest.skipUnless(all(os.path.exists(p) for p in (HOLD, SHIM, PROBE)) and
                     os.path.isdir(FAKELIB),
                     "cuda_hold, the shim, accel-ctxprobe or the stand-ins "
                     "not built")
class CtxProbeTest(RuntimeBase):
    gpus = (GPU_0, GPU_1)
    inventory = inventory(node(NODE, *(
        device(g, "NVIDIA GeForce RTX 4090", "24Gi", "MemorySlice", index=i)
        for i, g in enumerate((GPU_0, GPU_1)))))
    libdir = FAKELIB
    used = {}  # uuid -> bytes the stand-in NVML shows used at start

    def start_acceld(self, extra_lines=""):
        # the probe's stand-in driver, from acceld's environment: its card
        # record and the size of its context
        self.shm = os.path.join(tempfile.gettempdir(),
                                "probe-%d.shm" % os.getpid())
        self.addCleanup(lambda: os.path.exists(self.shm) and
                        os.unlink(self.shm))
        # (an ASan build: the probe's preloaded shim comes before the ASan
        # runtime, as in the apps' runs, whose manifests say the same)
        asan = os.environ.get("ASAN_OPTIONS", "")
        self.acceld_env = dict(self.more_env(), **{
            "ACCEL_CTXPROBE_LIBDIR": self.libdir,
            "FAKE_CUDA_SHM": self.shm,
            "FAKE_CUDA_CTX_BYTES": str(PROBE_CTX),
            "ASAN_OPTIONS": (asan + ":" if asan else "") +
            "verify_asan_link_order=0"})
        super().start_acceld(extra_lines)

    def more_env(self):
        """More of acceld's environment (a subclass's)."""
        return {}

    def write_nvml(self, extra="", gpus=None):
        text = HEADER
        for g in (self.gpus if gpus is None else gpus):
            text += LINE % (g, self.used.get(g, GiB))
        with open(self.nvml_path + ".tmp", "w") as f:
            f.write(text + extra)
        os.replace(self.nvml_path + ".tmp", self.nvml_path)

    def hold(self, name, *steps):
        """cuda_hold as app name on GPU_0 (2 GiB quota), able to load the
        stand-in NVML itself (LD_LIBRARY_PATH) were it to measure; its pid
        once it waits at its first "@"."""
        m = accel_harness.manifest(name, "2Gi", mem="64Mi", cpu="100m",
                                   disk="1Mi")
        m["run"] = {"command": [HOLD] + [str(s) for s in steps],
                    "env": {"LD_LIBRARY_PATH": FAKELIB,
                            "ASAN_OPTIONS":
                            "verify_asan_link_order=0:detect_leaks=0"},
                    "stopTimeoutSeconds": 2}
        a = self.install(m, GPU_0)
        self.wait_for(lambda: "waiting" in self.d.app_log(name),
                      "app %s to wait" % name)
        return a["pid"]

    def ctx_cost(self, name):
        with open(os.path.join(self.d.data_dir, "run", "ledgers",
                               "%s-dev0.ledger" % name), "rb") as f:
            f.seek(CTX_COST_AT)
            return int.from_bytes(f.read(8), "little")

    def loaded_nvml(self, pid):
        with open("/proc/%d/maps" % pid) as f:
            return "libnvidia-ml" in f.read()

    def probe_left(self):
        """What a probe left: its directory, or a process of it (one of
        this acceld's: its ACCEL_CONFIG is under this data directory; a
        probe of another run of the suite on the machine is not)."""
        left = []
        if os.path.exists(os.path.join(self.d.data_dir, "run", "ctxprobe")):
            left.append("run/ctxprobe")
        mine = ("ACCEL_CONFIG=%s/" % self.d.data_dir).encode()
        for p in os.listdir("/proc"):
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    probe = b"accel-ctxprobe" in f.read().split(b"\0")[0]
                with open("/proc/%s/environ" % p, "rb") as f:
                    ours = any(v.startswith(mine)
                               for v in f.read().split(b"\0"))
                if probe and ours and int(p) != os.getpid():
                    left.append("process %s" % p)
            except (OSError, ValueError):
                pass
        return left

    def measured(self, gpu):
        return "device %s: a context takes %d bytes" % (gpu, PROBE_CTX)


class CtxProbeMeasures(CtxProbeTest):
    def test_first_app_on_a_fresh_node_is_charged_the_probe_size(self):
        """A fresh node: no app ever measured. acceld's probe measures the
        stand-in's 300 MiB context on each card; the first app's ledger is
        seeded with it (measured and seeded), and its first process
        charges it and loads no NVML, though it could (before: it loaded
        NVML and measured). The probe leaves no file, process or ledger."""
        for g in (GPU_0, GPU_1):
            self.wait_for(lambda: self.measured(g) in self.d.log(),
                          "the probe's measure of %s" % g, timeout=30)
        self.assertEqual(self.probe_left(), [])
        # the device's view shows it (the cached JSON was made stale)
        self.assertEqual(self.device(GPU_0)["enforcement"]["contextMemory"],
                         PROBE_CTX)
        r = self.d.ctl("gpu", "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("%s: a context takes 300 MiB (measured by acceld)" %
                      GPU_1, r.stdout)
        self.assertEqual(os.listdir(os.path.join(self.d.data_dir, "run",
                                                 "ledgers"))
                         if os.path.isdir(os.path.join(
                             self.d.data_dir, "run", "ledgers")) else [], [])
        pid = self.hold("first", 512, "@" + os.path.join(self.d.tmp, "go"))
        self.assertEqual(self.ctx_cost("first"),
                         CTX_MEASURED | CTX_SEEDED | PROBE_CTX)
        self.wait_for(lambda: self.app("first")["allocations"][0][
            "usedMemory"] == PROBE_CTX + 512 * MiB,
            "the probe's size and 512 MiB charged")
        self.assertFalse(self.loaded_nvml(pid))


class CtxProbeFails(CtxProbeTest):
    libdir = NOLIB  # no libcuda.so.1 for the probe

    def test_a_failed_probe_leaves_the_measure_to_the_app(self):
        """No libcuda for the probe: it fails, says so once per card in
        the log, leaves nothing behind, and the app's first process
        measures its context itself, loading NVML, as before."""
        for g in (GPU_0, GPU_1):
            self.wait_for(lambda: "device %s: no context size measured" % g
                          in self.d.log(), "the probe's failure on %s" % g,
                          timeout=30)
        self.assertIn("cannot load libcuda.so.1", self.d.log())
        self.assertEqual(self.probe_left(), [])
        self.assertNotIn("contextMemory", self.device(GPU_0)["enforcement"])
        self.assertNotIn("a context takes",
                         self.d.ctl("gpu", "status").stdout)
        pid = self.hold("first", 512, "@" + os.path.join(self.d.tmp, "go"))
        cost = self.ctx_cost("first")
        self.assertTrue(cost & CTX_MEASURED, hex(cost))
        self.assertFalse(cost & CTX_SEEDED, hex(cost))
        self.assertTrue(self.loaded_nvml(pid))
        self.assertEqual(self.d.log().count(
            "device %s: no context size measured" % GPU_0), 1)


class CtxProbeWaitsForRoom(CtxProbeTest):
    used = {GPU_0: 23 * GiB}  # 1 GiB free of 24: under the margin

    def test_a_full_card_is_probed_once_it_has_room(self):
        """A card with less free memory than the probe's margin is left
        alone (said once), the other measured; once the driver shows room
        on it, the probe measures it too."""
        self.wait_for(lambda: self.measured(GPU_1) in self.d.log(),
                      "the measure of the card with room", timeout=30)
        self.assertIn("device %s: 1024 MiB free, under the 2048 MiB" % GPU_0,
                      self.d.log())
        self.assertNotIn(self.measured(GPU_0), self.d.log())
        self.used = {}
        self.write_nvml()
        self.wait_for(lambda: self.measured(GPU_0) in self.d.log(),
                      "the measure once the card has room", timeout=30)
        self.assertEqual(self.d.log().count("under the 2048 MiB"), 1)
        self.assertEqual(self.probe_left(), [])


class CtxProbeHangs(CtxProbeTest):
    gpus = (GPU_0,)
    inventory = inventory(node(NODE, device(
        GPU_0, "NVIDIA GeForce RTX 4090", "24Gi", "MemorySlice", index=0)))

    def more_env(self):
        # a probe that never ends: its process is named accel-ctxprobe-hang
        d = tempfile.mkdtemp(prefix="ctxprobe-hang-")
        self.addCleanup(shutil.rmtree, d, True)
        os.chmod(d, 0o755)
        path = os.path.join(d, "hang")
        with open(path, "w") as f:
            f.write("#!/bin/bash\nexec -a accel-ctxprobe-hang sleep 120\n")
        os.chmod(path, 0o755)
        return {"ACCEL_CTXPROBE": path}

    def running(self):
        return self.wait_for(lambda: [p for p in self.probe_left()
                                      if p.startswith("process")],
                             "the probe to run")

    def test_a_probe_that_never_ends_is_killed(self):
        """A probe still running after 10 s is killed with its group:
        no value, said once, nothing left."""
        self.running()
        self.wait_for(lambda: "no context size measured by accel-ctxprobe: "
                      "killed after 10000 ms" in self.d.log(),
                      "the probe killed", timeout=40)
        self.wait_for(lambda: self.probe_left() == [], "nothing left")
        self.assertNotIn("contextMemory", self.device(GPU_0)["enforcement"])

    def test_the_probe_is_not_foreign_use(self):
        """While the probe runs, its process on the card (the driver lists
        it there) is acceld's own, not foreign use; a process beside it
        that is no app's is."""
        pid = int(self.running()[0].split()[1])
        other = self.foreign_process()
        self.write_nvml("proc %s %d %d compute\nproc %s %d 1048576 compute\n"
                        % (GPU_0, pid, PROBE_CTX, GPU_0, other))
        fu = self.wait_for(lambda: self.device(GPU_0)["foreignUsage"],
                           "foreignUsage")
        self.assertEqual([f["pid"] for f in fu], [other], fu)
        self.assertIn("process %d" % pid, self.probe_left())  # still on
        self.write_nvml()

    def test_a_probe_is_killed_at_acceld_stop(self):
        """acceld stopping while a probe runs kills it and removes its
        files (SIGTERM: it stops within the harness's 5 s, else it would
        be killed itself and leave the probe running)."""
        self.running()
        self.d.stop()
        self.assertEqual(self.probe_left(), [])
        self.assertIn("acceld stopping", self.d.log())
        self.d.start()  # for tearDown's look at the apps


del CtxProbeTest  # a base, not a test

if __name__ == "__main__":
    unittest.main()
