"""Drive a shell over a serial console: send commands, wait for markers, spot crashes.

The console carries everything: Xen's own lines ("(XEN) ..."), the dom0 kernel's, and the
shell's. Commands are bracketed by markers the shell prints with printf, split so that an
echoed command line can never look like its own marker.
"""

import collections
import re
import threading
import time

# Lines that mean the machine is gone; the pattern names the crash in the error.
CRASH_PATTERNS = [
    (re.compile(r"Kernel panic - not syncing.*"), "dom0 kernel panic"),
    (re.compile(r"\(XEN\) Panic on CPU \d+.*"), "Xen panic"),
    (re.compile(r"\(XEN\) Hardware Dom0 crashed.*"), "dom0 crashed"),
    (re.compile(r"\(XEN\) Domain 0 crashed.*"), "dom0 crashed"),
    (re.compile(r"\bOops: .*|BUG: unable to handle .*"), "dom0 kernel oops"),
]

# Lines the testbed quotes from another machine's console (a domU's tail: testbed/guest/
# guestboot, guestrun) start with this; a panic there is not this machine's.
QUOTED = "domU| "

TAIL_LINES = 40
# Xen keeps dom0's serial input in a 128-byte ring (SERIAL_RX_SIZE in
# xen/drivers/char/console.c) and drops what does not fit while dom0 is too busy to read it.
# A line of at most this many bytes is sent at once; a longer command goes over in pieces of
# this size, each acknowledged by the shell before the next (Console.run).
LINE_MAX = 120
STAGED = "/tmp/.flc"
# After a crash's first line, how long its report (registers, call trace) may take to
# arrive before the error is raised: the console log then holds it whole.
CRASH_REPORT_S = 3.0


class ConsoleError(Exception):
    """A console operation failed; carries the last console lines for the message, and for a
    crash its whole report (from the crash's first line)."""

    def __init__(self, what, tail, report=""):
        self.what = what
        self.tail = tail
        self.report = report
        super().__init__(what)

    def __str__(self):
        lines = "\n".join("    " + line for line in self.tail)
        return "%s\n  last %d console lines:\n%s" % (self.what, len(self.tail), lines)


class ConsoleTimeout(ConsoleError):
    pass


class ConsoleCrash(ConsoleError):
    pass


class ConsoleClosed(ConsoleError):
    pass


class XenRouter:
    """Xen's messages and dom0's output share one serial line, so a Xen message can land in
    the middle of a dom0 line ('csched: acct_balance 0(XEN) uart interrupt ...'). feed()
    moves each such message to just after the end of that dom0 line, so that both stay
    whole lines. A possible start of the tag at the end of a chunk waits for the next one.
    """

    TAG = "(XEN)"

    def __init__(self):
        self._bol = True  # the last text passed on ended a line
        self._hold = ""  # a possible start of TAG, or a Xen message not yet ended
        self._in_xen = False  # _hold is a Xen message that began inside a dom0 line
        self._deferred = ""  # whole Xen messages waiting for the dom0 line to end

    def feed(self, text):
        s, self._hold = self._hold + text, ""
        out = []
        while s:
            if self._in_xen:
                nl = s.find("\n")
                if nl < 0:
                    self._hold = s
                    break
                self._deferred += s[:nl + 1]
                self._in_xen = False
                s = s[nl + 1:]
                continue
            nl = s.find("\n")
            line = s if nl < 0 else s[:nl + 1]
            k = line.find(self.TAG)
            if k < 0 or (k == 0 and self._bol):
                if nl < 0:
                    keep = 0 if k == 0 else next((n for n in range(len(self.TAG) - 1, 0, -1)
                                                  if line.endswith(self.TAG[:n])), 0)
                    out.append(line[:len(line) - keep])
                    self._hold = line[len(line) - keep:]
                    if len(line) > keep:
                        self._bol = False
                    break
                out.append(line + self._deferred)
                self._deferred = ""
                self._bol = True
                s = s[nl + 1:]
                continue
            out.append(line[:k])
            if k:
                self._bol = False
            self._in_xen = True
            s = s[k:]
        return "".join(out)

    def pending(self):
        """Xen's text held back, waiting for dom0's line to end (a panic at a prompt waits
        for ever: the crash check and the tail look here too)."""
        return self._deferred + self._hold


