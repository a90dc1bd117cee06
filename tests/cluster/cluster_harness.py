# SPDX-License-Identifier: MIT
"""A whole accel cluster on one machine (SPEC 10): a real etcd cluster
(etcd_harness.EtcdCluster, N members on loopback) and one acceld agent per
node, each with its own data directory, port and inventory (its own
devices), all pointed at the same etcd. Python 3 standard library only.

    with Cluster(["n1", "n2", "n3"]) as c:
        a1 = c.agent("n1")              # an accel_harness.Acceld
        st, body = c.agent("n2").http("GET", "/api/compute-resources")
        c.wait(lambda: ..., "what")     # poll until true, or fail saying what

Every node gets two cards: <node>-excl (24 Gi, Exclusive) and <node>-mem
(16 Gi, MemorySlice), unless devices= says otherwise. The first agent
started writes admin.token; the others get that token (users are
cluster-wide). Agents run with --no-cgroups (cgroups=True: with their
own cgroups, as container apps need) and --lease-ttl 3 (liveness within
5 s); wrappers={node: prefix} starts a node's acceld under a command
line prefix (a private mount namespace of its own, say); node_args={node:
[args]} adds a node's own acceld arguments (--role agent, say).

etcd is plain http on loopback unless tls=True, so the agents say
--etcd-insecure (acceld refuses an etcd that serves clients without a
certificate otherwise). tls=True: the members speak TLS to clients and
peers and require client certificates (etcd_harness), made once in
cert_dir (etcd_harness.make_certs) when given; the agents present the
client certificate (--etcd-cacert, --etcd-cert, --etcd-key).

net=True: every node is a machine of its own (netlab.NetLab, a network
namespace each): node k and etcd member k share machine k, as in
docs/cluster.md, and c.net cuts, heals and delays the links between
machines. proxied=True (with net): the agents reach etcd through the
lab's delaying proxies (c.proxies, one per member; delay_ms 0 at first).
"""
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

from accel_harness import Acceld, GiB  # noqa: E402
from etcd_harness import EtcdCluster  # noqa: E402
from netlab import NetLab  # noqa: E402

# the agents' reconcile pass interval: short, so that tests see a process
# start or exit soon; None: acceld's default (the benchmarks)
RECONCILE_MS = 200
LEASE_TTL = 3
AGENT_PORT = 7390  # net=True: each agent on its machine's own address


def _host_port(url):
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


def inventory(node, devices=None):
    """The YAML inventory of one node: its own devices only."""
    if devices is None:
        devices = [("%s-excl" % node, "24Gi", "Exclusive"),
                   ("%s-mem" % node, "16Gi", "MemorySlice")]
    lines = ["nodes:", "- name: %s" % node,
             "  memory: {total: 64Gi, used: 0Gi}",
             "  cpu: {total: \"16\", used: \"0\"}",
             "  disk: {total: 2Ti, used: 0Gi}", "  devices:"]
    for did, mem, mode in devices:
        lines += ["  - id: %s" % did, "    type: nvidia",
                  "    model: Test GPU", "    memory: %s" % mem,
                  "    supportType: %s" % mode]
    return "\n".join(lines) + "\n"


