#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""scripts/setup.sh waits for the package manager's lock (issue 40 item 6).

Another installer holding the lock made setup.sh fail at once (`apt-get
update`: "Could not get lock .../lists/lock"). Here apt's configuration
(APT_CONFIG, apt's own mechanism) points its dpkg database, lists and cache
at a temporary directory with no sources and no installed packages, and
this test holds the lists and dpkg locks there the way apt does (fcntl):
setup.sh must say that it waits, keep waiting while the locks are held,
then go on to apt (which, with no sources, cannot find the packages).
Nothing of the machine's own apt state is touched. Root only (apt-get
takes its locks as root); skipped elsewhere.
"""
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("ACCEL_SOURCE_DIR",
                     os.path.join(os.path.dirname(__file__), "..", ".."))


def main():
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        print("skipped: needs root and apt-get")
        return 77
    tmp = tempfile.mkdtemp(prefix="accel-setup-lock-")
    proc = None
    try:
        for d in ("dpkg", "lists/partial", "cache/archives/partial",
                  "sources.list.d", "state"):
            os.makedirs(os.path.join(tmp, d))
        open(os.path.join(tmp, "dpkg/status"), "w").close()
        open(os.path.join(tmp, "sources.list"), "w").close()
        conf = os.path.join(tmp, "apt.conf")
        with open(conf, "w") as f:
            f.write(f'''Dir::State "{tmp}/state";
Dir::State::status "{tmp}/dpkg/status";
Dir::State::Lists "{tmp}/lists";
Dir::Cache "{tmp}/cache";
Dir::Etc::sourcelist "{tmp}/sources.list";
Dir::Etc::sourceparts "{tmp}/sources.list.d";
''')
        held = []
        for p in ("lists/lock", "dpkg/lock-frontend", "dpkg/lock"):
            f = open(os.path.join(tmp, p), "a")
            fcntl.lockf(f, fcntl.LOCK_EX)
            held.append(f)
        env = dict(os.environ, APT_CONFIG=conf, APT_LOCK_WAIT="120")
        out = open(os.path.join(tmp, "out"), "w+")
        proc = subprocess.Popen(
            ["bash", os.path.join(SRC, "scripts/setup.sh"),
             os.path.join(tmp, "build")],
            stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)

        def text():
            out.seek(0)
            return out.read()

        deadline = time.monotonic() + 60
        while "waiting for the package manager's lock" not in text():
            if proc.poll() is not None or time.monotonic() > deadline:
                print("FAIL: setup.sh did not say it waits for the lock:\n"
                      + text())
                return 1
            time.sleep(0.1)
        line = [ln for ln in text().splitlines() if "waiting for" in ln][0]
        if f"held by process {os.getpid()}" not in line:
            print("FAIL: the line does not name the holder: " + line)
            return 1
        time.sleep(2)  # still waiting while held: not a fixed wait for a result
        if proc.poll() is not None:
            print("FAIL: setup.sh ended while the lock was held:\n" + text())
            return 1
        for f in held:
            f.close()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            print("FAIL: setup.sh still waits after the lock was freed:\n"
                  + text())
            return 1
        t = text()
        if "Could not get lock" in t or "Unable to locate package" not in t:
            print("FAIL: setup.sh did not go on to apt once the lock was "
                  "free:\n" + t)
            return 1
        print("ok: " + line)
        return 0
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
