"""Integration: off is stock. The built kernel with the cache never switched on, against the
same source and config without the series (--kernel vanilla), on the same boot plan: one
vCPU under -icount, strict mode, ASLR off. Every IOMMU counter per operation must agree, and
the series' static key must be off, also after the cache was switched on and off again.

The timing side (-icount medians) stays in `flushless series offstock`; test_offstock_timing
(slow) runs it.
"""

import pytest

from flushless import build, measure, series
from flushless.testbed import BootConfig, Testbed

pytestmark = pytest.mark.testbed

CASES = (("fork+exit", ["--n", "200", "--warmup", "100"]),
         ("fork+exec+exit", ["--n", "100", "--exec", "--warmup", "100"]))
# Xen's IOMMU counters (patches/xen 0001 and upstream's superpage ones).
IOMMU = sorted(list(measure.COUNTERS.values()) + list(measure.SUPERPAGE_COUNTERS.values())
               + list(measure.NO_DMA_COUNTERS.values()))
STATS = "/sys/kernel/mm/ptcache/stats"


def per_op(kind, tmp_path):
    """{case: {counter: count over the case's operations}} on KIND's kernel; for the built one
    also its static key before anything and after a switch on and off."""
    parts = build.Parts(kind).ensure()
    cfg = BootConfig(xen=parts.xen.path("xen"), kernel=parts.kernel.path("vmlinuz"),
                     initramfs=parts.initramfs.path("initramfs.cpio.gz"), mode="strict", smp=1, icount=True)
    out, keys = {}, {}
    with Testbed(cfg, str(tmp_path / ("%s.log" % kind))) as tb:
        session = measure.Session(tb)
        session.set_aslr(False)
        assert session.has_ptcache() == (kind == "built")
        if kind == "built":
            keys["at_boot"] = measure.parse_stats(tb.check("cat " + STATS))["active"]
        for label, argv in CASES:
            rec = session.run("forkbench", argv)
            out[label] = {k: rec["counters"][k] for k in IOMMU}
        if kind == "built":
            keys["after_runs"] = measure.parse_stats(tb.check("cat " + STATS))["active"]
            session.configure_ptcache({"enabled": 1})
            tb.check("forkbench --n 20 >/dev/null")
            keys["while_on"] = measure.parse_stats(tb.check("cat " + STATS))["active"]
            session.configure_ptcache({"enabled": 0})
            # The key stays taken while declared tables are owed (processes alive since, or
            # tables in flight): the shell's own, given back within a grace period.
            for _ in range(20):
                stats = measure.parse_stats(tb.check("cat " + STATS))
                if not stats["active"]:
                    break
                tb.check("sleep 0.5")
            keys["after_switch_off"], keys["owed"] = stats["active"], stats["owed"]
    return out, keys


def test_cache_off_is_the_stock_kernel(tmp_path):
    vanilla, _ = per_op("vanilla", tmp_path)
    built, keys = per_op("built", tmp_path)
    print("vanilla", vanilla, "\nbuilt", built, "\nstatic key", keys)
    assert keys == {"at_boot": 0, "after_runs": 0, "while_on": 1, "after_switch_off": 0, "owed": 0}, keys
    # Each count within 1 %, or one event (a rare counter, 0 against 1, is no 100 % apart).
    # Superpage work is the exception: whether a map back completes a 2 MiB run depends on
    # where the allocator put the tables, which differs from boot to boot of the same kernel
    # (100 fork+exec+exit: 100, 105 and 105 coalesces in three boots of vanilla, 0 and 102 of
    # the built kernel, 2026-11-27). Each coalesce turns one skipped flush into a real one, so
    # flushes less coalesces and skipped flushes plus coalesces are compared, and the
    # coalesces bounded: at most two levels per map.
    for label, _ in CASES:
        v, b = without_superpages(vanilla[label]), without_superpages(built[label])
        for k in v:
            assert abs(v[k] - b[k]) <= max(1, 0.01 * max(v[k], b[k])), (label, k, vanilla[label], built[label])
        for c in (vanilla[label], built[label]):
            assert c["iommu_pt_coalesces"] <= 2 * c["iommu_map_type"], c
        assert built[label]["iommu_unmap_type"] > 500, built[label]


def without_superpages(c):
    """The counts that do not depend on where the allocator put the tables."""
    out = {k: v for k, v in c.items() if k not in ("iommu_pt_coalesces", "iommu_pt_shatters")}
    out["qi_iotlb_inv"] -= c["iommu_pt_coalesces"]
    out["qi_iotlb_inv_skipped"] += c["iommu_pt_coalesces"]
    return out


@pytest.mark.slow
def test_offstock_timing(tmp_path):
    summary = series.offstock(str(tmp_path / "results"), str(tmp_path))
    for what in ("fork", "exec"):
        assert summary[what]["within_0_3_pct"], summary
