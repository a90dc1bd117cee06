# SPDX-License-Identifier: MIT
"""Apps as OCI containers under podman (SPEC 8.2.1, issue 36): the manifest's
container fields and a member's refusals; a container app held to its quota
through acceld's ledger on the stand-in driver, brought in by a stand-in
nvidia.com/gpu CDI spec; run as its owner's uid with every capability
dropped; stop, uninstall and the mode switch leave no container, cgroup or
mount; acceld killed with -9 adopts its container and removes orphans.
Processes in containers in the ledger and at the broker (item 3): a
container's and host processes sharing a ledger keep each other's live
charges, and a killed one's only is reclaimed; a time-sliced container app
takes turns through the broker's peer check, which refuses another uid and
another app's process by their host pids.

The image is built here (podman import of a rootfs of cuda_hold, sh and
sleep with their libraries; no registry is reachable), without libcuda: the
stand-in libcuda.so.1 comes in through the CDI spec, as NVIDIA's toolkit
brings the real one. The CDI spec lives in /etc/cdi of a private mount
namespace acceld runs in (an overlay on /etc), so nothing is left in the
machine's /etc/cdi. Every container and image made here is removed at the
end, passed or failed."""
import json
import os
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import (BUILD_DIR, Acceld, cgroup_dirs, device,  # noqa: E402
                           inventory, manifest, node, status_field,
                           wait_for)
from test_cli_pty import Pty  # noqa: E402
from test_discovery import arc, put, radeon, strix_halo  # noqa: E402

HOLD = os.path.join(BUILD_DIR, "tests", "integration", "cuda_hold")
SPIN = os.path.join(BUILD_DIR, "tests", "integration", "cuda_spin")
NET_PROBE = os.path.join(BUILD_DIR, "tests", "integration", "net_probe")
SHIM = os.path.join(BUILD_DIR, "src", "shim", "libaccelshim.so")
FAKE_CUDA = os.path.join(BUILD_DIR, "tests", "shim", "fakelib",
                         "libcuda.so.1")
FAKE_NVML = os.path.join(BUILD_DIR, "fake", "libnvidia-ml.so.1")
GPU = "GPU-1ab00000-0000-4000-8000-00000000c0a1"
OTHER = "GPU-1ab00000-0000-4000-8000-00000000c0a2"
INVENTORY = inventory(node("ctr", device(GPU), device(OTHER)))
TS_GPU = "GPU-1ab00000-0000-4000-8000-00000000c0a3"
TS_INVENTORY = inventory(node("ctr", device(TS_GPU, memory="2Gi",
                                            support="TimeSlice")))
IMAGE = "localhost/accel-it-%d:test" % os.getpid()
# the same files, its configured environment with an LD_PRELOAD of its own
IMAGE_PRE = "localhost/accel-it-%d:preload" % os.getpid()
# the names of the module's images, as memberImages allows them
MODULE_IMAGES = "localhost/accel-it-%d:*" % os.getpid()
IMAGE_LIB = "/lib/x86_64-linux-gnu/libc.so.6"
LIBCUDA_IN_CTR = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
HAVE = (os.geteuid() == 0 and shutil.which("podman") and
        shutil.which("runc") and shutil.which("unshare") and
        all(os.path.exists(p) for p in (HOLD, SPIN, SHIM, FAKE_CUDA,
                                           FAKE_NVML)))


def comm(pid):
    """A process's name, or "" once it has gone."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def podman(*args, timeout=120):
    return subprocess.run(["podman"] + list(args), capture_output=True,
                          text=True, timeout=timeout)


def rootfs_tar(tmp, extra_dirs=()):
    """A tarball (in tmp) of a rootfs of sh, sleep, cat, dd, rm,
    cuda_hold, cuda_spin, net_probe and their libraries (not libcuda: CDI
    brings it), with extra_dirs ((path, mode), ...); its path. test_docker
    imports it into its own dockerd."""
    root = os.path.join(tmp, "rootfs")
    os.makedirs(os.path.join(root, "app"))
    os.makedirs(os.path.join(root, "tmp"))
    os.chmod(os.path.join(root, "tmp"), 0o1777)
    files = {"/bin/sh": "/bin/sh", "/bin/sleep": "/bin/sleep",
             "/bin/cat": "/bin/cat", "/bin/dd": "/bin/dd", "/bin/rm": "/bin/rm",
             HOLD: "/app/cuda_hold", SPIN: "/app/cuda_spin"}
    if os.path.exists(NET_PROBE):
        files[NET_PROBE] = "/app/net_probe"
    for d, mode in extra_dirs:
        os.makedirs(root + d)
        os.chmod(root + d, mode)
    for src in list(files):
        out = subprocess.run(["ldd", src], capture_output=True,
                             text=True).stdout
        for word in out.split():
            if word.startswith("/") and "libcuda" not in word:
                files[word] = word
    for src, dst in files.items():
        path = root + dst
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copy(os.path.realpath(src), path)
    tar = os.path.join(tmp, "rootfs.tar")
    subprocess.run(["tar", "-C", root, "-cf", tar, "."], check=True)
    return tar


def build_image(tmp, extra_dirs=(), extra_changes=(), image=None):
    """IMAGE and IMAGE_PRE from rootfs_tar's rootfs; with image, that
    image alone, with extra_dirs ((path, mode), ...) in the rootfs and
    extra_changes (podman import --change instructions)."""
    tar = rootfs_tar(tmp, extra_dirs)
    if image is not None:
        changes = []
        for c in ('CMD ["/bin/sleep", "1000"]',) + tuple(extra_changes):
            changes += ["--change", c]
        r = podman("import", *changes, tar, image)
        if r.returncode != 0:
            raise RuntimeError("podman import: %s" % r.stderr)
        return
    r = podman("import", "--change", 'CMD ["/bin/sleep", "1000"]', tar, IMAGE)
    if r.returncode != 0:
        raise RuntimeError("podman import: %s" % r.stderr)
    r = podman("import", "--change", 'CMD ["/bin/sleep", "1000"]',
               "--change", "ENV LD_PRELOAD=" + IMAGE_LIB, tar, IMAGE_PRE)
    if r.returncode != 0:
        raise RuntimeError("podman import: %s" % r.stderr)


def ctr_procs(inst, name):
    """Host pids in app name's cgroup tree of acceld instance inst (the
    container's processes)."""
    pids = []
    for top in cgroup_dirs(inst):
        if "/unified/" not in top and not top.startswith(
                "/sys/fs/cgroup/accel"):
            continue
        for dirpath, _, files in os.walk(os.path.join(top, name)):
            if "cgroup.procs" in files:
                with open(os.path.join(dirpath, "cgroup.procs")) as f:
                    pids += [int(x) for x in f.read().split()]
    return pids


def clean_instance(inst):
    """Every container of acceld instance inst removed, and the cgroups a
    failed test left in any hierarchy (podman's runtime makes the app's
    path in every one, acceld's own or not)."""
    r = podman("ps", "--all", "--filter", "label=accel.instance=%s" % inst,
               "--format", "{{.Names}}")
    for name in r.stdout.split():
        podman("rm", "--force", "--time=0", name)
    for h in os.listdir("/sys/fs/cgroup"):
        top = os.path.join("/sys/fs/cgroup", h, "accel.slice", inst)
        for dirpath, _, _ in sorted(os.walk(top), reverse=True):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass


def image_field(case, ref, field):
    """A field of podman's image inspect of ref (the test case fails when
    there is no such image)."""
    r = podman("image", "inspect", "--format", "{{.%s}}" % field, ref)
    case.assertEqual(r.returncode, 0, r.stderr)
    return r.stdout.strip()


def own_archive(case, tmp, name):
    """An image of its own ID (the module's image and a label; podman rmi
    of its ID leaves the module's image) saved as an OCI archive in tmp and
    removed from the machine: its ID and the archive's reference. The
    image is removed at the end of case."""
    tag = "localhost/accel-it-%d:%s" % (os.getpid(), name)
    cf = os.path.join(tmp, "Containerfile")
    with open(cf, "w") as f:
        f.write("FROM %s\nLABEL accel.it=%s\n" % (IMAGE, tag))
    r = podman("build", "--pull=never", "-t", tag, "-f", cf, tmp)
    case.assertEqual(r.returncode, 0, r.stderr)
    iid = image_field(case, tag, "Id")
    case.addCleanup(podman, "rmi", "--ignore", "--force", iid)
    archive = os.path.join(tmp, name + ".tar")
    r = podman("save", "--format", "oci-archive", "-o", archive, tag)
    case.assertEqual(r.returncode, 0, r.stderr)
    case.assertEqual(podman("rmi", tag).returncode, 0)
    return iid, "oci-archive:" + archive


def cdi_spec(dev):
    """A stand-in of what `nvidia-ctk cdi generate` writes for dev: the
    driver's libcuda mounted in (here the tests' fake)."""
    return {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": dev, "containerEdits": {
                "mounts": [{"hostPath": FAKE_CUDA,
                            "containerPath": LIBCUDA_IN_CTR,
                            "options": ["ro", "nosuid", "nodev", "bind"]}]}}]}


def cdi_wrapper(tmp, spec):
    """acceld's command line prefix: a private mount namespace whose /etc
    is an overlay with /etc/cdi/nvidia.json = spec (None: no spec)."""
    upper = os.path.join(tmp, "etc-upper")
    os.makedirs(os.path.join(upper, "cdi"), exist_ok=True)
    if spec is not None:
        with open(os.path.join(upper, "cdi", "nvidia.json"), "w") as f:
            json.dump(spec, f)
    script = ('w=$(mktemp -d -p "%s") && mount -t overlay overlay -o '
              'lowerdir=/etc,upperdir="%s",workdir="$w" /etc && exec "$@"'
              % (tmp, upper))
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            script, "sh"]


