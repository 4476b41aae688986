"""The hardware-time model (evaluation/hwmodel.py): its constants, sweep and savings."""

import json

import pytest

from evaluation import hwmodel

STOCK = {"instructions": 670000, "qi_iotlb_inv": 9.4, "iommu_map_type": 9.4, "hypercalls": 140, "ptwr_emulations": 11}
PAPER = {"instructions": 650000, "qi_iotlb_inv": 0.0, "iommu_map_type": 0.0, "hypercalls": 150, "ptwr_emulations": 11}
BATCHED = dict(STOCK, qi_iotlb_inv=7.0, pin_batch_flush=2.0)
CALIBRATION = {"fork": {"instructions": 195000, "host_us": 45.0, "host_runs_us": [45.0, 90.0, 60.0]},
               "exec": {"instructions": 640000, "host_us": 600.0},
               "shell": {"instructions": 1500000, "host_us": 1300.0}}


@pytest.fixture
def constants():
    return hwmodel.calibrate(hwmodel.load_constants(), CALIBRATION)


def test_every_constant_has_a_source_and_a_range(constants):
    for name, c in constants.items():
        assert c["source"] and c["unit"], name
        assert c["low"] <= c["value"] <= c["high"], name


def test_the_rate_is_calibrated_from_fork_over_the_host_runs(constants):
    c = constants["instr_per_us"]
    assert c["value"] == pytest.approx(195000 / 45.0) == pytest.approx(c["high"])
    assert c["low"] == pytest.approx(195000 / 90.0)
    # The other operations' rates are kept as a cross-check, not used.
    assert c["calibration"]["exec"]["instr_per_us"] == pytest.approx(640000 / 600.0, abs=0.1)


def test_no_calibration_is_an_error():
    with pytest.raises(ValueError, match="no calibration for fork"):
        hwmodel.calibrate(hwmodel.load_constants(), {"exec": CALIBRATION["exec"]})


def test_estimate_adds_each_term(constants):
    v = hwmodel.point(constants)
    comp = hwmodel.components(BATCHED)
    assert comp["qi_iotlb_inv_psi"] == pytest.approx(5.0)
    want = (670000 / v["instr_per_us"] + 5.0 * v["t_inv"] + 2.0 * v["t_inv_domain"] + 9.4 * v["t_map"]
            + 140 * v["t_hypercall"] + 11 * v["t_emulate"])
    assert hwmodel.estimate(comp, v) == pytest.approx(want)


def test_savings_are_swept_within_each_corner(constants):
    rows = hwmodel.model({"stock strict": {"fork": STOCK}, "paper": {"fork": PAPER}}, constants)
    stock = next(r for r in rows if r["design"] == "stock strict")
    paper = next(r for r in rows if r["design"] == "paper")
    assert stock["saving_vs_stock_strict"] == 0 and stock["saving_low"] == 0 == stock["saving_high"]
    assert 0 < paper["saving_low"] <= paper["saving_vs_stock_strict"] <= paper["saving_high"]
    assert paper["estimate_low_us"] <= paper["estimate_us"] <= paper["estimate_high_us"]
    # A slower invalidation makes the saving larger, never smaller.
    s = hwmodel.sensitivity({"stock strict": {"fork": STOCK}, "paper": {"fork": PAPER}}, constants, "paper", "fork")
    assert s["t_inv"][0] < s["t_inv"][1]


def test_the_report_names_every_source(constants):
    rows = hwmodel.model({"stock strict": {"fork": STOCK}, "xen-only": {"fork": BATCHED}}, constants)
    text = hwmodel.report_text(rows, constants, {op: {"below_baseline": b} for op, b in
                                                 (("fork", 0.11), ("exec", 0.17), ("shell", 0.21))})
    for c in constants.values():
        assert c["source"] in text
    assert "fork+exit 11%" in text and "xen-only" in text


def test_main_without_results_exits_2(tmp_path, capsys):
    assert hwmodel.main([str(tmp_path)]) == 2
    assert "designs.json" in capsys.readouterr().err


def test_main_prints_estimates(tmp_path, capsys):
    (tmp_path / "designs.json").write_text(json.dumps({
        "calibration": CALIBRATION, "per_op": {"stock strict": {"fork": STOCK}, "paper": {"fork": PAPER}}}))
    assert hwmodel.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "paper" in out and "source:" in out
