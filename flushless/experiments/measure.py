"""Run a workload under the guest's `measure` script and turn its output into figures.

`measure` (testbed/guest/measure) prints Xen's perf counters and the page-table pool's
counters (patches/linux, in debugfs), the program's output, the same again, and Xen's audit of
the IOMMU invariant. Deltas are taken modulo 2^32: Xen's counters are 32-bit. A Session also
sets the pool's cap in dom0.
"""

import shlex
import time

from ..progress import ToolError, log
from ..testbed import findings
from . import dmasweep, workloads

# Xen perf counter (patches/xen/0001) -> key in flushless's results
COUNTERS = {
    "pv_iommu_unmap_type": "iommu_unmap_type",
    "pv_iommu_map_type": "iommu_map_type",
    "pv_iommu_unmap_final_put": "iommu_unmap_final_put",
    "vtd_qi_iotlb_inv": "qi_iotlb_inv",
    "vtd_qi_iotlb_inv_skipped": "qi_iotlb_inv_skipped",
}


def parse_counters(lines):
    """'NAME VALUE' lines (NAME may hold spaces) -> {NAME: int}."""
    out = {}
    for line in lines:
        name, _, value = line.rpartition(" ")
        if not name or not value.isdigit():
            raise ValueError("bad counter line '%s'" % line)
        out[name] = int(value)
    return out


def delta(before, after):
    return {k: (after[k] - before.get(k, 0)) % 2 ** 32 for k in after}


# Counters of the no-DMA marks (patches/xen/0002); absent from a stock Xen.
NO_DMA_COUNTERS = {
    "pv_iommu_map_skipped": "iommu_map_skipped",
    "pv_no_dma_mark": "no_dma_mark",
    "pv_no_dma_unmark": "no_dma_unmark",
    "pv_no_dma_refused": "no_dma_refused",
    # The IOTLB flushes the marks of one mmuext_op shared (patches/xen/0003).
    "pv_no_dma_flush": "no_dma_flush",
}

# Upstream's counters of IOMMU superpage work: a map that completes a 2 MiB run coalesces it
# (and is flushed, not skipped); the next unmap in that run shatters it again.
SUPERPAGE_COUNTERS = {
    "IOMMU page table shatters": "iommu_pt_shatters",
    "IOMMU page table coalesces": "iommu_pt_coalesces",
}
# The xen-only design's batched pin (patches/xen-only): pages its first pass took out of the
# IOMMU, the domain-wide flushes it issued, pages it put back after a failed or partial pin.
PIN_BATCH_COUNTERS = {
    "pv_pin_batch_unmap": "pin_batch_unmap",
    "pv_pin_batch_flush": "pin_batch_flush",
    "pv_pin_batch_remap": "pin_batch_remap",
}

# Xen's own counters of the guest's page-table updates: every hypercall (the array's sum),
# mmu_update and mmuext_op calls and their entries, and PTE writes trapped and emulated.
PV_COUNTERS = {
    "hypercalls": "hypercalls",
    "calls to mmu_update": "mmu_update_calls",
    "page updates": "mmu_page_updates",
    "calls to mmuext_op": "mmuext_op_calls",
    "mmuext ops": "mmuext_ops",
    "writable pt emulations": "ptwr_emulations",
}
# Xen's shadow-paging work (a PVH domU with hap=0, seed 002) and every guest's
# VM exits: what a fork costs Xen under shadow against nested paging.
SHADOW_COUNTERS = {
    "vmexits": "vmexits",
    "calls to shadow_fault": "shadow_faults",
    "shadow_fault fixed fault": "shadow_faults_fixed",
    "shadow_fault emulates a write": "shadow_emulated_writes",
    "shadow_fault really guest fault": "shadow_guest_faults",
    "calls to shadow_alloc": "shadow_allocs",
    "shadow recycles old shadows": "shadow_recycles_old",
    "shadow recycles in-use shadows": "shadow_recycles_in_use",
    "shadow_alloc flushed TLBs": "shadow_alloc_tlb_flushes",
    "shadow writeable brute-force": "shadow_write_brute_force",
    "shadow rm-mappings brute-force": "shadow_rm_mappings_brute_force",
    "shadow unshadows a page": "shadow_unshadows",
    "shadow unshadows for fork/exit": "shadow_unshadows_fork_exit",
    "shadow removes write access": "shadow_write_access_removals",
    "calls to shadow_validate_gl1e": "shadow_validate_gl1e",
}
OPTIONAL_COUNTERS = dict(NO_DMA_COUNTERS, **SUPERPAGE_COUNTERS, **PIN_BATCH_COUNTERS, **PV_COUNTERS,
                         **SHADOW_COUNTERS)

# The pool's files that are gauges, not counters: reported as after-values.
POOL_GAUGES = ("pages", "max_pages")