class Agent(Acceld):
    """An acceld of the cluster. Only the first one writes admin.token:
    the others are ready when /healthz answers (token given)."""

    def __init__(self, node, endpoints, token=None, devices=None,
                 extra_args=(), env=None, wrapper=(), host="127.0.0.1",
                 port=None, cgroups=False):
        self.node = node
        self.endpoints = endpoints
        args = ["--node-name", node, "--etcd", endpoints,
                "--lease-ttl", str(LEASE_TTL)]
        if not cgroups:
            args.append("--no-cgroups")
        if RECONCILE_MS is not None:
            args += ["--reconcile-interval-ms", str(RECONCILE_MS)]
        args += list(extra_args)
        super().__init__(inventory=inventory(node, devices), extra_args=args,
                         env=env, wrapper=wrapper, host=host, port=port)
        self.given_token = token

    def _wait_ready(self):
        if self.given_token is None:
            return super()._wait_ready()
        self.token = self.given_token
        deadline = time.time() + self.start_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return "exited with %s" % self.proc.returncode
            try:
                status, _ = self.http("GET", "/healthz", token="")
                if status == 200:
                    return None
            except OSError:
                pass
            time.sleep(0.05)
        return "no answer on /healthz within %.0f s" % self.start_timeout

    def restart(self):
        """Start again on the same data directory and port."""
        self.stop()
        self.given_token = self.token
        return self.start()

    def signal(self, sig):
        self.proc.send_signal(sig)

    def kill_apps(self):
        """Kill the processes of the apps this agent started: with
        --no-cgroups an app is a process group, which outlives its acceld
        (a restart keeps apps running); they are known by their HOME under
        this agent's data directory (each test's own), whether or not the
        agent still answers."""
        marks = tuple({("HOME=" + d + "/").encode() for d in
                       (self.data_dir, os.path.realpath(self.data_dir))})
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
                pgid = os.getpgid(int(pid))
                if pgid != os.getpgrp() and any(e.startswith(marks)
                                                for e in env):
                    os.killpg(pgid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass  # gone meanwhile, or not ours to read

    def close(self):
        self.kill_apps()
        super().close()

    def kill9(self):
        """SIGKILL: no goodbye, the lease lapses by itself."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None


class Cluster:
    def __init__(self, nodes=("n1", "n2", "n3"), members=3, devices=None,
                 envs=None, extra_args=(), tls=False, cert_dir=None,
                 net=False, proxied=False, cgroups=False, wrappers=None,
                 node_args=None):
        self.net = None
        self.proxies = []
        if net:
            self.net = NetLab(max(len(nodes), members))
        try:
            self.etcd = EtcdCluster(members, tls=tls, cert_dir=cert_dir,
                                    net=self.net)
        except BaseException:
            if self.net:
                self.net.close()
            raise
        self.agents = {}
        if tls:
            etcd_args = ["--etcd-cacert", self.etcd.ca_file,
                         "--etcd-cert", self.etcd.client_cert,
                         "--etcd-key", self.etcd.client_key]
        else:
            etcd_args = ["--etcd-insecure"]
        try:
            token = None
            endpoints = self.etcd.endpoints()
            if proxied:
                self.proxies = [self.net.proxy(_host_port(u))
                                for u in self.etcd.urls()]
                endpoints = ",".join(p.url for p in self.proxies)
            for k, n in enumerate(nodes):
                where = {}
                if (wrappers or {}).get(n):
                    where = dict(wrapper=wrappers[n])
                if self.net:
                    where = dict(wrapper=self.net.wrapper(k),
                                 host=self.net.ip(k), port=AGENT_PORT)
                a = Agent(n, endpoints, token=token,
                          devices=(devices or {}).get(n),
                          env=(envs or {}).get(n),
                          extra_args=etcd_args + list(extra_args) +
                          list((node_args or {}).get(n, ())),
                          cgroups=cgroups, **where)
                a.start()
                token = a.token
                self.agents[n] = a
            self.token = token
            # an agent (--role agent) watches no other node: it shows
            # the nodes as they were at its start
            self.api = [n for n in nodes if "agent" not in
                        list((node_args or {}).get(n, ()))]
            self.wait(lambda: all(len(self.nodes_of(self.agents[n])) ==
                                  len(nodes) and
                                  all(x["reachable"] for x in
                                      self.nodes_of(self.agents[n]).values())
                                  for n in self.api),
                      "every API server sees every node reachable")
        except BaseException:
            self.close()
            raise

    def agent(self, node):
        return self.agents[node]

    def nodes_of(self, a):
        """{node name: node JSON} as agent a's API shows them."""
        st, body = a.http("GET", "/api/compute-resources")
        if st != 200:
            return {}
        data = body["data"]
        nodes = data.get("nodes", data) if isinstance(data, dict) else data
        return {n["nodeName"]: n for n in nodes}

    def app_of(self, a, name):
        st, body = a.http("GET", "/api/apps/%s" % name)
        return body["data"] if st == 200 and body else None

    def wait(self, pred, what, timeout=20.0, every=0.05):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                if pred():
                    return
            except (OSError, KeyError, TypeError, ValueError) as e:
                last = e
            time.sleep(every)
        logs = "".join("\n--- %s\n%s" % (n, a.log()[-1500:])
                       for n, a in self.agents.items())
        raise AssertionError("not within %.0f s: %s (%s)%s" %
                             (timeout, what, last, logs))

    def close(self):
        """Close every agent and etcd; then raise what an agent's close
        raised (a sanitizer report in its log), if anything."""
        errors = []
        for a in self.agents.values():
            try:
                a.close()
            except AssertionError as e:
                errors.append(e)
        self.agents = {}
        self.etcd.close()
        if self.net:
            self.net.close()
        if errors:
            raise errors[0]

    def reachable(self, viewer, node):
        """Whether viewer's API shows node reachable."""
        return self.nodes_of(self.agent(viewer))[node]["reachable"]

    def kill_unreachable(self, tc, node, viewers):
        """SIGKILL node's acceld: every viewer shows it unreachable within
        the lease's TTL + 2 s (docs/cluster.md), asserted through tc."""
        self.agent(node).kill9()
        t0 = time.monotonic()
        self.wait(lambda: not any(self.reachable(v, node) for v in viewers),
                  node + " unreachable", timeout=LEASE_TTL + 2, every=0.05)
        tc.assertLess(time.monotonic() - t0, LEASE_TTL + 2)

    def restart_reachable(self, node, viewers):
        """Start node's acceld again, until every viewer sees it."""
        self.agent(node).restart()
        self.wait(lambda: all(self.reachable(v, node) for v in viewers),
                  node + " back")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def manifest(name, gpu_mem="4Gi", run=None, multi=False, cpu="1",
             mem="1Gi"):
    """An app manifest (JSON) needing gpu_mem of an NVIDIA card (and cpu
    cores, mem of RAM and 1 Gi of disk on its node)."""
    m = {"apiVersion": "v2",
         "metadata": {"name": name, "title": name},
         "spec": {"accelerator": [{
             "mode": "nvidia", "requiredGPUMemory": gpu_mem,
             "limitedGPUMemory": gpu_mem, "requiredMemory": mem,
             "limitedMemory": mem, "requiredCpu": cpu, "limitedCpu": cpu,
             "requiredDisk": "1Gi", "limitedDisk": "1Gi"}]}}
    if run:
        m["run"] = {"command": list(run)}
    if multi:
        m["spec"]["accelerator"][0]["supportMultiNodes"] = True
    return m
