# SPDX-License-Identifier: MIT
"""A cluster for real on one machine (SPEC 10): three etcd members on
loopback ports and three acceld agents, driven through the APIs of
different nodes. Races between API servers, agents killed and stopped past
their lease, apps run by the agent of the node they are bound to."""
import calendar
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_harness import (GiB, LEASE_TTL, Cluster,  # noqa: E402
                             manifest)
from accel_harness import BUILD_DIR  # noqa: E402

RACES = int(os.environ.get("ACCEL_CLUSTER_RACES", "1000"))


def sleep_arg(n):
    """The argument of a test app's sleep: n seconds and a fraction that is
    this test's pid, so that pgrep finds this run's process, never that of
    another run of the suite on the same machine."""
    return "%d.%d" % (n, os.getpid())


def pgrep_f(cmd, n, *opts):
    """pgrep's arguments for this run's `cmd sleep_arg(n)` processes."""
    return ["pgrep"] + list(opts) + ["-f", "^%s %s$" % (cmd, sleep_arg(n))]


def sleep_pid(n):
    """The pid of this run's `/bin/sleep sleep_arg(n)`, or None."""
    out = subprocess.run(pgrep_f("/bin/sleep", n), capture_output=True,
                         text=True).stdout.split()
    return int(out[0]) if out else None


def term_box(tc, prefix):
    """(said, ready): paths in a directory of tc's that any app's uid may
    write, for an app whose script starts with TERM_BLOCKED and then
    writes what SIGTERM it got to said."""
    box = tempfile.mkdtemp(prefix=prefix)
    tc.addCleanup(shutil.rmtree, box, True)
    os.chmod(box, 0o777)
    return os.path.join(box, "said"), os.path.join(box, "ready")


# ready (argv[2]) once SIGTERM is blocked: on a loaded machine a SIGTERM
# sent while Python still starts would kill it before it could say who
TERM_BLOCKED = ("import signal,sys\n"
                "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])\n"
                "open(sys.argv[2], 'w').close()\n")


def alive(pid):
    """Is pid a live process (not gone, not a zombie)?"""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def bind(node, dev, mem=0):
    b = {"nodeName": node, "deviceId": dev}
    if mem:
        b["memory"] = mem
    return {"computeBinding": [b]}


def install(a, m, **kw):
    body = {"manifest": m}
    body.update(kw)
    return a.http("POST", "/api/apps", body)


def won(st, body):
    """Did a bind answer placed (not a failed check)?"""
    return st == 200 and body.get("code") == 200


def device_of(c, a, dev):
    for n in c.nodes_of(a).values():
        for x in n["devices"]:
            if x["id"] == dev:
                return x
    raise KeyError(dev)


def etcd_allocs(c, dev):
    """The allocation rows of dev as etcd holds them (no acceld between)."""
    out = c.etcd.etcdctl("get", "--prefix", "/accel/allocs/",
                         "--print-value-only").stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [r for r in rows if r["device"] == dev]


def race_pair(first, second, body_a, body_b, name_a, name_b):
    """Resume name_a through first and name_b through second at once."""
    out = {}

    def go(key, a, name, body):
        out[key] = a.http("POST", "/api/apps/%s/resume" % name, body)
    t = [threading.Thread(target=go, args=("a", first, name_a, body_a)),
         threading.Thread(target=go, args=("b", second, name_b, body_b))]
    for x in t:
        x.start()
    for x in t:
        x.join()
    return out["a"], out["b"]


def race_for_one_exclusive_gpu(tc, c, races):
    """Two API servers (n2, n3) race races times for n1's Exclusive GPU:
    exactly one wins each time, the loser hears 422, etcd holds one
    binding, and both sides win sometimes."""
    n1, n2, n3 = c.agent("n1"), c.agent("n2"), c.agent("n3")
    for name, a in (("ra", n2), ("rb", n3)):
        st, b = install(a, manifest(name, "4Gi"),
                        **bind("n1", "n1-mem", 4 * GiB))
        tc.assertTrue(won(st, b), b)
        st, b = a.http("POST", "/api/apps/%s/suspend" % name)
        tc.assertEqual(st, 200, b)
    wins = {"ra": 0, "rb": 0}
    body = bind("n1", "n1-excl")
    for i in range(races):
        # both racers' views show the card free before they race
        for a in (n2, n3):
            c.wait(lambda: device_of(c, a, "n1-excl")["bindings"] == [],
                   "n1-excl free on %s before race %d" % (a.node, i))
        ra, rb = race_pair(n2, n3, body, body, "ra", "rb")
        got = [won(*ra), won(*rb)]
        tc.assertEqual(sum(got), 1, (i, ra, rb))
        loser = rb if got[0] else ra
        tc.assertEqual(loser[0], 200, loser)
        tc.assertEqual(loser[1].get("code"), 422, loser)
        winner = "ra" if got[0] else "rb"
        wins[winner] += 1
        if i % 100 == 0:
            tc.assertEqual(len(etcd_allocs(c, "n1-excl")), 1, i)
        st, b = n1.http("POST", "/api/apps/%s/suspend" % winner)
        tc.assertEqual(st, 200, b)
    # both sides won sometimes: the race was real
    tc.assertGreater(min(wins.values()), 0, wins)
    for name in ("ra", "rb"):
        n1.http("DELETE", "/api/apps/%s" % name)


