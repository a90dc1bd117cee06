# SPDX-License-Identifier: MIT
"""An app's disk is bounded (SPEC 8.2, issue 25 item 2), through the real
binaries:

- an app that writes far past the log cap while it runs: acceld writes its
  log (the app holds a pipe, which it cannot seek), rotates it at the cap,
  and its logs stay bounded (<app>.log, .log.1, .log.2, each at most the
  cap); after an acceld SIGKILL and restart the running app's output still
  reaches its log and the app was not killed by SIGPIPE;
- an app whose home goes past its limitedDisk is stopped and ends
  `failed` with the reason said (the watched tier), in its status and in
  the events; the tier is reported for the node, the app and in
  `accelctl gpu status`;
- below the data directory's reserve (ACCEL_DISK_RESERVE) an install and a
  resume are refused with 507, naming the free space and the reserve, and
  nothing changes; a reserve that is not a quantity is refused naming it."""
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_runtime import (RuntimeBase, alive,  # noqa: E402
                          manifest)

MiB = 1 << 20
CAP = 10 * MiB  # APPLOG_CAP_DEFAULT
KEEP = 2        # APPLOG_KEEP


class LogTest(RuntimeBase):
    def log_files(self, name):
        logs = os.path.join(self.d.data_dir, "logs")
        out = {}
        for f in os.listdir(logs):
            if f == name + ".log" or f.startswith(name + ".log."):
                try:
                    out[f] = os.stat(os.path.join(logs, f)).st_size
                except OSError:
                    pass
        return out

    def read_log(self, name):
        try:
            with open(os.path.join(self.d.data_dir, "logs", name + ".log"),
                      "rb") as f:
                return f.read()
        except OSError:
            return b""

    def test_log_is_rotated_while_the_app_writes(self):
        # 60,000,000 bytes as fast as the app can write them, then a marker
        cmd = ("head -c 60000000 /dev/zero | tr '\\0' x; echo; "
               "echo all-written; exec sleep 1000")
        self.install(manifest("chatty", ["sh", "-c", cmd]))
        biggest = [0]

        def written():
            files = self.log_files("chatty")
            biggest[0] = max(biggest[0], sum(files.values()))
            return b"all-written" in self.read_log("chatty") and files
        files = self.wait_for(written, "the app's output to be logged",
                              timeout=60)
        self.assertEqual(sorted(files), ["chatty.log", "chatty.log.1",
                                         "chatty.log.2"], files)
        for f, size in files.items():
            self.assertLessEqual(size, CAP, files)
        self.assertLessEqual(biggest[0], (KEEP + 1) * CAP, files)
        self.assertEqual(self.app("chatty")["state"], "running")
        self.stop_app("chatty")

    def test_the_app_holds_a_pipe_it_cannot_seek(self):
        # a hostile app would clear O_APPEND and seek far ahead of a log
        # file it held: its stdout is a pipe, which cannot be seeked
        prog = ("import os, errno\n"
                "try:\n"
                "    os.lseek(1, 1 << 40, 0)\n"
                "    print('seeked', flush=True)\n"
                "except OSError as e:\n"
                "    print('cannot seek', errno.errorcode[e.errno], "
                "flush=True)\n")
        self.install(manifest("seeker", ["python3", "-c", prog]))
        self.wait_state("seeker", "stopped")
        log = self.wait_for(lambda: b"seek" in self.read_log("seeker") and
                            self.read_log("seeker"), "the app's output")
        self.assertIn(b"cannot seek ESPIPE", log)
        self.assertLess(self.log_files("seeker")["seeker.log"], 4096)

    def test_output_still_logged_after_an_acceld_restart(self):
        cmd = "i=0; while :; do echo line $i; i=$((i+1)); sleep 0.02; done"
        a = self.install(manifest("ticker", ["sh", "-c", cmd]))
        pid = a["pid"]
        self.wait_for(lambda: b"line 3\n" in self.read_log("ticker"),
                      "the first lines")
        self.d.proc.kill()
        self.d.proc.wait()
        self.d.proc = None
        self.d.start()
        seen = self.read_log("ticker").count(b"\n")
        self.wait_for(lambda: self.read_log("ticker").count(b"\n") >
                      seen + 5, "lines written after the restart")
        self.assertTrue(alive(pid), "the app died with acceld (SIGPIPE?)")
        self.assertEqual(self.app("ticker")["state"], "running")
        self.stop_app("ticker")


def disk_manifest(name, cmd, limit="4Mi"):
    m = manifest(name, cmd)
    m["spec"]["accelerator"][0]["limitedDisk"] = limit
    return m


