# SPDX-License-Identifier: MIT
"""A randomized fault test with a checker, in the manner of Jepsen (issue
19 item 3). Three machines (netlab), each an etcd member and an acceld
agent; CLIENTS threads send random installs, resumes, stops, unbinds,
uninstalls, mode switches and quota changes through random nodes for
SECONDS, while the nemesis (the main thread) kills and restarts agents and
etcd members and cuts and heals links (both ways, one way, one link).
Every request and answer goes to a history file; the checker then holds
the history, the final etcd state and every node's view to:

1. no card over-allocated (a MemorySlice card's slices within its memory,
   a whole-card binding alone on its card): in etcd, sampled during the
   run and at the end, and in every view at the end;
2. no Exclusive card with two holders (the same places);
3. every acknowledged change present at the end, unless a later request
   (acknowledged or not: one that failed may have applied) undid it;
4. no app's process running on two machines (sampled during the run and
   at the end, by the processes' network namespaces);
5. nothing released on an unreachable node's behalf: the allocation rows of
   a node killed or cut off both ways, taken once the others see it
   unreachable, are all still in etcd just before it returns.

Environment: ACCEL_JEPSEN_SECONDS (default 60), ACCEL_JEPSEN_SEED (default:
from the clock; printed at the start and on failure: the same seed replays
the same schedule of operations and faults, though not the same
interleaving of threads), ACCEL_JEPSEN_CLIENTS (default 8, 8-16).

The history (JSON lines: one per request with its answer, one per fault)
lives in TMPDIR while the test runs; it is removed when the test passes
and kept, its path printed, when it fails (with the seed and every
violation), each agent's log beside it (<history>.<node>.log). The counts go to stderr: operations, acknowledged, refused
(a 4xx: a check, a conflict), unavailable (503), errors (no answer, 5xx),
violations."""
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netlab  # noqa: E402

netlab.enter_private_net()

from cluster_harness import GiB, LEASE_TTL, Cluster, manifest  # noqa: E402

SECONDS = float(os.environ.get("ACCEL_JEPSEN_SECONDS", "60"))
SEED = int(os.environ.get("ACCEL_JEPSEN_SEED", str(int(time.time()))))
CLIENTS = int(os.environ.get("ACCEL_JEPSEN_CLIENTS", "8"))
APPS = 12                    # app names the clients share (collisions)
NODES = ["n1", "n2", "n3"]
CARD_MEMORY = {"excl": 24 * GiB, "mem": 16 * GiB}   # cluster_harness's
USER = "alice"               # whose quota the clients change
UNSURE_S = 10.0              # an unanswered write may apply this much later


def card_memory(dev):
    return CARD_MEMORY[dev.rsplit("-", 1)[1]]


class History:
    """The history file: one JSON object a line, written under a lock."""

    def __init__(self):
        fd, self.path = tempfile.mkstemp(prefix="accel-jepsen-%d-" % SEED,
                                         suffix=".jsonl")
        self.f = os.fdopen(fd, "w")
        self.lock = threading.Lock()
        self.ops = []

    def add(self, rec):
        with self.lock:
            self.f.write(json.dumps(rec, sort_keys=True) + "\n")
            self.f.flush()
            if rec.get("kind") == "op":
                self.ops.append(rec)

    def close(self, keep):
        self.f.close()
        if not keep:
            os.unlink(self.path)


def outcome(st, b):
    """ok (acknowledged), refused (4xx: checked and said no), unavailable
    (503: etcd did not answer; may have applied), error (no answer or
    another 5xx: may have applied)."""
    if st == 200 and (b or {}).get("code", 200) == 200:
        return "ok"
    if 400 <= st < 500 or (st == 200 and (b or {}).get("code") == 422):
        return "refused"
    if st == 503:
        return "unavailable"
    if st == 0 and "ConnectionRefused" in (b or {}).get("error", ""):
        return "down"  # its agent was down: never sent, cannot apply
    return "error"


