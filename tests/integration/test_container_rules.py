# SPDX-License-Identifier: MIT
"""A member's container gets no more than a member's process (SPEC 8.2.1,
issue 44 holes 2, 3 and 6), tried as a hostile member would:

- disk: every byte the container can write lands where limitedDisk counts
  it. Its root is read-only (an image's own 0777 directory and its VOLUME
  included), /tmp and /var/tmp are in its owner's home, /dev/shm is at most
  limitedDisk and what it holds is counted with the home: 64 MiB written
  anywhere else is refused, and what is written where it may be stops it
  past limitedDisk 8Mi.
- network: a network namespace of its own, reached only through its
  published port on loopback: its unpublished port cannot be reached on
  any address it has, by an unprivileged host user nor by another
  member's container; nothing of its network is left after its stop.
- pulls: a registry that accepts and never answers (a local stand-in)
  fails the pull after ACCEL_PULL_STALL_SECONDS (2 s here) with that
  reason, and a stop, an uninstall or a user's forced removal during the
  pull answers at once and cancels it: no podman pull left, the GPU
  released, podman's TMPDIR for it removed.

The images are test_containers' (built here, no registry), with one more:
an image of the member's making with a 0777 directory and a VOLUME."""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_containers as tc  # noqa: E402
from accel_harness import Acceld  # noqa: E402

OPEN_IMAGE = "localhost/accel-it-%d:open" % os.getpid()
HAVE = tc.HAVE and os.path.exists(tc.NET_PROBE)


def setUpModule():
    if not HAVE:
        return
    tc.setUpModule()
    tmp = tempfile.mkdtemp(prefix="accel-rules-img-")
    try:
        tc.build_image(tmp, extra_dirs=(("/data", 0o777), ("/vol", 0o777)),
                       extra_changes=("VOLUME /vol",), image=OPEN_IMAGE)
    finally:
        subprocess.run(["rm", "-rf", tmp])


def tearDownModule():
    if HAVE:
        tc.podman("rmi", "--force", OPEN_IMAGE)
        tc.tearDownModule()


def with_disk(m, disk):
    m["spec"]["accelerator"][0]["limitedDisk"] = disk
    return m


