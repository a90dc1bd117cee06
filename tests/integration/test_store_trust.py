# SPDX-License-Identifier: MIT
"""What acceld refuses to trust at start (SPEC 3, 9): an empty or partly
undecodable accel.db (refused, named, left as it is; `acceld --repair` drops
the bad rows and says so), an admin.token that is a link, too open or
without its database; and the input edges of manifests (quantities that do
not fit, duplicate keys, NUL characters). Runs the real acceld."""
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accel_harness  # noqa: E402
from accel_harness import (ACCELD, GiB, Acceld, device, inventory,  # noqa: E402
                           node, require_binaries)

CARD = "GPU-24aaaaaa-0000-4000-8000-000000000001"
ONE_CARD = inventory(node("box", device(CARD, "NVIDIA GeForce RTX 3090",
                                         "24Gi"), memory=("64Gi", "1Gi")))


def manifest(name, gpu):
    return accel_harness.manifest(name, gpu)


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class StoreTrustTest(unittest.TestCase):
    def setUp(self):
        require_binaries(ACCELD)
        self.d = Acceld(inventory=ONE_CARD)
        self.addCleanup(self.d.close)
        self.d.start()
        self.db = os.path.join(self.d.data_dir, "accel.db")
        self.token = os.path.join(self.d.data_dir, "admin.token")

    def refused(self, *extra, needles=()):
        """acceld must exit non-zero at start, saying each needle."""
        args = [ACCELD, "--data-dir", self.d.data_dir, "--listen",
                "127.0.0.1:0", "--inventory", self.d.inventory] + list(extra)
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        try:
            _, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            self.fail("acceld started instead of refusing:\n" + err)
        self.assertNotEqual(p.returncode, 0, err)
        for n in needles:
            self.assertIn(n, err)
        return err

    def raw(self, sql):
        con = sqlite3.connect(self.db)
        try:
            con.executescript(sql)
            con.commit()
        finally:
            con.close()

    def card_granted(self):
        st, b = self.d.http("GET", "/api/apps")
        self.assertEqual(st, 200, b)
        total = 0
        for app in b["data"]:
            for a in app.get("allocations") or []:
                if a["deviceId"] == CARD:
                    total += a["memory"]
        return total

    # -- the database ----------------------------------------------------

    def test_empty_database_is_refused_not_a_first_start(self):
        with open(self.token) as f:
            tok = f.read()
        self.d.stop()
        for suffix in ("-wal", "-shm"):
            if os.path.exists(self.db + suffix):
                os.unlink(self.db + suffix)
        open(self.db, "w").close()
        err = self.refused(needles=(self.db, "is empty (0 bytes)"))
        self.assertIn("refusing to start", err)
        self.assertEqual(os.path.getsize(self.db), 0)  # not overwritten
        with open(self.token) as f:
            self.assertEqual(f.read(), tok)  # token not rewritten
        # --repair does not invent a state either
        self.refused("--repair", needles=("is empty",))
        self.assertEqual(os.path.getsize(self.db), 0)

    def test_corrupt_manifest_refused_then_repair_no_double_grant(self):
        st, b = self.d.http("POST", "/api/apps",
                            {"manifest": manifest("big", "20Gi")})
        self.assertEqual(st, 200, b)
        st, b = self.d.http("POST", "/api/apps",
                            {"manifest": manifest("small", "2Gi")})
        self.assertEqual(st, 200, b)
        self.assertEqual(self.card_granted(), 22 * GiB)
        self.d.stop()
        self.raw("UPDATE apps SET manifest = '{\"broken' WHERE name = 'big'")
        before = digest(self.db)
        err = self.refused(needles=(
            self.db, 'table apps, row "big": manifest is not valid JSON',
            'table allocations, row "big/%s"' % CARD, "--repair"))
        self.assertIn("nothing was loaded or changed", err)
        self.assertEqual(digest(self.db), before)
        # the old acceld skipped the row and gave its 20 GiB out again;
        # --repair drops it (and its binding) explicitly and says so
        self.d.extra_args = ["--repair"]
        self.d.start()
        log = self.d.log()
        self.assertIn("--repair: dropped 2 undecodable rows", log)
        self.assertIn('table apps, row "big"', log)
        st, b = self.d.http("GET", "/api/events?kind=store.repair")
        self.assertEqual(st, 200, b)
        self.assertEqual(len(b["data"]), 1, b)
        dropped = b["data"][0]["data"]["dropped"]
        self.assertEqual(sorted(x["table"] for x in dropped),
                         ["allocations", "apps"])
        st, b = self.d.http("GET", "/api/apps/big")
        self.assertEqual(st, 404, b)
        self.assertEqual(self.card_granted(), 2 * GiB)
        st, b = self.d.http("POST", "/api/apps",
                            {"manifest": manifest("next", "20Gi")})
        self.assertEqual(st, 200, b)
        st, b = self.d.http("POST", "/api/apps",
                            {"manifest": manifest("more", "20Gi")})
        self.assertLessEqual(self.card_granted(), 24 * GiB)
        self.assertEqual(self.card_granted(), 22 * GiB)
        # and the next start is clean without --repair
        self.d.stop()
        self.d.extra_args = []
        self.d.start()
        self.assertEqual(self.card_granted(), 22 * GiB)

    def test_unknown_enum_and_dangling_binding_refused(self):
        st, b = self.d.http("POST", "/api/apps",
                            {"manifest": manifest("a", "4Gi")})
        self.assertEqual(st, 200, b)
        self.d.stop()
        self.raw("UPDATE apps SET state = 'dancing' WHERE name = 'a';"
                 "INSERT INTO allocations VALUES ('ghost', 'admin', "
                 "'nvidia', 'box', '%s', -5)" % CARD)
        self.refused(needles=(
            'table apps, row "a": state "dancing" is not an app state',
            'table allocations, row "ghost/%s": memory is -5' % CARD))
        self.raw("UPDATE allocations SET memory = 5 WHERE app = 'ghost'")
        self.refused(needles=(
            'table allocations, row "ghost/%s": its app "ghost" has no row'
            % CARD,))

    def test_missing_admin_row_refused_repair_writes_a_new_token(self):
        with open(self.token) as f:
            old = f.read().strip()
        self.d.stop()
        self.raw("DELETE FROM users WHERE name = 'admin'")
        self.refused(needles=('table users has no row "admin"',))
        self.d.extra_args = ["--repair"]
        self.d.start()
        self.assertNotEqual(self.d.token, old)
        self.assertEqual(os.stat(self.token).st_mode & 0o777, 0o600)
        st, _ = self.d.http("GET", "/api/apps")
        self.assertEqual(st, 200)

    # -- the token file --------------------------------------------------

    def test_token_with_wider_mode_refused(self):
        self.d.stop()
        os.chmod(self.token, 0o644)
        self.refused(needles=(self.token, "mode 0644", "0600"))
        os.chmod(self.token, 0o600)
        self.d.start()

    def test_token_symlink_refused_never_followed(self):
        self.d.stop()
        target = os.path.join(self.d.tmp, "elsewhere")
        os.unlink(self.token)
        os.symlink(target, self.token)
        self.refused(needles=(self.token, "symbolic link"))
        self.assertFalse(os.path.exists(target))

    def test_first_start_through_planted_symlink_refused(self):
        self.d.stop()
        fresh = os.path.join(self.d.tmp, "fresh")
        os.mkdir(fresh, 0o700)
        target = os.path.join(self.d.tmp, "stolen")
        os.symlink(target, os.path.join(fresh, "admin.token"))
        self.d.data_dir = fresh
        self.refused(needles=("symbolic link",))
        self.assertFalse(os.path.exists(target))
        self.assertFalse(os.path.exists(os.path.join(fresh, "accel.db")))

    def test_token_without_database_refused(self):
        self.d.stop()
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.db + suffix):
                os.unlink(self.db + suffix)
        self.refused(needles=(self.token, "exists but", "accel.db"))
        self.assertFalse(os.path.exists(self.db))

    def test_group_writable_data_dir_refused(self):
        self.d.stop()
        os.chmod(self.d.data_dir, 0o777)
        self.refused(needles=(self.d.data_dir, "mode 0777"))
        os.chmod(self.d.data_dir, 0o700)
        self.d.start()

    # -- input edges -----------------------------------------------------

    def test_quantity_that_wraps_is_refused_naming_the_field(self):
        st, b = self.d.http("POST", "/api/apps", {
            "manifest": manifest("w", "576460752303423488Ei")})
        self.assertEqual(st, 400, b)
        self.assertIn("spec.accelerator[0].requiredGPUMemory", b["message"])
        self.assertIn("too large", b["message"])
        self.assertEqual(self.card_granted(), 0)

    def post(self, body, ctype):
        req = urllib.request.Request(
            self.d.url + "/api/apps", data=body, method="POST",
            headers={"Content-Type": ctype,
                     "Authorization": "Bearer " + self.d.token})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def yaml_install(self, text):
        return self.post(text.encode(), "application/yaml")

    def test_yaml_duplicate_key_and_nul_refused_naming_the_field(self):
        base = ("apiVersion: v2\nmetadata: {name: %s}\nspec:\n"
                "  accelerator:\n  - mode: nvidia\n%s"
                "    requiredGPUMemory: 2Gi\n    limitedGPUMemory: 2Gi\n"
                "    requiredMemory: 1Gi\n    limitedMemory: 1Gi\n"
                "    requiredCpu: '1'\n    limitedCpu: '1'\n"
                "    requiredDisk: 1Gi\n    limitedDisk: 1Gi\n")
        st, b = self.yaml_install(base % ("dup", "    mode: cpu\n"))
        self.assertEqual(st, 400, b)
        self.assertIn("spec.accelerator[0].mode: duplicate key",
                      b["message"])
        st, b = self.yaml_install(base % ('"web\\0evil"', ""))
        self.assertEqual(st, 400, b)
        self.assertIn("metadata.name: a string contains a NUL character",
                      b["message"])
        # the same manifest in a JSON string inside the JSON body
        st, b = self.d.http("POST", "/api/apps", {
            "manifest": base % ("dup", "    mode: cpu\n")})
        self.assertEqual(st, 400, b)
        self.assertIn("spec.accelerator[0].mode: duplicate key",
                      b["message"])
        # JSON: \u0000 is refused (JSON_ALLOW_NUL stays off)
        m = json.dumps({"manifest": manifest("webx", "2Gi")})
        m = m.replace('"webx"', '"web\\u0000x"')
        st, b = self.post(m.encode(), "application/json")
        self.assertEqual(st, 400, b)
        self.assertIn("\\u0000", b["message"])
        st, b = self.d.http("GET", "/api/apps")
        self.assertEqual(b["data"], [])

    def test_inventory_duplicate_key_refused_at_start(self):
        self.d.stop()
        inv = os.path.join(self.d.tmp, "dup.yaml")
        with open(inv, "w") as f:
            f.write(ONE_CARD.replace('memory: "24Gi"',
                                     'memory: "24Gi", memory: "48Gi"'))
        self.d.inventory = inv
        self.refused(needles=("nodes[0].devices[0].memory: duplicate key",))


if __name__ == "__main__":
    unittest.main()
