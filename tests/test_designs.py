"""Integration: the xen-only design (patches/xen-only, the guest unchanged) keeps DMA isolation
and batches the flushes it claims to batch.

Its safety rests on the order of a batched pin: the tree's writable pages leave the IOMMU and
the IOTLB is flushed once before any of them is validated, and validation still unmaps each
page it types. swrace pins trees (MMUEXT_PIN_L2/L3/L4_TABLE) while other vCPUs link, unpin,
mark and give back the same frames, with the testbed-only delay widening every IOMMU map; the
version that trusts the first pass and skips validation's unmap
(tests/fixtures/xen-only-broken) must fail it.
"""

import glob
import os

import pytest

from flushless.testbed import build
from flushless.experiments import designs, dmasweep, measure
from flushless.testbed.build import REPO
from flushless.testbed.boot import BootConfig, Testbed

pytestmark = pytest.mark.testbed

DELAY = ("iommu-test-map-delay=500",)
BROKEN = sorted(glob.glob(os.path.join(REPO, "tests", "fixtures", "xen-only-broken", "*.patch")))
XEN_ONLY = designs.DESIGNS["xen-only"]
# Stock strict Xen with an unchanged guest, measured (docs/linux-series.md, `flushless series flushes`):
# 9.36-10.47 invalidations per fork+exit at 1-8 vCPUs, 18.7-19.5 per fork+exec.
STOCK_FORK_EXIT = 9.36


def boot(parts, tmp_path, **kw):
    cfg = BootConfig(xen=parts.xen.path("xen"), kernel=parts.kernel.path("vmlinuz"),
                     initramfs=parts.initramfs.path("initramfs.cpio.gz"), mode="strict", **kw)
    return Testbed(cfg, str(tmp_path / "console.log"))


def swrace(series, tmp_path, rounds):
    with boot(build.Parts("debian", xen_series=series).ensure(), tmp_path, xen_args=DELAY) as tb:
        rec = measure.Session(tb).run("swrace", ["--rounds", str(rounds), "--seconds", "0"])
    assert rec["rounds"] == rounds, rec["result"]
    return rec


def test_xen_only_swrace_with_the_window_widened(tmp_path):
    # 3,000 rounds: the broken shape below fails from round 195 on; make test's budget.
    rec = swrace(XEN_ONLY.xen_series(), tmp_path, 3000)
    ok = {r["op"]: r["ok"] for r in rec["rows"]}
    # Trees were pinned and the first pass took pages out: the batched path ran, concurrently.
    assert ok["pintree"] > 100 and ok["link"] > 100, rec["rows"]
    assert rec["counters"]["pin_batch_unmap"] > 100 and rec["counters"]["pin_batch_flush"] > 100, rec["counters"]
    assert rec["bad_states"] == 0 and rec["invariant_violations"] == 0, rec["result"]


@pytest.mark.skipif(not os.environ.get("FLUSHLESS_RACE_FIXTURES"),
                    reason="a Xen build and a boot for a broken shape: FLUSHLESS_RACE_FIXTURES=1")
def test_swrace_finds_the_broken_batched_pin(tmp_path):
    with pytest.raises(measure.VerdictError, match="bad state") as e:
        swrace(XEN_ONLY.xen_series() + BROKEN, tmp_path, 2000)
    assert e.value.rec["bad_states"] > 0, e.value.rec["result"]


# Counts of an alternative design, not of the series: make reproduce's designs stage measures
# the same and stops on a failed isolation verdict; make test-all runs this one (39 s).
@pytest.mark.slow
def test_xen_only_counts_and_dmasweep(tmp_path):
    # One -icount boot (edu's DMA timer then costs no host time), 2 vCPUs, ASLR off.
    parts = XEN_ONLY.parts().ensure()
    with boot(parts, tmp_path, icount=True) as tb:
        session = measure.Session(tb)
        session.set_aslr(False)
        per_op = {}
        for label, argv in designs.FORKBENCH[:2]:
            rec = session.run("forkbench", argv)
            assert rec["invariant_violations"] == 0, rec["audit"]
            per_op[label] = rec["per_op"]
        sweep = session.run("dmasweep", ["--max-frames", os.environ.get("FLUSHLESS_DMASWEEP_FRAMES", "1500")])
    print("xen-only per operation: %s" % {k: {c: round(v[c], 3) for c in (
        "qi_iotlb_inv", "pin_batch_flush", "pin_batch_unmap", "pin_batch_remap", "iommu_unmap_type")}
        for k, v in per_op.items()})
    fork = per_op["fork+exit"]
    # Each fork pins two trees (the kernel's and the user's top level): one flush each for the
    # four or more pages their first pass took out. The L1 tables Linux pins one by one keep
    # theirs: measured 5.3-6.1 against stock's 9.4-9.7, so at least a quarter fewer.
    assert 1.9 <= fork["pin_batch_flush"] <= 2.5, fork
    assert fork["pin_batch_unmap"] >= 4, fork
    assert fork["pin_batch_flush"] < fork["qi_iotlb_inv"] <= 0.75 * STOCK_FORK_EXIT, fork
    assert sweep["control_read_ok"] and not dmasweep.against_audit(sweep, sweep["audit"]), sweep
    assert sweep["pagetable_frames_readable"] == 0 and sweep["writable_frames_faulted"] == 0, sweep
