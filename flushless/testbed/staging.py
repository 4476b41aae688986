"""The Xen series as posted, checked where it will be applied: xen-project/xen's staging branch.

The base-commit: line (git format-patch --base writes it in the first patch) must name the
tree's commit; the series must apply with no fuzz; the hypervisor must build for x86_64 with
the testbed's config (build.XEN_CONFIG) and with CONFIG_PV off as well (build.XEN_CONFIG_NO_PV).
Debian's 4.20, which the testbed builds with the backports of patches/xen/4.20/, is checked by
make check-series. The record goes to results/staging/staging-check.json, the logs beside it
(staging-check-logs/).
"""

import datetime
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time

from .. import tools
from ..progress import ToolError, log, nproc, run_logged
from . import build

DEFAULT_OUT = os.path.join(build.REPO, "results", "staging", "staging-check.json")
CONFIGS = {"pv": build.XEN_CONFIG, "no-pv": build.XEN_CONFIG + build.XEN_CONFIG_NO_PV}
# As git format-patch --base writes it (in the first patch, or the cover letter, only).
BASE_COMMIT = re.compile(r"^base-commit: ([0-9a-f]{7,40})\s*$", re.M)


def base_commit(patch):
    """The base-commit: line of PATCH, or None."""
    with open(patch, errors="replace") as f:
        m = BASE_COMMIT.search(f.read())
    return m.group(1) if m else None


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def git(args, what):
    res = subprocess.run(["git"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise ToolError("%s failed: git %s\n%s" % (what, " ".join(args), res.stderr.strip()))
    return res.stdout


def commit_info(git_args, rev):
    """{commit, date, subject} of REV, from git with GIT_ARGS (-C DIR or --git-dir DIR)."""
    out = git(git_args + ["log", "-1", "--format=%H%n%cI%n%s", rev + "^{commit}", "--"],
              "reading commit %s" % rev)
    commit, date, subject = (out.splitlines() + ["", "", ""])[:3]
    return {"commit": commit, "date": date, "subject": subject}


def staging_source(tree=None, git_dir=None, commit=None):
    """Where the staging tree comes from, checked before anything is copied: {kind, path, commit,
    date, subject, ...}. The commit is None for a tree that is not a git checkout."""
    if tree is not None and (git_dir is not None or commit is not None):
        raise ToolError("give --tree DIR, or --git-dir GITDIR with --commit REV, not both")
    if tree is not None:
        tree = os.path.abspath(tree)
        if not os.path.isdir(tree):
            raise ToolError("--tree %s: no such directory (a checkout of xen-project/xen's staging branch)" % tree)
        if not os.path.isfile(os.path.join(tree, "xen", "Makefile")):
            raise ToolError("--tree %s is not a Xen source tree: it has no xen/Makefile" % tree)
        src = {"kind": "tree", "path": tree, "commit": None, "date": None, "subject": None, "dirty": None,
               "checkout": tools.have("git") and os.path.exists(os.path.join(tree, ".git"))}
        if src["checkout"]:
            src.update(commit_info(["-C", tree], "HEAD"))
            # Local changes go into the copy as they are: the record says so.
            src["dirty"] = bool(git(["-C", tree, "status", "--porcelain", "--untracked-files=no"],
                                    "git status of %s" % tree).strip())
        return src
    if git_dir is None or commit is None:
        raise ToolError("name the staging tree: --tree DIR (a checkout), or --git-dir GITDIR --commit REV "
                        "(e.g. --git-dir /work/.mirror/xen-project+xen/repo --commit staging)")
    tools.require("git", "tar")
    git_dir = os.path.abspath(git_dir)
    if not os.path.isdir(git_dir):
        raise ToolError("--git-dir %s: no such directory" % git_dir)
    src = {"kind": "git-dir", "path": git_dir, "rev": commit, "dirty": False}
    try:
        src.update(commit_info(["--git-dir", git_dir], commit))
    except ToolError as e:
        raise ToolError("--commit %s is no commit of %s:\n  %s" % (commit, git_dir, e))
    return src


def copy_source(src, dest):
    """A fresh copy of the staging tree in DEST (under the build cache, never in a checkout)."""
    if src["kind"] == "git-dir":
        q = [shlex.quote(x) for x in (src["path"], src["commit"], dest)]
        run_logged(["bash", "-o", "pipefail", "-c", "git --git-dir=%s archive %s | tar -x -C %s" % tuple(q)],
                   os.devnull, "staging: git archive")
    elif src["checkout"]:
        # The tracked files as they are in the work tree: no .git, no stale build products.
        q = [shlex.quote(x) for x in (src["path"], src["path"], dest)]
        run_logged(["bash", "-o", "pipefail", "-c", "git -C %s ls-files -z | tar -C %s --null --ignore-failed-read "
                    "-T - -c | tar -x -C %s" % tuple(q)], os.devnull, "staging: copy tracked files")
    else:
        shutil.copytree(src["path"], dest, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".git"))


def check_base_commits(series, src):
    """{name: base-commit or None} and the problems to report: a line naming another commit, or
    no line at all. With the tree's commit unknown nothing can be compared."""
    bases = {os.path.basename(p): base_commit(p) for p in series}
    problems = []
    if not any(bases.values()):
        problems.append("no patch carries a base-commit: line (git format-patch --base=%s writes it)"
                        % (src["commit"] or "<staging commit>"))
    elif src["commit"]:
        for name, base in bases.items():
            if base and not src["commit"].startswith(base):
                problems.append("%s is based on %s, the tree is at %s" % (name, base, src["commit"]))
    return bases, problems


def apply_patch(tree, patch, logfile):
    """Apply PATCH as build.apply_patches does; on failure name it and show the rejected hunks."""
    name = os.path.basename(patch)
    log("staging: applying %s" % name)
    res = subprocess.run(["patch", "-p1", "--forward", "--batch", "--fuzz=0", "-i", patch], cwd=tree,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                         stdin=subprocess.DEVNULL)
    with open(logfile, "a") as f:
        f.write("$ patch -p1 --forward --batch --fuzz=0 -i %s\n%s" % (patch, res.stdout))
    if res.returncode == 0:
        return None
    hunks = []
    for rej in re.findall(r"saving rejects to file (\S+)", res.stdout):
        try:
            with open(os.path.join(tree, rej)) as f:
                hunks += ["%s: %s" % (rej[:-len(".rej")], line.rstrip()) for line in f if line.startswith("@@")]
        except OSError:
            pass
    out = [line for line in res.stdout.splitlines() if "FAILED" in line or "can't find file" in line
           or "Reversed" in line or line.startswith("patching file")]
    return {"patch": name, "output": out[-20:], "rejected_hunks": hunks}


def build_xen(tree, config, logfile, env):
    """The hypervisor alone: Xen's defconfig, CONFIG lines appended, olddefconfig, make."""
    make = ["make", "-C", "xen"] + (["CC=ccache gcc"] if "CCACHE_DIR" in env else [])
    run_logged(make + ["defconfig"], logfile, "staging: defconfig", cwd=tree, env=env)
    with open(os.path.join(tree, "xen", ".config"), "a") as f:
        f.write("\n".join(config) + "\n")
    run_logged(make + ["olddefconfig"], logfile, "staging: olddefconfig", cwd=tree, env=env)
    with open(os.path.join(tree, "xen", ".config")) as f:
        have = f.read().splitlines()
    lost = [line for line in config if line not in have]
    if lost:
        raise ToolError("staging: %s did not stick in the config (Kconfig refused it)" % ", ".join(lost))
    try:
        run_logged(make + ["-j%d" % nproc()], logfile, "staging: build", cwd=tree, env=env, count=r"^\s+CC\s")
    except ToolError as e:
        # With parallel jobs the compiler's error is rarely among the last lines: name it first.
        with open(logfile, errors="replace") as f:
            errors = [line.rstrip() for line in f if re.search(r"\berror:|undefined reference", line)]
        if not errors:
            raise
        raise ToolError("%s\n  the first errors:\n%s" % (e, "\n".join("    " + x for x in errors[:10])))
    if not os.path.isfile(os.path.join(tree, "xen", "xen")):
        raise ToolError("staging: make succeeded but left no xen/xen (see %s)" % logfile)


def build_env(work):
    env = dict(os.environ)
    if tools.have("ccache"):
        # The prefixes of --each-patch share most objects: hash relative paths only.
        env.update(CCACHE_DIR=os.path.join(build.CACHE, "ccache"), CCACHE_BASEDIR=work, CCACHE_NOHASHDIR="true",
                   CCACHE_MAXSIZE="5G")
    return env


def toolchain():
    """The first line of gcc's and ld's --version: Xen's build checks both."""
    out = {}
    for tool in ("gcc", "ld"):
        res = subprocess.run([tool, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        out[tool] = res.stdout.splitlines()[0] if res.returncode == 0 and res.stdout else None
    return out


def rel(path):
    return os.path.relpath(path, build.REPO) if path.startswith(build.REPO + os.sep) else path


def check(src, series_dir=None, out=DEFAULT_OUT, each_patch=False):
    """Check the series in SERIES_DIR (default patches/xen) on the staging tree SRC
    (staging_source()); write the record to OUT and return it. Raise ToolError on any failure,
    after the record is written."""
    series_dir = os.path.abspath(series_dir or build.XEN_SERIES)
    series = build.xen_series_as_posted(series_dir)
    if not series:
        raise ToolError("%s holds no *.patch files" % series_dir)
    tools.require("gcc", "make", "flex", "bison", "python3", "patch", "tar")
    logs = os.path.splitext(os.path.abspath(out))[0] + "-logs"
    shutil.rmtree(logs, ignore_errors=True)
    os.makedirs(logs)
    t0 = time.monotonic()
    log("staging: %s at %s (%s) %s" % (src["path"], src["commit"] or "an unknown commit", src.get("date") or "?",
                                       src.get("subject") or ""))
    if src.get("dirty"):
        log("staging: %s has local changes; they are checked with the series" % src["path"])
    bases, problems = check_base_commits(series, src)
    for p in problems:
        log("staging: base-commit: %s" % p)
    rec = {"check": "xen series as posted, on staging", "when": datetime.datetime.now().astimezone().isoformat(
               timespec="seconds"),
           "staging": src, "series_dir": rel(series_dir),
           "patches": [{"name": os.path.basename(p), "sha256": sha256(p), "base_commit": bases[os.path.basename(p)]}
                       for p in series],
           "base_commit_problems": problems, "gcc": build.gcc_version(), "toolchain": toolchain(), "jobs": nproc(),
           "ccache": tools.have("ccache"), "apply": None, "builds": [], "logs": rel(logs)}
    failures = ["base-commit: " + p for p in problems]
    work = build.work_dir("staging")
    try:
        apply_and_build(src, series, work, logs, rec, failures, each_patch)
    except ToolError as e:
        failures.append(str(e))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        rec.update(seconds=round(time.monotonic() - t0, 1), ok=not failures, failures=failures)
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(rec, f, indent=2)
            f.write("\n")
        log("staging: record in %s" % out)
    if failures:
        raise ToolError("the series in %s on %s:\n  %s" % (rel(series_dir), src["commit"] or src["path"],
                                                           "\n  ".join(failures)))
    log("staging: the series (%d patch%s) applies to %s and the hypervisor builds with and without CONFIG_PV (%s)"
        % (len(series), "" if len(series) == 1 else "es", src["commit"] or src["path"],
           "every prefix" if each_patch else "whole series"))
    return rec


def apply_and_build(src, series, work, logs, rec, failures, each_patch):
    """Apply SERIES to a copy of SRC in WORK and build each prefix asked for (the whole series
    by default) in both CONFIGS; results go into REC, failures into FAILURES."""
    base = os.path.join(work, "src")
    os.makedirs(base)
    log("staging: copying the tree to %s" % base)
    copy_source(src, base)
    rec["xen_version"] = build.xen_version(base)
    env = build_env(work)
    apply_log = os.path.join(logs, "apply.log")
    rec["apply"] = {"ok": False, "log": rel(apply_log)}
    applied = 0
    for k in (range(1, len(series) + 1) if each_patch else [len(series)]):
        for p in series[applied:k]:
            rej = apply_patch(base, p, apply_log)
            if rej:
                rec["apply"].update(rej)
                failures.append("%s does not apply to %s (%s):\n%s" % (
                    rej["patch"], src["commit"] or src["path"], rel(apply_log),
                    "\n".join("    " + x for x in (rej["rejected_hunks"] or rej["output"]))))
                return
            applied += 1
        if applied == len(series):
            rec["apply"]["ok"] = True
        for name, config in CONFIGS.items():
            # Each build in a copy of its own: no object or .config of another one left over.
            tree = os.path.join(work, "build-%d-%s" % (k, name))
            shutil.copytree(base, tree, symlinks=True)
            logfile = os.path.join(logs, "build-%dof%d-%s.log" % (k, len(series), name))
            log("staging: building the hypervisor with the first %d of %d patches, %s (%s)"
                % (k, len(series), name, ", ".join(config)))
            b = {"patches": k, "config": name, "config_lines": config, "log": rel(logfile)}
            t = time.monotonic()
            try:
                build_xen(tree, config, logfile, env)
                b["ok"] = True
            except ToolError as e:
                b.update(ok=False, error=str(e))
                failures.append("the hypervisor with the first %d of %d patches, %s, does not build: %s"
                                % (k, len(series), name, e))
            b["seconds"] = round(time.monotonic() - t, 1)
            log("staging: %s in %d s" % ("built" if b["ok"] else "FAILED", b["seconds"]))
            rec["builds"].append(b)
            shutil.rmtree(tree, ignore_errors=True)
