"""The device I/O stage (flushless/experiments/device_io.py): QEMU's trace read right, and on the testbed an
NVMe disk's DMA counted beside the busy state, the cache off and on."""

import pytest

from flushless.testbed import build
from flushless.experiments import device_io
from flushless.experiments.results import write_experiment

SID = device_io.NVME_SID
# QEMU 10's log backend, with and without -msg timestamp=on. Only what falls within the disk's
# DMA (its first translation to its last) counts: the first and the last two lines are outside.
TRACE = """vtd_inv_desc_iotlb_pages iotlb invalidate domain 0x0 addr 0x9000 mask 0x0
vtd_iotlb_page_update IOTLB page update sid 0x%(sid)x iova 0x1000 slpte 0x1003 domain 0x0
vtd_iotlb_page_hit IOTLB page hit sid 0x%(sid)x iova 0x1000 slpte 0x1003 domain 0x0
vtd_inv_desc_iotlb_pages iotlb invalidate domain 0x0 addr 0x5000 mask 0x0
vtd_iotlb_page_hit IOTLB page hit sid 0x8 iova 0x1000 slpte 0x1003 domain 0x0
vtd_inv_desc_iotlb_pages iotlb invalidate domain 0x0 addr 0x200000 mask 0x9
vtd_inv_desc_iotlb_domain iotlb invalidate whole domain 0x0
vtd_inv_desc_iotlb_global iotlb invalidate global
vtd_iotlb_reset IOTLB reset (reason: iotlb exceeds size limit)
vtd_dmar_fault sid 0x8 fault 5 addr 0x9000 write 1
vtd_dmar_fault sid 0x%(sid)x fault 5 addr 0xa000 write 1
1234@1700000000.000001:vtd_iotlb_page_hit IOTLB page hit sid 0x%(sid)x iova 0x2000 slpte 0x2003 domain 0x0
vtd_inv_desc_iotlb_domain iotlb invalidate whole domain 0x0
vtd_iotlb_page_hit IOTLB page hit sid 0x8 iova 0x1000 slpte 0x1003 domain 0x0
""" % {"sid": SID}


def test_the_trace_is_counted_for_the_disk_and_over_its_dma_only():
    c = device_io.parse_trace(TRACE.splitlines())
    assert c == {"translations": 3, "hits": 2, "misses": 1, "faults": 1, "resets": 1, "inv_pages": 2,
                 "inv_pages_4k": 1 + 512, "inv_domain": 1, "inv_global": 1}
    assert device_io.parse_trace(TRACE.splitlines()[:1]) == dict.fromkeys(device_io.COUNTS, 0)


def test_a_read_must_be_translated_unrefused_and_seen_by_xen():
    row = fake_row("strict", "busy", "off", 64, 10, 100)
    device_io.check_row(row)
    for change, message in (({"translations": 1000}, "translations of the disk's DMA"),
                            ({"faults": 1}, "refused 1 of the disk's DMAs"),
                            ({"qi_iotlb_inv": 97}, "saw 100 invalidations within the read, Xen counted 97")):
        with pytest.raises(device_io.ToolError, match=message):
            device_io.check_row(dict(row, **change))
    device_io.check_row(dict(row, qi_iotlb_inv=98))  # one at each end of the read (check_row's docstring)


def test_per_gib_scales_every_count():
    row = dict({k: 0 for k in device_io.COUNTS + device_io.XEN_COUNTS}, bytes=device_io.GIB // 4, misses=5,
               translations=100, qi_iotlb_inv=3)
    device_io.per_gib(row)
    assert row["misses_per_gib"] == 20 and row["qi_iotlb_inv_per_gib"] == 12 and row["miss_ratio"] == 0.05


def test_the_strict_boot_interleaves_cache_off_and_on():
    plan = device_io.Plan(reads=((64, 1),), rounds=2, rates=(100, 200), side_rate=100)
    runs = device_io.strict_plan(plan)
    assert [x[1:] for x in runs if x[0] == 0] == [
        ((64, 1), "idle", 0, False), ((64, 1), "busy", 100, False), ((64, 1), "busy", 100, True),
        ((64, 1), "busy", 200, False), ((64, 1), "busy", 200, True)]
    assert [x[1:] for x in runs if x[0] == 1][1:3] == [((64, 1), "busy", 100, True), ((64, 1), "busy", 100, False)]


