# SPDX-License-Identifier: MIT
"""Shared helper of the integration tests: run the real acceld in a temporary
data directory on a free port, talk to its HTTP API, and run accelctl against
it. Python 3 standard library only.

    with Acceld(inventory=TEXT_OR_PATH) as d:
        status, body = d.http("GET", "/api/compute-resources")
        r = d.ctl("list")            # subprocess.CompletedProcess (text)

ACCEL_BUILD_DIR (default <source>/build) locates acceld and accelctl;
ACCEL_SOURCE_DIR (default: two levels above this file) locates examples/.
"""
import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

SOURCE_DIR = os.environ.get(
    "ACCEL_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("ACCEL_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
ACCELD = os.path.join(BUILD_DIR, "acceld")
ACCELCTL = os.path.join(BUILD_DIR, "accelctl")
HOMELAB = os.path.join(SOURCE_DIR, "examples", "homelab.yaml")

GiB = 1 << 30
MiB = 1 << 20


def failed_check(status, body, want_type=None):
    """The (type, Data) of a failed check as app-service's clients read it
    (SPEC 5): HTTP 200, body {"code":422,"data":{"type":T,"Data":D}}.
    Raises AssertionError naming what differs when the answer is not one
    (or is one of another type than want_type)."""
    if status != 200 or not isinstance(body, dict) or body.get("code") != 422:
        raise AssertionError("not a failed check (HTTP 200, code 422): %r %r"
                             % (status, body))
    d = body.get("data")
    if not isinstance(d, dict) or not isinstance(d.get("type"), str) \
            or "Data" not in d:
        raise AssertionError("failed check without data.type/data.Data: %r"
                             % (body,))
    if want_type is not None and d["type"] != want_type:
        raise AssertionError("failed check %s, expected %s: %r"
                             % (d["type"], want_type, body))
    return d["type"], d["Data"]


def _flow(fields):
    """A YAML flow mapping of fields whose values are written as JSON
    scalars (a quoted string, a number): YAML reads them as JSON does."""
    return "{%s}" % ", ".join("%s: %s" % (k, json.dumps(v))
                              for k, v in fields.items())


def device(dev_id, model="Fake GPU", memory="16Gi", support="MemorySlice",
           type="nvidia", index=None):
    """One inventory device, as a line of YAML; support None (an Apple or
    AMD device without a supportType) and memory None leave the field out,
    index None too."""
    fields = {"id": dev_id, "type": type, "model": model, "memory": memory,
              "supportType": support, "index": index}
    return "  - %s\n" % _flow({k: v for k, v in fields.items()
                               if v is not None})


def node(name, *devices, memory=("64Gi", "4Gi"), cpu=("16", "1"),
         disk=("1Ti", "10Gi")):
    """One inventory node, as YAML: its (total, used) memory, CPUs and
    disk, and its device() lines."""
    def pair(v):
        return _flow({"total": v[0], "used": v[1]})
    return ("- name: %s\n  memory: %s\n  cpu: %s\n  disk: %s\n  devices:\n"
            % (name, pair(memory), pair(cpu), pair(disk)) + "".join(devices))


def inventory(*nodes):
    """Inventory text (SPEC 1.1) of node() texts, for Acceld(inventory=)."""
    return "nodes:\n" + "".join(nodes)


def manifest(name, gpu="8Gi", mem="1Gi", cpu="1", disk="1Gi", mode="nvidia",
             shared=False):
    """A manifest with one accelerator entry that limits each resource to
    what it requires: gpu (GPU memory; None for a mode without), memory,
    CPU and disk; shared: a v3 manifest with options.shared (SPEC 1.1)."""
    e = {"mode": mode, "requiredMemory": mem, "limitedMemory": mem,
         "requiredCpu": cpu, "limitedCpu": cpu, "requiredDisk": disk,
         "limitedDisk": disk}
    if gpu is not None:
        e.update({"requiredGPUMemory": gpu, "limitedGPUMemory": gpu})
    m = {"apiVersion": "v3" if shared else "v2", "metadata": {"name": name},
         "spec": {"accelerator": [e]}}
    if shared:
        m["options"] = {"shared": True}
    return m


def poll(pred, timeout, step=0.05):
    """pred()'s first true value, polled every step seconds; after timeout
    seconds, its value then (false unless it just came true)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def wait_for(test, pred, what, timeout=10, step=0.05, log=None):
    """pred()'s first true value (poll); fails test (a TestCase) naming
    what when it stays false, with log (an Acceld)'s tail when given."""
    v = poll(pred, timeout, step)
    if v:
        return v
    if log is None:
        test.fail("timed out waiting for " + what)
    test.fail("timed out waiting for %s\n--- acceld log ---\n%s" %
              (what, log.log()))


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def open_fds(pid):
    """How many file descriptors process pid has open."""
    return len(os.listdir("/proc/%d/fd" % pid))


def cpu_seconds(pid):
    """The CPU time (user + system, seconds) process pid has used."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def end_process(proc, grace):
    """Stop a child (SIGTERM, then SIGKILL after grace seconds) and reap
    it; nothing for None or one that has exited."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_prometheus(prom, tmp, d, port):
    """Debian's prometheus (the binary prom) on 127.0.0.1:port, its files
    in tmp (log: prometheus.log), scraping d (an Acceld) every second with
    d's admin token as a bearer token file."""
    tok = os.path.join(tmp, "token")
    with open(tok, "w") as f:
        f.write(d.token + "\n")
    conf = os.path.join(tmp, "prometheus.yml")
    with open(conf, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n"
                "scrape_configs:\n- job_name: accel\n"
                "  authorization:\n    type: Bearer\n"
                "    credentials_file: %s\n"
                "  static_configs:\n  - targets: ['127.0.0.1:%d']\n"
                % (tok, d.port))
    with open(os.path.join(tmp, "prometheus.log"), "wb") as log:
        return subprocess.Popen(
            [prom, "--config.file=" + conf,
             "--storage.tsdb.path=" + os.path.join(tmp, "data"),
             "--web.listen-address=127.0.0.1:%d" % port],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)


def require_binaries(*paths):
    """Skip the calling test class when a binary has not been built."""
    for p in paths:
        if not os.access(p, os.X_OK):
            raise unittest.SkipTest("%s is not built" % p)


def cgroup_instance(data_dir):
    """The <instance> of acceld's cgroups for a data directory: 12 hex
    digits of the FNV-1a 64 hash of its realpath (docs/internals/runtime.md).
    """
    h = 1469598103934665603
    for c in os.path.realpath(data_dir).encode():
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%012x" % (h & 0xFFFFFFFFFFFF)


def _cgroup_mounts():
    """(mount point, fs type, controllers) of each mounted cgroup fs."""
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.readlines()
    except OSError:
        return out
    for line in lines:
        pre, _, post = line.partition(" - ")
        fields, rest = pre.split(), post.split()
        if len(fields) >= 5 and rest and rest[0] in ("cgroup", "cgroup2"):
            opts = rest[2].split(",") if len(rest) > 2 else []
            out.append((fields[4], rest[0], opts))
    return out


def _own_cgroups():
    """{controller or '' for v2: our cgroup path} from /proc/self/cgroup."""
    own = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctl, path = line.rstrip("\n").split(":", 2)
            for c in (ctl.split(",") if ctl else [""]):
                own[c] = path
    return own


def cgroup_dirs(instance):
    """Every accel.slice/<instance> directory that exists, in any cgroup
    hierarchy, under our own cgroup or the hierarchy's root (acceld, our
    child, starts in the same cgroups)."""
    own = _own_cgroups()
    found = []
    for mnt, fstype, opts in _cgroup_mounts():
        keys = [""] if fstype == "cgroup2" else [o for o in opts if o in own]
        for k in keys:
            for base in (own.get(k, "/"), "/"):
                d = os.path.normpath("%s/%s/accel.slice/%s" %
                                     (mnt, base, instance))
                if os.path.isdir(d) and d not in found:
                    found.append(d)
    return found


def _procs(d):
    try:
        with open(os.path.join(d, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def status_field(pid, field):
    """A field of /proc/<pid>/status split into words (None when absent)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].split()
    return None


def kill_cgroups(instance, timeout=10.0):
    """Kill whatever still runs in the app cgroups of an instance (a test
    that failed half-way) and wait, bounded, until they are empty."""
    apps = []
    for d in cgroup_dirs(instance):
        try:  # acceld removes the directory once its last app is gone
            names = os.listdir(d)
        except FileNotFoundError:
            continue
        apps += [os.path.join(d, a) for a in names
                 if os.path.isdir(os.path.join(d, a))]
    deadline = time.time() + timeout
    while time.time() < deadline:
        left = [p for a in apps for p in _procs(a)]
        if not left:
            return
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


# Every Acceld not closed yet: closed at exit, so that a test that fails
# before its tearDown (a setUp whose start() raised, a test that forgot
# close) still leaves no process, cgroup or temporary directory behind.
_OPEN = {}


@atexit.register
def _close_all():
    for d in list(_OPEN.values()):
        d.close()


def temp_dir(test, prefix):
    """A temporary directory removed when `test` (a TestCase) ends, passed
    or failed: registered with addCleanup as soon as it exists."""
    path = tempfile.mkdtemp(prefix=prefix)
    test.addCleanup(shutil.rmtree, path, True)
    return path


class Acceld:
    """One acceld process with its own data directory and port.

    inventory: a path, or YAML/JSON text (written to the data dir's parent),
    or None for examples/homelab.yaml, or "" for none. extra_args go to
    acceld as they are; env (a dict) is added to acceld's environment, e.g.
    ACCEL_NVML_LIB and ACCEL_FAKE_NVML for the fake NVML; wrapper (a list) is
    put before acceld's command line, e.g. setpriv to run it unprivileged.
    """

    def __init__(self, inventory=None, extra_args=(), start_timeout=20.0,
                 env=None, wrapper=(), host="127.0.0.1", port=None,
                 relative=False):
        self.tmp = tempfile.mkdtemp(prefix="accel-it-")
        # relative: started the README's way, from its directory with a
        # relative --data-dir (scripts/run.sh: ./accel-data)
        self.relative = relative
        # apps run as their owner's uid (SPEC 3) and must reach their home
        # under <data-dir>/home: others may search (not list) the tmp dir
        os.chmod(self.tmp, 0o711)
        self.data_dir = os.path.join(self.tmp, "data")
        self.host = host          # the address it listens on
        self.fixed_port = port    # None: a free port of 127.0.0.1
        self.port = None
        self.proc = None
        self.log_path = os.path.join(self.tmp, "acceld.log")
        self.extra_args = list(extra_args)
        self.env = dict(env) if env else None
        self.wrapper = list(wrapper)  # e.g. setpriv ... to run acceld
        self.start_timeout = start_timeout
        if inventory is None:
            self.inventory = HOMELAB
        elif "\n" in inventory:
            self.inventory = os.path.join(self.tmp, "inventory.yaml")
            with open(self.inventory, "w") as f:
                f.write(inventory)
        else:
            self.inventory = inventory
        self.token = None
        self.cgroups_left = []
        _OPEN[id(self)] = self

    @property
    def url(self):
        return "http://%s:%d" % (self.host, self.port)

    def start(self):
        """Start acceld and wait until /healthz answers and admin.token exists."""
        require_binaries(ACCELD)
        os.makedirs(self.data_dir, exist_ok=True)
        last = None
        for _ in range(3):  # a port taken between free_port() and bind
            self.port = self.fixed_port or free_port()
            data = "./data" if self.relative else self.data_dir
            args = self.wrapper + [ACCELD, "--data-dir", data,
                                   "--listen", "%s:%d" % (self.host,
                                                          self.port)]
            if self.inventory:
                args += ["--inventory", self.inventory]
            args += self.extra_args
            log = open(self.log_path, "ab")
            env = None
            if self.env:
                env = dict(os.environ)
                env.update(self.env)
            self.proc = subprocess.Popen(args, stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, env=env,
                                         cwd=self.tmp if self.relative
                                         else None)
            log.close()
            last = self._wait_ready()
            if last is None:
                return self
            self.stop()
        raise RuntimeError("acceld did not start: %s\n--- log ---\n%s" %
                           (last, self.log()))

    def _wait_ready(self):
        deadline = time.time() + self.start_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return "exited with %s" % self.proc.returncode
            try:
                status, _ = self.http("GET", "/healthz", token="")
                tok = os.path.join(self.data_dir, "admin.token")
                if status == 200 and os.path.exists(tok):
                    with open(tok) as f:
                        self.token = f.read().strip()
                    if self.token:
                        return None
            except OSError:
                pass
            time.sleep(0.05)
        return "no answer on /healthz within %.0f s" % self.start_timeout

    def stop(self):
        """Stop acceld (SIGTERM, then SIGKILL after 5 s)."""
        end_process(self.proc, 5)
        self.proc = None

    def close(self):
        """Stop acceld and remove its data; processes left in its app
        cgroups are killed first, so that acceld removes its cgroups."""
        inst = None
        if os.path.isdir(self.data_dir):
            inst = cgroup_instance(self.data_dir)
            kill_cgroups(inst)
        self.stop()
        # what acceld left behind (a test fixture asserts it is nothing)
        self.cgroups_left = cgroup_dirs(inst) if inst else []
        for d in self.cgroups_left:  # leave the machine clean anyway
            try:
                subs = sorted(os.listdir(d))
            except FileNotFoundError:
                continue
            for sub in subs:
                if os.path.isdir(os.path.join(d, sub)):
                    try:
                        os.rmdir(os.path.join(d, sub))
                    except OSError:
                        pass
            try:
                os.rmdir(d)
            except OSError:
                pass
        found = self.sanitizer_reports()
        shutil.rmtree(self.tmp, ignore_errors=True)
        _OPEN.pop(id(self), None)
        if found:
            raise AssertionError("acceld reported under the sanitizers:\n" +
                                 found)

    def sanitizer_reports(self):
        """What ASan, LSan or UBSan wrote to acceld's log (in the
        sanitizer build; "" when nothing): a report fails the test even
        when the requests it served answered right."""
        try:
            with open(self.log_path, errors="replace") as f:
                text = f.read()
        except OSError:
            return ""
        for mark in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "WARNING: ThreadSanitizer"):
            at = text.find(mark)
            if at >= 0:
                return text[max(0, at - 200):at + 3000]
        # UBSan's "file.c:12:3: runtime error: ...", not an app's or
        # podman's own words ("OCI runtime error: ...") quoted in a reason
        m = re.search(r"\.[ch]:\d+:\d+: runtime error:", text)
        if m:
            return text[max(0, m.start() - 200):m.start() + 3000]
        return ""

    def cgroup_instance(self):
        """The <instance> part of this acceld's cgroup paths."""
        return cgroup_instance(self.data_dir)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def kill(self):
        """SIGKILL acceld (a crash: none of its shutdown runs) and reap it;
        start() brings it back on the same data directory."""
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def data(self, path):
        """GET path as the admin: the answer's data; AssertionError naming
        the path and the answer unless it is 200."""
        status, body = self.http("GET", path)
        if status != 200:
            raise AssertionError("GET %s: %s %r" % (path, status, body))
        return body["data"]

    def device(self, dev_id):
        """Device dev_id as GET /api/compute-resources lists it;
        AssertionError when no node lists it."""
        for n in self.data("/api/compute-resources"):
            for x in n["devices"]:
                if x["id"] == dev_id:
                    return x
        raise AssertionError("device %s not listed" % dev_id)

    def app_log(self, name):
        """What app name wrote to its log under the data dir ("" before it
        wrote anything)."""
        path = os.path.join(self.data_dir, "logs", name + ".log")
        if not os.path.exists(path):
            return ""
        with open(path) as f:
            return f.read()

    def http(self, method, path, body=None, token=None, timeout=30):
        """One request; returns (status, parsed JSON or None).

        token None = the admin token; "" = no Authorization header.
        body: a dict/list (sent as JSON), str or bytes (sent as is).
        """
        if token is None:
            token = self.token
        data = None
        headers = {}
        if body is not None:
            if isinstance(body, (dict, list)):
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            elif isinstance(body, str):
                data = body.encode()
            else:
                data = body
        if token:
            headers["Authorization"] = "Bearer " + token
        req = urllib.request.Request(self.url + path, data=data,
                                     headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            raw = e.read()
            status = e.code
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, None

    def ctl_args(self, *args, token=None):
        """accelctl's command line with --server and --token for this daemon."""
        if token is None:
            token = self.token
        base = [ACCELCTL, "--server", self.url]
        if token:
            base += ["--token", token]
        return base + [str(a) for a in args]

    def ctl(self, *args, token=None, input=None, env=None, timeout=60):
        """Run accelctl against this daemon (not on a terminal)."""
        require_binaries(ACCELCTL)
        e = dict(os.environ)
        for k in ("ACCEL_SERVER", "ACCEL_TOKEN", "ACCEL_DATA_DIR"):
            e.pop(k, None)
        if env:
            e.update(env)
        return subprocess.run(self.ctl_args(*args, token=token), input=input,
                              capture_output=True, text=True, env=e,
                              timeout=timeout)


class SharedAcceld(unittest.TestCase):
    """A TestCase whose tests share one acceld, started once for the class
    with the class's inventory (as Acceld's) and acceld_args; tests here
    must leave it as they found it."""
    inventory = None
    acceld_args = ()

    @classmethod
    def setUpClass(cls):
        cls.d = Acceld(inventory=cls.inventory,
                       extra_args=cls.acceld_args).start()

    @classmethod
    def tearDownClass(cls):
        cls.d.close()


class OwnAcceld(unittest.TestCase):
    """A TestCase whose every test gets an acceld of its own, with the
    class's inventory (as Acceld's) and acceld_args, closed when the test
    ends (after tearDown), passed or failed."""
    inventory = None
    acceld_args = ()

    def setUp(self):
        self.d = Acceld(inventory=self.inventory,
                        extra_args=self.acceld_args)
        self.addCleanup(self.d.close)
        self.d.start()
