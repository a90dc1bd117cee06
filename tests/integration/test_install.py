# SPDX-License-Identifier: MIT
"""cmake --install and the installed acceld (issue 14 item 1).

Installs this build into a temporary prefix (cmake --install --prefix),
checks that every piece is where docs/install.md says, and starts the
installed acceld: it must serve the installed page and hand apps the
installed shim, found relative to its own executable, not the build
tree's (src/daemon/paths.c). Also --version of both binaries.
"""
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import urllib.request

from accel_harness import ACCELCTL, ACCELD, BUILD_DIR, Acceld, \
    require_binaries


def cache_value(name):
    with open(os.path.join(BUILD_DIR, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    return None


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_binaries(ACCELD, ACCELCTL)
        if shutil.which("cmake") is None:
            raise unittest.SkipTest("cmake not found")
        cls.prefix = tempfile.mkdtemp(prefix="accel-install-")
        os.chmod(cls.prefix, 0o755)
        r = subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix",
                            cls.prefix], capture_output=True, text=True)
        if r.returncode != 0:
            shutil.rmtree(cls.prefix, ignore_errors=True)
            raise AssertionError("cmake --install failed:\n" + r.stdout +
                                 r.stderr)
        cls.libdir = cache_value("CMAKE_INSTALL_LIBDIR") or "lib"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.prefix, ignore_errors=True)

    def path(self, *p):
        return os.path.join(self.prefix, *p)

    def test_layout(self):
        for p in ["sbin/acceld", "bin/accelctl"]:
            self.assertTrue(os.access(self.path(p), os.X_OK), p)
        want = [self.libdir + "/accel/libaccelshim.so",
                "share/accel/web/index.html",
                "share/bash-completion/completions/accelctl",
                "share/doc/accel/README.md",
                "share/doc/accel/install.md",
                "share/doc/accel/copyright",
                "share/doc/accel/changelog.gz",
                "share/doc/accel/examples/homelab.yaml",
                "lib/systemd/system/acceld.service",
                "etc/default/accel"]
        if cache_value("ACCEL_SCDOC") not in (None, "ACCEL_SCDOC-NOTFOUND"):
            want += ["share/man/man8/acceld.8.gz",
                     "share/man/man1/accelctl.1.gz"]
        for p in want:
            self.assertTrue(os.path.isfile(self.path(p)), p)
        with open(self.path("lib/systemd/system/acceld.service")) as f:
            unit = f.read()
        # the prefix of the install, not the configured one (issue 20)
        self.assertIn("ExecStart=%s --data-dir /var/lib/accel $ACCELD_OPTS"
                      % self.path("sbin/acceld"), unit)
        self.assertIn("EnvironmentFile=-%s" % self.path("etc/default/accel"),
                      unit)

    def test_versions(self):
        for exe, name in ((self.path("sbin/acceld"), "acceld"),
                          (self.path("bin/accelctl"), "accelctl"),
                          (ACCELD, "acceld"), (ACCELCTL, "accelctl")):
            r = subprocess.run([exe, "--version"], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, r"^%s \d+\.\d+\.\d+" % name)
        r = subprocess.run([ACCELD, "--version"], capture_output=True,
                           text=True)
        self.assertRegex(r.stdout, r"\(database schema \d+\)")

    def test_installed_acceld_finds_installed_page_and_shim(self):
        import accel_harness
        old = accel_harness.ACCELD
        accel_harness.ACCELD = self.path("sbin/acceld")
        try:
            with Acceld(inventory="") as d:
                with urllib.request.urlopen(d.url + "/", timeout=30) as r:
                    self.assertIn(b"<", r.read())
                log = d.log()
        finally:
            accel_harness.ACCELD = old
        real = os.path.realpath(self.prefix)
        self.assertIn("the web page is served from %s"
                      % os.path.join(real, "share/accel/web"), log)
        self.assertIn("apps get the preload shim %s"
                      % os.path.join(real, self.libdir,
                                     "accel/libaccelshim.so"), log)

    def test_build_tree_acceld_uses_build_tree(self):
        with Acceld(inventory="") as d:
            log = d.log()
        self.assertIn(os.path.join(BUILD_DIR, "src/shim/libaccelshim.so"),
                      log)
        self.assertRegex(log, r"the web page is served from \S*/web/dist")


if __name__ == "__main__":
    unittest.main()