def setUpModule():
    if not HAVE:
        return
    tmp = tempfile.mkdtemp(prefix="accel-ctr-img-")
    try:
        build_image(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tearDownModule():
    if HAVE:
        podman("rmi", "--force", IMAGE, IMAGE_PRE)


def ctr_manifest(name, command, gpu="1Gi", mode="nvidia", **run):
    m = manifest(name, gpu, mem="256Mi", cpu="500m", disk="1Mi", mode=mode)
    # network none: podman binds a container's network namespace under
    # /run/netns of the mount namespace acceld runs in, which the test's
    # own podman (outside it) could not join
    m["run"] = {"image": IMAGE, "pull": "never", "command": command,
                "network": "none",
                "env": {"ASAN_OPTIONS":
                        "verify_asan_link_order=0:detect_leaks=0"},
                "stopTimeoutSeconds": 2}
    m["run"].update(run)
    return m


class ManifestTest(accel_harness.SharedAcceld):
    """The container fields' refusals (no podman needed: nothing runs)."""
    inventory = INVENTORY
    acceld_args = ("--node-name", "ctr")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        st, b = cls.d.http("POST", "/api/users", {"name": "mia"})
        assert st == 200, b
        cls.member = b["data"]["token"]

    def refused(self, run, want, field, token=None):
        # pull always: nothing here asks podman whether the image is there
        m = ctr_manifest("bad", ["/bin/sleep", "1000"],
                         **dict({"pull": "always"}, **run))
        st, b = self.d.http("POST", "/api/apps", {"manifest": m},
                            token=token or self.member)
        self.assertEqual(st, want, b)
        self.assertIn(field, b["message"], b)
        self.assertEqual(self.d.http("GET", "/api/apps/bad")[0], 404)
        return b["message"]

    def test_image_reference_must_parse(self):
        for ref in ("UPPER/case", "a//b", "x:", "x@sha256:12", "-x", "a b",
                    "x" * 256, "oci-archive:/a/../b",
                    "docker-archive:/a b", "dir:/x"):
            self.refused({"image": ref}, 400, "run.image")

    def test_member_names_no_image_by_its_id(self):
        """Issue 44 item 2: a bare image ID (or a prefix of one, or
        sha256:<ID>) is an admin's: a member's is a 400 naming run.image."""
        iid = "5381e775d1e9febe1ad2fe98353c35824b47000caef890830b1c78fb8d446bd7"
        for ref in (iid, iid[:12], "sha256:" + iid):
            msg = self.refused({"image": ref, "pull": "missing"}, 400,
                               "run.image")
            self.assertIn("by its ID", msg)

    def test_fields_are_checked(self):
        self.refused({"pull": "sometimes"}, 400, "run.pull")
        self.refused({"ports": ["80"]}, 400, "run.ports[0]")
        self.refused({"ports": ["127.0.0.1:70000:80"]}, 400, "run.ports[0]")
        self.refused({"volumes": [{"source": "a", "target": "rel"}]}, 400,
                     "run.volumes[0].target")
        self.refused({"shmSize": "lots"}, 400, "run.shmSize")
        self.refused({"devices": ["/dev/nvidia1"]}, 400, "run.devices")
        m = manifest("cmd")
        m["run"] = {"command": ["/bin/true"], "ports": ["8080:80"]}
        st, b = self.d.http("POST", "/api/apps", {"manifest": m})
        self.assertEqual(st, 400, b)
        self.assertIn("run.ports is only for a container app", b["message"])

    def test_member_escapes_refused(self):
        msg = self.refused({"ports": ["0.0.0.0:8080:80"]}, 403,
                           "run.ports[0]")
        self.assertIn("loopback", msg)
        msg = self.refused({"ports": ["127.0.0.1:80:80"]}, 403,
                           "run.ports[0]")
        self.assertIn("1024", msg)
        for src in ("/etc", "../../x", "/"):
            self.refused({"volumes": [{"source": src, "target": "/m"}]}, 403,
                         "run.volumes[0].source")
        msg = self.refused({"image": "oci-archive:/tmp/x.tar"}, 403,
                           "run.image")
        self.assertIn("admin-only", msg)
        self.refused({"privileged": True}, 403, "run.privileged")
        self.refused({"network": "host"}, 403, "run.network")
        # issue 44 hole 3: podman's shared bridge is an admin's, and no
        # other network can be named (another app's, a container's)
        msg = self.refused({"network": "bridge"}, 403, "run.network")
        self.assertIn("network of its own", msg)
        for net in ("podman", "accel-x-other", "container:accel-x-other",
                    "ns:/proc/1/ns/net", "slirp4netns:allow_host_loopback"
                    "=true"):
            self.refused({"network": net}, 400, "run.network")
        self.refused({"pid": "host"}, 403, "run.pid")
        self.refused({"capAdd": ["CAP_SYS_ADMIN"]}, 403, "run.capAdd")


@unittest.skipUnless(HAVE, "needs root, podman, runc, unshare and the "
                           "stand-in driver built")
class ContainerCase(unittest.TestCase):
    """What the tests that run containers share: a temp dir, and at
    the end every container of the acceld and the acceld gone."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="accel-ctr-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.d = None
        self.inst = None
        self.addCleanup(self.clean)

    def clean(self):
        """Every container of this acceld, then acceld (passed or failed).
        The apps still running are stopped through acceld first, its own
        stop tearing their networks down (a member's container on
        slirp4netns that `podman rm --force` or acceld's close removed
        left its namespace in /run/netns), then whatever is left."""
        if self.d is None:
            return
        self.stop_all_apps()
        self.d.close()
        clean_instance(self.inst)

    def stop_all_apps(self, timeout=30):
        """Suspend every app still running, as its owner would, and wait
        (a bounded while) until none is still on its way down."""
        try:
            st, b = self.d.http("GET", "/api/apps")
            if st != 200:
                return
            for a in b["data"]:
                if a["state"] in ("running", "resuming"):
                    self.d.http("POST", "/api/apps/%s/suspend" % a["name"])
            end = time.time() + timeout
            while time.time() < end:
                st, b = self.d.http("GET", "/api/apps")
                if st != 200 or not any(
                        a["state"] in ("running", "resuming", "stopping",
                                       "releasing") for a in b["data"]):
                    return
                time.sleep(0.2)
        except OSError:
            pass  # acceld is gone: its close and clean_instance follow

    def containers(self, inst=None):
        r = podman("ps", "--all", "--filter", "label=accel.instance=%s" %
                   (inst or self.inst), "--format", "{{.Names}}")
        return r.stdout.split()

    def wait_for(self, pred, what, timeout=30):
        return wait_for(self, pred, what, timeout, step=0.1, log=self.d)

    def install(self, m, token=None, want=200):
        st, b = self.d.http("POST", "/api/apps", {"manifest": m}, token=token)
        self.assertEqual(st, want, b)
        return b

    def state(self, name):
        return self.d.http("GET", "/api/apps/" + name)[1]["data"]["state"]

    def ctr_procs(self, name):
        """Host pids in the app's cgroup tree (the container's processes)."""
        return ctr_procs(self.inst, name)

    def assert_nothing_left(self, name):
        """Nothing of app name's container: a stopped app is released once
        its container's processes are gone, and podman run removes the
        container (--rm) and acceld its cgroups just after (issue 47 item
        8), so both are waited for a bounded while."""
        def left():
            return [d for d in cgroup_dirs(self.inst)
                    if os.path.isdir(os.path.join(d, name))]
        end = time.time() + 30
        while time.time() < end and (self.containers() or left()):
            time.sleep(0.1)
        self.assertEqual(self.containers(), [])
        self.assertEqual(left(), [], "cgroups left")
        for top in ("/sys/fs/cgroup",):
            for h in os.listdir(top):
                p = os.path.join(top, h, "accel.slice", self.inst, name)
                self.assertFalse(os.path.exists(p), p)
        with open("/proc/self/mountinfo") as f:
            self.assertNotIn(IMAGE, f.read())

    def member(self, name, allow=True):
        """A member and its uid; with allow, an admin lets members run the
        module's local images (memberImages), which nobody pulled for
        them."""
        st, b = self.d.http("POST", "/api/users", {"name": name})
        self.assertEqual(st, 200, b)
        if allow:
            st, s = self.d.http("PUT", "/api/settings",
                                {"memberImages": [MODULE_IMAGES]})
            self.assertEqual(st, 200, s)
        st, users = self.d.http("GET", "/api/users")
        uid = [u["uid"] for u in users["data"] if u["name"] == name][0]
        return b["data"]["token"], uid

    def in_ns(self, *cmd):
        """cmd in acceld's mount namespace (its /etc/cdi)."""
        return subprocess.run(["nsenter", "--mount=/proc/%d/ns/mnt" %
                               self.d.proc.pid] + list(cmd),
                              capture_output=True, text=True, timeout=120)

    def run_own(self, short, app, *cmd, flags=()):
        """A person's own container (podman run -d) with the app's CDI
        device (and flags, podman's); its name."""
        name = "accel-%s-%s" % (self.inst, short)
        self.addCleanup(podman, "rm", "--force", "--time=0", name)
        r = self.in_ns("podman", "run", "-d", "--name=" + name,
                       "--runtime=runc", "--network=none",
                       # podman's own cgroups under the instance's, which
                       # the test's clean-up removes
                       "--cgroup-parent=/accel.slice/%s/%s" % (self.inst,
                                                               short),
                       "--label=accel.instance=" + self.inst,
                       "--ulimit=nofile=1024:1024",
                       "--ulimit=nproc=1024:1024",
                       "--env=ASAN_OPTIONS=verify_asan_link_order=0:"
                       "detect_leaks=0",  # the sanitizer build's shim
                       "--device=accel.dev/app=" + app, *flags, IMAGE,
                       *cmd)
        self.assertEqual(r.returncode, 0, r.stderr)
        return name

    def running(self, name):
        return podman("inspect", "--format", "{{.State.Running}}",
                      name).stdout.strip() == "true"


@unittest.skipUnless(HAVE, "needs root, podman, runc, unshare and the "
                           "stand-in driver built")
