# SPDX-License-Identifier: MIT
"""The Debian package, installed for real into a throwaway root (issue 14
item 3, issue 20 item 3).

Builds the .deb with packaging/build-deb.sh (into <build>/deb, kept between
runs) and checks it with lintian (no error or warning) on this machine.
Everything else happens in a root of its own, never in this machine's
system: a child process in a mount namespace of its own (unshare --mount)
mounts a tmpfs, an overlay of this machine's / (its read-only lower layer)
with the tmpfs as its upper one, /dev, a fresh /proc and empty /run and
/tmp in it, and chroots there. dpkg, the maintainer scripts and acceld see
a whole Debian system (its dpkg database, its libraries, its
deb-systemd-helper) and every write lands in the tmpfs, which goes with
the namespace when the child ends, however it ends (acceld dies with the
child: PR_SET_PDEATHSIG). No /sys there: acceld finds no cgroup fs and
leaves the machine's alone.

In that root: dpkg -i. There is no systemd as PID 1 here, so the test
stands in for it: it reads the installed unit, takes EnvironmentFile,
ExecStart, StateDirectory(+Mode), UMask, WorkingDirectory (/ by default),
CapabilityBoundingSet and NoNewPrivileges from it, creates the state
directory, expands $VAR (split on blanks) and ${VAR} (one word) from the
environment file the way systemd does, and runs that command line with
that environment and umask, under setpriv (the bounding set and
no_new_privs); /healthz must answer, and the installed page and shim must
be the ones in use. Then `dpkg -r` must stop nothing but remove the files
and keep /var/lib/accel and the edited conffile, and `dpkg -P` must leave
nothing of the package behind.

The machine itself must stay as it was: while the package is installed in
the root, the child looks at the machine's own / (a descriptor opened
before the chroot), and after the child the test looks again: every path
of the package, its directories, /var/lib/accel, the unit's enablement and
mask links, dpkg's files for the package and the accel paragraph of
dpkg's status must be as they were before.

Skipped (exit 77) unless root with dpkg, cpack, lintian and unshare, where
an overlay of / can be mounted, and unless no accel package is installed
on this machine (it is never touched either way).
"""
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integration"))
from accel_harness import end_process, free_port  # noqa: E402

