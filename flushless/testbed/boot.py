"""Boot Xen + PV dom0 under QEMU (TCG, q35, emulated VT-d) and drive dom0's shell.

Every QEMU started here is ended here: on success, on error, on Ctrl-C or SIGTERM, and
(through PR_SET_PDEATHSIG) when this process dies without a chance to clean up.
"""

import ctypes
import dataclasses
import math
import os
import re
import signal
import subprocess
import time

from .. import tools
from ..progress import ToolError, log
from . import findings, qemu
from .console import Console, ConsoleCrash, ConsoleError, ConsoleTimeout
from .qemu import CPU

# A kernel log that holds a whole run (Debian's 128 KiB could lose an early warning).
LOG_BUF = "log_buf_len=4M"
# Every boot this process made and every one retried after a stall: a retry is never silent
# (tests/conftest.py prints them and fails past what STALL_RATE explains).
BOOTS = {"boots": 0, "retried": []}
# Stalls per boot, the census's (docs/census.md, QEMU 10): 1 in 153 boots.
STALL_RATE = 1 / 153
# The emulated VT-d's trace events of its IOTLB (QEMU 10's hw/i386/trace-events): a hit, a miss
# that walked the tables and filled an entry, the emptying of a full IOTLB, and the three kinds
# of IOTLB invalidation that Xen's queued invalidations carry.
IOTLB_EVENTS = ("vtd_iotlb_page_hit", "vtd_iotlb_page_update", "vtd_iotlb_reset", "vtd_inv_desc_iotlb_pages",
                "vtd_inv_desc_iotlb_domain", "vtd_inv_desc_iotlb_global")
NVME_SLOT = 6
BOOT_TIMEOUT = 180  # seconds; a normal boot reaches the shell in 10-30 s, under -icount slower