class Client(threading.Thread):
    """One client: random operations through random nodes until the
    deadline, each recorded with its answer."""

    def __init__(self, t, i, deadline):
        super().__init__(daemon=True)
        self.t, self.i, self.deadline = t, i, deadline
        self.rng = random.Random(SEED * 1000 + i)

    def run(self):
        while time.monotonic() < self.deadline:
            try:
                self.one()
            except Exception as e:  # noqa: BLE001 (recorded, then on)
                self.t.hist.add({"kind": "client-crash", "client": self.i,
                                 "error": repr(e)})
            time.sleep(self.rng.uniform(0, 0.05))

    def binding(self):
        node = self.rng.choice(NODES)
        if self.rng.random() < 0.5:
            return [{"nodeName": node, "deviceId": node + "-excl"}]
        return [{"nodeName": node, "deviceId": node + "-mem",
                 "memory": self.rng.choice([2, 4, 6]) * GiB}]

    def one(self):
        r = self.rng
        app = "j%d" % r.randrange(APPS)
        node = r.choice(NODES)
        op = r.choices(["install", "resume", "stop", "unbind", "uninstall",
                        "mode", "quota"], [5, 3, 3, 2, 2, 1, 1])[0]
        args = {}
        if op == "install":
            m = manifest(app, "%dGi" % r.choice([2, 4, 6]),
                         run=["/bin/sleep", self.t.tag(app)])
            body = {"manifest": m}
            if r.random() < 0.6:
                body["computeBinding"] = self.binding()
            args = {"binding": body.get("computeBinding")}
            req = ("POST", "/api/apps", body)
        elif op == "resume":
            body = {}
            if r.random() < 0.5:
                body["computeBinding"] = self.binding()
            args = {"binding": body.get("computeBinding")}
            req = ("POST", "/api/apps/%s/resume" % app, body)
        elif op == "stop":
            req = ("POST", "/api/apps/%s/suspend" % app, None)
        elif op == "unbind":
            req = ("DELETE", "/api/apps/%s/compute-resources/bindings" % app,
                   None)
        elif op == "uninstall":
            req = ("DELETE", "/api/apps/%s" % app, None)
        elif op == "mode":
            n = r.choice(NODES)
            dev = n + r.choice(["-excl", "-mem"])
            mode = r.choice(["Exclusive", "MemorySlice"])
            app = None
            args = {"device": dev, "mode": mode}
            req = ("PUT", "/api/compute-resources/nodes/%s/devices/%s/"
                   "support-type" % (n, dev), {"supportType": mode})
        else:
            app = None
            args = {"maxApps": r.randrange(1, 50)}
            req = ("PUT", "/api/users/" + USER, {"maxApps": args["maxApps"]})
        a = self.t.c.agent(node)
        t0 = time.monotonic()
        try:
            st, b = a.http(*req, timeout=30)
        except OSError as e:
            st, b = 0, {"error": repr(e)}
        t1 = time.monotonic()
        data = (b or {}).get("data")
        data = data if isinstance(data, dict) else {}
        self.t.hist.add({
            "kind": "op", "client": self.i, "op": op, "app": app,
            "node": node, "args": args, "start": round(t0 - self.t.t0, 4),
            "end": round(t1 - self.t.t0, 4), "status": st,
            "outcome": outcome(st, b),
            "answer": {k: (b or {}).get(k) for k in ("code", "error",
                                                     "message")},
            "state": data.get("state"),
            # a switch refused (422) may have stopped apps first: those it
            # names stopped, and those still stopping on their agents,
            # which release them once stopped (ops_device.c, SPEC 2.7)
            "stopped": sorted({x.get("appName") for k in (
                "stoppedApps", "blockedApps") for x in data.get(k) or []
                if isinstance(x, dict)}) if op == "mode" else []})


