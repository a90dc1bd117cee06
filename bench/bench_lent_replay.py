#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What apps lent and got through elastic memory, replayed at acceld's
start (SPEC 4.4; docs/elastic.md, "Limits today"; issue 46): the records
are persisted through the memory.reclaim events, which carry both apps'
totals, and reclaim_start reads this node's kept events back. The worst
case is a store whose 20,000 kept events (STATE_EVENTS_KEEP) are all
memory.reclaim, among 256 apps (LENTBOOK_MAX). The script times acceld's
start (the process started to the first answer of GET /api/health) with
such a store, against one with as many events of another kind (read by
the store's load, never replayed), the median of RUNS starts each.

usage: bench/bench_lent_replay.py BUILD_DIR [RUNS]
"""
import json
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INVENTORY = os.path.join(SRC, "examples", "homelab.yaml")
EVENTS = 20000
APPS = 256


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_once(acceld, data_dir):
    """Seconds from the process's start to its first HTTP answer."""
    port = free_port()
    t0 = time.monotonic()
    p = subprocess.Popen([acceld, "--data-dir", data_dir, "--listen",
                          "127.0.0.1:%d" % port, "--inventory", INVENTORY,
                          "--node-name", "homelab", "--no-cgroups"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/api/health"
                                       % port, timeout=1).read()
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                if p.poll() is not None:
                    raise RuntimeError("acceld exited with %d" % p.returncode)
                time.sleep(0.002)
        return time.monotonic() - t0
    finally:
        p.terminate()
        p.wait()


def fill(data_dir, kind):
    """EVENTS events of kind: lends among APPS apps, totals growing."""
    db = sqlite3.connect(os.path.join(data_dir, "accel.db"))
    now = int(time.time() * 1000)
    rows = []
    for i in range(EVENTS):
        giver, asker = "app%d" % (i % APPS), "app%d" % ((i + 1) % APPS)
        data = {"asker": asker, "giver": giver, "bytes": 1 << 30,
                "milliseconds": 5, "stopped": False,
                "giverLent": {"bytes": (i // APPS + 1) << 30,
                              "count": i // APPS + 1},
                "askerGot": {"bytes": (i // APPS + 1) << 30,
                             "count": i // APPS + 1},
                "owner": "admin"}
        rows.append((now - EVENTS + i, kind, giver, "homelab", "GPU-x",
                     "%s gave back 1.0 GiB on GPU-x for %s" % (giver, asker),
                     json.dumps(data)))
    db.executemany("INSERT INTO events (ts_ms, kind, app, node, device, "
                   "message, data) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    acceld = os.path.join(sys.argv[1], "acceld")
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    for kind in ("memory.reclaim", "app.state"):
        tmp = tempfile.mkdtemp(prefix="lent-replay-")
        try:
            start_once(acceld, tmp)  # makes the store
            fill(tmp, kind)
            ts = [start_once(acceld, tmp) for _ in range(runs)]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print("%d events of %s: start to first answer, median %.1f ms, "
              "min %.1f, max %.1f (%d starts)"
              % (EVENTS, kind, statistics.median(ts) * 1000,
                 min(ts) * 1000, max(ts) * 1000, runs))


if __name__ == "__main__":
    main()