@dataclasses.dataclass
class BootConfig:
    xen: str  # Xen ELF image
    kernel: str  # dom0 vmlinuz
    initramfs: str
    mode: str = "strict"  # dom0-iommu=strict (memory kept in sync with the IOMMU) or relaxed
    caching_mode: bool = False  # VT-d CM bit: Xen then also flushes for maps into non-present entries
    smp: int = 2
    mem_mb: int = 3072
    dom0_mem: str = "1G"
    icount: bool = False  # guest time = executed instructions (1 ns each): repeatable timing
    net: bool = False  # an e1000e NIC on QEMU user networking (the host is 10.0.2.2)
    xen_args: tuple = ()
    dom0_args: tuple = ()
    qemu_args: tuple = ()
    boot_timeout: float = BOOT_TIMEOUT
    # The kernel alone, without Xen and without an IOMMU: the native-kernel question.
    native: bool = False
    # TCG's vCPU threads: "multi" (one host thread per vCPU) or "single" (round robin).
    tcg_thread: str = "multi"
    # How Xen switches a PV vCPU's FPU state. "lazy" (Xen's default on AMD CPUs, which TCG's
    # max CPU is) leaves CR0.TS set and restores on the first #NM; QEMU's TCG raises no #NM
    # for XSAVE, XSAVEOPT and XRSTOR, so dom0's context switches then save and load another
    # vCPU's registers and processes die (docs/qemu-xsave-ts.md). "eager" (Xen's default on
    # Intel) restores at every switch and never sets TS.
    xen_fpu: str = "eager"
    # QEMU's own record of every DMA the emulated VT-d refused (its vtd_dmar_fault trace
    # event): the device side's view, independent of Xen. Set by Testbed.
    fault_trace: str = None
    # A raw image as an NVMe disk (flushless/experiments/device_io.py), at PCI 00:NVME_SLOT.0.
    nvme_image: str = None
    # The emulated VT-d's IOTLB events too, into the same trace: every translation's hit or
    # miss and every invalidation, by kind (flushless/experiments/device_io.py counts them).
    iotlb_trace: bool = False

    def __post_init__(self):
        if self.tcg_thread not in ("multi", "single"):
            raise ToolError("tcg_thread must be multi or single, not '%s'" % self.tcg_thread)
        if self.xen_fpu not in ("eager", "lazy"):
            raise ToolError("xen_fpu must be eager or lazy, not '%s'" % self.xen_fpu)
        if self.mode not in ("strict", "relaxed"):
            raise ToolError("mode must be strict or relaxed, not '%s'" % self.mode)
        for f in (self.kernel, self.initramfs) + (() if self.native else (self.xen,)):
            if not os.path.exists(f):
                raise ToolError("missing boot file %s (run 'flushless build')" % f)
            if "," in f or " " in f:
                raise ToolError("boot file path %s has a comma or space; QEMU's multiboot loader cannot take it" % f)
        if self.nvme_image and ("," in self.nvme_image or not os.path.isfile(self.nvme_image)):
            raise ToolError("NVMe image %s: not a file, or a path with a comma (QEMU's -drive cannot take it)"
                            % self.nvme_image)

    def xen_cmdline(self):
        args = ["console=com1", "com1=115200,8n1", "dom0_mem=%s,max:%s" % (self.dom0_mem, self.dom0_mem),
                "dom0_max_vcpus=%d" % self.smp, "iommu=verbose,on", "dom0-iommu=%s" % self.mode,
                # TCG's SMAP emulation kills dom0 at about 5.6 s without this (#PF in create_bounce_frame).
                "smap=0", "loglvl=all", "guest_loglvl=all", "noreboot",
                "spec-ctrl=eager-fpu=%d" % (self.xen_fpu == "eager")]
        return " ".join(args + list(self.xen_args))

    def dom0_cmdline(self):
        # Full boot messages, so that a stalled boot shows where it stopped; init lowers
        # the console level before the shell starts (testbed/guest/init). The log keeps the
        # whole run for the findings read at its end (flushless/testbed/findings.py).
        return " ".join(["console=hvc0", "earlyprintk=xen", "nokaslr", "loglevel=7", LOG_BUF]
                        + list(self.dom0_args))

    def accel(self):
        # QEMU's default is one thread per vCPU, and one thread for all under -icount.
        return "tcg" if self.tcg_thread == "multi" else "tcg,thread=single"

    def native_cmdline(self):
        return " ".join(["console=ttyS0", "nokaslr", "loglevel=7", LOG_BUF] + list(self.dom0_args))

    def qemu_argv(self):
        if self.native:
            argv = qemu.argv0() + ["-accel", self.accel(), "-machine", "q35", "-cpu", CPU, "-m", str(self.mem_mb),
                    "-smp", str(self.smp), "-nodefaults", "-display", "none", "-no-reboot", "-monitor", "none",
                    "-serial", "stdio", "-kernel", self.kernel, "-append", self.native_cmdline(),
                    "-initrd", self.initramfs]
            if self.icount:
                argv += ["-icount", "shift=0,sleep=off"]
            return argv + list(self.qemu_args)
        iommu = "intel-iommu,intremap=on,caching-mode=%s" % ("on" if self.caching_mode else "off")
        argv = qemu.argv0() + ["-accel", self.accel(), "-machine", "q35,kernel-irqchip=split", "-cpu", CPU,
                "-device", iommu, "-m", str(self.mem_mb), "-smp", str(self.smp),
                # A DMA engine behind the IOMMU for the isolation test; idle otherwise.
                "-device", "edu,dma_mask=0xffffffffffffffff",
                "-nodefaults", "-display", "none", "-no-reboot", "-monitor", "none",
                "-serial", "stdio",
                "-kernel", self.xen, "-append", self.xen_cmdline(),
                "-initrd", "%s %s,%s" % (self.kernel, self.dom0_cmdline(), self.initramfs)]
        if self.net:
            # Behind the emulated VT-d like every q35 PCI device: its DMA is translated.
            argv += ["-netdev", "user,id=net0", "-device", "e1000e,netdev=net0"]
        if self.icount:
            argv += ["-icount", "shift=0,sleep=off"]
        if self.nvme_image:
            argv += ["-drive", "file=%s,if=none,id=nvme0,format=raw" % self.nvme_image,
                     "-device", "nvme,drive=nvme0,serial=flushless,addr=0x%x" % NVME_SLOT]
        if self.fault_trace:
            argv += ["-trace", "enable=vtd_dmar_fault", "-D", self.fault_trace]
            if self.iotlb_trace:
                argv += [a for e in IOTLB_EVENTS for a in ("-trace", "enable=" + e)]
        return argv + list(self.qemu_args)


