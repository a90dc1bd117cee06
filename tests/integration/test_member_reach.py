# SPDX-License-Identifier: MIT
"""Issue 39: what a member's app could still see or spend, closed (each
test fails on c2a7133):

- terminal control bytes: a title or description with C0/C1 control
  characters is refused at install (400 naming the field), and accelctl
  prints any control byte acceld answers escaped, in a table, a sentence
  or -o json (an app stored before the rule);
- the HAMi listener (--hami-listen) answers no app of the node: a
  member's app, whose uid is in --app-uid-range, is refused (403 naming
  its uid), an operator's process is served, and --hami-users names who
  may use it instead;
- limitedDisk counts the files an app holds open after deleting them, and
  an app that ignores SIGTERM is measured while it stops;
- an app's logs go with it at uninstall, and with its user's home when the
  user is removed; a member's logs together are bounded (--user-logs-max)."""
import http.client
import json
import os
import re
import sqlite3
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import (Acceld, SOURCE_DIR, free_port, manifest,  # noqa: E402
                           wait_for)

NOGPU = os.path.join(SOURCE_DIR, "examples", "nogpu.yaml")

# what a terminal takes as a control: C0 but the newline, DEL, C1
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f\x80-\x9f]")
NASTY = "\x1b]0;owned\x07\x1b[2J\rState: stopped\x9b1m"


class ControlBytesTest(unittest.TestCase):
    def setUp(self):
        self.d = Acceld().start()

    def tearDown(self):
        self.d.close()

    def test_install_refuses_control_characters_naming_the_field(self):
        st, b = self.d.http("POST", "/api/users", {"name": "mia"})
        self.assertEqual(st, 200, b)
        tok = b["data"]["token"]
        for where, key, text in (("metadata", "title", "A\x1b[2Jb"),
                                 ("metadata", "title", "ok\rState: x"),
                                 ("metadata", "description", "x\x9b1m"),
                                 ("metadata", "description", "two\nlines"),
                                 ("spec", "fullDescription", "\x07")):
            m = manifest("titled")
            m.setdefault(where, {})[key] = text
            st, b = self.d.http("POST", "/api/apps", {"manifest": m},
                                token=tok)
            self.assertEqual(st, 400, (key, text, b))
            self.assertIn("%s.%s must not contain control characters"
                          % (where, key), b["message"])
        st, b = self.d.http("GET", "/api/apps/titled")
        self.assertEqual(st, 404, b)  # nothing was installed
        # Markdown's lines and tabs stay allowed where they belong
        m = manifest("titled")
        m["metadata"]["title"] = "Ti\u00e9tle \u2014 ok"
        m["spec"]["fullDescription"] = "# Heading\n\n\tcode"
        st, b = self.d.http("POST", "/api/apps", {"manifest": m}, token=tok)
        self.assertEqual(st, 200, b)

    def test_app_logs_escape_an_apps_control_bytes_keep_its_lines(self):
        """An app's output reaches whoever runs `accelctl app logs`: its
        lines and tabs as they are, every other control byte escaped."""
        self.d.close()
        self.d = Acceld(inventory=NOGPU,
                        extra_args=["--node-name", "box"]).start()
        prog = ("import sys; sys.stdout.write('one\\tx\\n' + %r + '\\n"
                "two\\n'); sys.stdout.flush()" % NASTY)
        m = cpu_app("talker", ["python3", "-c", prog])
        st, b = self.d.http("POST", "/api/apps", {"manifest": m})
        self.assertEqual(st, 200, b)
        out = wait_for(self, lambda: (lambda r: "two" in r.stdout and
                                      r.stdout)(self.d.ctl("app", "logs",
                                                           "talker")),
                       "the app's output", log=self.d)
        self.assertIsNone(CONTROL.search(out.replace("\t", "")), out)
        self.assertIn("one\tx\n\\x1b]0;owned\\x07\\x1b[2J\\x0dState: "
                      "stopped\\u009b1m\ntwo\n", out)

    def test_accelctl_escapes_what_acceld_answers(self):
        # an app stored before the rule (written into the store here)
        st, b = self.d.http("POST", "/api/apps",
                            {"manifest": manifest("old")})
        self.assertEqual(st, 200, b)
        self.d.stop()
        db = sqlite3.connect(os.path.join(self.d.data_dir, "accel.db"))
        row = db.execute("SELECT manifest FROM apps WHERE name='old'")
        m = json.loads(row.fetchone()[0])
        m["metadata"]["title"] = NASTY
        db.execute("UPDATE apps SET manifest=?, reason=? WHERE name='old'",
                   (json.dumps(m), NASTY))
        db.commit()
        db.close()
        self.d.start()
        self.assertEqual(self.d.data("/api/apps/old")["title"], NASTY)
        for args in (("app", "show", "old"), ("app", "list"),
                     ("-o", "json", "app", "show", "old"),
                     ("-o", "json", "app", "list"),
                     ("events", "--app", "old"),
                     ("-o", "json", "events", "--app", "old"),
                     ("app", "resume", "nope-" + NASTY[:2])):
            r = self.d.ctl(*args)
            for out in (r.stdout, r.stderr):
                self.assertIsNone(CONTROL.search(out), (args, out))
        r = self.d.ctl("app", "show", "old")
        self.assertIn("\\x1b]0;owned\\x07\\x1b[2J\\x0dState: stopped"
                      "\\u009b1m", r.stdout)
        r = self.d.ctl("-o", "json", "app", "show", "old")
        self.assertEqual(json.loads(r.stdout)["title"], NASTY)


