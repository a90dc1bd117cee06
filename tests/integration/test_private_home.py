# SPDX-License-Identifier: MIT
"""Issue 20: the README's walk-through from a checkout in a private home.

Debian's adduser makes homes 0700, so a data directory under one (say
/home/ann/accel/accel-data) cannot be searched by the apps' uids, and every
app failed at start: "cannot use workdir '<data>/home/admin' for 'web':
Permission denied". acceld now keeps the homes in
/var/lib/accel-homes/<instance> then, says so, and keeps them there. Here
the data directory's parent is made 0700 before acceld starts, an app that
serves HTTP from its home is installed with accelctl as the walk-through
does, and it answers. The fallback directory is removed at the end."""
import json
import os
import shutil
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import (Acceld, SOURCE_DIR, cgroup_instance,  # noqa: E402
                           free_port)

FALLBACK = "/var/lib/accel-homes"


def web(port):
    """examples/apps/web.yaml on a port of the test's own."""
    return {"apiVersion": "v2", "metadata": {"name": "web"},
            "spec": {"accelerator": [{
                "mode": "cpu", "requiredMemory": "64Mi",
                "limitedMemory": "256Mi", "requiredCpu": "100m",
                "limitedCpu": "500m", "requiredDisk": "16Mi",
                "limitedDisk": "64Mi"}]},
            "run": {"command": ["python3", "-m", "http.server", str(port),
                                "--bind", "127.0.0.1"],
                    "stopTimeoutSeconds": 5}}


@unittest.skipUnless(os.geteuid() == 0, "apps run as other uids only as root")
class PrivateHomeTest(unittest.TestCase):
    def setUp(self):
        self.d = Acceld(inventory=os.path.join(SOURCE_DIR, "examples",
                                               "nogpu.yaml"),
                        extra_args=["--node-name", "box"])
        os.makedirs(self.d.data_dir)
        self.alt = os.path.join(FALLBACK, cgroup_instance(self.d.data_dir))
        self.addCleanup(self.remove_fallback)  # after acceld is closed
        self.addCleanup(self.d.close)
        self.assertFalse(os.path.exists(self.alt), self.alt)
        os.chmod(self.d.tmp, 0o700)  # the private home above the data dir

    def remove_fallback(self):
        shutil.rmtree(self.alt, ignore_errors=True)
        try:
            os.rmdir(FALLBACK)  # only when no other data dir uses it
        except OSError:
            pass

    def serve(self, port):
        deadline = time.time() + 20
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/" % port,
                                            timeout=5) as r:
                    return r.status, r.read().decode()
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)

    def test_walk_through_from_a_private_home(self):
        self.d.start()
        self.assertIn("apps' homes are in %s" % self.alt, self.d.log())
        st = os.stat(self.alt)
        self.assertEqual((st.st_uid, st.st_mode & 0o777), (0, 0o711))
        port = free_port()
        path = os.path.join(self.d.tmp, "web.json")
        with open(path, "w") as f:
            json.dump(web(port), f)
        r = self.d.ctl("app", "install", path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("App web is running", r.stdout)
        # the app serves its home, which is its owner's, in the fallback
        with open(os.path.join(self.alt, "admin", "hello.txt"), "w") as f:
            f.write("hi")
        status, body = self.serve(port)
        self.assertEqual(status, 200)
        self.assertIn("hello.txt", body)
        home = os.stat(os.path.join(self.alt, "admin"))
        self.assertNotEqual(home.st_uid, 0)
        self.assertEqual(home.st_mode & 0o777, 0o700)
        self.assertFalse(os.path.exists(os.path.join(self.d.data_dir, "home",
                                                     "admin")))
        r = self.d.ctl("app", "stop", "web")
        self.assertEqual(r.returncode, 0, r.stderr)
        # the choice sticks: with the data dir reachable again, the homes
        # the apps have stay where they are
        self.d.stop()
        os.chmod(self.d.tmp, 0o711)
        self.d.start()
        self.assertIn("(chosen when the data directory could not be reached "
                      "by other users; it is kept)", self.d.log())
        st, b = self.d.http("POST", "/api/apps/web/resume", {})
        self.assertEqual(st, 200, b)
        r = self.d.ctl("app", "uninstall", "web")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_reachable_data_dir_keeps_homes_inside(self):
        os.chmod(self.d.tmp, 0o711)
        self.d.start()
        self.assertNotIn("apps' homes are in", self.d.log())
        self.assertFalse(os.path.exists(self.alt))


if __name__ == "__main__":
    unittest.main(verbosity=2)