def _die_with_parent():
    # In the child before exec: if flushless dies (even by SIGKILL), the kernel kills QEMU.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    os.setsid()  # Ctrl-C reaches flushless, which then ends QEMU itself


class _Terminated(KeyboardInterrupt):
    """SIGTERM: unwinds like Ctrl-C, so every QEMU is stopped on the way out."""


class Crashed(ToolError):
    """The machine crashed under a command or while booting: a panic or an oops on its console."""


class Found(ToolError):
    """A boot ended well, but its logs hold findings (flushless/testbed/findings.py)."""


def retries_explained(boots, rate=STALL_RATE, p=0.01):
    """The most retries BOOTS boots need with probability 1 - P when each stalls at RATE
    (Poisson): more is a regression, not the testbed's known stall."""
    mean = boots * rate
    k, term = 0, math.exp(-mean)
    below = term
    while 1 - below > p:
        k += 1
        term *= mean / k
        below += term
    return k


class _BootStalled(Exception):
    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


def _on_sigterm(signum, frame):
    raise _Terminated()


class Testbed:
    """A booted testbed: `with Testbed(cfg, log_path) as tb: tb.run("ls")`."""

    __test__ = False  # not a pytest test class

    def __init__(self, cfg, console_log):
        self.cfg = cfg
        self.console_log = console_log
        self.proc = None
        self.console = None
        self.boot_seconds = None
        self.release = None
        self.boot_info = {}
        self.xen_version = None
        # What the logs may hold on purpose (allow_findings, allow_in_console), and what the
        # domUs' logs held.
        self.allowed = []
        self.allowed_spans = []
        self.guest_findings = []
        self.findings_taken = False
        if cfg.fault_trace is None:
            cfg.fault_trace = console_log + ".vtd-faults"

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, *exc):
        """Stop; after a boot that went well, fail if its logs show anything wrong (unless
        take_findings() handed them to the caller). After a failure, what the logs hold is
        logged beside it (its cause, often: a lockup, a warning)."""
        found = []
        try:
            if exc_type is None:
                found = [] if self.findings_taken else self.findings()
            elif not issubclass(exc_type, KeyboardInterrupt):
                try:
                    also = self.findings(timeout=30)
                except Exception as e:  # the failure in flight is the one to raise
                    also = ["(the logs could not be read: %s)" % e]
                if also:
                    log("testbed: the logs also show (console log %s):\n%s"
                        % (self.console_log, "\n".join("    " + x for x in also)))
        finally:
            self.stop()
        if found:
            raise Found("testbed: the logs show what went wrong (console log %s):\n%s"
                        % (self.console_log, "\n".join("    " + x for x in found)))
        return False

    def allow_findings(self, *patterns):
        """Lines this boot prints on purpose (a test's injected line): not findings."""
        self.allowed.extend(patterns)

    def console_size(self):
        if getattr(self, "_log", None):
            self._log.flush()
        try:
            return os.path.getsize(self.console_log)
        except OSError:
            return 0

    def allow_in_console(self, pattern, start, end=None):
        """Xen lines matching PATTERN between those console log offsets (a run that provokes
        them, as dmasweep and iotlbrace provoke DMA faults; END None: until
        end_console_spans()): not findings."""
        self.allowed_spans.append((pattern, start, end))

    def end_console_spans(self, at):
        """Open spans of allow_in_console() end at AT (the next run starts there)."""
        self.allowed_spans = [(p, s, at if e is None else e) for p, s, e in self.allowed_spans]

    def take_findings(self):
        """findings(), which the caller then reports: the boot's end no longer raises them."""
        self.findings_taken = True
        return self.findings()

    def findings(self, timeout=120):
        """dom0's kernel log and Xen's lines (flushless/testbed/findings.py), and what each domU's
        kernel log held when it was stopped: what went wrong though nothing crashed."""
        lines = []
        if self.proc is not None and self.proc.poll() is None and not self.console.closed:
            try:
                status, out = self.run(findings.dmesg_command(), timeout=timeout)
                lines += ["dom0: " + x for x in findings.kernel_lines(out)]
            except ToolError as e:
                lines.append("dom0: its kernel log could not be read: %s" % str(e).splitlines()[0])
        if getattr(self, "_log", None):
            self._log.flush()
        lines += findings.console_lines(self.console_log, self.allowed_spans) + self.guest_findings
        return findings.unexpected(lines, self.allowed)

    def start(self, attempts=2):
        """Boot; a boot that stalls (no panic, just silence) is tried once more, its console log
        kept as .stalled and counted in boot_attempts. The stall: dom0 stops in XENMEM_exchange
        at 1.5 s, its vCPU runnable and Xen's CPUs idle, and serial input revives it, so a
        wake-up is lost between Xen's idle loop and the emulated CPUs (1 in 153 QEMU 10 boots of
        the census, docs/census.md; not yet shown with Debian's own Xen)."""
        self.boot_attempts = 0
        while True:
            self.boot_attempts += 1
            BOOTS["boots"] += 1
            try:
                return self._start_once()
            except _BootStalled as e:
                if self.boot_attempts >= attempts:
                    raise ToolError("testbed boot failed: %s" % e.error)
                log("boot stalled (%s); console log kept in %s.stalled; booting again"
                    % (e.error.what, self.console_log))
                os.replace(self.console_log, self.console_log + ".stalled")
                BOOTS["retried"].append(self.console_log + ".stalled")

    def _start_once(self):
        if self.proc is not None and self.proc.poll() is None:
            # A second QEMU would replace self.proc and the first would outlive stop().
            raise ToolError("testbed already running (QEMU pid %d); stop() it first" % self.proc.pid)
        tools.require(qemu.argv0()[0])
        os.makedirs(os.path.dirname(os.path.abspath(self.console_log)), exist_ok=True)
        self._log = open(self.console_log, "w")
        argv = self.cfg.qemu_argv()
        self._log.write("# " + " ".join(argv) + "\n")
        self._log.flush()
        signal.signal(signal.SIGTERM, _on_sigterm)
        t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     preexec_fn=_die_with_parent, bufsize=0)
        stdout, stdin = self.proc.stdout, self.proc.stdin

        def write(data):
            stdin.write(data)
            stdin.flush()

        self.console = Console(lambda n: os.read(stdout.fileno(), n), write, log=self._log)
        if self.cfg.native:
            log("booting the kernel natively (no Xen, no IOMMU, %d vCPUs%s); console log %s"
                % (self.cfg.smp, ", icount" if self.cfg.icount else "", self.console_log))
        else:
            log("booting Xen + dom0 (%s, caching mode %s, %d vCPUs%s); console log %s"
                % (self.cfg.mode, "on" if self.cfg.caching_mode else "off", self.cfg.smp,
                   ", icount" if self.cfg.icount else "", self.console_log))
        try:
            self._wait_boot()
        except ConsoleTimeout as e:
            if not self.cfg.native:
                self.xen_debug_keys()
            self.stop()
            raise _BootStalled(e)
        except ConsoleError as e:
            err = self._qemu_stderr()
            self.stop()
            # A kernel that crashed while booting is a crash, as in run().
            raise (Crashed if isinstance(e, ConsoleCrash) else ToolError)(
                "testbed boot failed: %s%s" % (e, ("\n  QEMU said: " + err) if err else ""))
        except BaseException:
            self.stop()
            raise
        self.boot_seconds = time.monotonic() - t0
        log("dom0 shell up after %.1f s (%s)" % (self.boot_seconds, self.release))

    def xen_debug_keys(self):
        """Xen's view of a stalled boot, into the console log: every CPU's registers and stack
        ('d'), dom0's vCPUs ('0'), the domains and their event channels ('q', 'e')."""
        try:
            self.console.send("\x01\x01\x01")  # serial input to Xen
            for key in "d0qe":
                time.sleep(1)
                self.console.send(key)
            time.sleep(3)
        except OSError:
            pass

    def _wait_boot(self):
        c = self.console
        if self.cfg.native:
            m = c.expect(r"FLUSHLESS-READY (\S+)\r?\n", self.cfg.boot_timeout, what="the shell")
            self.release = m.group(1)
            return
        m = c.expect(r"\(XEN\) Xen version (\S+) \(", 60, what="Xen's banner")
        self.xen_version = m.group(1)
        c.expect(r"\(XEN\) Intel VT-d Queued Invalidation enabled", 60, what="VT-d queued invalidation")
        c.expect(r"\(XEN\) I/O virtualisation enabled", 60, what="Xen's IOMMU ('I/O virtualisation enabled')")
        m = c.expect(r"FLUSHLESS-READY (\S+)\r?\n", self.cfg.boot_timeout, what="dom0's shell")
        self.release = m.group(1)
        # insmod warnings print before READY; they are in the log. A missing privcmd shows at the first read.

    def _qemu_stderr(self):
        if not self.proc or self.proc.poll() is None:
            return ""
        try:
            err = self.proc.stderr.read().decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""
        # The reason comes first (e.g. "qemu: hardware error: ..."), register dumps after.
        return err if len(err) <= 2400 else err[:1600] + "\n  [...]\n" + err[-800:]

    def fault_trace_size(self):
        try:
            return os.path.getsize(self.cfg.fault_trace)
        except OSError:
            return 0

    def dma_faults(self, since=0):
        """[(frame, is_write)] of the DMAs the emulated VT-d refused, from QEMU's trace,
        after byte offset SINCE (fault_trace_size() taken before)."""
        out = []
        try:
            with open(self.cfg.fault_trace, errors="replace") as f:
                f.seek(since)
                for line in f:
                    m = re.search(r"vtd_dmar_fault .*addr 0x([0-9a-f]+) write (\d)", line)
                    if m:
                        out.append((int(m.group(1), 16) >> 12, m.group(2) == "1"))
        except FileNotFoundError:
            pass
        return out

    def run(self, command, timeout=600, progress=None):
        """Run a dom0 shell command; return (status, output lines). progress: see Console.run."""
        try:
            return self.console.run(command, timeout, progress)
        except ConsoleError as e:
            # A command that never ended (a domU's vCPU spinning, a lost wake-up): Xen's view of
            # every CPU and domain goes into the console log beside it.
            if isinstance(e, ConsoleTimeout) and not self.cfg.native:
                self.xen_debug_keys()
            err = self._qemu_stderr()
            msg = "testbed: '%s' failed: %s%s" % (command, e, ("\n  QEMU said: " + err) if err else "")
            raise (Crashed if isinstance(e, ConsoleCrash) else ToolError)(msg)

    def check(self, command, timeout=600):
        status, lines = self.run(command, timeout)
        if status != 0:
            raise ToolError("testbed: '%s' exited %d:\n%s" % (command, status, "\n".join("    " + x for x in lines[-40:])))
        return lines

    def stop(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            if self.console is not None:
                self.console.wait_closed(10)
            for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                try:
                    f.close()
                except OSError:
                    pass
            self.proc = None
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


