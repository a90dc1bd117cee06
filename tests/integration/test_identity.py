# SPDX-License-Identifier: MIT
"""Who an app runs as (SPEC 3, 8.2), through the real binaries.

The reproduction of issue 10: a member's app whose command reads
<data-dir>/admin.token used to run as root and print the admin token; now it
runs as the member's own uid (allocated from --app-uid-range and kept in the
store), with no new privileges and a private HOME, and reading the token
fails with "Permission denied". The enforcement variables cannot be set in a
manifest (400 naming the variable) and acceld's own values win even over an
old stored manifest; run.user and a run.workdir outside the home are
admin-only (403); a uid survives a restart; a schema-2 database keeps its
users. Needs root (acceld changes uids only as root); skipped otherwise."""
import json
import os
import pwd
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import (ACCELD, Acceld, BUILD_DIR, device, inventory,  # noqa: E402
                           node, status_field, wait_for)

HOLD = os.path.join(BUILD_DIR, "tests", "integration", "cuda_hold")
SHIM = os.path.join(BUILD_DIR, "src", "shim", "libaccelshim.so")
GPU = "GPU-1d000000-0000-4000-8000-00000000000a"
GPU2 = "GPU-1d000000-0000-4000-8000-00000000000b"
LO, HI = 65536, 99999  # the default --app-uid-range

INVENTORY = inventory(node("idn", device(GPU), device(GPU2)))


def manifest(name, cmd, **run):
    m = accel_harness.manifest(name, "1Gi", mem="64Mi", cpu="100m",
                               disk="1Mi")
    m["run"] = {"command": cmd, "stopTimeoutSeconds": 2}
    m["run"].update(run)
    return m


def kill_apps(d):
    """acceld leaves apps running when it stops: end them (by group)."""
    if d.proc is None:
        return
    st, apps = d.http("GET", "/api/apps")
    for a in (apps or {}).get("data") or []:
        if a.get("pid"):
            try:
                os.killpg(a["pid"], signal.SIGKILL)
            except OSError:
                pass


