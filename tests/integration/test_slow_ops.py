# SPDX-License-Identifier: MIT
"""Requests that wait on a slow operation hold no server thread (SPEC 5.6):
stops of apps that ignore SIGTERM run while other requests answer at once,
a stop longer than 10 s answers (200, code 200) with the state it reached and goes on
by itself, and SIGTERM makes acceld exit at once whatever is parked.
Uses the fake NVML and the runtime of test_runtime.py."""
import os
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import BUILD_DIR  # noqa: E402
from test_runtime import (GPU_A, NODE, RuntimeBase, group_alive,  # noqa: E402
                          manifest)

FAKE_NVML = os.path.join(BUILD_DIR, "fake", "libnvidia-ml.so.1")
STUBBORN = ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"]


def ignores_term(pid):
    """The process has set SIGTERM to ignored (its trap is in place)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("SigIgn:"):
                    return int(line.split()[1], 16) & (1 << 14) != 0
    except OSError:
        pass
    return False


@unittest.skipUnless(os.path.exists(FAKE_NVML), "fake NVML not built")
class SlowOpsTest(RuntimeBase):
    def setUp(self):
        super().setUp()
        self.pgids = []

    def tearDown(self):
        for g in self.pgids:
            try:
                os.killpg(g, signal.SIGKILL)
            except OSError:
                pass
        if self.d is not None and self.d.proc is None:
            self.d.close()  # acceld already gone: nothing to ask it
            self.d = None
        super().tearDown()

    def stubborn(self, name, stop):
        a = self.install(manifest(name, STUBBORN, stop=stop), gpu=None)
        self.assertEqual(a["state"], "running", a)
        self.pgids.append(a["pid"])
        # a stop before the trap is set would end it at once
        self.wait_for(lambda: ignores_term(a["pid"]), name + " trapping TERM")
        return a

    def test_four_stops_do_not_block_other_requests(self):
        self.set_mode(GPU_A, "MemorySlice")
        for i in range(4):
            self.stubborn("s%d" % i, stop=3)
        answers = {}

        def stop(name):
            t = time.monotonic()
            answers[name] = (self.d.http("POST", "/api/apps/%s/suspend" %
                                         name, timeout=30),
                             time.monotonic() - t)
        threads = [threading.Thread(target=stop, args=("s%d" % i,))
                   for i in range(4)]
        for t in threads:
            t.start()
        self.wait_for(lambda: all(self.app("s%d" % i)["state"] == "stopping"
                                  for i in range(4)), "four stops under way")
        slow = []
        for _ in range(20):
            t = time.monotonic()
            st, b = self.d.http("GET", "/api/apps", timeout=10)
            self.assertEqual(st, 200)
            st, b = self.d.http("GET", "/healthz", token="", timeout=10)
            dt = time.monotonic() - t
            if dt > 1.0:
                slow.append(dt)
        self.assertEqual(slow, [], "requests waited behind the stops")
        for t in threads:
            t.join(30)
        for i in range(4):
            (st, b), dt = answers["s%d" % i]
            self.assertEqual(st, 200, b)
            self.assertEqual(b["data"]["state"], "stopped", b)
            self.assertGreater(dt, 2.5, (dt, b, self.d.log()[-3000:]))  # it waited

    def test_stop_over_ten_seconds_answers_with_the_state_reached(self):
        a = self.stubborn("long", stop=14)
        t = time.monotonic()
        st, b = self.d.http("POST", "/api/apps/long/suspend", timeout=30)
        dt = time.monotonic() - t
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["state"], "stopping", b)
        self.assertGreater(dt, 9.0)
        self.assertLess(dt, 12.5)
        # the stop goes on by itself: SIGKILL at 14 s, then released
        self.wait_state("long", "stopped", timeout=20)
        self.assertFalse(group_alive(a["pid"]))

    def test_client_gone_during_a_stop(self):
        """The client of a parked stop leaves: its connection is freed at
        once, the stop goes on and ends, acceld keeps answering."""
        import socket
        self.stubborn("left", stop=2)
        s = socket.create_connection(("127.0.0.1", self.d.port), timeout=5)
        s.sendall(("POST /api/apps/left/suspend HTTP/1.1\r\nHost: x\r\n"
                   "Authorization: Bearer %s\r\nContent-Length: 0\r\n\r\n"
                   % self.d.token).encode())
        self.wait_state("left", "stopping")
        s.close()
        self.wait_state("left", "stopped", timeout=15)
        st, b = self.d.http("GET", "/healthz", token="")
        self.assertEqual(st, 200)
        self.assertIsNone(self.d.proc.poll())

    def test_sigterm_exits_at_once_with_a_parked_stop(self):
        self.stubborn("held", stop=60)
        out = {}

        def stop():
            try:
                out["r"] = self.d.http("POST", "/api/apps/held/suspend",
                                       timeout=30)
            except OSError as e:
                out["r"] = e
        th = threading.Thread(target=stop)
        th.start()
        self.wait_state("held", "stopping")
        time.sleep(0.3)
        t = time.monotonic()
        self.d.proc.send_signal(signal.SIGTERM)
        self.d.proc.wait(10)
        self.assertLess(time.monotonic() - t, 2.5)
        self.d.proc = None
        th.join(10)
        self.assertFalse(th.is_alive())
        r = out["r"]
        if not isinstance(r, OSError):  # answered with the state reached
            self.assertEqual(r[0], 200, r)
            self.assertEqual(r[1]["data"]["state"], "stopping", r)


if __name__ == "__main__":
    unittest.main()
