"""What a testbed's logs say went wrong, though nothing crashed: the harness looks at every
boot's logs when it ends (Testbed.__exit__, Guest.stop) and fails on anything found.

- Kernel lines (dom0's and each domU's dmesg, read whole at the end: the console shows only
  emergencies, `dmesg -n 1`): warnings, bad pages, oopses, lockups, RCU stalls, list
  corruption, a user-space process killed by a signal, the page-table pool's own errors.
- Xen's lines (the console log): failed assertions, Xen's BUG and WARN, IOMMU faults and the
  series' own error lines (patches/xen).

A test that provokes such a line on purpose says so with Testbed.allow_findings(pattern).
"""

import re

# For grep -E in the guest as well as for Python's re: no Python-only syntax.
KERNEL = (r"WARNING:|BUG:|Oops|Bad page|kernel BUG|soft lockup|hard LOCKUP|rcu: INFO|self-detected stall"
          r"|blocked for more than|general protection fault|list_(add|del) corruption|UBSAN:|refcount_t:"
          r"|page dumped because|pgtable pool: pfn|potentially unexpected fatal signal|segfault at |traps: "
          r"|Out of memory: Killed process"
          r"|page allocation failure")
XEN = (r"^\(XEN\).*(Assertion '|Xen BUG at|Xen WARN at|FATAL|Panic on CPU|DMAR:\[|\[VT-D\].*\b[Ff]ault\b"
       r"|is in the IOMMU|IOTLB flush of .* failed|domain_crash called from)")
# Lines of every boot whose cause is located outside the project, and shown harmless.
KNOWN = [
    # Xen's debug build, once at boot: QEMU's TCG CPU reports a compressed XSAVE size in
    # CPUID 0xd.1 EBX but offers no XSAVEC; Xen's check_new_xstate() WARN()s on that
    # (xen/arch/x86/xstate.c, 4.20), and uses no compressed format.
    r"^\(XEN\) Xen WARN at arch/x86/xstate\.c:769$",
    # Linux 7.3.4 with CONFIG_DEBUG_VM (the testbed's debug kernel) on Xen PV, once per boot at
    # 3-5 s, before any pool exists: the first context switch resumes the lazy MMU state of a
    # task that was never paused (xen_end_context_switch() -> __task_lazy_mmu_mode_resume(),
    # include/linux/pgtable.h:362, pause_count 0), and the next pause finds it wrapped to 255
    # (:319). Stock 7.3's lazy MMU bookkeeping on PV, not the series (which does not touch it).
    r"WARNING: \./include/linux/pgtable\.h:(319|362) at xen_(start|end)_context_switch\+",
]
# What Xen prints of a DMA the IOMMU refused: dmasweep and iotlbrace provoke them, and check
# each against QEMU's own trace of the device (flushless/experiments/dmasweep.py, iotlbrace.c).
DMA_FAULT = r"\[VT-D\]DMAR:"
# Lines quoted from a domU's console (testbed/guest/guestboot, guestrun).
QUOTED = "domU| "
MAX = 40
# Lines the guest prints before the allowed ones are taken out: room for many allowed ones.
READ_MAX = 1000
_KERNEL = re.compile(KERNEL)
_XEN = re.compile(XEN)


# The dmesg command's first line: how many lines the log held (0: it was not read).
READ = "@@dmesg-lines "


def dmesg_command():
    """The shell command that prints how many lines the kernel's log holds, then its
    findings, at most READ_MAX lines."""
    return ("dmesg >/tmp/dmesg.all; echo \"%s$(grep -c . /tmp/dmesg.all)\"; grep -E '%s' /tmp/dmesg.all | head -n %d; "
            "rm -f /tmp/dmesg.all; true" % (READ, KERNEL, READ_MAX))


def kernel_lines(lines):
    """The findings in the dmesg command's output; one saying so if the log was not read."""
    read = [line for line in lines if line.startswith(READ)]
    if not read or not read[0][len(READ):].strip().isdigit() or not int(read[0][len(READ):]):
        return ["its kernel log could not be read: %s" % " | ".join(lines[-3:])]
    return [line.strip() for line in lines if _KERNEL.search(line)]


def in_dmesg(tb, allow=()):
    """The findings in a booted testbed's kernel log now, less ALLOW and KNOWN ones."""
    return unexpected(kernel_lines(tb.check(dmesg_command())), allow)


def console_lines(path, allow_spans=()):
    """Xen's findings in a console log, and the kernel findings of the domU lines it quotes;
    less those that match a pattern of ALLOW_SPANS [(pattern, start, end)] between those byte
    offsets of the log (the run that provoked them; end None: to the end)."""
    spans = [(re.compile(p), start, end) for p, start, end in allow_spans]
    out = []
    try:
        with open(path, "rb") as f:
            pos = 0
            for raw in f:
                line = raw.decode(errors="replace")
                at, pos = pos, pos + len(raw)
                if not (_XEN.search(line) or (line.startswith(QUOTED) and _KERNEL.search(line))):
                    continue
                if any(p.search(line) and start <= at and (end is None or at < end) for p, start, end in spans):
                    continue
                out.append(line.strip())
    except OSError as e:
        out.append("the console log could not be read: %s" % e)
    return out


def unexpected(lines, allow=()):
    """LINES less those matching one of the ALLOW patterns or a KNOWN one, at most MAX."""
    pats = [re.compile(p) for p in list(allow) + KNOWN]
    return [x[:240] for x in lines if not any(p.search(x) for p in pats)][:MAX]
