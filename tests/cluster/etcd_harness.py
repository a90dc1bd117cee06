# SPDX-License-Identifier: MIT
"""A real etcd cluster for the cluster tests (SPEC 10): N members of
Debian's etcd (3.4) on free loopback ports, in a temporary directory of
their own, with settings that make elections and tests fast. Python 3
standard library only.

    with EtcdCluster(3) as c:
        urls = c.urls()              # ["http://127.0.0.1:P", ...]
        env["ACCEL_ETCD_ENDPOINTS"] = c.endpoints()   # comma-separated
        c.kill(c.leader())           # SIGKILL the leader
        c.restart(i)                 # same data dir, same ports
        c.etcdctl("get", "--prefix", "/accel/")   # CompletedProcess (text)

    with EtcdCluster(1, tls=True) as c:   # https client URLs
        c.ca_file, c.client_cert, c.client_key    # PEM files for clients

net=NetLab (netlab.py): member i runs in machine i of the lab, on that
machine's address and etcd's own ports (2379, 2380), so that links between
members can be cut for real.

Members are m0..m{N-1}; index i is stable for the cluster's life. Every
member runs with --heartbeat-interval 50 --election-timeout 500, auto
compaction off, --pre-vote (a restarted member does not depose a working
leader, which would drop the writes in flight) and watch progress
notifications every `progress_interval` (default 1s).

close() (also on leaving the `with`, at interpreter exit, and on SIGTERM of
the test) kills every member and removes the directory. Members also die
with the test process itself (PR_SET_PDEATHSIG), so even a SIGKILLed test
leaves no etcd running (only its directory, which nothing can remove then).
The kernel ties that signal to the *thread* that forked the member, so every
member is started from one thread of the cluster's own that lives until
close(): kill/restart may be called from any thread (a test's helper thread
that ends does not take the members it restarted with it).

tls=True: the client URLs are https, with certificates made by openssl
in the cluster's directory: a CA (ca_file), the members' certificate for
127.0.0.1, and a client certificate (client_cert, client_key) that the
members require (--client-cert-auth). Peers talk https too, each
presenting the members' certificate (--peer-client-cert-auth), as
docs/cluster.md sets them up. cert_dir=D takes the certificates from D
(made once with make_certs(D), shared by several clusters, left there);
client_cert_auth=False makes members that serve clients without a
certificate (an etcd acceld must refuse).

etcd or etcdctl missing is an error (EtcdMissing, an AssertionError), not
a skip: scripts/setup.sh installs them (etcd-server, etcd-client).
"""
import atexit
import concurrent.futures
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

ETCD = shutil.which("etcd")
ETCDCTL = shutil.which("etcdctl")

_PR_SET_PDEATHSIG = 1


class EtcdMissing(AssertionError):
    """etcd or etcdctl is not installed."""


def require_etcd():
    """Raise EtcdMissing, naming what to install, unless both etcd and
    etcdctl are on PATH."""
    missing = [n for n, p in (("etcd", ETCD), ("etcdctl", ETCDCTL)) if not p]
    if missing:
        raise EtcdMissing(
            "%s not found on PATH: the cluster tests need a real etcd "
            "(Debian: apt-get install etcd-server etcd-client, as "
            "scripts/setup.sh does)" % " and ".join(missing))


def _free_ports(n):
    """n distinct TCP ports on 127.0.0.1 that nobody listens on right now.
    The sockets are held until all are chosen, so the n differ; another
    process may still take one before etcd binds it (start() retries)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent():
    """In the child before exec: SIGKILL when the test process ends."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True,
                   capture_output=True, timeout=60)


