# SPDX-License-Identifier: MIT
"""Issue 25 item 5: the apps' uids registered where the system offers a
way. With --userdb-dir, acceld writes a systemd userdb drop-in record
(accel-<name>, user and group, with <uid>.user/.group links) for every uid
it gives; nss-systemd reads /run/userdb with no daemon, so getent, ls and
ps name the uids and NSS-based allocators skip them. Before, the uids were
invisible to NSS. acceld's own records are not taken for someone else's
(an app whose uid NSS knows as another name does not start).

The NSS test runs acceld in a mount namespace of its own with a tmpfs on
/run, so the machine's /run/userdb is never touched."""
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import Acceld, SOURCE_DIR, temp_dir  # noqa: E402

NOGPU = os.path.join(SOURCE_DIR, "examples", "nogpu.yaml")


def sleeper(name):
    return {"apiVersion": "v2", "metadata": {"name": name},
            "spec": {"accelerator": [{
                "mode": "cpu", "requiredMemory": "16Mi",
                "limitedMemory": "64Mi", "requiredCpu": "10m",
                "limitedCpu": "100m", "requiredDisk": "1Mi",
                "limitedDisk": "16Mi"}]},
            "run": {"command": ["sleep", "600"], "stopTimeoutSeconds": 2}}


def uid_of(d, name):
    """The uid of name's apps (GET /api/users, admin only)."""
    st, b = d.http("GET", "/api/users")
    assert st == 200, b
    return [u["uid"] for u in b["data"] if u["name"] == name][0]


@unittest.skipUnless(os.geteuid() == 0, "uids are given only as root")
class UserdbRecordsTest(unittest.TestCase):
    def test_records_follow_the_uids(self):
        dbdir = os.path.join(temp_dir(self, "accel-userdb-"), "userdb")
        with Acceld(inventory=NOGPU,
                    extra_args=["--node-name", "box", "--userdb-dir",
                                dbdir]) as d:
            self.assertIn("registered in %s" % dbdir, d.log())
            self.assertEqual(os.stat(dbdir).st_mode & 0o777, 0o755)
            st, b = d.http("POST", "/api/users", {"name": "dora"})
            self.assertEqual(st, 200, b)
            uid = uid_of(d, "dora")
            with open(os.path.join(dbdir, "accel-dora.user")) as f:
                rec = json.load(f)
            self.assertEqual((rec["userName"], rec["uid"], rec["gid"]),
                             ("accel-dora", uid, uid))
            with open(os.path.join(dbdir, "accel-dora.group")) as f:
                self.assertEqual(json.load(f)["gid"], uid)
            self.assertEqual(os.readlink(os.path.join(dbdir, "%d.user" % uid)),
                             "accel-dora.user")
            self.assertEqual(os.readlink(os.path.join(dbdir,
                                                      "%d.group" % uid)),
                             "accel-dora.group")
            for name in ("admin", "shared"):
                self.assertTrue(os.path.exists(
                    os.path.join(dbdir, "accel-%s.user" % name)), name)
            # removed: the uid stays registered, under another name
            st, b = d.http("DELETE", "/api/users/dora")
            self.assertEqual(st, 200, b)
            self.assertFalse(os.path.exists(
                os.path.join(dbdir, "accel-dora.user")))
            self.assertEqual(os.readlink(os.path.join(dbdir, "%d.user" % uid)),
                             "accel-removed-%d.user" % uid)
            # a restart writes again what is missing
            os.unlink(os.path.join(dbdir, "accel-admin.user"))
            d.stop()
            d.start()
            self.assertTrue(os.path.exists(
                os.path.join(dbdir, "accel-admin.user")))
        self.assertEqual(sorted(n for n in os.listdir(dbdir)
                                if n.startswith(".")), [])

    def test_retired_records_and_user_names_stay_apart(self):
        # issue 39 item 5: a user named removed-<uid> was written over the
        # retired uid's record, which NSS then no longer knew
        dbdir = os.path.join(temp_dir(self, "accel-userdb-"), "userdb")
        with Acceld(inventory=NOGPU,
                    extra_args=["--node-name", "box", "--userdb-dir",
                                dbdir]) as d:
            self.assertEqual(d.http("POST", "/api/users",
                                    {"name": "dora"})[0], 200)
            uid = uid_of(d, "dora")
            self.assertEqual(d.http("DELETE", "/api/users/dora")[0], 200)
            retired = os.path.join(dbdir, "accel-removed-%d.user" % uid)
            st, b = d.http("POST", "/api/users",
                           {"name": "removed-%d" % uid})
            self.assertEqual(st, 400, b)
            self.assertIn('must not begin with "removed-"', b["message"])
            with open(retired) as f:
                self.assertEqual(json.load(f)["uid"], uid)
            self.assertNotIn("removed-%d" % uid,
                             [u["name"] for u in d.data("/api/users")])
            # a record of another number under a user's name is kept
            # whole, and that user's uid does not point at it
            with open(os.path.join(dbdir, "accel-erin.user"), "w") as f:
                json.dump({"userName": "accel-erin", "uid": 4242}, f)
            self.assertEqual(d.http("POST", "/api/users",
                                    {"name": "erin"})[0], 200)
            with open(os.path.join(dbdir, "accel-erin.user")) as f:
                self.assertEqual(json.load(f)["uid"], 4242)
            erin = uid_of(d, "erin")
            self.assertFalse(os.path.lexists(
                os.path.join(dbdir, "%d.user" % erin)))
            self.assertIn("records another uid than %d" % erin, d.log())
            self.assertEqual(d.http("DELETE", "/api/users/erin")[0], 200)
            with open(os.path.join(dbdir, "accel-erin.user")) as f:
                self.assertEqual(json.load(f)["uid"], 4242)

    def test_unsafe_dir_is_refused(self):
        dbdir = os.path.join(temp_dir(self, "accel-userdb-"), "open")
        os.mkdir(dbdir)
        os.chmod(dbdir, 0o777)
        with Acceld(inventory=NOGPU,
                    extra_args=["--node-name", "box", "--userdb-dir",
                                dbdir]) as d:
            self.assertIn("the apps' uids are not registered", d.log())
            self.assertEqual(os.listdir(dbdir), [])

    def test_relative_dir_is_refused(self):
        d = Acceld(inventory=NOGPU, extra_args=["--userdb-dir", "userdb"])
        with self.assertRaises(RuntimeError):
            d.start()
        self.assertIn("--userdb-dir must be an absolute path", d.log())
        d.close()


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("unshare") and
                     shutil.which("nsenter"), "needs root, unshare, nsenter")