class ContainerRunTest(ContainerCase):
    """Container apps run by acceld under podman."""
    inventory = INVENTORY
    gpu = GPU  # the one the stand-in CDI spec lists

    def setUp(self):
        super().setUp()
        self.start(cdi_spec(self.gpu))

    def start(self, spec):
        self.d = Acceld(inventory=self.inventory,
                        extra_args=["--node-name", "ctr"],
                        env={"ACCEL_CDI_DIR": "/etc/cdi"},
                        wrapper=cdi_wrapper(tempfile.mkdtemp(dir=self.tmp),
                                            spec)).start()
        self.inst = self.d.cgroup_instance()

    def test_quota_held_in_a_container_as_the_owner(self):
        tok, uid = self.member("bob")
        b = self.install(ctr_manifest(
            "holder", ["/app/cuda_hold", "512", "256", "512"]), token=tok)
        self.assertEqual(b["data"]["state"], "running", b)
        self.wait_for(lambda: "ready" in self.d.app_log("holder"),
                      "the container's output in the app's log")
        out = self.d.app_log("holder")
        self.assertIn("alloc 512 MiB: 0", out)
        self.assertIn("alloc 256 MiB: 0", out)
        self.assertIn("alloc 512 MiB: 2", out)  # over the 1 GiB quota
        self.assertIn("total 1024 MiB free 256 MiB", out)
        self.assertEqual(self.containers(), ["accel-%s-holder" % self.inst])
        app = self.d.http("GET", "/api/apps/holder", token=tok)[1]["data"]
        self.assertEqual((app["runner"], app["container"]),
                         ("container", {"image": IMAGE, "pullPolicy": "never",
                                        "name": "accel-%s-holder" % self.inst,
                                        "state": "running",
                                        "imageId": self.image_field(IMAGE,
                                                                    "Id"),
                                        "digest": self.image_field(IMAGE,
                                                                   "Digest")}))
        # the log through the API (accelctl app logs), in two chunks
        st, b = self.d.http("GET", "/api/apps/holder/logs", token=tok)
        self.assertEqual(st, 200, b)
        self.assertIn("alloc 256 MiB: 0", b["data"]["text"])
        st, b2 = self.d.http("GET", "/api/apps/holder/logs?offset=%d" %
                             b["data"]["offset"], token=tok)
        self.assertEqual((st, b2["data"]["text"]), (200, ""), b2)
        self.assertEqual(self.d.http("GET", "/api/apps/holder/logs?offset=-1",
                                     token=tok)[0], 400)
        r = self.d.ctl("app", "logs", "holder", token=tok)
        self.assertEqual((r.returncode, r.stdout), (0, out), r.stderr)
        r = self.d.ctl("app", "show", "holder", token=tok)
        self.assertIn("Image:       %s (pull never)" % IMAGE, r.stdout)
        self.assertIn("Container:   accel-%s-holder (running)" % self.inst,
                      r.stdout)
        # --follow prints what the app writes next: here nothing more, so
        # it is still waiting when stopped
        p = subprocess.Popen(self.d.ctl_args("app", "logs", "-f", "holder",
                                             token=tok),
                             stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(p.stdout.readline(), out.splitlines(True)[0])
            time.sleep(0.6)
            self.assertIsNone(p.poll())
        finally:
            p.kill()
            p.wait()
            p.stdout.close()
        # the usage of a process in a pid namespace of its own (item 3):
        # its slot says pid 1 of the container, not the host's pid 1
        self.wait_for(lambda: self.d.http("GET", "/api/apps/holder")[1]
                      ["data"]["usage"]["memory"] == 768 << 20,
                      "the container's usage in /api/apps")
        pids = self.ctr_procs("holder")
        self.assertTrue(pids, "no process in the app's cgroup tree")
        for pid in pids:
            self.assertEqual(status_field(pid, "Uid"), [str(uid)] * 4)
            self.assertEqual(status_field(pid, "NoNewPrivs"), ["1"])
            self.assertEqual(status_field(pid, "CapEff"),
                             ["0000000000000000"])
        st, b = self.d.http("POST", "/api/apps/holder/suspend", token=tok)
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("holder") == "stopped", "stopped")
        app = self.d.http("GET", "/api/apps/holder")[1]["data"]
        self.assertEqual((app["allocations"], app["container"]["state"]),
                         ([], "none"))
        self.assert_nothing_left("holder")
        st, b = self.d.http("POST", "/api/apps/holder/resume", token=tok)
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.ctr_procs("holder"), "running again")
        st, b = self.d.http("DELETE", "/api/apps/holder", token=tok)
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/holder")[0] ==
                      404, "uninstalled")
        self.assert_nothing_left("holder")

    def test_raised_quota_reaches_the_running_container(self):
        """A live quota raise (SPEC 4.4) past the quota a container app
        started with reaches its running processes: acceld rewrites the
        container's copy of the shim config in the folder the container
        mounts (a file's own bind mount would keep the old file), and the
        shim reads it at the ledger's next epoch. cuda_hold takes 512 MiB
        of its 1 GiB, waits, and then 1 GiB more: refused at 1 GiB,
        granted once the quota is 2 GiB, in the same process."""
        self.install(ctr_manifest("grow", ["/app/cuda_hold", "512",
                                           "@/tmp/go1", "1024",
                                           "@/tmp/go2", "1024"]))
        self.wait_for(lambda: "waiting" in self.d.app_log("grow"),
                      "the first allocation")
        self.assertIn("alloc 512 MiB: 0", self.d.app_log("grow"))
        name = "accel-%s-grow" % self.inst

        def go(path):
            r = self.in_ns("podman", "exec", name, "/bin/sh", "-c",
                           ": > " + path)
            self.assertEqual(r.returncode, 0, r.stderr)

        go("/tmp/go1")  # at 1 GiB: refused
        self.wait_for(lambda: self.d.app_log("grow").count("waiting") == 2,
                      "the allocation at the first quota")
        self.assertIn("alloc 1024 MiB: 2", self.d.app_log("grow"))
        st, b = self.d.http("PUT", "/api/apps/grow/compute-resources/"
                            "bindings/%s" % self.gpu, {"memory": "2Gi"})
        self.assertEqual(st, 200, b)
        copy = os.path.join(self.d.data_dir, "run", "apps", "grow",
                            "container", "shim.conf")
        with open(copy) as f:
            self.assertIn("device 0 %d " % (2 << 30), f.read())
        go("/tmp/go2")  # at 2 GiB: granted
        self.wait_for(lambda: "ready" in self.d.app_log("grow"),
                      "the allocation after the raise")
        out = self.d.app_log("grow")
        self.assertEqual(out.count("alloc 1024 MiB: 0"), 1, out)
        self.assertIn("total 2048 MiB free 512 MiB", out)

    def test_started_the_readme_way(self):
        """Issue 47: acceld started as scripts/run.sh starts it, from its
        directory with a relative --data-dir: a container app runs (podman
        and conmon resolve a relative path against /, and every container
        app failed with status 125), and the paths acceld wrote for it are
        absolute."""
        self.d.close()
        clean_instance(self.inst)
        self.d = Acceld(inventory=self.inventory, relative=True,
                        extra_args=["--node-name", "ctr"],
                        env={"ACCEL_CDI_DIR": "/etc/cdi"},
                        wrapper=cdi_wrapper(tempfile.mkdtemp(dir=self.tmp),
                                            cdi_spec(self.gpu))).start()
        self.inst = self.d.cgroup_instance()
        b = self.install(ctr_manifest(
            "quick", ["/app/cuda_hold", "256"]))
        self.assertEqual(b["data"]["state"], "running", b)
        self.wait_for(lambda: "ready" in self.d.app_log("quick"),
                      "the container's output in the app's log")
        self.assertIn("alloc 256 MiB: 0", self.d.app_log("quick"))
        self.assertEqual(self.state("quick"), "running")
        st, b = self.d.http("DELETE", "/api/apps/quick")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/quick")[0] ==
                      404, "uninstalled")

    def test_failed_start_says_podmans_error(self):
        """Issue 47: a container that podman itself cannot start (here a
        volume whose target is a file of the image: the runtime refuses the
        mount) ends `failed` with podman's own error line in its reason,
        not only "exited with status 126" with the cause in the app's
        log."""
        self.install(ctr_manifest("badmount", ["/bin/sleep", "100"],
                                  volumes=[{"source": "data",
                                            "target": "/bin/sleep"}]))
        self.wait_for(lambda: self.state("badmount") == "failed", "failed")
        app = self.d.http("GET", "/api/apps/badmount")[1]["data"]
        reason = app.get("reason") or ""
        self.assertRegex(reason, r"^exited with status 12[5-7]: .*Error", app)
        self.assertIn("/bin/sleep", reason)
        st, b = self.d.http("DELETE", "/api/apps/badmount")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/badmount")[0] ==
                      404, "uninstalled")

    def test_pid1_ignoring_sigterm_is_killed_then_released(self):
        script = "trap '' TERM; echo ready; while :; do sleep 1; done"
        self.install(ctr_manifest("deaf", ["/bin/sh", "-c", script],
                                  stopTimeoutSeconds=1))
        self.wait_for(lambda: "ready" in self.d.app_log("deaf"), "ready")
        t0 = time.time()
        st, b = self.d.http("POST", "/api/apps/deaf/suspend")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("deaf") == "stopped", "stopped")
        self.assertGreaterEqual(time.time() - t0, 1.0)
        self.assertEqual(self.ctr_procs("deaf"), [])
        self.assert_nothing_left("deaf")

    def leader_of(self, name):
        """The pid of the podman run acceld leads app name's container
        with."""
        want = b"\0run\0--name=accel-%s-%s\0" % (self.inst.encode(),
                                                   name.encode())
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if cmd.startswith(b"podman\0") and want in cmd:
                return int(p)
        return None

    def test_stop_releases_once_the_container_is_gone(self):
        """A stop's release follows the container's processes, not the
        end of the podman run acceld leads it with (issue 47 item 8):
        that podman, held still with SIGSTOP, is still there when the
        app is stopped, and once let go it is reaped and its container
        removed. Before, the app stayed stopping while podman ran (up to
        its stop timeout, a minute here, then releasing)."""
        self.install(ctr_manifest("lv", ["/bin/sleep", "1000"],
                                  stopTimeoutSeconds=60))
        self.wait_for(lambda: len(self.ctr_procs("lv")) == 2, "running")
        leader = self.leader_of("lv")
        self.assertIsNotNone(leader)
        os.kill(leader, signal.SIGSTOP)
        self.addCleanup(lambda: os.path.exists("/proc/%d" % leader) and
                        os.kill(leader, signal.SIGCONT))
        st, b = self.d.http("POST", "/api/apps/lv/suspend")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("lv") == "stopped", "stopped", 20)
        with open("/proc/%d/stat" % leader) as f:
            self.assertEqual(f.read().rsplit(")", 1)[1].split()[0], "T")
        self.assertEqual(self.ctr_procs("lv"), [])
        os.kill(leader, signal.SIGCONT)
        # reaped by acceld (no zombie left), its container removed
        self.wait_for(lambda: not os.path.exists("/proc/%d" % leader),
                      "podman run reaped")
        self.wait_for(lambda: self.containers() == [], "container removed")
        self.assert_nothing_left("lv")
        # the app starts again at once, on a fresh container
        st, b = self.d.http("POST", "/api/apps/lv/resume")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: len(self.ctr_procs("lv")) == 2, "running")

    def test_install_pins_a_known_image_without_podman(self):
        """An install of an image acceld has looked at, podman's image
        store unchanged since, asks no podman (each podman costs its
        start on the way to running, issue 47 item 8); a store that
        changed (the reference moved to another image) is asked again."""
        self.d.close()
        self.d = Acceld(inventory=self.inventory,
                        extra_args=["--node-name", "ctr", "--log-level",
                                    "debug"],
                        env={"ACCEL_CDI_DIR": "/etc/cdi"},
                        wrapper=cdi_wrapper(tempfile.mkdtemp(dir=self.tmp),
                                            cdi_spec(self.gpu))).start()
        self.inst = self.d.cgroup_instance()
        ref = "localhost/accel-it-%d:cache" % os.getpid()
        self.addCleanup(podman, "rmi", "--ignore", ref)
        self.assertEqual(podman("tag", IMAGE, ref).returncode, 0)
        asked = "image %s: asked of podman" % ref
        kept = "image %s: pinned as before" % ref

        def log():
            with open(self.d.log_path, errors="replace") as f:
                return f.read()
        m = ctr_manifest("c1", ["/bin/sleep", "1000"], image=ref)
        b = self.install(m)
        self.assertEqual(b["data"]["container"]["imageId"],
                         image_field(self, IMAGE, "Id"))
        self.assertEqual(log().count(asked), 1, log())
        m = ctr_manifest("c2", ["/bin/sleep", "1000"], image=ref)
        b = self.install(m)
        self.assertEqual(b["data"]["container"]["imageId"],
                         image_field(self, IMAGE, "Id"))
        self.assertEqual(log().count(asked), 1, log())
        self.assertEqual(log().count(kept), 1, log())
        # the reference moved: podman's store changed, asked again
        cf = os.path.join(self.tmp, "Containerfile")
        with open(cf, "w") as f:
            f.write("FROM %s\nLABEL accel.it=%s\n" % (IMAGE, ref))
        r = podman("build", "--pull=never", "-t", ref, "-f", cf, self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        moved = image_field(self, ref, "Id")
        self.addCleanup(podman, "rmi", "--ignore", "--force", moved)
        self.assertNotEqual(moved, image_field(self, IMAGE, "Id"))
        m = ctr_manifest("c3", ["/bin/sleep", "1000"], image=ref)
        b = self.install(m)
        self.assertEqual(b["data"]["container"]["imageId"], moved)
        self.assertEqual(log().count(asked), 2, log())
        self.wait_for(lambda: all(self.state(n) == "running"
                                  for n in ("c1", "c2", "c3")), "running")

    def test_mode_switch_stops_the_container(self):
        self.install(ctr_manifest("sw", ["/bin/sleep", "1000"]))
        self.wait_for(lambda: self.ctr_procs("sw"), "running")
        dev = self.d.device(GPU)
        st, b = self.d.http(
            "PUT", "/api/compute-resources/nodes/ctr/devices/%s/support-type"
            % GPU, {"supportType": "Exclusive"})
        self.assertIn(st, (200, 202), b)
        self.wait_for(lambda: self.d.device(GPU)["supportType"] ==
                      "Exclusive", "the switch")
        self.wait_for(lambda: self.state("sw") in ("stopped",),
                      "the app stopped by the switch")
        self.assertNotEqual(dev["supportType"], "Exclusive")
        self.assert_nothing_left("sw")

    def test_kill9_adopts_and_removes_orphans(self):
        self.install(ctr_manifest("keep", ["/bin/sleep", "1000"]))
        # podman's init and the app's sleep; while runc starts the
        # container its stages come and go in the cgroup (two pids, then
        # one), so wait for the sleep itself
        def settled():
            pids = self.ctr_procs("keep")
            return len(pids) == 2 and "sleep" in [comm(p) for p in pids]
        self.wait_for(settled, "running")
        before = self.ctr_procs("keep")
        self.d.kill()
        # a container of this instance that no app runs: an orphan
        r = podman("run", "-d", "--runtime=runc", "--network=none",
                   "--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024",
                   "--name=accel-%s-ghost" % self.inst,
                   "--cgroup-parent=/accel.slice/%s/ghost" % self.inst,
                   "--label=accel.instance=%s" % self.inst,
                   "--label=accel.app=ghost", IMAGE, "/bin/sleep", "1000")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.d.start()
        self.wait_for(lambda: self.containers() ==
                      ["accel-%s-keep" % self.inst], "the orphan removed")
        self.assertEqual(self.state("keep"), "running")
        self.assertEqual(self.ctr_procs("keep"), before)
        st, b = self.d.http("POST", "/api/apps/keep/suspend")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("keep") == "stopped", "stopped")
        self.assert_nothing_left("keep")

    def test_own_container_release_waits_for_it(self):
        """SPEC 2.9 for a person's own container: an uninstall stops
        what the app's cgroup holds through podman (podman stop: SIGTERM)
        and keeps the binding (releasing) until it is gone; what ignores
        the SIGTERM is killed after the app's stop timeout (an external
        app's: 10 s)."""
        m = manifest("extw", "1Gi", mem="64Mi", cpu="100m", disk="1Mi")
        self.install(m)
        spec_path = "/etc/cdi/accel-%s-extw.json" % self.inst
        self.wait_for(lambda: '"extw"' in self.in_ns("cat", spec_path).stdout,
                      "the CDI spec with the app")
        polite = self.run_own("polite", "extw", "/bin/sh", "-c",
                              'trap "echo bye; exit 0" TERM; echo up; '
                              'while :; do sleep 0.1; done')
        deaf = self.run_own("deaf", "extw", "/bin/sh", "-c",
                            'trap "" TERM; echo up; sleep 1000')
        for name in (polite, deaf):
            self.wait_for(lambda: "up" in podman("logs", name).stdout,
                          "its output")
        self.wait_for(lambda: len(self.ctr_procs("extw")) >= 3,
                      "both in the app's cgroup")
        deaf_pid = int(podman("inspect", "--format", "{{.State.Pid}}",
                              deaf).stdout)
        st, b = self.d.http("DELETE", "/api/apps/extw")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["state"], "releasing")
        # the polite one stopped on the SIGTERM, not killed
        self.wait_for(lambda: not self.running(polite) and
                      "bye" in podman("logs", polite).stdout,
                      "the polite one, its last words")
        self.assertEqual(podman("inspect", "--format",
                                "{{.State.ExitCode}}", polite).stdout.strip(),
                         "0")
        # the deaf one holds the binding until the stop timeout's kill
        # (podman says "stopping", not running, meanwhile: its process)
        self.assertIn(deaf_pid, self.ctr_procs("extw"))
        st, b = self.d.http("GET", "/api/apps/extw")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["state"], "releasing")
        self.wait_for(lambda: not self.running(deaf), "the deaf one killed")
        self.wait_for(lambda: self.d.http("GET", "/api/apps/extw")[0] == 404,
                      "the app uninstalled once its cgroup was empty")

    def test_restart_policy_sees_a_stop(self):
        """Issue 47 item 4: a person's container with a restart policy
        (`restart: unless-stopped`, nearly every home-lab compose file) is
        stopped through podman when its app is suspended, so podman does
        not start it again; a container started for the stopped app, or
        that one started again, is refused with words that say the app is
        stopped, not that its name is unknown."""
        self.install(manifest("extr", "1Gi", mem="64Mi", cpu="100m",
                              disk="1Mi"))
        spec_path = "/etc/cdi/accel-%s-extr.json" % self.inst
        self.wait_for(lambda: '"extr"' in self.in_ns("cat", spec_path).stdout,
                      "the CDI spec with the app")
        name = self.run_own("rs", "extr", "/bin/sh", "-c",
                            'trap "exit 0" TERM; echo up; '
                            'while :; do sleep 0.1; done',
                            flags=("--restart=unless-stopped",))
        self.wait_for(lambda: len(self.ctr_procs("extr")) >= 2,
                      "in the app's cgroup")
        st, b = self.d.http("POST", "/api/apps/extr/suspend")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("extr") == "stopped",
                      "the app stopped once its container was")
        time.sleep(2)  # a restart policy would have started it again
        self.assertEqual(podman("inspect", "--format", "{{.State.Status}}",
                                name).stdout.strip(), "exited")
        self.assertEqual(podman("inspect", "--format", "{{.RestartCount}}",
                                name).stdout.strip(), "0")
        self.wait_for(lambda: "--stopped" in
                      self.in_ns("cat", spec_path).stdout,
                      "the stopped app's device")
        r = self.in_ns("podman", "start", name)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("app 'extr' is stopped", r.stderr)
        r = self.in_ns("podman", "run", "--rm", "--runtime=runc",
                       "--network=none", "--ulimit=nofile=1024:1024",
                       "--ulimit=nproc=1024:1024",
                       "--device=accel.dev/app=extr", IMAGE, "/bin/true")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("app 'extr' is stopped", r.stderr)
        self.assertIn("accelctl app resume extr", r.stderr)

    @unittest.skipUnless(shutil.which("podman-compose"),
                         "needs Debian's podman-compose (1.0.3)")
    def test_podman_compose_1_0_3(self):
        """Issue 47 item 3: the form docs/containers.md gives Debian's
        podman-compose 1.0.3, `devices: [accel.dev/app=NAME]` (it drops
        deploy.resources.reservations.devices without a word), with the
        ulimits a machine whose root lacks CAP_SYS_RESOURCE needs: the
        quota holds and the container is in the app's cgroup."""
        self.install(manifest("pc", "1Gi", mem="64Mi", cpu="100m",
                              disk="1Mi"))
        spec_path = "/etc/cdi/accel-%s-pc.json" % self.inst
        self.wait_for(lambda: '"pc"' in self.in_ns("cat", spec_path).stdout,
                      "the CDI spec with the app")
        project = "accelpc%d" % os.getpid()
        path = os.path.join(self.tmp, "compose.yml")
        with open(path, "w") as f:
            json.dump({"networks": {"podman": {"external": True}},
                       "services": {"hold": {
                "networks": ["podman"],
                "image": IMAGE, "devices": ["accel.dev/app=pc"],
                "ulimits": {"nofile": 1024, "nproc": 1024},
                "labels": {"accel.instance": self.inst},
                "environment": ["ASAN_OPTIONS=verify_asan_link_order=0:"
                                "detect_leaks=0"],
                "command": ["/app/cuda_hold", "512", "256", "512"]}}}, f)

        # podman-compose 1.0.3 puts every container on a bridge network
        # (network_mode: none fails: it adds --net <network> all the
        # same): podman's own, which podman outside acceld's namespace
        # knows too (a project network's definition would be in that
        # namespace's /etc alone), in a network namespace of the test's
        # own that holds the bridge and netavark's firewall chains and
        # goes with them
        net = subprocess.Popen(["unshare", "--net", "sleep", "600"])
        self.addCleanup(net.wait)
        self.addCleanup(net.kill)
        self.wait_for(lambda: os.readlink("/proc/%d/ns/net" % net.pid) !=
                      os.readlink("/proc/self/ns/net"), "its namespace")

        def compose(*args):
            return subprocess.run(
                ["nsenter", "--mount=/proc/%d/ns/mnt" % self.d.proc.pid,
                 "--net=/proc/%d/ns/net" % net.pid, "podman-compose", "-p",
                 project, "-f", path] + list(args),
                capture_output=True, text=True, timeout=180)
        self.addCleanup(compose, "down")
        r = compose("up", "-d")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        name = project + "_hold_1"
        logs = lambda: self.in_ns("podman", "logs", name).stdout  # noqa
        self.wait_for(lambda: "ready" in logs(), "the container's output")
        self.assertIn("alloc 512 MiB: 2", logs())
        self.assertIn("total 1024 MiB free 256 MiB", logs())
        pid = int(self.in_ns("podman", "inspect", "--format",
                             "{{.State.Pid}}", name).stdout)
        self.assertIn(pid, self.ctr_procs("pc"))
        r = compose("down")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.wait_for(lambda: self.ctr_procs("pc") == [], "it gone")
        self.assertNotIn(name, self.in_ns("podman", "ps", "-a").stdout)

    def host_hold(self, uid, gid, cfg, *args):
        """cuda_hold on the host as uid:gid with no capability, the app's
        shim and config; a function that reads its output so far."""
        out = open(os.path.join(self.tmp, "host-%d.out" % len(args)), "w+")
        self.addCleanup(out.close)
        p = subprocess.Popen(
            ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid,
             "--clear-groups", "--inh-caps=-all", HOLD] + list(args),
            stdout=out, stderr=subprocess.STDOUT,
            env=dict(os.environ, LD_PRELOAD=SHIM, ACCEL_CONFIG=cfg,
                     ASAN_OPTIONS="verify_asan_link_order=0:detect_leaks=0"))
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)

        def read():
            out.seek(0)
            return out.read()
        return p, read

    def test_container_and_host_process_keep_each_others_charges(self):
        """Item 3: a person's own container (root in it, podman's default
        capabilities) and host processes of the app's owner (no
        capability) share the app's ledger (1 GiB). The host process's
        shim cannot see the container process's pid namespace (another
        uid's ns/pid needs ptrace access): it used to take the container's
        slot for one of a namespace gone, and the live charge with it, when
        it attached. The container's process cannot see the host's: it
        kept a dead host process's charge for ever. Now each keeps the
        other's live charge, and once one is killed only its charge is
        reclaimed, by acceld's usage and by the other's next refusal."""
        tok, uid = self.member("cora")
        self.install(manifest("mix", "1Gi", mem="64Mi", cpu="100m",
                              disk="1Mi"), token=tok)
        spec_path = "/etc/cdi/accel-%s-mix.json" % self.inst
        self.wait_for(lambda: '"mix"' in self.in_ns("cat", spec_path).stdout,
                      "the CDI spec with the app")
        usage = (lambda: self.d.http("GET", "/api/apps/mix")[1]["data"]
                 ["usage"]["memory"] >> 20)
        name = self.run_own("mixc", "mix", "/app/cuda_hold", "512",
                            "@/tmp/go", "512", "@/tmp/go2", "384")
        logs = lambda: podman("logs", name).stdout  # noqa: E731
        self.wait_for(lambda: "waiting" in logs(),
                      "the container's first allocation")
        self.assertIn("alloc 512 MiB: 0", logs())
        cpid = int(podman("inspect", "--format", "{{.State.Pid}}",
                          name).stdout)
        self.assertEqual(status_field(cpid, "NSpid")[1:], ["1"])
        self.wait_for(lambda: usage() == 512, "the container's usage")
        cfg = os.path.join(self.d.data_dir, "run", "apps", "mix",
                           "shim.conf")
        gid = os.stat(os.path.dirname(cfg)).st_gid
        os.chmod(self.tmp, 0o711)  # the host processes wait on files here
        f = {x: os.path.join(self.tmp, x) for x in ("a", "b")}
        host, out = self.host_hold(uid, gid, cfg, "256", "@" + f["a"])
        self.wait_for(lambda: "waiting" in out(), "the host process")
        self.assertIn("alloc 256 MiB: 0", out())
        # its attach (which reclaims the dead) kept the container's charge
        self.wait_for(lambda: usage() == 768, "both charges")
        open(f["a"], "w").close()
        self.wait_for(lambda: "ready" in out(), "the host's view")
        self.assertIn("info total 1024 MiB free 256 MiB", out())
        # the container's refusal reclaims what it can judge: the host's
        # live process is not in its /proc, and its charge stays
        r = self.in_ns("podman", "exec", name, "/bin/sh", "-c", ": >/tmp/go")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_for(lambda: logs().count("waiting") == 2,
                      "the container's second allocation")
        self.assertIn("alloc 512 MiB: 2", logs())
        self.assertEqual(usage(), 768)
        # the host's process killed: its charge only leaves acceld's usage,
        # and the container's next refusal takes it back (acceld marked it)
        host.kill()
        host.wait()
        self.wait_for(lambda: usage() == 512, "the host's charge gone")
        r = self.in_ns("podman", "exec", name, "/bin/sh", "-c",
                       ": >/tmp/go2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_for(lambda: "ready" in logs(), "the container's third")
        self.assertIn("alloc 384 MiB: 0", logs())
        self.wait_for(lambda: usage() == 896, "the container's charges")
        # and the other way: a host process beside it, then the
        # container's process killed: its charge only is reclaimed
        host, out = self.host_hold(uid, gid, cfg, "64", "@" + f["b"], "512")
        self.wait_for(lambda: "waiting" in out(), "a second host process")
        self.assertIn("alloc 64 MiB: 0", out())
        self.wait_for(lambda: usage() == 960, "both charges")
        os.kill(cpid, 9)
        self.wait_for(lambda: not self.running(name), "the container ended")
        self.wait_for(lambda: usage() == 64, "the container's charge gone")
        open(f["b"], "w").close()
        self.wait_for(lambda: "ready" in out(), "the host's 512 MiB")
        self.assertIn("alloc 512 MiB: 0", out())
        self.wait_for(lambda: usage() == 576, "the host's charges")

    def test_mode_switch_stops_own_containers_first(self):
        """Item 6 and SPEC 2.7 for a person's own container: a mode switch
        of the app's GPU stops what the app's cgroup holds, SIGTERM first
        (the container ends by itself, exit 0), and switches, releasing
        the binding, only once the cgroup is empty."""
        m = manifest("extsw", "1Gi", mem="64Mi", cpu="100m", disk="1Mi")
        self.install(m)
        spec_path = "/etc/cdi/accel-%s-extsw.json" % self.inst
        self.wait_for(lambda: '"extsw"' in
                      self.in_ns("cat", spec_path).stdout,
                      "the CDI spec with the app")
        polite = self.run_own("swpolite", "extsw", "/bin/sh", "-c",
                              'trap "echo bye; exit 0" TERM; echo up; '
                              'while :; do sleep 0.1; done')
        self.wait_for(lambda: "up" in podman("logs", polite).stdout,
                      "its output")
        self.wait_for(lambda: len(self.ctr_procs("extsw")) >= 2,
                      "in the app's cgroup")
        st, b = self.d.http(
            "PUT", "/api/compute-resources/nodes/ctr/devices/%s/support-type"
            % GPU, {"supportType": "TimeSlice"})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["status"], "switched", b)
        self.assertEqual([x["appName"] for x in b["data"]["stoppedApps"]],
                         ["extsw"], b)
        # answered once the container had ended on the SIGTERM by itself
        self.assertEqual(self.ctr_procs("extsw"), [])
        self.wait_for(lambda: not self.running(polite), "podman's view")
        self.assertIn("bye", podman("logs", polite).stdout)
        self.assertEqual(podman("inspect", "--format",
                                "{{.State.ExitCode}}", polite).stdout.strip(),
                         "0")
        data = self.d.http("GET", "/api/apps/extsw")[1]["data"]
        self.assertEqual((data["state"], data.get("allocations") or []),
                         ("stopped", []), data)
        st, b = self.d.http(
            "PUT", "/api/compute-resources/nodes/ctr/devices/%s/support-type"
            % GPU, {"supportType": "MemorySlice"})
        self.assertEqual(st, 200, b)

    def test_own_container_held_through_the_cdi_device(self):
        """Item 6: a person's own podman run --device accel.dev/app=NAME of
        an external app is held to its binding."""
        m = manifest("ext", "1Gi", mem="64Mi", cpu="100m", disk="1Mi")
        self.install(m)
        spec_path = "/etc/cdi/accel-%s-ext.json" % self.inst
        spec = {}

        def spec_lists_ext():
            r = self.in_ns("cat", spec_path)
            if r.returncode != 0:
                return False
            spec.update(json.loads(r.stdout))
            return [x["name"] for x in spec["devices"]] == ["ext"]
        self.wait_for(spec_lists_ext, "the CDI spec with the app")
        self.assertEqual((spec["cdiVersion"], spec["kind"]),
                         ("0.5.0", "accel.dev/app"))
        edits = spec["devices"][0]["containerEdits"]
        self.assertIn("LD_PRELOAD=/usr/lib/accel/libaccelshim.so",
                      edits["env"])
        self.assertIn("CUDA_VISIBLE_DEVICES=" + GPU, edits["env"])
        # the stand-in NVIDIA spec's edits for the bound GPU came along
        self.assertIn(LIBCUDA_IN_CTR,
                      [x["containerPath"] for x in edits["mounts"]])
        name = self.run_own("own", "ext", "/app/cuda_hold", "512", "256",
                            "512")
        out = self.wait_for(lambda: "ready" in podman("logs", name).stdout
                            and podman("logs", name).stdout, "its output")
        self.assertIn("alloc 512 MiB: 2", out)  # over the 1 GiB quota
        self.assertIn("total 1024 MiB free 256 MiB", out)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/ext")[1]["data"]
                      ["usage"]["memory"] == 768 << 20, "its usage")
        # the hook put the container's processes into the app's cgroup
        pid = int(podman("inspect", "--format", "{{.State.Pid}}",
                         name).stdout)
        self.assertIn(pid, self.ctr_procs("ext"))
        # a mode switch of its GPU ends it with the binding
        st, b = self.d.http(
            "PUT", "/api/compute-resources/nodes/ctr/devices/%s/support-type"
            % GPU, {"supportType": "Exclusive"})
        self.assertIn(st, (200, 202), b)
        self.wait_for(lambda: podman("inspect", "--format",
                                     "{{.State.Running}}", name).stdout
                      .strip() == "false", "the container ended")
        # the binding's edits gone with it: the stopped app's device only
        # refuses (issue 47 item 4)
        self.wait_for(lambda: "--stopped" in self.in_ns("cat", spec_path)
                      .stdout, "the spec of the stopped app")
        self.assertNotIn("LD_PRELOAD", self.in_ns("cat", spec_path).stdout)
        podman("rm", "--force", "--time=0", name)
        self.wait_for(lambda: not [d for d in cgroup_dirs(self.inst)
                                   if os.path.isdir(os.path.join(d, "ext"))],
                      "the app's cgroups removed")

    def test_uninstall_keeps_an_image_acceld_did_not_bring(self):
        """Issue 44 item 2, issue 47 item 7: an uninstall removes only what
        acceld's own pull or load brought. An image that was on the machine
        before (pull missing found it; an archive whose image someone had
        loaded by hand) stays, and so does the image an admin's app is
        pinned to. Before, both were removed with the app, and the other
        app could not resume."""
        tag = "localhost/accel-it-%d:here" % os.getpid()
        self.assertEqual(podman("tag", IMAGE, tag).returncode, 0)
        self.addCleanup(podman, "rmi", "--ignore", tag)
        tok, _ = self.member("ann")
        self.install(ctr_manifest("adm", ["/bin/sleep", "1000"]))  # never
        self.install(ctr_manifest("p1", ["/bin/sleep", "1000"], image=tag,
                                  pull="missing"), token=tok)
        want, ref = self.own_archive("byhand")
        r = podman("load", "-i", ref.split(":", 1)[1])  # a person's import
        self.assertEqual(r.returncode, 0, r.stderr)
        self.install(ctr_manifest("a1", ["/bin/sleep", "1000"], image=ref))
        self.wait_for(lambda: self.state("a1") == "running", "running")
        self.wait_for(lambda: self.ctr_procs("p1"), "running")
        pin = os.path.join(self.d.data_dir, "images", "%s.json")
        for name in ("p1", "a1"):
            st, b = self.d.http("DELETE", "/api/apps/" + name)
            self.assertEqual(st, 200, b)
        for name in ("p1", "a1"):
            self.wait_for(lambda: not os.path.exists(pin % name),
                          name + "'s pin removed")
        self.assertNotIn("removing image", self.d.log())
        for img in (tag, want, IMAGE):
            self.assertEqual(podman("image", "exists", img).returncode, 0,
                             img)
        st, b = self.d.http("POST", "/api/apps/adm/suspend")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("adm") == "stopped", "stopped")
        st, b = self.d.http("POST", "/api/apps/adm/resume")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.ctr_procs("adm"), "adm running again")

    def test_uninstall_removes_an_archive_it_loaded(self):
        """An archive's image acceld loaded goes with the last app pinned
        to its ID, not before (the other app stopped: no container holds
        the image)."""
        want, ref = self.own_archive("loaded")
        for name in ("l1", "l2"):
            self.install(ctr_manifest(name, ["/bin/sleep", "1000"],
                                      image=ref))
            self.wait_for(lambda: self.state(name) == "running", "running")
        st, b = self.d.http("POST", "/api/apps/l2/suspend")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("l2") == "stopped", "stopped")
        st, b = self.d.http("DELETE", "/api/apps/l1")
        self.assertEqual(st, 200, b)
        pin = os.path.join(self.d.data_dir, "images", "%s.json")
        self.wait_for(lambda: not os.path.exists(pin % "l1"),
                      "l1's pin removed")
        # the removal is logged before the pin goes: none was started
        self.assertNotIn("removing image %s" % want[:12], self.d.log())
        self.assertEqual(podman("image", "exists", want).returncode, 0)
        st, b = self.d.http("DELETE", "/api/apps/l2")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: podman("image", "exists", want).returncode == 1,
                      "the loaded image removed with its last app")

    def test_image_ld_preload_follows_the_shim(self):
        """The image's own LD_PRELOAD (its configured environment) comes
        after the shim and run.preload, not replaced by them."""
        self.assertEqual(podman("image", "exists", IMAGE_PRE).returncode, 0)
        self.install(ctr_manifest(
            "pre", ["/bin/sh", "-c", 'echo "LD=$LD_PRELOAD"; sleep 1000'],
            image=IMAGE_PRE, preload=[IMAGE_LIB]))
        self.wait_for(lambda: "LD=" in self.d.app_log("pre"), "its output")
        self.assertIn("LD=/usr/lib/accel/libaccelshim.so:%s:%s\n" %
                      (IMAGE_LIB, IMAGE_LIB), self.d.app_log("pre"))

    def image_field(self, ref, field):
        return image_field(self, ref, field)

    def test_image_pinned_by_its_id_across_a_restart(self):
        """Once installed the app runs the image its reference named then,
        by its ID, even after the reference names another image and acceld
        restarted; the API shows the digest."""
        tag = "localhost/accel-it-%d:moving" % os.getpid()
        self.assertEqual(podman("tag", IMAGE, tag).returncode, 0)
        self.addCleanup(podman, "rmi", "--ignore", tag)
        want = self.image_field(IMAGE, "Id")
        # pull missing: the image is here, so pinned, and acceld's to remove
        self.install(ctr_manifest("pin", ["/bin/sleep", "1000"], image=tag,
                                  pull="missing"))
        self.wait_for(lambda: self.ctr_procs("pin"), "running")
        st, b = self.d.http("POST", "/api/apps/pin/suspend")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("pin") == "stopped", "stopped")
        # the reference now names another image
        self.assertEqual(podman("tag", IMAGE_PRE, tag).returncode, 0)
        self.d.kill()
        self.d.start()
        st, b = self.d.http("POST", "/api/apps/pin/resume")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.ctr_procs("pin"), "running again")
        r = podman("inspect", "--format", "{{.Image}}",
                   "accel-%s-pin" % self.inst)
        self.assertEqual(r.stdout.strip(), want, r.stderr)
        ctr = self.d.http("GET", "/api/apps/pin")[1]["data"]["container"]
        self.assertEqual((ctr.get("imageId"), ctr.get("digest")),
                         (want, self.image_field(IMAGE, "Digest")))
        # uninstalled: the reference names another image now, which stays
        pin = os.path.join(self.d.data_dir, "images", "pin.json")
        self.assertTrue(os.path.exists(pin))
        st, b = self.d.http("DELETE", "/api/apps/pin")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: not os.path.exists(pin), "the pin removed")
        self.assertEqual(self.image_field(tag, "Id"),
                         self.image_field(IMAGE_PRE, "Id"))

    def pull_events(self, name):
        st, b = self.d.http("GET", "/api/events?limit=1000")
        self.assertEqual(st, 200, b)
        return [e for e in b["data"]
                if e["kind"] == "app.pull" and e.get("app") == name]

    def test_install_pulls_as_a_job(self):
        """Item 5: an image that must be pulled (here an archive, podman's
        oci-archive: transport, as no registry is reachable): the install
        answers at once, resuming and pulling; the pull's lines are its
        progress in the app and in app.pull events; then the app runs,
        pinned to the image pulled."""
        tag = "localhost/accel-it-%d:archived" % os.getpid()
        archive = os.path.join(self.tmp, "image.tar")
        self.assertEqual(podman("tag", IMAGE, tag).returncode, 0)
        self.addCleanup(podman, "rmi", "--ignore", tag)
        r = podman("save", "--format", "oci-archive", "-o", archive, tag)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(podman("rmi", tag).returncode, 0)
        b = self.install(ctr_manifest("pulled", ["/bin/sleep", "1000"],
                                      image="oci-archive:" + archive,
                                      pull="missing"))
        self.assertEqual((b["data"]["state"],
                          b["data"]["container"]["pull"]["state"]),
                         ("resuming", "pulling"), b)
        self.wait_for(lambda: self.state("pulled") == "running", "running")
        self.wait_for(lambda: self.ctr_procs("pulled"), "its container")
        want = self.image_field(IMAGE, "Id")
        ctr = self.d.http("GET", "/api/apps/pulled")[1]["data"]["container"]
        self.assertEqual((ctr["pull"]["state"], ctr["pull"]["progress"],
                          ctr["imageId"]), ("done", want, want))
        r = podman("inspect", "--format", "{{.Image}}",
                   "accel-%s-pulled" % self.inst)
        self.assertEqual(r.stdout.strip(), want, r.stderr)
        progress = [e["data"]["progress"] for e in self.pull_events("pulled")
                    if e["data"]["state"] == "pulling"]
        self.assertIn("Writing manifest to image destination", progress)
        # podman pulled on a terminal (issue 47 item 6): its layers by
        # their short IDs with its bars, not the pipe's "sha256:" lines;
        # the layers and their bytes as podman said them, all copied when
        # the pull is done
        blobs = [p for p in progress if p.startswith("Copying blob ")]
        self.assertTrue(blobs, progress)
        for p in blobs:
            self.assertRegex(p, r"^Copying blob [0-9a-f]{12} ")
        done = [e["data"] for e in self.pull_events("pulled")
                if e["data"]["state"] == "done"][-1]
        self.assertEqual(done["layers"], {"done": 1, "total": 1}, done)
        self.assertEqual(done["bytes"]["done"], done["bytes"]["total"], done)
        for e in self.pull_events("pulled"):
            f = e["data"].get("bytes")
            if f is not None:
                self.assertLessEqual(f["done"], f["total"], e)
        r = self.d.ctl("app", "show", "pulled")
        self.assertIn("Pull:        done: " + want, r.stdout)
        self.assertRegex(r.stdout, r"\nLayers:      1/1(, [0-9.]+ [KMG]?i?B "
                                   r"/ [0-9.]+ [KMG]?i?B)?\n")

    def own_archive(self, name):
        return own_archive(self, self.tmp, name)

    def test_resume_pulls_an_image_gone_since(self):
        """A start after install whose pinned image is gone from the
        machine pulls it again as a job (the archive loaded again) and
        pins it, instead of failing podman run --pull=never."""
        want, ref = self.own_archive("again")
        self.install(ctr_manifest("again", ["/bin/sleep", "1000"],
                                  image=ref))
        self.wait_for(lambda: self.state("again") == "running", "running")
        st, b = self.d.http("POST", "/api/apps/again/suspend")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("again") == "stopped", "stopped")
        # the app is released once its processes are gone; podman removes
        # its container a moment later (issue 47 item 8): the image is
        # removed after that, as a person would after `podman ps -a`
        self.wait_for(lambda: self.containers() == [], "the container gone")
        r = podman("rmi", "--force", want)
        self.assertEqual(r.returncode, 0, r.stderr)
        pulls = len(self.pull_events("again"))
        st, b = self.d.http("POST", "/api/apps/again/resume")
        self.assertEqual(st, 200, b)
        self.assertEqual((b["data"]["state"],
                          b["data"]["container"]["pull"]["state"]),
                         ("resuming", "pulling"), b)
        self.wait_for(lambda: self.state("again") == "running",
                      "running again")
        self.wait_for(lambda: self.ctr_procs("again"), "its container")
        r = podman("inspect", "--format", "{{.Image}}",
                   "accel-%s-again" % self.inst)
        self.assertEqual(r.stdout.strip(), want, r.stderr)
        ctr = self.d.http("GET", "/api/apps/again")[1]["data"]["container"]
        self.assertEqual((ctr["pull"]["state"], ctr["imageId"]),
                         ("done", want))
        self.assertEqual(self.pull_events("again")[-1]["data"]["state"],
                         "done")
        self.assertGreater(len(self.pull_events("again")), pulls)
        # no pin at all (as on a cluster's node, where nothing is pinned at
        # install): pulled and pinned at the start too
        st, b = self.d.http("POST", "/api/apps/again/suspend")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("again") == "stopped", "stopped")
        pin = os.path.join(self.d.data_dir, "images", "again.json")
        os.unlink(pin)
        self.d.kill()
        self.d.start()
        st, b = self.d.http("POST", "/api/apps/again/resume")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["container"]["pull"]["state"], "pulling",
                         b)
        self.wait_for(lambda: self.state("again") == "running",
                      "running, pinned again")
        self.wait_for(lambda: os.path.exists(pin), "the pin")
        self.assertEqual(self.d.http("GET", "/api/apps/again")[1]["data"]
                         ["container"]["imageId"], want)

    def ctl_install(self, name, ref, cols=None):
        """accelctl app install of a container app of image ref on a
        terminal (a pseudo-terminal) cols wide: the Pty, running."""
        path = os.path.join(self.tmp, name + ".json")
        with open(path, "w") as f:
            json.dump(ctr_manifest(name, ["/bin/sleep", "1000"], image=ref,
                                   pull="missing"), f)
        p = Pty(self.d.ctl_args("app", "install", path), cols=cols)
        self.addCleanup(lambda: p.proc.poll() is None and p.proc.kill())
        self.addCleanup(lambda: p.proc.poll() is None and p.finish(5))
        return p

    def test_install_on_a_terminal_follows_the_pull(self):
        """Item 5: accelctl app install on a terminal draws the pull as a
        bar redrawn in place (podman's steps), then says the app started;
        off a terminal it answers at once (resuming)."""
        want, ref = self.own_archive("tty")
        p = self.ctl_install("tty", ref, cols=300)
        # the layers as podman counts them (issue 47 item 6)
        p.expect(r"\] [01]/1 layers", timeout=120)
        p.expect(r"\[={20}\] done", timeout=120)
        p.expect(r"App tty is running on ctr/%s" % GPU)
        self.assertEqual(p.finish(), 0, p.out)
        bar = p.out[p.out.index("Pulling " + ref):p.out.index("] done")]
        self.assertNotIn("\n", bar, p.out)  # one line, redrawn
        self.assertIn("\r\x1b[K", bar, p.out)
        self.assertEqual(self.d.http("GET", "/api/apps/tty")[1]["data"]
                         ["container"]["imageId"], want)
        # off a terminal: the answer at once, the pull left to acceld (the
        # archive's image goes with its last app)
        st, b = self.d.http("DELETE", "/api/apps/tty")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/tty")[0] == 404,
                      "uninstalled")
        self.wait_for(lambda: podman("image", "exists", want).returncode
                      == 1, "its image removed")
        path = os.path.join(self.tmp, "tty2.json")
        with open(path, "w") as f:
            json.dump(ctr_manifest("tty2", ["/bin/sleep", "1000"],
                                   image=ref, pull="missing", gpu="1Gi"), f)
        r = self.d.ctl("app", "install", path)
        self.assertEqual((r.returncode, r.stdout.strip()),
                         (0, "App tty2 is resuming on ctr/%s (1 Gi)." % GPU),
                         r.stderr)
        self.wait_for(lambda: self.state("tty2") == "running", "running")

    def test_install_on_a_terminal_says_a_failed_pull(self):
        path = os.path.join(self.tmp, "none.tar")
        p = self.ctl_install("ttyfail", "oci-archive:" + path, cols=60)
        p.expect(r"App ttyfail is failed \(pulling oci-archive:%s failed: "
                 r"no such image" % re.escape(path), timeout=120)
        self.assertEqual(p.finish(), 1, p.out)
        # each frame within the terminal's width (a wrapped line could not
        # be redrawn in place): the long path loses its start, the bar and
        # the step stay
        out = p.out[:p.out.index("\r\nApp ttyfail")]
        frames = out.split("\r\x1b[K")[1:]
        self.assertTrue(frames, p.out)
        self.assertTrue(all(len(f) == 59 for f in frames), frames)
        self.assertRegex(frames[-1],
                         r"^Pulling \.\.\.[^ ]*/none\.tar \[ {20}\] failed$")
        self.assertEqual(self.containers(), [])

    def test_failed_pull_fails_the_app_and_leaves_nothing(self):
        ref = "localhost:1/accel-none-%d:x" % os.getpid()
        b = self.install(ctr_manifest("nopull", ["/bin/sleep", "1000"],
                                      image=ref, pull="missing"))
        self.assertEqual(b["data"]["state"], "resuming", b)
        self.wait_for(lambda: self.state("nopull") == "failed", "failed")
        data = self.d.http("GET", "/api/apps/nopull")[1]["data"]
        self.assertIn("pulling %s failed: the registry cannot be reached "
                      "(no network, or the registry is down or refuses "
                      "connections): " % ref, data["reason"])
        self.assertIn("connection refused", data["reason"])
        self.assertEqual(data.get("allocations") or [], [])
        self.assertEqual(data["container"]["pull"]["state"], "failed")
        self.assertEqual(self.pull_events("nopull")[-1]["data"]["state"],
                         "failed")
        self.assertEqual(podman("image", "exists", ref).returncode, 1)
        self.assertEqual(self.containers(), [])

    def failed_pull(self, name, ref):
        b = self.install(ctr_manifest(name, ["/bin/sleep", "1000"],
                                      image=ref, pull="missing"))
        self.assertEqual(b["data"]["state"], "resuming", b)
        self.wait_for(lambda: self.state(name) == "failed", "failed")
        data = self.d.http("GET", "/api/apps/" + name)[1]["data"]
        self.assertEqual(data.get("allocations") or [], [])
        self.assertEqual(self.containers(), [])
        return data["reason"]

    def test_failed_pull_says_no_such_image(self):
        path = os.path.join(self.tmp, "none.tar")
        reason = self.failed_pull("noimg", "oci-archive:" + path)
        self.assertIn("pulling oci-archive:%s failed: no such image (no "
                      "such archive on this machine): " % path, reason)
        self.assertIn("no such file or directory", reason)

    def test_pull_checks_the_disk_reserve_first(self):
        """The image's size (an archive's: here a sparse 15 TiB file, which
        podman never reads) against the data directory's free space and
        the reserve, before the pull."""
        path = os.path.join(self.tmp, "huge.tar")
        with open(path, "wb") as f:
            f.truncate(15 << 40)
        reason = self.failed_pull("huge", "oci-archive:" + path)
        self.assertIn("pulling oci-archive:%s failed: not enough disk: the "
                      "image's archive takes 15.0 TiB and the file system "
                      "of the data directory %s has " % (path,
                                                         self.d.data_dir),
                      reason)
        self.assertIn("it would leave less than the reserve of 64.0 MiB "
                      "(ACCEL_DISK_RESERVE)", reason)
        self.assertEqual([e["data"]["state"]
                          for e in self.pull_events("huge")],
                         ["pulling", "failed"])

    def test_pull_never_needs_the_image_here(self):
        m = ctr_manifest("absent", ["/bin/sleep", "1000"])
        m["run"]["image"] = "localhost/accel-absent-%d:none" % os.getpid()
        st, b = self.d.http("POST", "/api/apps", {"manifest": m})
        self.assertEqual(st, 400, b)
        self.assertIn("run.image", b["message"])
        self.assertIn("is not on this machine and run.pull is never",
                      b["message"])
        self.assertEqual(self.d.http("GET", "/api/apps/absent")[0], 404)

    def secret_image(self, name):
        """An admin's local image with a secret baked in (/secret), removed
        at the end: its name and ID."""
        tag = "localhost/accel-secret-%d:%s" % (os.getpid(), name)
        cf = os.path.join(self.tmp, "Containerfile")
        with open(os.path.join(self.tmp, "secret"), "w") as f:
            f.write("the admin's secret\n")
        with open(cf, "w") as f:
            f.write("FROM %s\nLABEL accel.it=%s\nCOPY secret /secret\n" %
                    (IMAGE, tag))
        r = podman("build", "--pull=never", "-t", tag, "-f", cf, self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        iid = image_field(self, tag, "Id")
        self.addCleanup(podman, "rmi", "--ignore", "--force", iid)
        return tag, iid

    def test_member_runs_only_local_images_pulled_for_it_or_allowed(self):
        """Issue 44 hole 1: a member's install of a local image (pull never,
        or missing finding it here) that acceld did not pull for the
        member's apps and that memberImages does not allow is a 403 naming
        run.image and the rule, and changes nothing; by another name of
        the same ID or by its digest too. Before, the member ran it."""
        tok, _ = self.member("eve", allow=False)
        tag, iid = self.secret_image("one")
        alias = "localhost/accel-alias-%d:x" % os.getpid()
        self.assertEqual(podman("tag", tag, alias).returncode, 0)
        self.addCleanup(podman, "rmi", "--ignore", alias)
        digest = image_field(self, tag, "Digest")
        tries = [dict(image=tag), dict(image=tag, pull="missing"),
                 dict(image=alias),
                 dict(image=tag.split(":")[0] + "@" + digest)]
        for run in tries:
            st, b = self.d.http("POST", "/api/apps", {"manifest": ctr_manifest(
                "peek", ["/bin/cat", "/secret"], **run)}, token=tok)
            self.assertEqual(st, 403, (run, b))
            self.assertIn("run.image", b["message"])
            self.assertIn("memberImages", b["message"])
            self.assertEqual(self.d.http("GET", "/api/apps/peek")[0], 404)
        # an archive's image, loaded for an app an admin gave eve, stays
        # an admin's: eve's own install of it by name is refused
        want, ref = self.own_archive("gift")
        st, b = self.d.http("POST", "/api/apps", {"owner": "eve",
                            "manifest": ctr_manifest(
                                "gift", ["/bin/sleep", "1000"], image=ref)})
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("gift") == "running", "running")
        loaded = "localhost/accel-it-%d:gift" % os.getpid()
        st, b = self.d.http("POST", "/api/apps", {"manifest": ctr_manifest(
            "peek", ["/bin/sleep", "1000"], image=loaded)}, token=tok)
        self.assertEqual(st, 403, b)
        # admins are unaffected
        self.install(ctr_manifest("adm", ["/bin/sleep", "1000"], image=tag))
        # an admin allows a name pattern: eve may run it, by that name
        for bad in ([""], ["sha256:" + iid], "x", [1], ["a b"]):
            st, b = self.d.http("PUT", "/api/settings",
                                {"memberImages": bad})
            self.assertEqual(st, 400, (bad, b))
            self.assertIn("memberImages", b["message"])
        st, b = self.d.http("PUT", "/api/settings", {"other": 1})
        self.assertEqual(st, 400, b)
        st, b = self.d.http("PUT", "/api/settings",
                            {"memberImages": ["x"]}, token=tok)
        self.assertEqual(st, 403, b)
        pattern = "localhost/accel-secret-%d" % os.getpid()
        st, b = self.d.http("PUT", "/api/settings",
                            {"memberImages": [pattern]})
        self.assertEqual(st, 200, b)
        st, b = self.d.http("GET", "/api/settings", token=tok)
        self.assertEqual(b["data"]["memberImages"], [pattern])
        r = self.d.ctl("settings")
        self.assertIn(pattern, r.stdout)
        self.install(ctr_manifest("mine", ["/bin/sleep", "1000"], image=tag),
                     token=tok)
        # the setting survives a restart
        self.d.kill()
        self.d.start()
        st, b = self.d.http("GET", "/api/settings")
        self.assertEqual(b["data"]["memberImages"], [pattern])
        for name in ("gift", "adm", "mine"):
            st, b = self.d.http("DELETE", "/api/apps/" + name)
            self.assertEqual(st, 200, b)

    def planted(self, uid, path, target):
        """A link the member made in its home (from its own container or
        host app): the member's, pointing where it likes."""
        os.symlink(target, path)
        os.lchown(path, uid, uid)

    def test_volume_sources_never_follow_a_link_out_of_the_home(self):
        """Issue 44 item 1: a member's volume source is resolved beneath its
        home without following a link, at install and at each start, and
        what is missing is made as the member, never as root. Before, a
        link to a root-only directory got "lnk/newdir" made there as root
        and given to the member, and a link to / was mounted."""
        tok, uid = self.member("eve")
        rootonly = os.path.join(self.tmp, "rootonly")
        os.mkdir(rootonly, 0o700)
        with open(os.path.join(rootonly, "secret"), "w") as f:
            f.write("root's\n")
        b = self.install(ctr_manifest(
            "vol", ["/bin/sh", "-c", "echo ready; exec sleep 1000"],
            volumes=[{"source": "data/deep", "target": "/data"}]), token=tok)
        self.assertEqual(b["data"]["state"], "running", b)
        home = os.path.join(self.d.data_dir, "home", "eve")
        for p in ("data", "data/deep"):  # made as eve, 0700
            st = os.stat(os.path.join(home, p))
            self.assertEqual((st.st_uid, st.st_mode & 0o777), (uid, 0o700))
        # the links a member can plant: to a root-only directory, to /,
        # absolute or relative, a link to a link, a link to its own home
        # through the data dir, and a hard link to root's file
        self.planted(uid, os.path.join(home, "lnk"), rootonly)
        self.planted(uid, os.path.join(home, "root"), "/")
        self.planted(uid, os.path.join(home, "l2"), "lnk")
        self.planted(uid, os.path.join(home, "up"), "../..")
        self.planted(uid, os.path.join(home, "self"), home)
        os.link(os.path.join(rootonly, "secret"), os.path.join(home, "hl"))
        for i, src in enumerate(("lnk/newdir", "root", "l2/newdir", "lnk",
                                 "up/x", "self/data", home + "/lnk/newdir",
                                 "hl", "data/deep/../../lnk/newdir")):
            m = ctr_manifest("bad%d" % i, ["/bin/sleep", "1000"],
                             volumes=[{"source": "data"},
                                      {"source": src, "target": "/m"}])
            m["run"]["volumes"][0]["target"] = "/d"
            st, b = self.d.http("POST", "/api/apps", {"manifest": m},
                                token=tok)
            self.assertEqual(st, 403, (src, b))
            self.assertIn("run.volumes[1].source", b["message"], src)
            self.assertEqual(self.d.http("GET", "/api/apps/bad%d" % i)[0],
                             404, src)
        self.assertEqual(sorted(os.listdir(rootonly)), ["secret"])
        # a directory replaced by a link between install and start
        st, b = self.d.http("POST", "/api/apps/vol/suspend", token=tok)
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("vol") == "stopped", "stopped")
        os.rename(os.path.join(home, "data"), os.path.join(home, "old"))
        self.planted(uid, os.path.join(home, "data"), rootonly)
        st, b = self.d.http("POST", "/api/apps/vol/resume", token=tok)
        self.wait_for(lambda: self.state("vol") == "failed", "failed")
        data = self.d.http("GET", "/api/apps/vol")[1]["data"]
        self.assertIn("run.volumes[0].source", data["reason"], data)
        self.assertIn("link", data["reason"], data)
        self.assertEqual(sorted(os.listdir(rootonly)), ["secret"])
        self.assertEqual(self.containers(), [])
        st, b = self.d.http("DELETE", "/api/apps/vol", token=tok)
        self.assertEqual(st, 200, b)

    def test_no_cdi_spec_for_the_gpu_says_how_to_make_one(self):
        self.d.close()
        self.start(None)  # no nvidia.com/gpu spec at all
        st, b = self.d.http("POST", "/api/apps", {"manifest": ctr_manifest(
            "nocdi", ["/bin/sleep", "1000"])})
        data = self.d.http("GET", "/api/apps/nocdi")[1]["data"]
        self.assertEqual(data["state"], "failed", (st, b, data))
        dev = data.get("allocations") or []
        self.assertIn("nvidia-ctk cdi generate", data["reason"])
        self.assertIn("nvidia.com/gpu=GPU-", data["reason"])
        self.assertEqual(dev, [])
        self.assertEqual(self.containers(), [])


