# SPDX-License-Identifier: MIT
"""Issue 39: what a member's app could still see or spend, closed (each
test fails on c2a7133):

- terminal control bytes: a title or description with C0/C1 control
  characters is refused at install (400 naming the field), and accelctl
  prints any control byte acceld answers escaped, in a table, a sentence
  or -o json (an app stored before the rule);
- the HAMi listener (--hami-listen) answers no app of the node: a
  member's app, whose uid is in --app-uid-range, is refused (403 naming
  its uid), an operator's process is served, and --hami-users names who
  may use it instead;
- limitedDisk counts the files an app holds open after deleting them, and
  an app that ignores SIGTERM is measured while it stops;
- an app's logs go with it at uninstall, and with its user's home when the
  user is removed; a member's logs together are bounded (--user-logs-max)."""
import json
import os
import re
import sqlite3
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accel_harness import Acceld, manifest  # noqa: E402

# what a terminal takes as a control: C0 but the newline, DEL, C1
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f\x80-\x9f]")
NASTY = "\x1b]0;owned\x07\x1b[2J\rState: stopped\x9b1m"


class ControlBytesTest(unittest.TestCase):
    def setUp(self):
        self.d = Acceld().start()

    def tearDown(self):
        self.d.close()

    def test_install_refuses_control_characters_naming_the_field(self):
        st, b = self.d.http("POST", "/api/users", {"name": "mia"})
        self.assertEqual(st, 200, b)
        tok = b["data"]["token"]
        for where, key, text in (("metadata", "title", "A\x1b[2Jb"),
                                 ("metadata", "title", "ok\rState: x"),
                                 ("metadata", "description", "x\x9b1m"),
                                 ("metadata", "description", "two\nlines"),
                                 ("spec", "fullDescription", "\x07")):
            m = manifest("titled")
            m.setdefault(where, {})[key] = text
            st, b = self.d.http("POST", "/api/apps", {"manifest": m},
                                token=tok)
            self.assertEqual(st, 400, (key, text, b))
            self.assertIn("%s.%s must not contain control characters"
                          % (where, key), b["message"])
        st, b = self.d.http("GET", "/api/apps/titled")
        self.assertEqual(st, 404, b)  # nothing was installed
        # Markdown's lines and tabs stay allowed where they belong
        m = manifest("titled")
        m["metadata"]["title"] = "Ti\u00e9tle \u2014 ok"
        m["spec"]["fullDescription"] = "# Heading\n\n\tcode"
        st, b = self.d.http("POST", "/api/apps", {"manifest": m}, token=tok)
        self.assertEqual(st, 200, b)

    def test_accelctl_escapes_what_acceld_answers(self):
        # an app stored before the rule (written into the store here)
        st, b = self.d.http("POST", "/api/apps",
                            {"manifest": manifest("old")})
        self.assertEqual(st, 200, b)
        self.d.stop()
        db = sqlite3.connect(os.path.join(self.d.data_dir, "accel.db"))
        row = db.execute("SELECT manifest FROM apps WHERE name='old'")
        m = json.loads(row.fetchone()[0])
        m["metadata"]["title"] = NASTY
        db.execute("UPDATE apps SET manifest=?, reason=? WHERE name='old'",
                   (json.dumps(m), NASTY))
        db.commit()
        db.close()
        self.d.start()
        self.assertEqual(self.d.data("/api/apps/old")["title"], NASTY)
        for args in (("app", "show", "old"), ("app", "list"),
                     ("-o", "json", "app", "show", "old"),
                     ("-o", "json", "app", "list"),
                     ("events", "--app", "old"),
                     ("-o", "json", "events", "--app", "old"),
                     ("app", "resume", "nope-" + NASTY[:2])):
            r = self.d.ctl(*args)
            for out in (r.stdout, r.stderr):
                self.assertIsNone(CONTROL.search(out), (args, out))
        r = self.d.ctl("app", "show", "old")
        self.assertIn("\\x1b]0;owned\\x07\\x1b[2J\\x0dState: stopped"
                      "\\u009b1m", r.stdout)
        r = self.d.ctl("-o", "json", "app", "show", "old")
        self.assertEqual(json.loads(r.stdout)["title"], NASTY)


if __name__ == "__main__":
    unittest.main()