@pytest.mark.testbed
def test_the_disks_dma_beside_the_busy_state(tmp_path):
    """make reproduce's io stage in its quick form, the strict boot only: the busy state's
    page-table churn sends about nine invalidations per process creation with the cache off and
    next to none with it on, as the device sees them within its DMA."""
    plan = device_io.PLANS["quick"]
    parts = build.Parts("built", linux_series=build.testbed_linux_series()).ensure()
    rows = device_io.measure_boots(parts, plan, str(tmp_path), print, boots=device_io.BOOTS[:1])
    for r in rows:
        print({k: r[k] for k in ("block_kb", "condition", "cache", "creations", "translations", "misses",
                                 "inv_pages", "inv_domain", "qi_iotlb_inv", "iommu_pt_coalesces")})
        # Every read was translated, unrefused, and Xen counted what the device saw (check_row).
        assert r["invariant_violations"] == 0, r
    for block, _ in plan.reads:
        off, on = ([r for r in rows if r["block_kb"] == block and r["condition"] == "busy" and r["cache"] == c]
                   for c in ("off", "on"))
        per_creation = [sum(r["inv_pages"] + r["inv_domain"] for r in x) / sum(r["creations"] for r in x)
                        for x in (off, on)]
        assert per_creation[0] > 5 and per_creation[1] < 0.02 * per_creation[0], (block, per_creation)
    assert (tmp_path / "io-strict.log.vtd-faults.gz").stat().st_size > 0


def fake_row(boot, condition, cache, block, misses, inv_pages, inv_domain=0, creations=0.0, rate=0):
    row = dict({k: 0 for k in device_io.COUNTS + device_io.XEN_COUNTS}, boot=boot, condition=condition,
               cache=cache, block_kb=block, rate_per_min=rate, round=0, bytes=device_io.GIB, seconds=1.0, mbps=1.0,
               creations=creations, churn_per_s=creations / 60, translations=262144, hits=262144 - misses,
               misses=misses, inv_pages=inv_pages, inv_domain=inv_domain, qi_iotlb_inv=inv_pages + inv_domain,
               invariant_violations=0)
    return device_io.per_gib(row)


def test_the_report_answers_from_every_boots_rows(tmp_path):
    from flushless.report import sections
    rows = []
    for b in (4, 64):
        rows += [fake_row("strict", "idle", "off", b, 20, 0), fake_row("strict", "busy", "off", b, 900, 9000, 50,
                                                                       1000.0, 8672),
                 fake_row("strict", "busy", "on", b, 25, 5, 0, 1000.0, 8672),
                 fake_row("caching-mode", "busy", "off", b, 40, 18000, 0, 1000.0, 2168),
                 fake_row("relaxed", "busy", "-", b, 0, 0, 0, 1000.0, 2168),
                 fake_row("grants", "grant per request", "-", b, 300000, 2 ** 30 // (b * 1024)),
                 fake_row("grants", "persistent grants", "-", b, 30, 0)]
    write_experiment(str(tmp_path), "io", {"device": "a fake disk"}, rows, summary=device_io.summary(rows))
    page = " ".join(sections.io_html(str(tmp_path), str(tmp_path)).split())
    assert (tmp_path / "io.png").stat().st_size > 10000
    assert "9.0 page-selective and 0.050 domain-wide" in page and "17.6 extra misses" in page
    assert "grant per request sent 262144 invalidations per GiB of 4 KiB reads (1.00 per read, 0 % of them" in page
    assert "against 0 with persistent grants" in page
    # 6.1 million 4 KiB reads a second at 200 Gbit/s, 2 us of a CPU's wait each: twelve CPUs' worth.
    assert "at 200 Gbit/s 1221 % (12.2 times all of it)" in page