# What a container with a GPU's nodes says of them: each node under /dev/dri
# and /dev/kfd opened read-write or not, what /dev/dri holds, the HIP
# numbering, its uid and groups.
PROBE = (
    'for n in /dev/kfd /dev/dri/*; do if [ -e "$n" ]; then '
    'if ( : <>"$n" ) 2>/dev/null; then echo "open $n"; '
    'else echo "denied $n"; fi; fi; done; '
    'echo "dri:" /dev/dri/*; echo "hip=$HIP_VISIBLE_DEVICES"; '
    'while read k v; do case $k in Uid:|Groups:) echo "$k $v";; esac; '
    'done </proc/self/status; echo ready; exec sleep 1000')
NODE_GID = 2718  # the stand-in nodes' group: not the owner's, not 0


def acceld_card(pid):
    """/proc/<pid>/fd/<n> of acceld's card memfd (opening it opens the
    memfd itself), or None."""
    fdd = "/proc/%d/fd" % pid
    for fd in os.listdir(fdd):
        try:
            if os.readlink(os.path.join(fdd, fd)).startswith(
                    "/memfd:accel-card"):
                return os.path.join(fdd, fd)
        except OSError:
            continue
    return None


@unittest.skipUnless(HAVE, "needs root, podman, runc, unshare and the "
                           "stand-in driver built")