def make_certs(d):
    """A CA, a certificate for 127.0.0.1 (the members, for clients and
    peers) and a client certificate, as PEM files in directory d (EC
    P-256, valid 2 days): ca.pem, server.pem, server.key, client.pem,
    client.key. The keys are 0600, the certificates 0644."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=accel test CA", cwd=d)
    for name, ext in (
            ("server", "subjectAltName=IP:127.0.0.1\n"
                       "extendedKeyUsage=serverAuth,clientAuth\n"),
            ("client", "extendedKeyUsage=clientAuth\n")):
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext)
        _openssl("req", *ec, "-keyout", name + ".key", "-out",
                 name + ".csr", "-subj", "/CN=accel-" + name, cwd=d)
        _openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem",
                 "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
                 "-extfile", name + ".ext", "-out", name + ".pem", cwd=d)
    for name in os.listdir(d):
        os.chmod(os.path.join(d, name),
                 0o600 if name.endswith(".key") else 0o644)


def _post(url, path, body, timeout=2.0, context=None):
    """POST JSON to an etcd member's gateway; the decoded answer."""
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
        return json.loads(r.read().decode())


class Member:
    """One etcd process: its name, ports, data directory and log."""

    def __init__(self, index, root, client_port, peer_port, scheme="http",
                 host="127.0.0.1", wrapper=()):
        self.index = index
        self.name = "m%d" % index
        self.client_url = "%s://%s:%d" % (scheme, host, client_port)
        self.peer_url = "%s://%s:%d" % (scheme, host, peer_port)
        self.wrapper = list(wrapper)  # e.g. netlab's: run it in a machine
        self.data_dir = os.path.join(root, self.name)
        self.log_path = os.path.join(root, self.name + ".log")
        self.proc = None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n=30):
        """The last n lines of the member's log (for failure messages)."""
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


