# SPDX-License-Identifier: MIT
"""Red team of the Docker path (issue 47, SPEC 8.2.1: a member's container
gets no more than a member's process). A hostile process in a container
that names an app through accel-runc (root in the container, Docker's
default capabilities: CHOWN, FOWNER, FSETID, SETFCAP, DAC_OVERRIDE) must
not turn what the app's CDI device mounts into it into more than a
member's process has on the host. Each test is an attack that succeeded
before its fix; the real dockerd of test_docker.py, its own data root."""
import ctypes
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import BUILD_DIR, Acceld  # noqa: E402
from test_docker import ASAN, HAVE_DOCKER, IMAGE, WHY, Dockerd  # noqa: E402
import test_docker  # noqa: E402
from test_containers import (INVENTORY, GPU, ContainerCase,  # noqa: E402
                             cdi_spec, cdi_wrapper, rootfs_tar)


def tools_tar(tmp):
    """rootfs_tar's rootfs with chmod, chown and ls added (a hostile
    image brings what it likes)."""
    tar = rootfs_tar(tmp)
    root = os.path.join(tmp, "rootfs")  # rootfs_tar's, left in tmp
    for tool in ("chmod", "chown", "ls"):
        shutil.copy(os.path.realpath(shutil.which(tool)),
                    os.path.join(root, "bin", tool))
    subprocess.run(["tar", "-C", root, "-cf", tar, "."], check=True)
    return tar


class DockerCase(ContainerCase):
    """test_docker's setting: acceld in its mount namespace, a dockerd of
    the test's own with accel-runc registered, the image with chmod and
    chown imported."""

    external = test_docker.DockerTest.external
    run_dk = test_docker.DockerTest.run_dk

    @classmethod
    def setUpClass(cls):
        cls.imgdir = tempfile.mkdtemp(prefix="accel-dkr-img-")
        cls.tar = tools_tar(cls.imgdir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.imgdir, ignore_errors=True)

    def setUp(self):
        """test_docker's: acceld in its namespace, a dockerd of the
        test's own with accel-runc registered, the image imported."""
        super().setUp()
        self.dk = Dockerd(self.tmp)
        self.d = Acceld(inventory=INVENTORY, extra_args=["--node-name", "ctr"],
                        env={"ACCEL_CDI_DIR": "/etc/cdi",
                             "DOCKER_HOST": self.dk.host},
                        wrapper=cdi_wrapper(tempfile.mkdtemp(dir=self.tmp),
                                            cdi_spec(GPU))).start()
        self.inst = self.d.cgroup_instance()
        self.addCleanup(self.dk.close)
        self.dk.start(self.d.proc.pid, "/accel.slice/%s/docker" % self.inst)
        r = self.dk.docker("import", "--change", 'CMD ["/bin/sleep", "1000"]',
                           self.tar, IMAGE)
        self.assertEqual(r.returncode, 0, r.stderr)

    def hostile(self, name, app, script):
        """A container naming app that runs script as its root."""
        return self.dk.docker("run", "--name", name, "--runtime", "accel",
                              "--network", "none", "-e", "ACCEL_APP=" + app,
                              "-e", ASAN, IMAGE, "/bin/sh", "-c", script)

    def mounts(self, app):
        """The app's CDI device's mounts: {containerPath: (hostPath,
        read-only)}."""
        path = "/etc/cdi/accel-%s-%s.json" % (self.inst, app)
        spec = json.loads(self.in_ns("cat", path).stdout)
        edits = spec["devices"][0]["containerEdits"]
        return {m["containerPath"]: (m["hostPath"], "ro" in m["options"])
                for m in edits["mounts"]}