class ContainerTimesliceTest(ContainerCase):
    """Item 3: a container app on a time-sliced GPU takes its turns through
    acceld's broker. The broker's peer check (SO_PEERCRED, which the kernel
    gives in acceld's pid namespace and user namespace) admits the
    container's process, pid 1 or 2 of a namespace of its own, by its host
    pid in the app's cgroup and its uid; a process of the app's container
    of another uid, and a process of no app in a pid namespace of its own,
    are refused, named by their host pids."""
    inventory = TS_INVENTORY
    gpu = TS_GPU
    start = ContainerRunTest.start

    def setUp(self):
        ContainerCase.setUp(self)
        self.start(cdi_spec(self.gpu))

    def ts(self):
        st, b = self.d.http("GET", "/api/compute-resources")
        self.assertEqual(st, 200, b)
        return [x for n in b["data"] for x in n["devices"]
                if x["id"] == TS_GPU][0]["timeSlice"]

    def turns(self):
        return {a["app"]: a["turns"] for a in self.ts().get("apps", [])}

    def refusals(self):
        return re.findall(r"refused pid (\d+) \(uid (\d+)\) claiming app "
                          r"(\S+): ([^\n]*)", self.d.log())

    def test_container_app_takes_turns_through_the_broker(self):
        self.wait_for(lambda: self.ts().get("running"), "the broker")
        sock = self.ts()["socket"]
        tok, uid = self.member("tess")
        env = {"FAKE_CUDA_LOG": "/dev/null",
               "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"}
        self.install(ctr_manifest("tsc", ["/app/cuda_spin", "2000"],
                                  env=env), token=tok)
        # a host process app of the same owner on the same card
        m = manifest("tsh", "1Gi", mem="64Mi", cpu="100m", disk="1Mi")
        m["run"] = {"command": [SPIN, "2000"], "env": env,
                    "stopTimeoutSeconds": 2}
        self.install(m, token=tok)
        self.wait_for(lambda: (lambda t: t.get("tsc", 0) >= 2 and
                               t.get("tsh", 0) >= 2)(self.turns()),
                      "both apps to take turns")
        self.assertEqual(self.refusals(), [])
        spin = [p for p in self.ctr_procs("tsc") if comm(p) == "cuda_spin"]
        self.assertEqual(len(spin), 1, self.ctr_procs("tsc"))
        nspid = status_field(spin[0], "NSpid")
        # in a pid namespace of its own, which numbers it otherwise
        self.assertEqual(len(nspid), 2, nspid)
        self.assertEqual(nspid[0], str(spin[0]))
        self.assertNotEqual(nspid[1], nspid[0])
        self.assertEqual(status_field(spin[0], "Uid"), [str(uid)] * 4)

        # another uid in the app's own container (its processes' cgroup
        # and pid namespace, the app's shim and config): refused by uid
        ctr = "accel-%s-tsc" % self.inst
        r = self.in_ns("podman", "exec", "--user=54329:54329", ctr,
                       "/bin/sh", "-c", "echo $$; exec /app/cuda_spin 2000")
        inner, said = r.stdout.split("\n", 1)
        # the shim's submissions fail once refused (CUDA_ERROR_NOT_PERMITTED)
        self.assertEqual((r.returncode, said), (1, "launch failed: 800\n"),
                         r.stderr)
        got = [x for x in self.refusals() if x[1] == "54329"]
        # the broker names its host pid; the cgroup check passed (the uid
        # check comes after it)
        self.assertEqual([x[2:] for x in got], [
            ("tsc", "uid 54329 is not the uid app 'tsc' runs as")])
        self.assertNotEqual(got[0][0], inner)

        # a process of no app, pid 1 of a pid namespace of its own: the
        # broker names it by its host pid
        hello = ("import os, socket\n"
                 "ns = [l for l in open('/proc/self/status')"
                 " if l.startswith('NSpid:')][0].split()[1:]\n"
                 "c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
                 "c.settimeout(10)\n"
                 "c.connect(%r)\n"
                 "c.send(b'H 1 tsc')\n"
                 "print(os.getpid(), ns[0], c.recv(256).decode())\n" % sock)
        r = subprocess.run(["unshare", "--pid", "--fork", sys.executable,
                            "-c", hello], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        inner, host, answer = r.stdout.split(" ", 2)
        self.assertEqual(inner, "1")
        self.assertEqual(answer.strip(), "N pid %s is not a process of app "
                         "'tsc'" % host)
        # the container's process still takes turns
        n = self.turns()["tsc"]
        self.wait_for(lambda: self.turns().get("tsc", 0) > n,
                      "the container app's next turn")
        for a in ("tsc", "tsh"):
            st, b = self.d.http("DELETE", "/api/apps/" + a, token=tok)
            self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/tsc")[0] == 404,
                      "uninstalled")
        self.assert_nothing_left("tsc")

    def test_dead_slot_of_the_card_marked(self):
        """The card's ledger (the time-sliced apps' memory that cannot be
        evicted) is shared by the apps of the card, host and container:
        the broker hands each one the sealed memfd over the socket mounted
        in (no file mounted). A
        container's process cannot see a host process die: acceld's usage
        round marks the dead slots of the card's ledger too (their `dead`
        takes the key), which any reclaimer then takes; live slots are not
        marked. The dead host process's slot is written here (the stand-in
        driver's allocations on a time-sliced card are managed memory,
        which the card's ledger does not count)."""
        tok, _ = self.member("tom")
        self.install(ctr_manifest("tsc", ["/app/cuda_hold", "64"]),
                     token=tok)
        self.wait_for(lambda: "ready" in self.d.app_log("tsc"),
                      "the container app")
        # no file (issue cardled): acceld's descriptor of the sealed memfd
        # the broker handed the container's process, opened through /proc
        card = self.wait_for(lambda: acceld_card(self.d.proc.pid),
                             "acceld's card ledger")
        # sealed: nobody, root included, cuts it short under the mappings
        fd = os.open(card, os.O_RDWR)
        try:
            with self.assertRaises(PermissionError):
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)

        def slots():
            """{index: (key, pidns, dead)} of the owned slots."""
            with open(card, "rb") as f:
                b = f.read()
            out = {}
            for i in range(256):
                key, _, _, ns, dead = struct.unpack_from("<QqQQQ", b,
                                                         504 + 64 * i)
                if key != 0:
                    out[i] = (key, ns, dead)
            return out
        live = self.wait_for(slots, "the container's slot")
        self.assertEqual(len(live), 1, live)
        # a host process that claimed a slot and was killed
        p = subprocess.Popen(["sleep", "1000"])
        with open("/proc/%d/stat" % p.pid) as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        p.kill()
        p.wait()
        key = (start << 22) | p.pid
        free = min(set(range(256)) - set(live))
        fd = os.open(card, os.O_RDWR)
        try:
            os.pwrite(fd, struct.pack("<Q", os.stat("/proc/self/ns/pid")
                                      .st_ino), 504 + 64 * free + 24)
            os.pwrite(fd, struct.pack("<Q", key), 504 + 64 * free)
        finally:
            os.close(fd)
        self.wait_for(lambda: slots()[free][2] == key, "acceld's dead mark")
        (i, (_, _, dead)), = [x for x in slots().items() if x[0] != free]
        self.assertEqual((i, dead), (list(live)[0], 0))



