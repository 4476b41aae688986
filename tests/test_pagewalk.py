"""The page-walk model (evaluation/pagewalk.py): walks counted as the model states them, and a
calibration that finds the constants a curve was made with."""

import random

from evaluation import pagewalk as pw


def test_tlb_bench_order_is_a_permutation_and_fixed_by_the_seed():
    order = pw.tlb_bench_order(4096)
    assert sorted(order) == list(range(4096))
    assert order == pw.tlb_bench_order(4096) and order != pw.tlb_bench_order(4096, seed=2)


def test_lru_cache_keeps_the_most_recent_keys():
    c = pw.Cache(4, 2)  # 2 sets of 2 ways
    assert not c.access(0) and not c.access(2) and c.access(0)
    assert not c.access(4)  # set 0 is full: 2, the least recent, goes
    assert c.access(0) and not c.access(2)


def test_walks_native_shadow_nested():
    # Inside the L1 TLB: no walk at all.
    for mode in pw.MODES:
        counts = pw.walk_counts(16, mode)
        assert counts["tlb_miss"] == 0 and pw.walk_refs(counts) == 0
    # Beyond the L2 TLB (3,072 entries), the benchmark's random cycle misses on every load
    # (LRU), and a native walk takes the leaf entry at least.
    native = pw.walk_counts(8192, "native")
    nested = pw.walk_counts(8192, "nested")
    assert native["tlb_miss"] == 1.0
    assert 1.0 <= pw.walk_refs(native) < 4.0
    # Nested: the data page's guest-physical address needs a host walk as well.
    assert pw.walk_refs(nested) >= pw.walk_refs(native) + 1.0
    assert pw.walk_refs(nested) <= 24.0
    # Shadow paging walks the same 4 levels as native.
    assert pw.predict(32768, "shadow", _fitted())["ns"] == pw.predict(32768, "native", _fitted())["ns"]


def test_smaller_walk_caches_cost_more_references():
    small = dict(pw.PARAMS, pwc=dict(pw.PARAMS["pwc"], entries=1, ways=1),
                 nested_tlb=dict(pw.PARAMS["nested_tlb"], entries=1, ways=1))
    for mode in ("native", "nested"):
        assert pw.walk_refs(pw.walk_counts(8192, mode, small)) > pw.walk_refs(pw.walk_counts(8192, mode))


def _fitted(base=1.2, ref=9.0, l2=3.0):
    return dict(pw.PARAMS, base_ns=dict(pw.PARAMS["base_ns"], value=base), ref_ns=dict(pw.PARAMS["ref_ns"], value=ref),
                l2_dtlb=dict(pw.PARAMS["l2_dtlb"], ns=l2))


def test_calibration_finds_the_constants_a_curve_was_made_with():
    truth = _fitted(1.2, 9.0, 3.0)
    levels = pw.PARAMS["cloud_host_levels"]["value"]
    rng = random.Random(1)
    rows = [{"size_kb": kb, "ns_per_access": pw.predict(kb, "nested", truth, levels)["ns"] * (1 + rng.uniform(-0.002, 0.002))}
            for kb in (4 << i for i in range(14))]
    params, fit = pw.calibrate(rows)
    assert fit["rms_rel"] < 0.005, fit
    assert abs(params["base_ns"]["value"] - 1.2) < 0.05
    assert abs(params["l2_dtlb"]["ns"] - 3.0) < 0.1
    assert abs(params["ref_ns"]["value"] - 9.0) < 0.1