@unittest.skipUnless(HAVE_DOCKER, WHY)
class DockerRulesTest(DockerCase):
    """Attacks by a container's own processes on what its device mounts."""

    def test_a_mounted_ledger_never_becomes_a_program(self):
        """The container's root makes its ledger set-user-ID root's (a
        member of the app's group wrote a program into it): the host's
        file is held by acceld, so it cannot be run, by its path or by a
        link, and is put back to root's 0660, as written, within a
        refresh. Before: the host's ledger was 06755 root's, and ran."""
        self.external("own")
        mounts = self.mounts("own")
        ledgers = [(c, h) for c, (h, ro) in mounts.items()
                   if "/ledgers/" in c]
        self.assertEqual(len(ledgers), 1, mounts)
        ctr, host = ledgers[0]
        self.assertFalse(mounts[ctr][1])  # the shim writes its charges
        before = os.lstat(host)
        self.assertEqual(stat.S_IMODE(before.st_mode), 0o660)
        # what a member of the app's group may do: write the ledger
        with open("/bin/true", "rb") as src, open(host, "r+b") as dst:
            dst.write(src.read())
        link = os.path.join(self.tmp, "ledger-link")
        os.link(host, link)
        r = self.hostile("own1", "own", "chown 0:0 %s && chmod 6755 %s" %
                         (ctr, ctr))
        self.assertEqual(r.returncode, 0, r.stderr)
        for path in (host, link):
            try:
                run = subprocess.run([path], capture_output=True)
                ran = "ran, exit %d" % run.returncode
            except OSError as e:
                ran = e.strerror
            # ETXTBSY: acceld holds it; EACCES: its mode already put back
            self.assertIn(ran, (os.strerror(26), os.strerror(13)), path)
        # held for writing by acceld (so ETXTBSY whatever the mode)
        fds = "/proc/%d/fd" % self.d.proc.pid
        held = [fd for fd in os.listdir(fds)
                if os.readlink(os.path.join(fds, fd)) == host]
        self.assertTrue(held, "acceld holds %s" % host)
        with open("/proc/%d/fdinfo/%s" % (self.d.proc.pid, held[0])) as f:
            flags = int(f.read().split("flags:")[1].split()[0], 8)
        self.assertEqual(flags & os.O_ACCMODE, os.O_WRONLY)

        def restored():
            st = os.lstat(host)
            return (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == \
                (before.st_uid, before.st_gid, 0o660)
        self.wait_for(restored, "the ledger put back as written", timeout=10)
        os.unlink(link)

    def test_sockets_are_mounted_read_only(self):
        """A broker's and the reclaim socket come read-only (connect needs
        no more): the container's root cannot chmod or chown the host's
        socket through the mount."""
        self.external("sk")
        socks = {c: h for c, (h, ro) in self.mounts("sk").items()
                 if c.endswith(".sock") or "/broker/" in c}
        self.assertTrue(socks, self.mounts("sk"))
        before = {h: os.lstat(h) for h in socks.values()}
        r = self.hostile("sk1", "sk", "; ".join(
            "chmod 0777 %s; chown 1234:1234 %s" % (c, c) for c in socks))
        self.assertIn("Read-only file system", r.stderr)
        for h, st in before.items():
            now = os.lstat(h)
            self.assertEqual((now.st_uid, now.st_gid, now.st_mode),
                             (st.st_uid, st.st_gid, st.st_mode), h)


@unittest.skipUnless(HAVE_DOCKER, WHY)
class DockerRejoinTest(DockerCase):
    """A container is the app's it was made for, not its name's."""

    def test_a_container_never_joins_a_later_app_of_its_name(self):
        """A container made for app 'rj' (restart: always, which Docker
        starts again when dockerd starts, after a stop too) is stopped
        with it at the uninstall; another install of an app named 'rj'
        (another member's, the name free again) must not get it: started
        again it is refused, and the new app's cgroup stays empty. A
        suspend and resume keeps the same app: its container joins again.
        Before: `docker start` put the old container into the new app."""
        self.external("rj")
        r = self.run_dk("rj1", "rj", "/bin/sleep", "1000",
                        flags=("--restart", "always"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_for(lambda: self.ctr_procs("rj"), "in the app's cgroup")
        # suspend and resume: the same app, the container joins again
        st, b = self.d.http("POST", "/api/apps/rj/suspend")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("rj") == "stopped", "stopped",
                      timeout=60)
        st, b = self.d.http("POST", "/api/apps/rj/resume")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("rj") == "running", "resumed")
        self.wait_for(lambda: self.dk.docker("start", "rj1").returncode == 0,
                      "the container started again for the same app")
        self.wait_for(lambda: self.ctr_procs("rj"), "in the app's cgroup")
        # the uninstall stops it; the name is installed anew
        st, b = self.d.http("DELETE", "/api/apps/rj")
        self.assertIn(st, (200, 202), b)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/rj")[0] == 404,
                      "the app gone", timeout=60)
        spec = "/etc/cdi/accel-%s-rj.json" % self.inst
        self.wait_for(lambda: self.in_ns("test", "-e", spec).returncode != 0,
                      "its spec removed")
        self.external("rj")
        r = self.dk.docker("start", "rj1")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("a container joins only the app it was made for",
                      r.stderr)
        self.assertEqual(self.ctr_procs("rj"), [])
        # a new container of the new app is welcome
        r = self.run_dk("rj2", "rj", "/bin/sleep", "1000")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_for(lambda: self.ctr_procs("rj"), "the new one joined")