class UserdbNssTest(unittest.TestCase):
    """nss-systemd reads /run/userdb; acceld's view and getent agree."""

    def test_nss_names_the_uids_and_apps_still_start(self):
        if subprocess.run(["unshare", "-m", "true"]).returncode != 0:
            self.skipTest("no mount namespaces here")
        wrapper = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                   'mount -t tmpfs accel-test /run && exec "$0" "$@"']
        with Acceld(inventory=NOGPU, wrapper=wrapper,
                    extra_args=["--node-name", "box", "--userdb-dir",
                                "/run/userdb"]) as d:
            pid = d.proc.pid

            def getent(*args):
                return subprocess.run(["nsenter", "-t", str(pid), "-m",
                                       "getent"] + list(args),
                                      capture_output=True, text=True)
            uid = uid_of(d, "admin")
            r = getent("passwd", str(uid))
            if r.returncode == 2 and "systemd" not in open(
                    "/etc/nsswitch.conf").read():
                self.skipTest("nss-systemd is not in nsswitch.conf")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith("accel-admin:x:%d:%d:" %
                                                (uid, uid)), r.stdout)
            self.assertEqual(getent("group", str(uid)).stdout.split(":")[0],
                             "accel-admin")
            # its own record is no clash: the app starts, as that uid
            st, b = d.http("POST", "/api/apps", {"manifest": sleeper("nap")})
            self.assertEqual(st, 200, b)
            self.assertEqual(b["data"]["state"], "running", b)
            self.assertNotIn("is also the system's", d.log())
            deadline = time.time() + 10
            while True:
                a = d.http("GET", "/api/apps/nap")[1]["data"]
                if a.get("pid"):
                    break
                self.assertLess(time.time(), deadline, a)
                time.sleep(0.05)
            with open("/proc/%d/status" % a["pid"]) as f:
                uids = [ln.split()[1] for ln in f if ln.startswith("Uid:")]
            self.assertEqual(uids, [str(uid)])
            d.http("DELETE", "/api/apps/nap")
        # the machine's own /run/userdb was never written
        self.assertFalse(os.path.exists("/run/userdb/accel-admin.user"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
