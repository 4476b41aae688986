"""The console driver against a real shell on a pty (echo on, unlike the testbed)."""

import contextlib
import os
import pty
import signal
import subprocess
import threading
import time

import pytest

from flushless.testbed import console
from flushless.testbed.console import Console, ConsoleClosed, ConsoleCrash, ConsoleTimeout, XenRouter


@contextlib.contextmanager
def shell_on_pty(writer, **console_args):
    """A real sh on a pty, driven by a Console that writes through WRITER(master)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(["sh"], stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            env={"PATH": os.environ["PATH"], "PS1": "$ "})
    os.close(slave)

    def read(n):
        try:
            return os.read(master, n)
        except OSError:  # EIO once the shell is gone
            return b""

    con = Console(read, writer(master), **console_args)
    try:
        yield con, proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the shell and what it started (sleep)
        proc.wait()
        # Close only once the reader is done, or it reads the next file on this fd.
        assert con.wait_closed(10)
        os.close(master)


@pytest.fixture
def shell():
    with shell_on_pty(lambda master: lambda d: os.write(master, d), chunk=8, chunk_delay=0.001) as (con, proc):
        yield con, proc


def test_run_returns_status_and_output(shell):
    con, _ = shell
    assert con.run("echo hello; echo world", 10) == (0, ["hello", "world"])
    assert con.run("false", 10) == (1, [])
    status, lines = con.run("printf 'a\\nb\\n'; exit_code() { return 3; }; exit_code", 10)
    assert (status, lines) == (3, ["a", "b"])


def test_progress_callback_sees_lines_while_the_command_runs(shell):
    con, _ = shell
    seen = []
    status, lines = con.run("for i in 1 2 3; do echo step $i; sleep 0.1; done", 10,
                            progress=(r"step (?P<n>\d)\n", lambda m: seen.append((m.group("n"), time.monotonic()))))
    assert status == 0 and lines == ["step 1", "step 2", "step 3"]
    assert [n for n, _ in seen] == ["1", "2", "3"]
    assert seen[2][1] - seen[0][1] > 0.15  # reported as they came, not at the end


def test_output_that_looks_like_a_marker_does_not_end_the_command(shell):
    con, _ = shell
    status, lines = con.run("echo '@@FL-E1-2 0@@'; echo after", 10)
    assert status == 0 and lines[-1] == "after"


def test_xen_lines_are_kept_apart_from_output(shell):
    con, _ = shell
    # '(XE''N)': the pty echoes the command line, which must not hold the tag itself.
    status, lines = con.run("echo '(XE''N) d0v1 something'; echo mine", 10)
    assert lines == ["mine"]
    assert con.xen_lines == ["(XEN) d0v1 something"]


def test_xen_message_inside_a_dom0_line_is_moved_after_it(shell):
    # Seen in CI: 'csched: acct_balance 0(XEN) uart interrupt taking more than 4ms, ...'
    con, _ = shell
    status, lines = con.run("printf 'csched: acct_balance 0(XE''N) uart polling\\n\\nnext 1\\n'", 10)
    assert (status, lines) == (0, ["csched: acct_balance 0", "next 1"])
    assert con.xen_lines == ["(XEN) uart polling"]


@pytest.mark.parametrize("text, want", [
    ("ab(XEN) x\ncd\nef\n", "abcd\n(XEN) x\nef\n"),
    ("(XEN) at start\nab\n", "(XEN) at start\nab\n"),
    ("a(XEN) 1\n(XEN) 2\nb\n(XEN) 3\n", "ab\n(XEN) 1\n(XEN) 2\n(XEN) 3\n"),
    ("no tag (X here\n# ", "no tag (X here\n# "),
])
def test_xen_router_keeps_lines_whole_however_the_stream_is_cut(text, want):
    for cut in range(len(text) + 1):
        for cut2 in range(cut, len(text) + 1):
            r = XenRouter()
            got = r.feed(text[:cut]) + r.feed(text[cut:cut2]) + r.feed(text[cut2:])
            assert got == want, (cut, cut2)


def test_long_command_is_sent_whole(shell):
    con, _ = shell
    word = "x" * 700
    assert con.run("echo %s | wc -c" % word, 10) == (0, ["701"])


class XenRxRing:
    """Xen's serial receive ring in front of the shell: SIZE bytes, taken out one byte per
    PER_BYTE_S seconds (dom0 busy); what does not fit is dropped, as Xen drops it."""

    def __init__(self, master, size=128, per_byte_s=0.001):
        self.master, self.size, self.per_byte_s = master, size, per_byte_s
        self.ring = bytearray()
        self.dropped = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def write(self, data):
        with self.lock:
            room = self.size - len(self.ring)
            self.ring += data[:room]
            self.dropped += max(len(data) - room, 0)

    def _drain(self):
        while not self.stop.is_set():
            with self.lock:
                b, self.ring = bytes(self.ring[:1]), self.ring[1:]
            if b:
                os.write(self.master, b)
            time.sleep(self.per_byte_s)


@pytest.fixture
def slow_shell():
    """A shell behind XenRxRing, sent to as the testbed sends (32 bytes every 10 ms)."""
    rings = []

    def through_ring(master):
        rings.append(XenRxRing(master))
        return rings[0].write

    with shell_on_pty(through_ring) as (con, _):
        yield con, rings[0]
        rings[0].stop.set()
        rings[0].thread.join()


LONG = "x='%s'; y=\"it's\"; echo \"$x$y\" | wc -c" % ("x" * 700)


def test_long_command_survives_a_slow_receiver(slow_shell):
    # 900 bytes at once overflow Xen's 128-byte ring while dom0 reads slowly (seen: the race
    # test's script reached dom0 cut, and the shell waited for the rest).
    con, ring = slow_shell
    assert con.run(LONG + "; (exit 3)", 60) == (3, ["705"])
    assert con.run(LONG, 60) == (0, ["705"])
    assert ring.dropped == 0


def test_slow_receiver_drops_a_long_line_sent_whole(slow_shell, monkeypatch):
    # The ring above loses bytes when a long line is sent at once: the test before can fail.
    con, ring = slow_shell
    monkeypatch.setattr(console, "LINE_MAX", 10 ** 6)
    try:
        assert con.run(LONG, 10) != (0, ["705"])
    except ConsoleTimeout:
        pass
    assert ring.dropped > 0


def test_crash_line_raises_with_tail(shell):
    con, _ = shell
    with pytest.raises(ConsoleCrash) as e:
        con.run("echo line-before; echo 'Kernel panic - not syncing: VFS: Unable to mount root'; sleep 30", 20)
    assert "dom0 kernel panic" in str(e.value)
    assert any("line-before" in x for x in e.value.tail)


def test_a_quoted_domu_panic_is_not_dom0s(shell):
    con, _ = shell
    # (Split, so that the echoed command line does not hold the panic.)
    status, out = con.run("printf 'domU| Kernel pan%s - not syncing: Attempted to kill init!\\n' ic", 20)
    assert status == 0 and out == ["domU| Kernel panic - not syncing: Attempted to kill init!"], out
    # The same line unquoted, right after a quoted one, is dom0's.
    with pytest.raises(ConsoleCrash) as e:
        con.run("printf 'domU| quoted\\nKernel pan%s - not syncing: dom0\\n' ic; sleep 30", 20)
    assert "dom0 kernel panic" in str(e.value)


def test_xen_panic_inside_a_dom0_line_is_still_seen(shell):
    # dom0 sits at its prompt, mid-line, when Xen panics: no dom0 newline ever comes.
    con, _ = shell
    with pytest.raises(ConsoleCrash) as e:
        con.run("printf '# (XE''N) Panic on CPU 0:\\n(XE''N) FATAL TRAP\\n'; sleep 30", 20)
    assert "Xen panic" in str(e.value)
    assert any("FATAL TRAP" in x for x in e.value.tail)


def test_timeout_raises_with_last_lines(shell):
    con, _ = shell
    t = time.monotonic()
    with pytest.raises(ConsoleTimeout) as e:
        con.run("echo started; sleep 30", 2)
    assert time.monotonic() - t < 10
    assert "no end of" in str(e.value) and "last" in str(e.value)
    assert any("started" in x for x in e.value.tail)


def test_closed_console_raises(shell):
    con, proc = shell
    with pytest.raises(ConsoleClosed):
        con.run("exit 0", 10)


# The first lines of a runtime crash of 2026-11-23; the oops went on for 80 lines after them.
OOPS = """[  213.090217] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI
[  213.090841] RIP: e030:pmd_alloc_one_noprof+0xf/0xa0
[  213.091227] Code: 66 2e 0f 1f 84 00 00 00 00 00 90 90 90 90 90 66 0f 1f 00 53 48 81 ff c0 52 17 82 74 7d \
66 <90> bf c0 0d 44 00 31 f6 e8 54 34 21 00 48 89 c3
[  213.091401] RSP: e02b:ffffc90042d3baf8 EFLAGS: 00000287
"""


def test_crash_report_is_kept_whole(shell):
    # The Code: line comes early in an oops and leaves the 40-line tail: the report keeps it.
    con, _ = shell
    text = OOPS + "".join("[  213.1] line %d\n" % i for i in range(80))
    path = "/tmp/flushless-test-oops-%d" % os.getpid()
    with open(path, "w") as f:
        f.write(text)
    try:
        with pytest.raises(ConsoleCrash) as e:
            con.run("cat %s; sleep 30" % path, 20)
    finally:
        os.unlink(path)
    assert not any("Code:" in line for line in e.value.tail)
    assert "Code: 66 2e 0f" in e.value.report and "line 79" in e.value.report
