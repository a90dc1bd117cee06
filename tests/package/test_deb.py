# SPDX-License-Identifier: MIT
"""The Debian package, installed for real (issue 14 item 3).

Builds the .deb with packaging/build-deb.sh (into <build>/deb, kept between
runs), checks it with lintian (no error or warning) and installs it with
dpkg -i. There is no systemd as PID 1 here, so the test stands in for it:
it reads the installed unit, takes EnvironmentFile, ExecStart,
StateDirectory(+Mode), UMask and WorkingDirectory (/ by default) from it,
creates the state directory, expands $VAR (split on blanks) and ${VAR}
(one word) from the environment file the way systemd does, and runs that
command line with that environment and umask; /healthz must answer, and
the installed page and shim must be the ones in use. Then `dpkg -r` must
stop nothing but remove the files and keep /var/lib/accel and the edited
conffile, and `dpkg -P` must leave nothing of the package behind.

Skipped (exit 77) unless root with dpkg, cpack and lintian, and unless no
accel package is installed already (a real installation is never touched).
"""
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

SOURCE_DIR = os.environ.get(
    "ACCEL_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("ACCEL_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
UNIT = "/lib/systemd/system/acceld.service"
CONF = "/etc/default/accel"
STATE = "/var/lib/accel"
MAX_EXPOSURE = 4.0  # systemd-analyze security's "OK" (issue 20 item 5)


def run(*args, check=True, **kw):
    r = subprocess.run(list(args), capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (
            " ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def installed():
    r = run("dpkg-query", "-W", "-f=${Status}", "accel", check=False)
    return "installed" in r.stdout or "config-files" in r.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_unit(path):
    """{key: [values]} of the [Service] section (systemd's simple form)."""
    keys, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            k, _, v = line.partition("=")
            keys.setdefault((section, k.strip()), []).append(v.strip())
    return keys


def parse_env_file(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;" or "=" not in line:
                continue
            k, _, v = line.partition("=")
            v = v.strip()
            if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
                v = v[1:-1]
            env[k.strip()] = v
    return env


def expand(cmdline, env):
    """systemd's ExecStart expansion: a word that is exactly $VAR becomes
    the value's blank-separated words; ${VAR} is replaced in place."""
    out = []
    for w in shlex.split(cmdline):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", w)
        if m:
            out += env.get(m.group(1), "").split()
            continue
        out.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                          lambda x: env.get(x.group(1), ""), w))
    return out


class DebTest(unittest.TestCase):
    proc = None

    def setUp(self):
        self.addCleanup(self.cleanup)

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if installed():
            run("dpkg", "-P", "accel", check=False)

    def build(self):
        out = os.path.join(BUILD_DIR, "deb")
        r = run("bash", os.path.join(SOURCE_DIR, "packaging", "build-deb.sh"),
                out, cwd=SOURCE_DIR)
        deb = r.stdout.strip().splitlines()[-1]
        self.assertTrue(os.path.isfile(deb), deb)
        return deb

    def start_as_systemd_would(self, log):
        u = parse_unit(UNIT)
        env_files = u.get(("Service", "EnvironmentFile"), [])
        self.assertEqual(env_files, ["-" + CONF])
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
        env.update(parse_env_file(CONF))
        state = u[("Service", "StateDirectory")][0]
        mode = int(u.get(("Service", "StateDirectoryMode"), ["0755"])[0], 8)
        os.makedirs("/var/lib/" + state, exist_ok=True)
        os.chmod("/var/lib/" + state, mode)
        umask = int(u.get(("Service", "UMask"), ["0022"])[0], 8)
        cwd = u.get(("Service", "WorkingDirectory"), ["/"])[0]
        (exec_start,) = u[("Service", "ExecStart")]
        argv = expand(exec_start, env)
        self.assertEqual(argv[0], "/usr/sbin/acceld")
        # the unit's capability bounding set and no_new_privs, as systemd
        # applies them (acceld must start with only those)
        caps = " ".join(u.get(("Service", "CapabilityBoundingSet"), []))
        if caps and shutil.which("setpriv"):
            bset = ",".join("+" + c[4:].lower() for c in caps.split())
            wrap = ["setpriv", "--bounding-set=-all," + bset,
                    "--inh-caps=-all"]
            if u.get(("Service", "NoNewPrivileges"), ["no"])[-1] == "yes":
                wrap.append("--no-new-privs")
            argv = wrap + argv
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, umask=umask)
        return argv

    def wait_healthz(self, port, logpath):
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(
                        "http://127.0.0.1:%d/healthz" % port, timeout=5) as r:
                    if r.status == 200 and os.path.exists(STATE +
                                                          "/admin.token"):
                        return
            except OSError:
                pass
            time.sleep(0.1)
        with open(logpath) as f:
            self.fail("acceld did not answer /healthz:\n" + f.read())

    def test_install_run_remove_purge(self):
        deb = self.build()
        # lintian leaves its MLDBM cache file (mldbm-*) in TMPDIR: give it
        # a directory of its own and remove it, whatever lintian left
        ltmp = tempfile.mkdtemp(prefix="accel-lintian-")
        self.addCleanup(shutil.rmtree, ltmp, True)
        r = run("lintian", "--fail-on", "error,warning", deb, check=False,
                env=dict(os.environ, TMPDIR=ltmp))
        self.assertEqual(r.returncode, 0, "lintian:\n" + r.stdout + r.stderr)
        files = [l.split()[-1][1:] for l in run("dpkg-deb", "-c", deb)
                 .stdout.splitlines() if not l.startswith("d")]

        run("dpkg", "-i", deb)
        for f in files:
            self.assertTrue(os.path.exists(f), f)
        r = run("/usr/sbin/acceld", "--version")
        self.assertRegex(r.stdout, r"^acceld \d+\.\d+\.\d+")
        if shutil.which("systemd-analyze"):
            r = run("systemd-analyze", "verify", UNIT, check=False)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(r.stdout + r.stderr, "")
            # the unit's sandbox (issue 20 item 5; docs/install.md)
            r = run("systemd-analyze", "security", "--offline=yes", UNIT,
                    check=False)
            m = re.search(r"Overall exposure level for acceld.service: "
                          r"(\d+\.\d+)", r.stdout)
            self.assertIsNotNone(m, r.stdout + r.stderr)
            self.assertLessEqual(float(m.group(1)), MAX_EXPOSURE, r.stdout)

        # the user edits the settings (a free port: 7390 may be taken)
        port = free_port()
        with open(CONF) as f:
            conf = f.read()
        self.assertIn("--listen 127.0.0.1:7390", conf)
        with open(CONF, "w") as f:
            f.write(conf.replace("127.0.0.1:7390", "127.0.0.1:%d" % port))

        logpath = os.path.join(BUILD_DIR, "deb", "acceld-test.log")
        with open(logpath, "w") as log:
            self.start_as_systemd_would(log)
        self.wait_healthz(port, logpath)
        st = os.stat(STATE)
        self.assertEqual(st.st_mode & 0o777, 0o711)
        self.assertEqual(os.stat(STATE + "/admin.token").st_mode & 0o777,
                         0o600)
        with urllib.request.urlopen("http://127.0.0.1:%d/" % port,
                                    timeout=30) as r:
            self.assertIn(b"<", r.read())
        r = run("/usr/bin/accelctl", "--server", "127.0.0.1:%d" % port,
                "--data-dir", STATE, "user", "list")
        self.assertIn("admin", r.stdout)
        self.proc.terminate()
        self.assertEqual(self.proc.wait(30), 0)
        with open(logpath) as f:
            log = f.read()
        self.assertIn("the web page is served from /usr/share/accel/web", log)
        self.assertRegex(log, r"apps get the preload shim "
                              r"/usr/lib/[^/]+/accel/libaccelshim.so")

        # remove: the program goes, the data and the edited settings stay
        run("dpkg", "-r", "accel")
        for f in files:
            if not f.startswith("/etc/"):
                self.assertFalse(os.path.exists(f), f)
        self.assertTrue(os.path.exists(STATE + "/accel.db"))
        with open(CONF) as f:
            self.assertIn("127.0.0.1:%d" % port, f.read())

        # purge: nothing of the package is left
        run("dpkg", "-P", "accel")
        self.assertFalse(installed())
        for f in files + [STATE,
                          "/etc/systemd/system/acceld.service",
                          "/etc/systemd/system/multi-user.target.wants/"
                          "acceld.service",
                          "/var/lib/systemd/deb-systemd-helper-enabled/"
                          "acceld.service.dsh-also",
                          "/var/lib/systemd/deb-systemd-helper-masked/"
                          "acceld.service"]:
            self.assertFalse(os.path.lexists(f), f)


def main():
    if os.geteuid() != 0:
        print("skipped: package.deb installs a package and runs only as root")
        return 77
    for tool in ("dpkg", "dpkg-deb", "cpack", "lintian", "dpkg-buildflags"):
        if shutil.which(tool) is None:
            print("skipped: %s not found" % tool)
            return 77
    if installed():
        print("skipped: an accel package is installed; not touching it")
        return 77
    prog = unittest.main(exit=False, argv=sys.argv[:1])
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
