# SPDX-License-Identifier: MIT
"""accelctl login and open (issue 14 item 5): the saved server and token in
$XDG_CONFIG_HOME/accel/config (else ~/.config/accel/config), 0600 in a
0700 directory; --server, --token and the environment win over it; a saved
token is only ever sent to its own server; open prints the page's link
with #token=. HOME and XDG_CONFIG_HOME point into a temporary directory.
"""
import os
import shutil
import stat
import subprocess
import tempfile
import unittest

import accel_harness
from accel_harness import ACCELCTL, require_binaries


class LoginTest(accel_harness.SharedAcceld):
    inventory = ""

    @classmethod
    def setUpClass(cls):
        require_binaries(ACCELCTL)
        super().setUpClass()

    def setUp(self):
        self.home = tempfile.mkdtemp(prefix="accel-login-")
        self.addCleanup(shutil.rmtree, self.home, True)

    def ctl(self, *args, env=None, input=None, xdg=True):
        e = {k: v for k, v in os.environ.items()
             if not k.startswith("ACCEL_") and k != "XDG_CONFIG_HOME"}
        e["HOME"] = self.home
        if xdg:
            e["XDG_CONFIG_HOME"] = os.path.join(self.home, "xdg")
        if env:
            e.update(env)
        # cwd: no ./accel-data/admin.token to fall back on
        return subprocess.run([ACCELCTL] + list(args), capture_output=True,
                              text=True, env=e, cwd=self.home, input=input,
                              timeout=60)

    def config(self, xdg=True):
        if xdg:
            return os.path.join(self.home, "xdg", "accel", "config")
        return os.path.join(self.home, ".config", "accel", "config")

    def login(self, **kw):
        r = self.ctl("login", self.d.url, "--token", self.d.token, **kw)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def test_login_saves_private_file_and_is_used(self):
        r = self.login()
        path = self.config()
        self.assertIn(path, r.stdout)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(path))
                                      .st_mode), 0o700)
        with open(path) as f:
            text = f.read()
        self.assertIn("server = %s\n" % self.d.url, text)
        self.assertIn("token = %s\n" % self.d.token, text)
        self.assertEqual([n for n in os.listdir(os.path.dirname(path))],
                         ["config"], "a temporary file was left behind")
        r = self.ctl("user", "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("admin", r.stdout)

    def test_home_config_without_xdg(self):
        self.login(xdg=False)
        self.assertTrue(os.path.isfile(self.config(xdg=False)))
        self.assertFalse(os.path.exists(self.config()))
        r = self.ctl("user", "list", xdg=False)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_token_from_stdin(self):
        r = self.ctl("login", self.d.url, input=self.d.token + "\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.ctl("user", "list").returncode, 0)

    def test_bad_token_or_server_saves_nothing(self):
        r = self.ctl("login", self.d.url, "--token", "0" * 64)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("nothing saved", r.stderr)
        self.assertFalse(os.path.exists(self.config()))
        r = self.ctl("login", "http://127.0.0.1:1", "--token", "x")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertFalse(os.path.exists(self.config()))
        r = self.ctl("login", self.d.url, input="")
        self.assertEqual(r.returncode, 2)
        self.assertFalse(os.path.exists(self.config()))

    def test_options_and_environment_win(self):
        self.login()
        # --token wins over the saved one
        r = self.ctl("--token", "0" * 64, "user", "list")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        r = self.ctl("user", "list", env={"ACCEL_TOKEN": "0" * 64})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        # --server and $ACCEL_SERVER win over the saved server
        r = self.ctl("--server", "127.0.0.1:1", "user", "list")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        r = self.ctl("user", "list", env={"ACCEL_SERVER": "127.0.0.1:1"})
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)

    def test_saved_token_is_not_sent_to_another_server(self):
        self.login()
        # the same acceld under another name: the saved token is not sent
        other = self.d.url.replace("127.0.0.1", "localhost")
        r = self.ctl("--server", other, "user", "list")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        r = self.ctl("--server", other, "--token", self.d.token, "user",
                     "list")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_config_readable_by_others_is_refused(self):
        self.login()
        os.chmod(self.config(), 0o644)
        r = self.ctl("user", "list")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(self.config(), r.stderr)
        self.assertIn("readable by others", r.stderr)

    def test_relogin_replaces(self):
        self.login()
        r = self.ctl("user", "add", "carol")
        self.assertEqual(r.returncode, 0, r.stderr)
        carol = [l.split(":", 1)[1].strip() for l in r.stdout.splitlines()
                 if l.startswith("Token")][0]
        r = self.ctl("login", self.d.url + "/", "--token", carol)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.config()) as f:
            text = f.read()
        self.assertIn("token = %s\n" % carol, text)
        self.assertIn("server = %s\n" % self.d.url, text)  # no trailing /
        r = self.ctl("user", "list")  # carol is no admin
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)

    def test_open_prints_link(self):
        self.login()
        r = self.ctl("open")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "%s/#token=%s\n" % (self.d.url,
                                                       self.d.token))
        r = self.ctl("--server", "h:1", "--token", "T", "open")
        self.assertEqual(r.stdout, "http://h:1/#token=T\n")


if __name__ == "__main__":
    unittest.main()
