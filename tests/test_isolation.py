"""Integration: DMA isolation under concurrency and from the device's side.

swrace runs mark, unmark, pin, unpin and give-back on the same frames from threads on
every vCPU and checks after each round that no page table, marked or freed page is in
dom0's IOMMU. The testbed-only delay (testbed/xen/) widens the window between a page's
state change and its IOMMU update; with it the test must find the race of the design
before issue 8 (tests/fixtures/xen-old-design) and none in patches/xen.

iotlbrace checks what the audit cannot see, the device's IOTLB: a page marked in a batch
(one shared flush, patches/xen 0003) is pinned inside the flush's widened window and the
edu device reads it, with two pages marked (a domain-wide flush) and one (page-selective).
It must fail with the batch letting its pages go before the flush
(tests/fixtures/xen-shared-flush-broken). Under Xen's fault injection (testbed/xen) it also
shows that a failed flush after a mark crashes the domain (and finds a Xen that only reports
it, tests/fixtures/xen-fail-open), and that the audit flags a page table a forgotten unmap
left readable by the device.

dmasweep lets QEMU's edu device read dom0's frames after a busy state, the cache off and
on; QEMU's own VT-d trace says which reads were refused. FLUSHLESS_DMASWEEP_FRAMES sets
how many frames (0: every frame of dom0's RAM, about 17 minutes per sweep).
"""

import glob
import json
import os

import pytest

from flushless.testbed import build, findings
from flushless.experiments import dmasweep, measure
from flushless.testbed.build import REPO
from flushless.testbed.boot import BootConfig, Crashed, Testbed

pytestmark = pytest.mark.testbed

DELAY = ("iommu-test-map-delay=500",)
# Xen's debug build fails an ASSERT in stock code under swrace's link and pintree ops, with none
# of our patches (reproduced on Debian's 4.20 with testbed/xen only, strict and relaxed,
# 2026-11-27; 3 of 3 widened runs), gone with pv-linear-pt=false. It is to be reported
# privately to the Xen security team; the details stay out of this repository until then.
# Linux guests make no linear page tables: the debug runs below go without them; the
# release-build runs keep them (the slow test below, test_designs, test_guests).
NO_LINEAR = ("pv-linear-pt=false",)
OLD_DESIGN = sorted(glob.glob(os.path.join(REPO, "tests", "fixtures", "xen-old-design", "*.patch")))
# iotlbrace: the shared flush of a batch of marks waits 500 ms, longer than the pin (50 ms in)
# and the device's read of the pinned page (three DMAs of 100 ms).
FLUSH_DELAY = ("iommu-test-flush-delay=500000",)
SHARED_FLUSH_BROKEN = sorted(glob.glob(os.path.join(REPO, "tests", "fixtures", "xen-shared-flush-broken", "*.patch")))
# A failed flush after a mark's unmap only reported, the domain going on.
FAIL_OPEN = sorted(glob.glob(os.path.join(REPO, "tests", "fixtures", "xen-fail-open", "*.patch")))
SWRACE = ["--rounds", "5000", "--seconds", "0"]
CHURN = ["--duration", "10", "--rate", "600", "--tabs", "4", "--resident", "8"]
SWEEP_FRAMES = os.environ.get("FLUSHLESS_DMASWEEP_FRAMES", "1500")


def boot(parts, tmp_path, **kw):
    cfg = BootConfig(xen=parts.xen.path("xen"), kernel=parts.kernel.path("vmlinuz"),
                     initramfs=parts.initramfs.path("initramfs.cpio.gz"), mode="strict", **kw)
    return Testbed(cfg, str(tmp_path / "console.log"))


def swrace(parts, tmp_path, xen_args=NO_LINEAR):
    with boot(parts, tmp_path, xen_args=xen_args) as tb:
        rec = measure.Session(tb).run("swrace", SWRACE)
    # Every operation ran and succeeded often: the rounds did interleave them.
    assert rec["rounds"] == 5000, rec["result"]
    for row in rec["rows"]:
        assert row["ok"] > 100, rec["rows"]
    return rec


# The series on Xen's release build, with linear page tables as Xen offers them by default and
# the window widened: beyond make test's budget, make test-all runs it.
@pytest.mark.slow
def test_swrace_no_bad_state_with_linear_page_tables(tmp_path):
    rec = swrace(build.Parts("debian").ensure(), tmp_path, DELAY)
    assert rec["bad_states"] == 0 and rec["invariant_violations"] == 0, rec["result"]


