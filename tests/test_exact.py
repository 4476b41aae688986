"""Unit: what the harness does not let pass silently. A fixture or patch that applies only
with fuzz, and a boot retried after a stall."""

import os
import subprocess

import pytest

from flushless.testbed import boot, build
from flushless.progress import ToolError

ORIGINAL = ["line %d\n" % i for i in range(1, 21)]


def make_patch(tmp_path, old_lines, new_lines):
    """A unified diff of f.txt from OLD_LINES to NEW_LINES, as git format-patch writes it."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "f.txt").write_text("".join(old_lines))
    (b / "f.txt").write_text("".join(new_lines))
    out = subprocess.run(["diff", "-u", "--label", "a/f.txt", "--label", "b/f.txt", str(a / "f.txt"),
                          str(b / "f.txt")], capture_output=True, text=True).stdout
    path = tmp_path / "fixture.patch"
    path.write_text(out)
    return str(path)


def tree_with(tmp_path, lines):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f.txt").write_text("".join(lines))
    return str(tree)


def test_a_patch_that_applies_exactly_applies(tmp_path):
    changed = ORIGINAL[:10] + ["line 10 changed by the fixture\n"] + ORIGINAL[11:]
    patch = make_patch(tmp_path, ORIGINAL, changed)
    tree = tree_with(tmp_path, ORIGINAL)
    build.apply_patches(tree, [patch], str(tmp_path / "log"), "test")
    assert open(tree + "/f.txt").read() == "".join(changed)


def test_a_drifted_fixture_fails_instead_of_landing_with_fuzz(tmp_path):
    # The tree moved under the fixture: a context line changed. patch's default fuzz (2)
    # would still apply it; the build must refuse.
    changed = ORIGINAL[:10] + ["line 10 changed by the fixture\n"] + ORIGINAL[11:]
    patch = make_patch(tmp_path, ORIGINAL, changed)
    drifted = ORIGINAL[:8] + ["line 9, since edited upstream\n"] + ORIGINAL[9:]
    tree = tree_with(tmp_path, drifted)
    assert subprocess.run(["patch", "-p1", "--dry-run", "--batch", "-i", patch], cwd=tree,
                          capture_output=True).returncode == 0, "patch's default fuzz should take it"
    with pytest.raises(ToolError, match="fixture.patch"):
        build.apply_patches(tree, [patch], str(tmp_path / "log"), "test")


def test_retries_explained_by_the_census_rate():
    # 1 stall in 153 boots (docs/census.md): a make test's 40-odd boots may need 2 retries,
    # not 3; one boot none.
    assert boot.retries_explained(1) == 0
    assert boot.retries_explained(40) == 2
    assert boot.retries_explained(153) == 4


def test_a_stalled_boot_is_retried_once_and_counted(tmp_path, monkeypatch):
    for name in ("xen", "vmlinuz", "initramfs"):
        (tmp_path / name).write_text("")
    cfg = boot.BootConfig(xen=str(tmp_path / "xen"), kernel=str(tmp_path / "vmlinuz"),
                             initramfs=str(tmp_path / "initramfs"))
    tb = boot.Testbed(cfg, str(tmp_path / "console.log"))
    calls = []

    class Timeout(Exception):
        what = "no shell prompt within 180 s"

    def start_once(stalls=1):
        calls.append(1)
        (tmp_path / "console.log").write_text("boot %d\n" % len(calls))
        if len(calls) <= stalls:
            raise boot._BootStalled(Timeout())
        return tb

    monkeypatch.setattr(tb, "_start_once", start_once)
    monkeypatch.setattr(boot, "BOOTS", {"boots": 0, "retried": []})
    assert tb.start() is tb
    assert tb.boot_attempts == 2 and boot.BOOTS == {"boots": 2, "retried": [str(tmp_path / "console.log.stalled")]}
    assert (tmp_path / "console.log.stalled").read_text() == "boot 1\n"
    # A second stall ends the boot with an error, never a third try.
    calls.clear()
    monkeypatch.setattr(tb, "_start_once", lambda: start_once(stalls=2))
    with pytest.raises(ToolError, match="testbed boot failed"):
        tb.start()
    assert len(calls) == 2


pytest_plugins = ["pytester"]


def test_more_retries_than_the_stall_rate_explains_fail_the_run(pytester):
    # The suite's own conftest, in a pytest of its own: 3 boots, 2 retried (1 explained).
    conftest = open(os.path.join(build.REPO, "tests", "conftest.py")).read()
    pytester.makeconftest("import sys\nsys.path.insert(0, %r)\n" % build.REPO + conftest)
    pytester.makepyfile(test_boots="""
from flushless.testbed import boot

def test_three_boots_two_stalled():
    boot.BOOTS["boots"] += 3
    boot.BOOTS["retried"] += ["a.log.stalled", "b.log.stalled"]
""")
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert res.ret == 1, res.stdout.str()
    res.stdout.fnmatch_lines(["*1 passed*"])
    res.stdout.fnmatch_lines(["testbed: 3 boots, 2 retried after a stall (* explains up to 1): FAILED",
                              "    stalled, booted again: a.log.stalled"])
