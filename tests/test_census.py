"""The census's bookkeeping: rows appended as trials end, resumed, summed, drawn as a table."""

import json

import pytest

from flushless.experiments import census
from flushless.testbed import qemu
from flushless.progress import ToolError


@pytest.fixture
def fake_qemu(monkeypatch):
    monkeypatch.setattr(qemu, "info", lambda: {"qemu_version": "10.0.2", "qemu_package": "1:10.0.2+ds-2",
                                               "qemu_binary": "/usr/bin/qemu-system-x86_64"})


def test_rows_are_appended_as_trials_end_and_read_back(tmp_path, fake_qemu):
    c = census.Census(str(tmp_path), census.QUICK)
    log = tmp_path / "boot.log"
    log.write_text("(XEN) Xen version 4.20\n")
    c.add("boot built 4 vCPUs", "crash", str(log), what="dom0 kernel oops")
    good = tmp_path / "good.log"
    good.write_text("(XEN) Xen version 4.20\n")
    c.add("boot built 4 vCPUs", "ok", str(good), rounds=0)
    # The log is kept gzipped beside the rows; the row names it relative to the census.
    rows = [json.loads(line) for line in (tmp_path / "census" / "census.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in rows] == ["crash", "ok"]
    assert rows[0]["log"] == "../boot.log.gz" and (tmp_path / "boot.log.gz").exists() and not log.exists()
    # A good trial's log is not kept.
    assert rows[1]["log"] is None and not good.exists()
    # A second census on the same directory resumes: it sees both trials done.
    again = census.Census(str(tmp_path), census.QUICK)
    assert len(again.done("boot built 4 vCPUs")) == 2
    assert again.done("boot debian 4 vCPUs") == []


def test_each_configuration_keeps_one_good_log_and_the_table_links_it(tmp_path, fake_qemu):
    c = census.Census(str(tmp_path), census.QUICK)
    logs = []
    for n in range(2):
        logs.append(tmp_path / ("good-%d.log" % n))
        logs[-1].write_text("(XEN) Xen version 4.20\n")
        c.add("boot built 2 vCPUs", "ok", str(logs[-1]))
    rows = c.done("boot built 2 vCPUs")
    assert rows[0]["log"] == "../good-0.log.gz" and rows[1]["log"] is None and not logs[1].exists()
    line = next(x for x in census.table(c.rows, link_prefix="").splitlines() if x.startswith("| boot built 2"))
    assert "2 of 2 ok ([a log](../good-0.log.gz))" in line, line


def test_a_new_trial_never_overwrites_a_kept_log(tmp_path, fake_qemu):
    # Rows named before the FPU was in the name read back under a new name, and their logs
    # keep the old stem: a new configuration's first log must not take their file.
    c = census.Census(str(tmp_path), census.QUICK)
    old = c.log_path("exec storm x") + ".gz"
    open(old, "wb").close()
    assert c.log_path("exec storm x") != old[:-3] and c.log_path("exec storm x").endswith("-1.log")


def test_repeated_failures_stop_the_census(tmp_path, fake_qemu):
    c = census.Census(str(tmp_path), census.QUICK)
    for _ in range(2):
        c.add("boot built 2 vCPUs", "stall", None)
        c.give_up_after_failures("boot built 2 vCPUs")
    c.add("boot built 2 vCPUs", "stall", None)
    with pytest.raises(ToolError, match="failed 3 times in a row"):
        c.give_up_after_failures("boot built 2 vCPUs")


def test_table_puts_both_qemus_side_by_side():
    from flushless.testbed.qemu import CPU
    rows = [
        {"qemu_version": "7.2.22", "cpu": CPU, "config": "boot built 4 vCPUs", "outcome": "ok"},
        {"qemu_version": "7.2.22", "cpu": CPU, "config": "boot built 4 vCPUs", "outcome": "crash",
         "log": "logs/a.log.gz"},
        {"qemu_version": "10.0.2", "cpu": CPU, "config": "boot built 4 vCPUs", "outcome": "ok"},
        {"qemu_version": "10.0.2", "cpu": CPU, "config": "race load cache on", "outcome": "ok", "rounds": 25,
         "deaths": {}},
        {"qemu_version": "10.0.2", "cpu": CPU, "config": "race load cache on", "outcome": "death", "rounds": 25,
         "deaths": {"11": 2}, "log": "logs/b.log.gz"},
    ]
    t = census.table(rows, link_prefix="")
    lines = t.splitlines()
    assert lines[0] == "| configuration | QEMU 7.2.22 | QEMU 10.0.2 |"
    boot = next(x for x in lines if x.startswith("| boot built 4 vCPUs"))
    assert "1 of 2 ok; crash 1 (logs: [1](logs/a.log.gz))" in boot and "| 1 of 1 ok |" in boot
    race = next(x for x in lines if x.startswith("| race load cache on"))
    assert "50 rounds, deaths by signal: 11: 2" in race and race.endswith("not run |") is False
    assert "| not run |" in race
    # A row booted with another CPU model has a column of its own.
    old = dict(rows[2], cpu="max")
    assert census.table(rows + [old]).splitlines()[0].endswith("| QEMU 10.0.2 | QEMU 10.0.2 (-cpu max) |")


def test_qemu_choices_are_checked():
    with pytest.raises(ToolError, match="unknown QEMU"):
        qemu.use("6.2")


def test_console_check_finds_a_changed_byte_and_a_lost_line():
    lines = [census.CONSOLE_LINE % i for i in range(5)]
    lines[1] = lines[1].replace("XYZ", "XcZ")
    del lines[3]
    res = census.console_check(lines, 5)
    assert res["lost"] == 1 and res["bad_lines"] == [(census.CONSOLE_LINE % 1).replace("XYZ", "XcZ")]
    # The script prints exactly the line the check expects.
    assert census.CONSOLE_LINE.replace("%d", "$i") in census.CONSOLE_SCRIPT.replace('\\"', '"')


def test_a_stall_whose_log_shows_a_killed_process_says_so(tmp_path):
    import gzip
    d = tmp_path / "census"
    (d / "logs").mkdir(parents=True)
    with gzip.open(d / "logs" / "a.log.gz", "wt") as f:
        f.write("[ 15.6] traps: exe[169] general protection fault ip:4a4d02 sp:7ffc error:0 in busybox\n")
    with gzip.open(d / "logs" / "b.log.gz", "wt") as f:
        f.write("(XEN) nothing to see\n")
    rows = [{"qemu_version": "10.0.2", "config": "boot debian 4 vCPUs", "outcome": "stall", "log": "logs/a.log.gz"},
            {"qemu_version": "10.0.2", "config": "boot debian 4 vCPUs", "outcome": "stall", "log": "logs/b.log.gz"}]
    line = census.table(rows, census_dir=str(d)).splitlines()[-1]
    assert "stall 2 (1 with a user-space process killed in its log)" in line, line


class FakeTestbed:
    """Boots at once; its console log is a file; run() answers from a script."""

    script = None

    def __init__(self, cfg, path):
        self.cfg, self.console_log = cfg, path
        self.stopped = False

    def _start_once(self):
        with open(self.console_log, "w") as f:
            f.write("(XEN) Xen version 4.20\n")

    def stop(self):
        self.stopped = True

    def check(self, cmd, timeout=600):
        return FakeTestbed.script(cmd)

    def run(self, cmd, timeout=600):
        return 0, FakeTestbed.script(cmd)


class FakeCfg:
    icount = False
    native = False
    xen_fpu = "eager"


@pytest.fixture
def fake_testbed(monkeypatch, fake_qemu):
    monkeypatch.setattr(census, "Testbed", FakeTestbed)
    return FakeTestbed


def test_a_trial_that_raises_is_recorded_and_qemu_stopped(tmp_path, fake_testbed):
    c = census.Census(str(tmp_path), census.QUICK)

    def interrupted(tb):
        raise KeyboardInterrupt

    def garbled(tb):
        int("loop x".split()[1])

    with pytest.raises(KeyboardInterrupt):
        c.trial("race load cache on", FakeCfg(), interrupted)
    with pytest.raises(ValueError):
        c.trial("race load cache on", FakeCfg(), garbled)
    assert [r["outcome"] for r in c.rows] == ["interrupted", "error"]
    assert "ValueError" in c.rows[1]["what"]
    # An interrupted trial is on record but not done: a resume does it again.
    assert len(c.done("race load cache on")) == 1


def test_a_race_trial_that_reads_no_rounds_is_an_error_and_ends_the_census(tmp_path, fake_testbed, monkeypatch):
    from flushless.testbed import build
    from flushless.experiments import raceload
    monkeypatch.setattr(build, "Parts", lambda *a, **k: type("P", (), {"ensure": lambda self: None})())
    monkeypatch.setattr(census, "_cfg", lambda parts, **kw: FakeCfg())
    monkeypatch.setattr(raceload, "run", lambda tb, smp, rounds, switch: {
        "rounds_read": 0, "deaths_by_signal": {}, "load_failures": [], "death_lines": [], "summary": "nothing"})
    c = census.Census(str(tmp_path), census.QUICK)
    with pytest.raises(ToolError, match="failed 3 times in a row"):
        c.run_race()
    assert [r["outcome"] for r in c.rows] == ["error"] * 3 and all(r["rounds"] == 0 for r in c.rows)


def test_a_failed_domu_keeps_its_dom0_log(tmp_path, fake_testbed, monkeypatch):
    outcomes = iter([("ok", "", 1.0), ("stall", "did not reach its shell", 300.0)])
    monkeypatch.setattr(census, "create_once", lambda tb, kind, check=None: next(outcomes))
    c = census.Census(str(tmp_path), dict(census.QUICK, pvh=5))
    body = c.domus({"pvh-hap": "pvh pvh-hap -icount"}, per_boot=10)
    c.trial("pvh dom0", FakeCfg(), body)
    rows = {r["config"]: r for r in c.rows if r["outcome"] != "ok" or r["config"] == "pvh dom0"}
    stalled = rows["pvh pvh-hap -icount"]
    # The stall ended this dom0's creations, and the log it points at exists.
    assert stalled["outcome"] == "stall" and (tmp_path / "census" / stalled["dom0_log"]).exists()
    assert len(c.done("pvh pvh-hap -icount")) == 2


def test_a_missing_resource0_keeps_its_dom0_log_and_dom0_goes_on(tmp_path, fake_testbed, monkeypatch):
    # 2026-11-27, QEMU 7.2: the one missing resource0 of 20 lost its log, being "fine".
    # The first dom0 keeps its log as the kind's sample; the second's only for the failure.
    outcomes = iter([("ok", "", 1.0), ("ok", "", 1.0), ("ok", "", 1.0), ("missing", "no resource0", 1.0)])
    monkeypatch.setattr(census, "create_once", lambda tb, kind, check=None: next(outcomes))
    c = census.Census(str(tmp_path), dict(census.QUICK, passthrough=4))
    for _ in range(2):
        c.trial("passthrough dom0", FakeCfg(), c.domus({"pv-passthrough": "pv-passthrough resource0"}, per_boot=2))
    missing, = [r for r in c.rows if r["outcome"] == "missing"]
    assert missing["dom0_log"] and (tmp_path / "census" / missing["dom0_log"]).exists()
    assert len(c.done("pv-passthrough resource0")) == 4


def test_lazy_fpu_rows_are_named_so_and_old_rows_were_lazy(tmp_path, fake_testbed):
    # Rows from before the testbed chose eager FPU switching recorded none: they were lazy.
    d = tmp_path / "census"
    d.mkdir()
    (d / "census.jsonl").write_text(json.dumps({"config": "boot built 2 vCPUs", "outcome": "ok",
                                                "qemu_version": "10.0.2", "cpu": qemu.CPU}) + "\n" +
                                    json.dumps({"config": "exec storm Debian kernel, no Xen, TCG single",
                                                "outcome": "ok", "qemu_version": "10.0.2"}) + "\n")
    rows = census.load(str(d / "census.jsonl"))
    assert [r["config"] for r in rows] == ["boot built 2 vCPUs" + census.LAZY,
                                           "exec storm Debian kernel, no Xen, TCG single"]
    c = census.Census(str(tmp_path))
    lazy = FakeCfg()
    lazy.xen_fpu = "lazy"
    c.trial("boot built 2 vCPUs", lazy)
    c.trial("boot built 2 vCPUs", FakeCfg())
    assert [(r["config"], r["xen_fpu"]) for r in c.rows[2:]] == [("boot built 2 vCPUs" + census.LAZY, "lazy"),
                                                                 ("boot built 2 vCPUs", "eager")]
    assert len(c.done("boot built 2 vCPUs" + census.LAZY)) == 2 and len(c.done("boot built 2 vCPUs")) == 1


def test_a_broken_shape_is_caught_by_left_pages_or_a_finding_and_counted(tmp_path, fake_testbed, monkeypatch):
    from flushless.testbed import build
    from flushless.experiments import raceload
    monkeypatch.setattr(build, "Parts", lambda *a, **k: type("P", (), {"ensure": lambda self: self})())
    monkeypatch.setattr(census, "_cfg", lambda parts, **kw: FakeCfg())
    # Per boot: rounds that left pages, findings. The control catches nothing.
    boots = iter([(3, []), (0, ["dom0: BUG: Bad page state in process forkbench"]), (0, [])])
    state = {}

    def run(tb, smp, rounds, switch=True):
        state["left"], state["found"] = next(boots)
        return {"rounds_read": rounds, "rounds_left_pages": state["left"], "deaths_by_signal": {},
                "load_failures": [], "death_lines": [], "summary": "s"}
    monkeypatch.setattr(raceload, "run", run)
    fake_testbed.take_findings = lambda self: state["found"]
    c = census.Census(str(tmp_path), dict(census.QUICK, fixtures=3), only="free-to-the-page-allocator,")
    c.run_fixtures()
    rows = c.done(census.fixture_config("free-to-the-page-allocator"))
    assert [r["outcome"] for r in rows] == ["caught", "caught", "ok"], rows
    cell = census.table(c.rows, link_prefix="").splitlines()[-1]
    assert "1 of 3 ok, 30 rounds (3 left pages)" in cell and "caught 2" in cell, cell