class Jepsen(unittest.TestCase):

    def setUp(self):
        print("jepsen: seed %d, %d clients, %.0f s" % (SEED, CLIENTS,
                                                      SECONDS),
              file=sys.stderr)
        self.rng = random.Random(SEED)
        self.violations = []
        self.hist = History()
        self.c = Cluster(NODES, net=True)
        st, b = self.c.agent("n1").http("POST", "/api/users",
                                        {"name": USER, "role": "member"})
        self.assertEqual(st, 200, b)
        self.down_members = set()
        self.cut = set()
        self.passed = False

    def tearDown(self):
        failed = not self.passed
        if failed:  # the agents' logs go with the history
            for n, a in self.c.agents.items():
                try:
                    with open(a.log_path, "rb") as f, open(
                            "%s.%s.log" % (self.hist.path, n), "wb") as o:
                        o.write(f.read())
                except OSError:
                    pass
            try:
                self.report()
            except Exception as e:  # never in the way of the cleanup
                print("jepsen: no report: %r" % e, file=sys.stderr)
        try:
            self.c.close()
        finally:
            self.hist.close(keep=failed)
            if failed:
                print("jepsen: FAILED, seed %d; history kept in %s" %
                      (SEED, self.hist.path), file=sys.stderr)

    def report(self):
        """On stderr, for each app a violation names: its operations and
        what each agent's log says of it. The history and logs are kept in
        $TMPDIR, but a CI run removes its temporary directory, and its
        output is all that is left."""
        named = sorted({w for v in getattr(self, "violations", [])
                        for w in v.replace(":", " ").split()
                        if w[:1] == "j" and w[1:].isdigit()})
        for app in named:
            print("jepsen: report: the operations of %s" % app,
                  file=sys.stderr)
            for o in self.hist.ops:
                if o["app"] == app:
                    print("  %8.3f-%8.3f %-9s via %s: %s %s %s" % (
                        o["start"], o["end"], o["op"], o["node"],
                        o["outcome"], o["state"] or "",
                        o["answer"].get("message") or ""), file=sys.stderr)
            for n, a in self.c.agents.items():
                try:
                    with open(a.log_path, errors="replace") as f:
                        lines = [x.rstrip() for x in f
                                 if " %s " % app in x or
                                 " %s:" % app in x]
                except OSError:
                    continue
                print("jepsen: report: %s's log on %s (last 40)" % (app, n),
                      file=sys.stderr)
                for x in lines[-40:]:
                    print("  " + x, file=sys.stderr)

    def tag(self, app):
        """The sleep argument of app's process: names it among every
        other process on the machine (pid of the test, app index)."""
        return "%d.%s" % (os.getpid(), app[1:].zfill(3))

    def violation(self, what):
        self.violations.append(what)
        self.hist.add({"kind": "violation", "what": what,
                       "at": round(time.monotonic() - self.t0, 3)})

    # -- observing -------------------------------------------------------

    def ctl(self, *args):
        """etcdctl through the members running and not cut off."""
        return self.c.etcd.etcdctl(*args, members=[
            i for i in range(3) if i not in self.cut and
            i not in self.down_members])

    def etcd_rows(self, kind, snap=None):
        """{key: row} of one kind; from snap (a snapshot()) when given."""
        rows = snap if snap is not None else self.snapshot("/accel/%s/" %
                                                           kind)
        pre = "/accel/%s/" % kind
        return {k: v for k, v in rows.items() if k.startswith(pre)}

    def snapshot(self, prefix="/accel/"):
        """Every row under prefix, read in one range: one revision (rows
        read in two ranges may straddle a change made between them)."""
        out = self.ctl("get", "--prefix", prefix).stdout
        lines = out.splitlines()
        rows = {}
        for i in range(0, len(lines) - 1, 2):
            try:
                rows[lines[i]] = json.loads(lines[i + 1])
            except ValueError:
                pass  # not a row of JSON (meta/schema)
        return rows

    def modes(self, snap=None):
        """device id -> its mode (etcd's row, else the inventory's)."""
        m = {n + "-excl": "Exclusive" for n in NODES}
        m.update({n + "-mem": "MemorySlice" for n in NODES})
        for row in self.etcd_rows("devices", snap).values():
            m[row["id"]] = row["support"]
        return m

    def check_cards(self, where, binds, modes):
        """binds: device -> [(app, memory)]. Invariants 1 and 2."""
        for dev, held in binds.items():
            apps = sorted({a for a, _ in held})
            if modes.get(dev) == "Exclusive" and len(apps) > 1:
                self.violation("%s: Exclusive card %s held by %s" %
                               (where, dev, apps))
            if any(mem == 0 for _, mem in held) and len(apps) > 1:
                self.violation("%s: whole card %s shared by %s" %
                               (where, dev, apps))
            total = sum(mem for _, mem in held)
            if total > card_memory(dev):
                self.violation("%s: card %s over-allocated: %d of %d bytes "
                               "(%s)" % (where, dev, total, card_memory(dev),
                                         held))

    def check_etcd_cards(self):
        snap = self.snapshot()
        binds = collections.defaultdict(list)
        for row in self.etcd_rows("allocs", snap).values():
            binds[row["device"]].append((row["app"], row["memory"]))
        self.check_cards("etcd", binds, self.modes(snap))

    def machine_of_pid(self, pid):
        try:
            ns = os.readlink("/proc/%d/ns/net" % pid)
        except OSError:
            return None
        for m in self.c.net.machines:
            if os.readlink(m.ns) == ns:
                return m.index
        return None

    def processes(self):
        """app -> {machine index: [pids]} of every live app process."""
        out = subprocess.run(["pgrep", "-a", "-f", "^/bin/sleep %d\\." %
                              os.getpid()], capture_output=True,
                             text=True).stdout
        procs = collections.defaultdict(lambda: collections.defaultdict(
            list))
        for line in out.splitlines():
            pid, _, tag = line.split()
            k = self.machine_of_pid(int(pid))
            if k is not None:
                procs["j%d" % int(tag.split(".")[1])][k].append(int(pid))
        return procs

    def check_processes(self):
        for app, where in self.processes().items():
            if len(where) > 1:
                self.violation("app %s runs on machines %s" %
                               (app, dict(where)))

    def sample(self):
        """Invariants 1, 2, 4 now (the nemesis calls it between faults)."""
        try:
            self.check_etcd_cards()
        except subprocess.SubprocessError:
            pass  # etcd without a quorum now: the next sample
        self.check_processes()

    # -- the nemesis -----------------------------------------------------

    def pause(self, lo, hi):
        end = time.monotonic() + self.rng.uniform(lo, hi)
        while time.monotonic() < end:
            self.sample()
            time.sleep(0.3)

    def fault(self, what, **kw):
        rec = {"kind": "fault", "fault": what,
               "at": round(time.monotonic() - self.t0, 3)}
        rec.update(kw)
        self.hist.add(rec)
        self.counts["faults"] += 1

    def away_rows(self, k):
        """The allocation rows of machine k's node, as etcd holds them."""
        node = NODES[k]
        return {key for key, row in self.etcd_rows("allocs").items()
                if row["node"] == node}

    def seen_away(self, k, timeout):
        """Wait until a node of another machine shows node k unreachable."""
        viewer = self.c.agent(NODES[(k + 1) % 3])
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if not self.c.nodes_of(viewer)[NODES[k]]["reachable"]:
                    return True
            except (OSError, KeyError):
                pass
            time.sleep(0.1)
        return False

    def hold_away(self, k, lo, hi):
        """Node k is away (killed, or cut both ways): once the others see
        it so, nothing of its allocations may go until it returns."""
        if not self.seen_away(k, LEASE_TTL + 4):
            self.pause(lo, hi)
            return
        rows = self.away_rows(k)
        self.pause(lo, hi)
        gone = rows - self.away_rows(k)
        if gone:
            self.violation("released on unreachable %s's behalf: %s" %
                           (NODES[k], sorted(gone)))

    def nemesis_step(self):
        r = self.rng
        what = r.choices(["agent-kill", "member-kill", "leader-kill",
                          "partition", "one-way", "link", "calm"],
                         [3, 2, 1, 3, 2, 2, 1])[0]
        k = r.randrange(3)
        c = self.c
        if what == "agent-kill":
            self.fault(what, node=NODES[k])
            c.agent(NODES[k]).kill9()
            self.hold_away(k, 1, 4)
            c.agent(NODES[k]).restart()
        elif what in ("member-kill", "leader-kill"):
            if what == "leader-kill":
                k = c.etcd.leader()
            self.fault(what, member=k)
            c.etcd.kill(k)
            self.down_members.add(k)
            self.pause(1, 5)
            c.etcd.restart(k, timeout=60)
            self.down_members.discard(k)
        elif what == "partition":
            self.fault(what, machine=k)
            self.cut.add(k)
            c.net.isolate(k)
            self.hold_away(k, 1, 5)
            c.net.heal()
            self.cut.discard(k)
        elif what == "one-way":
            self.fault(what, machine=k, dropped="inbound")
            c.net.isolate(k, inbound=True, outbound=False)
            self.pause(2, 6)
            c.net.heal()
        elif what == "link":
            o = (k + 1 + r.randrange(2)) % 3
            self.fault(what, machines=[k, o])
            c.net.cut(k, o)
            c.net.cut(o, k)
            self.pause(2, 6)
            c.net.heal()
        else:
            self.fault(what)
            self.pause(1, 3)
        self.fault("heal")
        self.pause(0.5, 2)

    # -- the checker -----------------------------------------------------

    def converge(self):
        """Every agent up and reachable, every view the same as etcd's."""
        c = self.c

        def views():
            want = set(self.etcd_rows("apps"))
            want = {k.rsplit("/", 1)[1] for k in want}
            for a in c.agents.values():
                st, b = a.http("GET", "/api/apps")
                if st != 200 or {x["name"] for x in b["data"]} != want:
                    return False
                if not all(x["reachable"] for x in c.nodes_of(a).values()):
                    return False
                # releasing too: an acknowledged uninstall may pass
                # through it (its acceld restarted mid-stop, or the stop
                # had to kill) until its node's reconcile pass deletes the
                # app; checked in that window it would read as undone
                if any(x["state"] in ("unknown", "resuming", "stopping",
                                      "uninstalling", "releasing")
                       for x in b["data"]):
                    return False
            return True
        try:
            c.wait(views, "every view equal to etcd, every app settled",
                   timeout=90, every=0.5)
        except AssertionError as e:
            self.violation("did not converge within 90 s")
            self.dump_state(str(e))

    def dump_state(self, why):
        """Every view's apps and etcd's rows, into the history."""
        rec = {"kind": "final-state", "why": why[-6000:], "views": {},
               "etcd": {k: self.etcd_rows(k) for k in ("apps", "allocs",
                                                       "agents")}}
        for n, a in self.c.agents.items():
            try:
                st, b = a.http("GET", "/api/apps")
                rec["views"][n] = [{k: x.get(k) for k in (
                    "name", "state", "reason", "allocations")}
                    for x in (b or {}).get("data") or []]
            except OSError as e:
                rec["views"][n] = repr(e)
        self.hist.add(rec)

    def check_views(self):
        modes = self.modes()
        for n, a in self.c.agents.items():
            binds = collections.defaultdict(list)
            for node in self.c.nodes_of(a).values():
                for d in node["devices"]:
                    for x in d.get("bindings") or []:
                        binds[d["id"]].append((x["appName"], x["memory"]))
                    if d.get("supportType") != modes.get(d["id"]):
                        self.violation("view of %s: %s is %s, etcd says %s"
                                       % (n, d["id"], d.get("supportType"),
                                          modes.get(d["id"])))
            self.check_cards("view of " + n, binds, modes)

    def later(self, rec, ops):
        """May one of ops have applied after rec, undoing it? One that
        could change something (acknowledged; unanswered: a 503, an error;
        a mode switch refused after it stopped apps) and did not end before
        rec began; an unanswered one up to UNSURE_S before too (a timed-out
        write may still apply later)."""
        for o in ops:
            if o is rec or (o["outcome"] not in ("ok", "unavailable",
                                                 "error") and
                            not o.get("stopped")):
                continue
            slack = 0 if o["outcome"] == "ok" else UNSURE_S
            if o["end"] + slack > rec["start"]:
                return True
        return False

    def check_acknowledged(self):
        """Invariant 3 against etcd's final rows."""
        apps = {k.rsplit("/", 1)[1]: v
                for k, v in self.etcd_rows("apps").items()}
        allocs = collections.defaultdict(set)
        for row in self.etcd_rows("allocs").values():
            allocs[row["app"]].add(row["device"])
        by_app = collections.defaultdict(list)
        for o in self.hist.ops:
            if o["app"]:
                by_app[o["app"]].append(o)
        # a mode switch stops the apps on its card: it may undo a binding
        switches = [o for o in self.hist.ops if o["op"] == "mode"]
        for app, ops in by_app.items():
            for o in ops:
                if o["outcome"] != "ok" or self.later(o, ops):
                    continue
                if o["op"] == "install" and app not in apps:
                    self.violation("acknowledged install of %s lost" % app)
                elif o["op"] == "uninstall" and app in apps:
                    self.violation("acknowledged uninstall of %s undone" %
                                   app)
                elif o["op"] in ("stop", "unbind") and allocs[app]:
                    self.violation("acknowledged %s of %s undone: still "
                                   "on %s" % (o["op"], app,
                                              sorted(allocs[app])))
                elif o["op"] in ("install", "resume") and \
                        o["state"] in ("running", "resuming") and \
                        not allocs[app] and not self.later(o, switches):
                    self.violation("acknowledged %s of %s lost its cards" %
                                   (o["op"], app))
        modes = self.modes()
        mode_ops = [o for o in self.hist.ops if o["op"] == "mode"]
        for o in mode_ops:
            same = [x for x in mode_ops
                    if x["args"]["device"] == o["args"]["device"]]
            if o["outcome"] == "ok" and not self.later(o, same) and \
                    modes[o["args"]["device"]] != o["args"]["mode"]:
                self.violation("acknowledged mode %s of %s lost (%s)" % (
                    o["args"]["mode"], o["args"]["device"],
                    modes[o["args"]["device"]]))
        quota = [o for o in self.hist.ops if o["op"] == "quota"]
        st, b = self.c.agent("n1").http("GET", "/api/users")
        users = {u["name"]: u for u in (b or {}).get("data") or []}
        for o in quota:
            if o["outcome"] == "ok" and not self.later(o, quota) and \
                    users.get(USER, {}).get("maxApps") != o["args"]["maxApps"]:
                self.violation("acknowledged maxApps %d of %s lost (%s)" % (
                    o["args"]["maxApps"], USER,
                    users.get(USER, {}).get("maxApps")))

    def test_random_faults_keep_the_invariants(self):
        self.t0 = time.monotonic()
        self.hist.add({"kind": "start", "seed": SEED, "clients": CLIENTS,
                       "seconds": SECONDS, "wall": time.time()})
        self.counts = collections.Counter()
        deadline = self.t0 + SECONDS
        clients = [Client(self, i, deadline) for i in range(CLIENTS)]
        for cl in clients:
            cl.start()
        while time.monotonic() < deadline:
            self.nemesis_step()
        for cl in clients:
            cl.join(60)
        self.c.net.heal()
        self.cut = set()
        for m in self.c.etcd.members:
            if not m.running():
                self.c.etcd.restart(m.index, timeout=60)
        self.down_members = set()
        self.converge()
        self.check_etcd_cards()
        self.check_views()
        self.check_processes()
        self.check_acknowledged()
        with open(self.hist.path) as f:
            crashes = sum(1 for line in f if '"client-crash"' in line)
        n = collections.Counter(o["outcome"] for o in self.hist.ops)
        print("jepsen: seed %d, %.0f s, %d clients: %d operations, %d "
              "acknowledged, %d refused, %d unavailable (503), %d errors, "
              "%d to a stopped agent, %d faults, %d client crashes, %d "
              "violations" % (
                  SEED, SECONDS, CLIENTS, len(self.hist.ops), n["ok"],
                  n["refused"], n["unavailable"], n["error"], n["down"],
                  self.counts["faults"], crashes, len(self.violations)),
              file=sys.stderr)
        for v in self.violations:
            print("jepsen: violation: " + v, file=sys.stderr)
        self.assertEqual(crashes, 0, "a client crashed: see the history")
        self.assertEqual(self.violations, [])
        self.assertGreater(n["ok"], 0, "nothing was acknowledged")
        self.passed = True


if __name__ == "__main__":
    unittest.main(verbosity=2)
