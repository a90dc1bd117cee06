# SPDX-License-Identifier: MIT
"""The store's contract (src/daemon/store/store.h) against both backends:
starts one etcd member (etcd_harness.py) and runs the C test program
test_store_backends, which runs each test function once on a fresh SQLite
file and once on a fresh prefix of that member (ACCEL_ETCD_ENDPOINTS).
One member is enough here: what is tested is the store's behaviour, not
etcd's replication (test_etcd_client.py and test_cluster.py kill members).

ACCEL_STORE_TESTS="events_query_etcd deletes_sqlite" runs only those.
Fails (does not skip) when etcd or etcdctl is missing.
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from etcd_harness import EtcdCluster  # noqa: E402

SOURCE_DIR = os.environ.get(
    "ACCEL_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("ACCEL_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
PROGRAM = os.path.join(BUILD_DIR, "tests", "cluster", "test_store_backends")


class StoreBackendsTest(unittest.TestCase):
    def test_store_backends(self):
        self.assertTrue(os.access(PROGRAM, os.X_OK),
                        "%s is not built" % PROGRAM)
        with EtcdCluster(1) as cluster:
            env = dict(os.environ, ACCEL_ETCD_ENDPOINTS=cluster.endpoints())
            argv = [PROGRAM] + os.environ.get("ACCEL_STORE_TESTS", "").split()
            try:
                r = subprocess.run(argv, env=env, timeout=600,
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
            except subprocess.TimeoutExpired as e:
                self.fail("test_store_backends did not finish in 600 s: %s"
                          % (e.output or ""))
            sys.stdout.write(r.stdout)
            self.assertEqual(r.returncode, 0,
                             "test_store_backends failed (exit %d)"
                             % r.returncode)


if __name__ == "__main__":
    unittest.main()
