# SPDX-License-Identifier: MIT
"""Real network faults on one machine for the cluster tests (issue 19):
every machine of a test cluster gets its own network namespace and
address, links between machines are cut (both ways or one way) and healed
by routing rules, and a delaying proxy slows etcd by a set time. Python 3
standard library, iproute2 (ip) and util-linux (unshare, nsenter, setpriv)
only; needs root.

    lab = NetLab(3)                  # machines 0..2: 10.77.1.2, .2.2, .3.2
    lab.wrapper(0)                   # nsenter into machine 0, then the command
    lab.isolate(0)                   # machine 0 hears no other, both ways
    lab.cut(1, 0)                    # packets 1 -> 0 dropped (one way)
    lab.heal()                       # every rule gone
    p = lab.proxy(("10.77.1.2", 2379)); p.delay_ms = 100   # a slow member
    lab.close()

The layout, and why cleanup cannot miss:

- The test process first moves itself into a network namespace of its
  own (unshare(CLONE_NEWNET), enter_private_net()): the hub. Nothing the
  lab does touches the machine's own network (the host's lo, other tests
  on the same machine).
- Each machine is a namespace held open by one `sleep` started with
  `unshare --net` (PR_SET_PDEATHSIG: it dies with the test process), linked
  to the hub by a veth pair of its own subnet (machine k: 10.77.k+1.2, the
  hub's end 10.77.k+1.1, its default route). The hub forwards between
  machines. Members and agents are started in a machine with `nsenter
  --net=/proc/<holder>/ns/net` and `setpriv --pdeathsig KILL`; a machine's
  etcd member and acceld talk over that namespace's loopback, which no rule
  touches (one machine, as in docs/cluster.md).
- A cut is a policy routing rule in the hub, `ip rule add from A to B
  blackhole`: a packet A sends to B is dropped silently on its way through
  (TCP sees no answer, as on a pulled cable); B's packets to A still pass
  unless cut too. The hub's own addresses are never cut: the test always
  sees every API and every member (an observer, not a node). (This
  kernel's tc has no netem, u32 nor drop action, hence routes and a proxy.)
- Delay: DelayProxy, in the hub, hands on each chunk delay_ms after it
  arrived, in order, both ways; agents pointed at the proxies see every
  etcd request that much slower.

None of it has a name outside the test process's own namespace: when the
test process ends, however it ends (even SIGKILL), its namespace goes, the
holders and everything started in a machine die with it (PDEATHSIG), and
their namespaces and veths go with them. There is nothing to sweep at the
next start.
"""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
RULE_PRIO = 100      # the lab's ip rules: 100 and on, before "main"

_entered = False


class NetMissing(AssertionError):
    """What the lab needs is missing (root, ip, tc, unshare, nsenter)."""


def require_net():
    missing = [t for t in ("ip", "unshare", "nsenter", "setpriv")
               if shutil.which(t) is None]
    if missing:
        raise NetMissing("%s not found on PATH: the network fault tests "
                         "need iproute2 and util-linux" % " and ".join(missing))
    if os.geteuid() != 0:
        raise NetMissing("the network fault tests need root (network "
                         "namespaces, routing rules); CI runs them as root")


def _run(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True,
                       timeout=30)
    if check and r.returncode != 0:
        raise AssertionError("%s: exit %d: %s" % (" ".join(args),
                                                   r.returncode,
                                                   r.stderr.strip()))
    return r


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def enter_private_net():
    """Move this process into a new network namespace (once). Call it from
    the main thread before any other thread starts: a namespace belongs to
    the thread that made it, and later threads inherit their creator's."""
    global _entered
    if _entered:
        return
    require_net()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise NetMissing("unshare(CLONE_NEWNET): %s" % os.strerror(e))
    _entered = True
    _run("ip", "link", "set", "lo", "up")