class DiskWatchTest(RuntimeBase):
    def test_home_past_limited_disk_is_stopped_with_the_reason(self):
        a = self.install(disk_manifest("filler", [
            "sh", "-c", "echo ready; "
            "head -c 8000000 /dev/urandom > \"$HOME/filler.bin\"; "
            "exec sleep 1000"]))
        self.assertEqual(a["enforcement"]["disk"], "watched", a)
        pid = a["pid"]
        a = self.wait_state("filler", "failed", timeout=20)
        self.assertIn("past limitedDisk 4Mi", a.get("reason", ""), a)
        self.assertIn("/home/", a["reason"])
        self.assertEqual(a["allocations"], [])
        self.assertFalse(alive(pid))
        ev = [e["message"] for e in self.events("app.state")
              if e.get("app") == "filler"]
        self.assertTrue(any("stopping: stopped: its home" in m and
                            "past limitedDisk 4Mi" in m for m in ev), ev)

    def test_home_within_the_limit_keeps_running(self):
        self.install(disk_manifest("small", [
            "sh", "-c", "head -c 100000 /dev/zero > \"$HOME/small.bin\"; "
            "echo written; exec sleep 1000"], limit="64Mi"))
        log = os.path.join(self.d.data_dir, "logs", "small.log")
        def written():
            try:
                with open(log, "rb") as f:
                    return b"written" in f.read()
            except OSError:
                return False
        self.wait_for(written, "the write")
        # three passes of the watch (one a second) find nothing to stop
        time.sleep(3.0)
        self.assertEqual(self.app("small")["state"], "running")
        self.stop_app("small")

    def test_the_tier_is_reported(self):
        st, b = self.d.http("GET", "/api/compute-resources")
        node = [n for n in b["data"] if n["nodeName"] == "rt"][0]
        self.assertEqual(node["enforcement"]["disk"], "watched")
        # an admin's run.user app has that user's home: not measured
        m = manifest("asuser", ["sh", "-c", "sleep 1000"])
        m["run"]["user"] = "nobody"
        a = self.install(m)
        self.assertEqual(a["enforcement"]["disk"], "none", a)
        self.assertIn("run.user", a["enforcement"]["reasons"]["disk"])
        r = self.d.ctl("gpu", "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(", disk watched", r.stdout)
        self.stop_app("asuser")


class ReserveTest(RuntimeBase):
    acceld_env = {"ACCEL_DISK_RESERVE": "1Ei"}  # above any disk's room

    def test_install_refused_below_the_reserve(self):
        st, b = self.d.http("POST", "/api/apps", {"manifest": manifest(
            "big", ["sh", "-c", "sleep 1000"])})
        self.assertEqual(st, 507, b)
        self.assertEqual(b.get("error"), "insufficient-storage", b)
        msg = b.get("message", "")
        self.assertIn("free, not more than the reserve of 1.0 EiB", msg)
        self.assertIn("ACCEL_DISK_RESERVE", msg)
        self.assertIn(self.d.data_dir, msg)
        st, b = self.d.http("GET", "/api/apps/big")
        self.assertEqual(st, 404, b)  # nothing was installed

    def test_resume_refused_too(self):
        # installed while there is room (no reserve), then the reserve rises
        self.d.stop()
        self.d.env["ACCEL_DISK_RESERVE"] = "0"
        self.d.start()
        self.install(manifest("later", ["sh", "-c", "sleep 1000"]))
        self.stop_app("later")
        self.d.stop()
        self.d.env["ACCEL_DISK_RESERVE"] = "1Ei"
        self.d.start()
        st, b = self.d.http("POST", "/api/apps/later/resume", {})
        self.assertEqual(st, 507, b)
        self.assertIn("reserve", b.get("message", ""))
        self.assertEqual(self.app("later")["state"], "stopped")


class BadReserveTest(RuntimeBase):
    acceld_env = {"ACCEL_DISK_RESERVE": "lots"}

    def test_a_reserve_that_is_no_quantity_is_refused_naming_it(self):
        st, b = self.d.http("POST", "/api/apps", {"manifest": manifest(
            "big", ["sh", "-c", "sleep 1000"])})
        self.assertEqual(st, 500, b)
        self.assertIn('ACCEL_DISK_RESERVE="lots" is not a quantity',
                      b.get("message", ""))
        self.assertEqual(self.d.http("GET", "/api/apps/big")[0], 404)


if __name__ == "__main__":
    unittest.main()
