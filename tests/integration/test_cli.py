# SPDX-License-Identifier: MIT
"""accelctl against the real acceld: every command, table and JSON output,
the SPEC 7 sentences for refusals, exit codes (1 refused, 2 usage, 3
unreachable), confirmations off a terminal, tokens. The prompts on a terminal
are in test_cli_pty.py."""
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import ACCELCTL, ACCELD, Acceld, GiB, require_binaries  # noqa: E402

# lab: one 24 GiB card in Memory slicing, one 16 GiB card App exclusive;
# mini: an Apple M node (shares system RAM).
INVENTORY = """\
nodes:
- name: lab
  memory: {total: 64Gi, used: 8Gi}
  cpu: {total: "16", used: "2"}
  disk: {total: 1Ti, used: 100Gi}
  devices:
  - id: GPU-4090
    type: nvidia
    model: NVIDIA GeForce RTX 4090
    memory: 24Gi
    supportType: MemorySlice
  - id: GPU-4060
    type: nvidia
    model: NVIDIA GeForce RTX 4060 Ti
    memory: 16Gi
    supportType: Exclusive
- name: mini
  memory: {total: 32Gi, used: 4Gi}
  cpu: {total: "8", used: "1"}
  disk: {total: 512Gi, used: 100Gi}
  devices:
  - id: mini-apple-m-0
    type: apple-m
    model: Apple M2 Pro
    memory: 24Gi
"""


def entry(mode, mem_gi, **gpu):
    """One accelerator entry: mem_gi GiB of memory, 1 CPU (2 at most),
    1 Gi of disk, and gpu's fields (an NVIDIA card's memory)."""
    e = {"mode": mode,
         "requiredMemory": "%dGi" % mem_gi, "limitedMemory": "%dGi" % mem_gi,
         "requiredCpu": "1", "limitedCpu": "2",
         "requiredDisk": "1Gi", "limitedDisk": "1Gi"}
    e.update(gpu)
    return e


def nvidia_entry(gpu_gi, mem_gi=2):
    gi = "%dGi" % gpu_gi
    return entry("nvidia", mem_gi, requiredGPUMemory=gi, limitedGPUMemory=gi)


def apple_entry(mem_gi=4):
    return entry("apple-m", mem_gi)


def manifest(name, *entries):
    return {
        "apiVersion": "v2",
        "metadata": {"name": name, "title": name.capitalize()},
        "options": {"shared": False},
        "spec": {"accelerator": list(entries)},
    }