class Console:
    """Reads a byte stream in a thread; send() writes to the other end.

    read_fn(n) -> bytes ('' at EOF) and write_fn(bytes) abstract the transport (QEMU's
    stdio pipes in the testbed, a pty in the tests).
    """

    def __init__(self, read_fn, write_fn, log=None, chunk=32, chunk_delay=0.01):
        self._read = read_fn
        self._write = write_fn
        self._log = log
        self._chunk = chunk
        self._chunk_delay = chunk_delay
        self._buf = ""
        self._pos = 0  # everything before this was consumed by expect()
        self._scan = 0  # crash patterns were checked up to here
        self._eof = False
        self._cond = threading.Condition()
        self._tail = collections.deque(maxlen=TAIL_LINES)
        self._partial = ""
        self._seq = 0
        self._router = XenRouter()
        self.xen_lines = []
        self._thread = threading.Thread(target=self._reader, name="console-reader", daemon=True)
        self._thread.start()

    def _reader(self):
        while True:
            try:
                data = self._read(4096)
            except OSError:
                data = b""
            if not data:
                with self._cond:
                    self._eof = True
                    self._cond.notify_all()
                return
            raw = data.decode("utf-8", "replace").replace("\r", "")
            if self._log:
                self._log.write(raw)
                self._log.flush()
            with self._cond:
                text = self._router.feed(raw)
                self._buf += text
                lines = (self._partial + text).split("\n")
                self._partial = lines.pop()
                self._tail.extend(lines)
                self._cond.notify_all()

    def tail(self):
        with self._cond:
            out = list(self._tail)
            if self._partial:
                out.append(self._partial)
            out.extend(x for x in self._router.pending().split("\n") if x)
        return out[-TAIL_LINES:]

    def _check_crash(self):
        # Whole lines, scanned once each, and Xen's held-back text.
        end = self._buf.rfind("\n") + 1
        chunk = self._router.pending()
        if end > self._scan:
            chunk = self._buf[self._scan:end] + "\n" + chunk
            self._scan = end
        chunk = "\n".join(line for line in chunk.split("\n") if not line.startswith(QUOTED))
        if not chunk.strip():
            return
        for pattern, what in CRASH_PATTERNS:
            m = pattern.search(chunk)
            if m:
                deadline = time.monotonic() + CRASH_REPORT_S
                while not self._eof and time.monotonic() < deadline:
                    self._cond.wait(deadline - time.monotonic())
                start = self._buf.rfind(m.group(0))
                report = (self._buf[start:] if start >= 0 else chunk[m.start():]) + self._router.pending()
                raise ConsoleCrash("%s: %s" % (what, m.group(0).strip()), self.tail(), report)

    def expect(self, pattern, timeout, what=None):
        """Wait for regex PATTERN after the last match; return the match."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                self._check_crash()
                m = regex.search(self._buf, self._pos)
                if m:
                    self._pos = m.end()
                    return m
                if self._eof:
                    raise ConsoleClosed("console closed while waiting for %s" % (what or pattern), self.tail())
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConsoleTimeout("no %s within %.0f s" % (what or repr(regex.pattern), timeout), self.tail())
                self._cond.wait(min(left, 1.0))

    def send(self, text):
        """Write in small chunks: Xen's serial receive ring holds only a little input."""
        data = text.encode()
        for i in range(0, len(data), self._chunk):
            self._write(data[i:i + self._chunk])
            if self._chunk_delay:
                time.sleep(self._chunk_delay)

    def run(self, command, timeout, progress=None):
        """Run COMMAND in the shell; return (exit status, output lines without Xen's).

        PROGRESS: (regex, callback); callback(match) for each line of output that matches
        while the command runs, so that long commands can show how far they got.
        """
        tag = self._tag()
        # One line: a tty echoes it whole before the shell runs any of it.
        before = "printf '@@FL-%%s@@\\n' 'B%s'; " % tag
        after = "; printf '@@FL-%%s %%d@@\\n' 'E%s' $?\n" % tag
        if len((before + command + after).encode()) > LINE_MAX:
            self._stage(command, timeout)
            self.send(before + ". " + STAGED + after)
        else:
            self.send(before + command + after)
        self.expect(r"@@FL-B%s@@\n" % re.escape(tag), timeout, what="start of '%s'" % command)
        start = self._pos
        end = r"@@FL-E%s (?P<status>\d+)@@" % re.escape(tag)
        if progress:
            end = re.compile(r"(?P<end>%s)|(?P<progress>%s)" % (end, progress[0]))
        deadline = time.monotonic() + timeout
        while True:
            m = self.expect(end, max(deadline - time.monotonic(), 0), what="end of '%s'" % command)
            if not progress or m.group("end"):
                break
            progress[1](m)
        with self._cond:
            body = self._buf[start:m.start()]
            # Drop what is consumed so a long session does not grow without bound.
            self._buf = self._buf[self._pos:]
            self._scan = max(0, self._scan - self._pos)
            self._pos = 0
        lines = [line for line in body.split("\n") if not line.startswith("(XEN)")]
        # Xen's own lines while the command ran: its reports (IOMMU faults, ...).
        self.xen_lines = [line for line in body.split("\n") if line.startswith("(XEN)")]
        if lines and lines[-1] == "":
            lines.pop()
        return int(m.group("status")), lines

    def _tag(self):
        self._seq += 1
        return "%d-%d" % (self._seq, int(time.monotonic() * 1000) % 100000)

    def _stage(self, command, timeout):
        """Write COMMAND into STAGED in lines of at most LINE_MAX bytes, each acknowledged
        by the shell before the next is sent: Xen's receive ring never holds more than one."""
        first = True
        while command or first:
            tag = self._tag()
            head = "printf %s '"
            tail = "' %s %s; printf '@@FL-%%s@@\\n' 'K%s'\n" % (">" if first else ">>", STAGED, tag)
            room = LINE_MAX - len((head + tail).encode())
            n = 0
            quoted = ""
            while n < len(command):
                q = "'\\''" if command[n] == "'" else command[n]
                if len((quoted + q).encode()) > room:
                    break
                quoted += q
                n += 1
            self.send(head + quoted + tail)
            self.expect(r"@@FL-K%s@@\n" % re.escape(tag), timeout, what="the shell to take a long command")
            command = command[n:]
            first = False

    @property
    def closed(self):
        with self._cond:
            return self._eof

    def wait_closed(self, timeout):
        """Wait until the reader saw EOF; True if it did. Close the transport only
        after this: a reader still blocked on a closed fd would read whatever
        file reuses that fd number next."""
        self._thread.join(timeout)
        return not self._thread.is_alive()