class Machine:
    """One namespace: its holder process and address."""

    def __init__(self, index):
        self.index = index
        self.ip = "10.77.%d.2" % (index + 1)
        self.gw = "10.77.%d.1" % (index + 1)
        self.holder = subprocess.Popen(
            ["unshare", "--net", "--", "sleep", "infinity"],
            stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    @property
    def ns(self):
        return "/proc/%d/ns/net" % self.holder.pid

    def wrapper(self):
        """The command line prefix that runs a program in this machine,
        killed when the process that started it ends."""
        return ["nsenter", "--net=" + self.ns, "--",
                "setpriv", "--pdeathsig", "KILL", "--"]

    def sh(self, *args, check=True):
        return _run(*(["nsenter", "--net=" + self.ns, "--"] + list(args)),
                    check=check)

    def wait_own_ns(self, timeout=10.0):
        mine = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.holder.poll() is not None:
                raise AssertionError("unshare --net exited with %s" %
                                     self.holder.returncode)
            try:
                if os.readlink(self.ns) != mine:
                    return
            except OSError:
                pass
            time.sleep(0.01)
        raise AssertionError("machine %d: no namespace of its own within "
                             "%.0f s" % (self.index, timeout))

    def stop(self):
        """Kill whatever still runs in this machine (an app whose acceld
        is gone, a member or agent a failed test left), then its holder:
        the namespace goes with the last of them."""
        try:
            mine = os.readlink(self.ns)
        except OSError:
            mine = None
        for pid in os.listdir("/proc") if mine else []:
            if not pid.isdigit() or int(pid) == self.holder.pid:
                continue
            try:
                if os.readlink("/proc/%s/ns/net" % pid) == mine:
                    os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        if self.holder.poll() is None:
            self.holder.kill()
        self.holder.wait()


class NetLab:
    """n machines routed through the hub; see the module docstring."""

    _labs = 0  # labs made in this process: each names its veths apart

    def __init__(self, n):
        enter_private_net()
        NetLab._labs += 1
        self.lab = NetLab._labs
        self.machines = []
        self.cuts = {}       # (src index, dst index) -> ip rule priority
        self.proxies = []
        with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
            f.write("1\n")  # this namespace's own setting
        try:
            for k in range(n):
                self.machines.append(self._machine(k))
        except BaseException:
            self.close()
            raise

    def _machine(self, k):
        m = Machine(k)
        m.wait_own_ns()
        hub_end = "vm%d.%d" % (self.lab, k)
        _run("ip", "link", "add", hub_end, "type", "veth", "peer", "name",
             "eth0", "netns", str(m.holder.pid))
        _run("ip", "addr", "add", m.gw + "/24", "dev", hub_end)
        _run("ip", "link", "set", hub_end, "up")
        m.sh("ip", "link", "set", "lo", "up")
        m.sh("ip", "addr", "add", m.ip + "/24", "dev", "eth0")
        m.sh("ip", "link", "set", "eth0", "up")
        m.sh("ip", "route", "add", "default", "via", m.gw)
        return m

    def ip(self, k):
        return self.machines[k].ip

    def wrapper(self, k):
        return self.machines[k].wrapper()

    def cut(self, src, dst):
        """Drop every packet machine src sends to machine dst (one way:
        dst's packets to src still arrive). Cutting twice is one cut."""
        if (src, dst) in self.cuts:
            return
        prio = RULE_PRIO + len(self.machines) * src + dst
        _run("ip", "rule", "add", "from", self.ip(src), "to", self.ip(dst),
             "priority", str(prio), "blackhole")
        self.cuts[(src, dst)] = prio

    def isolate(self, k, inbound=True, outbound=True):
        """Cut machine k from every other machine: inbound drops what they
        send it, outbound what it sends them. The hub still reaches it."""
        for o in range(len(self.machines)):
            if o == k:
                continue
            if inbound:
                self.cut(o, k)
            if outbound:
                self.cut(k, o)

    def partition(self, side):
        """Cut the machines in side from all the others, both ways."""
        for a in side:
            for b in range(len(self.machines)):
                if b not in side:
                    self.cut(a, b)
                    self.cut(b, a)

    def heal(self, k=None):
        """Remove the cuts to and from machine k (None: every cut)."""
        for (a, b), prio in sorted(self.cuts.items()):
            if k is None or k in (a, b):
                _run("ip", "rule", "del", "priority", str(prio))
                del self.cuts[(a, b)]

    def rules(self):
        """The hub's routing rules, as ip lists them (failure messages)."""
        return _run("ip", "rule", "show", check=False).stdout

    def proxy(self, target, delay_ms=0):
        """A DelayProxy to target (ip, port), on the hub's address towards
        target's machine."""
        gw = target[0].rsplit(".", 1)[0] + ".1"
        p = DelayProxy(gw, target, delay_ms)
        self.proxies.append(p)
        return p

    def close(self):
        """Stop the proxies and every holder: the namespaces, veths and
        rules go with them. Idempotent."""
        for p in self.proxies:
            p.close()
        self.proxies = []
        try:
            self.heal()
        except AssertionError:
            pass
        for m in self.machines:
            m.stop()
        self.machines = []


class DelayProxy:
    """A TCP proxy that hands every chunk on delay_ms after it arrived,
    in order, in both directions (delay_ms may change at any time; a
    change applies to the chunks that arrive after it). addr: (ip, port)
    it listens on."""

    def __init__(self, ip, target, delay_ms=0):
        self.target = target
        self.delay_ms = delay_ms
        self._closed = False
        self._socks = []
        self._lock = threading.Lock()
        self._ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._ls.bind((ip, 0))
        self._ls.listen(64)
        self.addr = self._ls.getsockname()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return "http://%s:%d" % self.addr

    def _accept(self):
        while not self._closed:
            try:
                c, _ = self._ls.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.target, timeout=2)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._socks += [c, u]
            self._pipe(c, u)
            self._pipe(u, c)

    def _pipe(self, src, dst):
        """Two threads: one reads src and stamps each chunk with when it is
        due, one writes the chunks to dst when due (a reader that slept
        would add the delay once per chunk queued behind it)."""
        q = []
        cv = threading.Condition()

        def reader():
            while True:
                try:
                    data = src.recv(65536)
                except OSError:
                    data = b""
                with cv:
                    q.append((time.monotonic() + self.delay_ms / 1000.0,
                              data))
                    cv.notify()
                if not data:
                    return

        def writer():
            while True:
                with cv:
                    while not q:
                        cv.wait()
                    due, data = q.pop(0)
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                try:
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        return
                    dst.sendall(data)
                except OSError:
                    for s in (src, dst):
                        try:
                            s.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                    return

        threading.Thread(target=reader, daemon=True).start()
        threading.Thread(target=writer, daemon=True).start()

    def close(self):
        self._closed = True
        try:
            self._ls.close()
        except OSError:
            pass
        with self._lock:
            for s in self._socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self._socks = []