def split_sections(lines):
    """measure's output -> ({section: lines}, status). Required: counters, output."""
    sections, cur, status = {}, None, None
    for line in lines:
        if line.startswith("@@status "):
            status = int(line.split()[1])
            cur = None
        elif line.startswith("@@"):
            cur = line[2:]
            sections[cur] = []
        elif cur is not None:
            sections[cur].append(line)
    for name in ("counters-before", "output", "counters-after"):
        if name not in sections:
            raise ValueError("measure printed no '%s' section" % name)
    if status is None:
        raise ValueError("measure printed no status")
    return sections, status


def parse_stats(lines):
    """'name value' lines where value may be a word."""
    out = {}
    for line in lines:
        name, _, value = line.partition(" ")
        out[name] = int(value) if value.lstrip("-").isdigit() else value
    return out


def pool_figures(before, after):
    """The pool's files: counters as deltas over the run, gauges as their after-values, and the
    declared tables in use (declared, less undeclared, less what the pool or the leak holds)."""
    b, a = parse_stats(before), parse_stats(after)
    out = {}
    for k, v in a.items():
        if isinstance(v, int) and k not in POOL_GAUGES:
            out[k] = v - b.get(k, 0)
        else:
            out[k] = v
    out["in_use"] = pool_in_use(a)
    return out


def pool_in_use(stats):
    """Declared tables in use now, from the pool's counters (pages are declared by a miss and
    undeclared when they leave; leaked ones stay declared, out of use)."""
    return stats["marked"] - stats["unmarked"] - stats["leaked"] - stats["pages"]


# A check's exit status when it found what it looks for (workloads.Workload.finds): the
# record is built, and the run fails with it (VerdictError).
FOUND = 3


class VerdictError(ToolError):
    """A run that went through and found isolation broken; REC holds its figures (a test of a
    broken shape reads them)."""

    def __init__(self, message, rec):
        super().__init__(message)
        self.rec = rec


def bad_verdicts(rec, audit=True):
    """What in REC says isolation failed: Xen's audit (and its absence, when AUDIT) and the
    checks' own verdicts."""
    out = []
    if "invariant_violations" not in rec:
        if audit:
            out.append("Xen's audit was unavailable (xenpvsw audit failed)")
    elif rec["invariant_violations"]:
        out.append("Xen's audit found %d frames against the IOMMU invariant" % rec["invariant_violations"])
    if rec.get("bad_states"):
        out.append("swrace ended %d rounds in a bad state" % rec["bad_states"])
    if rec.get("bad_reads"):
        out.append("iotlbrace's device read a page table %d times" % rec["bad_reads"])
    if rec["workload"] == "dmasweep":
        if not rec["control_read_ok"]:
            out.append("dmasweep's control read failed: the device check sees nothing")
        if rec["pagetable_frames_readable"]:
            out.append("the device read %d page-table frames (%s)" % (rec["pagetable_frames_readable"],
                                                                     ", ".join(rec["pagetable_readable_list"])))
        if rec["writable_frames_faulted"]:
            out.append("the device was refused %d writable frames" % rec["writable_frames_faulted"])
    return out


def figures(name, argv, lines):
    """Build the result record of one measured run from measure's output lines."""
    sections, status = split_sections(lines)
    output = sections["output"]
    if status != 0 and not (status == FOUND and workloads.get(name).finds):
        raise ToolError("%s exited %d in dom0:\n%s" % (name, status, "\n".join("    " + x for x in output[-30:])))
    result, rows = workloads.parse_output(output)
    d = delta(parse_counters(sections["counters-before"]), parse_counters(sections["counters-after"]))
    missing = [c for c in COUNTERS if c not in d]
    if missing:
        raise ToolError("Xen has no counter %s: is patches/xen/0001 applied?" % ", ".join(missing))
    counters = {key: d[xen] for xen, key in COUNTERS.items()}
    counters.update({key: d[xen] for xen, key in OPTIONAL_COUNTERS.items() if xen in d})
    ops = result["ops"]
    per_op = {k: (v / ops if ops else None) for k, v in counters.items()}
    per_op["time_us"] = result["time_us"]
    rec = {"workload": name, "args": argv, "ops": ops, "counters": counters, "per_op": per_op,
           "result": result, "rows": rows}
    for key in workloads.get(name).lift:
        rec[key] = result.get(key)
    if "pool-before" in sections and "pool-after" in sections:
        rec["pool"] = pool_figures(sections["pool-before"], sections["pool-after"])
    audit = parse_stats(sections.get("audit", []))
    if "violations" in audit:
        rec["audit"] = audit
        rec["invariant_violations"] = audit["violations"]
    return rec


POOL_DIR = "/sys/kernel/debug/xen_pgtable_pool"
# The pool's cap by default (xen_pgtable_pool=), what "cache on" writes back.
POOL_DEFAULT_CAP = 4096
# What a run may set: the cap (0 stops the pool); the study's fixed policy (testbed/linux).
POOL_TUNABLES = ("max_pages", "paper_ratio")