@unittest.skipUnless(os.geteuid() == 0, "acceld changes uids only as root")
class IdentityTest(unittest.TestCase):
    def setUp(self):
        self.d = Acceld(inventory=INVENTORY,
                        extra_args=["--node-name", "idn"]).start()

    def tearDown(self):
        kill_apps(self.d)
        self.d.close()

    def wait_for(self, pred, what, timeout=10):
        return wait_for(self, pred, what, timeout)

    def log(self, name):
        return self.d.app_log(name)

    def member(self, name):
        st, b = self.d.http("POST", "/api/users", {"name": name})
        self.assertEqual(st, 200, b)
        return b["data"]["token"]

    def uid_of(self, name):
        """The uid a user's apps run as (GET /api/users, admin only)."""
        st, users = self.d.http("GET", "/api/users")
        self.assertEqual(st, 200, users)
        for u in users["data"]:
            if u["name"] == name:
                return u["uid"] or None
        return None

    def install(self, m, token=None, want=200):
        st, b = self.d.http("POST", "/api/apps", {"manifest": m}, token=token)
        self.assertEqual(st, want, b)
        return b

    def app_pid(self, name):
        return self.wait_for(
            lambda: self.d.http("GET", "/api/apps/" + name)[1]["data"]
            .get("pid"), "the pid of " + name)

    def test_member_cannot_read_admin_token(self):
        """Issue 10's reproduction: the token stays unread."""
        tok = self.member("bob")
        data = self.d.data_dir
        script = ("id -u; id -g; id -G; cat %s/admin.token; "
                  "cat %s/accel.db >/dev/null; ls %s; echo home=$HOME; "
                  "stat -c 'mode=%%a owner=%%u' $HOME; pwd; echo ready; "
                  "exec sleep 1000" % (data, data, data))
        self.install(manifest("peek", ["sh", "-c", script]), token=tok)
        out = self.wait_for(lambda: "ready" in self.log("peek") and
                            self.log("peek"), "the app's output")
        uid = self.uid_of("bob")
        self.assertIsNotNone(uid)
        self.assertTrue(LO <= uid <= HI, uid)
        lines = out.splitlines()
        self.assertEqual(lines[0:3], [str(uid)] * 3, out)
        self.assertNotIn(self.d.token, out)
        self.assertIn("admin.token: Permission denied", out)
        self.assertIn("accel.db: Permission denied", out)
        self.assertIn("cannot open directory", out)  # ls of the data dir
        home = os.path.join(data, "home", "bob")
        self.assertIn("home=%s\n" % home, out)
        self.assertIn("mode=700 owner=%d\n" % uid, out)
        self.assertIn("\n%s\n" % home, out)  # default workdir = the home
        pid = self.app_pid("peek")
        self.assertEqual(status_field(pid, "NoNewPrivs"), ["1"])
        self.assertEqual(status_field(pid, "Uid"), [str(uid)] * 4)
        self.assertEqual(status_field(pid, "Groups"), [str(uid)])
        # nothing of acceld is inherited: stdin, and the log as stdout/err
        self.assertEqual(sorted(os.listdir("/proc/%d/fd" % pid)),
                         ["0", "1", "2"])
        self.assertEqual(os.readlink("/proc/%d/fd/0" % pid), "/dev/null")
        st = os.stat(home)
        self.assertEqual((st.st_mode & 0o777, st.st_uid, st.st_gid),
                         (0o700, uid, uid))
        for f in ("admin.token", "accel.db"):
            self.assertEqual(os.stat(os.path.join(data, f)).st_mode & 0o777,
                             0o600, f)
        self.assertEqual(os.stat(data).st_mode & 0o777, 0o711)
        # another member gets another uid; admin and shared have their own
        self.member("carol")
        uids = {n: self.uid_of(n) for n in ("admin", "bob", "carol")}
        self.assertEqual(len(set(uids.values())), 3, uids)
        self.assertNotIn(None, uids.values())
        st, rt = self.d.http("GET", "/api/runtime")
        self.assertEqual(st, 200, rt)
        self.assertEqual(rt["data"]["identity"]["perUserUid"], True, rt)
        self.assertEqual(rt["data"]["identity"]["uidRange"], "%d-%d" % (LO, HI))

    def test_enforcement_variables_refused(self):
        tok = self.member("eve")
        for var in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                    "ACCEL_CONFIG", "LD_PRELOAD", "ACCEL_APP"):
            for who in (tok, None):  # a member and an admin alike
                b = self.install(manifest("envy", ["true"],
                                          env={var: "/nonexistent"}),
                                 token=who, want=400)
                self.assertEqual(
                    b["message"],
                    "run.env.%s is set by accel and cannot be set in a "
                    "manifest" % var, b)
        st, apps = self.d.http("GET", "/api/apps")
        self.assertEqual(apps["data"] or [], [])

    def test_member_run_user_and_workdir_forbidden(self):
        tok = self.member("mallory")
        b = self.install(manifest("asroot", ["id"], user="root"), token=tok,
                         want=403)
        self.assertIn("run.user", b["message"])
        b = self.install(manifest("asroot", ["id"], user=0), token=tok,
                         want=403)
        self.assertIn("run.user", b["message"])
        for wd in ("/", "/root", self.d.data_dir,
                   os.path.join(self.d.data_dir, "home", "mallory", "..",
                                "bob")):
            b = self.install(manifest("wd", ["pwd"], workdir=wd), token=tok,
                             want=403)
            self.assertIn("run.workdir", b["message"])
        home = os.path.join(self.d.data_dir, "home", "mallory")
        self.install(manifest("wd", ["sh", "-c", "pwd; exec sleep 1000"],
                              workdir=home), token=tok)
        self.wait_for(lambda: home in self.log("wd"), "pwd in the home")

    def test_admin_run_user_honoured(self):
        nobody = pwd.getpwnam("nobody")
        self.install(manifest("asnobody", [
            "sh", "-c", "id -u; id -g; echo home=$HOME; exec sleep 1000"],
            user="nobody", workdir="/"))
        out = self.wait_for(lambda: "home=" in self.log("asnobody") and
                            self.log("asnobody"), "the app's output")
        self.assertEqual(out.splitlines()[:2],
                         [str(nobody.pw_uid), str(nobody.pw_gid)], out)
        self.assertIn("home=%s" % nobody.pw_dir, out)
        b = self.install(manifest("ghost", ["true"],
                                  user="no-such-user-here"), want=400)
        self.assertIn('run.user "no-such-user-here"', b["message"])

    def test_uid_stable_across_restart(self):
        tok = self.member("dave")
        uid = self.uid_of("dave")
        self.install(manifest("a1", ["sh", "-c", "id -u; exec sleep 1000"]),
                     token=tok)
        self.wait_for(lambda: self.log("a1").strip(), "a1's output")
        self.d.stop()
        self.d.start()
        self.assertEqual(self.uid_of("dave"), uid)
        self.member("erin")  # a new user never takes a live user's uid
        self.assertNotEqual(self.uid_of("erin"), uid)
        self.install(manifest("a2", ["sh", "-c", "id -u; exec sleep 1000"]),
                     token=tok)
        out = self.wait_for(lambda: self.log("a2").strip(), "a2's output")
        self.assertEqual(out.split(), [str(uid)])
        self.assertEqual(self.log("a1").split(), [str(uid)])

    def test_old_database_migrates_and_keeps_users(self):
        tok = self.member("frank")
        self.d.stop()
        db = sqlite3.connect(os.path.join(self.d.data_dir, "accel.db"))
        db.executescript("DROP TABLE identities; DROP TABLE user_limits; "
                        "DROP TABLE meta; PRAGMA user_version = 2;")
        db.close()
        self.d.start()
        st, b = self.d.http("GET", "/api/apps", token=tok)
        self.assertEqual(st, 200, b)  # frank's token still works
        uid = self.uid_of("frank")
        self.assertTrue(uid is not None and LO <= uid <= HI, uid)
        self.install(manifest("mig", ["sh", "-c", "id -u; exec sleep 1000"]),
                     token=tok)
        out = self.wait_for(lambda: self.log("mig").strip(), "mig's output")
        self.assertEqual(out.split(), [str(uid)])

    @unittest.skipUnless(os.path.exists(HOLD) and os.path.exists(SHIM),
                         "cuda_hold or libaccelshim.so not built")
    def test_stored_enforcement_variables_lose(self):
        """Belt and braces: a manifest stored before the install-time rule
        (ACCEL_CONFIG, CUDA_VISIBLE_DEVICES, LD_PRELOAD in run.env) still
        gets acceld's values: the 1 GiB quota holds."""
        tok = self.member("gina")
        # cuda_hold is built with ASan in the sanitizer build, and the shim
        # (without it) is preloaded ahead of the ASan runtime
        asan = {"ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}
        m = manifest("hog", [HOLD, "512", "256", "512"], env=dict(asan))
        b = self.install(m, token=tok)
        self.wait_for(lambda: "ready" in self.log("hog"), "the app")
        st, b = self.d.http("POST", "/api/apps/hog/suspend", token=tok)
        self.assertEqual(st, 200, b)  # data.state may be stopping (SPEC 5.6)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/hog")[1]["data"]
                      ["state"] == "stopped", "hog to be stopped")
        self.d.stop()
        m["run"]["env"] = {"ACCEL_CONFIG": "/nonexistent",
                           "CUDA_VISIBLE_DEVICES": GPU2,
                           "LD_PRELOAD": "", "KEEP": "yes", **asan}
        db = sqlite3.connect(os.path.join(self.d.data_dir, "accel.db"))
        db.execute("UPDATE apps SET manifest = ? WHERE name = 'hog'",
                   (json.dumps(m),))
        db.commit()
        db.close()
        os.unlink(os.path.join(self.d.data_dir, "logs", "hog.log"))
        self.d.start()
        st, b = self.d.http("POST", "/api/apps/hog/resume", token=tok)
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: "ready" in self.log("hog"), "the app")
        out = self.log("hog")
        self.assertIn("alloc 512 MiB: 0", out)
        self.assertIn("alloc 256 MiB: 0", out)
        self.assertIn("alloc 512 MiB: 2", out)  # over the quota: refused
        pid = self.app_pid("hog")
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if e)
        st, a = self.d.http("GET", "/api/apps/hog", token=tok)
        bound = [x["deviceId"] for x in a["data"]["allocations"]]
        self.assertEqual(len(bound), 1, a)
        self.assertEqual(env[b"CUDA_VISIBLE_DEVICES"], bound[0].encode())
        self.assertTrue(env[b"ACCEL_CONFIG"].endswith(b"/hog/shim.conf"))
        self.assertIn(b"libaccelshim.so", env[b"LD_PRELOAD"])
        self.assertEqual(env[b"KEEP"], b"yes")

    def alive(self, pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open("/proc/%d/stat" % pid) as f:  # a zombie is gone too
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"

    def test_refused_removal_names_the_apps_by_name(self):
        """The 409 of a removal names the user's apps in name order, the
        first ten and then how many more, whatever order they came in."""
        tok = self.member("erin")
        names = ["erin%02d" % k for k in (7, 12, 1, 10, 3, 11, 5, 2, 9,
                                          4, 8, 6)]
        for n in names:
            m = accel_harness.manifest(n, "1Gi", mem="16Mi", cpu="10m",
                                       disk="1Mi")
            self.install(m, token=tok)
        # one app gone from the middle of the owner's list
        st, b = self.d.http("DELETE", "/api/apps/erin12", token=tok)
        self.assertEqual(st, 200, b)
        st, b = self.d.http("DELETE", "/api/users/erin")
        self.assertEqual(st, 409, b)
        self.assertIn("user erin owns 11 apps (%s and 1 more)" %
                      ", ".join("erin%02d" % k for k in range(1, 11)),
                      b["message"])

    def test_removed_user_passes_nothing_on(self):
        """Issue 25: after DELETE /api/users/carol, carol1 kept running on
        its card, and a new carol got the same uid, the old HOME and the
        app. Now the removal is 409 while carol owns apps; with force the
        apps are stopped and uninstalled (cards released) in the same
        step; a new carol gets a fresh uid and an empty home, and the old
        home is moved aside, root-only."""
        tok = self.member("carol")
        old_uid = self.uid_of("carol")
        self.install(manifest("carol1", [
            "sh", "-c", "echo secret > $HOME/notes; trap '' TERM; "
            "echo ready; while :; do sleep 1; done"],
            stopTimeoutSeconds=4), token=tok)
        self.wait_for(lambda: "ready" in self.log("carol1"), "carol1 ready")
        pid = self.app_pid("carol1")
        st, b = self.d.http("DELETE", "/api/users/carol")
        self.assertEqual(st, 409, b)
        self.assertEqual(b["error"], "conflict", b)
        self.assertIn("user carol owns 1 app (carol1)", b["message"])
        self.assertIn("force=true", b["message"])
        st, b = self.d.http("DELETE", "/api/users/carol?force=maybe")
        self.assertEqual(st, 400, b)
        self.assertIn("force must be true or false", b["message"])
        # nothing changed: carol and her running, bound app are there
        self.assertEqual(self.uid_of("carol"), old_uid)
        st, a = self.d.http("GET", "/api/apps/carol1")
        self.assertEqual(a["data"]["state"], "running", a)
        self.assertEqual(len(a["data"]["allocations"]), 1, a)
        self.assertTrue(self.alive(pid))
        st, b = self.d.http("DELETE", "/api/users/carol?force=true")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["apps"],
                         [{"name": "carol1", "state": "stopping"}], b)
        st, _ = self.d.http("GET", "/api/apps", token=tok)
        self.assertEqual(st, 401)  # the token is gone at once
        # while carol1 is still being stopped, the name cannot come back
        # (a new carol would own it); checked only when carol1 is there
        # before and after the attempt
        before = self.d.http("GET", "/api/apps/carol1")[0] == 200
        st, b = self.d.http("POST", "/api/users", {"name": "carol"})
        after = self.d.http("GET", "/api/apps/carol1")[0] == 200
        if before and after:
            self.assertEqual(st, 409, b)
            self.assertIn("still being uninstalled", b["message"])
        elif st == 200:
            self.d.http("DELETE", "/api/users/carol")
        self.wait_for(lambda: self.d.http("GET", "/api/apps/carol1")[0] ==
                      404, "carol1 uninstalled", timeout=30)
        self.assertFalse(self.alive(pid))
        st, res = self.d.http("GET", "/api/compute-resources")
        binds = [x for n in res["data"] for dv in n["devices"]
                 for x in dv["bindings"]]
        self.assertEqual(binds, [], res)
        # the old home is aside, root-only, with its files
        aside = os.path.join(self.d.data_dir, "removed-homes",
                             "carol.%d" % old_uid)
        self.assertTrue(os.path.isdir(aside), os.listdir(self.d.data_dir))
        st = os.stat(os.path.dirname(aside))
        self.assertEqual((st.st_mode & 0o777, st.st_uid), (0o700, 0))
        with open(os.path.join(aside, "notes")) as f:
            self.assertEqual(f.read(), "secret\n")
        # a new carol: a fresh uid, an empty home
        tok2 = self.member("carol")
        new_uid = self.uid_of("carol")
        self.assertNotEqual(new_uid, old_uid)
        self.assertTrue(LO <= new_uid <= HI, new_uid)
        # a home of the old uid where the move aside did not happen (as
        # on a node where it failed) is moved aside at the start, never
        # handed to the new uid
        left = os.path.join(self.d.data_dir, "home", "carol")
        os.makedirs(left)
        with open(os.path.join(left, "leak"), "w") as f:
            f.write("old\n")
        for p in (left, os.path.join(left, "leak")):
            os.chown(p, old_uid, old_uid)
        self.install(manifest("carol2", [
            "sh", "-c", "echo uid=$(id -u); ls -A $HOME; echo end; "
            "exec sleep 1000"]), token=tok2)
        out = self.wait_for(lambda: "end" in self.log("carol2") and
                            self.log("carol2"), "carol2's output")
        self.assertEqual(out.split(), ["uid=%d" % new_uid, "end"], out)
        home = os.stat(os.path.join(self.d.data_dir, "home", "carol"))
        self.assertEqual(home.st_uid, new_uid)
        moved = [x for x in os.listdir(os.path.dirname(aside))
                 if x.startswith("carol.%d." % old_uid)]
        self.assertEqual(len(moved), 1, moved)
        self.assertEqual(os.listdir(os.path.join(os.path.dirname(aside),
                                                 moved[0])), ["leak"])
        # the retired uid stays taken across a restart: no one gets it
        kill_apps(self.d)
        self.d.stop()
        self.d.start()
        self.assertEqual(self.uid_of("carol"), new_uid)
        self.member("dora")
        self.assertNotIn(old_uid, [self.uid_of(n) for n in
                                   ("admin", "carol", "dora")])

    def test_name_removed_by_an_older_acceld_gets_a_fresh_uid(self):
        """An older acceld removed the user row and kept the identity row:
        the name coming back must not get that uid (nor its home)."""
        self.member("kim")
        old_uid = self.uid_of("kim")
        home = os.path.join(self.d.data_dir, "home", "kim")
        os.makedirs(home)
        os.chown(home, old_uid, old_uid)
        self.d.stop()
        db = sqlite3.connect(os.path.join(self.d.data_dir, "accel.db"))
        db.execute("DELETE FROM users WHERE name = 'kim'")
        db.commit()
        db.close()
        self.d.start()
        self.member("kim")
        self.assertNotEqual(self.uid_of("kim"), old_uid)
        self.assertFalse(os.path.exists(home))
        self.assertTrue(os.path.isdir(os.path.join(
            self.d.data_dir, "removed-homes", "kim.%d" % old_uid)))
        self.d.stop()  # the database is acceld's while it runs
        db = sqlite3.connect(os.path.join(self.d.data_dir, "accel.db"))
        rows = db.execute("SELECT name FROM identities WHERE uid = ?",
                          (old_uid,)).fetchall()
        db.close()
        self.assertEqual(rows, [("~kim.%d" % old_uid,)])

    def test_removed_user_without_apps_and_forced_idle_app(self):
        """A user without apps goes with a plain DELETE; a forced removal
        uninstalls an app without a process at once."""
        tok = self.member("ivy")
        m = manifest("ivy1", ["sleep", "1000"])
        del m["run"]  # an external app: bound, no process
        self.install(m, token=tok)
        st, b = self.d.http("DELETE", "/api/users/ivy?force=1")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["apps"],
                         [{"name": "ivy1", "state": "uninstalled"}], b)
        st, _ = self.d.http("GET", "/api/apps/ivy1")
        self.assertEqual(st, 404)
        self.member("jon")
        st, b = self.d.http("DELETE", "/api/users/jon")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["apps"], [], b)
        st, b = self.d.http("DELETE", "/api/users/jon")
        self.assertEqual(st, 404, b)

    def test_full_uid_range_is_a_clear_error(self):
        kill_apps(self.d)
        self.d.close()
        self.d = Acceld(inventory=INVENTORY, extra_args=[
            "--node-name", "idn", "--app-uid-range", "70000-70001"]).start()
        # admin and shared hold both uids: a new user cannot be made
        self.assertEqual(self.uid_of("admin"), 70000)
        st, b = self.d.http("POST", "/api/users", {"name": "late"})
        self.assertEqual(st, 409, b)
        self.assertIn("--app-uid-range 70000-70001", b["message"])
        st, users = self.d.http("GET", "/api/users")
        self.assertNotIn("late", [u["name"] for u in users["data"]])


