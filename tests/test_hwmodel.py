"""The hardware-time model (evaluation/hwmodel.py): its constants, sweep and savings."""

import json
import statistics

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


# --- the line-rate estimate of the io stage ---------------------------------------------------

def io_row(boot, cache, condition, misses, inv_pages, inv_domain=0, creations=100.0, block=64, rate=2168):
    return {"boot": boot, "cache": cache, "condition": condition, "block_kb": block, "misses": misses,
            "inv_pages": inv_pages, "inv_domain": inv_domain, "inv_global": 0, "creations": creations,
            "bytes": 2 ** 30, "seconds": 2.0, "rate_per_min": rate if condition == "busy" else 0}


IO_ROWS = [io_row("strict", "off", "idle", 10, 0, creations=0), io_row("strict", "off", "busy", 10, 900),
           io_row("strict", "off", "busy", 12, 1800, creations=200.0),
           io_row("strict", "off", "busy", 170, 900, 10, rate=8672), io_row("strict", "on", "busy", 10, 1),
           io_row("relaxed", "-", "idle", 0, 0, creations=0), io_row("relaxed", "-", "busy", 0, 0),
           io_row("grants", "-", "persistent grants", 40, 0, creations=0),
           io_row("grants", "-", "grant per request", 1040, 262144, creations=0)]


def test_every_io_constant_has_a_source_and_a_range():
    io_c, inv_c = hwmodel.load_io_constants()
    assert set(inv_c) == {"t_inv", "t_inv_domain"}
    for name, c in io_c.items():
        assert c["source"] and c["unit"], name
        if name != "w_refill":  # its floor is measured
            assert c["low"] <= c["value"] <= c["high"], name


def test_io_inputs_are_per_creation_and_per_domain_flush():
    inp = hwmodel.io_inputs(IO_ROWS)
    off = inp["configs"]["strict/off/64"]
    assert off["page_inv_per_creation"] == pytest.approx(3600 / 400)
    assert off["domain_inv_per_creation"] == pytest.approx(10 / 400)
    # The one read with domain-wide invalidations: 170 misses against 10 idle, over 10 of them.
    assert inp["w_refill"] == pytest.approx(16.0)
    assert [x["inv_domain"] for x in inp["domain_by_rate"]["strict/off"]] == [0, 10]
    # The line through the reads without a domain-wide invalidation, the cache off and on.
    slope = statistics.linear_regression([900, 1800, 1], [10, 12, 10]).slope
    assert off["misses_per_1000_page_inv"] == pytest.approx(1000 * slope, abs=0.001)
    grant = inp["configs"]["grants/grant per request/64"]
    assert grant["extra_page_inv_per_gib"] == 262144 and grant["extra_misses_per_gib"] == 1000


def test_the_loss_is_the_model_at_every_point():
    m = hwmodel.io_model(IO_ROWS)
    by = {(r["config"], r["gbps"]): r for r in m["rows"]}
    v = hwmodel.point(m["constants"])
    inp = m["inputs"]["configs"]["strict/off/64"]
    for gbps in hwmodel.IO_GBPS:
        page, dom = (inp[k] * v["creations_per_s"] for k in ("page_inv_per_creation", "domain_inv_per_creation"))
        walks = dom * v["w_refill"] + inp["idle_misses_per_gib"] * gbps * 1e9 / hwmodel.GIB_BITS
        want = (dom * v["w_refill"] * v["t_walk"] + min(page * v["psc_share"], walks) * v["t_psc"]) / 1e6
        r = by[("stock strict", gbps)]
        assert r["loss"] == pytest.approx(want) and r["loss_low"] <= r["loss"] <= r["loss_high"]
        assert r["cpu_share"] == pytest.approx((page * v["t_inv"] + dom * v["t_inv_domain"]) / 1e6)
        assert r["loss"] > by[("the cache", gbps)]["loss"] and by[("relaxed", gbps)]["loss"] == 0
    # A grant per request: its invalidations and misses grow with the bytes.
    g10, g200 = by[("a domU's disk, grant per request", 10)], by[("a domU's disk, grant per request", 200)]
    assert g200["invalidations_per_s"] == pytest.approx(20 * g10["invalidations_per_s"])
    assert g200["cpu_share"] == pytest.approx(20 * g10["cpu_share"])
    shares = [x["loss"] for x in m["psc_sensitivity"]]
    assert shares == sorted(shares) and shares[0] < shares[-1]
