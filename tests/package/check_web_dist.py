# SPDX-License-Identifier: MIT
"""The committed web bundle is what its committed sources build to (issue 14
item 6). web/dist is committed beside web/src so that acceld and the
package need no node at build time; this fails when the two disagree.

It takes web/ as committed at HEAD (git archive: the work tree's
uncommitted edits do not count, so it compares whatever is committed with
a build of whatever is committed), runs `npm ci` from the lock file and
`npm run build` in a temporary directory, and compares the fresh dist/
with the committed one file by file (names and bytes). Outside a git
checkout it uses the work tree's web/. Skipped (77) without node and npm.
Exit 0 same, 1 different (the differing files are listed).
"""
import filecmp
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

SOURCE_DIR = os.environ.get(
    "ACCEL_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def committed_web(dest):
    """Extract HEAD's web/ into dest; False when this is no git checkout."""
    if shutil.which("git") is None:
        return False
    tar = os.path.join(dest, "web.tar")
    r = subprocess.run(["git", "-C", SOURCE_DIR, "archive", "-o", tar,
                        "HEAD", "web"], capture_output=True, text=True)
    if r.returncode != 0:
        return False
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    os.unlink(tar)
    return True


def tree(root):
    out = set()
    for d, _, files in os.walk(root):
        for f in files:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def main():
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            print("skipped: %s not found (scripts/setup-web.sh)" % tool)
            return 77
    tmp = tempfile.mkdtemp(prefix="accel-webdist-")
    try:
        if not committed_web(tmp):
            shutil.copytree(os.path.join(SOURCE_DIR, "web"),
                            os.path.join(tmp, "web"),
                            ignore=shutil.ignore_patterns("node_modules"))
        web = os.path.join(tmp, "web")
        committed = os.path.join(tmp, "dist.committed")
        os.rename(os.path.join(web, "dist"), committed)
        for cmd in (["npm", "ci", "--prefer-offline", "--no-audit",
                     "--no-fund"], ["npm", "run", "build"]):
            r = subprocess.run(cmd, cwd=web, capture_output=True, text=True,
                               timeout=900)
            if r.returncode != 0:
                print("%s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode,
                                                 r.stdout, r.stderr))
                return 1
        fresh = os.path.join(web, "dist")
        a, b = tree(committed), tree(fresh)
        bad = ["only committed: " + p for p in sorted(a - b)]
        bad += ["only built: " + p for p in sorted(b - a)]
        bad += ["differs: " + p for p in sorted(a & b) if not filecmp.cmp(
            os.path.join(committed, p), os.path.join(fresh, p),
            shallow=False)]
        if bad:
            print("web/dist is not what web/src builds to (rebuild: cd web "
                  "&& npm ci && npm run build, and commit web/dist):")
            print("\n".join("  " + x for x in bad))
            return 1
        print("web/dist matches a fresh build (%d files)" % len(a))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
