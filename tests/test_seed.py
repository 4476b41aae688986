"""reproduce's seed stage (flushless/experiments/seed.py) without a testbed: its summary, Xen's dump
parsed, and the report's seed figure from the records it writes."""

import json
import os

from evaluation import pagewalk as pw
from flushless.report import figures, inputs
from flushless.experiments import seed


def _runs():
    runs = []
    for r in range(3):
        for label, kind in seed.GUESTS:
            k = 5.0 if label == "hap0" else 1.0
            runs.append({"round": r, "label": label, "kind": kind, "workload": "pagetable_bench",
                         "rec": {"rows": [{"size_kb": kb, "fork_us": k * (100 + r + kb), "min_us": k * 90}
                                          for kb in (4, 8)]}})
            runs.append({"round": r, "label": label, "kind": kind, "workload": "tlb_bench",
                         "rec": {"rows": [{"size_kb": 4, "ns_per_access": 4.0}]}})
            runs.append({"round": r, "label": label, "kind": kind, "workload": "forkbench",
                         "rec": {"result": {"time_us": k * 100}, "per_op": {"shadow_faults": 40.0 * (k > 1)}}})
    return runs


def test_seed_summary_takes_medians_and_the_ratio():
    s = seed.summary(seed.rows_of(_runs()))
    row = s["pagetable_bench"][0]
    assert row["hap1"] == {"n": 3, "median": 105, "min": 104, "max": 106}
    assert row["ratio_hap0_hap1"] == 5.0 and s["fork_ratio_range"] == [5.0, 5.0]
    assert s["per_fork"]["hap0"]["shadow_faults"] == 40.0 and s["per_fork"]["hap1"]["shadow_faults"] == 0.0


def test_paging_modes_from_xens_dump():
    lines = ["(XEN) General information for domain 0:", "(XEN)     refcnt=3",
             "(XEN) General information for domain 1:", "(XEN)     paging assistance: hap, 4 levels",
             "(XEN) General information for domain 2:", "(XEN)     paging assistance: shadowed 4-on-4"]
    assert seed.paging_modes(lines) == {1: "hap, 4 levels", 2: "shadowed 4-on-4"}


def test_seed_figure_and_caption(tmp_path):
    rows = seed.rows_of(_runs())
    xen_doc = {"summary": seed.summary(rows), "plan": {"rounds": 3, "fork_n": 5},
               "xen_paging": {"hap1": "hap, 4 levels", "hap0": "shadowed 4-on-4"}, "timing": "icount"}
    native = [{"size_kb": 4 << i, "ns_per_access": 1.2 + (30 if i > 11 else 0)} for i in range(14)]
    params, fit, mrows = seed.model_rows(native)
    model_doc = {"rows": mrows, "params": params, "fit": fit}
    with open(inputs.PUBLISHED) as f:
        lab = json.load(f)["seed_002"]
    path = str(tmp_path / "seed.png")
    figures.fig_seed_xen(xen_doc, model_doc, lab, path)
    assert os.path.getsize(path) > 10000
    caption = figures.seed_caption(xen_doc, model_doc, lab)
    assert "5.00-5.00" in caption and "shadowed 4-on-4" in caption and "about 5.5" in caption, caption
    assert {r["mode"] for r in mrows} == set(pw.MODES) | {"nested_2m"}