def test_swrace_no_bad_state_with_the_window_widened(tmp_path):
    rec = swrace(build.Parts("debian", debug=True).ensure(), tmp_path, NO_LINEAR + DELAY)
    assert rec["bad_states"] == 0 and rec["invariant_violations"] == 0, rec["result"]


def test_swrace_finds_the_old_designs_race(tmp_path):
    # The same test against the design it was written to catch: it must fail there, and the
    # run with it (swrace exits 3, flushless raises on the record).
    with pytest.raises(measure.VerdictError, match="bad state") as e:
        swrace(build.Parts("debian", xen_series=OLD_DESIGN, debug=True).ensure(), tmp_path, NO_LINEAR + DELAY)
    assert e.value.rec["bad_states"] > 0, e.value.rec["result"]


# Two pages marked in one call: a domain-wide flush; one page: a page-selective one.
MARKS = {"two": [], "one": ["--one"]}


def iotlbrace(parts, tmp_path):
    """Both shapes in one boot: {shape: the run's record, or the VerdictError it raised}."""
    out = {}
    with boot(parts, tmp_path, xen_args=FLUSH_DELAY) as tb:
        session = measure.Session(tb)
        for shape, args in MARKS.items():
            try:
                out[shape] = rec = session.run("iotlbrace", ["--rounds", "8", "--wait-ms", "50"] + args)
            except measure.VerdictError as e:
                out[shape] = e
                rec = e.rec
            print("iotlbrace %s:" % shape, rec["result"])
            # Every round the device read F first (so its IOTLB held F) and could not once F was
            # a page table after the flush: the check sees both outcomes.
            assert rec["warm_ok"] == rec["rounds"] == 8 and rec["after_faulted"] == 8, rec["result"]
    return out


def test_iotlbrace_no_page_table_read_through_a_stale_iotlb(tmp_path):
    # patches/xen 0003: the batch holds its pages until the shared flush, so a pin inside the
    # window is refused, and the device never reads F as a page table. Most rounds must land
    # in the window (host scheduling can delay a thread past it: such rounds prove nothing).
    for shape, rec in iotlbrace(build.Parts("debian", debug=True).ensure(), tmp_path).items():
        assert not isinstance(rec, Exception), (shape, rec)
        assert rec["pinned_in_window"] == 0 and rec["bad_reads"] == 0, (shape, rec["result"])
        assert rec["refused_in_window"] >= 5, (shape, rec["result"])


def test_iotlbrace_finds_the_broken_shared_flush(tmp_path):
    # The same test where the batch lets its pages go before the flush: it must fail there,
    # after the domain-wide flush and after the page-selective one.
    out = iotlbrace(build.Parts("debian", xen_series=build.patches("xen") + SHARED_FLUSH_BROKEN,
                                debug=True).ensure(), tmp_path)
    for shape, e in out.items():
        assert isinstance(e, measure.VerdictError) and "read a page table" in str(e), (shape, e)
        assert e.rec["pinned_in_window"] >= 5 and e.rec["bad_reads"] > 0, (shape, e.rec["result"])


def fault_runs(parts, tmp_path, xen_args, modes, allow=()):
    """iotlbrace's one pass per MODE, in one boot, under Xen's fault injection: [(status, the
    'mode' line's fields, its output)]. ALLOW: what Xen's console may say of them."""
    out = []
    with boot(parts, tmp_path, xen_args=xen_args) as tb:
        tb.allow_findings(*allow)
        for mode in modes:
            status, lines = tb.run("iotlbrace --%s" % mode, timeout=300)
            fields = [dict(kv.split("=", 1) for kv in line.split()[2:]) for line in lines
                      if line.startswith("mode ")]
            out.append((status, fields[0] if fields else None, lines))
    return out


