# SPDX-License-Identifier: MIT
"""An app's disk is bounded (SPEC 8.2, issue 25 item 2), through the real
binaries:

- an app that writes far past the log cap while it runs: acceld writes its
  log (the app holds a pipe, which it cannot seek), rotates it at the cap,
  and its logs stay bounded (<app>.log, .log.1, .log.2, each at most the
  cap); after an acceld SIGKILL and restart the running app's output still
  reaches its log and the app was not killed by SIGPIPE."""
import os
import sys
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


if __name__ == "__main__":
    unittest.main()
