# SPDX-License-Identifier: MIT
"""The cluster closed to the apps it runs (issue 19, SPEC 10): etcd as
docs/cluster.md sets it up, TLS to clients and peers with client
certificates required, even on loopback.

- three members with TLS, three agents with the client certificate: binds
  and an app across nodes work;
- a member's app, run by an agent as its owner's uid, can neither write to
  etcd (no certificate: the handshake fails; plain http to the TLS port:
  refused) nor read the client key (root's, 0600);
- acceld refuses to start against an etcd that serves clients without a
  certificate (an http:// endpoint, or https without --client-cert-auth)
  unless --etcd-insecure, and refuses a client key others could read or
  that someone else owns, or a certificate without its key.

The certificates are made once for the module (etcd_harness.make_certs)
in a directory removed at the end, whatever happens."""
import atexit
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cluster_harness import GiB, Agent, Cluster, manifest  # noqa: E402
from etcd_harness import EtcdCluster, make_certs  # noqa: E402
from accel_harness import ACCELD, free_port  # noqa: E402

CERTS = None  # the module's certificate directory (setUpModule)


def setUpModule():
    global CERTS
    root = tempfile.mkdtemp(prefix="accel-tls-")
    unittest.addModuleCleanup(shutil.rmtree, root, True)
    atexit.register(shutil.rmtree, root, True)  # a run cut short too
    # the apps' uids may reach the CA and the client certificate (public)
    # but not the keys (0600, root's): as a node would keep them
    os.chmod(root, 0o711)
    CERTS = os.path.join(root, "pki")
    os.mkdir(CERTS, 0o755)
    make_certs(CERTS)


def cert(name):
    return os.path.join(CERTS, name)


def b64(s):
    return base64.b64encode(s.encode()).decode()