@unittest.skipUnless(HAVE, "needs root, podman, runc, unshare and the "
                           "stand-in driver built")
class AmdContainerTest(ContainerCase):
    """Issue 36 item 2: a container app bound to an AMD GPU gets /dev/kfd
    and that GPU's render node, no other card's, and the nodes' group; the
    CDI device of an external app bound to one lists the same nodes. No
    AMD card here: the GPUs are the DRM sysfs fixtures of test_discovery
    (--sysfs-root) and the nodes stand-in character devices (c 1 3,
    /dev/null's numbers) made in the test's directory (--dev-root), root's,
    group NODE_GID, 0660. It proves what acceld gives podman and that runc
    makes of it a container where the owner's uid opens its nodes alone;
    not that ROCm runs there."""

    def setUp(self):
        super().setUp()
        self.sys = os.path.join(self.tmp, "sys")
        self.proc = os.path.join(self.tmp, "proc")
        self.dev = os.path.join(self.tmp, "dev")
        os.makedirs(os.path.join(self.sys, "class", "drm"))
        # an idle machine with RAM: a busy test run's real load would put
        # the node under CPU pressure and refuse the apps
        put(self.proc, "meminfo", "MemTotal:       %d kB\n"
            "MemAvailable:   %d kB\n" % (32 << 20, 16 << 20))
        put(self.proc, "loadavg", "0.00 0.00 0.00 1/100 1\n")
        put(self.tmp, "nvml.txt", "")  # no NVIDIA GPU
        os.makedirs(os.path.join(self.dev, "dri"))
        for n in ("kfd", "dri/renderD128", "dri/renderD129", "dri/card0",
                  "dri/card1"):
            path = os.path.join(self.dev, n)
            os.mknod(path, 0o660 | stat.S_IFCHR, os.makedev(1, 3))
            os.chown(path, 0, NODE_GID)
            os.chmod(path, 0o660)

    def start(self):
        self.d = Acceld(inventory="", extra_args=[
            "--node-name", "ctr", "--sysfs-root", self.sys,
            "--proc-root", self.proc, "--dev-root", self.dev],
            env={"ACCEL_NVML_LIB": FAKE_NVML,
                 "ACCEL_FAKE_NVML": os.path.join(self.tmp, "nvml.txt"),
                 "ACCEL_CDI_DIR": "/etc/cdi"},
            wrapper=cdi_wrapper(tempfile.mkdtemp(dir=self.tmp),
                                None)).start()
        self.inst = self.d.cgroup_instance()

    def two_radeons(self):
        """card0 and card1, discrete AMD GPUs (ctr-amd-gpu-0 and -1) with
        render nodes renderD128 and renderD129."""
        for k in (0, 1):
            card = "card%d" % k
            radeon(self.sys, card)
            put(self.sys, "class/drm/%s/device/uevent" % card,
                "PCI_SLOT_NAME=0000:0%d:00.0\n" % (3 + k))
            put(self.sys, "class/drm/%s/device/drm/renderD%d/dev" %
                (card, 128 + k), "226:%d\n" % (128 + k))

    def probe(self, text):
        """PROBE's output as {"open": [...], "denied": [...], "dri": [...],
        "hip", "Uid": [...], "Groups": [...]}."""
        out = {"open": [], "denied": []}
        for line in text.splitlines():
            word, _, rest = line.partition(" ")
            if word in ("open", "denied"):
                out[word].append(rest)
            elif word in ("dri:", "Uid:", "Groups:"):
                out[word[:-1]] = rest.split()
            elif word.startswith("hip="):
                out["hip"] = word[4:]
        return out

    def test_amd_container_gets_kfd_and_its_render_node_alone(self):
        self.two_radeons()
        self.start()
        tok, uid = self.member("bob")
        # Exclusive cards: the second app gets the other one, so both
        # cards' indexes (0 and 1 on the host) are seen in a container
        for name in ("first", "second"):
            b = self.install(ctr_manifest(name, ["/bin/sh", "-c", PROBE],
                                          mode="amd-gpu"),
                             token=tok)
            self.assertEqual(b["data"]["state"], "running", b)
        seen = set()
        for name in ("first", "second"):
            self.wait_for(lambda: "ready" in self.d.app_log(name),
                          "the probe's output in %s's log" % name)
            app = self.d.http("GET", "/api/apps/" + name)[1]["data"]
            devs = [x["deviceId"] for x in app["allocations"]]
            self.assertEqual(len(devs), 1, app)
            k = int(devs[0].rsplit("-", 1)[1])
            seen.add(k)
            mine = "/dev/dri/renderD%d" % (128 + k)
            got = self.probe(self.d.app_log(name))
            # its render node and kfd, not the other card's node, no card*
            self.assertEqual(got["dri"], [mine], got)
            self.assertEqual(sorted(got["open"]), ["/dev/dri/renderD%d" %
                                                   (128 + k), "/dev/kfd"],
                             got)
            self.assertEqual(got["denied"], [], got)
            # the owner's uid, with the nodes' own group to open them
            self.assertEqual(got["Uid"], [str(uid)] * 4, got)
            self.assertIn(str(NODE_GID), got["Groups"], got)
            # the single GPU is HIP's device 0 inside, whatever its index
            # on the host
            self.assertEqual(got["hip"], "0", got)
        self.assertEqual(seen, {0, 1})
        for name in ("first", "second"):
            st, b = self.d.http("DELETE", "/api/apps/" + name, token=tok)
            self.assertEqual(st, 200, b)
        for name in ("first", "second"):
            self.wait_for(lambda: self.d.http("GET", "/api/apps/" + name)[0]
                          == 404, "uninstalled")
            self.assert_nothing_left(name)

    def test_intel_container_gets_its_render_node_alone(self):
        """An Intel GPU: its render node, no kfd (Intel's runtimes need
        none), not the other card's node."""
        arc(self.sys, "card0")
        put(self.sys, "class/drm/card0/device/drm/renderD129/dev",
            "226:129\n")
        self.start()
        tok, uid = self.member("ivy")
        self.install(ctr_manifest("arc", ["/bin/sh", "-c", PROBE],
                                  mode="intel-gpu"), token=tok)
        self.wait_for(lambda: "ready" in self.d.app_log("arc"),
                      "the probe's output")
        got = self.probe(self.d.app_log("arc"))
        self.assertEqual(got["dri"], ["/dev/dri/renderD129"], got)
        self.assertEqual(got["open"], ["/dev/dri/renderD129"], got)
        self.assertEqual(got["Uid"], [str(uid)] * 4, got)
        self.assertIn(str(NODE_GID), got["Groups"], got)
        st, b = self.d.http("DELETE", "/api/apps/arc", token=tok)
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/arc")[0] == 404,
                      "uninstalled")
        self.assert_nothing_left("arc")

    def test_unknown_render_node_is_refused(self):
        radeon(self.sys, "card0")  # no drm/renderD* under its device
        self.start()
        st, b = self.d.http("POST", "/api/apps", {"manifest": ctr_manifest(
            "norender", ["/bin/sleep", "1000"], mode="amd-gpu")})
        data = self.d.http("GET", "/api/apps/norender")[1]["data"]
        self.assertEqual(data["state"], "failed", (st, b, data))
        self.assertIn("cannot give ctr-amd-gpu-0 to a container: its render "
                      "node is unknown", data["reason"])
        self.assertIn("0000:03:00.0", data["reason"])
        self.assertEqual(data.get("allocations") or [], [])
        self.assertEqual(self.containers(), [])

    def test_cdi_device_of_an_amd_apu(self):
        """An external app on a Memory-slicing AMD APU (card0, renderD128;
        card1 a discrete card, renderD129): its CDI device lists kfd and
        the APU's render node, and a person's own container with it, as
        some uid, opens them and sees no other."""
        strix_halo(self.sys, "card0")
        radeon(self.sys, "card1")
        put(self.sys, "class/drm/card1/device/drm/renderD129/dev",
            "226:129\n")
        self.start()
        m = manifest("apu", None, mem="64Mi", cpu="100m", disk="1Mi",
                     mode="amd")
        self.install(m)
        spec_path = "/etc/cdi/accel-%s-apu.json" % self.inst
        spec = {}

        def spec_lists_apu():
            r = self.in_ns("cat", spec_path)
            if r.returncode != 0:
                return False
            spec.update(json.loads(r.stdout))
            return [x["name"] for x in spec["devices"]] == ["apu"]
        self.wait_for(spec_lists_apu, "the CDI spec with the app")
        edits = spec["devices"][0]["containerEdits"]
        self.assertEqual(edits["deviceNodes"], [
            {"path": "/dev/kfd", "hostPath": os.path.join(self.dev, "kfd")},
            {"path": "/dev/dri/renderD128",
             "hostPath": os.path.join(self.dev, "dri", "renderD128")}])
        self.assertIn("HIP_VISIBLE_DEVICES=0", edits["env"])
        self.assertIn("LD_PRELOAD=/usr/lib/accel/libaccelshim.so",
                      edits["env"])
        name = self.run_own("apuown", "apu", "/bin/sh", "-c", PROBE,
                            flags=("--user=4321:4321",))
        out = self.wait_for(lambda: "ready" in podman("logs", name).stdout
                            and podman("logs", name).stdout, "its output")
        got = self.probe(out)
        self.assertEqual(got["dri"], ["/dev/dri/renderD128"], got)
        self.assertEqual(sorted(got["open"]),
                         ["/dev/dri/renderD128", "/dev/kfd"], got)
        self.assertEqual(got["Uid"], ["4321"] * 4, got)
        self.assertEqual(got["hip"], "0", got)
        podman("rm", "--force", "--time=0", name)
        st, b = self.d.http("DELETE", "/api/apps/apu")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/apu")[0] == 404,
                      "uninstalled")


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("unshare") and
                     os.path.exists(SHIM), "needs root, unshare and the shim "
                                           "built")
