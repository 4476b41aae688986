"""The designs stage's table, model and report page, from a recorded quick run
(tests/fixtures/designs-quick.json); the stage itself boots every design (make reproduce)."""

import html
import json
import os
import shutil

import pytest

from evaluation import hwmodel
from flushless.experiments import designs
from flushless.report import document
from flushless.progress import ToolError
from flushless.testbed.build import REPO

FIXTURE = os.path.join(REPO, "tests", "fixtures", "designs-quick.json")


def test_isolation_verdict_names_what_passed():
    row = {"mode": "strict", "swrace": {"rounds": 1000, "bad_states": 0},
           "dmasweep": {"control_read_ok": True, "pagetable_frames": 780, "pagetable_frames_readable": 0,
                        "writable_frames_faulted": 0}, "invariant_violations": 0}
    assert designs.isolation_verdict(row) == "swrace 1000 rounds, dmasweep 780 tables unreadable, audit"
    # A strict row that did not show all three stops the stage, with what it did show.
    with pytest.raises(ToolError, match="isolation not shown .passed only: dmasweep 780 tables unreadable"):
        designs.isolation_verdict(dict(row, design="paper", swrace={"rounds": 1000, "bad_states": 3},
                                       invariant_violations=1))
    assert designs.isolation_verdict({"mode": "relaxed"}) == "none: no DMA protection"


def test_every_design_row_is_there_and_needs_what_it_says():
    assert [r for r, _, _ in designs.ROWS] == ["stock strict", "stock relaxed", "paper", "xen-only"]
    assert not designs.DESIGNS["stock"].xen_change and not designs.DESIGNS["stock"].guest_change
    assert designs.DESIGNS["xen-only"].xen_change and not designs.DESIGNS["xen-only"].guest_change
    assert designs.DESIGNS["xen-only"].xen_series()[-1].endswith(".patch")
    assert "patches/xen-only" in designs.DESIGNS["xen-only"].xen_series()[-1]
    # A retired design keeps its last figures and the reason, and no row of its own.
    for name in designs.RETIRED:
        assert name not in designs.DESIGNS
        doc = json.load(open(os.path.join(REPO, "results", "retired", name + ".json")))
        assert doc["reason"] and doc["last_row"]["design"] == name


def test_report_has_the_designs_table_and_figure(tmp_path):
    results, out = tmp_path / "results", tmp_path / "report"
    results.mkdir()
    shutil.copy(FIXTURE, results / "designs.json")
    page = open(document.write(str(results), str(out))).read()
    assert "Designs side by side" in page and (out / "designs.png").stat().st_size > 10000
    doc = json.load(open(FIXTURE))
    for row in doc["rows"]:
        assert "<td>%s</td>" % row["design"] in page
    # The model is applied when the report is written: today's constants and their sources.
    for c in hwmodel.load_constants().values():
        assert html.escape(c["source"]) in page