def to_yaml(m):
    """A small YAML writer for our manifests (flow style where it is easy)."""
    lines = ["apiVersion: %s" % m["apiVersion"],
             "metadata: {name: %s, title: %s}" % (m["metadata"]["name"],
                                                  m["metadata"]["title"]),
             "options: {shared: false}", "spec:", "  accelerator:"]
    for e in m["spec"]["accelerator"]:
        first = True
        for k, v in e.items():
            lines.append("  %s %s: \"%s\"" % ("-" if first else " ", k, v))
            first = False
    return "\n".join(lines) + "\n"


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_binaries(ACCELD, ACCELCTL)
        cls.d = Acceld(INVENTORY, extra_args=["--node-name", "lab"])
        cls.d.start()
        cls.files = os.path.join(cls.d.tmp, "manifests")
        os.makedirs(cls.files)

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    # helpers

    def write(self, name, m, yaml=False):
        path = os.path.join(self.files, name)
        with open(path, "w") as f:
            f.write(to_yaml(m) if yaml else json.dumps(m))
        return path

    def ok(self, *args, **kw):
        r = self.d.ctl(*args, **kw)
        self.assertEqual(r.returncode, 0, "accelctl %s\nstdout: %s\nstderr: %s"
                         % (" ".join(map(str, args)), r.stdout, r.stderr))
        return r

    def fails(self, code, *args, **kw):
        r = self.d.ctl(*args, **kw)
        self.assertEqual(r.returncode, code, "accelctl %s\nstdout: %s\nstderr: %s"
                         % (" ".join(map(str, args)), r.stdout, r.stderr))
        return r

    def app(self, name):
        return self.d.data("/api/apps/" + name)

    def device(self, dev_id):
        return self.d.device(dev_id)

    def uninstall(self, name):
        self.d.http("DELETE", "/api/apps/" + name)

    def install_nvidia(self, name, gpu_gi, binding=None):
        """accelctl app install of an app asking gpu_gi GiB of an NVIDIA
        GPU (--compute-binding binding when given); it is uninstalled when
        the test ends, passed or failed."""
        path = self.write(name + ".json", manifest(name, nvidia_entry(gpu_gi)))
        self.addCleanup(self.uninstall, name)
        args = ["app", "install", path]
        if binding is not None:
            args += ["--compute-binding", binding]
        return self.ok(*args)

    # the tests

    def test_list_table_and_json(self):
        r = self.ok("list")
        out = r.stdout
        for word in ("NODE", "DEVICE", "MODEL", "VRAM", "MODE", "ALLOCATED",
                     "FREE", "APPS", "GPU-4090", "NVIDIA GeForce RTX 4090",
                     "24 Gi", "MemorySlice", "GPU-4060", "16 Gi", "Exclusive",
                     "mini-apple-m-0"):
            self.assertIn(word, out)
        r = self.ok("-o", "json", "list")
        nodes = json.loads(r.stdout)
        self.assertIsInstance(nodes, list)
        names = {n["nodeName"] for n in nodes}
        self.assertTrue({"lab", "mini"} <= names, names)

    def test_token_from_data_dir_and_env(self):
        r = self.d.ctl("--data-dir", self.d.data_dir, "list", token="")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.d.ctl("list", token="", env={"ACCEL_TOKEN": self.d.token})
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.d.ctl("list", token="", env={"ACCEL_DATA_DIR": self.d.data_dir})
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.fails(1, "list", token="not-a-token")
        self.assertIn("token is missing or invalid", r.stderr)

    def test_server_from_env(self):
        r = self.d.ctl("list", env={"ACCEL_SERVER": self.d.url})
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_unreachable_exits_3(self):
        r = self.d.ctl("--server", "http://127.0.0.1:1", "list")
        # ctl() puts --server first; the later one wins
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("cannot reach acceld at http://127.0.0.1:1", r.stderr)

    def test_usage_errors_exit_2(self):
        self.fails(2, "no-such-command")
        self.fails(2, "app", "show")
        self.fails(2, "app", "list", "--yes")
        self.fails(2, "-o", "yaml", "list")
        self.fails(2, "set-type", "lab", "GPU-4090")
        self.fails(2, "set-type", "lab", "GPU-4090", "--type", "Shared")
        r = self.fails(2, "app", "resume", "x", "--compute-binding", "lab")
        self.assertIn("NODE:DEVICE[:MEM]", r.stderr)
        r = self.fails(2, "app", "resume", "x", "--compute-binding",
                       "lab:GPU-4090:lots")
        self.assertIn("lots", r.stderr)
        r = self.fails(2, "app", "install", os.path.join(self.files, "nope"))
        self.assertIn("cannot open", r.stderr)
        bad = os.path.join(self.files, "bad.yaml")
        with open(bad, "w") as f:
            f.write("metadata: {name: x\n  - : :\n")
        self.fails(2, "app", "install", bad)
        r = self.ok("help")
        self.assertIn("app install", r.stdout)

    def test_app_lifecycle_yaml(self):
        path = self.write("comfy.yaml", manifest("comfy", nvidia_entry(8)),
                          yaml=True)
        try:
            r = self.ok("app", "install", path)
            self.assertIn("comfy", r.stdout)
            app = self.app("comfy")
            self.assertEqual(len(app["allocations"]), 1, app)
            r = self.ok("app", "list")
            self.assertIn("comfy", r.stdout)
            self.assertIn("STATE", r.stdout)
            apps = json.loads(self.ok("-o", "json", "app", "list").stdout)
            self.assertIn("comfy", [a["name"] for a in apps])
            r = self.ok("app", "show", "comfy")
            self.assertIn("Name:", r.stdout)
            self.assertIn("Allocations:", r.stdout)
            shown = json.loads(self.ok("-o", "json", "app", "show",
                                       "comfy").stdout)
            self.assertEqual(shown["name"], "comfy")

            self.ok("app", "stop", "comfy")
            self.assertEqual(self.app("comfy")["allocations"], [])

            # resume with a quota: a bare number is GiB
            self.ok("app", "resume", "comfy", "--compute-binding",
                    "lab:GPU-4090:10")
            allocs = self.app("comfy")["allocations"]
            self.assertEqual([(a["deviceId"], a["memory"]) for a in allocs],
                             [("GPU-4090", 10 * GiB)])
            r = self.ok("list")
            self.assertIn("comfy (10 Gi)", r.stdout)

            # unbind asks; off a terminal without --yes it refuses
            r = self.fails(1, "unbind", "comfy")
            self.assertIn("Removing an app from a GPU stops the app and "
                          "releases all its GPU resources.", r.stderr)
            self.assertIn("--yes", r.stderr)
            self.assertEqual(len(self.app("comfy")["allocations"]), 1)
            r = self.ok("unbind", "comfy", "--yes")
            self.assertIn("1 card(s) released", r.stdout)
            self.assertEqual(self.app("comfy")["allocations"], [])
            r = self.fails(1, "unbind", "comfy", "--yes")
            self.assertIn("no GPU bindings", r.stderr)

            self.ok("app", "uninstall", "comfy")
            r = self.fails(1, "app", "show", "comfy")
            self.assertTrue(r.stderr.strip())
        finally:
            self.uninstall("comfy")

    def test_attach_help(self):
        """Issue 47 item 5: the exact lines that attach people's own
        containers to an external app, for each engine and compose tool,
        with the ulimits note; in app show too; and why a stopped app
        refuses them now."""
        self.install_nvidia("att", 2, "lab:GPU-4090:2")
        r = self.ok("app", "attach-help", "att")
        for line in ("podman run --device accel.dev/app=att IMAGE",
                     "docker run --device accel.dev/app=att IMAGE",
                     "docker run --runtime accel -e ACCEL_APP=att IMAGE",
                     'devices: ["accel.dev/app=att"]',
                     "runtime: accel",
                     'environment: ["ACCEL_APP=att"]',
                     'device_ids: ["accel.dev/app=att"]',
                     "--ulimit nofile=1024:1024 --ulimit nproc=1024:1024",
                     "podman-compose 1.0.3 silently ignores",
                     "/usr/bin/accel-runc"):
            self.assertIn(line, r.stdout)
        for tool in ("podman:", "Docker 25 and later (CDI):",
                     "Docker 20.10 to 24 (accel-runc):", "podman-compose:",
                     "docker-compose 1.29 (Docker 20.10):",
                     "Docker Compose v2 (Docker 25 and later):"):
            self.assertIn("\n  " + tool + "\n", r.stdout)
        self.assertIn("podman run --device accel.dev/app=att IMAGE",
                      self.ok("app", "show", "att").stdout)
        at = json.loads(self.ok("-o", "json", "app", "attach-help",
                                "att").stdout)["attach"]
        self.assertEqual(len(at["ways"]), 6, at)
        self.ok("app", "stop", "att")
        r = self.ok("app", "attach-help", "att")
        self.assertIn("(refused now: app 'att' is stopped", r.stdout)
        self.assertIn("accelctl app resume att", r.stdout)
        # an app acceld runs itself has none
        m = manifest("attrun", nvidia_entry(1))
        m["run"] = {"command": ["/bin/sleep", "100"]}
        path = self.write("attrun.json", m)
        self.addCleanup(self.uninstall, "attrun")
        self.ok("app", "install", path)
        r = self.ok("app", "attach-help", "attrun")
        self.assertIn("attrun runs its own process, started by acceld",
                      r.stdout)
        self.assertNotIn("Attach", self.ok("app", "show", "attrun").stdout)

    def test_cdi_hook_records_the_engine(self):
        """Issue 47 item 4: the CDI hook moves the container's pid into
        each cgroup directory and records its engine by its ID: podman by
        its annotation, Docker by accel-runc's or by a bundle in
        containerd's moby namespace (Docker 25's own CDI); an ID that is
        no file name is not recorded; --stopped refuses, saying so."""
        tmp = tempfile.mkdtemp(dir=self.d.tmp)
        cg = os.path.join(tmp, "cg")
        os.makedirs(cg)
        open(os.path.join(cg, "cgroup.procs"), "w").close()
        rec = os.path.join(tmp, "rec")
        states = {
            "a1": ({"io.container.manager": "libpod"}, "/x/userdata"),
            "b2": ({"accel.dev/engine": "docker"}, "/x"),
            "c3": ({}, "/run/docker/containerd/daemon/"
                   "io.containerd.runtime.v2.task/moby/c3"),
            "d4": ({}, "/somewhere"),
            "../e5": ({}, "/x"),
        }
        for cid, (ann, bundle) in states.items():
            st = json.dumps({"ociVersion": "1.0.2", "id": cid, "pid": 4242,
                             "bundle": bundle, "annotations": ann})
            r = subprocess.run([ACCELCTL, "cdi-hook", "--record", rec, cg],
                               input=st, capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
        got = {}
        for name in os.listdir(rec):
            with open(os.path.join(rec, name)) as f:
                got[name] = f.read()
        self.assertEqual(got, {"a1": "podman\n", "b2": "docker\n",
                               "c3": "docker\n", "d4": "unknown\n"})
        self.assertEqual(stat.S_IMODE(os.stat(rec).st_mode), 0o700)
        with open(os.path.join(cg, "cgroup.procs")) as f:
            self.assertEqual(f.read(), "4242")
        r = subprocess.run([ACCELCTL, "cdi-hook", "--stopped", "ollama"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("app 'ollama' is stopped", r.stderr)
        self.assertIn("accelctl app resume ollama", r.stderr)

    def test_install_with_mib_quota(self):
        self.install_nvidia("small", 1, "lab:GPU-4090:1536Mi")
        allocs = self.app("small")["allocations"]
        self.assertEqual([a["memory"] for a in allocs], [1536 << 20])

    def test_mode_select_off_terminal(self):
        path = self.write("dual.json", manifest("dual", nvidia_entry(4),
                                                apple_entry(4)))
        try:
            r = self.fails(1, "app", "install", path)
            self.assertIn("--compute-mode", r.stderr)
            self.assertIn("nvidia", r.stderr)
            self.assertIn("apple-m", r.stderr)
            status, _ = self.d.http("GET", "/api/apps/dual")
            self.assertEqual(status, 404)
            self.ok("app", "install", path, "--compute-mode", "apple-m")
            app = self.app("dual")
            self.assertEqual(app.get("selectedType"), "apple-m", app)
        finally:
            self.uninstall("dual")

    def test_refusal_sentences(self):
        big = self.write("big.json", manifest("big", nvidia_entry(20)))
        hog = self.write("hog.json", manifest("hog", nvidia_entry(20)))
        small = self.write("small2.json", manifest("small2", nvidia_entry(8)))
        try:
            # the 16 GiB card is below a 20 GiB need: nothing installed
            r = self.fails(1, "app", "install", big, "--compute-binding",
                           "lab:GPU-4060")
            self.assertIn("This GPU's total VRAM is below the app's "
                          "requirement. Removing apps will not help; select "
                          "another GPU.", r.stderr)
            self.assertEqual(self.d.http("GET", "/api/apps/big")[0], 404)
            # 20 of 24 GiB taken: enough in total, not enough free
            self.ok("app", "install", hog, "--compute-binding",
                    "lab:GPU-4090:20")
            r = self.fails(1, "app", "install", small, "--compute-binding",
                           "lab:GPU-4090:8")
            self.assertIn("This GPU does not have enough free VRAM. Remove "
                          "apps from this GPU to free up VRAM first.", r.stderr)
            r = self.fails(1, "app", "install", small, "--compute-binding",
                           "nowhere:GPU-4090")
            self.assertIn("Node nowhere does not exist.", r.stderr)
            r = self.fails(1, "app", "install", small, "--compute-binding",
                           "lab:GPU-nope")
            self.assertIn("GPU-nope does not exist", r.stderr)
            r = self.fails(1, "app", "install", small, "--compute-binding",
                           "lab:GPU-4060", "--compute-binding", "lab:GPU-4060")
            self.assertIn("selected more than once", r.stderr)
            r = self.fails(1, "app", "install", small, "--compute-binding",
                           "lab:GPU-4060", "--compute-binding",
                           "lab:GPU-4090:8")
            self.assertIn("single card", r.stderr)
        finally:
            for n in ("big", "hog", "small2"):
                self.uninstall(n)

    def test_exclusive_already_bound(self):
        a = self.write("ex1.json", manifest("ex1", nvidia_entry(4)))
        b = self.write("ex2.json", manifest("ex2", nvidia_entry(4)))
        try:
            self.ok("app", "install", a, "--compute-binding", "lab:GPU-4060")
            r = self.fails(1, "app", "install", b, "--compute-binding",
                           "lab:GPU-4060")
            self.assertIn("Device GPU-4060 is in App exclusive mode and "
                          "already assigned to another app", r.stderr)
        finally:
            self.uninstall("ex1")
            self.uninstall("ex2")

    def test_binding_required_off_terminal(self):
        self.install_nvidia("hog2", 12, "lab:GPU-4090:12")
        # 12 GiB free on the 4090, 16 GiB total on the 4060: a 20 GiB
        # app installs but cannot be placed, so it stays stopped
        self.install_nvidia("need", 20)
        self.assertEqual(self.app("need")["allocations"], [])
        r = self.fails(1, "app", "resume", "need")
        self.assertIn("--compute-binding NODE:DEVICE[:MEM]", r.stderr)
        self.assertIn("GPU-4090", r.stderr)

    def test_set_type_confirms_and_stops(self):
        # back to Exclusive at the end, after sw's uninstall (cleanups run
        # last registered first)
        self.addCleanup(self.d.http, "PUT", "/api/compute-resources/nodes/"
                        "lab/devices/GPU-4060/support-type",
                        {"supportType": "Exclusive"})
        self.install_nvidia("sw", 4, "lab:GPU-4060")
        r = self.fails(1, "set-type", "lab", "GPU-4060", "--type",
                       "TimeSlice")
        self.assertIn("Switching modes stops all apps currently using "
                      "this GPU and removes their assigned GPU resources.",
                      r.stderr)
        self.assertIn("sw", r.stderr)
        self.assertIn("--yes", r.stderr)
        self.assertEqual(self.device("GPU-4060")["supportType"],
                         "Exclusive")
        r = self.ok("set-type", "lab", "GPU-4060", "--type", "TimeSlice",
                    "--yes")
        self.assertIn("Switched device GPU-4060", r.stdout)
        self.assertIn("sw", r.stdout)
        dev = self.device("GPU-4060")
        self.assertEqual(dev["supportType"], "TimeSlice")
        self.assertEqual(dev["bindings"], [])
        self.assertEqual(self.app("sw")["allocations"], [])
        r = self.ok("set-type", "lab", "GPU-4060", "--type", "TimeSlice")
        self.assertIn("nothing changed", r.stdout)
        r = self.fails(1, "set-type", "lab", "GPU-nope", "--type",
                       "Exclusive", "--yes")
        self.assertIn("does not exist", r.stderr)
        r = self.fails(1, "set-type", "mini", "mini-apple-m-0", "--type",
                       "TimeSlice", "--yes")
        self.assertIn("does not offer TimeSlice", r.stderr)

    def test_preflight(self):
        a = self.write("pa.yaml", manifest("pa", nvidia_entry(8)), yaml=True)
        b = self.write("pb.json", manifest("pb", nvidia_entry(8)))
        huge = self.write("ph.json", manifest("ph", nvidia_entry(100)))
        r = self.ok("preflight", a, b)
        self.assertIn("Installable", r.stdout)
        r = self.fails(1, "preflight", a, huge)
        self.assertIn("Not installable", r.stdout)
        self.assertIn("ph", r.stdout)
        data = json.loads(self.fails(1, "-o", "json", "preflight", huge).stdout)
        self.assertFalse(data["installable"])
        # preflight changes nothing
        self.assertEqual(self.d.http("GET", "/api/apps/pa")[0], 404)

    def test_users(self):
        r = self.ok("user", "add", "bob")
        token = r.stdout.strip().split()[-1]
        self.assertIn("shown only once", r.stdout)
        try:
            r = self.ok("user", "list")
            self.assertIn("bob", r.stdout)
            self.ok("app", "list", token=token)
            r = self.fails(1, "user", "list", token=token)
            self.assertTrue(r.stderr.strip())
            r = self.ok("-o", "json", "user", "add", "carol", "--admin")
            carol = json.loads(r.stdout)
            self.assertEqual(carol["role"], "admin")
            self.ok("user", "list", token=carol["token"])
            self.ok("user", "remove", "bob")
            r = self.fails(1, "app", "list", token=token)
            self.assertIn("token is missing or invalid", r.stderr)
        finally:
            self.d.http("DELETE", "/api/users/bob")
            self.d.http("DELETE", "/api/users/carol")

    def test_user_remove_with_apps_needs_force(self):
        """Issue 25: user remove is refused while the user owns apps (exit
        1, naming them, nothing changed); --force uninstalls them."""
        r = self.ok("user", "add", "dina")
        token = r.stdout.strip().split()[-1]
        try:
            st, b = self.d.http("POST", "/api/apps", {"manifest": {
                "apiVersion": "v2", "metadata": {"name": "dina1"},
                "spec": {"accelerator": [{
                    "mode": "nvidia", "requiredGPUMemory": "1Gi",
                    "limitedGPUMemory": "1Gi", "requiredMemory": "64Mi",
                    "limitedMemory": "64Mi", "requiredCpu": "100m",
                    "limitedCpu": "100m", "requiredDisk": "1Mi",
                    "limitedDisk": "1Mi"}]}}}, token=token)
            self.assertEqual(st, 200, b)
            r = self.fails(1, "user", "remove", "dina")
            self.assertIn("user dina owns 1 app (dina1)", r.stderr)
            self.assertIn("--force", r.stderr)
            self.assertEqual(self.app("dina1")["owner"], "dina")
            self.ok("app", "list", token=token)
            r = self.ok("user", "remove", "dina", "--force")
            self.assertIn("Removed user dina", r.stdout)
            self.assertIn("Uninstalled: dina1.", r.stdout)
            st, _ = self.d.http("GET", "/api/apps/dina1")
            self.assertEqual(st, 404)
        finally:
            self.d.http("DELETE", "/api/users/dina?force=true")

    def test_events(self):
        r = self.ok("events")
        self.assertIn("KIND", r.stdout)
        events = json.loads(self.ok("-o", "json", "events", "--limit",
                                    "5").stdout)
        self.assertIsInstance(events, list)

    def test_gpu_disable_enable(self):
        try:
            r = self.ok("gpu", "disable", "mini")
            self.assertIn("out of scheduling", r.stdout)
            nodes = self.d.http("GET", "/api/nodes")[1]["data"]
            mini = [n for n in nodes if n["nodeName"] == "mini"][0]
            self.assertFalse(mini["enabled"])
            self.assertIn("mini (disabled)", self.ok("list").stdout)
            self.ok("gpu", "enable", "mini")
            nodes = self.d.http("GET", "/api/nodes")[1]["data"]
            mini = [n for n in nodes if n["nodeName"] == "mini"][0]
            self.assertTrue(mini["enabled"])
        finally:
            self.d.http("PUT", "/api/nodes/mini", {"enabled": True})


if __name__ == "__main__":
    unittest.main(verbosity=2)
