"""The findings read from a boot's logs when it ends (flushless/testbed/findings.py): each kind of
line is found, the harmless ones are not, a test's own provoked faults can be allowed."""

import re
import subprocess

from flushless.testbed import findings

CONSOLE = """\
(XEN) Xen version 4.20.3 (Debian 4.20.3+127-1) debug=n
[    2.174332] PCI: Using host bridge windows from ACPI; if necessary, use "pci=nocrs" and report a bug
(XEN) Assertion 'page_get_owner(pg) == d' failed at arch/x86/mm.c:3012
(XEN) [VT-D]DMAR:[DMA Read] Request device [0000:00:03.0] fault addr 7f2000
(XEN) d1: IOTLB flush of 16 marked pages failed: -5
(XEN) mm.c:1234:d0v1 Bad type (saw 1000000000000002 != exp 2000000000000000) for mfn 1234
domU| [   12.3] WARNING: CPU: 0 PID: 77 at mm/page_alloc.c:4567 __alloc_pages+0x1/0x2
domU| xen: pgtable pool: Xen refuses declarations: pool off
@@FL-E3-12345 0@@
"""

DMESG = """\
[    0.000000] Linux version 6.12.107
[    4.684104] RAS: Correctable Errors collector initialized.
[   20.1] BUG: Bad page state in process forkbench  pfn:1a2b3
[   21.0] rcu: INFO: rcu_sched self-detected stall on CPU
[   22.0] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [churn:99]
[   23.0] hello[120]: segfault at 8 ip 0000000000401000 sp 00007ffc error 4 in hello
[   24.0] list_add corruption. prev->next should be next
"""


def test_console_lines_find_xens_errors_and_the_domus_warnings(tmp_path):
    log = tmp_path / "console.log"
    log.write_text(CONSOLE)
    found = findings.console_lines(str(log))
    assert found == [
        "(XEN) Assertion 'page_get_owner(pg) == d' failed at arch/x86/mm.c:3012",
        "(XEN) [VT-D]DMAR:[DMA Read] Request device [0000:00:03.0] fault addr 7f2000",
        "(XEN) d1: IOTLB flush of 16 marked pages failed: -5",
        "domU| [   12.3] WARNING: CPU: 0 PID: 77 at mm/page_alloc.c:4567 __alloc_pages+0x1/0x2",
    ], found
    # A provoked DMA fault can be allowed; nothing else goes with it.
    left = findings.unexpected(found, [findings.DMA_FAULT])
    assert len(left) == 3 and not any("DMAR" in x for x in left)
    # In the console log, only between the offsets of the run that provoked it.
    at = CONSOLE.index("(XEN) [VT-D]DMAR:")
    assert not any("DMAR" in x for x in findings.console_lines(str(log), [(findings.DMA_FAULT, at, at + 1)]))
    assert any("DMAR" in x for x in findings.console_lines(str(log), [(findings.DMA_FAULT, 0, at)]))
    assert any("DMAR" in x for x in findings.console_lines(str(log), [(findings.DMA_FAULT, at + 1, None)]))


def test_kernel_lines_find_bad_pages_stalls_lockups_deaths_and_corruption():
    found = findings.kernel_lines([findings.READ + "7"] + DMESG.splitlines())
    assert [x.split("] ", 1)[1][:12] for x in found] == [
        "BUG: Bad pag", "rcu: INFO: r", "watchdog: BU", "hello[120]: ", "list_add cor"], found


def test_a_kernel_log_that_was_not_read_is_a_finding():
    # dmesg failed (no line count) or printed nothing: no log is no clean log.
    for lines in ([], ["sh: dmesg: not found"], [findings.READ + "0"]):
        found = findings.kernel_lines(lines)
        assert len(found) == 1 and "could not be read" in found[0], (lines, found)


def test_an_unreadable_console_log_is_a_finding(tmp_path):
    found = findings.console_lines(str(tmp_path / "missing.log"))
    assert len(found) == 1 and "could not be read" in found[0], found


def test_the_dmesg_command_greps_what_python_matches(tmp_path):
    """The pattern goes to grep -E in the guest: it must select the same lines there."""
    (tmp_path / "dmesg").write_text(DMESG)
    cmd = findings.dmesg_command().replace("dmesg >", "cat %s >" % (tmp_path / "dmesg"))
    cmd = cmd.replace("/tmp/dmesg.all", str(tmp_path / "dmesg.all"))
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == findings.READ + "7", out
    assert out[1:] == [x for x in DMESG.splitlines() if re.search(findings.KERNEL, x)] and len(out) == 6, out
    assert findings.kernel_lines(out) == [x.strip() for x in out[1:]]
