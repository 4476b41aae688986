"""PTE update modes on fork: how the child's page-table writes should reach Xen.

The testbed kernel (testbed/linux/0003, never part of the series) takes xen_fork_pin=:
  late     today's Linux: the child's tables are filled while unpinned (PTEs by batched
           mmu_update to writable pages, upper levels by plain stores) and pinned once filled
  early    the child's top level is pinned before copy_page_range(): every table is pinned
           when allocated and every write is a validated, batched hypercall
  emulate  as early, but PTE writes to pinned tables are plain stores Xen traps and emulates

forkdirty dirties K PTEs in each of P page-table pages, then forks; the counters start after
the writes (measure -s). Under -icount a fork+exit's time is its instructions (guest and Xen,
1 ns each), so the break-even K between two modes is where their instructions per fork cross.
The Xen mailing-list thread among the study's sources measured writable page tables against
trap-and-emulate on 2005 hardware and put the break-even at about 4 PTEs per page.
"""

import dataclasses

from ..testbed import build
from . import measure

DESCRIPTION = ("How a fork's page-table writes reach Xen, chosen by the testbed kernel's xen_fork_pin= "
               "(testbed/linux/0003): late pin (today's Linux: the child's tables are filled while unpinned and "
               "pinned once filled), early pin with batched hypercalls (the child's top level pinned before "
               "copy_page_range(), every write a validated mmu_update), early pin with plain stores that Xen traps "
               "and emulates. The parent's write-protection of its own PTEs is trapped and emulated in every mode.")
MODES = ("late", "early", "emulate")
COUNTS = ("hypercalls", "mmu_update_calls", "mmu_page_updates", "mmuext_ops", "ptwr_emulations", "qi_iotlb_inv")


@dataclasses.dataclass(frozen=True)
class Plan:
    ks: tuple
    tables: int
    n: int


PLANS = {
    "quick": Plan((1, 4, 16, 64, 512), 16, 3),
    "default": Plan((1, 2, 4, 8, 16, 32, 64, 128, 256, 512), 32, 5),
    "full": Plan((1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256, 512), 64, 10),
}


def measure_mode(mode, plan, boot, progress):
    """One -icount boot with xen_fork_pin=MODE: a row per K."""
    parts = build.Parts("built", linux_series=build.testbed_linux_series()).ensure()
    rows = []
    with boot("pte-modes-" + mode, parts, smp=1, icount=True, dom0_args=("xen_fork_pin=" + mode,)) as tb:
        tb.booted()
        if "xen_fork_pin=" + mode not in tb.check("cat /proc/cmdline")[0]:
            raise RuntimeError("dom0 did not boot with xen_fork_pin=%s" % mode)
        session = measure.Session(tb)
        for k in plan.ks:
            progress("%s: K=%d" % (mode, k))
            rec = session.run("forkdirty", ["--tables", str(plan.tables), "--ptes", str(k), "--n", str(plan.n)])
            row = {"mode": mode, "ptes": k, "tables": plan.tables, "forks": rec["ops"],
                   "instructions_per_fork": round(1000 * rec["rows"][0]["fork_us"])}
            row.update({c: round(rec["per_op"].get(c, 0.0), 2) for c in COUNTS})
            row["invariant_violations"] = rec["invariant_violations"]
            rows.append(row)
    return rows


def crossing(rows, a, b):
    """The K (interpolated on log K) where mode B's instructions per fork reach mode A's, or
    None if one stays below the other over the whole grid."""
    import math
    pa = {r["ptes"]: r["instructions_per_fork"] for r in rows if r["mode"] == a}
    pb = {r["ptes"]: r["instructions_per_fork"] for r in rows if r["mode"] == b}
    ks = sorted(set(pa) & set(pb))
    diff = [(k, pb[k] - pa[k]) for k in ks]
    for (k0, d0), (k1, d1) in zip(diff, diff[1:]):
        if d0 == 0:
            return float(k0)
        if (d0 < 0) != (d1 < 0):
            x0, x1 = math.log(k0), math.log(k1)
            return round(math.exp(x0 + (x1 - x0) * d0 / (d0 - d1)), 2)
    return None


def summary(rows):
    out = {"break_even": {}}
    for a, b in (("late", "early"), ("late", "emulate"), ("early", "emulate")):
        out["break_even"]["%s_vs_%s" % (a, b)] = crossing(rows, a, b)
    for mode in MODES:
        m = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["ptes"])
        if len(m) >= 2:
            # The marginal cost of one more PTE per table, over the largest step of K.
            lo, hi = m[-2], m[-1]
            out["%s_instructions_per_pte" % mode] = round(
                (hi["instructions_per_fork"] - lo["instructions_per_fork"])
                / ((hi["ptes"] - lo["ptes"]) * hi["tables"]), 1)
    return out


def run_stage(st, plan_name):
    """`reproduce` stage 'pte_modes': RESULTS/pte_modes.json and .csv."""
    from . import series
    from .results import write_experiment
    plan = PLANS[plan_name]

    def boot(name, parts, **kw):
        tb = series._boot(parts, st.console_dir, name, **kw)
        tb.booted = lambda: st.booted(name, tb)
        return tb

    rows = []
    for i, mode in enumerate(MODES):
        rows += measure_mode(mode, plan, boot, lambda m: st.progress("pte modes %d/3 %s" % (i + 1, m)))
    s = summary(rows)
    st.progress("pte modes: break-even %s" % s["break_even"])
    write_experiment(st.results, "pte_modes", st.meta(st.parts, plan=dataclasses.asdict(plan), timing=(
        "QEMU -icount shift=0 (1 ns per executed instruction, guest and Xen), 1 vCPU: forkdirty's mean "
        "fork+exit time is its instructions")), rows, summary=s)
