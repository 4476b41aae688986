"""Integration: a second domain (--guest). dom0 starts its toolstack and creates each kind of
domU with xl, from our kernel and dom0's own initramfs, and drives the domU's shell over its
PV console (flushless/experiments/guests.py).

pv-passthrough is the production case: a PV domU with a device (QEMU's edu) passed through,
whose memory Xen keeps in sync with the IOMMU by default. There the series must remove the
flushes the domU's page tables cost, as in dom0; a mark must never reach a frame of another
domain (dom0's, a free one, one granted to the domU, or the domU's from dom0); and swrace and
dmasweep, run in the domU, must find no page table the domU's device can reach. The PVH domUs
(hap=1, hap=0) are where seed 002's shadow against nested paging runs; here both boot in one
boot and run the seed stage's workloads, and Xen's counters must show the shadow paging.
"""

import re
import time

import pytest

from flushless.testbed import build
from flushless.experiments import designs, dmasweep, guests, measure, seed, workloads
from flushless.progress import ToolError
from flushless.testbed.boot import BootConfig, Testbed


def test_guest_refuses_bad_kinds_and_kernel_arguments():
    for kind, args in (("dom0", ()), ("hvm", ()), ("pvh-hap", ("a b",)), ("pvh-hap", ('x"y',))):
        with pytest.raises(ToolError):
            guests.Guest(None, kind, kernel_args=args)


def test_domu_measure_runs_in_the_domu_and_the_audit_in_dom0():
    guest = guests.Guest(None, "pv-passthrough")
    guest.domid = 3
    cmd = guests.GuestSession(None, guest).measure_command(workloads.get("forkbench"), ["--n", "20"])
    assert cmd.startswith("guestrun flushless-domu 'domu-measure -s forkbench --n 20'; rc=$?;"), cmd
    assert "xenpvsw audit 3" in cmd and cmd.endswith("(exit $rc)"), cmd


class ScriptedTestbed:
    """dom0's shell as Guest.start sees it: the toolstack starts, guestboot answers in turn."""

    def __init__(self, boots):
        self.boots = list(boots)

    def run(self, command, timeout):
        if command == "xenstack":
            return 0, ["xenstack ok"]
        assert command.startswith("guestboot "), command
        return self.boots.pop(0)


def test_a_domu_that_fails_to_start_quotes_what_xen_said_of_it(tmp_path):
    # A domU that reboots before its console is up (xl's state ---sr-) leaves its cause in
    # Xen's console only.
    tb = ScriptedTestbed([(3, ["guestboot: domain 2 created, waiting for its shell",
                               "guestboot: crashing crashed while booting (state ---sr-)"])])
    tb.console_log = str(tmp_path / "console.log")
    (tmp_path / "console.log").write_text("(XEN) HVM d2v0 save: CPU\n(XEN) d12v0 Triple fault\n"
                                          "(XEN) d2v0 Triple fault - invoking HVM shutdown action 1\n")
    with pytest.raises(ToolError) as e:
        guests.Guest(tb, "pvh-hap").start()
    said = str(e.value).split("(state ---sr-)")[1]
    assert said.strip() == "(XEN) d2v0 Triple fault - invoking HVM shutdown action 1", said


def test_a_domu_that_fails_to_start_is_not_created_again():
    # A crash while booting (exit 3), a stall or a dom0-side failure (exit 1): one attempt,
    # whose output the error carries.
    for boots in ([(3, ["guestboot: flushless-domu crashed while booting (state ---sr-)"])],
                  [(1, ["guestboot: flushless-domu did not reach its shell in 300 s"])],
                  [(1, ["guestboot: xl create failed"])]):
        tb = ScriptedTestbed(boots + [(0, ["guestboot ok 5"])])
        with pytest.raises(ToolError) as e:
            guests.Guest(tb, "pvh-hap").start()
        assert tb.boots == [(0, ["guestboot ok 5"])] and boots[0][1][0] in str(e.value), e.value
    tb = ScriptedTestbed([(0, ["guestboot ok 6"])])
    g = guests.Guest(tb, "pvh-hap")
    g.start()
    assert g.domid == 6


def boot(tmp_path, smp=2, **kw):
    parts = build.Parts("built", guest=True).ensure()
    cfg = BootConfig(xen=parts.xen.path("xen"), kernel=parts.kernel.path("vmlinuz"),
                     initramfs=parts.dom0_initramfs(), mode="relaxed", smp=smp, **kw)
    return Testbed(cfg, str(tmp_path / "console.log"))


