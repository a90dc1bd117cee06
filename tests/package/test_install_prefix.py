# SPDX-License-Identifier: MIT
"""The prefix of an install is the one the installed files name (issue 20
item 2).

Installs this build three times, each into a DESTDIR of its own under one
temporary directory: with the configured prefix (no --prefix), with
`--prefix /usr` (the package's layout: the unit in /lib/systemd/system,
the settings in /etc/default) and with `--prefix /opt/accel-prefix-check`.
For each it checks that the unit's ExecStart is that prefix's acceld and
an executable of the staged tree, that its EnvironmentFile is the staged
settings file, that the man pages name that prefix's page, shim, examples
and settings file, that every path lintian's overrides name is in the
tree, and that no installed file (binaries included; the Markdown copies
of the docs, which describe every layout, excepted) names the configured
prefix's paths when the prefix differs. `systemd-analyze verify --root=`
checks each staged unit offline (given the few targets it wants, from the
host's /lib/systemd/system; skipped when those are missing), and
`systemd-analyze security --offline=yes` must rate it 4.0 or lower (issue
20 item 5). Nothing is written outside the temporary directory (and the
build directory's transient install-* directory, removed).
"""
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from test_deb import parse_unit  # noqa: E402

SOURCE_DIR = os.environ.get(
    "ACCEL_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("ACCEL_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
OTHER_PREFIX = "/opt/accel-prefix-check"
TARGETS = ("sysinit.target", "basic.target", "shutdown.target",
           "network.target", "multi-user.target")
MAX_EXPOSURE = 4.0  # systemd-analyze security's "OK" (issue 20 item 5)


def cache():
    vals = {}
    with open(os.path.join(BUILD_DIR, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(r"^([A-Za-z_0-9]+):[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                vals[m.group(1)] = m.group(2)
    return vals


def exposure(unit_path):
    """systemd-analyze security --offline=yes's overall exposure level."""
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes",
                        unit_path], capture_output=True, text=True)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout)
    if m is None:
        raise AssertionError("no overall exposure level (rc %d):\n%s%s" % (
            r.returncode, r.stdout, r.stderr))
    return float(m.group(1)), r.stdout


class Layout:
    """Where the files of an install with prefix p go (packaging/
    install-paths.cmake), from the build's configured directories."""

    def __init__(self, c, p):
        def full(d):
            return d if d.startswith("/") else (p.rstrip("/") + "/" + d)
        def conf(name, default):  # empty in the cache: GNUInstallDirs' own
            return c.get("CMAKE_INSTALL_" + name) or default
        root = conf("DATAROOTDIR", "share")
        self.prefix = p
        self.sbindir = full(conf("SBINDIR", "sbin"))
        self.libdir = full(conf("LIBDIR", "lib"))
        self.datadir = full(conf("DATADIR", root))
        self.mandir = full(conf("MANDIR", root + "/man"))
        self.docdir = full(conf("DOCDIR", root + "/doc/accel"))
        sysconf = conf("SYSCONFDIR", "etc")
        if p in ("/usr", "/") and not sysconf.startswith("/"):
            self.settings = "/etc/default/accel"
        else:
            self.settings = full(sysconf) + "/default/accel"
        unitdir = c.get("ACCEL_SYSTEMD_UNITDIR", "")
        if unitdir:
            self.unitdir = full(unitdir)
        elif p == "/usr":
            self.unitdir = "/lib/systemd/system"
        else:
            self.unitdir = full("lib/systemd/system")
        self.unit = self.unitdir + "/acceld.service"

    def accel_paths(self):
        """The paths of this layout that only accel's files would name."""
        return [self.sbindir + "/acceld", self.datadir + "/accel",
                self.docdir, self.libdir + "/accel", self.settings,
                self.unit]


class InstallPrefixTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("cmake") is None:
            raise unittest.SkipTest("cmake not found")
        for exe in ("acceld", "accelctl"):
            if not os.path.exists(os.path.join(BUILD_DIR, exe)):
                raise unittest.SkipTest("build first: %s missing" % exe)
        cls.cache = cache()
        cls.configured = cls.cache["CMAKE_INSTALL_PREFIX"]
        cls.man = cls.cache.get("ACCEL_SCDOC", "") not in (
            "", "ACCEL_SCDOC-NOTFOUND")
        cls.tmp = tempfile.mkdtemp(prefix="accel-prefix-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def install(self, name, prefix):
        """cmake --install into DESTDIR <tmp>/<name>; the DESTDIR."""
        dest = os.path.join(self.tmp, name)
        argv = ["cmake", "--install", BUILD_DIR]
        if prefix is not None:
            argv += ["--prefix", prefix]
        # the install script's transient directory (install-paths.cmake)
        key = hashlib.sha1(("%s|%s" % (dest, (prefix or self.configured)
                                       .rstrip("/") or "/"))
                           .encode()).hexdigest()
        self.addCleanup(shutil.rmtree, os.path.join(
            BUILD_DIR, "packaging", "install-" + key), True)
        r = subprocess.run(argv, capture_output=True, text=True,
                           env=dict(os.environ, DESTDIR=dest))
        self.assertEqual(r.returncode, 0, "cmake --install:\n" + r.stdout +
                         r.stderr)
        return dest

    def staged(self, dest, path):
        return dest + path

    def check(self, name, prefix):
        lay = Layout(self.cache, prefix or self.configured)
        dest = self.install(name, prefix)
        unit_path = self.staged(dest, lay.unit)
        self.assertTrue(os.path.isfile(unit_path), lay.unit)
        unit = parse_unit(unit_path)

        (exec_start,) = unit[("Service", "ExecStart")]
        exe = exec_start.split()[0]
        self.assertEqual(exe, lay.sbindir + "/acceld")
        self.assertTrue(os.access(self.staged(dest, exe), os.X_OK),
                        "ExecStart %s is not an executable of the tree" % exe)
        self.assertEqual(unit[("Service", "EnvironmentFile")],
                         ["-" + lay.settings])
        self.assertTrue(os.path.isfile(self.staged(dest, lay.settings)),
                        lay.settings)

        if self.man:
            with gzip.open(self.staged(
                    dest, lay.mandir + "/man8/acceld.8.gz"), "rt") as f:
                page = f.read().replace("\\&", "")
            for p in (lay.datadir + "/accel/web", lay.docdir + "/examples",
                      lay.libdir + "/accel/libaccelshim.so", lay.settings):
                self.assertTrue(p in page, "acceld(8) does not name " + p)
            self.assertIsNone(re.search(r"@[A-Z]+@", page))

        with open(self.staged(dest, lay.datadir +
                              "/lintian/overrides/accel")) as f:
            for m in re.finditer(r"\[([^\]]+)\]", f.read()):
                self.assertTrue(os.path.exists(os.path.join(dest,
                                                            m.group(1))),
                                "lintian override for %s: not installed"
                                % m.group(1))

        if (prefix or self.configured) != self.configured:
            self.assert_no_leak(dest, lay)
        self.verify(dest, lay)
        if shutil.which("systemd-analyze"):
            level, out = exposure(unit_path)
            self.assertLessEqual(level, MAX_EXPOSURE, out)

    def assert_no_leak(self, dest, lay):
        """No installed file names the configured prefix's paths."""
        conf = Layout(self.cache, self.configured)
        needles = [p.encode() for p in conf.accel_paths()
                   if p not in lay.accel_paths()]
        for root, _, files in os.walk(dest):
            for fn in files:
                path = os.path.join(root, fn)
                if root == dest + lay.docdir and fn.endswith(".md"):
                    continue  # the docs: every layout, by design
                with open(path, "rb") as f:
                    data = f.read()
                if fn.endswith(".gz"):
                    data = gzip.decompress(data).replace(b"\\&", b"")
                for n in needles:
                    self.assertNotIn(n, data, "%s names %s (the configured "
                                     "prefix's)" % (path[len(dest):],
                                                    n.decode()))

    def verify(self, dest, lay):
        """systemd-analyze verify in the staged tree as its root."""
        if shutil.which("systemd-analyze") is None:
            return
        host = [os.path.join("/lib/systemd/system", t) for t in TARGETS]
        if not all(os.path.isfile(t) for t in host):
            return  # the ExecStart check above stands in
        # the targets the unit's default dependencies want, where systemd
        # looks for transient units (after the leak scan: not installed),
        # with a relative link to the staged unit (its directory may be
        # outside systemd's search path, e.g. under /opt)
        run_dir = os.path.join(dest, "run/systemd/system")
        os.makedirs(run_dir)
        for t in host:
            shutil.copy(t, run_dir)
        os.symlink(os.path.relpath(dest + lay.unit, run_dir),
                   os.path.join(run_dir, "acceld.service"))
        try:
            r = subprocess.run(["systemd-analyze", "verify", "--man=no",
                                "--root=" + dest,
                                "/run/systemd/system/acceld.service"],
                               capture_output=True, text=True)
        finally:
            shutil.rmtree(os.path.join(dest, "run"))
        self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))

    def test_configured_prefix(self):
        self.check("configured", None)

    def test_install_time_prefix_usr(self):
        self.check("usr", "/usr")

    def test_install_time_prefix_other(self):
        self.check("other", OTHER_PREFIX)


if __name__ == "__main__":
    prog = unittest.main(exit=False)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