def v2_mount():
    """Where the cgroup v2 hierarchy is mounted (pure or hybrid), or
    None."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ")
            if right.split()[0] == "cgroup2" and left.split()[3] == "/":
                return left.split()[4]
    return None


def device_prog_deny_all():
    """A loaded BPF_PROG_TYPE_CGROUP_DEVICE program that refuses every
    device (what a runtime attaches to a container's cgroup on cgroup v2
    is an allow list; refusing all makes the test plain): its fd, or None
    where BPF is not to be had."""
    libc = ctypes.CDLL(None, use_errno=True)
    insns = ctypes.create_string_buffer(
        struct.pack("<BBhi", 0xb7, 0, 0, 0) +  # r0 = 0
        struct.pack("<BBhi", 0x95, 0, 0, 0))   # exit
    lic = ctypes.create_string_buffer(b"GPL")
    attr = ctypes.create_string_buffer(struct.pack(
        "<IIQQIIQI", 15, 2, ctypes.addressof(insns), ctypes.addressof(lic),
        0, 0, 0, 0), 128)  # BPF_PROG_TYPE_CGROUP_DEVICE
    fd = libc.syscall(321, 5, attr, 128)  # bpf(BPF_PROG_LOAD)
    return fd if fd >= 0 else None


def device_prog_attach(prog, cgroup_dir):
    libc = ctypes.CDLL(None, use_errno=True)
    cfd = os.open(cgroup_dir, os.O_RDONLY)
    try:
        attr = ctypes.create_string_buffer(
            struct.pack("<IIII", cfd, prog, 6, 2), 128)  # BPF_CGROUP_DEVICE
        if libc.syscall(321, 8, attr, 128) != 0:  # BPF_PROG_ATTACH, MULTI
            raise OSError(ctypes.get_errno(), "BPF_PROG_ATTACH")
    finally:
        os.close(cfd)


PROBE = """import sys
sys.stdin.readline()
try:
    open("/dev/null").close()
    print("opened", flush=True)
except OSError as e:
    print(e.strerror, flush=True)
"""


@unittest.skipUnless(os.geteuid() == 0 and v2_mount() is not None and
                     os.path.exists(os.path.join(BUILD_DIR, "accelctl")),
                     "needs root, a cgroup v2 hierarchy and accelctl built")
class HookDeviceRulesTest(unittest.TestCase):
    """On cgroup v2 a runtime holds a container to its devices by a BPF
    program attached to the container's cgroup (runc, crun: Docker's and
    podman's default allow list, the app's GPU nodes). The CDI hook moves
    the container's first process into the app's cgroup, which has none:
    the container's root (Docker's default CAP_MKNOD) could then mknod and
    open any device of the host (its disks, another app's GPU). The hook
    must carry the container's device programs with it. Run without a
    container: the hook as the runtime runs it, a child in the container's
    cgroup, a deny-all program standing for the runtime's."""

    def setUp(self):
        self.prog = device_prog_deny_all()
        if self.prog is None:
            self.skipTest("no BPF here to load a device program with")
        self.addCleanup(os.close, self.prog)
        top = os.path.join(v2_mount(), "accel-red47-%d" % os.getpid())
        self.src = os.path.join(top, "ctr")
        self.app = os.path.join(top, "app")
        os.makedirs(self.src)
        os.makedirs(self.app)
        self.addCleanup(self.remove_tree, top)
        device_prog_attach(self.prog, self.src)

    def remove_tree(self, top):
        for dirpath, dirs, _ in os.walk(top, topdown=False):
            os.rmdir(dirpath)

    def test_the_container_keeps_its_device_rules_in_the_app(self):
        probe = subprocess.Popen(
            [sys.executable, "-c", PROBE], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        self.addCleanup(probe.wait)
        self.addCleanup(probe.kill)
        with open(os.path.join(self.src, "cgroup.procs"), "w") as f:
            f.write(str(probe.pid))
        state = json.dumps({"ociVersion": "1.0.2", "id": "red47probe",
                            "pid": probe.pid, "status": "creating",
                            "bundle": "/nonexistent"})
        # the hook as the runtime runs it: in the container's cgroup
        hook = subprocess.run(
            ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"',
             self.src, os.path.join(BUILD_DIR, "accelctl"), "cdi-hook",
             self.app], input=state, capture_output=True, text=True,
            timeout=60)
        self.assertEqual(hook.returncode, 0, hook.stderr)
        with open("/proc/%d/cgroup" % probe.pid) as f:
            where = [ln for ln in f.read().splitlines()
                     if ln.startswith("0::")][0][3:]
        app_rel = self.app[len(v2_mount()):]
        self.assertTrue(where == app_rel or where.startswith(app_rel + "/"),
                        where)  # in the app's cgroup
        out, _ = probe.communicate("go\n", timeout=60)
        self.assertEqual(out.strip(), os.strerror(1))  # EPERM: still held


if __name__ == "__main__":
    unittest.main()
