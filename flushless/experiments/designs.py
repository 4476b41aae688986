"""Ways to remove the flushes, side by side, and the stock references they are measured against.

A design is the Xen series, the dom0 kernel and the cache setting the testbed boots it with:

  stock     Xen with the counters (patches/xen: its marks stay unused) and the vanilla kernel
            (linux-source-7.3 without the series), in strict or relaxed mode
  paper     the study's design: patches/xen and the kernel with patches/linux, the pool on
  xen-only  the guest unchanged (vanilla); Xen batches the IOTLB flush of a page-table pin
            (patches/xen-only on top of patches/xen)

Retired designs keep their last row in results/retired/ with the reason (guest-only: pool pages
kept read-only page tables, slower than stock; last measured on Linux 6.12).
"""

import dataclasses
import sys

from ..progress import ToolError
from ..testbed import build, qemu
from . import measure, workloads
from .workloads import UsageError


@dataclasses.dataclass(frozen=True)
class Design:
    name: str
    what: str
    kernel: str  # build.Parts kernel kind
    extra_xen: str = None  # a patches/ folder applied on top of patches/xen
    cache: str = None  # the page-table pool switched on before the workload
    xen_change: bool = False
    guest_change: bool = False
    removes_flushes: bool = False  # claims at most 0.05 invalidations per operation once warm
    dom0_args: tuple = ()  # added to dom0's command line

    def xen_series(self):
        series = build.patches("xen")
        if self.extra_xen:
            series = series + build.patches(self.extra_xen)
        return series

    def parts(self):
        return build.Parts(self.kernel, xen_series=self.xen_series())


DESIGNS = {d.name: d for d in (
    Design("stock", "unchanged Xen and guest", "vanilla"),
    Design("paper", "guest page-table pool, pages declared no-DMA to Xen", "built",
           cache="on", xen_change=True, guest_change=True, removes_flushes=True),
    Design("xen-only", "Xen unmaps a pinned tree's writable pages first and flushes the IOTLB once",
           "vanilla", extra_xen="xen-only", xen_change=True),
)}


def get(name):
    if name not in DESIGNS:
        raise UsageError("unknown design '%s' (one of %s)" % (name, ", ".join(DESIGNS)))
    return DESIGNS[name]


# --- side by side: `flushless reproduce` stage 'designs' ----------------------------------

# Rows of results/designs.json: (row, design, dom0-iommu mode).
ROWS = (("stock strict", "stock", "strict"), ("stock relaxed", "stock", "relaxed"),
        ("paper", "paper", "strict"), ("xen-only", "xen-only", "strict"))
RETIRED = ("guest-only",)

# Per-operation counts kept in the rows (measure's keys).
COUNT_KEYS = ("qi_iotlb_inv", "pin_batch_flush", "iommu_unmap_type", "iommu_map_type", "hypercalls",
              "mmu_update_calls", "mmuext_op_calls", "ptwr_emulations")


@dataclasses.dataclass(frozen=True)
class Plan:
    lat_rounds: int  # -icount rounds of lat_proc fork, exec and shell
    lat_n: dict
    lat_warmup: int
    swrace_rounds: int
    sweep_frames: int  # dmasweep --max-frames
    forkbench: tuple  # (label, argv) runs counted on 2 vCPUs


FORKBENCH = (("fork+exit", ["--n", "200", "--warmup", "100"]),
             ("fork+exec", ["--n", "100", "--exec", "--warmup", "100"]),
             ("fork+exit 64 MiB", ["--n", "30", "--touch-mb", "64", "--warmup", "20"]))