# The seed stage's runs, which make reproduce runs and checks; make test-all runs this one
# (39 s), for make test's budget since the debug variant came in.
@pytest.mark.slow
@pytest.mark.testbed
def test_pvh_domus_with_hap_and_with_shadow_paging(tmp_path):
    """Both PVH kinds in one boot, with the seed stage's runs (seed 002). Not under -icount as
    in reproduce: there a PVH domU hangs now and then (docs/second-domain.md, "Seed 002 on Xen"); counts
    decide here, and they do not depend on it."""
    plan = seed.Plan(rounds=1, fork_max_kb=1024, fork_n=2, tlb_max_kb=64, tlb_accesses=1000, forks=20)
    with boot(tmp_path) as tb:
        paging, runs = seed.run_plan(tb, plan, print)
    # Xen's own word on how each domU's memory is translated.
    assert paging == {"hap1": "hap, 4 levels", "hap0": "shadowed 4-on-4"}, paging
    s = seed.summary(seed.rows_of(runs))
    print(s)
    # Under shadow paging Xen takes the faults of the fork's page-table writes; with nested
    # paging none.
    pf = s["per_fork"]
    assert pf["hap0"]["shadow_faults"] > 10 and pf["hap1"]["shadow_faults"] < 1, pf
    assert len(s["pagetable_bench"]) == 9 and len(s["tlb_bench"]) == 5, s


@pytest.fixture(scope="module")
def passthrough(tmp_path_factory):
    """One boot with the production case's domU for the tests below."""
    with boot(tmp_path_factory.mktemp("passthrough")) as tb, guests.Guest(tb, "pv-passthrough", vcpus=2) as g:
        yield tb, g


@pytest.mark.testbed
def test_a_domu_crashed_by_a_failed_flush_is_destroyed_whole(tmp_path):
    # The domU's mark of a page its device read fails its IOTLB flush (Xen's fault injection):
    # Xen crashes the domU, and holds none of its pages, so that destroying it frees all of
    # its memory and leaves no zombie domain. The domU waits for its flush in vain meanwhile.
    with boot(tmp_path, xen_args=("iommu-test-flush-fail=1",)) as tb:
        tb.allow_findings("domain_crash called from")
        # The pool off in the domU: with it on (the kernel's default where Xen keeps the domU's
        # memory in sync), the domU's own boot-time marks take the injected failure instead of
        # iotlbrace's, at a moment that depends on timing (2026-11-27: once in two runs).
        g = guests.Guest(tb, "pv-passthrough", vcpus=2, kernel_args=("xen_pgtable_pool=0",))
        g.start()
        free_before = int(tb.check("xl info free_memory")[-1].split()[-1])
        # xl list's state (5th field, "rbpscd") has a c once Xen crashed the domain.
        crashed = "xl list %s | awk 'NR == 2 && $5 ~ /c/' | grep -q ." % g.name
        tb.check("(guestrun %s 'iotlbrace --after-failed-flush' > /tmp/crash.out 2>&1 &) ; "
                 "for i in $(seq 60); do %s && break; sleep 2; done; %s" % (g.name, crashed, crashed),
                 timeout=300)
        tb.console_size()  # flushes the log
        assert "injected a failed IOTLB flush" in open(tb.console_log).read()
        g.domid = None  # Its console is dead: no log to read on the way out.
        tb.check("xl destroy %s" % g.name, timeout=120)
        lines = tb.check("for i in $(seq 30); do [ $(xl list | wc -l) = 2 ] && break; sleep 2; done; xl list")
        assert len(lines) == 2 and lines[1].startswith("Domain-0"), lines
        free_after = int(tb.check("xl info free_memory")[-1].split()[-1])
        # Every page of the domU came back (free_memory in MiB; the domU held 4 MiB more).
        assert free_after >= free_before + guests.MEM_MB, (free_before, free_after)


# Type-change unmaps per operation in the domU with the cache off and ASLR off (designs.FORKBENCH's
# shapes; measured 2026-11-25).
PASSTHROUGH_UNMAPS = {"fork+exit": 9.06, "fork+exec": 18.11, "fork+exit 64 MiB": 41.3}


