"""dmasweep's verdict and the QEMU fault trace it reads (no testbed needed)."""

import pytest

from flushless import cli
from flushless.experiments import dmasweep
from flushless.progress import ToolError
from flushless.testbed.boot import BootConfig, Testbed


def test_ranges():
    assert dmasweep.parse_ranges("-") == set()
    assert dmasweep.parse_ranges("1a-1c,30-30") == {0x1a, 0x1b, 0x1c, 0x30}


OUT = ["control ok src=0x5 dst=0x6", "sweep 10 20", "expect_fault 10-11,15-15",
       "expect_read 12-14,16-1a", "xen_unmapped -", "result ops=11 time_us=1"]


def test_verdict_counts_against_the_device():
    # 0x10, 0x11 faulted as they must; 0x15 did not (a page table the device read);
    # 0x13 faulted although writable; 0x30 is outside the sweep; 0x16 was a write.
    faults = [(0x10, False), (0x11, False), (0x13, False), (0x30, False), (0x16, True)]
    v = dmasweep.verdict(OUT, faults)
    assert v["control_read_ok"] and v["frames"] == 11
    assert v["pagetable_frames"] == 3 and v["pagetable_frames_readable"] == 1
    assert v["pagetable_readable_list"] == ["0x15"]
    assert v["writable_frames"] == 8 and v["writable_frames_faulted"] == 1
    assert v["faulted"] == 3 and v["read_ok"] == 8


def test_verdict_needs_every_line():
    with pytest.raises(ToolError):
        dmasweep.verdict(OUT[:2], [])


def test_fault_trace_is_parsed(tmp_path):
    trace = tmp_path / "faults"
    trace.write_text("123@1.5:vtd_dmar_fault sid 0x8 fault 6 addr 0x1234000 write 0\n"
                     "noise\n"
                     "124@1.6:vtd_dmar_fault sid 0x8 fault 6 addr 0x5678010 write 1\n")
    for name in ("xen", "vmlinuz", "initrd"):
        (tmp_path / name).write_text("")
    cfg = BootConfig(xen=str(tmp_path / "xen"), kernel=str(tmp_path / "vmlinuz"),
                     initramfs=str(tmp_path / "initrd"), fault_trace=str(trace))
    tb = Testbed(cfg, str(tmp_path / "console.log"))
    assert tb.dma_faults() == [(0x1234, False), (0x5678, True)]
    assert tb.dma_faults(since=trace.stat().st_size) == []
    assert "enable=vtd_dmar_fault" in cfg.qemu_argv()


@pytest.mark.parametrize("arg", ["a b", "x;reboot", "", "=1"])
def test_bad_xen_args_are_refused(arg):
    assert cli.main(["run", "forkbench", "--xen-arg", arg]) == 2


def test_empty_xen_series_is_refused(tmp_path):
    assert cli.main(["run", "forkbench", "--xen-series", str(tmp_path)]) == 2


def test_a_sweep_that_missed_the_tables_the_audit_lists_is_flagged():
    audit = {"page_tables": 800, "seg_desc": 2, "no_type": 10, "marked": 0}
    good = {"pagetable_frames": 790, "frames": 1500, "result": {"unstable": 12, "frames": 1500}}
    assert dmasweep.against_audit(good, audit) == []
    # A kernel whose tables Xen filed as writable: the sweep expects them readable.
    misfiled = dict(good, pagetable_frames=60)
    assert "60 frames read as page tables, against 800" in dmasweep.against_audit(misfiled, audit)[0]
    # The kernel knows of more tables than the device was refused.
    assert "the kernel counts 1000 page-table pages" in dmasweep.against_audit(good, audit, kernel_tables=1000)[0]
    assert dmasweep.against_audit(good, audit, kernel_tables=300) == []
    churned = dict(good, result={"unstable": 400, "frames": 1500})
    assert "400 of 1500 frames read changed kind" in dmasweep.against_audit(churned, audit)[0]
