# SPDX-License-Identifier: MIT
"""acceld --role agent (issue 51, docs/cluster.md "Roles"): a node that
runs and enforces the apps bound to its cards, decides nothing, and
watches only its node's index (bynode/<node>/) and the small tables it
needs whole. Three etcd members, n1 and n2 API servers (n1 the default
role, n2 --role api in the shared cluster), n3 an agent. After each test
of the shared cluster, etcd's bynode index names exactly the (node, app)
pairs of its allocation rows."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_harness import (GiB, Cluster,  # noqa: E402
                             manifest)
import accel_harness  # noqa: E402

AGENT = {"n3": ["--role", "agent"]}
# n2 says it is an API server (--role api: the default's behaviour)
ROLES = {"n2": ["--role", "api"], "n3": ["--role", "agent"]}


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
    return st == 200 and body.get("code") == 200


def etcd_keys(c, prefix):
    """The keys under prefix as etcd holds them (no acceld between)."""
    out = c.etcd.etcdctl("get", "--prefix", prefix, "--keys-only").stdout
    return sorted(x for x in out.splitlines() if x.strip())


def etcd_allocs(c, dev):
    out = c.etcd.etcdctl("get", "--prefix", "/accel/allocs/",
                         "--print-value-only").stdout
    rows = [json.loads(x) for x in out.splitlines() if x.strip()]
    return [r for r in rows if r["device"] == dev]


def index_as_allocs(c):
    """Whether etcd's bynode index names exactly the (node, app) pairs of
    its allocation rows (read in one range: one revision)."""
    out = c.etcd.etcdctl("get", "--prefix", "/accel/").stdout.splitlines()
    rows = dict(zip(out[0::2], out[1::2]))
    index = sorted(k[len("/accel/bynode/"):] for k in rows
                   if k.startswith("/accel/bynode/"))
    bound = sorted({"%s/%s" % (r["node"], r["app"]) for r in
                    (json.loads(v) for k, v in rows.items()
                     if k.startswith("/accel/allocs/"))})
    return index == bound


def apps_of(a):
    st, body = a.http("GET", "/api/apps")
    if st != 200:
        return None
    data = body["data"]
    items = data.get("items", data.get("apps", data)) \
        if isinstance(data, dict) else data
    return sorted(x.get("name") or x.get("metadata", {}).get("name")
                  for x in items)


# the apps' sleeps carry this test's pid: another run of this test on the
# same machine (a CI run beside a developer's) has sleeps of its own
UNIQUE = ".%d" % os.getpid()


def pid_of(cmdline):
    out = subprocess.run(["pgrep", "-f", "^%s$" % cmdline],
                         capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


def ppid_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class RoleOptionTest(unittest.TestCase):
    def test_a_bad_role_is_refused_by_name(self):
        for bad in ("agents", "", "API"):
            p = subprocess.run([accel_harness.ACCELD, "--etcd",
                                "http://127.0.0.1:1", "--node-name", "n1",
                                "--role", bad],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn("--role must be agent, api or both", p.stderr, bad)

    def test_a_role_needs_a_cluster(self):
        p = subprocess.run([accel_harness.ACCELD, "--role", "agent"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--role needs --etcd", p.stderr)


class AgentRoleTest(unittest.TestCase):
    """One cluster (n3 an agent) for the tests that leave it as found."""

    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(["n1", "n2", "n3"], node_args=ROLES)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def tearDown(self):
        # whatever the test did, the index is the allocations' (node, app)
        self.c.wait(lambda: index_as_allocs(self.c),
                    "the bynode index matches the allocation rows")

    def test_an_app_of_the_agent_runs_and_stops_there(self):
        """Installed through n1 bound to n3's card: n3's agent starts it
        (its child) and the index key appears with the binding; suspended
        through n2: n3 stops it and releases the card, and the key goes."""
        c = self.c
        m = manifest("onagent", "2Gi", run=["/bin/sleep", "301" + UNIQUE])
        st, b = install(c.agent("n1"), m, **bind("n3", "n3-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        self.assertEqual(etcd_keys(c, "/accel/bynode/"),
                         ["/accel/bynode/n3/onagent"])
        c.wait(lambda: pid_of("/bin/sleep 301" + UNIQUE) is not None,
               "the app's process")
        pid = pid_of("/bin/sleep 301" + UNIQUE)
        self.assertEqual(ppid_of(pid), c.agent("n3").proc.pid)
        for n in ("n1", "n2"):
            c.wait(lambda: (c.app_of(c.agent(n), "onagent") or {}).get(
                "state") == "running", "running as %s sees it" % n)
        st, b = c.agent("n2").http("POST", "/api/apps/onagent/suspend")
        self.assertEqual(st, 200, b)
        c.wait(lambda: gone(pid), "the process stopped")
        for n in ("n1", "n2"):
            c.wait(lambda: (c.app_of(c.agent(n), "onagent") or {}).get(
                "state") == "stopped", "stopped as %s sees it" % n)
        c.wait(lambda: etcd_allocs(c, "n3-mem") == [], "n3-mem released")
        self.assertEqual(etcd_keys(c, "/accel/bynode/"), [])
        st, b = c.agent("n1").http("DELETE", "/api/apps/onagent")
        self.assertEqual(st, 200, b)
        c.wait(lambda: etcd_keys(c, "/accel/apps/onagent") == [],
               "uninstalled")

    def test_the_agent_refuses_what_decides_and_changes_nothing(self):
        c = self.c
        n3 = c.agent("n3")
        st, b = install(n3, manifest("refused", "2Gi"),
                        **bind("n3", "n3-mem", 2 * GiB))
        self.assertEqual(st, 421, b)
        self.assertEqual(b["error"], "agent_node", b)
        self.assertIn("--role agent", b["message"])
        self.assertIn("API server", b["message"])
        for method, path in (("POST", "/api/apps/refused/resume"),
                             ("DELETE", "/api/apps/refused"),
                             ("PUT", "/api/nodes/n3")):
            st, b = n3.http(method, path, {})
            self.assertEqual(st, 421, (method, path, b))
        self.assertEqual(etcd_keys(c, "/accel/apps/refused"), [])
        self.assertEqual(etcd_allocs(c, "n3-mem"), [])
        # what is its own to say still answers
        st, _ = n3.http("GET", "/healthz", token="")
        self.assertEqual(st, 200)

    def test_the_agents_view_holds_only_its_own_apps(self):
        c = self.c
        st, b = install(c.agent("n1"), manifest("mine", "2Gi"),
                        **bind("n3", "n3-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        st, b = install(c.agent("n2"), manifest("theirs", "2Gi"),
                        **bind("n1", "n1-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        try:
            for n in ("n1", "n2"):
                c.wait(lambda: {"mine", "theirs"} <= set(
                    apps_of(c.agent(n)) or []), "both apps on " + n)
            c.wait(lambda: "mine" in (apps_of(c.agent("n3")) or []),
                   "n3 shows its app")
            # theirs was committed before mine is seen: it never comes
            time.sleep(0.5)
            self.assertNotIn("theirs", apps_of(c.agent("n3")))
            self.assertEqual(etcd_keys(c, "/accel/bynode/"),
                             ["/accel/bynode/n1/theirs",
                              "/accel/bynode/n3/mine"])
        finally:
            for name in ("mine", "theirs"):
                c.agent("n1").http("POST", "/api/apps/%s/suspend" % name)
                c.agent("n1").http("DELETE", "/api/apps/%s" % name)
            c.wait(lambda: etcd_keys(c, "/accel/apps/") == [], "cleaned")

    def test_an_app_across_an_api_server_and_the_agent(self):
        """supportMultiNodes on n2's and n3's cards, through n1: each runs
        its part (n3's is its child), with the peers' ranks; a part that
        exits on n3 stops n2's, and every card is released (the parts'
        rows reach n3 through the index, each part's write rewriting it
        for both nodes)."""
        c = self.c
        out = tempfile.mkdtemp(prefix="accel-agentwide-")
        os.chmod(out, 0o777)
        self.addCleanup(shutil.rmtree, out, True)
        script = ('echo "$ACCEL_NODE_RANK $ACCEL_NODE_COUNT" > '
                  '%s/$ACCEL_NODE_NAME; exec sleep 304%s' % (out, UNIQUE))
        m = manifest("wide", "4Gi", run=["/bin/sh", "-c", script],
                     multi=True)
        st, b = c.agent("n1").http("POST", "/api/apps", {
            "manifest": m, "computeBinding": [
                {"nodeName": "n2", "deviceId": "n2-mem", "memory": 2 * GiB},
                {"nodeName": "n3", "deviceId": "n3-mem", "memory": 2 * GiB}]})
        self.assertTrue(won(st, b), b)
        self.assertEqual(etcd_keys(c, "/accel/bynode/"),
                         ["/accel/bynode/n2/wide", "/accel/bynode/n3/wide"])
        c.wait(lambda: sorted(os.listdir(out)) == ["n2", "n3"],
               "both parts wrote their rank")
        for n, rank in (("n2", "0"), ("n3", "1")):
            with open(os.path.join(out, n)) as f:
                self.assertEqual(f.read().split(), [rank, "2"])
        c.wait(lambda: (c.app_of(c.agent("n1"), "wide") or {}).get(
            "state") == "running", "wide running as n1 sees it")
        pids = {}
        for line in subprocess.run(["pgrep", "-a", "-f",
                                    "^sleep 304%s$" % UNIQUE],
                                   capture_output=True,
                                   text=True).stdout.splitlines():
            pid = int(line.split()[0])
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read()
            for n in ("n2", "n3"):
                if ("ACCEL_NODE_NAME=%s" % n).encode() in env:
                    pids[n] = pid
        self.assertEqual(sorted(pids), ["n2", "n3"])
        self.assertEqual(ppid_of(pids["n3"]), c.agent("n3").proc.pid)
        os.kill(pids["n3"], signal.SIGKILL)
        c.wait(lambda: gone(pids["n2"]), "n2's part stopped")
        c.wait(lambda: (c.app_of(c.agent("n1"), "wide") or {}).get(
            "state") == "stopped" and etcd_allocs(c, "n2-mem") == [] and
            etcd_allocs(c, "n3-mem") == [], "every card released")
        self.assertEqual(etcd_keys(c, "/accel/bynode/"), [])
        c.agent("n1").http("DELETE", "/api/apps/wide")
        c.wait(lambda: etcd_keys(c, "/accel/apps/wide") == [],
               "uninstalled")

    def test_a_live_quota_cut_through_an_api_server_reaches_the_agent(self):
        """SPEC 4.4: the quota of the agent's running app cut through n1:
        an allocation row alone changes (the index rewritten with it), and
        n3 carries it to the app's ledger in place."""
        c = self.c
        n3 = c.agent("n3")
        if not os.path.exists(os.path.join(accel_harness.BUILD_DIR, "src",
                                           "shim", "libaccelshim.so")):
            self.skipTest("the shim is not built (no ledger without it)")
        m = manifest("cut", "2Gi", run=["/bin/sleep", "305"])
        st, b = install(c.agent("n1"), m, **bind("n3", "n3-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        self.addCleanup(lambda: c.agent("n1").http("DELETE", "/api/apps/cut"))
        ledger = os.path.join(n3.data_dir, "run", "ledgers", "cut-dev0.ledger")

        def ledger_limit():
            with open(ledger, "rb") as f:
                return int.from_bytes(f.read(32)[24:32], "little")

        c.wait(lambda: ledger_limit() == 2 * GiB, "the app's ledger on n3")
        st, b = c.agent("n1").http(
            "PUT", "/api/apps/cut/compute-resources/bindings/n3-mem",
            {"memory": "1Gi"})
        self.assertEqual(st, 200, b)
        c.wait(lambda: ledger_limit() == GiB, "the cut in n3's ledger")
        c.wait(lambda: [x["memory"] for x in (c.app_of(n3, "cut") or {}).get(
            "allocations", [])] == [GiB], "the cut in n3's view")

    def test_a_cards_setting_reaches_the_agent(self):
        """devices/ is one of the agent's other watches on the stream: a
        card setting changed through n1 shows in n3's view."""
        c = self.c
        path = "/api/compute-resources/nodes/n3/devices/n3-mem/meter"

        def action(a):
            for n in c.nodes_of(a).values():
                for x in n["devices"]:
                    if x["id"] == "n3-mem":
                        return (x.get("meter") or {}).get("overQuotaAction")
        for want in ("stop", "report"):
            st, b = c.agent("n1").http("PUT", path,
                                       {"overQuotaAction": want})
            self.assertEqual(st, 200, b)
            c.wait(lambda: action(c.agent("n3")) == want,
                   "n3 shows overQuotaAction " + want)

    def test_the_agent_takes_no_monitor_slot(self):
        out = self.c.etcd.etcdctl("get", "--prefix", "/accel~live/monitor/",
                                  "--print-value-only").stdout
        self.c.wait(lambda: sorted(self.c.etcd.etcdctl(
            "get", "--prefix", "/accel~live/monitor/",
            "--print-value-only").stdout.split()) == ["n1", "n2"],
            "n1 and n2 the monitors (%s)" % out)


class AgentLivenessTest(unittest.TestCase):
    def setUp(self):
        self.c = Cluster(["n1", "n2", "n3"], node_args=AGENT)

    def tearDown(self):
        self.c.close()

    def test_a_killed_agent_is_unreachable_and_nothing_is_released(self):
        c = self.c
        st, b = install(c.agent("n1"), manifest("on3", "4Gi"),
                        **bind("n3", "n3-mem", 4 * GiB))
        self.assertTrue(won(st, b), b)
        c.wait(lambda: (c.app_of(c.agent("n2"), "on3") or {}).get(
            "state") == "running", "on3 running as n2 sees it")
        c.kill_unreachable(self, "n3", ("n1", "n2"))
        time.sleep(1)
        self.assertEqual(len(etcd_allocs(c, "n3-mem")), 1)
        self.assertEqual(etcd_keys(c, "/accel/bynode/"),
                         ["/accel/bynode/n3/on3"])
        c.restart_reachable("n3", ("n1", "n2"))
        self.assertEqual(c.app_of(c.agent("n1"), "on3")["state"], "running")

    def test_a_missing_index_key_is_written_at_an_api_servers_start(self):
        """A cluster written before the index (its key deleted here): n1,
        an API server, writes it at its start, and n3's agent then hears
        of the app's changes (a suspend through n2 stops it there)."""
        c = self.c
        m = manifest("old", "2Gi", run=["/bin/sleep", "302" + UNIQUE])
        st, b = install(c.agent("n1"), m, **bind("n3", "n3-mem", 2 * GiB))
        self.assertTrue(won(st, b), b)
        c.wait(lambda: pid_of("/bin/sleep 302" + UNIQUE) is not None,
               "running")
        pid = pid_of("/bin/sleep 302" + UNIQUE)
        c.etcd.etcdctl("del", "/accel/bynode/n3/old")
        self.assertEqual(etcd_keys(c, "/accel/bynode/"), [])
        c.agent("n1").restart()
        c.wait(lambda: etcd_keys(c, "/accel/bynode/") ==
               ["/accel/bynode/n3/old"], "the index key written again")
        self.assertIn("missing key", c.agent("n1").log())
        st, b = c.agent("n2").http("POST", "/api/apps/old/suspend")
        self.assertEqual(st, 200, b)
        c.wait(lambda: gone(pid), "the process stopped by n3")
        c.wait(lambda: etcd_allocs(c, "n3-mem") == [], "n3-mem released")


class AgentBeforeItsPeersTest(unittest.TestCase):
    """The agent (n3) starts before n2 registers: n2's cards are not in
    what it loaded."""

    def test_an_app_across_the_agent_and_a_later_node_runs_whole(self):
        """An app across n3's card and the card of n2, a node registered
        after the agent started, runs a part on each, and the agent shows
        the app whole."""
        with Cluster(["n1", "n3", "n2"], node_args=AGENT) as c:
            out = tempfile.mkdtemp(prefix="accel-agentlate-")
            os.chmod(out, 0o777)
            self.addCleanup(shutil.rmtree, out, True)
            script = ('echo "$ACCEL_NODE_RANK $ACCEL_NODE_COUNT" > '
                      '%s/$ACCEL_NODE_NAME; exec sleep 305%s' %
                      (out, UNIQUE))
            m = manifest("late", "4Gi", run=["/bin/sh", "-c", script],
                         multi=True)
            st, b = c.agent("n1").http("POST", "/api/apps", {
                "manifest": m, "computeBinding": [
                    {"nodeName": "n2", "deviceId": "n2-mem",
                     "memory": 2 * GiB},
                    {"nodeName": "n3", "deviceId": "n3-mem",
                     "memory": 2 * GiB}]})
            self.assertTrue(won(st, b), b)
            c.wait(lambda: sorted(os.listdir(out)) == ["n2", "n3"],
                   "both parts wrote their rank")
            for n, rank in (("n2", "0"), ("n3", "1")):
                with open(os.path.join(out, n)) as f:
                    self.assertEqual(f.read().split(), [rank, "2"])
            c.wait(lambda: sorted(x["deviceId"] for x in (c.app_of(
                c.agent("n3"), "late") or {}).get("allocations", [])) ==
                ["n2-mem", "n3-mem"], "the agent shows the app whole")
            c.wait(lambda: (c.app_of(c.agent("n1"), "late") or {}).get(
                "state") == "running", "late running as n1 sees it")
            st, b = c.agent("n1").http("POST", "/api/apps/late/suspend")
            self.assertEqual(st, 200, b)
            c.wait(lambda: (c.app_of(c.agent("n1"), "late") or {}).get(
                "state") == "stopped" and etcd_allocs(c, "n2-mem") == [] and
                etcd_allocs(c, "n3-mem") == [], "every card released")
            self.assertFalse(subprocess.run(
                ["pgrep", "-f", "^sleep 305%s$" % UNIQUE]).returncode == 0)


if __name__ == "__main__":
    unittest.main()
