"""dmasweep's verdict: what the device saw, against what Xen says each frame is.

The guest program (testbed/guest/dmasweep.c) lets QEMU's edu device read every frame of
dom0's RAM and prints which frames Xen says must fault (page tables of every level,
descriptor pages, untyped or marked pages) and which must be readable (writable, not
marked). Which reads the emulated VT-d refused comes from QEMU's own trace
(vtd_dmar_fault), so the verdict does not rest on Xen's word about its IOMMU.
"""

from ..progress import ToolError


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
    the run. Returns its figures."""
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


def against_audit(rec, audit, kernel_tables=None, max_unstable=0.1):
    """What is off in a sweep REC against Xen's audit summary AUDIT (`xenpvsw audit DOMID`,
    read just after): every page table the audit lists was read as one (within 20 %: tables
    come and go during the sweep), and at most MAX_UNSTABLE of the frames read changed kind while
    it ran (they are left out of the verdict). KERNEL_TABLES, the kernel's own count of its
    page-table pages (PageTables in /proc/meminfo, 4 KiB each): Xen's kinds are no check of
    themselves; the frames the device must not read can be no fewer than the tables the kernel
    knows of."""
    bad = []
    if kernel_tables is not None and rec["pagetable_frames"] < 0.8 * kernel_tables:
        bad.append("%d frames read as page tables, but the kernel counts %d page-table pages"
                   % (rec["pagetable_frames"], kernel_tables))
    tables = audit["page_tables"]
    faulting = tables + audit["seg_desc"] + audit["no_type"] + audit["marked"]
    if not 0.8 * tables <= rec["pagetable_frames"] <= 1.2 * faulting:
        bad.append("%d frames read as page tables, against %d page tables (%d frames that must fault) in "
                   "Xen's audit" % (rec["pagetable_frames"], tables, faulting))
    # Of the frames read (rec["frames"] counts those left in the verdict).
    unstable, read = rec["result"]["unstable"], rec["result"]["frames"]
    if unstable > max_unstable * read:
        bad.append("%d of %d frames read changed kind during the sweep" % (unstable, read))
    return bad