class SilentRegistry:
    """A registry stand-in that accepts every connection and never says a
    word (closed at the end)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.done = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.done:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self):
        self.done = True
        self.sock.close()
        for c in self.conns:
            c.close()


@unittest.skipUnless(HAVE, "needs root, podman, runc, unshare and the "
                           "stand-in driver and net_probe built")
class MemberContainerTest(tc.ContainerCase):
    inventory = tc.INVENTORY

    def setUp(self):
        super().setUp()
        self.start()

    def start(self, env=None):
        self.d = Acceld(inventory=self.inventory,
                        extra_args=["--node-name", "ctr"],
                        env=dict({"ACCEL_CDI_DIR": "/etc/cdi"}, **(env or {})),
                        wrapper=tc.cdi_wrapper(tempfile.mkdtemp(dir=self.tmp),
                                               tc.cdi_spec(tc.GPU))).start()
        self.inst = self.d.cgroup_instance()

    def wait_for(self, pred, what, timeout=30):
        """The harness's, with the app logs in a failure's message."""
        try:
            return super().wait_for(pred, what, timeout)
        except AssertionError as e:
            logs = os.path.join(self.d.data_dir, "logs")
            for f in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
                if not os.path.isfile(os.path.join(logs, f)):
                    continue  # the log pipe
                with open(os.path.join(logs, f), errors="replace") as fh:
                    e.args = (e.args[0] + "\n--- %s ---\n%s" %
                              (f, fh.read()[-3000:]),)
            raise

    def app(self, name, token=None):
        return self.d.http("GET", "/api/apps/" + name, token=token)[1]["data"]

    # ---- hole 2: disk ----

    def test_every_byte_written_is_counted_toward_limited_disk(self):
        tok, _ = self.member("dora")
        # (/dev/shm: the next test)
        tries = ["/data", "/vol", "/", "/etc", "/app", "/run", "/var",
                 "/dev", "/dev/mqueue", "/proc", "/sys"]
        script = (
            "for p in %s; do "
            "if dd if=/dev/zero of=$p/fill bs=1M count=64 2>/dev/null; "
            "then echo \"wrote $p\"; else echo \"refused $p\"; fi; "
            "rm -f $p/fill; done; echo probed; "
            # within the limit each, past it together: 1 MiB in /var/tmp
            # and 6 MiB in /tmp (the home), 6 MiB in /dev/shm
            "dd if=/dev/zero of=/var/tmp/more bs=1M count=1 2>/dev/null && "
            "echo wrote-var-tmp; "
            "dd if=/dev/zero of=/dev/shm/keep bs=1M count=6 2>/dev/null && "
            "echo kept-shm; "
            "dd if=/dev/zero of=/tmp/fill bs=1M count=6 2>/dev/null && "
            "echo wrote-tmp; exec sleep 1000" % " ".join(tries))
        m = with_disk(tc.ctr_manifest("filler", ["/bin/sh", "-c", script],
                                      image=OPEN_IMAGE, shmSize="1Gi"), "8Mi")
        b = self.install(m, token=tok)
        self.assertEqual(b["data"]["state"], "running", b)
        self.wait_for(lambda: self.state("filler") == "failed",
                      "stopped past limitedDisk", timeout=60)
        out = self.d.app_log("filler")
        for p in tries:
            self.assertIn("refused %s\n" % p, out, out)
        self.assertIn("wrote-var-tmp", out)
        self.assertIn("kept-shm", out)
        # the member's bytes are in its home, where the watch counts them
        home = os.path.join(self.d.data_dir, "home", "dora")
        tmp = os.path.join(home, ".accel-tmp", "filler")
        self.assertEqual(os.path.getsize(os.path.join(tmp, "more")), 1 << 20)
        self.assertTrue(os.path.exists(os.path.join(tmp, "fill")))
        reason = self.app("filler")["reason"]
        self.assertIn("its home %s and its container's /dev/shm use" % home,
                      reason)
        self.assertIn("(6.0 MiB in /dev/shm), past limitedDisk 8Mi",
                      reason)
        self.assertEqual(self.app("filler").get("allocations") or [], [])
        self.wait_for(lambda: not self.containers(), "the container gone")

    def test_dev_shm_is_at_most_limited_disk_and_counted(self):
        """shmSize 1Gi asked, limitedDisk 8Mi: /dev/shm is a tmpfs of 8 MiB,
        64 MiB written there are refused past 8 MiB (ENOSPC), and the 8 MiB
        it holds count with the home: the app is stopped past 8Mi."""
        tok, _ = self.member("ed")
        m = with_disk(tc.ctr_manifest("shm", [
            "/bin/sh", "-c",
            "cat /proc/mounts; echo x > /tmp/mark; "
            "dd if=/dev/zero of=/dev/shm/x bs=1M count=64 2>/dev/null || "
            "echo shm-full; exec sleep 1000"], shmSize="1Gi",
            # a volume of its own at /tmp replaces the home's .accel-tmp
            volumes=[{"source": "mytmp", "target": "/tmp"}]), "8Mi")
        self.install(m, token=tok)
        self.wait_for(lambda: "shm-full" in self.d.app_log("shm"),
                      "the write refused")
        shm = [ln.split() for ln in self.d.app_log("shm").splitlines()
               if " /dev/shm " in ln]
        self.assertEqual(len(shm), 1, shm)
        self.assertEqual(shm[0][2], "tmpfs", shm)
        self.assertIn("size=8192k", shm[0][3].split(","), shm)
        with open(os.path.join(self.d.data_dir, "home", "ed", "mytmp",
                               "mark")) as f:
            self.assertEqual(f.read(), "x\n")
        self.wait_for(lambda: self.state("shm") == "failed",
                      "stopped past limitedDisk")
        self.assertIn("(8.0 MiB in /dev/shm), past limitedDisk 8Mi",
                      self.app("shm")["reason"])

    # ---- hole 3: network ----

    def addrs(self, pid):
        r = subprocess.run(["nsenter", "-n", "-t", str(pid), tc.NET_PROBE,
                            "addrs"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.split()

    def as_nobody(self, *cmd):
        return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534",
                               "--clear-groups", *cmd], capture_output=True,
                              text=True, timeout=30)

    def free_port(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        return port

    def net_of(self, name):
        """The slirp4netns and rootlessport processes of the app's
        container (their pids), found by its network namespace's path."""
        r = self.in_ns("podman", "inspect", "--format",
                       "{{.NetworkSettings.SandboxKey}}",
                       "accel-%s-%s" % (self.inst, name))
        key = r.stdout.strip()
        self.assertTrue(key, r.stderr)
        pids = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "slirp4netns" in cmd and key in cmd:
                pids.append(int(p))
        return pids

    def test_reached_only_through_what_it_publishes(self):
        tok, _ = self.member("fay")
        tok2, _ = self.member("gus", allow=False)
        port = self.free_port()
        m = tc.ctr_manifest("srv", [
            "/bin/sh", "-c", "/app/net_probe listen 9090 & "
            "exec /app/net_probe listen 8080"],
            ports=["127.0.0.1:%d:8080" % port])
        del m["run"]["network"]  # what a member gets by default
        self.install(m, token=tok)
        self.wait_for(lambda: self.d.app_log("srv").count("listening") == 2,
                      "listening", timeout=60)
        pids = self.ctr_procs("srv")
        self.assertTrue(pids)
        addrs = self.addrs(pids[0])
        self.assertTrue(addrs, "the container has an address of its own")
        # the published port, on loopback, to anyone on the machine
        r = self.as_nobody(tc.NET_PROBE, "connect", "127.0.0.1", str(port))
        self.assertEqual(r.stdout.strip(), "connected: hello", r.stdout)
        # nothing else, from an unprivileged user of the host ...
        for a in addrs:
            for p in ("9090", "8080"):
                r = self.as_nobody(tc.NET_PROBE, "connect", a, p)
                self.assertTrue(r.stdout.startswith("refused"),
                                "%s:%s reached: %s" % (a, p, r.stdout))
        # ... nor from another member's container (its default network
        # too), nor from the host's root through podman's bridge
        tries = " ".join("/app/net_probe connect %s %s;" % (a, p)
                         for a in addrs for p in ("9090", "8080"))
        # nor the host's loopback through slirp4netns's gateway (acceld's
        # API is there): the published port is on it, and not reached
        tries += " /app/net_probe connect 10.0.2.2 %d;" % port
        m2 = tc.ctr_manifest("peer", ["/bin/sh", "-c", tries +
                                      " echo tried; exec sleep 1000"],
                             image=tc.IMAGE)
        del m2["run"]["network"]
        self.install(m2, token=tok2)
        self.wait_for(lambda: "tried" in self.d.app_log("peer"), "tried",
                      timeout=60)
        out = self.d.app_log("peer")
        self.assertNotIn("connected", out)
        self.assertEqual(len([ln for ln in out.splitlines()
                              if ln.startswith("refused: ")]),
                         2 * len(addrs) + 1, (addrs, out))
        # not on podman's bridge, where every container and user reach it
        r = tc.podman("network", "inspect", "podman", "--format",
                      "{{range .Containers}}{{.Name}} {{end}}")
        self.assertNotIn("accel-%s-srv" % self.inst, r.stdout)
        # its network goes with it
        net = self.net_of("srv")
        self.assertTrue(net, "no slirp4netns for its network")
        st, b = self.d.http("POST", "/api/apps/srv/suspend", token=tok)
        self.assertEqual(st, 200, b)
        self.wait_for(lambda: self.state("srv") == "stopped", "stopped")
        self.wait_for(lambda: not any(tc.comm(p) for p in net),
                      "its slirp4netns gone")
        r = self.as_nobody(tc.NET_PROBE, "connect", "127.0.0.1", str(port))
        self.assertTrue(r.stdout.startswith("refused"), r.stdout)

    # ---- hole 6: a stalled pull ----

    def pulls_left(self):
        d = os.path.join(self.d.data_dir, "run", "pulls")
        return os.listdir(d) if os.path.isdir(d) else []

    def podman_pulls(self, ref):
        out = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"pull" in argv and ref.encode() in argv:
                out.append(int(p))
        return out

    def test_stalled_pull_fails_and_a_stop_cancels_one(self):
        self.d.close()
        tc.clean_instance(self.inst)
        reg = SilentRegistry()
        self.addCleanup(reg.close)
        # the cancels with a stall far off (a loaded machine's podman may
        # take seconds to start), then the stall alone with 2 s
        self.start(env={"ACCEL_PULL_STALL_SECONDS": "600"})
        tok, _ = self.member("hal", allow=False)

        def ref(n):
            return "127.0.0.1:%d/accel-silent-%d/%s:1" % (reg.port,
                                                         os.getpid(), n)

        def pulling(name, token=None):
            m = tc.ctr_manifest(name, ["/bin/sleep", "1000"],
                                image=ref(name), pull="missing")
            del m["run"]["network"]
            b = self.install(m, token=token)
            self.assertEqual((b["data"]["state"],
                              b["data"]["container"]["pull"]["state"]),
                             ("resuming", "pulling"), b)
            self.wait_for(lambda: self.podman_pulls(ref(name)),
                          "podman pull running")

        # a stop answers at once, releases the GPU, kills the pull
        t0 = time.time()
        pulling("stopme", tok)
        st, b = self.d.http("POST", "/api/apps/stopme/suspend", token=tok)
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["state"], "stopped", b)
        self.assertEqual(b["data"].get("allocations") or [], [])
        self.assertEqual(b["data"]["container"]["pull"]["state"],
                         "cancelled")
        self.wait_for(lambda: not self.podman_pulls(ref("stopme")),
                      "the pull killed", timeout=5)
        # an admin's uninstall of a member's app while it pulls
        pulling("dropme", tok)
        st, b = self.d.http("DELETE", "/api/apps/dropme")
        self.assertEqual(st, 200, b)
        self.assertEqual(self.d.http("GET", "/api/apps/dropme")[0], 404)
        self.wait_for(lambda: not self.podman_pulls(ref("dropme")),
                      "the pull killed", timeout=5)
        # the user's forced removal while its app pulls
        tok2, _ = self.member("ivy", allow=False)
        pulling("goneuser", tok2)
        st, b = self.d.http("DELETE", "/api/users/ivy?force=true")
        self.assertEqual(st, 200, b)
        self.assertEqual(self.d.http("GET", "/api/apps/goneuser")[0], 404)
        self.wait_for(lambda: not self.podman_pulls(ref("goneuser")),
                      "the pull killed", timeout=5)
        self.assertLess(time.time() - t0, 30)
        self.wait_for(lambda: self.pulls_left() == [],
                      "podman's TMPDIRs removed", timeout=5)
        # left alone, a pull with no progress fails after 2 s, saying so
        self.d.close()
        tc.clean_instance(self.inst)
        self.start(env={"ACCEL_PULL_STALL_SECONDS": "2"})
        tok, _ = self.member("hal", allow=False)
        pulling("stall", tok)
        t1 = time.time()
        self.wait_for(lambda: self.state("stall") == "failed", "failed",
                      timeout=30)
        self.assertLess(time.time() - t1, 10)  # before podman's TLS timeout
        data = self.app("stall")
        self.assertIn("pulling %s failed: no progress for 2 s (podman "
                      "wrote no line and read less than 64 KiB: the "
                      "registry does not answer; ACCEL_PULL_STALL_SECONDS)"
                      % ref("stall"), data["reason"])
        self.assertEqual(data.get("allocations") or [], [])
        self.assertEqual(data["container"]["pull"]["state"], "failed")
        self.wait_for(lambda: not self.podman_pulls(ref("stall")),
                      "the pull killed", timeout=5)
        self.wait_for(lambda: self.pulls_left() == [],
                      "podman's TMPDIRs removed", timeout=5)
        self.assertEqual(self.containers(), [])


if __name__ == "__main__":
    unittest.main()