PLANS = {
    "quick": Plan(1, {"fork": 100, "exec": 50, "shell": 20}, 20, 1000, 300,
                  tuple((label, argv[:1] + [str(int(argv[1]) // 2)] + argv[2:]) for label, argv in FORKBENCH)),
    "default": Plan(3, {"fork": 200, "exec": 100, "shell": 40}, 50, 5000, 1500, FORKBENCH),
    "full": Plan(5, {"fork": 1000, "exec": 500, "shell": 200}, 100, 20000, 0, FORKBENCH),
}


def _per_op(rec):
    return {k: rec["per_op"].get(k, 0.0) for k in COUNT_KEYS}


def _median(xs):
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def _audited(rec, out):
    """REC, its audit's violations added to OUT's (Xen's audit runs after every workload)."""
    out["invariant_violations"] = out.get("invariant_violations", 0) + rec["invariant_violations"]
    return rec


def _lat_proc(session, plan, out):
    """-icount lat_proc: {op: per-op counts + 'instructions' (median over rounds, 1 ns each)}."""
    runs = {op: [] for op in ("fork", "exec", "shell")}
    for r in range(plan.lat_rounds):
        for op in runs:
            rec = session.run("lat_proc", ["--what", op, "--n", str(plan.lat_n[op]),
                                           "--warmup", str(plan.lat_warmup)])
            runs[op].append(_audited(rec, out))
    out = {}
    for op, recs in runs.items():
        counts = {k: _median([_per_op(r)[k] for r in recs]) for k in COUNT_KEYS}
        counts["instructions"] = round(1000 * _median([r["result"]["median_us"] for r in recs]))
        out[op] = counts
    return out


def measure_row(row, name, mode, plan, boot, progress):
    """Two boots of one design: counts and swrace on 2 vCPUs; -icount on 1 vCPU."""
    d = DESIGNS[name]
    parts = d.parts().ensure()
    out = {"design": row, "mode": mode, "xen_change": d.xen_change, "guest_change": d.guest_change,
           "removes_flushes": d.removes_flushes, "what": d.what, "kernel": d.kernel,
           "xen_series": [p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] for p in d.xen_series()]}
    settings = measure.cache_settings(True) if d.cache == "on" else {}
    slug = row.replace(" ", "-")
    progress("%s: counts and swrace, 2 vCPUs" % row)
    with boot("designs-%s-counts" % slug, parts, mode=mode, smp=2, dom0_args=d.dom0_args) as tb:
        tb.booted()
        session = measure.Session(tb)
        session.configure_pool(settings)
        out["forkbench"] = {}
        for label, argv in plan.forkbench:
            out["forkbench"][label] = _per_op(_audited(session.run("forkbench", argv), out))
        if mode == "strict":
            rec = _audited(session.run("swrace", ["--rounds", str(plan.swrace_rounds), "--seconds", "0"]), out)
            out["swrace"] = {"rounds": rec["rounds"], "bad_states": rec["bad_states"],
                             "pintree_ok": next(r["ok"] for r in rec["rows"] if r["op"] == "pintree")}
    progress("%s: lat_proc fork, exec, shell under -icount, 1 vCPU, then dmasweep" % row)
    with boot("designs-%s-icount" % slug, parts, mode=mode, smp=1, icount=True, dom0_args=d.dom0_args) as tb:
        tb.booted()
        session = measure.Session(tb)
        session.configure_pool(settings)
        out["per_op"] = _lat_proc(session, plan, out)
        if mode == "strict":
            rec = _audited(session.run("dmasweep", ["--max-frames", str(plan.sweep_frames)]), out)
            out["dmasweep"] = {k: rec[k] for k in ("pagetable_frames", "pagetable_frames_readable",
                                                   "writable_frames_faulted", "control_read_ok")}
    out["isolation"] = isolation_verdict(out)
    return out


def isolation_verdict(row):
    """Which isolation tests this row's own runs passed (relaxed mode has no DMA protection)."""
    if row["mode"] != "strict":
        return "none: no DMA protection"
    passed = []
    sw = row.get("swrace")
    if sw and sw["bad_states"] == 0 and sw["rounds"] > 0:
        passed.append("swrace %d rounds" % sw["rounds"])
    ds = row.get("dmasweep")
    if ds and ds["control_read_ok"] and not ds["pagetable_frames_readable"] and not ds["writable_frames_faulted"]:
        passed.append("dmasweep %d tables unreadable" % ds["pagetable_frames"])
    if row.get("invariant_violations") == 0:
        passed.append("audit")
    if len(passed) < 3:
        # Session.run raises on a bad verdict; this is a run that never gave one.
        raise ToolError("designs: %s: isolation not shown (passed only: %s)" % (row["design"], ", ".join(passed)
                                                                                  or "nothing"))
    return ", ".join(passed)


HOST_RUNS = 5


def calibration_runs(plan, boot, progress):
    """The model's rate: the same lat_proc natively on the host and in the vanilla kernel booted
    without Xen under -icount (instructions), median per operation."""
    progress("calibration: lat_proc on the host and in vanilla Linux without Xen under -icount")
    argv = {op: ["--what", op, "--n", str(4 * plan.lat_n[op]), "--warmup", str(plan.lat_warmup)]
            for op in ("fork", "exec", "shell")}
    # The host is shared: of five runs' medians the smallest is the least disturbed.
    host = workloads.run_native([("lat_proc", argv[op]) for op in argv for _ in range(HOST_RUNS)])
    out = {}
    for i, op in enumerate(argv):
        runs = [rec["result"]["median_us"] for rec in host[HOST_RUNS * i:HOST_RUNS * (i + 1)]]
        out[op] = {"host_us": min(runs), "host_runs_us": runs}
    with boot("designs-calibration", build.Parts("vanilla").ensure(), smp=1, icount=True, native=True) as tb:
        tb.booted()
        for op in argv:
            cmd = "lat_proc --what %s --n %d --warmup %d" % (op, plan.lat_n[op], plan.lat_warmup)
            meds = [workloads.parse_output(tb.check(cmd))[0]["median_us"] for _ in range(plan.lat_rounds)]
            out[op]["instructions"] = round(1000 * _median(meds))
    return out


def _hwmodel():
    if build.REPO not in sys.path:
        sys.path.insert(0, build.REPO)
    from evaluation import hwmodel
    return hwmodel


def run_stage(st, plan_name):
    """`reproduce` stage 'designs': every row measured, the model applied, written to
    RESULTS/designs.json and .csv. ST is the Study (boots, progress, results)."""
    from . import series
    from .results import write_experiment
    plan = PLANS[plan_name]

    def boot(name, parts, **kw):
        tb = series._boot(parts, st.console_dir, name, **kw)
        tb.booted = lambda: st.booted(name, tb)
        return tb

    rows, versions = [], {}
    for i, (row, name, mode) in enumerate(ROWS):
        rec = measure_row(row, name, mode, plan, boot, lambda m: st.progress("designs %d/%d %s" % (i + 1, len(ROWS), m)))
        versions[row] = qemu.versions(DESIGNS[name].parts())
        rows.append(rec)
    calibration = calibration_runs(plan, boot, lambda m: st.progress("designs " + m))
    per_op = {r["design"]: r["per_op"] for r in rows}
    constants, model_rows = apply_model(per_op, calibration)
    text = _hwmodel().report_text(model_rows, constants, _published_latency())
    st.progress("designs: hardware-time model\n" + text)
    flat = [table_row(r, model_rows) for r in rows]
    meta = st.meta(st.parts, timing="counts exact (2 vCPUs, forkbench after warm-up); instructions: QEMU -icount "
                   "shift=0, 1 vCPU, lat_proc median of %d rounds" % plan.lat_rounds,
                   plan=dataclasses.asdict(plan), versions_by_design=versions)
    write_experiment(st.results, "designs", dict(meta, per_op=per_op, calibration=calibration, constants=constants,
                                                 model=model_rows), flat, runs=rows)


def apply_model(per_op, calibration):
    """(constants, model rows) for PER_OP {row: {op: counts}}, rows in ROWS order."""
    hw = _hwmodel()
    constants = hw.calibrate(hw.load_constants(), calibration)
    known = [r for r, _, _ in ROWS]
    order = [r for r in known if r in per_op] + [r for r in per_op if r not in known]
    return constants, hw.model({r: per_op[r] for r in order}, constants)


def with_model(flat_rows, model_rows):
    """The table's rows with their estimated hardware columns from MODEL_ROWS."""
    out = []
    for row in flat_rows:
        row = dict(row)
        for op in ("fork", "exec", "shell"):
            m = next(x for x in model_rows if x["design"] == row["design"] and x["op"] == op)
            row["%s_hw_us" % op] = m["estimate_us"]
            row["%s_hw_us_range" % op] = "%.1f-%.1f" % (m["estimate_low_us"], m["estimate_high_us"])
            row["%s_hw_saving" % op] = m["saving_vs_stock_strict"]
        out.append(row)
    return out


def _published_latency():
    import json
    import os
    with open(os.path.join(build.REPO, "evaluation", "published.json")) as f:
        return json.load(f)["process_latency"]


def table_row(rec, model_rows):
    """One flat row per design: the report's table and designs.csv."""
    out = {"design": rec["design"], "xen_change": rec["xen_change"], "guest_change": rec["guest_change"],
           "isolation": rec["isolation"]}
    for label, key in (("fork+exit", "fork+exit"), ("fork+exec", "fork+exec"), ("fork64", "fork+exit 64 MiB")):
        fb = rec["forkbench"].get(key, {})
        out["inv_%s" % label.replace("+", "_")] = round(fb.get("qi_iotlb_inv", 0.0), 3)
    for op in ("fork", "exec", "shell"):
        c = rec["per_op"][op]
        for k, short in (("qi_iotlb_inv", "inv"), ("iommu_map_type", "maps"), ("hypercalls", "hypercalls"),
                         ("ptwr_emulations", "emulations"), ("instructions", "instructions")):
            out["%s_%s" % (op, short)] = round(c[k], 3) if k != "instructions" else c[k]
    return with_model([out], model_rows)[0]
