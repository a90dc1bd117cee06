# SPDX-License-Identifier: MIT
"""The etcd client (src/daemon/store/etcd.c) against a real three-member
etcd cluster: starts the cluster (etcd_harness.py) and a one-member https
cluster that requires client certificates, runs the C test program
test_etcd_client with the members' URLs in ACCEL_ETCD_ENDPOINTS (and the
https one's in ACCEL_ETCD_TLS_ENDPOINTS, _CA, _CERT, _KEY), and serves
its control channel (ACCEL_ETCD_CTL: "leader", "kill URL", "restart URL"),
so the program can take members down mid-test while this driver keeps
owning them (and removes them, whatever happens).

ACCEL_ETCD_TESTS="etcd_guards etcd_failover" runs only those C tests.
Fails (does not skip) when etcd or etcdctl is missing.
"""
import os
import subprocess
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from etcd_harness import EtcdCluster  # noqa: E402

SOURCE_DIR = os.environ.get(
    "ACCEL_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("ACCEL_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
PROGRAM = os.path.join(BUILD_DIR, "tests", "cluster", "test_etcd_client")
BENCH = os.path.join(BUILD_DIR, "bench", "etcd_txn_bench")


def serve_control(cluster, rfd, wfd, log):
    """Answer the program's control lines until it closes the channel."""
    with os.fdopen(rfd, "r") as inp, os.fdopen(wfd, "w") as out:
        for line in inp:
            words = line.split()
            try:
                answer = "ok"
                if words == ["leader"]:
                    answer = "ok " + cluster.urls()[cluster.leader()]
                elif len(words) == 2 and words[0] == "kill":
                    cluster.kill(cluster.index_of(words[1]))
                elif len(words) == 2 and words[0] == "restart":
                    cluster.restart(cluster.index_of(words[1]))
                else:
                    answer = "err unknown command %r" % line.strip()
            except Exception as e:  # report to the program, which fails
                answer = "err %s" % str(e).replace("\n", " | ")
            log.append("%s -> %s" % (line.strip(), answer))
            out.write(answer + "\n")
            out.flush()


class EtcdClientTest(unittest.TestCase):
    def test_etcd_client(self):
        self.assertTrue(os.access(PROGRAM, os.X_OK),
                        "%s is not built" % PROGRAM)
        with EtcdCluster(3) as cluster, EtcdCluster(1, tls=True) as tls:
            self.run_program(cluster, tls)
            self.run_bench(cluster)

    def run_bench(self, cluster):
        """A short run of bench/etcd_txn_bench, so that it keeps working
        (its figures come from longer runs by hand: docs/benchmarks.md)."""
        if os.environ.get("ACCEL_ETCD_TESTS") or not os.path.exists(BENCH):
            return  # a selection of C tests; or benchmarks not configured
        r = subprocess.run([BENCH, cluster.endpoints(), "100", "2"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("txns/s", r.stdout)

    def run_program(self, cluster, tls):
        to_prog_r, to_prog_w = os.pipe()
        from_prog_r, from_prog_w = os.pipe()
        env = dict(os.environ,
                   ACCEL_ETCD_ENDPOINTS=cluster.endpoints(),
                   ACCEL_ETCD_TLS_ENDPOINTS=tls.endpoints(),
                   ACCEL_ETCD_TLS_CA=tls.ca_file,
                   ACCEL_ETCD_TLS_CERT=tls.client_cert,
                   ACCEL_ETCD_TLS_KEY=tls.client_key,
                   ACCEL_ETCD_CTL="%d,%d" % (to_prog_r, from_prog_w))
        argv = [PROGRAM] + os.environ.get("ACCEL_ETCD_TESTS", "").split()
        log = []
        try:
            proc = subprocess.Popen(argv, env=env,
                                    pass_fds=(to_prog_r, from_prog_w))
        finally:
            os.close(to_prog_r)
            os.close(from_prog_w)
        server = threading.Thread(
            target=serve_control,
            args=(cluster, from_prog_r, to_prog_w, log), daemon=True)
        server.start()
        try:
            rc = proc.wait(timeout=800)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        server.join(timeout=30)
        self.assertEqual(rc, 0, "test_etcd_client failed (exit %d); "
                         "control channel: %s" % (rc, log))


if __name__ == "__main__":
    unittest.main()