class UidRangeCheckTest(unittest.TestCase):
    """Issue 25, item 5: a --app-uid-range that the machine may hand to
    others (systemd's DynamicUser= range, the old default; login.defs'
    regular users) is refused at start, naming the option and the owner of
    the range, before anything is created."""

    def refused(self, rng):
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "data")
            p = subprocess.run(
                [ACCELD, "--data-dir", data, "--listen", "127.0.0.1:0",
                 "--node-name", "idn", "--app-uid-range", rng],
                stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=30)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertFalse(os.path.exists(data))  # nothing was created
            return p.stderr

    def test_systemd_dynamic_range_refused(self):
        err = self.refused("61184-65519")
        self.assertIn("--app-uid-range 61184-65519 overlaps systemd's "
                      "DynamicUser= service users (61184-65519)", err)

    @unittest.skipUnless(os.path.exists("/etc/login.defs"), "no login.defs")
    def test_login_defs_regular_users_refused(self):
        err = self.refused("1000-1010")
        self.assertIn("--app-uid-range 1000-1010 overlaps UID_MIN-UID_MAX of "
                      "/etc/login.defs", err)


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("unshare"),
                     "needs root and unshare for a private /etc/passwd")
class NssKnownUidTest(unittest.TestCase):
    """A uid that NSS already knows is never given to an accel user (it is
    skipped with a log line), and an app whose owner's uid NSS knows by now
    (a systemd dynamic user holding a uid of the old range) does not start.
    acceld runs in a mount namespace of its own where /etc/passwd and
    /etc/group carry the squatters, so the machine's files stay as they
    are."""
    SCRIPT = ('mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group'
              ' && shift 2 && exec "$@"')

    def setUp(self):
        self.d = None
        self.tmp = tempfile.mkdtemp()
        os.chmod(self.tmp, 0o755)

    def tearDown(self):
        if self.d is not None:
            kill_apps(self.d)
            self.d.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def squat(self, user_uid, group_gid):
        """The wrapper that starts acceld with user 'squatter' at
        user_uid and group 'squatgrp' at group_gid."""
        files = []
        for name, line in (("passwd", "squatter:x:%d:%d::/nonexistent:"
                            "/usr/sbin/nologin\n" % (user_uid, user_uid)),
                           ("group", "squatgrp:x:%d:\n" % group_gid)):
            path = os.path.join(self.tmp, name)
            with open("/etc/" + name) as f:
                text = f.read()
            with open(path, "w") as f:
                f.write(text + line)
            os.chmod(path, 0o644)
            files.append(path)
        return ["unshare", "-m", "sh", "-c", self.SCRIPT, "sh"] + files

    def uid_of(self, name):
        st, users = self.d.http("GET", "/api/users")
        self.assertEqual(st, 200, users)
        return {u["name"]: u["uid"] for u in users["data"]}.get(name)

    def test_known_uid_skipped_and_clash_refused(self):
        lo = 65536  # the default range's first uids
        self.d = Acceld(inventory=INVENTORY, extra_args=["--node-name", "idn"],
                        wrapper=self.squat(lo, lo + 1)).start()
        admin = self.uid_of("admin")
        self.assertTrue(lo + 2 <= admin <= 99999, admin)
        log = self.d.log()
        self.assertIn("uid %d of --app-uid-range is already the system's "
                      "user 'squatter': skipped" % lo, log)
        self.assertIn("uid %d of --app-uid-range is already the system's "
                      "group 'squatgrp': skipped" % (lo + 1), log)
        # now the system gives the admin's uid to someone else
        self.d.stop()
        self.d.wrapper = self.squat(admin, 1)
        self.d.start()
        self.assertIn("uid %d of accel user admin is also the system's user "
                      "'squatter'" % admin, self.d.log())
        st, b = self.d.http("POST", "/api/apps", {"manifest": manifest(
            "clash", ["sh", "-c", "id -u; exec sleep 1000"])})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["state"], "failed", b)
        self.assertIn("'clash' cannot start: uid %d of its owner admin is "
                      "also the system's user 'squatter'" % admin,
                      b["data"]["reason"])


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("setpriv"),
                     "needs root and setpriv to start an unprivileged acceld")
