"""Run a workload under the guest's `measure` script and turn its output into figures.

`measure` prints Xen's perf counters, the program's output and the counters again
(testbed/guest/measure). Deltas are taken modulo 2^32: Xen's counters are 32-bit.
"""

import shlex
import time

from . import workloads
from .progress import ToolError, log

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


def split_sections(lines):
    """measure's output -> (counters before, program output, counters after, status)."""
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
    return sections["counters-before"], sections["output"], sections["counters-after"], status


def figures(name, argv, lines):
    """Build the result record of one measured run from measure's output lines."""
    before, output, after, status = split_sections(lines)
    if status != 0:
        raise ToolError("%s exited %d in dom0:\n%s" % (name, status, "\n".join("    " + x for x in output[-30:])))
    result, rows = workloads.parse_output(output)
    d = delta(parse_counters(before), parse_counters(after))
    missing = [c for c in COUNTERS if c not in d]
    if missing:
        raise ToolError("Xen has no counter %s: is patches/xen/0001 applied?" % ", ".join(missing))
    counters = {key: d[xen] for xen, key in COUNTERS.items()}
    ops = result["ops"]
    per_op = {k: (v / ops if ops else None) for k, v in counters.items()}
    per_op["time_us"] = result["time_us"]
    return {"workload": name, "args": argv, "ops": ops, "counters": counters, "per_op": per_op,
            "result": result, "rows": rows}


class Session:
    """One testbed boot, reused for every run with the same boot configuration."""

    def __init__(self, testbed):
        self.tb = testbed

    def run(self, name, argv):
        w = workloads.get(name)
        argv = w.check_args(argv)
        cmd = "measure " + " ".join(shlex.quote(a) for a in [name] + argv)
        log("dom0: %s" % cmd)
        t0 = time.monotonic()
        status, lines = self.tb.run(cmd, timeout=w.timeout(argv))
        if status == 125:
            raise ToolError("xenperfc could not read Xen's counters in dom0:\n%s" % "\n".join(lines[-10:]))
        try:
            rec = figures(name, argv, lines)
        except ValueError as e:
            raise ToolError("could not parse %s's output: %s\n%s" % (name, e, "\n".join("    " + x for x in lines[-20:])))
        rec["host_seconds"] = round(time.monotonic() - t0, 3)
        return rec
