"""dmasweep's verdict: what the device saw, against what Xen says each frame is.

The guest program (testbed/guest/dmasweep.c) lets QEMU's edu device read every frame of
dom0's RAM and prints which frames Xen says must fault (page tables of every level,
descriptor pages, untyped or marked pages) and which must be readable (writable, not
marked). Which reads the emulated VT-d refused comes from QEMU's own trace
(vtd_dmar_fault), so the verdict does not rest on Xen's word about its IOMMU.
"""

from .progress import ToolError


def parse_ranges(text):
    """'1a-1f,30-30' -> set of frames; '-' -> empty."""
    out = set()
    if text.strip() in ("", "-"):
        return out
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo, 16), int(hi, 16) + 1))
    return out


def verdict(lines, faults):
    """LINES: the program's output; FAULTS: [(frame, is_write)] from QEMU's trace during
    the run. Returns the figures the issue asks for."""
    fields = {}
    for line in lines:
        key, _, rest = line.partition(" ")
        if key in ("control", "sweep", "expect_fault", "expect_read", "xen_unmapped"):
            fields[key] = rest
    missing = [k for k in ("control", "sweep", "expect_fault", "expect_read") if k not in fields]
    if missing:
        raise ToolError("dmasweep printed no %s line" % ", ".join(missing))
    lo, hi = (int(x, 16) for x in fields["sweep"].split())
    faulted = {f for f, write in faults if not write and lo <= f <= hi}
    must_fault = parse_ranges(fields["expect_fault"])
    must_read = parse_ranges(fields["expect_read"])
    # Writable pages Xen itself keeps out of the IOMMU: not reachable, so not a leak, but
    # not what the XSA-288 rule leads one to expect either; shown apart.
    unmapped = parse_ranges(fields.get("xen_unmapped", "-"))
    return {
        "control_read_ok": fields["control"].startswith("ok"),
        "frames": len(must_fault) + len(must_read),
        "read_ok": len((must_fault | must_read) - faulted),
        "faulted": len((must_fault | must_read) & faulted),
        "pagetable_frames": len(must_fault),
        "writable_frames": len(must_read),
        "pagetable_frames_readable": len(must_fault - faulted),
        "pagetable_readable_list": ["%#x" % f for f in sorted(must_fault - faulted)[:20]],
        "writable_frames_faulted": len(must_read & faulted),
        "writable_faulted_list": ["%#x" % f for f in sorted(must_read & faulted)[:20]],
        "xen_unmapped_writable_frames": len(unmapped),
        "xen_unmapped_writable_readable": len(unmapped - faulted),
        "sweep_first_frame": lo,
        "sweep_last_frame": hi,
    }
