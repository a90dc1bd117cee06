# SPDX-License-Identifier: MIT
"""People's own Docker containers held to an external app (issue 47 items 2
and 4, SPEC 8.2.1): Debian 12's Docker (20.10) has no CDI, so accel-runc, an
OCI runtime that wraps runc, applies the app's CDI device (the spec acceld
writes) to a container that names the app with -e ACCEL_APP=NAME. Checked
with the real dockerd of Debian's docker.io: the quota holds inside (the
shim preloaded, acceld's ledger), the container's process is in the app's
cgroup, suspending the app stops the container through Docker and waits for
it (a restart policy sees a stop, not a crash), a container naming no app
or a stopped one is refused with a reason, and nothing is left.

Each test starts its own dockerd (no iptables, no bridge, its own data and
exec roots, socket and pidfile under the test's temporary directory, its
runtimes in its own daemon.json) in the mount namespace acceld runs in (the
CDI spec is in that namespace's /etc/cdi), and stops it at the end, passed
or failed; the image is `docker import`ed from a rootfs of the test binaries
(no registry is reachable)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import BUILD_DIR, Acceld, manifest  # noqa: E402
from test_containers import (HAVE, INVENTORY, ContainerCase,  # noqa: E402
                             cdi_spec, cdi_wrapper, GPU, rootfs_tar)
import test_runtime  # noqa: E402

DOCKERD = "/usr/sbin/dockerd"
DOCKER = "/usr/bin/docker"  # Debian's client, not another one on PATH
ACCEL_RUNC = os.path.join(BUILD_DIR, "accel-runc")
IMAGE = "localhost/accel-dk-%d:test" % os.getpid()
ASAN = "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0"
HAVE_DOCKER = bool(HAVE and os.path.exists(DOCKERD) and
                   os.path.exists(DOCKER) and os.path.exists(ACCEL_RUNC) and
                   shutil.which("nsenter"))
WHY = ("needs root, podman's test prerequisites, Debian's docker.io "
       "(/usr/sbin/dockerd, /usr/bin/docker), nsenter and accel-runc built")


class Dockerd:
    """One dockerd of a test's own, its files under tmp."""

    def __init__(self, tmp):
        # short: containerd's socket path under exec-root must fit 108 bytes
        self.dir = tempfile.mkdtemp(prefix="dk-", dir=tmp)
        self.sock = os.path.join(self.dir, "docker.sock")
        self.host = "unix://" + self.sock  # DOCKER_HOST
        self.pidfile = os.path.join(self.dir, "docker.pid")
        self.proc = None

    def start(self, ns_pid, cgroup_parent):
        """dockerd in the mount namespace of process ns_pid, its
        containers' cgroups under cgroup_parent."""
        self.ns_pid = ns_pid
        self.cgroup_parent = cgroup_parent
        conf = os.path.join(self.dir, "daemon.json")
        with open(conf, "w") as f:  # the docs' registration
            json.dump({"runtimes": {"accel": {"path": ACCEL_RUNC}}}, f)
        log = open(os.path.join(self.dir, "dockerd.log"), "ab")
        self.proc = subprocess.Popen(
            ["nsenter", "--mount=/proc/%d/ns/mnt" % self.ns_pid, DOCKERD,
             "--config-file", conf, "--iptables=false", "--ip-masq=false",
             "--bridge=none", "--data-root", os.path.join(self.dir, "data"),
             "--exec-root", os.path.join(self.dir, "x"),
             "--pidfile", self.pidfile, "-H", "unix://" + self.sock,
             "--cgroup-parent", self.cgroup_parent, "--log-level", "warn"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            # containerd writes its stacks to TMPDIR when dockerd, its
            # health check failing on a loaded machine, restarts it
            # (SIGUSR1 then SIGKILL): those go with this directory
            env=dict(os.environ, TMPDIR=self.dir))
        log.close()
        deadline = time.time() + 90
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            if os.path.exists(self.sock) and \
                    self.docker("version", timeout=30).returncode == 0:
                return self
            time.sleep(0.2)
        raise RuntimeError("dockerd did not start:\n" + self.log())

    def log(self):
        with open(os.path.join(self.dir, "dockerd.log"), errors="replace") as f:
            return f.read()

    def docker(self, *args, timeout=120):
        return subprocess.run([DOCKER, "-H", "unix://" + self.sock] +
                              list(args), capture_output=True, text=True,
                              timeout=timeout)

    def close(self):
        """Every container and image removed, dockerd stopped (and its
        containerd with it), its directory removed."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            ids = self.docker("ps", "-aq").stdout.split()
            if ids:
                self.docker("rm", "-f", *ids)
            self.docker("rmi", "-f", IMAGE)
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def left(self):
        """What of this dockerd is still there: its processes (dockerd,
        containerd, shims: their command lines name its directory) and
        mounts under its directory, in any mount namespace."""
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                with open("/proc/%s/mountinfo" % pid) as f:
                    mounts = f.read()
            except OSError:
                continue
            if self.dir in cmd and "nsenter" not in cmd:
                out.append("process %s: %s" % (pid, cmd))
            if self.dir in mounts:
                out.append("mount seen by %s" % pid)
        return out


@unittest.skipUnless(HAVE_DOCKER, WHY)
class DockerTest(ContainerCase):
    """Docker 20.10 containers through accel-runc."""

    @classmethod
    def setUpClass(cls):
        cls.imgdir = tempfile.mkdtemp(prefix="accel-dk-img-")
        cls.tar = rootfs_tar(cls.imgdir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.imgdir, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self.had_key = os.path.exists("/etc/docker/key.json")
        self.dk = Dockerd(self.tmp)
        # acceld stops Docker's containers through the DOCKER_HOST it has
        self.d = Acceld(inventory=INVENTORY, extra_args=["--node-name", "ctr"],
                        env={"ACCEL_CDI_DIR": "/etc/cdi",
                             "DOCKER_HOST": self.dk.host},
                        wrapper=cdi_wrapper(tempfile.mkdtemp(dir=self.tmp),
                                            cdi_spec(GPU))).start()
        self.inst = self.d.cgroup_instance()
        self.addCleanup(self.dk.close)  # before acceld's (cleanups: LIFO)
        self.dk.start(self.d.proc.pid, "/accel.slice/%s/docker" % self.inst)
        r = self.dk.docker("import", "--change", 'CMD ["/bin/sleep", "1000"]',
                           self.tar, IMAGE)
        self.assertEqual(r.returncode, 0, r.stderr)

    def external(self, name):
        """An external app of 1 GiB installed and its CDI spec written."""
        self.install(manifest(name, "1Gi", mem="64Mi", cpu="100m",
                              disk="1Mi"))
        path = "/etc/cdi/accel-%s-%s.json" % (self.inst, name)
        self.wait_for(lambda: '"%s"' % name in self.in_ns("cat", path).stdout,
                      "the CDI spec with the app")

    def run_dk(self, name, app, *cmd, flags=()):
        """docker run -d of the test image under accel-runc naming app."""
        r = self.dk.docker("run", "-d", "--name", name, "--runtime", "accel",
                           "--network", "none", "--init",
                           "-e", "ACCEL_APP=" + app, "-e", ASAN, *flags,
                           IMAGE, *cmd)
        return r

    def inspect(self, name, field):
        return self.dk.docker("inspect", "--format", "{{%s}}" % field,
                              name).stdout.strip()

    def app(self, name):
        st, b = self.d.http("GET", "/api/apps/" + name)
        self.assertEqual(st, 200, b)
        return b["data"]

    def test_quota_cgroup_stop_and_nothing_left(self):
        self.external("dk")
        r = self.run_dk("dkhold", "dk", "/app/cuda_hold", "512", "256", "512")
        self.assertEqual(r.returncode, 0, r.stderr)
        logs = lambda: self.dk.docker("logs", "dkhold").stdout  # noqa: E731
        self.wait_for(lambda: "ready" in logs(), "the container's output")
        out = logs()
        self.assertIn("alloc 512 MiB: 0", out)
        self.assertIn("alloc 256 MiB: 0", out)
        self.assertIn("alloc 512 MiB: 2", out)  # over the app's 1 GiB
        self.assertIn("total 1024 MiB free 256 MiB", out)
        # acceld's ledger holds the container's charges
        self.wait_for(lambda: self.app("dk")["usage"]["memory"] == 768 << 20,
                      "its usage in acceld's ledger")
        pid = int(self.inspect("dkhold", ".State.Pid"))
        procs = self.ctr_procs("dk")
        self.assertIn(pid, procs)  # docker-init, in the app's cgroup
        hold = [p for p in procs if p != pid]
        self.assertTrue(hold, procs)
        with open("/proc/%d/environ" % hold[0], "rb") as f:
            env = f.read().split(b"\0")
        self.assertIn(b"LD_PRELOAD=/usr/lib/accel/libaccelshim.so", env)
        # the suspend waits for the container, stopped through Docker
        st, b = self.d.http("POST", "/api/apps/dk/suspend")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.app("dk")["state"] == "stopped",
                      "the app stopped once the container was gone",
                      timeout=60)
        self.assertEqual(self.ctr_procs("dk"), [])
        self.assertEqual(self.inspect("dkhold", ".State.Running"), "false")
        self.assertEqual(self.app("dk").get("allocations") or [], [])
        # nothing left of the test's Docker once it is stopped
        self.dk.close()
        self.assertEqual(self.dk.left(), [])
        # dockerd's files outside its roots went to the namespace's /etc
        self.assertEqual(os.path.exists("/etc/docker/key.json"),
                         self.had_key)

    def test_restart_policy_sees_a_stop(self):
        """Item 4: a container with `--restart unless-stopped` is stopped
        through Docker when its app is suspended: the app holds its GPU
        (releasing) until the container is gone, which here ignores the
        SIGTERM and ends by Docker's kill after the stop timeout (10 s);
        Docker does not start it again; started again by hand, it is
        refused with words that say the app is stopped."""
        self.external("dkr")
        r = self.run_dk("dkr1", "dkr", "/bin/sh", "-c",
                        'trap "" TERM; echo up; while :; do sleep 0.2; done',
                        flags=("--restart", "unless-stopped"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_for(lambda: len(self.ctr_procs("dkr")) >= 2,
                      "in the app's cgroup")
        st, b = self.d.http("POST", "/api/apps/dkr/suspend")
        self.assertEqual(st, 200, b)
        t0 = time.time()
        self.assertEqual(self.app("dkr")["state"], "releasing")
        time.sleep(1)
        self.assertEqual(self.inspect("dkr1", ".State.Running"), "true")
        self.assertEqual(self.app("dkr")["state"], "releasing")
        self.assertTrue(self.app("dkr")["allocations"])
        self.wait_for(lambda: self.app("dkr")["state"] == "stopped",
                      "the app stopped", timeout=60)
        self.assertGreater(time.time() - t0, 5)  # the stop timeout's kill
        time.sleep(2)  # a restart policy would have started it again
        self.assertEqual(self.inspect("dkr1", ".State.Status"), "exited")
        self.assertEqual(self.inspect("dkr1", ".RestartCount"), "0")
        r = self.dk.docker("start", "dkr1")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("app 'dkr' is stopped", r.stderr)
        self.assertIn("accelctl app resume dkr", r.stderr)

    @unittest.skipUnless(shutil.which("docker-compose"),
                         "needs Debian's docker-compose (1.29)")
    def test_docker_compose_1_29(self):
        """Item 3: the form docs/containers.md gives Debian's
        docker-compose 1.29 with Docker 20.10 (no CDI: its
        deploy.resources device requests refuse driver cdi): `runtime:
        accel` and ACCEL_APP in the environment. The quota holds, and
        with `restart: unless-stopped` a suspend stops it for good."""
        self.external("dc")
        path = os.path.join(self.tmp, "docker-compose.yml")
        with open(path, "w") as f:
            json.dump({"services": {"hold": {
                "image": IMAGE, "runtime": "accel", "init": True,
                "environment": ["ACCEL_APP=dc", ASAN],
                "network_mode": "none", "restart": "unless-stopped",
                "command": ["/app/cuda_hold", "512", "256", "512"]}}}, f)
        project = "accel%d" % os.getpid()

        def compose(*args):
            return subprocess.run(
                ["docker-compose", "-p", project, "-f", path] + list(args),
                capture_output=True, text=True, timeout=180,
                env=dict(os.environ, DOCKER_HOST=self.dk.host))
        self.addCleanup(compose, "down")
        r = compose("up", "-d")
        self.assertEqual(r.returncode, 0, r.stderr)
        name = project + "_hold_1"
        logs = lambda: self.dk.docker("logs", name).stdout  # noqa: E731
        self.wait_for(lambda: "ready" in logs(), "the container's output")
        self.assertIn("alloc 512 MiB: 2", logs())
        self.assertIn("total 1024 MiB free 256 MiB", logs())
        self.assertIn(int(self.inspect(name, ".State.Pid")),
                      self.ctr_procs("dc"))
        st, b = self.d.http("POST", "/api/apps/dc/suspend")
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.app("dc")["state"] == "stopped",
                      "the app stopped", timeout=60)
        time.sleep(2)  # a restart policy would have started it again
        self.assertEqual(self.inspect(name, ".State.Status"), "exited")
        self.assertEqual(self.inspect(name, ".RestartCount"), "0")
        r = compose("down")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.dk.docker("ps", "-aq").stdout.split(), [])

    def test_refused_unless_the_app_admits_it(self):
        """A container naming no app of this machine is refused with the
        reason; one naming none runs under accel-runc as under runc."""
        r = self.run_dk("dknone", "nosuch", "/bin/sleep", "1")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("no app of that name admits containers", r.stderr)
        self.assertIn("accel.dev/app=nosuch", r.stderr)
        r = self.dk.docker("run", "--rm", "--runtime", "accel", "--network",
                           "none", IMAGE, "/bin/sh", "-c", "echo plain")
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "plain"),
                         r.stderr)


@unittest.skipUnless(HAVE_DOCKER and os.path.exists(test_runtime.FAKE_NVML),
                     WHY + " and the fake NVML built")
class DockerForeignTest(ContainerCase):
    """Item 5: a container that asks for the GPU the NVIDIA way (--gpus,
    compose's driver: nvidia) bypasses accel: the reconciler shows its
    process as foreign use of the card, naming the container. The
    container is an ordinary one of Debian's dockerd (no GPU here), and the
    fake NVML says its process uses the card."""

    def setUp(self):
        super().setUp()
        self.dk = Dockerd(self.tmp)
        self.nvml = os.path.join(self.tmp, "nvml.txt")
        self.write_nvml("")
        # a mount namespace of its own (dockerd writes /etc/docker/key.json)
        self.d = Acceld(inventory=test_runtime.INVENTORY,
                        extra_args=["--node-name", test_runtime.NODE,
                                    "--reconcile-interval-ms", "100"],
                        env={"ACCEL_NVML_LIB": test_runtime.FAKE_NVML,
                             "ACCEL_FAKE_NVML": self.nvml},
                        wrapper=cdi_wrapper(tempfile.mkdtemp(dir=self.tmp),
                                            None)).start()
        self.inst = self.d.cgroup_instance()
        self.addCleanup(self.dk.close)
        self.dk.start(self.d.proc.pid, "/accel.slice/%s/docker" % self.inst)
        r = self.dk.docker("import", "--change", 'CMD ["/bin/sleep", "1000"]',
                           DockerTest.tar, IMAGE)
        self.assertEqual(r.returncode, 0, r.stderr)

    @classmethod
    def setUpClass(cls):
        DockerTest.setUpClass()

    @classmethod
    def tearDownClass(cls):
        DockerTest.tearDownClass()

    def write_nvml(self, extra):
        text = test_runtime.HEADER + "".join(
            test_runtime.GPU_LINE % g for g in (test_runtime.GPU_A,
                                                test_runtime.GPU_B))
        with open(self.nvml + ".tmp", "w") as f:
            f.write(text + extra)
        os.replace(self.nvml + ".tmp", self.nvml)

    def test_gpus_container_is_foreign_and_named(self):
        gpu = test_runtime.GPU_B
        r = self.dk.docker("run", "-d", "--name", "nvway", "--network",
                           "none", IMAGE, "/bin/sleep", "1000")
        self.assertEqual(r.returncode, 0, r.stderr)
        cid = r.stdout.strip()
        pid = int(self.dk.docker("inspect", "--format", "{{.State.Pid}}",
                                 "nvway").stdout)
        self.write_nvml("proc %s %d 536870912 compute\n" % (gpu, pid))
        dev = lambda: self.d.device(gpu)  # noqa: E731
        fu = self.wait_for(lambda: dev()["foreignUsage"], "foreignUsage")
        self.assertEqual(fu, [{"pid": pid, "usedMemory": 536870912,
                               "container": {"engine": "docker",
                                             "id": cid}}])
        r = self.d.ctl("gpu", "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("pid %d (0.50 Gi) in docker container %s" %
                      (pid, cid[:12]), r.stdout)
        st, b = self.d.http("GET", "/api/events?limit=200")
        self.assertTrue(any("(docker container %s)" % cid[:12] in
                            e.get("message", "") for e in b["data"]), b)
        self.write_nvml("")
        self.wait_for(lambda: dev()["foreignUsage"] == [], "it gone")


if __name__ == "__main__":
    unittest.main()
