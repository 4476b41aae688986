"""A second domain (--guest): a domU created from dom0 with xl, a workload measured in it.

dom0 starts its toolstack (testbed/guest/xenstack), creates the domU from our kernel and
dom0's own initramfs (testbed/guest/guestboot) and drives the domU's shell over its PV
console (testbed/guest/guestrun, testbed/guest/domu). A domU cannot read Xen's counters, so
dom0 reads them when the domU's measure asks (testbed/guest/domu-measure): the record has
the same shape as dom0's. Counters are Xen-wide; dom0 runs relaxed by default in these
boots (its own page-table work costs no IOMMU work then), so the difference is the domU's.
"""

import re
import shlex
import time

from ..progress import ToolError, log
from ..testbed import findings
from . import measure

KINDS = ("dom0", "pv-passthrough", "pv-disk", "pvh-hap", "pvh-shadow")
NAME = "flushless-domu"
# Linux 6.12.107 lets a domU's user space make no hypercall through privcmd (only to a device
# model's target domain); the testbed's tools in the domU (xenpvsw) need to, and Xen still
# applies the domU's own rights to every call.
DOMU_ARGS = ("xen_privcmd.unrestricted=1",)
MEM_MB = 512
BOOT_TIMEOUT = 660


def check_kind(kind):
    if kind not in KINDS:
        raise ToolError("unknown guest '%s' (%s)" % (kind, ", ".join(KINDS)))
    return kind


class Guest:
    """One domU of KIND on a booted testbed: `with Guest(tb, "pvh-hap") as g: g.run("ls")`."""

    def __init__(self, tb, kind, vcpus=1, mem_mb=MEM_MB, kernel_args=(), name=NAME):
        if check_kind(kind) == "dom0":
            raise ToolError("dom0 is not a domU")
        for a in kernel_args:
            if not re.match(r"^[A-Za-z0-9_.,:=/-]+$", a):
                raise ToolError("domU kernel argument '%s' has characters the xl config cannot take" % a)
        if not re.match(r"^[a-z][a-z0-9-]{0,30}$", name):
            raise ToolError("domU name '%s': lower-case letters, digits and '-' only" % name)
        self.tb, self.kind, self.vcpus, self.mem_mb, self.name = tb, kind, vcpus, mem_mb, name
        self.kernel_args = DOMU_ARGS + tuple(kernel_args)
        self.domid = None
        self.boot_seconds = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        # After an error or Ctrl-C dom0's shell may still be busy with the domU; the domU then
        # ends with the testbed's QEMU, which its owner stops next.
        if exc_type is None:
            self.stop()
        return False

    def start(self):
        status, lines = self.tb.run("xenstack", timeout=120)
        if status != 0 or not any(line.startswith("xenstack ok") for line in lines):
            raise ToolError("dom0's toolstack did not start:\n%s" % "\n".join("    " + x for x in lines[-20:]))
        cmd = "guestboot %s %s %d %d %s" % (self.name, self.kind, self.vcpus, self.mem_mb,
                                            shlex.quote(" ".join(self.kernel_args)))
        log("domU: creating a %s domU (%d vCPUs, %d MiB)" % (self.kind, self.vcpus, self.mem_mb))
        t0 = time.monotonic()
        status, lines = self.tb.run(cmd, timeout=BOOT_TIMEOUT)
        ok = [line for line in lines if line.startswith("guestboot ok ")]
        # Never retried. Seen: the domU that crashed while booting and xl create killed by
        # SIGSEGV, with Xen's lazy FPU switching only (docs/qemu-xsave-ts.md); a pcifront that
        # never connected, from a race in stock Linux's xenbus that testbed/linux/fixes/0001
        # closes. guestboot exits 3 for a domU that shut down or vanished, 4 for a pcifront or
        # blkfront that did not connect, 1 for the rest, 2 for bad arguments.
        if status != 0 or not ok:
            raise ToolError("the %s domU did not start (guestboot exited %d):\n%s%s"
                            % (self.kind, status, "\n".join("    " + x for x in lines[-45:]),
                               self.xen_says(lines)))
        self.domid = int(ok[-1].split()[2])
        self.boot_seconds = time.monotonic() - t0
        log("domU: %d up after %.1f s" % (self.domid, self.boot_seconds))

    def xen_says(self, lines):
        """Xen's console lines about the domain guestboot created (a triple fault shows only
        there), less its save/restore chatter: quoted for the error."""
        ids = [m.group(1) for m in map(re.compile(r"^guestboot: domain (\d+) created").match, lines) if m]
        path = getattr(self.tb, "console_log", None)
        if not ids or not path:
            return ""
        about = re.compile(r"^\(XEN\) .*\bd%s(v\d+)?\b" % ids[-1])
        with open(path, errors="replace") as f:
            said = [x.rstrip() for x in f if about.search(x) and not re.search(r"\b(save|restore)\b", x)]
        return "".join("\n    " + x for x in said[-10:])

    def run(self, command, timeout=600):
        """Run a shell command in the domU; return (status, output lines)."""
        return self.tb.run("guestrun %s %s" % (self.name, shlex.quote(command)), timeout=timeout)

    def check(self, command, timeout=600):
        status, lines = self.run(command, timeout)
        if status != 0:
            raise ToolError("domU: '%s' exited %d:\n%s" % (command, status, "\n".join("    " + x for x in lines[-40:])))
        return lines

    def stop(self):
        if self.domid is None:
            return
        # The domU's kernel log, before it goes: its findings fail the testbed's owner.
        try:
            status, lines = self.run(findings.dmesg_command(), timeout=120)
            found = findings.kernel_lines(lines)
        except ToolError as e:
            # A hung domU: it is destroyed all the same, and the read's failure is a finding.
            found = ["its kernel log could not be read: %s" % str(e).splitlines()[0]]
        self.tb.guest_findings += ["domU %s: %s" % (self.kind, x) for x in found]
        try:
            self.tb.run("xl destroy %s" % self.name, timeout=120)
        except ToolError as e:
            # The testbed itself is ended by its owner; nothing outlives it.
            log("domU: xl destroy failed: %s" % e)
        self.domid = None


class GuestSession(measure.Session):
    """measure.Session with the workload and the page-table pool in a domU; counters and audit in dom0."""

    where = "domU"

    def __init__(self, testbed, guest):
        # Xen audits a PV domain whose memory it keeps in the IOMMU only: a PVH domU's page
        # tables are not Xen's to keep apart, and a domU without a device has no IOMMU.
        super().__init__(testbed, audit=guest.kind == "pv-passthrough")
        self.guest = guest

    def shell(self, command, timeout):
        return self.guest.run(command, timeout)

    def measure_command(self, w, argv):
        inner = "domu-measure " + ("-s " if w.sync else "") + " ".join(shlex.quote(a) for a in [w.name] + argv)
        return ("guestrun %s %s; rc=$?; echo @@audit; xenpvsw audit %d || echo unavailable 1; (exit $rc)"
                % (self.guest.name, shlex.quote(inner), self.guest.domid))

    def check_status(self, status, lines):
        if status == 124:
            raise ToolError("the %s domU is gone or silent:\n%s"
                            % (self.guest.kind, "\n".join("    " + x for x in lines[-45:])))