class UnprivilegedAcceldTest(unittest.TestCase):
    """acceld started as nobody: apps run as nobody too, and the runtime
    says containment by uid is off instead of claiming it."""

    def test_containment_off_is_reported(self):
        nobody = pwd.getpwnam("nobody")
        d = Acceld(inventory=INVENTORY, extra_args=["--node-name", "idn"],
                   wrapper=["setpriv", "--reuid=%d" % nobody.pw_uid,
                            "--regid=%d" % nobody.pw_gid, "--clear-groups"])
        try:
            os.makedirs(d.data_dir)
            os.chown(d.data_dir, nobody.pw_uid, nobody.pw_gid)
            d.start()
            st, rt = d.http("GET", "/api/runtime")
            self.assertEqual(st, 200, rt)
            ident = rt["data"]["identity"]
            self.assertEqual(ident["perUserUid"], False, ident)
            self.assertIn("containment by uid is off", ident["status"])
            st, b = d.http("POST", "/api/apps", {"manifest": manifest(
                "nr", ["sh", "-c", "id -u; echo home=$HOME; "
                       "exec sleep 1000"])})
            self.assertEqual(st, 200, b)
            path = os.path.join(d.data_dir, "logs", "nr.log")
            deadline = time.time() + 10
            out = ""
            while "home=" not in out and time.time() < deadline:
                time.sleep(0.05)
                if os.path.exists(path):
                    with open(path) as f:
                        out = f.read()
            self.assertEqual(out.splitlines()[0], str(nobody.pw_uid), out)
            self.assertIn("home=%s" % os.path.join(d.data_dir, "home",
                                                   "admin"), out)
            # run.user naming another user cannot be honoured: the start
            # fails with a sentence, it never runs as nobody instead
            st, b = d.http("POST", "/api/apps", {"manifest": manifest(
                "asroot", ["id"], user="root", workdir="/")})
            self.assertEqual(st, 200, b)
            self.assertEqual(b["data"]["state"], "failed", b)
            self.assertIn("needs acceld to run as root", b["data"]["reason"])
        finally:
            kill_apps(d)
            d.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
