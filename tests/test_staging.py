"""The Xen series as posted (patches/xen, on staging) and as the testbed applies it (4.20/
backports substituted), and check-staging's answers to bad input. Fast: nothing is built."""

import json
import os
import subprocess
import sys

import pytest

from flushless.testbed import build, staging
from flushless.testbed.build import REPO
from flushless.progress import ToolError

STAGING_SHA = "c447b7308b1330ec6dcfef37220736c28f41daa0"


def write(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return str(path)


def series_dir(tmp_path, backports=()):
    d = tmp_path / "xen"
    for name in ("0001-a.patch", "0002-b.patch", "0003-c.patch"):
        write(d / name, "posted %s\n" % name)
    write(d / "review" / "notes.md", "not a patch\n")
    for name in backports:
        write(d / "4.20" / name, "backport %s\n" % name)
    return str(d)


def names(paths, root):
    return [os.path.relpath(p, root) for p in paths]


def test_backport_replaces_its_patch_in_place(tmp_path):
    d = series_dir(tmp_path, backports=["0002-b.patch"])
    assert names(build.xen_series_for_testbed(d), d) == ["0001-a.patch", "4.20/0002-b.patch", "0003-c.patch"]
    # The series as posted is untouched by the backports.
    assert names(build.xen_series_as_posted(d), d) == ["0001-a.patch", "0002-b.patch", "0003-c.patch"]


def test_no_backports_is_the_posted_series(tmp_path):
    d = series_dir(tmp_path)
    assert build.xen_series_for_testbed(d) == build.xen_series_as_posted(d)


def test_stray_backport_is_an_error(tmp_path):
    d = series_dir(tmp_path, backports=["0002-b.patch", "0004-gone.patch"])
    with pytest.raises(ToolError) as e:
        build.xen_series_for_testbed(d)
    assert "0004-gone.patch replaces no patch of the series" in str(e.value)


def test_patches_xen_is_the_testbed_series():
    # Every caller of patches("xen") builds Debian's 4.20: the effective list, files only.
    series = build.patches("xen")
    assert series == build.xen_series_for_testbed()
    assert series and all(os.path.isfile(p) and p.endswith(".patch") for p in series)
    assert [os.path.basename(p) for p in series] == [os.path.basename(p) for p in build.xen_series_as_posted()]


def test_base_commit_lines(tmp_path):
    first = write(tmp_path / "0001.patch", "+x\n-- \n2.39.5\n\nbase-commit: %s\n" % STAGING_SHA)
    second = write(tmp_path / "0002.patch", "+y\n-- \n2.39.5\n")
    assert staging.base_commit(first) == STAGING_SHA
    assert staging.base_commit(second) is None
    at = {"commit": STAGING_SHA}
    assert staging.check_base_commits([first, second], at)[1] == []
    problems = staging.check_base_commits([first, second], {"commit": "0" * 40})[1]
    assert problems == ["0001.patch is based on %s, the tree is at %s" % (STAGING_SHA, "0" * 40)]
    problems = staging.check_base_commits([second], at)[1]
    assert len(problems) == 1 and "no patch carries a base-commit: line" in problems[0]


def small_tree(root):
    write(root / "xen" / "Makefile", "# not Xen\n")
    write(root / "xen" / "common" / "f.c", "".join("line %d\n" % i for i in range(1, 21)))
    return str(root)


BAD_PATCH = """--- a/xen/common/f.c
+++ b/xen/common/f.c
@@ -9,3 +9,3 @@
 line 9
-line ten
+line 10
 line 11
"""


def test_rejected_hunks_are_named(tmp_path):
    tree = small_tree(tmp_path / "tree")
    rej = staging.apply_patch(tree, write(tmp_path / "0001-bad.patch", BAD_PATCH), str(tmp_path / "apply.log"))
    assert rej["patch"] == "0001-bad.patch"
    assert rej["rejected_hunks"] == ["xen/common/f.c: @@ -9,3 +9,3 @@"]


def test_check_records_a_patch_that_does_not_apply(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "CACHE", str(tmp_path / "cache"))
    tree = small_tree(tmp_path / "tree")
    patches = tmp_path / "series"
    write(patches / "0001-bad.patch", BAD_PATCH + "-- \n2.39.5\n\nbase-commit: %s\n" % STAGING_SHA)
    git = ["git", "-C", tree, "-c", "user.name=t", "-c", "user.email=t@localhost"]
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "a tree"]):
        subprocess.run(git + cmd, check=True)
    src = staging.staging_source(tree=tree)
    assert src["checkout"] and src["subject"] == "a tree" and src["dirty"] is False
    out = str(tmp_path / "out" / "check.json")
    with pytest.raises(ToolError) as e:
        staging.check(src, str(patches), out)
    assert "0001-bad.patch does not apply" in str(e.value)
    assert "@@ -9,3 +9,3 @@" in str(e.value)
    assert "is based on %s" % STAGING_SHA in str(e.value)
    with open(out) as f:
        rec = json.load(f)
    assert rec["ok"] is False and rec["apply"]["ok"] is False and rec["builds"] == []
    assert rec["patches"][0]["name"] == "0001-bad.patch" and len(rec["patches"][0]["sha256"]) == 64
    # The copy it patched is gone; the tree it was given is untouched.
    assert os.listdir(os.path.join(build.CACHE, "work")) == []
    assert not os.path.exists(os.path.join(tree, "xen", "common", "f.c.rej"))


def flushless(*args):
    return subprocess.run([sys.executable, "-m", "flushless"] + list(args), cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60,
                          env=dict(os.environ, FLUSHLESS_CACHE="/nonexistent/flushless-cache"))


@pytest.mark.parametrize("args,code,msg", [
    (["--tree", "/nonexistent/xen"], 1, "--tree /nonexistent/xen: no such directory"),
    (["--tree", REPO], 1, "is not a Xen source tree: it has no xen/Makefile"),
    ([], 2, "takes --tree DIR, or --git-dir GITDIR with --commit REV"),
    (["--git-dir", "/nonexistent/xen.git"], 2, "takes --tree DIR, or --git-dir GITDIR with --commit REV"),
    (["--tree", "/tmp", "--git-dir", "/tmp", "--commit", "staging"], 2, "takes --tree DIR"),
    (["--git-dir", "/nonexistent/xen.git", "--commit", "staging"], 1, "--git-dir /nonexistent/xen.git: no such"),
])
def test_check_staging_bad_input(args, code, msg):
    res = flushless("check-staging", *args)
    assert res.returncode == code, res.stderr
    assert msg in res.stderr
    assert "Traceback" not in res.stderr
