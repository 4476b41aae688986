"""Unit: testbed/guest/guestrun, dom0's end of a domU's shell, under the testbed's own busybox,
against a pty standing for the domU's console, with xl and xenstore-read faked.

A line the domU prints in two pieces, with a silence longer than the reader's 10 s between
them, must reach guestrun whole. busybox's "read -t" drops what it has of a line when its time
runs out: "@@domu-done 0" once arrived as "@domu-done 0" on a loaded host, and guestrun waited
10 minutes for the command's end.
"""

import os
import pty
import subprocess
import time
import tty

from flushless.testbed import build
from flushless.testbed.build import REPO

GUESTRUN = os.path.join(REPO, "testbed", "guest", "guestrun")


def fake_dom0(tmp_path, tty_name):
    """A PATH of busybox's applets, with xl (domain 7 exists while ALIVE does) and
    xenstore-read (the console is TTY_NAME) faked."""
    busybox = os.path.join(build.Busybox().ensure(), "busybox")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for applet in ("sh", "cat", "date", "sed", "tail", "stty", "sleep"):
        os.symlink(busybox, bin_dir / applet)
    alive = tmp_path / "alive"
    alive.touch()
    (bin_dir / "xl").write_text("#!%s sh\n[ -e %s ] && echo 7\n" % (busybox, alive))
    (bin_dir / "xenstore-read").write_text("#!%s sh\necho %s\n" % (busybox, tty_name))
    for f in ("xl", "xenstore-read"):
        os.chmod(bin_dir / f, 0o755)
    return busybox, str(bin_dir), alive


def run_split(tmp_path, pause):
    """guestrun's command ends with "@@domu-done 3" written as "@" and, PAUSE seconds later,
    the rest. Returns (exit status, what guestrun printed), or None if it had not ended 30 s
    after the last piece."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    busybox, path, _ = fake_dom0(tmp_path, os.ttyname(slave))
    out = tmp_path / "out"
    with open(out, "w") as f:
        proc = subprocess.Popen([busybox, "sh", GUESTRUN, "domu", "true"], env={"PATH": path},
                                stdout=f, stderr=subprocess.STDOUT)
    try:
        sent = b""
        while not sent.endswith(b"\n"):
            sent += os.read(master, 4096)
        token = sent.split(b";")[0].split()[1]
        os.write(master, b"stale line\n" + token + b"\nhello\n@")
        time.sleep(pause)
        os.write(master, b"@domu-done 3\n")
        try:
            return proc.wait(timeout=30), out.read_text()
        except subprocess.TimeoutExpired:
            return None
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
        os.close(slave)


def test_a_line_split_by_a_long_silence_arrives_whole(tmp_path):
    # 12 s: past the reader's 10 s between the two pieces.
    res = run_split(tmp_path, 12)
    assert res is not None, "guestrun did not see the command's end"
    status, out = res
    assert status == 3 and out.split() == ["hello"], res
