"""A long run never loses finished work: the ledger, the resume, --restart,
the groups' per-group results, the report of what is missing. Fake stages, no QEMU."""

import dataclasses
import json
import os
import shutil

import pytest

from flushless.testbed import build
from flushless import cli
from flushless.experiments import busy, ledger, series, study
from flushless.report import document, inputs
from flushless.testbed.build import REPO
from flushless.progress import ToolError
from flushless.experiments.results import write_experiment, write_json

QUICK = study.PROFILES["quick"]
METHODS = {"groups": "run_groups", "timing": "run_timing_boot", "network": "run_network_boot", "io": "run_io_stage",
           "native": "run_native_stage", "native_kernel": "run_native_kernel_stage", "designs": "run_designs_stage",
           "pte_modes": "run_pte_modes_stage", "seed": "run_seed_stage"}


class FakePart:
    def __init__(self, key):
        self.key = key


class FakeParts:
    keys = {"xen": "x1", "kernel": "k1", "busybox": "b1", "initramfs": "i1"}

    def __init__(self, *args, **kw):
        for name, key in self.keys.items():
            setattr(self, name, FakePart(key))

    def ensure(self):
        return self

    def versions(self):
        return {}


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Every stage a fake that writes its results files; CALLS names the stages run, FAIL maps a
    stage to the exception it raises (once)."""
    monkeypatch.setattr(build, "Parts", FakeParts)
    monkeypatch.setattr(FakeParts, "keys", dict(FakeParts.keys))
    calls, fail = [], {}

    def make(stage):
        def fn(self, *args):
            calls.append(stage)
            if stage in fail:
                raise fail.pop(stage)
            for name in study.STAGE_OUTPUTS[stage]:
                write_experiment(self.results, name, {"profile": self.profile.name}, [{"stage": stage}])
        return fn

    for stage, method in METHODS.items():
        monkeypatch.setattr(study.Study, method, make(stage))
    return calls, fail, str(tmp_path / "results")


def entries(results):
    return ledger.read(results)["stages"]


def test_every_report_file_belongs_to_a_stage():
    written = {n for names in study.STAGE_OUTPUTS.values() for n in names}
    assert set(inputs.EXPERIMENTS + inputs.EXTRA_EXPERIMENTS) | {"native_kernel"} == written
    assert set(study.STAGE_OUTPUTS) == set(study.STAGES) == set(study.STAGE_INTRO)


def test_a_killed_run_resumes_at_the_stage_it_was_in(fake, capfd):
    calls, fail, results = fake
    fail["network"] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        study.Study(QUICK, results).run()
    assert calls == ["groups", "timing", "network"]
    e = entries(results)
    assert e["groups"]["status"] == e["timing"]["status"] == "done"
    assert e["groups"]["files"] == ["cache_miss.csv", "cache_miss.json", "cache_size.csv", "cache_size.json",
                                    "flush_frequency.csv", "flush_frequency.json"]
    assert e["network"]["status"] == "interrupted" and "native" not in e
    for k in ("started", "ended", "fingerprint"):
        assert k in e["groups"]

    del calls[:]
    assert study.Study(QUICK, results).run() is None
    assert calls == list(study.STAGES[2:])
    err = capfd.readouterr().err
    assert "groups: done at %s, kept; --restart to redo it" % e["groups"]["ended"] in err
    assert "network: interrupted at" in err and "running it again" in err
    assert "stage 3/9 network: the TCP stream" in err and "stage 3/9 network: done in" in err
    assert all(v["status"] == "done" for v in entries(results).values())


def test_a_run_killed_hard_is_resumed_too(fake, capfd):
    calls, fail, results = fake
    st = study.Study(QUICK, results, stages=("groups", "timing"))
    st.run()
    # SIGKILL or a power cut: the entry still says running.
    doc = ledger.read(results)
    doc["stages"]["timing"]["status"] = "running"
    with open(os.path.join(results, "stages.json"), "w") as f:
        json.dump(doc, f)
    del calls[:]
    study.Study(QUICK, results, stages=("groups", "timing")).run()
    assert calls == ["timing"]
    assert "timing: started at" in capfd.readouterr().err


def test_a_failed_stage_is_recorded_the_report_drawn_and_the_exit_is_1(fake, monkeypatch, capfd):
    calls, fail, results = fake
    rep = os.path.join(os.path.dirname(results), "report")

    def designs(self):
        calls.append("designs")
        shutil.copy(os.path.join(REPO, "tests", "fixtures", "designs-quick.json"),
                    os.path.join(self.results, "designs.json"))

    def pte_modes(self):
        calls.append("pte_modes")
        os.makedirs(self.console_dir, exist_ok=True)
        with open(os.path.join(self.console_dir, "pte-late.log"), "w") as f:
            f.write("the console")
        if not failed:
            failed.append(1)
            raise ToolError("testbed: dom0 did not answer")

    failed = []
    monkeypatch.setattr(study.Study, "run_designs_stage", designs)
    monkeypatch.setattr(study.Study, "run_pte_modes_stage", pte_modes)
    # Written by neither: the report must say so, not draw a fake's rows.
    monkeypatch.setattr(study.Study, "run_seed_stage", lambda self: calls.append("seed"))
    argv = ["reproduce", "--quick", "--results", results, "--report", rep]
    assert cli.main(argv + ["--stages", "designs,pte_modes,seed"]) == 1
    assert calls == ["designs", "pte_modes"]  # seed is not run after a failure
    e = entries(results)["pte_modes"]
    console = os.path.join(results, "console", "pte-late.log")
    assert e["status"] == "failed" and e["error"] == "ToolError: testbed: dom0 did not answer"
    assert e["console_log"] == console
    err = capfd.readouterr().err
    assert "stage pte_modes failed: ToolError: testbed: dom0 did not answer" in err and console in err
    page = open(os.path.join(rep, "index.html")).read()
    assert "Designs side by side" in page and "designs.png" in page
    assert "<h2>Not measured in this run</h2>" in page
    assert ("not measured in this run: pte_modes (failed at %s: ToolError: testbed: dom0 did not answer; "
            "console log %s)" % (e["ended"], console)) in page
    assert "not measured in this run: seed (not run)" in page
    assert "not measured in this run: groups (not run)" in page

    # flushless report draws the same from what exists.
    os.unlink(os.path.join(rep, "index.html"))
    assert cli.main(["report", "--results", results, "--report", rep]) == 0
    assert "not measured in this run: pte_modes (failed at" in open(os.path.join(rep, "index.html")).read()

    # The rerun keeps designs and goes on from pte_modes.
    del calls[:]
    assert cli.main(argv + ["--stages", "designs,pte_modes,seed"]) == 0
    assert calls == ["pte_modes", "seed"]
    page = open(os.path.join(rep, "index.html")).read()
    assert "not measured in this run: pte_modes (recorded done at" in page
    assert "but seed_xen.json, seed_model.json missing" in page


def test_the_report_of_a_run_that_wrote_nothing_names_the_failure(fake, capfd):
    calls, fail, results = fake
    fail["groups"] = ToolError("testbed boot failed: stalled")
    failure = study.Study(QUICK, results).run()
    assert failure["stage"] == "groups" and calls == ["groups"]
    rep = os.path.join(os.path.dirname(results), "report")
    page = open(document.write(results, rep)).read()
    assert "not measured in this run: groups (failed at" in page and "testbed boot failed: stalled" in page
    assert "not measured in this run: timing (not run)" in page
    with pytest.raises(ToolError, match="no results in"):
        document.write(os.path.join(results, "nothing-here"), rep)


def test_restart_runs_everything_again_and_keeps_the_old_results(fake, capfd):
    calls, fail, results = fake
    study.Study(QUICK, results).run()
    del calls[:]
    study.Study(QUICK, results, restart=True).run()
    assert calls == list(study.STAGES)
    old = os.listdir(os.path.join(results, "old"))
    assert len(old) == 1 and "flush_frequency.json" in os.listdir(os.path.join(results, "old", old[0]))
    assert "--restart" in capfd.readouterr().err
    # A file of a stage done gone: that stage again.
    os.unlink(os.path.join(results, "tcp_stream.csv"))
    del calls[:]
    study.Study(QUICK, results).run()
    assert calls == ["network"] and "network: done at" in capfd.readouterr().err
    # --restart with --stages: only those.
    del calls[:]
    study.Study(QUICK, results, stages=("network",), restart=True).run()
    study.Study(QUICK, results).run()
    assert calls == ["network"]


def test_a_changed_fingerprint_runs_the_stage_again(fake, capfd):
    calls, fail, results = fake
    study.Study(QUICK, results, stages=("groups", "native")).run()
    del calls[:]
    study.Study(dataclasses.replace(QUICK, minute_s=20), results, stages=("groups", "native")).run()
    assert calls == ["groups", "native"]
    err = capfd.readouterr().err
    assert "groups: done at" in err and "with other settings (profile.minute_s changed); running it again" in err
    # A rebuilt kernel: every stage again.
    FakeParts.keys["kernel"] = "k2"
    del calls[:]
    study.Study(dataclasses.replace(QUICK, minute_s=20), results, stages=("groups", "native")).run()
    assert calls == ["groups", "native"] and "parts.kernel changed" in capfd.readouterr().err
    # The same settings again: nothing.
    del calls[:]
    study.Study(dataclasses.replace(QUICK, minute_s=20), results, stages=("groups", "native")).run()
    assert calls == []


def fake_rec(group):
    pools = [{"group": group, "minute": 0, "level": busy.POOL_LEVEL, "hits": 9, "misses": 1, "pool": 2,
              "in_use": 3}]
    return {"group": group, "flush_rows": [{"group": group, "minute": 0, "qi_iotlb_inv": 7}], "pool_rows": pools,
            "timing_rows": [], "pool_end": {"pages": 2, "in_use": 3},
            "meminfo_kb": {"MemTotal": 1000, "MemAvailable": 600}}


def test_groups_keep_each_finished_group(monkeypatch, tmp_path, capfd):
    monkeypatch.setattr(build, "Parts", FakeParts)
    measured, fail = [], ["dyn"]

    def measure_group(self, parts, group, mode, dom0_args, switch, minutes):
        measured.append(group)
        if group in fail:
            fail.remove(group)
            raise ToolError("dyn: churn exited 1")
        self.boots[group] = {"mode": mode}
        return fake_rec(group)

    monkeypatch.setattr(study.Study, "measure_group", measure_group)
    results = str(tmp_path / "results")
    failure = study.Study(QUICK, results, stages=("groups",)).run()
    assert failure["stage"] == "groups" and measured == ["baseline", "pre", "adaptive", "dyn"]
    assert sorted(os.listdir(os.path.join(results, "partial"))) == [
        "groups-adaptive.json", "groups-baseline.json", "groups-pre.json"]
    assert entries(results)["groups"]["kept"] == ["baseline", "pre", "adaptive"]
    assert "3 of 5 parts finished and kept for the resume" in inputs.missing_stages(results, {})["groups"]

    del measured[:]
    st = study.Study(QUICK, results, stages=("groups",))
    assert st.run() is None
    assert measured == ["dyn", "relaxed"]
    flush = json.load(open(os.path.join(results, "flush_frequency.json")))
    assert [r["group"] for r in flush["rows"]] == ["baseline", "pre", "adaptive", "dyn", "relaxed"]
    assert set(flush["boots"]) == {"baseline", "pre", "adaptive", "dyn", "relaxed"}
    assert os.listdir(os.path.join(results, "partial")) == []
    assert "group 1/5: baseline kept from" in capfd.readouterr().err

    # Other settings: the finished groups of an earlier run are not taken.
    os.makedirs(os.path.join(results, "partial"), exist_ok=True)
    write_json(os.path.join(results, "partial", "groups-pre.json"), {"fingerprint": "other", "rec": {}})
    del measured[:]
    study.Study(dataclasses.replace(QUICK, minute_s=20), results, stages=("groups",)).run()
    assert measured == ["baseline", "pre", "adaptive", "dyn", "relaxed"]


def test_the_native_stage_takes_the_timing_rows_of_an_earlier_run(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "Parts", FakeParts)
    results = str(tmp_path / "results")
    st = study.Study(QUICK, results)
    st.parts = FakeParts()
    rows = {"seed_fork_vs_memory": [{"where": "testbed"}], "seed_access_latency": []}
    write_json(os.path.join(results, "partial", "handoff-timing.json"),
                     {"fingerprint": st.fingerprint("timing"), "rows": rows, "meta": {"timing": "icount"}})
    later = study.Study(QUICK, results)
    later.parts = FakeParts()
    later.load_timing_handoff()
    assert later._seed == rows and later._seed_meta == {"timing": "icount"}
    other = study.Study(dataclasses.replace(QUICK, minute_s=20), results)
    other.parts = FakeParts()
    other.load_timing_handoff()
    assert other._seed == {}


@pytest.fixture
def fake_series(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "Parts", FakeParts)
    calls, fail = [], {}

    def experiment(name, results, console_dir, quick):
        calls.append(name)
        if name in fail:
            raise fail.pop(name)
        series._write(results, name, [{"quick": quick}])
        return name

    monkeypatch.setattr(series, "_experiment", experiment)
    return calls, fail, str(tmp_path / "series")


def test_series_resumes_restarts_and_records_failures(fake_series, capfd):
    calls, fail, results = fake_series
    names = ["offstock", "native", "boots"]
    fail["native"] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        series.run(names, results, os.path.join(results, "console"))
    assert calls == ["offstock", "native"] and entries(results)["native"]["status"] == "interrupted"

    del calls[:]
    assert series.run(names, results, os.path.join(results, "console")) == {"native": "native", "boots": "boots"}
    assert calls == ["native", "boots"]
    assert "offstock: done at" in capfd.readouterr().err

    # --quick is part of the fingerprint.
    del calls[:]
    fail["native"] = ToolError("native: the series switched on without Xen")
    with pytest.raises(ToolError):
        series.run(names, results, os.path.join(results, "console"), quick=True)
    assert calls == ["offstock", "native"]
    e = entries(results)["native"]
    assert e["status"] == "failed" and "switched on without Xen" in e["error"]

    del calls[:]
    series.run(names, results, os.path.join(results, "console"), restart=True)
    assert calls == names and os.path.isdir(os.path.join(results, "old"))


def test_cli_passes_restart(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(series, "run", lambda names, results, console, quick=False, restart=False:
                        seen.update(names=names, restart=restart))
    assert cli.main(["series", "boots", "--restart", "--results", str(tmp_path)]) == 0
    assert seen == {"names": ["boots"], "restart": True}