@pytest.mark.testbed
def test_pv_passthrough_domu_cache_off_and_on(passthrough):
    tb, g = passthrough
    assert g.check("cat /sys/hypervisor/guest_type") == ["PV"]
    # The device is the domU's now (pcifront), and Xen keeps its IOMMU in sync.
    assert any("1234:11e8" in line.lower() for line in g.check("cat /sys/bus/pci/devices/*/uevent")), \
        "edu not in the domU"
    session = guests.GuestSession(tb, g)
    session.set_aslr(False)
    recs = {}
    for cache in (0, 1):
        session.configure_pool(measure.cache_settings(cache))
        for label, argv in designs.FORKBENCH:
            rec = session.run("forkbench", argv)
            assert rec["invariant_violations"] == 0, rec["audit"]
            recs[(cache, label)] = rec
    print({k: (round(v["per_op"]["qi_iotlb_inv"], 3), round(v["per_op"]["iommu_unmap_type"], 3),
               v["counters"]["iommu_pt_coalesces"]) for k, v in recs.items()})
    for label, _ in designs.FORKBENCH:
        c = recs[(0, label)]["counters"]
        # Cache off, ASLR off: about a strict dom0's type-change unmaps (tests/test_pool.py),
        # one flush each, plus a flush per superpage coalesce at most (1 of slack: Xen's
        # counters are read one at a time).
        assert recs[(0, label)]["per_op"]["iommu_unmap_type"] == pytest.approx(PASSTHROUGH_UNMAPS[label],
                                                                                rel=0.1), (label, c)
        assert (c["iommu_unmap_type"] - 1 <= c["qi_iotlb_inv"]
                <= c["iommu_unmap_type"] + c["iommu_pt_coalesces"] + 1), (label, c)
        # Cache on, warm: none.
        assert recs[(1, label)]["per_op"]["qi_iotlb_inv"] <= 0.05, (label, recs[(1, label)]["per_op"])


@pytest.mark.testbed
def test_a_domu_that_crashes_while_booting_fails_at_once(passthrough):
    # Its init exits: the domU kernel panics and Xen keeps the crashed domU (on_crash =
    # "preserve"). guestboot must see the crash, not wait out its 300 s, and destroy it.
    tb, _ = passthrough
    t0 = time.monotonic()
    with pytest.raises(ToolError) as e:
        guests.Guest(tb, "pvh-hap", name="crashing", kernel_args=("rdinit=/bin/false",)).start()
    print("a crashing domU: %.0f s" % (time.monotonic() - t0))
    assert "crashed while booting" in str(e.value) and "guestboot exited 3" in str(e.value), e.value
    # The domU's console tail, quoted: its panic is not taken for dom0's. Or, when the domU
    # triple-faulted before its console was up, Xen's word on it. Under multi-threaded TCG a
    # PVH domU's kernel faults now and then at its first PIT read (in $0x42 in
    # native_calibrate_cpu_early()), and the exception finds its IDT unreadable (cr2 =
    # idt_table+0x80, #DF's gate): 6 of 48 creations in this module's dom0, 2026-11-27 (5 of 24 with
    # dom0's log_buf_len=4M, 1 of 24 without); one of
    # Xen's dumps shows Xen's own RIP and CR3 as the guest's. None in the census's 100 under
    # -icount (single-threaded TCG): QEMU's SVM emulation around the I/O intercept, not
    # located further. Either way the domU crashed while booting, which is what guestboot
    # must report at once.
    text = str(e.value)
    panic = "domU| " in text and "Kernel Offset" in text
    triple = re.search(r"\(XEN\) d\d+v0 Triple fault", text)
    assert panic or triple, e.value
    assert time.monotonic() - t0 < 150
    assert tb.check("xl list | grep -c crashing || true") == ["0"]


def mark_results(lines):
    """xenpvsw mark's "MFN RC" lines -> [rc]."""
    return [int(line.split()[1]) for line in lines if line.startswith("0x")]