def refused(args, timeout=30):
    """Run acceld with args; it must exit non-zero: its stderr."""
    tmp = tempfile.mkdtemp(prefix="accel-tls-run-")
    try:
        p = subprocess.run(
            [ACCELD, "--data-dir", os.path.join(tmp, "data"), "--listen",
             "127.0.0.1:%d" % free_port(), "--node-name", "r1",
             "--no-cgroups"] + list(args),
            capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if p.returncode == 0:
        raise AssertionError("acceld %s started (exit 0): %s" %
                             (" ".join(args), p.stderr))
    return p.stderr


class TlsClusterTest(unittest.TestCase):
    """Three TLS members, three agents with the client certificate."""

    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(["n1", "n2", "n3"], tls=True, cert_dir=CERTS)
        cls.addClassCleanup(cls.c.close)

    def app_log(self, agent, name):
        path = os.path.join(agent.data_dir, "logs", name + ".log")
        try:
            with open(path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop_app(self, name):
        """Suspend and remove an app; end its processes by their group
        (the agents run without cgroups) whatever the API answered."""
        c = self.c
        for a in c.agents.values():
            app = c.app_of(a, name) or {}
            if app.get("pid"):
                try:
                    os.killpg(app["pid"], signal.SIGKILL)
                except OSError:
                    pass
        c.agent("n1").http("POST", "/api/apps/%s/suspend" % name)
        c.agent("n1").http("DELETE", "/api/apps/" + name)

    def test_an_app_across_nodes_on_tls(self):
        """Bound through n3 to cards of n1 and n2: each runs a part, every
        view shows it running, etcd holds both allocations; a stop
        through n3 releases both."""
        c = self.c
        m = manifest("tlswide", "4Gi", run=["/bin/sleep", "311"], multi=True)
        binding = [
            {"nodeName": "n1", "deviceId": "n1-mem", "memory": 2 * GiB},
            {"nodeName": "n2", "deviceId": "n2-mem", "memory": 2 * GiB}]
        self.addCleanup(self.stop_app, "tlswide")
        st, b = c.agent("n3").http("POST", "/api/apps", {
            "manifest": m, "computeBinding": binding})
        self.assertEqual((st, b.get("code")), (200, 200), b)
        for n in ("n1", "n2", "n3"):
            c.wait(lambda: (c.app_of(c.agent(n), "tlswide") or {}).get(
                "state") == "running", "tlswide running as %s sees it" % n)
        out = c.etcd.etcdctl("get", "--prefix", "/accel/allocs/tlswide/",
                             "--keys-only").stdout.split()
        self.assertEqual(sorted(out), ["/accel/allocs/tlswide/n1-mem",
                                       "/accel/allocs/tlswide/n2-mem"])
        st, b = c.agent("n3").http("POST", "/api/apps/tlswide/suspend")
        self.assertEqual(st, 200, b)
        for n in ("n1", "n2", "n3"):
            c.wait(lambda: (c.app_of(c.agent(n), "tlswide") or {}).get(
                "state") == "stopped", "tlswide stopped as %s sees it" % n)
        c.wait(lambda: c.etcd.etcdctl(
            "get", "--prefix", "/accel/allocs/tlswide/",
            "--keys-only").stdout.split() == [], "both cards released")

    @unittest.skipUnless(os.geteuid() == 0,
                         "acceld runs apps as their owner's uid only as root")
    def test_a_members_app_cannot_write_to_etcd(self):
        """Issue 19's reproduction: mallory's app, bound to n2, runs as
        her uid on n2 and tries what it could with etcd on 127.0.0.1 open:
        add an admin. Every way is refused, and the key stays unread."""
        c = self.c
        st, b = c.agent("n1").http("POST", "/api/users", {"name": "mallory"})
        self.assertEqual(st, 200, b)
        tok = b["data"]["token"]
        https = c.etcd.urls()[0]
        plain = "http://" + https.split("://", 1)[1]
        put = json.dumps({"key": b64("/accel/users/evil"),
                          "value": b64('{"name":"evil","role":"admin"}')})
        curl = "curl -sS -f --max-time 10 -H 'Content-Type: application/json'"
        script = "; ".join([
            "id -u",
            # no client certificate: the TLS handshake is refused
            "%s --cacert %s -d '%s' %s/v3/kv/put; echo \"put-tls rc=$?\"" %
            (curl, cert("ca.pem"), put, https),
            # plain http to the member's port
            "%s -d '%s' %s/v3/kv/put; echo \"put-http rc=$?\"" %
            (curl, put, plain),
            # the agents' credentials: the key is not hers to read
            "cat %s; echo \"key rc=$?\"" % cert("client.key"),
            "%s --cacert %s --cert %s --key %s -d '%s' %s/v3/kv/put; "
            "echo \"put-cert rc=$?\"" % (curl, cert("ca.pem"),
                                        cert("client.pem"),
                                        cert("client.key"), put, https),
            "echo done", "exec sleep 1013"])
        m = manifest("curious", "1Gi", run=["/bin/sh", "-c", script])
        self.addCleanup(self.stop_app, "curious")
        st, b = c.agent("n1").http("POST", "/api/apps", {
            "manifest": m, "computeBinding": [
                {"nodeName": "n2", "deviceId": "n2-mem", "memory": GiB}]},
            token=tok)
        self.assertEqual((st, b.get("code")), (200, 200), b)
        n2 = c.agent("n2")
        c.wait(lambda: "done" in self.app_log(n2, "curious"),
               "the app's attempts (its log on n2)", timeout=60)
        out = self.app_log(n2, "curious")
        lines = out.splitlines()
        st, users = c.agent("n1").http("GET", "/api/users")
        uid = [u["uid"] for u in users["data"] if u["name"] == "mallory"][0]
        self.assertTrue(uid and uid != 0, users)
        self.assertEqual(lines[0], str(uid), out)
        for what in ("put-tls", "put-http", "key", "put-cert"):
            rc = [x for x in lines if x.startswith(what + " rc=")]
            self.assertEqual(len(rc), 1, out)
            self.assertNotEqual(rc[0], what + " rc=0", out)
        self.assertIn("Permission denied", out)
        self.assertNotIn("PRIVATE KEY", out)
        self.assertNotIn('"header"', out)  # no etcd answer reached her
        got = c.etcd.etcdctl("get", "/accel/users/evil").stdout
        self.assertEqual(got.strip(), "", got)
        # the same request with the credentials goes through (the attempts
        # failed for want of them, not for a wrong command), outside /accel/
        ok = json.dumps({"key": b64("/accel-test-control/x"),
                         "value": b64("1")})
        p = subprocess.run(
            "%s --cacert %s --cert %s --key %s -d '%s' %s/v3/kv/put" % (
                curl, cert("ca.pem"), cert("client.pem"),
                cert("client.key"), ok, https),
            shell=True, capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn('"header"', p.stdout)


class RefusalTest(unittest.TestCase):
    """acceld refuses an etcd open to all, and credentials others could
    take, naming the flag and the rule."""

    def test_plain_http_needs_etcd_insecure(self):
        err = refused(["--etcd", "http://127.0.0.1:9"])
        self.assertIn("etcd endpoint http://127.0.0.1:9 is plain http", err)
        self.assertIn("--etcd-insecure", err)
        # one http endpoint among https ones is refused too
        err = refused(["--etcd", "https://127.0.0.1:9,http://127.0.0.1:10",
                       "--etcd-cacert", cert("ca.pem"),
                       "--etcd-cert", cert("client.pem"),
                       "--etcd-key", cert("client.key")])
        self.assertIn("http://127.0.0.1:10 is plain http", err)

    def test_tls_without_client_cert_auth_is_refused(self):
        with EtcdCluster(1, tls=True, cert_dir=CERTS,
                         client_cert_auth=False) as e:
            err = refused(["--etcd", e.endpoints(),
                           "--etcd-cacert", cert("ca.pem"),
                           "--etcd-cert", cert("client.pem"),
                           "--etcd-key", cert("client.key")])
            # --etcd-insecure: said explicitly, it starts
            a = Agent("r2", e.endpoints(), extra_args=[
                "--etcd-insecure", "--etcd-cacert", cert("ca.pem"),
                "--etcd-cert", cert("client.pem"),
                "--etcd-key", cert("client.key")])
            try:
                a.start()
                st, _ = a.http("GET", "/healthz", token="")
                self.assertEqual(st, 200)
            finally:
                a.close()
        self.assertIn("answered a request made without a client "
                      "certificate", err)
        self.assertIn("--client-cert-auth", err)
        self.assertIn("--etcd-insecure", err)

    def test_client_key_others_could_read(self):
        tmp = tempfile.mkdtemp(prefix="accel-tls-key-")
        self.addCleanup(shutil.rmtree, tmp, True)
        key = os.path.join(tmp, "client.key")
        shutil.copyfile(cert("client.key"), key)
        base = ["--etcd", "https://127.0.0.1:9",
                "--etcd-cacert", cert("ca.pem"),
                "--etcd-cert", cert("client.pem")]
        for mode in (0o644, 0o640, 0o604, 0o660):
            os.chmod(key, mode)
            err = refused(base + ["--etcd-key", key])
            self.assertIn("--etcd-key %s has mode %04o" % (key, mode), err)
            self.assertIn("not be readable or writable by group or others",
                          err)
        os.chmod(key, 0o600)
        if os.geteuid() == 0:
            os.chown(key, 65534, 65534)
            err = refused(base + ["--etcd-key", key])
            self.assertIn("--etcd-key %s is owned by uid 65534" % key, err)
        err = refused(base + ["--etcd-key", os.path.join(tmp, "none")])
        self.assertIn("--etcd-key %s/none: cannot read it" % tmp, err)

    def test_certificate_and_key_go_together(self):
        err = refused(["--etcd", "https://127.0.0.1:9",
                       "--etcd-cacert", cert("ca.pem"),
                       "--etcd-cert", cert("client.pem")])
        self.assertIn("--etcd-cert and --etcd-key go together", err)
        err = refused(["--etcd-cert", cert("client.pem"),
                       "--etcd-key", cert("client.key")])
        self.assertIn("need --etcd", err)
        err = refused(["--etcd", "https://127.0.0.1:9",
                       "--etcd-cacert", "/nonexistent/ca.pem"])
        self.assertIn("--etcd-cacert /nonexistent/ca.pem: cannot read it",
                      err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