class EtcdCluster:
    """N etcd members on loopback; see the module docstring."""

    def __init__(self, n=3, progress_interval="1s", start=True, tls=False,
                 cert_dir=None, client_cert_auth=True, net=None):
        require_etcd()
        if net is not None and tls:
            raise ValueError("net= members are plain http (the certificates "
                             "name 127.0.0.1)")
        self.net = net
        if n < 1:
            raise ValueError("a cluster needs at least one member")
        self.n = n
        self.progress_interval = progress_interval
        self.tls = tls
        self.cert_dir = cert_dir
        self.client_cert_auth = client_cert_auth
        self.ca_file = self.client_cert = self.client_key = None
        self._ssl = None
        self.root = None
        self.members = []
        self._closed = False
        self._old_sigterm = None
        # the one thread that forks members (see the module docstring)
        self._spawner = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="etcd-spawner")
        if start:
            self.start()

    # -- life cycle ------------------------------------------------------

    def start(self, timeout=60.0, attempts=3):
        """Create the directory, start every member and wait until the
        cluster is healthy (a leader, every member answering). A port taken
        by someone else between choosing and binding makes a member exit:
        then everything is torn down and tried again on new ports."""
        self._install_cleanup()
        last = None
        for _ in range(attempts):
            self._create()
            try:
                for m in self.members:
                    self._spawn(m, "new")
                self.wait_healthy(timeout)
                return self
            except AssertionError as e:
                last = e
                self._kill_all()
                shutil.rmtree(self.root, ignore_errors=True)
                self.root = None
        self.close()
        raise AssertionError("etcd cluster did not start: %s" % last)

    def _create(self):
        self.root = tempfile.mkdtemp(prefix="accel-etcd-")
        if self.net is not None:
            # a machine of its own each (netlab): etcd's own ports are free
            self.members = [Member(i, self.root, 2379, 2380, "http",
                                   self.net.ip(i), self.net.wrapper(i))
                            for i in range(self.n)]
            self._token = "accel-test-%d-net" % os.getpid()
            return
        ports = _free_ports(2 * self.n)
        self.members = [Member(i, self.root, ports[2 * i], ports[2 * i + 1],
                               "https" if self.tls else "http")
                        for i in range(self.n)]
        if self.tls:
            self._tls_setup()
        self._token = "accel-test-%d-%d" % (os.getpid(), ports[0])

    def _tls_setup(self):
        d = self.cert_dir
        if d is None:
            d = os.path.join(self.root, "tls")
            os.mkdir(d)
            make_certs(d)
        self._cert_dir = d
        self.ca_file = os.path.join(d, "ca.pem")
        self.client_cert = os.path.join(d, "client.pem")
        self.client_key = os.path.join(d, "client.key")
        self._ssl = ssl.create_default_context(cafile=self.ca_file)
        self._ssl.load_cert_chain(self.client_cert, self.client_key)

    def _tls_args(self):
        if not self.tls:
            return []
        d = self._cert_dir
        cert, key = (os.path.join(d, "server.pem"),
                     os.path.join(d, "server.key"))
        args = ["--cert-file", cert, "--key-file", key,
                "--peer-cert-file", cert, "--peer-key-file", key,
                "--peer-trusted-ca-file", self.ca_file,
                "--peer-client-cert-auth"]
        if self.client_cert_auth:
            args += ["--trusted-ca-file", self.ca_file, "--client-cert-auth"]
        return args

    def _args(self, m, state):
        initial = ",".join("%s=%s" % (x.name, x.peer_url)
                           for x in self.members)
        return m.wrapper + [
                ETCD, "--name", m.name, "--data-dir", m.data_dir,
                "--listen-client-urls", m.client_url,
                "--advertise-client-urls", m.client_url,
                "--listen-peer-urls", m.peer_url,
                "--initial-advertise-peer-urls", m.peer_url,
                "--initial-cluster", initial,
                "--initial-cluster-state", state,
                "--initial-cluster-token", self._token,
                "--heartbeat-interval", "50",
                "--election-timeout", "500",
                "--auto-compaction-retention", "0",
                "--pre-vote",
                "--experimental-watch-progress-notify-interval",
                self.progress_interval,
                "--log-level", "warn"] + self._tls_args()

    def _spawn(self, m, state):
        m.proc = self._spawner.submit(self._popen, m, state).result()

    def _popen(self, m, state):
        """On the spawner thread: fork and exec member m."""
        with open(m.log_path, "ab") as log:
            return subprocess.Popen(
                self._args(m, state), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, cwd=self.root,
                preexec_fn=_die_with_parent)

    def _install_cleanup(self):
        atexit.register(self.close)
        if self._old_sigterm is None:
            try:
                self._old_sigterm = signal.signal(signal.SIGTERM,
                                                  self._on_sigterm)
            except ValueError:  # not the main thread: atexit only
                self._old_sigterm = signal.SIG_DFL

    def _on_sigterm(self, signum, frame):
        self.close()
        raise SystemExit(128 + signum)

    def close(self):
        """Kill every member and remove the directory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._kill_all()
        self._spawner.shutdown(wait=True)
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        if self._old_sigterm is not None:
            try:
                signal.signal(signal.SIGTERM, self._old_sigterm)
            except ValueError:
                pass
        atexit.unregister(self.close)

    def _kill_all(self):
        for m in self.members:
            self._reap(m, signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- members ---------------------------------------------------------

    def urls(self):
        """Every member's client URL, in index order (running or not)."""
        return [m.client_url for m in self.members]

    def endpoints(self):
        """urls() as one comma-separated string (acceld's --etcd)."""
        return ",".join(self.urls())

    def index_of(self, url):
        """The index of the member whose client URL is url."""
        for m in self.members:
            if m.client_url == url.rstrip("/"):
                return m.index
        raise KeyError(url)

    def _reap(self, m, sig, wait=10.0):
        if m.proc is None:
            return
        if m.proc.poll() is None:
            m.proc.send_signal(sig)
            try:
                m.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait()
        m.proc = None

    def kill(self, i):
        """SIGKILL member i (a crash: no goodbye to its peers)."""
        self._reap(self.members[i], signal.SIGKILL)

    def stop(self, i):
        """SIGTERM member i and wait for it to exit (a clean shutdown)."""
        self._reap(self.members[i], signal.SIGTERM)

    def restart(self, i, timeout=30.0):
        """Start member i again on its data directory and ports (stopping
        it first if it runs) and wait until it answers as a member of a
        cluster with a leader that every running member agrees on."""
        m = self.members[i]
        self._reap(m, signal.SIGTERM)
        self._spawn(m, "existing")
        self._wait(lambda: self._healthy(m) and self._settled(), timeout,
                   "member %s did not come back" % m.name, [m])

    def _settled(self):
        """Do all running members name the same leader?"""
        leaders = set()
        for m in self.members:
            if m.running():
                try:
                    leaders.add(self.status(m.index).get("leader"))
                except (OSError, ValueError, urllib.error.URLError):
                    return False
        return len(leaders) == 1 and None not in leaders

    # -- state -----------------------------------------------------------

    def _healthy(self, m):
        """Does m run and report a leader? Its /health says so."""
        if not m.running():
            return False
        try:
            with urllib.request.urlopen(m.client_url + "/health",
                                        timeout=2.0, context=self._ssl) as r:
                return json.loads(r.read().decode()).get("health") == "true"
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def _wait(self, pred, timeout, what, members):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            for m in members:
                if m.proc is not None and m.proc.poll() is not None:
                    raise AssertionError("%s: etcd %s exited (%s):\n%s" % (
                        what, m.name, m.proc.returncode, m.log_tail()))
            time.sleep(0.05)
        raise AssertionError("%s within %.0f s:\n%s" % (what, timeout, "".join(
            "--- %s\n%s" % (m.name, m.log_tail()) for m in members)))

    def wait_healthy(self, timeout=60.0):
        """Wait until every running member reports a healthy cluster and
        all name the same leader."""
        live = [m for m in self.members if m.proc is not None]
        self._wait(lambda: all(self._healthy(m) for m in live) and
                   self._settled(), timeout, "etcd cluster not healthy", live)

    def status(self, i):
        """Member i's /v3/maintenance/status answer (a dict)."""
        return _post(self.members[i].client_url, "/v3/maintenance/status",
                     {}, context=self._ssl)

    def move_leader(self):
        """Hand leadership from the current leader to another running
        member (/v3/maintenance/transfer-leadership), as an election
        would; returns the new leader's index once it reports so."""
        old = self.leader()
        to = next(m.index for m in self.members
                  if m.index != old and m.running())
        target = self.status(to)["header"]["member_id"]
        _post(self.members[old].client_url,
              "/v3/maintenance/transfer-leadership", {"targetID": target},
              context=self._ssl)
        deadline = time.monotonic() + 10
        while self.leader() == old and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.leader()

    def leader(self, timeout=10.0):
        """The index of the current leader, as a running member reports it
        (waits up to timeout for an election to settle)."""
        deadline = time.monotonic() + timeout
        while True:
            ids = {}
            leader = None
            for m in self.members:
                if not m.running():
                    continue
                try:
                    st = self.status(m.index)
                except (OSError, ValueError, urllib.error.URLError):
                    continue
                ids[st.get("header", {}).get("member_id")] = m.index
                leader = st.get("leader") or leader
            if leader in ids:
                return ids[leader]
            if time.monotonic() > deadline:
                raise AssertionError("no etcd leader among the running "
                                     "members")
            time.sleep(0.05)

    def etcdctl(self, *args, check=True, timeout=30.0, members=None,
                input=None):
        """Run etcdctl (API v3) against the running members (or those of
        the indexes in members: not one cut off); the
        subprocess.CompletedProcess (text). check: raise on failure.
        input: its standard input (a `txn`'s text)."""
        live = [m.client_url for m in self.members if m.running() and
                (members is None or m.index in members)]
        env = dict(os.environ, ETCDCTL_API="3")
        tls = ["--cacert", self.ca_file, "--cert", self.client_cert,
               "--key", self.client_key] if self.tls else []
        return subprocess.run(
            [ETCDCTL, "--endpoints", ",".join(live)] + tls + list(args),
            env=env, capture_output=True, text=True, check=check,
            timeout=timeout, input=input)
