"""RESULTS/stages.json: what a long run has finished, so that a rerun resumes (docs/evaluation.md).

One entry per `reproduce` stage or `series` experiment:
  status       running, done, failed or interrupted
  started, ended, seconds
  fingerprint  a digest of "depends": what the results depend on (Study.depends, series.run)
  files        the results files it wrote
  error, console_log   why it failed, and the console log written last
The file is written whole and renamed into place at every change: a kill leaves the old
ledger or the new one, never half of one. Nothing is deleted: results a stage is about to
replace (other settings, --restart) are moved to RESULTS/old/TIME/.
"""

import contextlib
import datetime
import glob
import hashlib
import json
import os
import shutil
import signal
import time

from ..testbed.build import REPO

NAME = "stages.json"
# The build inputs of every part any stage boots (patches, testbed-only patches, guest
# programs): the keys of the "built" parts do not cover the vanilla kernel, the other
# designs' Xen series or the testbed series.
SOURCE_DIRS = ("patches", "testbed", "workloads")


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def read(results):
    """The ledger of RESULTS as a dict, or None (none there, or unreadable)."""
    try:
        with open(os.path.join(results, NAME)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc.get("stages"), dict) else None


def sources_digest():
    h = hashlib.sha256()
    for d in SOURCE_DIRS:
        for path in sorted(glob.glob(os.path.join(REPO, d, "**", "*"), recursive=True)):
            if os.path.isfile(path):
                h.update(os.path.relpath(path, REPO).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()[:16]


def parts_keys(parts):
    """The build keys of a build.Parts (content hashes of each part's inputs)."""
    if parts is None:
        return {}
    return {n: getattr(parts, n).key for n in ("xen", "kernel", "busybox", "initramfs")
            if getattr(parts, n, None) is not None}


def fingerprint(depends):
    return hashlib.sha256(json.dumps(depends, sort_keys=True).encode()).hexdigest()[:16]


def differences(old, new, prefix=""):
    """The dotted keys whose values differ between two "depends" dicts."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, prefix + k + ".")
        elif a != b:
            out.append(prefix + k)
    return out


def _files(results):
    """{name: (mtime, size)} of the results files at the top of RESULTS."""
    out = {}
    for path in glob.glob(os.path.join(results, "*")):
        if os.path.isfile(path) and os.path.basename(path) != NAME:
            st = os.stat(path)
            out[os.path.basename(path)] = (st.st_mtime_ns, st.st_size)
    return out


def _newest(directory, since):
    # Console logs, and those kept after a stalled boot; not QEMU's fault traces beside them.
    logs = [p for p in glob.glob(os.path.join(directory, "*.log")) + glob.glob(os.path.join(directory, "*.log.stalled"))
            if os.path.getmtime(p) >= since]
    return max(logs, key=os.path.getmtime) if logs else None


class Terminated(KeyboardInterrupt):
    """SIGTERM: unwinds like Ctrl-C, so the ledger records the stage as interrupted."""


def on_sigterm(signum, frame):
    raise Terminated()


@contextlib.contextmanager
def sigterm_interrupts():
    """SIGTERM raises Terminated while the run lasts. (A testbed boot sets its own handler
    and resets it to the default when it ends; stages set this one again as they start.)"""
    old = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class Ledger:
    def __init__(self, results, say):
        self.results = results
        self.say = say
        self.path = os.path.join(results, NAME)
        self.doc = read(results)
        if self.doc is None:
            if os.path.exists(self.path):
                self._aside([self.path], "unreadable ledger")
            self.doc = {"stages": {}}
        self.stamp = None

    def entry(self, name):
        return self.doc["stages"].get(name)

    def save(self):
        os.makedirs(self.results, exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)

    def note(self, name, **fields):
        """Add FIELDS to NAME's entry (a retry, the sub-parts kept so far)."""
        if name in self.doc["stages"]:
            self.doc["stages"][name].update(fields)
            self.save()

    # --- before a stage: keep it, resume it, or start it afresh --------------------------

    def prepare(self, name, depends, outputs):
        """True when NAME must run. Done with the same fingerprint: kept (False). Otherwise
        it runs; unless it is resuming the same settings, its earlier files go aside first."""
        fp = fingerprint(depends)
        e = self.entry(name)
        if e and e.get("fingerprint") == fp:
            gone = [f for f in e.get("files", []) if not os.path.exists(os.path.join(self.results, f))]
            if e["status"] == "done" and not gone:
                self.say("%s: done at %s, kept; --restart to redo it" % (name, e.get("ended")))
                return False
            if e["status"] == "done":
                self.say("%s: done at %s, but %s is gone; running it again" % (name, e.get("ended"), gone[0]))
                return True
            what = {"running": "started at %s and never ended (killed?)" % e.get("started"),
                    "interrupted": "interrupted at %s" % e.get("ended"),
                    "failed": "failed at %s (%s)" % (e.get("ended"), _first_line(e.get("error")))
                    }.get(e["status"], e["status"])
            self.say("%s: %s; running it again, keeping what it finished" % (name, what))
            return True
        if e:
            changed = differences(e.get("depends", {}), depends) or ["fingerprint"]
            self.say("%s: %s at %s with other settings (%s changed); running it again"
                     % (name, e["status"], e.get("ended") or e.get("started"), ", ".join(changed)))
        self.set_aside(name, outputs, "earlier settings" if e else "not in the ledger")
        return True

    def restart(self, name, outputs):
        """--restart: NAME's files go aside and the ledger forgets it."""
        self.set_aside(name, outputs, "--restart")
        if self.doc["stages"].pop(name, None) is not None:
            self.save()

    def set_aside(self, name, outputs, why):
        e = self.entry(name) or {}
        paths = [os.path.join(self.results, f) for f in e.get("files", [])]
        paths += [os.path.join(self.results, "%s.%s" % (o, ext)) for o in outputs for ext in ("json", "csv")]
        paths += self.partials(name) + [os.path.join(self.results, "partial", "handoff-%s.json" % name)]
        self._aside(sorted(set(p for p in paths if os.path.exists(p))), "%s (%s)" % (name, why))

    def _aside(self, paths, what):
        if not paths:
            return
        self.stamp = self.stamp or datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        dest = os.path.join(self.results, "old", self.stamp)
        os.makedirs(dest, exist_ok=True)
        for p in paths:
            rel = os.path.relpath(p, self.results).replace(os.sep, "-")
            shutil.move(p, os.path.join(dest, rel))
        self.say("%s: moved %d earlier file(s) to %s" % (what, len(paths), dest))

    def partials(self, name):
        return sorted(glob.glob(os.path.join(self.results, "partial", "%s-*.json" % name)))

    # --- a stage's run ------------------------------------------------------------------

    def run(self, name, depends, fn, console_dir):
        """FN() recorded as NAME: running, then done, failed or interrupted (re-raised)."""
        before, t0, wall0 = _files(self.results), time.monotonic(), time.time()
        self.doc["stages"][name] = {"status": "running", "started": now(),
                                    "fingerprint": fingerprint(depends), "depends": depends}
        self.save()

        def end(status, **fields):
            after = _files(self.results)
            self.note(name, status=status, ended=now(), seconds=round(time.monotonic() - t0, 1),
                      files=sorted(f for f in after if after[f] != before.get(f)), **fields)

        try:
            result = fn()
        except KeyboardInterrupt:
            end("interrupted", error="interrupted (Ctrl-C or SIGTERM)")
            raise
        except Exception as e:
            end("failed", error="%s: %s" % (type(e).__name__, e), console_log=_newest(console_dir, wall0))
            raise
        end("done")
        # Its sub-parts' rows are in its results files now.
        for p in self.partials(name):
            os.unlink(p)
        return result


def _first_line(text):
    return (text or "").strip().splitlines()[0] if (text or "").strip() else "no message"
