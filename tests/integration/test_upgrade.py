# SPDX-License-Identifier: MIT
"""Upgrades and downgrades of the database (issue 14 item 2, SPEC 9).

The fixture tests/fixtures/schema-9d04900/ is a database written by the
release before packaging (commit 9d04900; its README says how it was made),
with what that release's accelctl printed about it (apps.json, users.json,
events.json). This acceld must migrate it keeping every app, binding,
user, device setting and event, whatever schema version it is at now; and
it must refuse a database whose schema is newer than its own, changing
nothing. Only content is compared, never a version number: other changes
add migrations.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import unittest

from accel_harness import ACCELD, SOURCE_DIR, Acceld, require_binaries

FIXTURE = os.path.join(SOURCE_DIR, "tests", "fixtures", "schema-9d04900")


def load(name):
    with open(os.path.join(FIXTURE, name)) as f:
        return json.load(f)


def schema_of(path):
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA user_version").fetchone()[0]
    finally:
        con.close()


def binding(a):
    """The parts of an app's allocations that a migration must keep."""
    return sorted((x["nodeName"], x["deviceId"], x["memory"], x["mode"])
                  for x in a.get("allocations") or [])


class UpgradeTest(unittest.TestCase):
    def start_on_fixture(self):
        d = Acceld(extra_args=["--node-name", "fixture"])
        os.makedirs(d.data_dir)
        shutil.copy(os.path.join(FIXTURE, "accel.db"), d.data_dir)
        shutil.copy(os.path.join(FIXTURE, "admin.token"), d.data_dir)
        os.chmod(os.path.join(d.data_dir, "admin.token"), 0o600)
        self.addCleanup(d.close)
        self.assertLess(schema_of(os.path.join(d.data_dir, "accel.db")),
                        self.own_schema(), "the fixture is not older")
        return d.start()

    def own_schema(self):
        require_binaries(ACCELD)
        out = subprocess.run([ACCELD, "--version"], capture_output=True,
                             text=True, check=True).stdout
        # "acceld X.Y.Z (database schema N)"
        return int(out.rsplit("schema", 1)[1].strip(" )\n"))

    def test_previous_release_database_is_migrated_keeping_everything(self):
        d = self.start_on_fixture()
        db = os.path.join(d.data_dir, "accel.db")

        # the old admin token still works: users and their token hashes kept
        r = d.ctl("-o", "json", "user", "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = {u["name"]: (u["role"], u["createdAt"])
               for u in json.loads(r.stdout)}
        for u in load("users.json"):
            self.assertEqual(got.get(u["name"]), (u["role"], u["createdAt"]),
                             "user %s" % u["name"])

        r = d.ctl("-o", "json", "app", "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        apps = {a["name"]: a for a in json.loads(r.stdout)}
        old = load("apps.json")
        self.assertEqual(sorted(apps), sorted(a["name"] for a in old))
        for a in old:
            n = apps[a["name"]]
            self.assertEqual((n["owner"], n["state"], n["title"]),
                             (a["owner"], a["state"], a["title"]), a["name"])
            self.assertEqual(binding(n), binding(a), a["name"])
            self.assertEqual(n["requirements"], a["requirements"], a["name"])

        # the device's sharing mode set by the old release
        r = d.ctl("-o", "json", "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        devs = {x["id"]: x for node in json.loads(r.stdout)
                for x in node.get("devices", [])}
        dev = devs["GPU-4060bbbb-0000-4000-8000-000000000002"]
        self.assertIn("MemorySlice", json.dumps(dev))

        # every old event, same id, kind and message; new ones come after
        r = d.ctl("-o", "json", "events", "--limit", "1000")
        self.assertEqual(r.returncode, 0, r.stderr)
        events = {e["id"]: e for e in json.loads(r.stdout)}
        for e in load("events.json"):
            self.assertIn(e["id"], events)
            n = events[e["id"]]
            self.assertEqual((n["kind"], n["message"], n["ts"]),
                             (e["kind"], e["message"], e["ts"]))

        # the database is at this acceld's schema (acceld holds it locked
        # while it runs) and opens again (a second start is a no-op)
        d.stop()
        self.assertEqual(schema_of(db), self.own_schema())
        d.start()
        r = d.ctl("-o", "json", "app", "list")
        self.assertEqual(sorted(a["name"] for a in json.loads(r.stdout)),
                         sorted(apps))

    def test_newer_schema_is_refused_and_left_untouched(self):
        d = Acceld(extra_args=["--node-name", "fixture"])
        self.addCleanup(d.close)
        os.makedirs(d.data_dir)
        db = os.path.join(d.data_dir, "accel.db")
        shutil.copy(os.path.join(FIXTURE, "accel.db"), db)
        newer = self.own_schema() + 1
        con = sqlite3.connect(db)
        con.execute("PRAGMA user_version = %d" % newer)
        con.close()
        with open(db, "rb") as f:
            before = f.read()
        r = subprocess.run([ACCELD, "--data-dir", d.data_dir, "--listen",
                            "127.0.0.1:0", "--node-name", "fixture"],
                           capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("newer", r.stderr)
        self.assertIn("schema %d" % newer, r.stderr)
        with open(db, "rb") as f:
            self.assertEqual(f.read(), before, "the database was changed")
        self.assertFalse(os.path.exists(os.path.join(d.data_dir,
                                                     "admin.token")))


if __name__ == "__main__":
    unittest.main()