class AnyNodeTest(unittest.TestCase):
    """One cluster for the tests that leave it as they found it."""

    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(["n1", "n2", "n3"])

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_every_node_shows_the_whole_cluster(self):
        c = self.c
        for a in c.agents.values():
            nodes = c.nodes_of(a)
            self.assertEqual(sorted(nodes), ["n1", "n2", "n3"])
            for n in nodes.values():
                self.assertTrue(n["reachable"], n)
                self.assertEqual(n["health"], "yes", n)
                self.assertEqual(len(n["devices"]), 2, n)
        # only each agent's own node is local to it
        self.assertEqual([n for n, x in c.nodes_of(c.agent("n2")).items()
                          if x["local"]], ["n2"])

    def test_hami_node_fields_of_other_nodes(self):
        # each agent registers its machine; every node's HAMi node list
        # shows it (one machine here: the same uname for all three)
        c = self.c
        u = os.uname()
        for a in c.agents.values():
            st, b = a.http("POST", "/api/vgpu/v1/nodes", {"filters": {}})
            self.assertEqual(st, 200, b)
            nodes = {x["name"]: x for x in b["list"]}
            self.assertEqual(sorted(nodes), ["n1", "n2", "n3"])
            for n in nodes.values():
                self.assertEqual(n["kernelVersion"], u.release, n)
                self.assertEqual(n["architecture"], u.machine, n)
                self.assertEqual(n["operatingSystem"], u.sysname.lower(), n)
                self.assertEqual(n["ip"], "127.0.0.1", n)

    def _created(self, agent):
        st, b = agent.http("POST", "/api/vgpu/v1/nodes", {"filters": {}})
        self.assertEqual(st, 200, b)
        return {x["name"]: x["creationTimestamp"] for x in b["list"]}

    def test_hami_node_creation_is_the_first_registration(self):
        # creationTimestamp: the node's first registration, RFC 3339, the
        # same in every agent's view, and not renewed by a restart
        c = self.c
        views = [self._created(a) for a in c.agents.values()]
        for v in views:
            self.assertEqual(v, views[0])
        now = time.time()
        for node, ts in views[0].items():
            t = calendar.timegm(time.strptime(ts, "%Y-%m-%dT%H:%M:%SZ"))
            self.assertLess(abs(now - t), 3600, (node, ts))
        time.sleep(1.1)  # a renewed time would differ in its seconds
        c.agent("n2").restart()
        c.wait(lambda: c.nodes_of(c.agent("n1"))["n2"]["reachable"],
               "n2 back")
        self.assertEqual(self._created(c.agent("n2"))["n2"], views[0]["n2"])
        self.assertEqual(self._created(c.agent("n1")), views[0])

    def test_bind_on_one_node_shows_on_the_others(self):
        c = self.c
        st, b = install(c.agent("n1"), manifest("shown", "4Gi"),
                        **bind("n3", "n3-mem", 4 * GiB))
        self.assertTrue(won(st, b), b)
        for n in ("n2", "n3"):
            c.wait(lambda: (c.app_of(c.agent(n), "shown") or {}).get(
                "state") == "running", "the app on " + n)
            c.wait(lambda: [x["appName"] for x in device_of(
                c, c.agent(n), "n3-mem")["bindings"]] == ["shown"],
                "the binding on " + n)
        # events are cluster-wide
        st, b = c.agent("n2").http("GET", "/api/events?app=shown")
        self.assertEqual(st, 200, b)
        self.assertTrue(b["data"], b)
        st, b = c.agent("n3").http("DELETE", "/api/apps/shown")
        self.assertEqual(st, 200, b)
        c.wait(lambda: c.app_of(c.agent("n1"), "shown") is None,
               "the uninstall seen on n1")

    def test_elastic_setting_lives_in_the_store(self):
        """Elastic memory on the cluster (SPEC 4.4, issue 46): a device's
        overcommit set through one API server is in etcd, every server's
        admission reads it (two quotas of 12 Gi on a 16 Gi card at 1.5,
        installed through another server), and a ratio below what the
        quotas sum to is refused wherever it is asked."""
        c = self.c
        path = "/api/compute-resources/nodes/n1/devices/n1-mem/elastic"
        st, b = c.agent("n2").http("PUT", path, {"overcommit": 1.5})
        self.assertEqual(st, 200, b)
        for n in ("n1", "n3"):
            c.wait(lambda: (device_of(c, c.agent(n), "n1-mem")["elastic"]
                            or {}).get("overcommit") == 1.5,
                   "the setting seen on " + n)
        names = ("e1", "e2")
        for name in names:
            st, b = install(c.agent("n3"), manifest(name, "12Gi"),
                            **bind("n1", "n1-mem", 12 * GiB))
            self.assertTrue(won(st, b), b)
        st, b = install(c.agent("n3"), manifest("e3", "1Gi"),
                        **bind("n1", "n1-mem", GiB))
        self.assertFalse(won(st, b), b)
        self.assertEqual(sum(r["memory"] for r in etcd_allocs(c, "n1-mem")),
                         24 * GiB)
        st, b = c.agent("n3").http("PUT", path, {"overcommit": 1})
        self.assertEqual(st, 409, b)
        for name in names + ("e3",):
            c.agent("n1").http("DELETE", "/api/apps/%s" % name)
        for a in c.agents.values():
            c.wait(lambda: device_of(c, a, "n1-mem")["bindings"] == [],
                   "the apps gone on " + a.node)
        st, b = c.agent("n1").http("PUT", path, {"overcommit": 1})
        self.assertEqual(st, 200, b)

    def test_users_are_cluster_wide(self):
        c = self.c
        st, b = c.agent("n1").http("POST", "/api/users",
                                   {"name": "alice", "role": "member"})
        self.assertEqual(st, 200, b)
        tok = b["data"]["token"]
        c.wait(lambda: c.agent("n3").http("GET", "/api/apps",
                                          token=tok)[0] == 200,
               "alice's token accepted by n3")
        c.agent("n2").http("DELETE", "/api/users/alice")
        c.wait(lambda: c.agent("n3").http("GET", "/api/apps",
                                          token=tok)[0] == 401,
               "alice's token refused by n3 once she is removed")

    def test_a_removed_users_uid_and_apps_go_everywhere(self):
        """Issue 25 in the cluster: bea's app runs on n2; removing bea
        through n3 is 409 while she owns it; forced, n2's agent stops and
        uninstalls it, her uid is retired in etcd (never given again) and
        n2 moves her home aside; a new bea gets a fresh uid on every
        node."""
        c = self.c
        uid_of = (lambda a, n: {u["name"]: u["uid"] for u in a.http(
            "GET", "/api/users")[1]["data"]}.get(n))
        st, b = c.agent("n1").http("POST", "/api/users", {"name": "bea"})
        self.assertEqual(st, 200, b)
        tok = b["data"]["token"]
        old = uid_of(c.agent("n1"), "bea")
        self.assertTrue(old)
        c.wait(lambda: uid_of(c.agent("n2"), "bea") == old, "bea on n2")
        m = manifest("bea1", "2Gi", run=["sh", "-c", "touch $HOME/mine; "
                                          "exec sleep 300"])
        body = {"manifest": m}
        body.update(bind("n2", "n2-mem", 2 * GiB))
        st, b = c.agent("n1").http("POST", "/api/apps", body, token=tok)
        self.assertTrue(won(st, b), b)
        c.wait(lambda: (c.app_of(c.agent("n3"), "bea1") or {}).get(
            "state") == "running", "bea1 running as n3 sees it")
        home = os.path.join(c.agent("n2").data_dir, "home", "bea")
        c.wait(lambda: os.path.exists(os.path.join(home, "mine")),
               "bea1's file in its home on n2")
        st, b = c.agent("n3").http("DELETE", "/api/users/bea")
        self.assertEqual(st, 409, b)
        self.assertIn("bea1", b["message"])
        st, b = c.agent("n3").http("DELETE", "/api/users/bea?force=true")
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["apps"],
                         [{"name": "bea1", "state": "stopping"}], b)
        for n in ("n1", "n2", "n3"):
            c.wait(lambda: c.app_of(c.agent(n), "bea1") is None,
                   "bea1 uninstalled as %s sees it" % n)
        self.assertEqual(etcd_allocs(c, "n2-mem"), [])
        aside = os.path.join(c.agent("n2").data_dir, "removed-homes",
                             "bea.%d" % old, "mine")
        c.wait(lambda: os.path.exists(aside), "bea's home moved aside")
        self.assertFalse(os.path.exists(home))
        out = c.etcd.etcdctl("get", "/accel/uids/%d" % old,
                             "--print-value-only").stdout.strip()
        self.assertEqual(out, "~bea.%d" % old)
        self.assertEqual(c.etcd.etcdctl(
            "get", "/accel/identities/bea", "--print-value-only"
        ).stdout.strip(), "")
        st, b = c.agent("n2").http("POST", "/api/users", {"name": "bea"})
        self.assertEqual(st, 200, b)
        new = uid_of(c.agent("n2"), "bea")
        self.assertNotEqual(new, old)
        for n in ("n1", "n3"):
            c.wait(lambda: uid_of(c.agent(n), "bea") == new,
                   "bea's new uid on " + n)
        c.agent("n1").http("DELETE", "/api/users/bea")

    def test_a_user_with_more_apps_than_one_etcd_transaction_is_removed(self):
        """etcd takes at most 128 operations in one transaction, and
        removing a user writes three for each running app of hers (its
        row, its event, its bynode index): with 50 it was 400 and nothing
        removed. The apps' ends go in parts that fit, the user last."""
        c = self.c
        st, b = c.agent("n1").http("POST", "/api/users", {"name": "ida"})
        self.assertEqual(st, 200, b)
        tok = b["data"]["token"]
        c.wait(lambda: "ida" in [u["name"] for u in c.agent("n2").http(
            "GET", "/api/users")[1]["data"]], "ida known to n2")
        names = ["ida%d" % i for i in range(50)]
        for name in names:
            st, b = c.agent("n2").http(
                "POST", "/api/apps", {"manifest": manifest(
                    name, "64Mi", cpu="0.1", mem="64Mi")}, token=tok)
            self.assertEqual(st, 200, b)
        c.wait(lambda: all((c.app_of(c.agent("n3"), n) or {}).get("state")
                           == "running" for n in names),
               "ida's apps running as n3 sees them")
        st, b = c.agent("n3").http("DELETE", "/api/users/ida?force=true")
        self.assertEqual(st, 200, b)
        self.assertEqual(sorted(x["name"] for x in b["data"]["apps"]),
                         sorted(names))
        for n in ("n1", "n2", "n3"):
            c.wait(lambda: not any(c.app_of(c.agent(n), x) for x in names),
                   "ida's apps gone as %s sees it" % n)
            users = c.agent(n).http("GET", "/api/users")[1]["data"]
            self.assertNotIn("ida", [u["name"] for u in users])
        out = c.etcd.etcdctl("get", "--prefix", "/accel/", "--keys-only")
        for k in out.stdout.split():
            self.assertFalse(k.startswith(("/accel/apps/ida",
                                           "/accel/allocs/ida",
                                           "/accel/users/ida")) or
                             "/ida" in k and k.startswith("/accel/bynode/"),
                             k)

    def test_an_app_runs_on_the_node_it_is_bound_to(self):
        """Installed through n1, bound to n2: n2's agent starts it; stopped
        through n3: n2's agent stops it and releases the card."""
        c = self.c
        m = manifest("sleeper", "2Gi", run=["/bin/sleep", sleep_arg(300)])
        st, b = install(c.agent("n1"), m, **bind("n2", "n2-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        self.assertEqual(b["data"]["state"], "resuming")
        c.wait(lambda: (c.app_of(c.agent("n3"), "sleeper") or {}).get(
            "state") == "running", "sleeper running as n3 sees it")
        c.wait(lambda: sleep_pid(300), "the sleeper process")
        pid = sleep_pid(300)
        # its process is a child of n2's acceld, not of the API server's
        with open("/proc/%d/stat" % pid) as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        self.assertEqual(ppid, c.agent("n2").proc.pid)
        st, b = c.agent("n3").http("POST", "/api/apps/sleeper/suspend")
        self.assertEqual(st, 200, b)
        c.wait(lambda: not os.path.exists("/proc/%d" % pid) or
               open("/proc/%d/stat" % pid).read().split()[2] == "Z",
               "the process stopped")
        for n in ("n1", "n2", "n3"):
            c.wait(lambda: (c.app_of(c.agent(n), "sleeper") or {}).get(
                "state") == "stopped", "sleeper stopped on " + n)
        self.assertEqual(etcd_allocs(c, "n2-mem"), [])
        c.agent("n1").http("DELETE", "/api/apps/sleeper")
        c.wait(lambda: c.app_of(c.agent("n2"), "sleeper") is None,
               "uninstalled")

    def test_a_running_app_moved_off_its_node_is_killed_there(self):
        """A view that had not seen an app's run moves its cards to another
        node (written to etcd here, as such a node would): the process on
        the node it ran on is killed, not left running unseen on cards the
        cluster gave to others; the node its cards went to does not take
        the old node's pid for its own."""
        c = self.c
        m = manifest("mover", "2Gi", run=["/bin/sleep", sleep_arg(302)])
        st, b = install(c.agent("n1"), m, **bind("n2", "n2-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        self.addCleanup(lambda: (
            c.agent("n1").http("POST", "/api/apps/mover/suspend"),
            c.agent("n1").http("DELETE", "/api/apps/mover")))
        c.wait(lambda: sleep_pid(302) and (c.app_of(
            c.agent("n2"), "mover") or {}).get("state") == "running",
            "mover running on n2")
        pid = sleep_pid(302)
        out = c.etcd.etcdctl("get", "--prefix", "/accel/allocs/mover/").stdout
        key, value = out.splitlines()[:2]
        self.assertTrue(key.endswith("/n2-mem"), out)
        row = json.loads(value)
        row.update(device="n3-mem", node="n3")
        # the cards and the index of the nodes they are on, in one revision
        txn = ("\ndel %s\nput %s %s\ndel /accel/bynode/n2/mover\n"
               "put /accel/bynode/n3/mover {\"app\":\"mover\"}\n\n\n" %
               (key, key[:-len("n2-mem")] + "n3-mem",
                json.dumps(row, separators=(",", ":"))))
        r = c.etcd.etcdctl("txn", input=txn, check=False)
        self.assertIn("SUCCESS", r.stdout, r.stdout + r.stderr)
        keys = c.etcd.etcdctl("get", "--prefix", "/accel/allocs/mover/",
                              "--keys-only").stdout.split()
        self.assertEqual(keys, ["/accel/allocs/mover/n3-mem"])
        c.wait(lambda: not alive(pid), "the process on n2 killed")
        # said once the kill is sent: a moment after the process is gone
        c.wait(lambda: "placed it on other cards while it ran here" in
               c.agent("n2").log(), "n2's log saying why")
        # n3 holds no pid of n2's: its view shows the app without one (it
        # may have released it since: `running` here with no process, the
        # keeper's redrive saves its end)
        c.wait(lambda: "n2-mem" not in [x["deviceId"] for x in (c.app_of(
            c.agent("n3"), "mover") or {}).get("allocations", [])],
            "the move on n3")
        self.assertFalse((c.app_of(c.agent("n3"), "mover") or {}).get("pid"))
        # and it can be stopped and removed as any app
        st, b = c.agent("n1").http("POST", "/api/apps/mover/suspend")
        self.assertEqual(st, 200, b)
        c.wait(lambda: (c.app_of(c.agent("n1"), "mover") or {}).get(
            "state") == "stopped", "mover stopped")
        st, b = c.agent("n1").http("DELETE", "/api/apps/mover")
        self.assertEqual(st, 200, b)
        c.wait(lambda: all(c.app_of(c.agent(n), "mover") is None
                           for n in ("n1", "n2", "n3")), "uninstalled")
        self.assertEqual(etcd_allocs(c, "n3-mem"), [])

    def test_a_mode_switch_through_another_node_has_the_agent_stop(self):
        """A card's mode switched through n1 while an app runs on it on
        n2: n2's agent stops the app (the pid is n2's: signalled from n1 it
        would name whatever process n1's machine has under that number),
        then the card switches. The app records who sent its SIGTERM."""
        c = self.c
        said, ready = term_box(self, "accel-switch-")
        script = TERM_BLOCKED + (
            "i = signal.sigwaitinfo([signal.SIGTERM])\n"
            "open(sys.argv[1], 'w').write(str(i.si_pid))\n")
        m = manifest("switched", "2Gi",
                     run=["/usr/bin/python3", "-c", script, said, ready])
        st, b = install(c.agent("n1"), m, **bind("n2", "n2-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        c.wait(lambda: (c.app_of(c.agent("n1"), "switched") or {}).get(
            "state") == "running", "switched running as n1 sees it")
        c.wait(lambda: os.path.exists(ready), "switched waiting for SIGTERM")
        path = "/api/compute-resources/nodes/n2/devices/n2-mem/support-type"
        self.addCleanup(c.agent("n1").http, "PUT", path,
                        {"supportType": "MemorySlice"})
        self.addCleanup(c.agent("n1").http, "DELETE", "/api/apps/switched")
        st, b = c.agent("n1").http("PUT", path, {"supportType": "Exclusive"})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["status"], "switched", b)
        self.assertEqual([(x["appName"], x["state"])
                          for x in b["data"]["stoppedApps"]],
                         [("switched", "stopped")], b)
        with open(said) as f:
            self.assertEqual(int(f.read()), c.agent("n2").proc.pid,
                             "SIGTERM came from n2's acceld, not n1's (%d)"
                             % c.agent("n1").proc.pid)
        self.assertEqual(etcd_allocs(c, "n2-mem"), [])
        for n in ("n1", "n2", "n3"):
            c.wait(lambda: (c.app_of(c.agent(n), "switched") or {}).get(
                "state") == "stopped", "switched stopped on " + n)

    def test_no_stop_begins_beside_a_switchs_own_stop(self):
        """A mode switch through n1 stops n1's app itself, the lock let go
        while the process ends (2 s: it ignores SIGTERM). A change of the
        app's row that n1's watch applies meanwhile (written to etcd here,
        as another node's write of it would be) began a second stop of
        the same process, which outlived it: the app kept a stop of a
        process it no longer had. Its next run's stop then sent SIGKILL at
        once, no SIGTERM; and where the switch's release lost to another
        node's write, the app stayed `stopping` for good (the randomized
        test under ASan: "did not converge")."""
        c = self.c
        said, ready = term_box(self, "accel-twostop-")
        script = TERM_BLOCKED + (
            "while True:\n"
            "    signal.sigwaitinfo([signal.SIGTERM])\n"
            "    open(sys.argv[1], 'a').write('TERM\\n')\n")
        m = manifest("twostop", "2Gi",
                     run=["/usr/bin/python3", "-c", script, said, ready])
        m["run"]["stopTimeoutSeconds"] = 2
        n1 = c.agent("n1")
        path = "/api/compute-resources/nodes/n1/devices/n1-mem/support-type"
        self.addCleanup(n1.http, "PUT", path, {"supportType": "MemorySlice"})
        self.addCleanup(n1.http, "DELETE", "/api/apps/twostop")
        self.addCleanup(n1.http, "POST", "/api/apps/twostop/suspend")
        st, b = install(n1, m, **bind("n1", "n1-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        c.wait(lambda: os.path.exists(ready), "twostop waiting for SIGTERM")
        out = {}

        def switch():
            out["r"] = n1.http("PUT", path, {"supportType": "Exclusive"})
        t = threading.Thread(target=switch)
        t.start()
        key = "/accel/apps/twostop"

        def row():
            return json.loads(c.etcd.etcdctl(
                "get", key, "--print-value-only").stdout)
        c.wait(lambda: row()["state"] == "stopping", "the switch's stop")
        value = c.etcd.etcdctl("get", key, "--print-value-only").stdout
        c.etcd.etcdctl("put", key, value.strip())
        t.join(60)
        st, b = out["r"]
        self.assertEqual((st, b["data"]["status"]), (200, "switched"), b)
        # the next run's stop is a stop of its own: SIGTERM first
        st, b = n1.http("PUT", path, {"supportType": "MemorySlice"})
        self.assertEqual(st, 200, b)
        os.unlink(ready)
        if os.path.exists(said):
            os.unlink(said)
        st, b = n1.http("POST", "/api/apps/twostop/resume",
                        bind("n1", "n1-mem", 2 * GiB))
        self.assertEqual(st, 200, b)
        c.wait(lambda: os.path.exists(ready), "twostop again")
        c.wait(lambda: (c.app_of(c.agent("n2"), "twostop") or {}).get(
            "state") == "running", "twostop running as n2 sees it")
        st, b = c.agent("n2").http("POST", "/api/apps/twostop/suspend")
        self.assertEqual(st, 200, b)
        c.wait(lambda: (c.app_of(n1, "twostop") or {}).get("state") ==
               "stopped", "twostop stopped again")
        self.assertTrue(os.path.exists(said), "no SIGTERM before the kill")
        self.assertNotIn("its stop ended without it", n1.log())

    def test_a_card_with_more_apps_than_one_etcd_transaction_switches(self):
        """A mode switch stops and releases every app bound to the card:
        three etcd operations each (its row, its allocation, its bynode
        index), over etcd's 128 with 50 apps, where it was refused. The
        apps are released in parts that fit, the card switches last."""
        c = self.c
        names = ["sw%d" % i for i in range(50)]
        path = "/api/compute-resources/nodes/n3/devices/n3-mem/support-type"
        self.addCleanup(c.agent("n1").http, "PUT", path,
                        {"supportType": "MemorySlice"})
        for name in names:
            self.addCleanup(c.agent("n1").http, "DELETE", "/api/apps/" + name)
            st, b = install(c.agent("n2"), manifest(name, "64Mi", cpu="0.1",
                                                    mem="64Mi"),
                            **bind("n3", "n3-mem", 64 << 20))
            self.assertTrue(won(st, b), b)
        self.assertEqual(len(etcd_allocs(c, "n3-mem")), 50)
        # through n3, whose apps these are: it stops them and saves them
        # released with the switch (through another node, n3's agent
        # releases each by itself)
        c.wait(lambda: all((c.app_of(c.agent("n3"), x) or {}).get("state")
                           == "running" for x in names),
               "the apps running as n3 sees them")
        st, b = c.agent("n3").http("PUT", path, {"supportType": "Exclusive"})
        self.assertEqual(st, 200, b)
        self.assertEqual(b["data"]["status"], "switched", b)
        self.assertEqual(sorted(x["appName"]
                                for x in b["data"]["stoppedApps"]),
                         sorted(names))
        self.assertEqual(etcd_allocs(c, "n3-mem"), [])
        for n in ("n1", "n2", "n3"):
            c.wait(lambda: device_of(c, c.agent(n), "n3-mem")[
                "supportType"] == "Exclusive" and all(
                    (c.app_of(c.agent(n), x) or {}).get("state") == "stopped"
                    for x in names), "n3-mem switched as %s sees it" % n)

    def test_an_app_across_nodes_runs_a_part_on_each(self):
        """supportMultiNodes, bound to cards of n1 and n2 through n3: n1 and
        n2 each run one part with its rank; a stop through n3 stops both
        and releases every card."""
        c = self.c
        out = tempfile.mkdtemp(prefix="accel-multi-")
        os.chmod(out, 0o777)  # the parts may run as their owner's uid
        self.addCleanup(shutil.rmtree, out, True)
        script = ('echo "$ACCEL_NODE_RANK $ACCEL_NODE_COUNT '
                  '$ACCEL_NODE_PEERS $CUDA_VISIBLE_DEVICES" > %s/$ACCEL_NODE_NAME;'
                  ' exec sleep %s' % (out, sleep_arg(303)))
        m = manifest("wide", "4Gi", run=["/bin/sh", "-c", script],
                     multi=True)
        st, b = c.agent("n3").http("POST", "/api/apps", {
            "manifest": m, "computeBinding": [
                {"nodeName": "n1", "deviceId": "n1-mem", "memory": 2 * GiB},
                {"nodeName": "n2", "deviceId": "n2-mem", "memory": 2 * GiB}]})
        self.assertTrue(won(st, b), b)
        self.assertEqual(b["data"]["state"], "resuming")
        for n in ("n1", "n2", "n3"):
            c.wait(lambda: (c.app_of(c.agent(n), "wide") or {}).get(
                "state") == "running", "wide running as %s sees it" % n)
        c.wait(lambda: sorted(os.listdir(out)) == ["n1", "n2"],
               "both parts wrote their rank")
        got = {}
        for n in ("n1", "n2"):
            with open(os.path.join(out, n)) as f:
                got[n] = f.read().split()
        self.assertEqual(got["n1"], ["0", "2", "n1,n2", "n1-mem"])
        self.assertEqual(got["n2"], ["1", "2", "n1,n2", "n2-mem"])
        pids = subprocess.run(pgrep_f("sleep", 303),
                              capture_output=True, text=True).stdout.split()
        self.assertEqual(len(pids), 2, pids)
        st, b = c.agent("n3").http("POST", "/api/apps/wide/suspend")
        self.assertEqual(st, 200, b)
        for n in ("n1", "n2", "n3"):
            c.wait(lambda: (c.app_of(c.agent(n), "wide") or {}).get(
                "state") == "stopped", "wide stopped as %s sees it" % n)
        self.assertEqual(etcd_allocs(c, "n1-mem") + etcd_allocs(c, "n2-mem"),
                         [])
        c.wait(lambda: subprocess.run(pgrep_f("sleep", 303),
                                      capture_output=True).returncode != 0,
               "both parts stopped")
        # a part that exits stops the others, and the last releases all
        st, b = c.agent("n1").http("POST", "/api/apps/wide/resume", {
            "computeBinding": [
                {"nodeName": "n1", "deviceId": "n1-mem", "memory": 2 * GiB},
                {"nodeName": "n2", "deviceId": "n2-mem", "memory": 2 * GiB}]})
        self.assertTrue(won(st, b), b)
        c.wait(lambda: len(subprocess.run(
            pgrep_f("sleep", 303), capture_output=True,
            text=True).stdout.split()) == 2, "both parts again")
        with open(os.path.join(out, "n2")) as f:
            self.assertEqual(f.read().split()[0], "1")
        for line in subprocess.run(pgrep_f("sleep", 303, "-a"),
                                   capture_output=True,
                                   text=True).stdout.splitlines():
            pid = int(line.split()[0])
            env = open("/proc/%d/environ" % pid, "rb").read()
            if b"ACCEL_NODE_NAME=n2" in env:
                os.kill(pid, signal.SIGKILL)
        c.wait(lambda: (c.app_of(c.agent("n3"), "wide") or {}).get(
            "state") == "stopped" and etcd_allocs(c, "n1-mem") == [],
            "the other part stopped and every card released")
        c.agent("n2").http("DELETE", "/api/apps/wide")
        c.wait(lambda: c.app_of(c.agent("n1"), "wide") is None,
               "uninstalled")

    def test_a_live_quota_lives_in_the_store(self):
        """SPEC 4.4 in a cluster: an app bound to n2's Memory-slicing card
        and run there by n2's agent (the stand-in cuda_hold under the
        shim), its quota cut through n3 and raised through n1: etcd holds
        each, every node's view shows it, and n2's agent carries it to the
        running app's ledger in place (the next allocation obeys it), and
        sees the app above the cut (the reclaim hook's call site)."""
        c = self.c
        n2 = c.agent("n2")
        hold = os.path.join(BUILD_DIR, "tests", "integration", "cuda_hold")
        if not os.path.exists(hold):
            self.skipTest("cuda_hold not built")
        go1 = os.path.join(n2.tmp, "quota-go1")
        go2 = os.path.join(n2.tmp, "quota-go2")
        m = manifest("quota", "1Gi", run=[hold, "512", "@" + go1, "1024",
                                          "@" + go2, "1024"])
        # under ASan the shim's runtime is not first in the stand-in
        m["run"]["env"] = {"ASAN_OPTIONS":
                           "verify_asan_link_order=0:detect_leaks=0"}
        st, b = install(c.agent("n1"), m, **bind("n2", "n2-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        # the class's cluster is shared: never leave the app to the next test
        self.addCleanup(lambda: c.app_of(c.agent("n1"), "quota") and
                        c.agent("n1").http("DELETE", "/api/apps/quota"))
        c.wait(lambda: "waiting" in n2.app_log("quota"), "quota started",
               timeout=30)
        ledger = os.path.join(n2.data_dir, "run", "ledgers",
                              "quota-dev0.ledger")

        def ledger_limit():
            with open(ledger, "rb") as f:
                return int.from_bytes(f.read(32)[24:32], "little")

        def quota_on(a):
            app = c.app_of(a, "quota") or {}
            return [x["memory"] for x in app.get("allocations", [])]
        self.assertEqual(ledger_limit(), 2 * GiB)
        st, b = c.agent("n3").http(
            "PUT", "/api/apps/quota/compute-resources/bindings/n2-mem",
            {"memory": "256Mi"})
        self.assertEqual(st, 200, b)
        self.assertEqual([r["memory"] for r in etcd_allocs(c, "n2-mem")
                          if r["app"] == "quota"], [GiB // 4])
        for n in ("n1", "n2", "n3"):
            c.wait(lambda: quota_on(c.agent(n)) == [GiB // 4],
                   "the cut seen on " + n)
        c.wait(lambda: ledger_limit() == GiB // 4, "the cut in n2's ledger")
        # n2's agent sees the app above it (where the reclaim is asked)
        c.wait(lambda: "app quota holds %d bytes on n2-mem, above its new "
               "quota of %d" % (GiB // 2, GiB // 4) in n2.log(),
               "n2 to see the app above its new quota")
        open(go1, "w").close()
        c.wait(lambda: "alloc 1024 MiB:" in n2.app_log("quota"),
               "the allocation after the cut")
        self.assertIn("alloc 1024 MiB: 2", n2.app_log("quota"))
        st, b = c.agent("n1").http(
            "PUT", "/api/apps/quota/compute-resources/bindings/n2-mem",
            {"memory": 3 * GiB})
        self.assertEqual(st, 200, b)
        self.assertEqual([r["memory"] for r in etcd_allocs(c, "n2-mem")
                          if r["app"] == "quota"], [3 * GiB])
        for n in ("n2", "n3"):
            c.wait(lambda: quota_on(c.agent(n)) == [3 * GiB],
                   "the raise seen on " + n)
        c.wait(lambda: ledger_limit() == 3 * GiB, "the raise in n2's ledger")
        open(go2, "w").close()
        c.wait(lambda: "ready" in n2.app_log("quota"),
               "the allocation after the raise")
        self.assertIn("alloc 1024 MiB: 0", n2.app_log("quota"))

        def quota_events():
            st, b = c.agent("n3").http("GET", "/api/events?app=quota")
            return [(e["data"]["old"], e["data"]["new"], e["data"]["by"])
                    for e in b["data"] if e["kind"] == "app.quota" and
                    "old" in (e["data"] or {})]
        # events are cluster-wide: n1's arrives at n3 through its watch
        c.wait(lambda: len(quota_events()) >= 2, "both events on n3")
        self.assertEqual(quota_events(), [(2 * GiB, GiB // 4, "admin"),
                                          (GiB // 4, 3 * GiB, "admin")])
        st, b = c.agent("n3").http("DELETE", "/api/apps/quota")
        self.assertEqual(st, 200, b)
        for n in ("n1", "n2", "n3"):
            c.wait(lambda: c.app_of(c.agent(n), "quota") is None,
                   "uninstalled on " + n, timeout=30)

    def test_the_1_12_5_steps_across_nodes(self):
        """SPEC 2.9 in a cluster: a shared app on n2's Exclusive card,
        installed through n1, whose server ignores SIGTERM. Stopped and
        removed through n3: every view keeps the binding until n2 has
        killed the server, then no view lists the app on the card, it
        never comes back, and another app gets the card."""
        c = self.c
        m = manifest("ollama2", "8Gi",
                     run=["/bin/sh", "-c",
                          "trap '' TERM; exec sleep " + sleep_arg(304)])
        m["apiVersion"] = "v3"
        m["options"] = {"shared": True}
        m["run"]["stopTimeoutSeconds"] = 2
        st, b = install(c.agent("n1"), m, **bind("n2", "n2-excl"))
        self.assertTrue(won(st, b), b)
        self.assertEqual(b["data"]["owner"], "shared")
        c.wait(lambda: subprocess.run(pgrep_f("sleep", 304),
                                      capture_output=True).returncode == 0,
               "the server runs")
        c.wait(lambda: c.app_of(c.agent("n3"), "ollama2")["state"] ==
               "running", "n3 sees it running")
        # the stop waits (a slow operation) for the server to be gone
        done = {}
        t = threading.Thread(target=lambda: done.setdefault(
            "r", c.agent("n3").http("POST", "/api/apps/ollama2/suspend")))
        t.start()
        c.wait(lambda: c.app_of(c.agent("n1"), "ollama2")["state"] ==
               "stopping", "stopping as n1 sees it")
        # the server ignores SIGTERM and still runs: the card is still its,
        # in every view
        self.assertEqual(subprocess.run(pgrep_f("sleep", 304),
                                        capture_output=True).returncode, 0)
        for n in ("n1", "n2", "n3"):
            self.assertEqual([x["appName"] for x in device_of(
                c, c.agent(n), "n2-excl")["bindings"]], ["ollama2"], n)
        t.join()
        st, b = done["r"]
        self.assertEqual((st, b["data"]["state"]), (200, "stopped"), b)
        self.assertNotEqual(subprocess.run(pgrep_f("sleep", 304),
                                           capture_output=True).returncode,
                            0, "n2 killed the server after its timeout")
        st, b = c.agent("n3").http(
            "DELETE", "/api/apps/ollama2/compute-resources/bindings")
        self.assertEqual(st, 200, b)
        for n in ("n1", "n2", "n3"):
            c.wait(lambda: device_of(c, c.agent(n), "n2-excl")["bindings"]
                   == [], "the card free as %s sees it" % n)
            st, lst = c.agent(n).http("GET", "/api/gpu/list")
            self.assertEqual([x for x in lst["data"]
                              if x["id"] == "n2-excl"][0]["apps"], [])
        st, b = install(c.agent("n3"), manifest("other2", "8Gi"),
                        **bind("n2", "n2-excl"))
        self.assertTrue(won(st, b), b)
        time.sleep(0.5)
        for n in ("n1", "n2", "n3"):
            self.assertEqual([x["appName"] for x in device_of(
                c, c.agent(n), "n2-excl")["bindings"]], ["other2"])
            self.assertEqual(c.app_of(c.agent(n), "ollama2")["state"],
                             "stopped")
        for name in ("ollama2", "other2"):
            c.agent("n1").http("DELETE", "/api/apps/" + name)

    def _race_pair(self, first, second, body_a, body_b, name_a, name_b):
        return race_pair(first, second, body_a, body_b, name_a, name_b)

    def test_two_api_servers_race_for_one_exclusive_gpu(self):
        race_for_one_exclusive_gpu(self, self.c, RACES)

    def test_two_api_servers_race_for_the_last_vram(self):
        """16 Gi on n1-mem, apps of 3 Gi bound there through n2 and n3 at
        once: at most 5 fit; the card is never over-allocated, in etcd or
        in any view."""
        c = self.c
        n2, n3 = c.agent("n2"), c.agent("n3")
        names = []
        for i in range(8):
            for tag, a in (("p", n2), ("q", n3)):
                name = "v%s%d" % (tag, i)
                st, b = install(a, manifest(name, "3Gi"),
                                **bind("n2", "n2-excl"))
                self.assertTrue(won(st, b), b)
                st, b = a.http("POST", "/api/apps/%s/suspend" % name)
                names.append((name, a))
        c.wait(lambda: device_of(c, n2, "n2-excl")["bindings"] == [] and
               device_of(c, n3, "n2-excl")["bindings"] == [], "setup")
        results = {}

        def go(name, a):
            results[name] = a.http("POST", "/api/apps/%s/resume" % name,
                                   bind("n1", "n1-mem", 3 * GiB))
        threads = [threading.Thread(target=go, args=x) for x in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [n for n, r in results.items() if won(*r)]
        self.assertEqual(len(winners), 5, results)
        rows = etcd_allocs(c, "n1-mem")
        self.assertEqual(sum(r["memory"] for r in rows), 15 * GiB, rows)
        for a in c.agents.values():
            c.wait(lambda: len(device_of(c, a, "n1-mem")["bindings"]) == 5,
                   "five bindings on " + a.node)
        for name, a in names:
            a.http("DELETE", "/api/apps/%s" % name)


    def _installs_at_once(self, per_node, gpu_mem, target):
        """per_node installs through each of n2 and n3, all at once, each
        bound to target; {name: (status, body)}."""
        c = self.c
        results = {}

        def go(name, a):
            results[name] = install(a, manifest(name, gpu_mem), **target)
        threads = [threading.Thread(target=go, args=("i%s%02d" % (a.node, k),
                                                     a))
                   for k in range(per_node)
                   for a in (c.agent("n2"), c.agent("n3"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    def _uninstall_all(self, results):
        n1 = self.c.agent("n1")
        for name, (st, b) in results.items():
            if won(st, b):
                st, b = n1.http("DELETE", "/api/apps/%s" % name)
                self.assertEqual(st, 200, b)
        for a in self.c.agents.values():
            self.c.wait(lambda: not any(self.c.app_of(a, n) for n in results),
                        "the race's apps gone on " + a.node)

    def test_installs_through_one_node_race_for_the_last_vram(self):
        """Issue 19: an API server sends its binds' transactions outside
        its lock, several at once merged in one. 12 installs of 3 Gi
        through each of n2 and n3 at once, for n1-mem's 16 Gi: exactly 5
        acknowledged, in etcd and in every view, whether the losers lost
        to a bind of their own server (decided on its reservation) or of
        the other (its guards)."""
        c = self.c
        for rnd in range(3):
            results = self._installs_at_once(12, "3Gi",
                                             bind("n1", "n1-mem", 3 * GiB))
            try:
                winners = sorted(n for n, r in results.items() if won(*r))
                self.assertEqual(len(winners), 5, (rnd, results))
                for name, (st, b) in results.items():
                    if name not in winners:
                        self.assertEqual((st, b.get("code")), (200, 422),
                                         (name, b))
                rows = etcd_allocs(c, "n1-mem")
                self.assertEqual(sum(r["memory"] for r in rows), 15 * GiB,
                                 rows)
                self.assertEqual(sorted(r["app"] for r in rows), winners)
                for a in c.agents.values():
                    c.wait(lambda: sorted(
                        b["appName"] for b in
                        device_of(c, a, "n1-mem")["bindings"]) == winners,
                        "the five winners on %s" % a.node)
            finally:
                self._uninstall_all(results)

    def test_installs_through_one_node_race_for_one_exclusive_gpu(self):
        """8 installs through each of n2 and n3 at once, for n1-excl:
        exactly one acknowledged, every round."""
        c = self.c
        for rnd in range(10):
            results = self._installs_at_once(8, "4Gi",
                                             bind("n1", "n1-excl"))
            try:
                winners = [n for n, r in results.items() if won(*r)]
                self.assertEqual(len(winners), 1, (rnd, results))
                self.assertEqual([r["app"] for r in
                                  etcd_allocs(c, "n1-excl")], winners)
            finally:
                self._uninstall_all(results)


class BeatDuringRacesTest(unittest.TestCase):
    """Issue 48: the keeper's writes due at every round, 50 ms (the beat,
    and the nodeinfo written again through the store from the keeper's
    thread, a write of its own), while two API servers race for one card:
    none joins a bind's open transaction. Before the fix the keeper's
    store write landed in the write set another thread was filling or
    freeing, and an acceld died under the sanitizers (or wrote its row
    into a bind)."""

    @classmethod
    def setUpClass(cls):
        beat = {"ACCEL_BEAT_MS": "50"}
        cls.c = Cluster(["n1", "n2", "n3"],
                        envs={n: beat for n in ("n1", "n2", "n3")})

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_races_with_a_beat_every_round(self):
        c = self.c
        before = {n: a.proc.pid for n, a in c.agents.items()}
        race_for_one_exclusive_gpu(self, c, 200)
        # every acceld lived through it (same process), every node still
        # alive in every view, and no beat was written into a bind: the
        # agents' live keys hold what the beat writes, nothing else
        for n, a in c.agents.items():
            self.assertIsNone(a.proc.poll(), n)
            self.assertEqual(a.proc.pid, before[n], n)
            self.assertTrue(all(x["reachable"]
                                for x in c.nodes_of(a).values()), n)
        out = c.etcd.etcdctl("get", "--prefix", "/accel/agents/").stdout
        self.assertEqual(out.count("/accel/agents/"), 3, out)


class OptionsTest(unittest.TestCase):
    def test_a_bad_compaction_retention_is_refused_by_name(self):
        import accel_harness
        for bad in ("5", "x", "-1", "604801"):
            p = subprocess.run([accel_harness.ACCELD, "--etcd",
                                "http://127.0.0.1:1", "--node-name", "n1",
                                "--etcd-compact-retention", bad],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn("--etcd-compact-retention must be", p.stderr, bad)


class MonitorTest(unittest.TestCase):
    """Issue 51: the beats are watched by the elected monitors only, so an
    idle cluster sends the views nothing, and a hung monitor is still seen
    by the other monitor within TTL + 2 s through an etcd leader change."""

    def setUp(self):
        self.c = Cluster(["n1", "n2", "n3"])
        self.c.wait(lambda: len(self._slots()) == 2, "two monitors elected")

    def tearDown(self):
        self.c.close()

    def _slots(self):
        out = self.c.etcd.etcdctl("get", "--prefix", "/accel~live/monitor/",
                                  "--print-value-only").stdout
        return out.split()

    def _watch(self, prefix, seconds):
        """Events etcd sends a watch of prefix in that many seconds."""
        env = dict(os.environ, ETCDCTL_API="3")
        p = subprocess.Popen(
            ["etcdctl", "--endpoints", ",".join(self.c.etcd.urls()),
             "watch", "--prefix", prefix], env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        time.sleep(seconds)
        p.terminate()
        out, _ = p.communicate(timeout=10)
        lines = out.splitlines()
        return [x + " " + (lines[i + 1] if i + 1 < len(lines) else "")
                for i, x in enumerate(lines) if x in ("PUT", "DELETE")]

    def test_an_idle_cluster_sends_the_views_no_beats(self):
        # the prefix every view watches: nothing while idle (before: every
        # agent's beat each second, 3 a second here, N^2 across the views)
        self.assertEqual(self._watch("/accel/", 4), [])
        # the beats themselves go on, where the monitors alone watch them
        beats = self._watch("/accel~live/beat/", 4)
        self.assertGreaterEqual(len(beats), 6, beats)
        self.assertEqual(len(set(self._slots())), 2, self._slots())

    def test_a_hung_monitor_is_seen_through_a_leader_change(self):
        c = self.c
        victim = self._slots()[0]
        others = [n for n in ("n1", "n2", "n3") if n != victim]

        def unreachable(viewer):
            return not c.nodes_of(c.agent(viewer))[victim]["reachable"]
        c.agent(victim).signal(signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            time.sleep(2)
            c.etcd.move_leader()  # its lease gets a whole TTL again
            c.wait(lambda: all(unreachable(v) for v in others),
                   victim + " unreachable",
                   timeout=max(0.1, LEASE_TTL + 2 - (time.monotonic() - t0)))
        finally:
            c.agent(victim).signal(signal.SIGCONT)
        c.wait(lambda: not any(unreachable(v) for v in others),
               victim + " back", timeout=15)


class LivenessTest(unittest.TestCase):
    def setUp(self):
        self.c = Cluster(["n1", "n2", "n3"])

    def tearDown(self):
        self.c.close()

    def _reachable(self, viewer, node):
        return self.c.nodes_of(self.c.agent(viewer))[node]["reachable"]

    def test_agent_sigkilled_is_unreachable_within_the_ttl(self):
        c = self.c
        st, b = install(c.agent("n1"), manifest("on3", "4Gi"),
                        **bind("n3", "n3-mem", 4 * GiB))
        self.assertTrue(won(st, b), b)
        c.wait(lambda: (c.app_of(c.agent("n2"), "on3") or {}).get(
            "state") == "running", "on3 seen on n2")
        c.kill_unreachable(self, "n3", ("n1", "n2"))
        for viewer in ("n1", "n2"):
            n = c.nodes_of(c.agent(viewer))["n3"]
            self.assertEqual(n["health"], "no", n)
            self.assertEqual(c.app_of(c.agent(viewer), "on3")["state"],
                             "unknown")
        # no placement on the unreachable node
        st, b = install(c.agent("n1"), manifest("nope", "4Gi"),
                        **bind("n3", "n3-excl"))
        self.assertFalse(won(st, b), b)
        # nothing was released on its behalf
        self.assertEqual(len(etcd_allocs(c, "n3-mem")), 1)
        c.restart_reachable("n3", ("n1", "n2"))
        self.assertEqual(c.app_of(c.agent("n1"), "on3")["state"], "running")

    def test_a_resume_its_agent_missed_runs_when_it_returns(self):
        """A resume acknowledged through n1 for an app of n3 while n3's
        agent was down (its lease not lapsed yet): etcd says resuming with
        no pid. n3 back, it starts the app and keeps its card; before, it
        released the app (the randomized test's "acknowledged resume of j0
        lost its cards"). The store is written as that resume leaves it,
        so that no lease's timing decides the test."""
        c = self.c
        m = manifest("missed", "2Gi", run=["/bin/sleep", sleep_arg(304)])
        st, b = install(c.agent("n1"), m, **bind("n3", "n3-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        c.wait(lambda: (c.app_of(c.agent("n1"), "missed") or {}).get(
            "state") == "running", "missed running")
        c.agent("n3").kill9()
        c.agent("n3").kill_apps()
        c.wait(lambda: subprocess.run(pgrep_f("/bin/sleep", 304),
                                      capture_output=True).returncode != 0,
               "its process gone with n3")
        key = "/accel/apps/missed"
        row = json.loads(c.etcd.etcdctl("get", key,
                                        "--print-value-only").stdout)
        row.update(state="resuming", pid=0, pidStart=0)
        c.etcd.etcdctl("put", key, json.dumps(row))
        c.agent("n3").restart()
        c.wait(lambda: (c.app_of(c.agent("n1"), "missed") or {}).get(
            "state") == "running", "missed running again", timeout=15)
        self.assertEqual(len(etcd_allocs(c, "n3-mem")), 1)
        c.wait(lambda: subprocess.run(pgrep_f("/bin/sleep", 304),
                                      capture_output=True).returncode == 0,
               "its new process")
        row = json.loads(c.etcd.etcdctl("get", key,
                                        "--print-value-only").stdout)
        self.assertEqual(row["state"], "running", row)
        self.assertGreater(row["pid"], 0, row)

    def test_agent_stopped_past_its_ttl_then_continued(self):
        """SIGSTOP n3 past its lease: unreachable everywhere; an app of n3
        stopped meanwhile stays bound (nothing released on its behalf)
        until n3 continues, comes back and stops and releases it."""
        c = self.c
        m = manifest("frozen", "2Gi", run=["/bin/sleep", sleep_arg(301)])
        st, b = install(c.agent("n2"), m, **bind("n3", "n3-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        c.wait(lambda: (c.app_of(c.agent("n1"), "frozen") or {}).get(
            "state") == "running", "frozen running")
        c.agent("n3").signal(signal.SIGSTOP)
        try:
            c.wait(lambda: not self._reachable("n1", "n3"), "n3 lapsed",
                   timeout=LEASE_TTL + 2)
            st, b = c.agent("n1").http("POST", "/api/apps/frozen/suspend")
            self.assertEqual(st, 200, b)
            self.assertEqual(b["data"]["state"], "unknown", b)
            time.sleep(0.5)
            self.assertEqual(len(etcd_allocs(c, "n3-mem")), 1)
        finally:
            c.agent("n3").signal(signal.SIGCONT)
        c.wait(lambda: self._reachable("n1", "n3"), "n3 back", timeout=15)
        c.wait(lambda: etcd_allocs(c, "n3-mem") == [], "released by n3",
               timeout=15)
        c.wait(lambda: c.app_of(c.agent("n2"), "frozen")["state"] ==
               "stopped", "stopped as n2 sees it")
        out = subprocess.run(pgrep_f("/bin/sleep", 301),
                             capture_output=True, text=True).stdout
        self.assertEqual(out.strip(), "")

    def test_agent_stopped_through_an_etcd_leader_change(self):
        """A new etcd leader gives every lease its whole TTL again: an agent
        hung 2 s before that stayed 'reachable' until 5.6-6.0 s after it
        was stopped. Its missing beats make it unreachable within TTL + 2 s
        all the same (issue 40 item 8)."""
        c = self.c
        c.agent("n3").signal(signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            time.sleep(2)  # into the hang, as an election comes when it comes
            c.etcd.move_leader()
            c.wait(lambda: not self._reachable("n1", "n3") and
                   not self._reachable("n2", "n3"), "n3 unreachable",
                   timeout=max(0.1, LEASE_TTL + 2 - (time.monotonic() - t0)))
        finally:
            c.agent("n3").signal(signal.SIGCONT)
        c.wait(lambda: self._reachable("n1", "n3") and
               self._reachable("n2", "n3"), "n3 back", timeout=15)

    def test_clean_stop_gives_the_lease_back_at_once(self):
        c = self.c
        c.agent("n2").stop()
        c.wait(lambda: not self._reachable("n1", "n2"), "n2 gone",
               timeout=2)
        c.agent("n2").restart()
        c.wait(lambda: self._reachable("n1", "n2"), "n2 back")

    def test_node_remove(self):
        c = self.c
        n1 = c.agent("n1")
        st, b = install(n1, manifest("there", "4Gi"),
                        **bind("n3", "n3-mem", 4 * GiB))
        self.assertTrue(won(st, b), b)
        # a running node is not forgotten: it would register again
        st, b = n1.http("DELETE", "/api/nodes/n2")
        self.assertEqual(st, 409, b)
        self.assertIn("stop its acceld first", b["message"])
        c.agent("n3").kill9()
        c.wait(lambda: not self._reachable("n1", "n3"), "n3 lapsed",
               timeout=LEASE_TTL + 2)
        r = n1.ctl("node", "remove", "n3")
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn("there", r.stdout + r.stderr)
        self.assertIn("--force", r.stdout + r.stderr)
        self.assertEqual(len(etcd_allocs(c, "n3-mem")), 1)
        r = c.agent("n2").ctl("node", "remove", "n3", "--force")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("1 app bound there was stopped", r.stdout)
        self.assertEqual(etcd_allocs(c, "n3-mem"), [])
        for viewer in ("n1", "n2"):
            c.wait(lambda: "n3" not in c.nodes_of(c.agent(viewer)),
                   "n3 gone from " + viewer)
            app = c.app_of(c.agent(viewer), "there")
            self.assertEqual((app["state"], app["allocations"]),
                             ("stopped", []))
        st, b = n1.http("DELETE", "/api/nodes/n3")
        self.assertEqual(st, 404, b)
        # the node joins again by starting its acceld
        c.agent("n3").restart()
        c.wait(lambda: "n3" in c.nodes_of(n1) and
               self._reachable("n1", "n3"), "n3 rejoined")

    def test_a_node_that_returns_with_a_new_gpu(self):
        """n2 comes back with a third card: every view shows it, it takes
        a binding, and the bindings of the node listed after n2 (whose
        cards move up one place in n1's view) stay on the same cards."""
        c = self.c
        n1 = c.agent("n1")
        st, b = install(n1, manifest("later", "4Gi"),
                        **bind("n3", "n3-mem", 4 * GiB))
        self.assertTrue(won(st, b), b)
        a2 = c.agent("n2")
        a2.stop()
        with open(a2.inventory, "w") as f:
            from cluster_harness import inventory
            f.write(inventory("n2", [("n2-excl", "24Gi", "Exclusive"),
                                     ("n2-mem", "16Gi", "MemorySlice"),
                                     ("n2-new", "48Gi", "MemorySlice")]))
        a2.restart()
        for viewer in ("n1", "n3"):
            c.wait(lambda: [x["id"] for x in
                            c.nodes_of(c.agent(viewer))["n2"]["devices"]]
                   == ["n2-excl", "n2-mem", "n2-new"],
                   "n2-new on " + viewer)
            self.assertEqual([x["appName"] for x in device_of(
                c, c.agent(viewer), "n3-mem")["bindings"]], ["later"])
            self.assertEqual(device_of(c, c.agent(viewer), "n3-excl")[
                "bindings"], [])
        st, b = install(n1, manifest("onnew", "40Gi"),
                        **bind("n2", "n2-new", 40 * GiB))
        self.assertTrue(won(st, b), b)
        c.wait(lambda: [x["appName"] for x in device_of(
            c, c.agent("n3"), "n2-new")["bindings"]] == ["onnew"],
            "the new card's binding on n3")
        self.assertEqual(c.app_of(n1, "later")["allocations"][0]["deviceId"],
                         "n3-mem")

    def test_a_second_agent_with_the_same_name_is_refused(self):
        from cluster_harness import Agent
        dup = Agent("n1", self.c.etcd.endpoints(), token=self.c.token,
                    extra_args=["--etcd-insecure"])
        dup.start_timeout = 3 * LEASE_TTL + 5
        try:
            with self.assertRaises(RuntimeError) as e:
                dup.start()
            self.assertIn("held by another running acceld", dup.log())
        finally:
            dup.close()
        self.assertTrue(e.exception)


MiB = 1 << 20

FAKE_NVML = os.path.join(os.environ.get("ACCEL_BUILD_DIR", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build")),
    "fake", "libnvidia-ml.so.1")
GPU_N1 = "GPU-aaaaaaaa-0000-4000-8000-0000000000a1"


class TelemetryTest(unittest.TestCase):
    """What a node's NVML measures is every node's to show: the devices'
    readings in the listings, /metrics and the metric history of the
    other nodes (SPEC 10: the metric history is cluster-wide)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="accel-nvml-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        nvml = os.path.join(self.tmp, "nvml.txt")
        with open(nvml, "w") as f:
            f.write("driver 550.54.14\ncuda 12040\n"
                    "gpu uuid=%s total=25769803776 used=3221225472 util=37 "
                    "power=123456 limit=450000 temp=61 "
                    "name=NVIDIA GeForce RTX 4090\n" % GPU_N1)
        self.c = Cluster(
            ["n1", "n2"], devices={"n1": [(GPU_N1, "24Gi", "MemorySlice")]},
            envs={"n1": {"ACCEL_NVML_LIB": FAKE_NVML,
                         "ACCEL_FAKE_NVML": nvml}},
            extra_args=["--history-interval", "1"])
        self.addCleanup(self.c.close)

    def test_readings_of_one_node_show_on_the_other(self):
        c = self.c
        n2 = c.agent("n2")
        c.wait(lambda: device_of(c, n2, GPU_N1).get("utilization") == 37,
               "n1's GPU utilization on n2", timeout=30)

        def history_has_it():
            st, b = n2.http("GET", "/api/metrics/history?range=60&step=1")
            devs = {x["id"]: x for x in b["data"]["devices"]}
            return GPU_N1 in devs and 37 in devs[GPU_N1]["utilization"] \
                and 61 in devs[GPU_N1]["temperature"]
        c.wait(history_has_it, "n1's GPU in n2's metric history", timeout=30)
        req = urllib.request.Request(n2.url + "/metrics", headers={
            "Authorization": "Bearer " + n2.token})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        util = [line for line in text.splitlines()
                if line.startswith("accel_device_utilization") and GPU_N1 in line]
        self.assertEqual(len(util), 1, text[-3000:])
        self.assertEqual(float(util[0].rsplit(" ", 1)[1]), 0.37)  # ratio


class EtcdFaultTest(unittest.TestCase):
    """etcd members killed under a stream of binds, and a restart of the
    whole cluster: no acknowledged change is lost."""

    def setUp(self):
        self.c = Cluster(["n1", "n2", "n3"])

    def tearDown(self):
        self.c.close()

    def _stream(self, n, on_half=None):
        """n installs of 256 Mi apps through the three APIs in turn, each
        bound to a MemorySlice card in turn; on_half() runs after n/2.
        Returns (acknowledged names, the longest time writes failed)."""
        c = self.c
        nodes = ["n1", "n2", "n3"]
        acked, fail_since, longest = [], None, 0.0
        i = 0
        while len(acked) < n:
            if i == n // 2 and on_half:
                on_half()
                on_half = None
            name = "s%d" % i
            a = c.agent(nodes[i % 3])
            dev = nodes[(i + 1) % 3]
            try:
                st, b = install(a, manifest(name, "256Mi", cpu="50m",
                                            mem="64Mi"),
                                **bind(dev, dev + "-mem", 256 * MiB))
            except OSError:
                st, b = 0, None
            now = time.monotonic()
            if won(st, b):
                acked.append(name)
                if fail_since is not None:
                    longest = max(longest, now - fail_since)
                    fail_since = None
                i += 1
            else:
                if fail_since is None:
                    fail_since = now
                self.assertLess(now - fail_since, 30, str((st, b))[:600])
                time.sleep(0.05)
                # a write that failed may have applied: take the next name
                i += 1
        return acked, longest

    def _all_present(self, names):
        c = self.c
        out = c.etcd.etcdctl("get", "--prefix", "/accel/apps/",
                             "--keys-only").stdout
        stored = {k.rsplit("/", 1)[1] for k in out.split()}
        missing = [x for x in names if x not in stored]
        self.assertEqual(missing, [], "acknowledged but not in etcd")
        for a in c.agents.values():
            c.wait(lambda: all(c.app_of(a, x) for x in names[-3:]),
                   "the last binds on " + a.node)
            st, b = a.http("GET", "/api/apps")
            shown = {x["name"] for x in b["data"]}
            self.assertEqual([x for x in names if x not in shown], [],
                             "acknowledged but not shown by " + a.node)

    def _kill_member(self, leader):
        e = self.c.etcd
        lead = e.leader()
        victim = lead if leader else (lead + 1) % 3
        e.kill(victim)
        self.killed = victim

    def test_a_follower_killed_mid_stream(self):
        acked, gap = self._stream(60, lambda: self._kill_member(False))
        self.assertLess(gap, 5.0)
        self._all_present(acked)
        self.c.etcd.restart(self.killed)

    def test_the_leader_killed_mid_stream(self):
        acked, gap = self._stream(60, lambda: self._kill_member(True))
        self.assertLess(gap, 5.0, "writes resumed within 5 s")
        self._all_present(acked)

    def test_whole_cluster_restart(self):
        c = self.c
        m = manifest("keeps", "2Gi", run=["/bin/sleep", sleep_arg(302)])
        st, b = install(c.agent("n1"), m, **bind("n2", "n2-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        acked, _ = self._stream(12)
        c.wait(lambda: c.app_of(c.agent("n3"), "keeps")["state"] ==
               "running", "keeps running")
        pid = int(subprocess.run(pgrep_f("/bin/sleep", 302),
                                 capture_output=True,
                                 text=True).stdout.split()[0])
        for a in c.agents.values():
            a.stop()
        for i in range(3):
            c.etcd.stop(i)
        for m_ in c.etcd.members:  # all at once: one alone has no quorum
            c.etcd._spawn(m_, "existing")
        c.etcd.wait_healthy()
        for a in c.agents.values():
            a.restart()
        c.wait(lambda: all(all(x["reachable"] for x in
                               c.nodes_of(a).values())
                           for a in c.agents.values()), "all back")
        self._all_present(acked + ["keeps"])
        # the app's process ran on through it all and is n2's again
        self.assertTrue(os.path.exists("/proc/%d" % pid))
        self.assertEqual(c.app_of(c.agent("n1"), "keeps")["state"],
                         "running")
        st, b = c.agent("n3").http("POST", "/api/apps/keeps/suspend")
        self.assertEqual(st, 200, b)
        c.wait(lambda: not os.path.exists("/proc/%d" % pid) or
               open("/proc/%d/stat" % pid).read().split()[2] == "Z",
               "stopped by n2 after the restart")


if __name__ == "__main__":
    unittest.main(verbosity=2)
