# SPDX-License-Identifier: MIT
"""bash completion for accelctl (packaging/bash-completion/accelctl, issue
14 item 4): commands, sub-commands, options per command, and app, node and
device names asked of a running acceld with the --server/--token typed on
the line. Runs bash with the script sourced and COMP_WORDS set, as bash's
programmable completion would.
"""
import os
import shutil
import subprocess
import unittest

from accel_harness import ACCELCTL, SOURCE_DIR, Acceld, require_binaries

SCRIPT = os.path.join(SOURCE_DIR, "packaging", "bash-completion", "accelctl")


class CompletionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_binaries(ACCELCTL)
        if shutil.which("bash") is None:
            raise unittest.SkipTest("bash not found")
        cls.d = Acceld().start()
        r = cls.d.ctl("app", "install",
                      os.path.join(SOURCE_DIR, "examples", "comfyui.yaml"))
        assert r.returncode == 0, r.stdout + r.stderr

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def complete(self, *words, server=True):
        """COMPREPLY for the line accelctl WORDS... (the last one being
        completed)."""
        line = [ACCELCTL]
        if server:
            line += ["--server", self.d.url, "--token", self.d.token]
        line += list(words)
        prog = ('source "$1"; shift; COMP_WORDS=("$@"); '
                'COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _accelctl; '
                'printf "%s\\n" "${COMPREPLY[@]}"')
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("ACCEL_")}
        r = subprocess.run(["bash", "-c", prog, "bash", SCRIPT] + line,
                           capture_output=True, text=True, env=env,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return sorted(x for x in r.stdout.splitlines() if x)

    def test_commands_and_subcommands(self):
        self.assertEqual(self.complete("ap"), ["app"])
        self.assertIn("login", self.complete(""))
        self.assertIn("open", self.complete(""))
        self.assertEqual(self.complete("app", "un"), ["uninstall"])
        self.assertEqual(self.complete("gpu", "ins"), ["install"])

    def test_options(self):
        self.assertIn("--type", self.complete("set-type", "n", "d", "--"))
        self.assertIn("--follow", self.complete("events", "--"))
        self.assertNotIn("--follow", self.complete("list", "--"))
        self.assertEqual(self.complete("-o", ""), ["json", "table"])
        self.assertEqual(self.complete("set-type", "n", "d", "--type", "T"),
                         ["TimeSlice"])

    def test_names_from_the_server(self):
        self.assertEqual(self.complete("app", "show", ""), ["comfyui"])
        self.assertEqual(self.complete("unbind", "c"), ["comfyui"])
        self.assertEqual(self.complete("events", "--app", ""), ["comfyui"])
        nodes = self.complete("set-type", "")
        self.assertIn("homelab", nodes)
        self.assertIn("macmini", nodes)
        self.assertIn("GPU-4090aaaa-0000-4000-8000-000000000001",
                      self.complete("set-type", "homelab", "GPU-"))

    def test_no_server_completes_nothing_quietly(self):
        r = self.complete("--server", "127.0.0.1:1", "app", "show", "",
                          server=False)
        self.assertEqual(r, [])


if __name__ == "__main__":
    unittest.main()