class CdiFilesTest(unittest.TestCase):
    """The shim files of an external app's CDI device (its config, the
    container's copy, its ledger) are written when its binding changes, or
    when one is gone, not at every supervisor second: a rewrite under a
    person's running container is a race with its shim reading the file
    (no podman needed: nothing runs)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="accel-cdifiles-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.d = Acceld(inventory=INVENTORY,
                        extra_args=["--node-name", "ctr"],
                        env={"ACCEL_CDI_DIR": "/etc/cdi"},
                        wrapper=cdi_wrapper(tempfile.mkdtemp(dir=self.tmp),
                                            cdi_spec(GPU))).start()
        self.addCleanup(self.d.close)
        self.inst = self.d.cgroup_instance()

    def wait_for(self, pred, what, timeout=30):
        return wait_for(self, pred, what, timeout, step=0.1, log=self.d)

    def install(self, name):
        st, b = self.d.http("POST", "/api/apps", {"manifest": manifest(
            name, "1Gi", mem="64Mi", cpu="100m", disk="1Mi")})
        self.assertEqual(st, 200, b)

    def paths(self, name):
        """The app's config and the container's copy."""
        base = os.path.join(self.d.data_dir, "run", "apps", name)
        return [os.path.join(base, "shim.conf"),
                os.path.join(base, "container", "shim.conf")]

    def spec_files(self):
        """acceld's CDI spec files (in its mount namespace), by name."""
        d = "/proc/%d/root/etc/cdi" % self.d.proc.pid
        return {n: os.path.join(d, n) for n in os.listdir(d)
                if n.startswith("accel-%s" % self.inst)}

    def spec_lists(self, *names):
        """acceld's CDI spec files (in its mount namespace) are one per
        app of names, each listing its app alone."""
        found = []
        try:
            for path in self.spec_files().values():
                with open(path) as f:
                    found += [x["name"] for x in
                              json.load(f).get("devices", [])]
        except (OSError, ValueError):
            return False
        return (sorted(found) == sorted(names) and
                sorted(self.spec_files()) ==
                sorted("accel-%s-%s.json" % (self.inst, n) for n in names))

    @staticmethod
    def ident(path):
        st = os.stat(path)
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    @staticmethod
    def read(path):
        with open(path) as f:
            return f.read()

    def spec_device(self, name):
        """acceld's CDI device of app name (in its mount namespace), or
        None."""
        try:
            with open("/proc/%d/root/etc/cdi/accel-%s-%s.json" %
                      (self.d.proc.pid, self.inst, name)) as f:
                spec = json.load(f)
        except (OSError, ValueError):
            return None
        return ([x for x in spec["devices"] if x["name"] == name] or
                [None])[0]

    def mounted(self, name):
        dev = self.spec_device(name)
        return dev and [m["containerPath"] for m in
                        dev["containerEdits"]["mounts"]]

    def test_nvidia_spec_changes_are_followed(self):
        """NVIDIA's spec is parsed once and kept while its file is the
        same; a new one (nvidia-ctk writes a file and renames it over the
        old: a new inode) and one changed in place are read again within
        a second, and their edits reach the app's CDI device."""
        self.install("follow")
        self.wait_for(lambda: LIBCUDA_IN_CTR in (self.mounted("follow") or
                                                 []), "the spec's mount")
        nv = "/proc/%d/root/etc/cdi/nvidia.json" % self.d.proc.pid
        spec = cdi_spec(GPU)
        edits = spec["devices"][0]["containerEdits"]
        edits["mounts"][0]["containerPath"] = "/usr/lib/renamed.so.1"
        tmp = nv + ".tmp"
        with open(tmp, "w") as f:
            json.dump(spec, f)
        os.rename(tmp, nv)
        self.wait_for(lambda: "/usr/lib/renamed.so.1" in
                      (self.mounted("follow") or []), "the renamed spec")
        edits["mounts"][0]["containerPath"] = "/usr/lib/in-place.so.1"
        with open(nv, "r+") as f:  # the same inode, another size
            f.truncate(0)
            json.dump(spec, f)
        self.wait_for(lambda: "/usr/lib/in-place.so.1" in
                      (self.mounted("follow") or []), "the spec changed "
                      "in place")
        os.unlink(nv)
        self.wait_for(lambda: self.spec_device("follow") is None,
                      "the device gone with NVIDIA's spec")

    def test_spec_of_each_app_shows_its_owner_alone(self):
        """Issue 44 hole 2: one CDI spec file per external app, root's and
        its owner's group's, 0640, and the app's config directory 0750 with
        that group, so no member reads which apps the others run or their
        ledgers' paths; a link planted where a spec goes is replaced, not
        followed; the spec of an app gone, and the one file of every app
        that acceld wrote before, are removed. Before, one world-readable
        file named every app, and the config directories were 0755."""
        uids = {}
        for who in ("ann", "bob"):
            st, b = self.d.http("POST", "/api/users", {"name": who})
            self.assertEqual(st, 200, b)
            uids[who] = b["data"]["token"]
        st, users = self.d.http("GET", "/api/users")
        gid = {u["name"]: u["uid"] for u in users["data"]}
        cdi = "/proc/%d/root/etc/cdi" % self.d.proc.pid
        target = os.path.join(self.tmp, "target")
        with open(target, "w") as f:
            f.write("untouched\n")
        planted = os.path.join(cdi, "accel-%s-c1.json" % self.inst)
        os.symlink(target, planted)
        self.addCleanup(lambda: os.path.lexists(planted) and
                        os.unlink(planted))
        old = os.path.join(cdi, "accel-%s.json" % self.inst)
        with open(old, "w") as f:
            f.write("{}")
        self.addCleanup(lambda: os.path.exists(old) and os.unlink(old))
        for app, who in (("a1", "ann"), ("b1", "bob"), ("c1", "ann")):
            st, b = self.d.http("POST", "/api/apps", {"manifest": manifest(
                app, "1Gi", mem="64Mi", cpu="100m", disk="1Mi")},
                token=uids[who])
            self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.spec_lists("a1", "b1", "c1"),
                      "one spec per app, and nothing else")
        with open(target) as f:
            self.assertEqual(f.read(), "untouched\n")
        for app, who in (("a1", "ann"), ("b1", "bob"), ("c1", "ann")):
            path = os.path.join(cdi, "accel-%s-%s.json" % (self.inst, app))
            st = os.lstat(path)
            self.assertTrue(stat.S_ISREG(st.st_mode), path)
            self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777),
                             (0, gid[who], 0o640), path)
            conf_dir = os.path.dirname(self.paths(app)[0])
            st = os.stat(conf_dir)
            self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777),
                             (0, gid[who], 0o750), conf_dir)
        st, b = self.d.http("DELETE", "/api/apps/b1", token=uids["bob"])
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.spec_lists("a1", "c1"),
                      "b1's spec removed")
        for app in ("a1", "c1"):
            st, b = self.d.http("DELETE", "/api/apps/" + app)
            self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.spec_files() == {}, "every spec removed")

    def test_written_when_the_binding_changes_only(self):
        self.install("keep")
        self.wait_for(lambda: self.spec_lists("keep"), "the CDI spec")
        conf, ctr = self.paths("keep")
        before = {p: self.ident(p) for p in (conf, ctr)}
        self.assertIn("device 0 1073741824 ", self.read(conf))
        # each app installed after is written by a refresh pass that
        # begins later: the spec listing it proves that pass went by
        # "keep" as well, and left its files alone
        for names in (("keep", "two"), ("keep", "two", "three")):
            self.install(names[-1])
            self.wait_for(lambda: self.spec_lists(*names),
                          "the spec with " + names[-1])
            self.assertEqual({p: self.ident(p) for p in (conf, ctr)},
                             before, "rewritten with nothing changed")
        # a quota change (the page's update/app) is written
        st, b = self.d.http("POST", "/api/gpu/update/app",
                            {"id": GPU, "mode": "1", "appName": "keep",
                             "memory": "2048"})
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: os.path.exists(conf) and
                      "device 0 2147483648 " in self.read(conf),
                      "the new quota in the config")
        self.wait_for(lambda: os.path.exists(ctr) and
                      " 2147483648 " in self.read(ctr),
                      "the new quota in the container's copy")
        # and a move to another GPU
        st, b = self.d.http("PUT", "/api/gpu/assignments/bulk",
                            {"appName": "keep", "unassign": [{"id": GPU}],
                             "assign": [{"id": OTHER, "memory": "1024"}]})
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: os.path.exists(conf) and
                      OTHER in self.read(conf), "the new GPU in the config")
        # a config removed (or replaced) behind acceld's back is made again
        os.unlink(conf)
        self.wait_for(lambda: os.path.exists(conf) and
                      OTHER in self.read(conf), "the config made again")
        ledger = [x.split()[3] for x in self.read(conf).splitlines()
                  if x.startswith("device ")][0]
        os.unlink(ledger)
        self.wait_for(lambda: os.path.exists(ledger), "the ledger made again")


if __name__ == "__main__":
    unittest.main(verbosity=2)
