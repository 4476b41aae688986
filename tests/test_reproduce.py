"""`flushless reproduce --quick` end to end: every results file and the report are written,
and the counts show the paper's effects (they decide; times are only reported)."""

import json
import os
import subprocess
import sys
import tempfile

import pytest

from flushless.report import inputs
from flushless.experiments import study
from flushless.testbed.build import REPO

# 7 minutes: beyond make test's budget. make test-all runs it; every make reproduce runs the
# same stages and writes the same comparison.
pytestmark = [pytest.mark.testbed, pytest.mark.slow]


@pytest.fixture(scope="module")
def run():
    out = tempfile.mkdtemp(prefix="flushless-reproduce-")
    results, rep = os.path.join(out, "results"), os.path.join(out, "report")
    # The designs and PTE-mode stages boot every design twice and three kernels:
    # tests/test_designs.py covers them in make test, tests/test_guests.py the seed stage's runs.
    stages = ",".join(s for s in study.STAGES if s not in ("designs", "pte_modes", "seed"))
    res = subprocess.run([sys.executable, "-m", "flushless", "reproduce", "--quick", "--stages", stages,
                          "--results", results, "--report", rep], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=20 * 60)
    assert res.returncode == 0, res.stdout[-4000:]
    return results, rep, res.stdout


def load(results, name):
    with open(os.path.join(results, name + ".json")) as f:
        return json.load(f)


def test_every_results_file_and_the_report_are_written(run):
    results, rep, _ = run
    for name in inputs.EXPERIMENTS:
        for ext in ("json", "csv"):
            path = os.path.join(results, "%s.%s" % (name, ext))
            assert os.path.getsize(path) > 0, path
        doc = load(results, name)
        assert doc["rows"], name
        assert doc["versions"]["xen"] and doc["time_scale"]["minute_s"] == 15
    page = open(os.path.join(rep, "index.html")).read()
    for png in ("flush_frequency", "pt_alloc_free_time", "cache_size", "cache_miss", "process_latency",
                "cpu_suite", "tcp_stream", "seed_benchmarks", "io"):
        assert os.path.getsize(os.path.join(rep, png + ".png")) > 10000, png
        assert png + ".png" in page
    assert "Time scale" in page and "emulation time" in page
    # The native-kernel question: without a hypervisor to take declarations the series has no pool.
    native = load(results, "native_kernel")
    assert native["rows"] and native["summary"]["series_has_no_pool"] == ["absent"]
    assert "The native-kernel question" in page and "debugfs directory was absent, as it must be" in page


def test_counts_show_the_published_effects(run):
    results = run[0]
    doc = load(results, "flush_frequency")
    by = {}
    for r in doc["rows"]:
        by.setdefault(r["group"], []).append(r["qi_iotlb_inv"])
    minutes = study.PROFILES["quick"].group_minutes
    assert [len(by[g]) for g in ("baseline", "pre", "dyn")] == [minutes] * 3
    steady = sum(by["baseline"][1:]) / (minutes - 1)
    assert steady > 1000  # about 13 per process created, 542 processes a minute
    assert max(by["pre"][1:]) <= 0.01 * steady
    # The series' default policy: the same, with no thresholds to tune.
    assert len(by["adaptive"]) == minutes and max(by["adaptive"][1:]) <= 0.01 * steady
    sw = study.PROFILES["quick"].switch_minute
    assert min(by["dyn"][:sw]) > 0.5 * steady
    assert max(by["dyn"][sw + 2:]) <= 0.01 * steady
    assert by["relaxed"] == [0] * study.PROFILES["quick"].relaxed_minutes
    assert all(run_["invariant_violations"] == 0 for run_ in doc["runs"])
    # Every TCP run's bytes arrived on the host; the cache changes no invalidation count there.
    tcp = load(results, "tcp_stream")
    assert all(r["bytes"] > 0 for r in tcp["rows"])


def test_comparison_table_lists_every_published_item(run):
    table = json.load(open(os.path.join(run[1], "comparison.json")))
    items = " ".join(r["item"] for r in table)
    for word in ("baseline", "pre", "adaptive", "dyn", "alloc", "free", "cache pages", "miss", "fork+exit", "fork+execve",
                 "/bin/sh", "CPU-bound", "TCP"):
        assert word in items, word
    assert all(r["published"] and r["ours"] for r in table)