@pytest.mark.parametrize("patches", [2, 5])
def test_a_failed_flush_after_a_mark_crashes_the_domain(tmp_path, patches):
    # The mark's page-selective flush fails (as after a device-TLB timeout): Xen crashes the
    # domain, here the hardware domain, before the page can become a page table whose unmap
    # would find nothing to flush. Nothing after the mark runs. With the marks alone (0001-0002,
    # the mark flushes itself) and with the series (0003: the batch's shared flush).
    series = build.patches("xen")[:patches]
    with pytest.raises(Crashed) as e:
        fault_runs(build.Parts("debian", xen_series=series).ensure(), tmp_path, ("iommu-test-flush-fail=1",),
                   ["after-failed-flush"])
    assert "dom0 crashed" in str(e.value) and "injected a failed IOTLB flush" in str(e.value), e.value
    assert "marked rc=" not in str(e.value), e.value


def test_the_failed_flush_test_finds_a_fail_open_xen(tmp_path):
    # Where the failure is only reported, the device reads the page table through the IOTLB.
    (status, mode, lines), = fault_runs(
        build.Parts("debian", xen_series=build.patches("xen") + FAIL_OPEN).ensure(), tmp_path,
        ("iommu-test-flush-fail=1",), ["after-failed-flush"])
    assert status == 3 and mode and mode["device_read"] == "1" and mode["mark_rc"] != "0", lines


def test_the_audit_flags_what_the_device_can_read(tmp_path):
    # A Xen that forgets one unmap (testbed knob): F, pinned as an L1 table, stays in the IOMMU.
    # The device reads it, and the audit flags it. The next pass has every unmap: neither.
    (s1, m1, out1), (s2, m2, out2) = fault_runs(
        build.Parts("debian").ensure(), tmp_path, ("iommu-test-skip-unmap=1",),
        ["pin-and-read", "pin-and-read"], allow=("is in the IOMMU", findings.DMA_FAULT))
    assert m1 and m1["pin_rc"] == "0" and s1 == 3 and m1["device_read"] == "1", out1
    assert int(m1["audit"], 16) & 0x60 == 0x60, out1  # MAPPED and VIOLATION
    assert m2 and m2["pin_rc"] == "0" and s2 == 0 and m2["device_read"] == "0", out2
    assert int(m2["audit"], 16) & 0x60 == 0, out2


def kernel_page_tables(tb):
    """The kernel's own count of its page-table pages."""
    kb, = [int(x.split()[1]) for x in tb.check("grep ^PageTables: /proc/meminfo")]
    return kb // 4


@pytest.fixture(scope="module")
def sweep_session(tmp_path_factory):
    # The release builds: under -icount, dom0 reached its shell after 162 s on Xen's debug
    # build against 24 s on its release build (2026-11-27), and the sweep is the device's view,
    # which Xen's ASSERTs do not change. swrace and iotlbrace run on the debug build.
    parts = build.Parts("built").ensure()
    with boot(parts, tmp_path_factory.mktemp("dmasweep"), icount=True) as tb:
        yield measure.Session(tb)


@pytest.mark.parametrize("cache", ["off", "on"])
def test_dmasweep_after_churn(sweep_session, cache):
    sweep_session.configure_pool(measure.cache_settings(cache == "on"))
    churn = sweep_session.run("churn", CHURN)
    assert churn["invariant_violations"] == 0
    rec = sweep_session.run("dmasweep", ["--max-frames", SWEEP_FRAMES])
    print("dmasweep cache %s: %s" % (cache, json.dumps({k: v for k, v in rec.items() if k not in (
        "rows", "counters", "per_op", "args", "audit")}, sort_keys=True)))
    assert rec["control_read_ok"], rec
    # Every page table Xen's audit lists, and as many as the kernel counts, was read as one;
    # few frames changed kind meanwhile.
    kernel_tables = kernel_page_tables(sweep_session.tb)
    # Frames change kind during the sweep: after churn the cache takes back the tables in
    # flight and its policy trims the pools. With the cache on 137 of the 1501 frames read
    # (9.1 %), the same in each run under -icount (2026-11-27; cache off 0): at most 15 %.
    bad = dmasweep.against_audit(rec, rec["audit"], kernel_tables, max_unstable=0.15)
    print("dmasweep: %d of %d frames read changed kind" % (rec["result"]["unstable"], rec["result"]["frames"]))
    print("dmasweep: kernel page tables %d, audit page tables %d" % (kernel_tables, rec["audit"]["page_tables"]))
    assert not bad, bad
    assert rec["writable_frames"] > 0, rec
    assert rec["pagetable_frames_readable"] == 0, rec
    assert rec["writable_frames_faulted"] == 0, rec