@pytest.mark.testbed
def test_marks_across_domains_are_refused(passthrough):
    tb, g = passthrough
    EINVAL, EPERM = -22, -1

    dom0_frames = tb.check("xenpvsw audit 0 writable | tail -n 4")
    domu_frames = tb.check("xenpvsw audit %d writable | tail -n 4" % g.domid)
    free_frames = tb.check("xenpvsw audit %d free | tail -n 4" % g.domid)
    assert len(dom0_frames) == len(domu_frames) == len(free_frames) == 4
    # The audit is the control domain's: the domU's own domctl is refused; its tools ask dom0
    # over the console (guestrun), which answers for this domU.
    status, out = g.run("d=$FLUSHLESS_DOMID; FLUSHLESS_DOMID= xenpvsw audit $d writable")
    assert status != 0 and any("not permitted" in line for line in out), out
    assert g.check("xenpvsw audit $FLUSHLESS_DOMID writable | grep -c .")[-1] != "0"
    # The domU marks frames it does not own: dom0's, and free ones.
    _, out = g.run("xenpvsw mark %s" % " ".join(dom0_frames + free_frames))
    assert mark_results(out) == [EINVAL] * 8, out
    # dom0 marks the domU's frames: as its own, and naming the domU as their owner.
    _, out = tb.run("xenpvsw mark %s" % " ".join(domu_frames))
    assert mark_results(out) == [EINVAL] * 4, out
    _, out = tb.run("xenpvsw mark-for %d %s" % (g.domid, " ".join(domu_frames)))
    assert mark_results(out) == [EPERM] * 4, out
    # A frame dom0 grants the domU, mapped for the domU's device: still dom0's. One command, so
    # that dom0's shell waits for the grant's holder.
    status, out = tb.run("xenpvsw grant %d > /tmp/grant & p=$!; sleep 1; "
                         "guestrun %s \"xenpvsw mark-granted 0 $(cut -d' ' -f2 /tmp/grant)\"; "
                         "rc=$?; kill $p; wait $p; (exit $rc)" % (g.domid, guests.NAME))
    assert status == 0 and "mark %d" % EINVAL in out and "unmark %d" % EINVAL in out, out
    granted = [line.split()[1] for line in out if line.startswith("mfn ")]
    # None of those frames is marked (the domU's own pool pages are), and neither domain has a
    # page table in its IOMMU.
    tried = dom0_frames + free_frames + domu_frames + granted
    for dom in (0, g.domid):
        hits = tb.check("xenpvsw audit %d marked | grep -c -x %s || true"
                        % (dom, " ".join("-e " + f for f in tried)))
        assert hits == ["0"], (dom, hits)
        assert measure.parse_stats(tb.check("xenpvsw audit %d" % dom))["violations"] == 0, dom


@pytest.mark.testbed
def test_swrace_in_the_domu(passthrough):
    # The domU's own threads race marks, pins and give-backs on its frames; dom0 audits them after every round (guestrun answers its requests).
    tb, g = passthrough
    session = guests.GuestSession(tb, g)
    session.configure_pool(measure.cache_settings(True))
    rec = session.run("swrace", ["--rounds", "2000", "--seconds", "0"])
    print("swrace in the domU:", rec["result"], rec["rows"])
    assert rec["rounds"] == 2000, rec["result"]
    for row in rec["rows"]:
        assert row["ok"] > 20, rec["rows"]
    assert rec["bad_states"] == 0 and rec["invariant_violations"] == 0, rec["result"]


@pytest.mark.testbed
def test_dmasweep_in_the_domu(passthrough):
    # The domU's device reads the domU's frames: its page tables fault, its writable pages read.
    tb, g = passthrough
    session = guests.GuestSession(tb, g)
    session.configure_pool(measure.cache_settings(True))
    session.run("forkbench", ["--n", "100"])
    # Every page-table frame is read (475-490), and the writable ones sampled to make up 700
    # reads (edu takes 100 ms of guest time per DMA). With 600, frames changing kind during the
    # sweep (65 once) left 48 writable ones read, short of the 50 asserted below.
    rec = session.run("dmasweep", ["--max-frames", "700"])
    print("dmasweep in the domU:", {k: v for k, v in rec.items() if k not in ("rows", "counters", "per_op", "audit")})
    assert rec["control_read_ok"], rec
    # The domU's page tables against its audit and its kernel's count. Its shell keeps forking
    # during the sweep: 65 and 17 frames of 700 changed kind in two runs (2026-11-27).
    kb, = [int(x.split()[1]) for x in g.check("grep ^PageTables: /proc/meminfo")]
    bad = dmasweep.against_audit(rec, rec["audit"], kb // 4, max_unstable=0.2)
    assert not bad and rec["writable_frames"] > 50, (bad, rec)
    assert rec["pagetable_frames_readable"] == 0 and rec["writable_frames_faulted"] == 0, rec