def cpu_app(name, cmd, disk="16Mi", stop=2):
    """An app of the nogpu node (box) running cmd."""
    return {"apiVersion": "v2", "metadata": {"name": name},
            "spec": {"accelerator": [{
                "mode": "cpu", "requiredMemory": "16Mi",
                "limitedMemory": "128Mi", "requiredCpu": "10m",
                "limitedCpu": "500m", "requiredDisk": "1Mi",
                "limitedDisk": disk}]},
            "run": {"command": cmd, "stopTimeoutSeconds": stop}}


# an app that asks the HAMi listener for every app, and says what it got
PEEK = """
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
c.request("POST", "/v1/containers", body="{}",
          headers={"Content-Type": "application/json"})
r = c.getresponse()
print("hami-answer", r.status, r.read().decode(), flush=True)
"""


def hami(port, path="/v1/containers"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", path, body="{}",
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    body = json.loads(r.read() or b"null")
    c.close()
    return r.status, body


@unittest.skipUnless(os.geteuid() == 0, "apps run as their owner's uid as "
                     "root only")
class HamiPeersTest(unittest.TestCase):
    def start(self, *more):
        self.hport = free_port()
        self.d = Acceld(inventory=NOGPU, extra_args=[
            "--node-name", "box", "--hami-listen",
            "127.0.0.1:%d" % self.hport] + list(more)).start()
        self.addCleanup(self.d.close)

    def install(self, m, token=None):
        st, b = self.d.http("POST", "/api/apps", {"manifest": m},
                            token=token)
        self.assertEqual(st, 200, b)
        return b["data"]

    def stop_app(self, name):
        st, b = self.d.http("POST", "/api/apps/%s/suspend" % name)
        self.assertIn(st, (200, 202), b)
        wait_for(self, lambda: self.d.data("/api/apps/" + name)["state"]
                 in ("stopped", "failed"), name + " stopped", timeout=20)

    def test_a_members_app_is_refused_an_operator_served(self):
        self.start()
        st, b = self.d.http("POST", "/api/users", {"name": "mia"})
        self.assertEqual(st, 200, b)
        self.install(cpu_app("secret", ["sleep", "600"]))
        self.install(cpu_app("peek", ["python3", "-c", PEEK,
                                      str(self.hport)]),
                     token=b["data"]["token"])
        log = wait_for(self, lambda: "hami-answer" in
                       self.d.app_log("peek") and self.d.app_log("peek"),
                       "peek's answer", timeout=20)
        self.assertIn("hami-answer 403", log)
        self.assertIn("is an app's (--app-uid-range 65536-99999)", log)
        self.assertNotIn("secret", log)
        # an admin's run.user app is an app too, outside the range
        m = cpu_app("peek2", ["python3", "-c", PEEK, str(self.hport)])
        m["run"]["user"] = "nobody"
        m["run"]["workdir"] = "/"  # nobody's home is /nonexistent
        self.install(m)
        log = wait_for(self, lambda: "hami-answer" in
                       self.d.app_log("peek2") and self.d.app_log("peek2"),
                       "peek2's answer", timeout=20)
        self.assertIn("hami-answer 403", log)
        self.assertIn("is one an app runs as", log)
        # the operator's own process (root here) is served as before
        st, b = hami(self.hport)
        self.assertEqual(st, 200, b)
        self.assertIn("secret", [c["name"] for c in b["items"]])
        self.stop_app("secret")

    def test_only_the_users_named(self):
        self.start("--hami-users", "nobody,4242")
        st, b = hami(self.hport)
        self.assertEqual(st, 403, b)
        self.assertIn("uid 0 is not one --hami-users names", b["message"])
        # the main API is untouched
        self.assertEqual(self.d.http("GET", "/api/apps")[0], 200)

    def test_bad_users_are_refused_at_start(self):
        for args, said in ((["--hami-users", "no-such-user-39"],
                            "is no user of this machine"),
                           (["--hami-users", "0"],
                            "--hami-users needs --hami-listen")):
            d = Acceld(inventory=NOGPU, extra_args=args)
            self.addCleanup(d.close)
            with self.assertRaises(RuntimeError):
                d.start()
            self.assertIn(said, d.log())


# holds 64 MiB in a file of its home that it has deleted
UNLINKED = """
import os, time
f = open(os.path.join(os.environ["HOME"], "hidden"), "wb")
os.unlink(f.name)
for _ in range(64):
    f.write(b"x" * (1 << 20))
f.flush()
print("written", flush=True)
time.sleep(600)
"""

# ignores SIGTERM, then writes 32 MiB into its home while it stops
STUBBORN = """
import os, signal, time
asked = []
signal.signal(signal.SIGTERM, lambda *a: asked.append(1))
print("ready", flush=True)
while not asked:
    time.sleep(0.05)
with open(os.path.join(os.environ["HOME"], "late"), "wb") as f:
    for _ in range(32):
        f.write(b"x" * (1 << 20))
print("written", flush=True)
while True:
    time.sleep(1)
"""


@unittest.skipUnless(os.geteuid() == 0, "apps run as their owner's uid as "
                     "root only")
class DiskEvasionTest(unittest.TestCase):
    def setUp(self):
        self.d = Acceld(inventory=NOGPU,
                        extra_args=["--node-name", "box"]).start()
        self.addCleanup(self.d.close)
        st, b = self.d.http("POST", "/api/users", {"name": "mia"})
        self.assertEqual(st, 200, b)
        self.tok = b["data"]["token"]

    def app(self, name):
        return self.d.http("GET", "/api/apps/" + name, token=self.tok)[1][
            "data"]

    def install(self, name, prog, stop=2):
        m = cpu_app(name, ["python3", "-c", prog], disk="8Mi", stop=stop)
        st, b = self.d.http("POST", "/api/apps", {"manifest": m},
                            token=self.tok)
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["enforcement"]["disk"], "watched", b)

    def test_a_deleted_file_held_open_counts(self):
        self.install("hider", UNLINKED)
        a = wait_for(self, lambda: self.app("hider")["state"] == "failed" and
                     self.app("hider"), "hider stopped for its disk",
                     timeout=30, log=self.d)
        self.assertIn("past limitedDisk 8Mi", a["reason"])

    def test_an_app_that_stops_is_measured_too(self):
        self.install("stubborn", STUBBORN, stop=3600)
        wait_for(self, lambda: "ready" in self.d.app_log("stubborn"),
                 "stubborn ready", timeout=20)
        st, b = self.d.http("POST", "/api/apps/stubborn/suspend",
                            token=self.tok)
        self.assertEqual(st, 200, b)
        wait_for(self, lambda: "written" in self.d.app_log("stubborn"),
                 "the write while it stops", timeout=20)
        # killed within the watch's passes, not after an hour
        a = wait_for(self, lambda: self.app("stubborn")["state"] in
                     ("stopped", "failed") and self.app("stubborn"),
                     "stubborn killed for its disk", timeout=30, log=self.d)
        ev = [e["message"] for e in self.d.data("/api/events?limit=1000")
              if e.get("app") == "stubborn"]
        self.assertTrue(any("killed while it stops" in m and
                            "past limitedDisk 8Mi" in m for m in ev), ev)
        self.assertNotEqual(a["state"], "stopping")