def cache_settings(on):
    """The pool's settings for the cache switched on or off at run time."""
    return {"max_pages": POOL_DEFAULT_CAP if on else 0}


class Session:
    """One testbed boot, reused for every run with the same boot configuration. A run whose
    figures say isolation failed raises VerdictError; AUDIT=False for a Xen without the
    audit (patches/xen 0003)."""

    def __init__(self, testbed, audit=True):
        self.tb = testbed
        self.audit = audit

    # Where the workload runs: dom0 here, a domU in guests.GuestSession.
    where = "dom0"

    def shell(self, command, timeout):
        """Run COMMAND where the workload runs; return (status, output lines)."""
        return self.tb.run(command, timeout=timeout)

    def measure_command(self, w, argv):
        return "measure " + ("-s " if w.sync else "") + " ".join(shlex.quote(a) for a in [w.name] + argv)

    def check_status(self, status, lines):
        """Raise if the run failed in a way the output cannot tell."""

    def has_pool(self):
        status, _ = self.shell("test -d %s" % POOL_DIR, timeout=30)
        return status == 0

    def set_aslr(self, on):
        """Switch user address-space randomisation where the workload runs. With it, each
        process's layout (and so how many page tables it needs) is drawn anew."""
        status, lines = self.shell("echo %d > /proc/sys/kernel/randomize_va_space" % (2 if on else 0), timeout=30)
        if status != 0:
            raise ToolError("%s: could not set randomize_va_space: %s" % (self.where, " ".join(lines[-5:])))

    def pool_set(self, name, value):
        """Write one of the pool's settings; return (ok, message). The kernel refuses bad values."""
        if name not in POOL_TUNABLES:
            raise ToolError("no pool setting '%s' (%s)" % (name, ", ".join(POOL_TUNABLES)))
        status, lines = self.shell("echo %s > %s/%s" % (shlex.quote(str(value)), POOL_DIR, name), timeout=60)
        return status == 0, " ".join(lines)

    def pool_get(self, name):
        status, lines = self.shell("cat %s/%s" % (POOL_DIR, name), timeout=30)
        if status != 0 or not lines:
            raise ToolError("%s: could not read the pool's %s: %s" % (self.where, name, " ".join(lines[-5:])))
        return lines[0]

    def pool_stats(self):
        """{file: value} of every file of the pool's debugfs directory."""
        status, lines = self.shell("for f in %s/*; do read -r v <$f; echo \"${f##*/} $v\"; done" % POOL_DIR,
                                   timeout=30)
        if status != 0:
            raise ToolError("%s: could not read the pool's files: %s" % (self.where, " ".join(lines[-5:])))
        return parse_stats(lines)

    def configure_pool(self, settings):
        """Apply {setting: value}; a refused value is an error."""
        if settings and not self.has_pool():
            raise ToolError("the %s kernel has no page-table pool (%s): use --kernel built, with Xen's "
                            "series and an IOMMU in sync" % (self.where, POOL_DIR))
        for name, value in settings.items():
            ok, msg = self.pool_set(name, value)
            if not ok:
                raise ToolError("%s refused the pool's %s=%s: %s" % (self.where, name, value, msg))

    def run(self, name, argv, timeout=None):
        """Measure workload NAME with ARGV; TIMEOUT (seconds) overrides the workload's own."""
        w = workloads.get(name)
        argv = w.check_args(argv)
        cmd = self.measure_command(w, argv)
        log("%s: %s" % (self.where, cmd))
        t0 = time.monotonic()
        trace_at = self.tb.fault_trace_size()
        console_at = self.tb.console_size()
        self.tb.end_console_spans(console_at)
        if w.dma_faults:
            # The faults this run provokes, each checked against QEMU's trace of the device;
            # Xen may print the last of them after the run, until the next run starts.
            self.tb.allow_in_console(findings.DMA_FAULT, console_at, None)
        status, lines = self.tb.run(cmd, timeout=timeout or w.timeout(argv))
        if status == 125:
            raise ToolError("xenperfc could not read Xen's counters in dom0:\n%s" % "\n".join(lines[-10:]))
        self.check_status(status, lines)
        try:
            rec = figures(name, argv, lines)
        except ValueError as e:
            raise ToolError("could not parse %s's output: %s\n%s" % (name, e, "\n".join("    " + x for x in lines[-20:])))
        if name == "dmasweep":
            rec.update(dmasweep.verdict(lines, self.tb.dma_faults(trace_at)))
        rec["host_seconds"] = round(time.monotonic() - t0, 3)
        bad = bad_verdicts(rec, self.audit)
        if bad:
            raise VerdictError("%s: %s: %s" % (self.where, name, "; ".join(bad)), rec)
        return rec
