"""Progress lines on stderr, and subprocesses run with their output kept in a log."""

import collections
import os
import re
import subprocess
import sys
import time

_START = time.monotonic()


class ToolError(Exception):
    """A failure the user can act on; the message says what and how."""


def log(msg):
    t = int(time.monotonic() - _START)
    sys.stderr.write("[flushless %02d:%02d] %s\n" % (t // 60, t % 60, msg))
    sys.stderr.flush()


def run_logged(cmd, log_path, label, cwd=None, env=None, count=None, every=15.0):
    """Run CMD with output appended to LOG_PATH; every EVERY s say how far it got.

    COUNT is a regex; lines matching it are counted as progress units (compiled files).
    On failure raise ToolError with the last lines of the log.
    """
    counter = re.compile(count) if count else None
    done = 0
    tail = collections.deque(maxlen=30)
    t0 = last = time.monotonic()
    with open(log_path, "a") as logf:
        logf.write("$ %s\n" % " ".join(cmd))
        logf.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, errors="replace")
        try:
            for line in proc.stdout:
                logf.write(line)
                tail.append(line.rstrip("\n"))
                if counter and counter.search(line):
                    done += 1
                now = time.monotonic()
                if now - last >= every:
                    last = now
                    what = ("%d files" % done) if counter else "running"
                    log("%s: %s, %ds" % (label, what, now - t0))
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if rc != 0:
        lines = "\n".join("    " + line for line in tail)
        raise ToolError("%s failed (exit %d): %s\n  last lines of %s:\n%s"
                        % (label, rc, " ".join(cmd), log_path, lines))
    return time.monotonic() - t0


def capture(cmd, what, env=None):
    """Run a short command and return its stdout; fail with its stderr."""
    try:
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ToolError("%s: '%s' not found" % (what, cmd[0]))
    if res.returncode != 0:
        raise ToolError("%s failed: %s\n%s" % (what, " ".join(cmd), res.stderr.strip()))
    return res.stdout


def nproc():
    return len(os.sched_getaffinity(0))
