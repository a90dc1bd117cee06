# SPDX-License-Identifier: MIT
"""The README's walk-through with examples/ (issue 14 item 7), as a new user
without a GPU runs it: the web app (examples/apps/web.yaml) started by
acceld on examples/nogpu.yaml and answering HTTP, the shared app and the
two-type app on the example home lab. The web app's port is moved to a
free one (8080 may be taken on a shared machine); nothing else changes.
"""
import json
import os
import shutil
import tempfile
import time
import unittest
import urllib.request

from accel_harness import SOURCE_DIR, Acceld, free_port, manifest
import test_containers as tc

EX = os.path.join(SOURCE_DIR, "examples")


class ExamplesTest(unittest.TestCase):
    def wait_state(self, d, name, state, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            _, body = d.http("GET", "/api/apps/" + name)
            got = (body or {}).get("data", body or {}).get("state")
            if got == state:
                return
            time.sleep(0.1)
        self.fail("app %s did not become %s (last %s)" % (name, state, got))

    def test_web_app_runs_without_gpu(self):
        with Acceld(inventory=os.path.join(EX, "nogpu.yaml"),
                    extra_args=["--node-name", "box"]) as d:
            port = free_port()
            with open(os.path.join(EX, "apps", "web.yaml")) as f:
                text = f.read()
            self.assertIn('"8080"', text)
            path = os.path.join(d.tmp, "web.yaml")
            with open(path, "w") as f:
                f.write(text.replace('"8080"', '"%d"' % port))
            r = d.ctl("app", "install", path)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("App web is running on box/box-cpu-0", r.stdout)
            body, deadline = None, time.time() + 30
            while body is None and time.time() < deadline:
                try:
                    with urllib.request.urlopen(
                            "http://127.0.0.1:%d/" % port, timeout=5) as h:
                        body = h.read()
                except OSError:
                    time.sleep(0.1)
            self.assertIsNotNone(body, "the web app never answered")
            self.assertIn(b"Directory listing", body)
            # a stop under way answers 200 with state stopping (an earlier
            # form, 202 {code:202}, left accelctl saying
            # nothing and exited 1 until client.c took any 2xx code as done
            r = d.ctl("app", "stop", "web")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("web", r.stdout)
            self.wait_state(d, "web", "stopped")
            r = d.ctl("app", "resume", "web")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            r = d.ctl("app", "uninstall", "web")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("web", r.stdout)
            deadline = time.time() + 30
            while time.time() < deadline:
                r = d.ctl("-o", "json", "app", "list")
                if '"web"' not in r.stdout:
                    break
                time.sleep(0.1)
            self.assertNotIn('"web"', r.stdout)

    def test_shared_and_two_type_apps_on_the_home_lab(self):
        with Acceld() as d:
            r = d.ctl("app", "install",
                      os.path.join(EX, "apps", "shared-notebook.yaml"))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            # external: "assigned", the page's word (issue 47 item 9)
            self.assertIn("App notebook is assigned to homelab/", r.stdout)
            r = d.ctl("app", "list")
            self.assertRegex(r.stdout, r"notebook\s+shared\s+assigned")
            two = os.path.join(EX, "apps", "two-type.yaml")
            r = d.ctl("app", "install", two)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("--compute-mode", r.stdout + r.stderr)
            self.assertIn("apple-m", r.stdout + r.stderr)
            r = d.ctl("app", "install", two, "--compute-mode", "apple-m")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("App whisper is assigned to macmini/macmini-apple-m-0",
                          r.stdout)

    def test_an_app_with_a_command_on_a_declared_node_is_not_stuck(self):
        """The home lab's nodes are declared: acceld starts no process
        there. An app with run.command bound to one was left `resuming`
        for a start that never came, and could be neither stopped nor
        uninstalled ("is resuming; retry when it has finished")."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "runner.json")
            m = manifest("runner", gpu="2Gi", mem="64Mi", cpu="0.1",
                         disk="1Mi")
            m["run"] = {"command": ["sleep", "100"]}
            with open(path, "w") as f:
                json.dump(m, f)
            with Acceld() as d:
                r = d.ctl("app", "install", path)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn("App runner is running on homelab/", r.stdout)
                self.wait_state(d, "runner", "running")
                r = d.ctl("app", "stop", "runner")
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.wait_state(d, "runner", "stopped")
                st, b = d.http("POST", "/api/apps/runner/resume", {})
                self.assertEqual(st, 200, b)
                self.assertEqual(b["data"]["state"], "running", b)
                r = d.ctl("app", "uninstall", "runner")
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                st, _ = d.http("GET", "/api/apps/runner")
                self.assertEqual(st, 404)



@unittest.skipUnless(tc.HAVE, "needs root, podman, runc, unshare and the "
                              "stand-in driver built")
class ContainerExamplesTest(tc.ContainerCase):
    """examples/apps/ollama.yaml as a container app (issue 47 item 6),
    with a local image in place of Ollama's (no registry is reachable)."""

    @classmethod
    def setUpClass(cls):
        tmp = tempfile.mkdtemp(prefix="accel-ex-img-")
        try:
            tc.build_image(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        tc.podman("rmi", "--force", tc.IMAGE, tc.IMAGE_PRE)

    def setUp(self):
        super().setUp()
        self.d = Acceld(inventory=tc.INVENTORY,
                        extra_args=["--node-name", "ctr"],
                        env={"ACCEL_CDI_DIR": "/etc/cdi"},
                        wrapper=tc.cdi_wrapper(tempfile.mkdtemp(dir=self.tmp),
                                               tc.cdi_spec(tc.GPU))).start()
        self.inst = self.d.cgroup_instance()

    def test_ollama_example_with_a_local_image(self):
        """examples/apps/ollama.yaml, installed with accelctl as its
        comment says, with the module's local image in place of Ollama's
        and a command of its shell: it runs held by the shim, its volume
        made in the owner's home, its environment set, its published port
        listed for the page's link, its reclaim Ollama's preset on that
        port, its output in its log. The machine's test containers have
        no network (run.network none: podman drops the port's mapping)."""
        with open(os.path.join(EX, "apps", "ollama.yaml")) as f:
            text = f.read()
        subs = {
            "  image: docker.io/ollama/ollama:0.6.5\n":
            "  image: %s\n  pull: never\n  network: none\n" % tc.IMAGE,
            '  command: ["serve"]\n':
            '  command: ["/bin/sh", "-c", "echo serving on $OLLAMA_HOST; '
            'exec sleep 1000"]\n',
            '  env: {OLLAMA_HOST: "0.0.0.0:11434", HOME: /models}\n':
            '  env: {OLLAMA_HOST: "0.0.0.0:11434", HOME: /models, '
            'ASAN_OPTIONS: "verify_asan_link_order=0:detect_leaks=0"}\n',
            "requiredGPUMemory: 8Gi": "requiredGPUMemory: 1Gi",
            "limitedGPUMemory: 8Gi": "limitedGPUMemory: 1Gi",
            "requiredMemory: 4Gi": "requiredMemory: 64Mi",
            "limitedMemory: 8Gi": "limitedMemory: 256Mi",
            'requiredCpu: "2"': 'requiredCpu: "0.1"',
            'limitedCpu: "4"': 'limitedCpu: "0.5"',
            "requiredDisk: 10Gi": "requiredDisk: 1Mi",
            "limitedDisk: 40Gi": "limitedDisk: 64Mi",
        }
        for old, new in subs.items():
            self.assertIn(old, text)
            text = text.replace(old, new)
        self.assertIn("    reclaim: ollama\n", text)
        path = os.path.join(self.tmp, "ollama.yaml")
        with open(path, "w") as f:
            f.write(text)
        r = self.d.ctl("app", "install", path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.wait_for(lambda: "serving on 0.0.0.0:11434" in
                      self.d.app_log("ollama"), "its output")
        app = self.d.http("GET", "/api/apps/ollama")[1]["data"]
        self.assertEqual(app["container"]["state"], "running", app)
        self.assertEqual(app["container"]["ports"],
                         ["127.0.0.1:11434:11434/tcp"])
        self.assertEqual(app["elastic"]["reclaim"]["preset"], "ollama", app)
        self.assertEqual(app["elastic"]["reclaim"]["port"], 11434, app)
        self.assertTrue(os.path.isdir(os.path.join(
            self.d.data_dir, "home", "admin", "ollama")))
        self.assertTrue(self.ctr_procs("ollama"))
        # its output as the page's Logs dialog reads it
        st, logs = self.d.http("GET", "/api/apps/ollama/logs")
        self.assertEqual(st, 200, logs)
        self.assertIn("serving on 0.0.0.0:11434", logs["data"]["text"])
        r = self.d.ctl("app", "uninstall", "ollama")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.wait_for(lambda: self.d.http("GET", "/api/apps/ollama")[0] ==
                      404, "uninstalled")
        self.assert_nothing_left("ollama")


if __name__ == "__main__":
    unittest.main()
