"""What a testbed's logs say went wrong, though nothing crashed: the harness looks at every
boot's logs when it ends (Testbed.__exit__, Guest.stop) and fails on anything found.

- Kernel lines (dom0's and each domU's dmesg, read whole at the end: the console shows only
  emergencies, `dmesg -n 1`): warnings, bad pages, oopses, lockups, RCU stalls, list
  corruption, a user-space process killed by a signal, ptcache's own errors.
- Xen's lines (the console log): failed assertions, Xen's BUG and WARN, IOMMU faults and the
  series' own error lines (patches/xen).

A test that provokes such a line on purpose says so with Testbed.allow_findings(pattern).
"""

import re

# For grep -E in the guest as well as for Python's re: no Python-only syntax.
KERNEL = (r"WARNING:|BUG:|Oops|Bad page|kernel BUG|soft lockup|hard LOCKUP|rcu: INFO|self-detected stall"
          r"|blocked for more than|general protection fault|list_(add|del) corruption|UBSAN:|refcount_t:"
          r"|page dumped because|ptcache: could not|potentially unexpected fatal signal|segfault at |traps: ")
XEN = (r"\(XEN\).*(Assertion '|Xen BUG at|Xen WARN at|FATAL|Panic on CPU|DMAR:\[|\[VT-D\].*[Ff]ault"
       r"|is in the IOMMU|IOTLB flush of .* failed)")
# What Xen prints of a DMA the IOMMU refused: dmasweep and iotlbrace provoke them, and check
# each against QEMU's own trace of the device (flushless/dmasweep.py, iotlbrace.c).
DMA_FAULT = r"\[VT-D\]DMAR:"
# Lines quoted from a domU's console (testbed/guest/guestboot, guestrun).
QUOTED = "domU| "
MAX = 40
_KERNEL = re.compile(KERNEL)
_XEN = re.compile(XEN)


def dmesg_command():
    """The shell command that prints a kernel's findings, at most MAX lines."""
    return "dmesg | grep -E '%s' | head -n %d; true" % (KERNEL, MAX)


def kernel_lines(lines):
    return [line.strip() for line in lines if _KERNEL.search(line)]


def console_lines(path):
    """Xen's findings in a console log, and the kernel findings of the domU lines it quotes."""
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if _XEN.search(line) or (line.startswith(QUOTED) and _KERNEL.search(line)):
                    out.append(line.strip())
    except OSError:
        pass
    return out


def unexpected(lines, allow=()):
    """LINES less those matching one of the ALLOW patterns, at most MAX."""
    pats = [re.compile(p) for p in allow]
    return [x[:240] for x in lines if not any(p.search(x) for p in pats)][:MAX]