# writes n bytes of output, then leaves a mark in its home, then waits
def chatty(n):
    return ("import os, sys, time\n"
            "for _ in range(%d):\n"
            "    sys.stdout.write('y' * 65535 + '\\n')\n"
            "sys.stdout.flush()\n"
            "open(os.path.join(os.environ['HOME'], 'done'), 'w').close()\n"
            "time.sleep(600)\n" % (n // 65536))


@unittest.skipUnless(os.geteuid() == 0, "apps run as their owner's uid as "
                     "root only")
class LogsTest(unittest.TestCase):
    def start(self, *more):
        self.d = Acceld(inventory=NOGPU, extra_args=[
            "--node-name", "box"] + list(more)).start()
        self.addCleanup(self.d.close)
        self.logs = os.path.join(self.d.data_dir, "logs")
        st, b = self.d.http("POST", "/api/users", {"name": "mia"})
        self.assertEqual(st, 200, b)
        self.tok = b["data"]["token"]

    def install(self, name, prog):
        st, b = self.d.http("POST", "/api/apps", {"manifest": cpu_app(
            name, ["python3", "-c", prog])}, token=self.tok)
        self.assertEqual(st, 200, b)

    def files(self, *apps):
        """{file: size} of the apps' logs."""
        out = {}
        for f in os.listdir(self.logs):
            if any(f == a + ".log" or f.startswith(a + ".log.")
                   for a in apps):
                try:
                    out[f] = os.stat(os.path.join(self.logs, f)).st_size
                except OSError:
                    pass
        return out

    def done(self):
        return os.path.exists(os.path.join(self.d.data_dir, "home", "mia",
                                           "done"))

    def user(self):
        return [u for u in self.d.data("/api/users")
                if u["name"] == "mia"][0]

    def test_a_users_logs_are_bounded_together(self):
        self.start("--user-logs-max", "2Mi")
        self.install("one", chatty(3 << 20))
        self.install("two", chatty(3 << 20))
        wait_for(self, self.done, "the output written", timeout=30)
        u = self.user()
        self.assertEqual(u["maxLogBytes"], 2 << 20, u)

        def bounded():
            f = self.files("one", "two")
            u = self.user()
            return (sum(f.values()) <= 2 << 20 and
                    u["logBytes"] == sum(f.values()) and f)
        wait_for(self, bounded, "mia's logs within 2 MiB", timeout=20)

    def test_logs_go_with_the_app_and_with_the_user(self):
        self.start()
        self.assertEqual(self.user()["maxLogBytes"], 100 << 20)
        self.install("one", chatty(100000))
        wait_for(self, lambda: self.files("one").get("one.log", 0) > 0,
                 "one's log")
        st, b = self.d.http("DELETE", "/api/apps/one", token=self.tok)
        self.assertIn(st, (200, 202), b)
        wait_for(self, lambda: self.d.http("GET", "/api/apps/one")[0] == 404,
                 "one uninstalled", timeout=20)
        wait_for(self, lambda: self.files("one") == {}, "one's logs gone")
        self.assertFalse(os.path.exists(os.path.join(self.logs, "one.pipe")))
        # the user removed with its apps: their logs go with them
        self.install("two", chatty(100000))
        wait_for(self, lambda: self.files("two").get("two.log", 0) > 0,
                 "two's log")
        st, b = self.d.http("DELETE", "/api/users/mia?force=true")
        self.assertIn(st, (200, 202), b)
        wait_for(self, lambda: self.d.http("GET", "/api/apps/two")[0] == 404,
                 "two uninstalled", timeout=20)
        wait_for(self, lambda: self.files("two") == {}, "two's logs gone")


if __name__ == "__main__":
    unittest.main()
