# SPDX-License-Identifier: MIT
"""accelctl's prompts on a terminal (a pseudo-terminal): choosing the
accelerator type on install (the failed check computeModeSelect), choosing a GPU and a
quota on resume (computeBindingRequired), and confirming set-type."""
import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import ACCELCTL, ACCELD, Acceld, GiB, require_binaries  # noqa: E402
from test_cli import INVENTORY, apple_entry, manifest, nvidia_entry  # noqa: E402


class Pty:
    """accelctl with stdin, stdout and stderr on a pseudo-terminal."""

    def __init__(self, argv, cols=None):
        self.master, slave = os.openpty()
        if cols is not None:  # the terminal's width (else the pty's 0)
            fcntl.ioctl(slave, termios.TIOCSWINSZ,
                        struct.pack("HHHH", 24, cols, 0, 0))
        env = dict(os.environ)
        for k in ("ACCEL_SERVER", "ACCEL_TOKEN", "ACCEL_DATA_DIR"):
            env.pop(k, None)
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave,
                                     stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.out = ""

    def _read(self, timeout):
        r, _, _ = select.select([self.master], [], [], timeout)
        if not r:
            return False
        try:
            data = os.read(self.master, 4096)
        except OSError:  # EIO: the child closed the terminal
            return None
        if not data:
            return None
        self.out += data.decode(errors="replace")
        return True

    def expect(self, pattern, timeout=20):
        """Wait for pattern in the output; returns the match."""
        deadline = time.time() + timeout
        while True:
            m = re.search(pattern, self.out)
            if m:
                return m
            left = deadline - time.time()
            if left <= 0 or self._read(left) is None:
                raise AssertionError("no %r in output:\n%s" % (pattern,
                                                               self.out))

    def send(self, line):
        os.write(self.master, (line + "\n").encode())

    def finish(self, timeout=30):
        """Drain the output and return the exit status."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = self._read(0.5)
            if got is None or (got is False and self.proc.poll() is not None):
                break
        rc = self.proc.wait(max(1, deadline - time.time()))
        os.close(self.master)
        return rc


class CliPtyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_binaries(ACCELD, ACCELCTL)
        cls.d = Acceld(INVENTORY, extra_args=["--node-name", "lab"])
        cls.d.start()

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def write(self, name, m):
        path = os.path.join(self.d.tmp, name)
        with open(path, "w") as f:
            json.dump(m, f)
        return path

    def app(self, name):
        return self.d.data("/api/apps/" + name)

    def install(self, name, m, binding):
        status, body = self.d.http("POST", "/api/apps", {
            "manifest": m, "computeBinding": binding})
        self.assertEqual(status, 200, body)

    def test_install_asks_for_the_type(self):
        path = self.write("dual.json", manifest("dualpty", nvidia_entry(4),
                                                apple_entry(4)))
        try:
            p = Pty(self.d.ctl_args("app", "install", path))
            p.expect(r"Type \[1-\d\]: ")
            choice = re.search(r"(\d)\) apple-m", p.out)
            self.assertIsNotNone(choice, p.out)
            p.send(choice.group(1))
            rc = p.finish()
            self.assertEqual(rc, 0, p.out)
            self.assertEqual(self.app("dualpty").get("selectedType"),
                             "apple-m")
        finally:
            self.d.http("DELETE", "/api/apps/dualpty")

    def test_resume_asks_for_gpu_and_quota(self):
        hog = manifest("hogpty", nvidia_entry(20))
        ex = manifest("expty", nvidia_entry(4))
        need = manifest("needpty", nvidia_entry(8))
        try:
            self.install("hogpty", hog, [{"nodeName": "lab",
                                          "deviceId": "GPU-4090",
                                          "memory": 20 * GiB}])
            self.install("expty", ex, [{"nodeName": "lab",
                                        "deviceId": "GPU-4060"}])
            status, body = self.d.http("POST", "/api/apps",
                                       {"manifest": need})
            self.assertEqual(status, 200, body)
            self.assertEqual(self.app("needpty")["allocations"], [])

            p = Pty(self.d.ctl_args("app", "resume", "needpty"))
            p.expect(r"Device: ")
            self.assertIn("needs a GPU selection", p.out)
            self.assertIn("requires 8 Gi", p.out)
            row = re.search(r"(?m)^(\d+)\s+lab\s+GPU-4090", p.out)
            self.assertIsNotNone(row, p.out)
            p.send(row.group(1))
            p.expect(r"at most 4 Gi\]: ")
            p.send("9")                      # more than is free: asked again
            p.expect(r"At most 4 Gi is free")
            p.send("4")                      # below the app's 8 Gi
            rc = p.finish()
            self.assertEqual(rc, 1, p.out)
            self.assertIn("below the app's requirement", p.out)
            self.assertEqual(self.app("needpty")["allocations"], [])
        finally:
            for n in ("hogpty", "expty", "needpty"):
                self.d.http("DELETE", "/api/apps/" + n)

    def test_set_type_asks(self):
        ex = manifest("swpty", nvidia_entry(4))
        try:
            self.install("swpty", ex, [{"nodeName": "lab",
                                        "deviceId": "GPU-4060"}])
            argv = self.d.ctl_args("set-type", "lab", "GPU-4060", "--type",
                                   "MemorySlice")
            p = Pty(argv)
            p.expect(r"\[y/N\]: ")
            self.assertIn("Switching modes stops all apps", p.out)
            self.assertIn("swpty", p.out)
            p.send("n")
            self.assertEqual(p.finish(), 1, p.out)
            self.assertEqual(len(self.app("swpty")["allocations"]), 1)
            p = Pty(argv)
            p.expect(r"\[y/N\]: ")
            p.send("y")
            self.assertEqual(p.finish(), 0, p.out)
            self.assertIn("Switched device GPU-4060", p.out)
            self.assertEqual(self.app("swpty")["allocations"], [])
        finally:
            self.d.http("DELETE", "/api/apps/swpty")
            self.d.http("PUT", "/api/compute-resources/nodes/lab/devices/"
                        "GPU-4060/support-type", {"supportType": "Exclusive"})


if __name__ == "__main__":
    unittest.main(verbosity=2)