SOURCE_DIR = os.environ.get(
    "ACCEL_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("ACCEL_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
UNIT = "/lib/systemd/system/acceld.service"
CONF = "/etc/default/accel"
STATE = "/var/lib/accel"
MAX_EXPOSURE = 4.0  # systemd-analyze security's "OK" (issue 20 item 5)
DEB_IN_ROOT = "/tmp/accel.deb"
# what the package's scripts make besides its files
SIDE_PATHS = [
    STATE,
    "/etc/systemd/system/acceld.service",
    "/etc/systemd/system/multi-user.target.wants/acceld.service",
    "/var/lib/systemd/deb-systemd-helper-enabled/acceld.service.dsh-also",
    "/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/"
    "acceld.service",
    "/var/lib/systemd/deb-systemd-helper-masked/acceld.service",
] + ["/var/lib/dpkg/info/accel." + x for x in (
    "list", "md5sums", "conffiles", "postinst", "prerm", "postrm")]
PR_SET_PDEATHSIG = 1


def run(*args, check=True, **kw):
    r = subprocess.run(list(args), capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (
            " ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def installed():
    r = run("dpkg-query", "-W", "-f=${Status}", "accel", check=False)
    return "installed" in r.stdout or "config-files" in r.stdout


def signature(path, dir_fd=None):
    """None when path is absent, else what a change to it would alter.
    With dir_fd, path is looked up under that directory (the machine's /
    seen from inside the root)."""
    try:
        st = os.lstat(path.lstrip("/") if dir_fd is not None else path,
                      dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return ["dir", st.st_mode]
    return [st.st_mode, st.st_size, st.st_mtime_ns]


def dpkg_entry(dir_fd=None):
    """The accel paragraph of dpkg's status file, or None."""
    path = "/var/lib/dpkg/status"
    fd = os.open(path.lstrip("/") if dir_fd is not None else path,
                 os.O_RDONLY, dir_fd=dir_fd)
    with os.fdopen(fd) as f:
        for para in f.read().split("\n\n"):
            if para.lstrip("\n").startswith("Package: accel\n"):
                return para.strip()
    return None


def machine_state(files, dir_fd=None):
    """The package's paths, its directories, what its scripts make, and
    dpkg's paragraph for it: on the machine, or under dir_fd."""
    dirs = {os.path.dirname(f) for f in files
            if "/accel" in os.path.dirname(f)}
    state = {p: signature(p, dir_fd)
             for p in sorted(set(files) | dirs | set(SIDE_PATHS))}
    state["dpkg status of accel"] = dpkg_entry(dir_fd)
    return state


def die_with_parent():
    """preexec_fn: SIGKILL when the test process dies (the root's mounts
    live as long as a process of its namespace does)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG,
                                            signal.SIGKILL)


def mount(*args):
    run("mount", *args)


def make_root(work):
    """The throwaway root under work (a tmpfs); its path. Only in a mount
    namespace of our own: the mounts are private to it."""
    mount("-t", "tmpfs", "-o", "mode=0755", "accel-deb-root", work)
    upper, wdir, root = (os.path.join(work, d) for d in ("upper", "work",
                                                         "root"))
    for d in (upper, wdir, root):
        os.mkdir(d)
    mount("-t", "overlay", "accel-deb-root", "-o",
          "lowerdir=/,upperdir=%s,workdir=%s" % (upper, wdir), root)
    mount("--rbind", "/dev", root + "/dev")
    mount("-t", "proc", "proc", root + "/proc")
    # no host sockets (systemd, D-Bus) and no host temporary files
    mount("-t", "tmpfs", "-o", "mode=0755", "accel-deb-run", root + "/run")
    mount("-t", "tmpfs", "-o", "mode=1777", "accel-deb-tmp", root + "/tmp")
    return root


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
    """On the machine: build, lintian, then the root's child; the machine
    must be as it was."""

    def build(self):
        out = os.path.join(BUILD_DIR, "deb")
        r = run("bash", os.path.join(SOURCE_DIR, "packaging", "build-deb.sh"),
                out, cwd=SOURCE_DIR)
        deb = r.stdout.strip().splitlines()[-1]
        self.assertTrue(os.path.isfile(deb), deb)
        return deb

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

        before = machine_state(files)
        work = tempfile.mkdtemp(prefix="accel-deb-root-")
        self.addCleanup(shutil.rmtree, work, True)
        child = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private",
             sys.executable, os.path.abspath(__file__), "--in-root", work],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)
        spec = json.dumps({"deb": deb, "files": files, "machine": before})
        try:
            out, _ = child.communicate(spec, timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            out, _ = child.communicate()
            self.fail("the root's part ran past 600 s:\n" + out)
        self.assertEqual(child.returncode, 0, "in the root:\n" + out)
        self.assertEqual(machine_state(files), before,
                         "the machine's own files or dpkg status changed")


class InRootTest(unittest.TestCase):
    """In the throwaway root (chrooted): install, run, remove, purge."""
    proc = None
    spec = None      # {"deb", "files", "machine"} from DebTest
    machine = None   # a descriptor of the machine's own /

    def setUp(self):
        self.addCleanup(self.cleanup)

    def cleanup(self):
        end_process(self.proc, 10)
        if installed():  # the root's dpkg; the root goes anyway
            run("dpkg", "-P", "accel", check=False)

    def assert_machine_untouched(self):
        self.assertEqual(machine_state(self.spec["files"], self.machine),
                         self.spec["machine"],
                         "the package reached the machine's own files")

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
            stderr=subprocess.STDOUT, umask=umask,
            preexec_fn=die_with_parent)
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
        files = self.spec["files"]
        self.assertFalse(installed())
        run("dpkg", "-i", DEB_IN_ROOT)
        for f in files:
            self.assertTrue(os.path.exists(f), f)
        self.assertTrue(installed())
        # installed here, and not on the machine
        self.assert_machine_untouched()
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

        logpath = "/tmp/acceld-test.log"
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
        # the context probe is installed where acceld looks for it (a
        # build that left it out said "no accel-ctxprobe at ...")
        self.assertTrue(os.access("/usr/libexec/accel/accel-ctxprobe",
                                  os.X_OK))
        self.assertNotIn("no accel-ctxprobe at", log)

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

        self.assert_machine_untouched()


def in_root(work):
    """The child: make the root, chroot, run InRootTest; the exit status."""
    spec = json.load(sys.stdin)
    try:
        root = make_root(work)
        shutil.copy(spec["deb"], root + DEB_IN_ROOT)
    except (AssertionError, OSError) as e:
        print("cannot make the throwaway root: %s" % e)
        return 1
    InRootTest.spec = spec
    InRootTest.machine = os.open("/", os.O_PATH | os.O_DIRECTORY)
    os.chroot(root)
    os.chdir("/")
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(InRootTest)
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(
        suite)
    return 0 if result.wasSuccessful() else 1


def overlay_works():
    """Can this machine mount an overlay of / in a mount namespace?"""
    d = tempfile.mkdtemp(prefix="accel-deb-probe-")
    try:
        r = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             'mount -t tmpfs probe "$1" && mkdir "$1/u" "$1/w" "$1/m" && '
             'mount -t overlay probe -o lowerdir=/,upperdir="$1/u",'
             'workdir="$1/w" "$1/m"', "sh", d],
            capture_output=True, text=True)
        return r.returncode == 0, r.stderr.strip()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--in-root":
        return in_root(sys.argv[2])
    if os.geteuid() != 0:
        print("skipped: package.deb mounts its throwaway root as root only")
        return 77
    for tool in ("dpkg", "dpkg-deb", "cpack", "lintian", "dpkg-buildflags",
                 "unshare", "mount"):
        if shutil.which(tool) is None:
            print("skipped: %s not found" % tool)
            return 77
    if installed():
        print("skipped: an accel package is installed on this machine; the "
              "test installs only into a root of its own, but compares "
              "with a machine that has none")
        return 77
    ok, why = overlay_works()
    if not ok:
        print("skipped: no overlay of / can be mounted here (%s); the "
              "package is never installed onto this machine itself" % why)
        return 77
    prog = unittest.main(exit=False, argv=sys.argv[:1],
                         defaultTest="DebTest")
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
