"""PTE update modes on fork (flushless/experiments/ptemodes.py): the break-even arithmetic, and on the
testbed that xen_fork_pin=emulate really has the child's PTE writes trapped and emulated."""

import pytest

from flushless.testbed import build
from flushless.experiments import measure, ptemodes, series


def rows(mode, points):
    return [{"mode": mode, "ptes": k, "instructions_per_fork": v, "tables": 8} for k, v in points]


def test_crossing_interpolates_on_log_k():
    r = rows("late", [(1, 100), (4, 200), (16, 400)]) + rows("emulate", [(1, 50), (4, 150), (16, 800)])
    k = ptemodes.crossing(r, "late", "emulate")
    assert 4 < k < 16
    assert ptemodes.crossing(r, "late", "late") == 1.0
    assert ptemodes.crossing(rows("a", [(1, 1), (2, 2)]) + rows("b", [(1, 5), (2, 6)]), "a", "b") is None


def test_summary_names_every_pair_and_the_cost_per_pte():
    r = rows("late", [(1, 100), (512, 5200)]) + rows("early", [(1, 90), (512, 6000)]) + \
        rows("emulate", [(1, 80), (512, 9000)])
    s = ptemodes.summary(r)
    assert set(s["break_even"]) == {"late_vs_early", "late_vs_emulate", "early_vs_emulate"}
    assert s["late_instructions_per_pte"] == pytest.approx((5200 - 100) / (511 * 8), abs=0.1)


@pytest.mark.testbed
def test_emulate_mode_traps_the_childs_pte_writes(tmp_path):
    parts = build.Parts("built", linux_series=build.testbed_linux_series()).ensure()
    k, tables = 64, 8
    with series._boot(parts, str(tmp_path), "emulate", smp=1, icount=True,
                      dom0_args=("xen_fork_pin=emulate",)) as tb:
        rec = measure.Session(tb).run("forkdirty", ["--tables", str(tables), "--ptes", str(k), "--n", "3"])
    per_fork = rec["per_op"]
    # The parent's write-protection of its K x P PTEs traps in every mode; the child's K x P
    # writes trap only here.
    assert per_fork["ptwr_emulations"] >= 1.9 * k * tables, per_fork
    assert rec["invariant_violations"] == 0
