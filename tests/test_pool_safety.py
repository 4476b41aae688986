"""Integration: the page-table pool's safety on the testbed's debug kernel, each property
against a broken shape of its own (tests/fixtures/linux-broken) that the test must catch.

1. The pool switched on and off while every vCPU allocates and frees page tables, on 4 vCPUs.

What must hold ("marked-frame conservation", the Linux series review's T2): no declared page reaches the page
allocator, and none is lost. A freed table goes back to the pool or is undeclared before it is
freed; the cap set to 0 gives every pool page back at once. So once the load has ended and
the tables in flight have passed their grace period, every frame Xen holds marked is a page
table in use, and their number is what the pool's counters say is declared and in use.
init_on_free=1 makes the page allocator check every page freed to it: a declared one
(PT_pooled, PG_private) is a "Bad page state". The test must find what each broken shape
(tests/fixtures/linux-broken) does wrong, and nothing in patches/linux.

2. MADV_DONTNEED freeing PTE tables under the mmap read lock (PT_RECLAIM) while other threads
   fault into them: nothing may touch a table in flight (its lock is live).

3. A memory cgroup's limit: a table taken from the pool is charged like a new page, so a tenant
   cannot hold page tables beyond memory.max by taking them from the pool.

4. A table freed while Xen still has it as a table (a guest use-after-free, made by the testbed's
   test_pin_on_release): Xen refuses to undeclare it (-EBUSY); the pool warns with the pfn and
   never frees the page.

5. Save and restore of the pv-passthrough domU (xl pci-detach, xl save, xl restore): Xen does
   not carry the marks over, and the restored domain, without its device, is no longer kept in
   sync with an IOMMU. Nothing may stay quarantined. Before that, a save that fails after the
   suspend lets the domU go on in the same domain, where Xen still holds the marks: they must
   match the pool's count.

6. Memory pressure: a miss fills its batch only while the table's zone has a batch to spare
   above its high watermark, so that under pressure the pool neither drives the domain into
   reclaim nor takes back what kswapd (and the pool's own shrinker) is giving back.
"""

import glob
import os
import re

import pytest

from flushless.testbed import build, findings
from flushless.experiments import guests, measure, raceload
from flushless.testbed.build import REPO
from flushless.testbed.boot import BootConfig, Crashed, Found, Testbed

# Every process of the load must live. A freshly exec'd static program used to die now and then
# in its start-up, on Debian's own kernel and Xen too: QEMU's TCG raises no #NM for XSAVE and
# XRSTOR, which Xen's lazy FPU switching relies on (docs/qemu-xsave-ts.md). The testbed boots
# Xen with eager switching since, and the census's race and storm rows count 0 deaths.
pytestmark = pytest.mark.testbed

BROKEN = sorted(glob.glob(os.path.join(REPO, "tests", "fixtures", "linux-broken", "*.patch")))
SMP = 4
ROUNDS = 10
TABLES = ("l1", "l2", "l3", "l4")


def race_parts(broken=(), guest=False):
    """The debug variant: Xen's ASSERTs, the kernel's VM_WARN_ONs, list debugging and lockdep
    (testbed/linux/debug.config). A fixture that no longer applies exactly fails here."""
    return build.Parts("built", linux_series=build.testbed_linux_series(broken), debug=True,
                       guest=guest).ensure()


def debug_boot(parts, tmp_path, smp, dom0_args=(), mode="strict"):
    """A boot of PARTS with SMP vCPUs, dom0 in MODE (strict: its memory kept in sync)."""
    cfg = BootConfig(xen=parts.xen.path("xen"), kernel=parts.kernel.path("vmlinuz"),
                     initramfs=parts.dom0_initramfs(), mode=mode, smp=smp, dom0_args=tuple(dom0_args))
    return Testbed(cfg, str(tmp_path / "console.log"))


def marked_frames(tb):
    """(frames Xen holds marked, of which no table of any level), counted in dom0: the lists
    are thousands of lines, 3 s each over the console (20 readings of a broken shape took 4-5
    minutes). A frame only in the marked list is the one line uniq -u keeps of the three lists."""
    out = tb.check("(set -o pipefail; xenpvsw audit 0 marked | sort -u >/tmp/marked && "
                   "for k in %s; do xenpvsw audit 0 $k || exit 1; done | sort -u >/tmp/tables && "
                   "echo \"marked $(wc -l </tmp/marked)\" && "
                   "echo \"not_tables $(sort /tmp/marked /tmp/tables /tmp/tables | uniq -u | wc -l)\"; "
                   "rc=$?; rm -f /tmp/marked /tmp/tables; exit $rc)" % " ".join(TABLES))
    counts = measure.parse_stats(out)
    return counts["marked"], counts["not_tables"]


def switch_while_freeing(parts, tmp_path, dom0_args=(), stop_when_left=False):
    """Rounds of the pool switched on and off under fork loops on every vCPU: the pool's size
    read while off, then the frames Xen holds marked against the tables and the pool's
    counters. STOP_WHEN_LEFT ends the rounds at the first that left pages."""
    with debug_boot(parts, tmp_path, SMP, raceload.DOM0_ARGS + tuple(dom0_args)) as tb:
        session = measure.Session(tb)
        # The pool's KUnit suite (patches/linux 0005) ran at boot.
        kunit = tb.check("dmesg | grep -E '# xen_pgtable_pool: |not ok' || true")
        load = raceload.run(tb, SMP, ROUNDS, stop_when_left=stop_when_left)
        out, fatal = load["out"], load["fatal_signals"]
        loops, failed = load["loops"], load["load_failures"]
        # Tables in flight (freed, waiting for their grace period) are marked frames that are no
        # table until they reach the pool's free hook: wait until every marked frame is a table,
        # 10 s at most. A round that left pages, or a finding in the kernel's log, is already a
        # finding: one reading then (a broken shape never settles; its Bad pages are the finding).
        settled = stop_when_left and (load["rounds_left_pages"] or findings.in_dmesg(tb))
        for _ in range(1 if settled else 20):
            marked, not_tables = marked_frames(tb)
            stats = session.pool_stats()
            if not not_tables and marked == measure.pool_in_use(stats):
                break
            tb.check("usleep 500000")
        audit = measure.parse_stats(tb.check("xenpvsw audit 0"))
        bad = findings.in_dmesg(tb)
    # The loops ran, and none of their programs failed (a broken shape may make them fail, or
    # kill one: a table reused too early makes a process read a wrong word).
    load_ok = not failed and len(loops) == SMP and min(loops) > 0 and load["ptfault_runs"] > 0
    return {"load_ok": load_ok, "rounds_read": load["rounds_read"], "load_failures": failed,
            "rounds_left_pages": load["rounds_left_pages"], "loops": loops, "ptfault_runs": load["ptfault_runs"],
            "hits": stats["hits"], "misses": stats["misses"], "pool_pages": stats["pages"],
            "leaked": stats["leaked"], "marked": marked, "declared_in_use": measure.pool_in_use(stats),
            "marked_not_tables": not_tables, "violations": audit["violations"], "dmesg": bad,
            "deaths": load["deaths_by_signal"], "fatal_signals": fatal, "kunit": kunit}


def test_switching_the_pool_during_frees_loses_nothing(tmp_path):
    res = switch_while_freeing(race_parts(), tmp_path)
    print(res)
    # Every round read, every loop ran all along, and the pool served and missed in every round.
    assert not res["deaths"] and res["rounds_read"] == ROUNDS, res
    assert len(res["kunit"]) == 1 and "pass:15 fail:0 skip:0 total:15" in res["kunit"][0], res["kunit"]
    assert res["load_ok"] and res["hits"] > 0 and res["misses"] >= ROUNDS, res
    assert res["rounds_left_pages"] == 0 and res["pool_pages"] == 0, res
    assert res["violations"] == 0 and not res["dmesg"], res
    # Conservation: every frame Xen holds marked is a table in use, and the pool counts as
    # declared and in use exactly as many.
    assert res["marked_not_tables"] == 0 and res["leaked"] == 0, res
    assert res["marked"] == res["declared_in_use"], res


def dontneed_against_faults(parts, tmp_path):
    """PT_RECLAIM against the pool (the review's T1): the pool on, ptfault's threads fault into
    2 MiB ranges that its thread 0 empties with MADV_DONTNEED (the kernel frees the emptied PTE
    page under the mmap read lock while another thread may be taking its lock), beside a fork
    loop, on every vCPU; then every check of the switch test."""
    with debug_boot(parts, tmp_path, SMP, ("init_on_free=1", "print-fatal-signals=1")) as tb:
        session = measure.Session(tb)
        before = session.pool_stats()
        out = tb.check("rm -f /tmp/stop; (n=0; while [ ! -e /tmp/stop ]; do forkbench --n 20 --touch-mb 4 "
                       ">/dev/null 2>&1 || echo \"LOADFAIL $?\"; n=$((n+1)); done; echo \"loop $n\") & "
                       "ptfault --threads %d --ranges 64 --n %d --dontneed >/dev/null 2>&1 || echo \"LOADFAIL $?\"; "
                       "touch /tmp/stop; wait" % (SMP, DONTNEED_ROUNDS), timeout=1800)
        after = session.pool_stats()
        fatal, deaths, _ = raceload.deaths(tb)
        audit = measure.parse_stats(tb.check("xenpvsw audit 0"))
        bad = findings.in_dmesg(tb)
    return {"load_failures": [x for x in out if x.startswith("LOADFAIL")],
            "loops": [x for x in out if x.startswith("loop ")], "hits": after["hits"] - before["hits"],
            "deaths": deaths, "violations": audit["violations"], "dmesg": bad, "leaked": after["leaked"]}


# 16 rounds of 64 ranges, 4 times each: about 4000 tables freed by MADV_DONTNEED while faults
# race for them, about 2 minutes under TCG (40 rounds took 5 of make test's 28 minutes).
DONTNEED_ROUNDS = 16


def test_dontneed_frees_tables_in_flight_safely(tmp_path):
    res = dontneed_against_faults(race_parts(), tmp_path)
    print(res)
    assert not res["load_failures"] and res["loops"] and not res["deaths"], res
    assert res["hits"] > 0 and not res["dmesg"] and res["violations"] == 0 and res["leaked"] == 0, res


def caught(broken, tmp_path, test):
    """What TEST ("switch", "dontneed", "limit", "busy", "restore" or "pressure") finds against BROKEN fixtures: what fails, or a crash or
    a finding in the logs; None if it found nothing. A build that fails or a boot that stalls is
    no finding; a kernel that crashes while booting is (the tag's shape on the debug kernel:
    pagetable_dtor() frees the tag as the table's lock after the grace period)."""
    parts = race_parts(broken, guest=test == "restore")
    try:
        if test == "switch":
            res = switch_while_freeing(parts, tmp_path, stop_when_left=True)
            found = {k: res[k] for k in ("rounds_left_pages", "marked_not_tables", "dmesg", "load_failures")
                     if res[k]}
            if res["marked"] != res["declared_in_use"]:
                found["conservation"] = (res["marked"], res["declared_in_use"])
        elif test == "dontneed":
            res = dontneed_against_faults(parts, tmp_path)
            found = {k: res[k] for k in ("load_failures", "deaths", "dmesg", "violations") if res[k]}
        elif test == "restore":
            res = save_and_restore(parts, tmp_path)
            r = res["restored"]
            found = {"quarantined": r} if r["pages"] or r["unmark_retried"] or r["leaked"] else {}
        elif test == "pressure":
            res = prefill_under_pressure(parts, tmp_path)
            found = {"batch_under_pressure": res["pressure"]} if res["pressure"]["batch_pages"] else {}
        elif test == "limit":
            res = limit_against_the_pool(parts, tmp_path)
            found = {"escaped": res} if not res["oom_kill"] and res["rc"] == 0 else {}
        else:
            res = busy_release(parts, tmp_path)
            found = {"quiet": res} if not res["warned"] or res["leaked"] != 1 else {}
    except (Crashed, Found) as e:
        # A log the harness could not read is its own failure, not the shape's.
        if "could not be read" in str(e):
            raise
        return "%s: %s" % (type(e).__name__, str(e).splitlines()[0:3])
    print(res)
    return found or None


def limit_against_the_pool(parts, tmp_path):
    """A memory cgroup's limit with the pool full (the review's T6): the pool is filled with
    8192 tables, then forkdirty, in a cgroup limited to 40 MiB, maps 4096 PTE tables' worth of
    memory one page each (16 MiB of tables, 16 MiB of data) and forks (16 MiB of tables more).
    Charged, that is over the limit and the cgroup's OOM killer ends it, as without the pool;
    uncharged, the tables come from the pool for free and it completes."""
    cg = "/sys/fs/cgroup"
    with debug_boot(parts, tmp_path, 2) as tb:
        session = measure.Session(tb)
        session.configure_pool({"max_pages": 16384})
        # 16 GiB of address space, 32 MiB of it touched: past the heuristic's guess of 1 GiB.
        tb.check("echo 1 > /proc/sys/vm/overcommit_memory")
        tb.check("forkdirty --tables 8192 --ptes 1 --n 1 >/dev/null")
        filled = session.pool_stats()
        tb.check("mkdir -p %s && mount -t cgroup2 none %s && echo +memory > %s/cgroup.subtree_control && "
                 "mkdir %s/limited && echo 40M > %s/limited/memory.max" % (cg, cg, cg, cg, cg))
        out = tb.check("sh -c 'echo $$ > %s/limited/cgroup.procs; exec forkdirty --tables 4096 --ptes 1 --n 1' "
                       ">/dev/null 2>&1; echo \"rc $?\"" % cg, timeout=600)
        events = measure.parse_stats(tb.check("cat %s/limited/memory.events" % cg))
        peak = int(tb.check("cat %s/limited/memory.peak" % cg)[0])
        after = session.pool_stats()
    return {"pool_filled": filled["pages"], "rc": int(out[-1].split()[1]), "oom_kill": events.get("oom_kill", 0),
            "peak_kb": peak // 1024, "hits": after["hits"] - filled["hits"]}


def test_a_memory_limit_holds_against_the_pool(tmp_path):
    res = limit_against_the_pool(race_parts(), tmp_path)
    print(res)
    # The pool was full and served the cgroup, and the limit held: the OOM killer ended it.
    assert res["pool_filled"] >= 8192 and res["hits"] > 0, res
    assert res["oom_kill"] >= 1 and res["rc"] != 0 and res["peak_kb"] <= 40 * 1024, res


def busy_release(parts, tmp_path):
    """The pool on, its next release's first page pinned as an L1 table by the testbed's knob,
    then the cap set to 0 (every page released): the warning, the leak, and the pinned frame
    still marked and a table in Xen's eyes."""
    with debug_boot(parts, tmp_path, 2) as tb:
        # The warning is what this test provokes; any other stays a finding.
        tb.allow_findings(r"WARNING: .*arch/x86/xen/pgtable_pool\.c:\d+",
                          r"pgtable pool: pfn 0x[0-9a-f]+ not undeclared \(-16\)")
        session = measure.Session(tb)
        tb.check("forkbench --n 20 >/dev/null")
        before = session.pool_stats()
        tb.check("echo 1 > %s/test_pin_on_release" % measure.POOL_DIR)
        session.configure_pool(measure.cache_settings(False))
        after = session.pool_stats()
        pinned = tb.check("dmesg | grep -o 'testbed: pfn 0x[0-9a-f]* pinned' || true")
        warned = tb.check("dmesg | grep -E 'pfn 0x[0-9a-f]+ not undeclared \\(-16\\): never freed' || true")
        audit = measure.parse_stats(tb.check("xenpvsw audit 0"))
    return {"pool_before": before["pages"], "pinned": pinned, "warned": warned,
            "leaked": after["leaked"] - before["leaked"], "violations": audit["violations"]}


def test_a_table_freed_in_use_is_loud_and_never_freed(tmp_path):
    res = busy_release(race_parts(), tmp_path)
    print(res)
    assert res["pool_before"] > 0 and len(res["pinned"]) == 1, res
    pfn = res["pinned"][0].split()[2]
    assert len(res["warned"]) == 1 and pfn in res["warned"][0], res
    assert res["leaked"] == 1 and res["violations"] == 0, res


def watermarks(tb):
    """{min, low, high}: the zones' watermarks summed, in KiB."""
    out = tb.check("awk '$1 == \"min\" || $1 == \"low\" || $1 == \"high\" { s[$1] += $2 } "
                   "END { print \"min\", s[\"min\"]; print \"low\", s[\"low\"]; print \"high\", s[\"high\"] }' "
                   "/proc/zoneinfo")
    return {k: v * 4 for k, v in measure.parse_stats(out).items()}


def free_kb(tb):
    return int(tb.check("awk '/^MemFree:/ { print $2 }' /proc/meminfo")[0])


def prefill_under_pressure(parts, tmp_path):
    """The miss's batch against memory pressure (the review's T3, C1): the same load (forkdirty,
    128 PTE tables and a fork, from an emptied pool) with free memory plentiful, then with a
    tmpfs file (not reclaimable: no swap) holding free memory halfway between the min and low
    watermarks, where kswapd is woken and the pool's shrinker asked for pages. The pages a miss
    declares beyond its table (marked less misses) are the batch: taken with memory
    plentiful, none under pressure."""
    load = "forkdirty --tables 128 --ptes 1 --n 1 >/dev/null"

    def run_load(tb, session):
        # Emptied (the cap to 0 gives every page back), then on again: every table a miss.
        session.configure_pool(measure.cache_settings(False))
        session.configure_pool(measure.cache_settings(True))
        before = session.pool_stats()
        free_before = free_kb(tb)
        tb.check(load, timeout=600)
        after = session.pool_stats()
        d = {k: after[k] - before[k] for k in ("misses", "marked", "hits", "shrunk")}
        d["batch_pages"] = d["marked"] - d["misses"]
        d["free_kb"] = (free_before, free_kb(tb))
        return d

    with debug_boot(parts, tmp_path, 2) as tb:
        session = measure.Session(tb)
        # 10 % of memory between the watermarks (1000): a window of about 90 MiB to hold.
        tb.check("echo 1000 > /proc/sys/vm/watermark_scale_factor")
        wm = watermarks(tb)
        plenty = run_load(tb, session)
        hog_mb = (free_kb(tb) - (wm["min"] + wm["low"]) // 2) // 1024
        before_hog = session.pool_stats()
        tb.check("mkdir -p /tmp/hog && mount -t tmpfs -o size=%dm none /tmp/hog && "
                 "dd if=/dev/zero of=/tmp/hog/fill bs=1M count=%d 2>/dev/null" % (hog_mb + 1, hog_mb), timeout=600)
        # What kswapd took from the pool while the file grew, and whether it has given the node
        # up since (16 runs that freed nothing: no kswapd during the load then).
        after_hog = session.pool_stats()
        hog = {"pool_pages": (before_hog["pages"], after_hog["pages"]),
               "shrunk": after_hog["shrunk"] - before_hog["shrunk"],
               "node_unreclaimable": tb.check("grep -c 'node_unreclaimable:  1' /proc/zoneinfo || true")[-1]}
        pressed = run_load(tb, session)
        tb.check("rm /tmp/hog/fill && umount /tmp/hog")
        bad = findings.in_dmesg(tb)
    return {"watermarks_kb": wm, "hog_mb": hog_mb, "plenty": plenty, "while_filling": hog, "pressure": pressed,
            "dmesg": bad}


def test_no_batch_is_taken_under_memory_pressure(tmp_path):
    res = prefill_under_pressure(race_parts(), tmp_path)
    print(res)
    wm, plenty, pressed = res["watermarks_kb"], res["plenty"], res["pressure"]
    # With memory plentiful, misses fill their batch: the count can see one.
    assert plenty["misses"] > 0 and plenty["batch_pages"] > 0, res
    # While the file grew below the low watermark, kswapd's shrinker took the pool's pages: on
    # its way to giving the node up, reclaim's priority drops until a cache this small is scanned.
    assert res["while_filling"]["shrunk"] > 0, res
    # Under pressure, all along the load: free memory between the min and the high watermark.
    assert all(wm["min"] < f < wm["high"] for f in pressed["free_kb"]), res
    assert pressed["misses"] >= 128 and pressed["batch_pages"] == 0, res
    assert not res["dmesg"], res


def declared(stats):
    """The pages the pool counts as declared: its own, tables in use and leaked ones."""
    return stats["marked"] - stats["unmarked"]


def save_and_restore(parts, tmp_path):
    """The pv-passthrough domU with a full pool and a process holding declared tables: a save
    that fails (the domU resumes in the same domain), then the device detached, the domU saved
    and restored (a new domain, no device), the holder ended, the cap's tables freed and the
    shrinker run."""
    # 192 MiB: the save file lives in dom0's memory (its /tmp).
    with debug_boot(parts, tmp_path, 2, mode="relaxed") as tb, \
            guests.Guest(tb, "pv-passthrough", vcpus=2, mem_mb=192) as g:
        # Stock 7.3's gntdev, in lockdep kernels when xenstored maps its first grant: mmap takes
        # priv->lock under mmap_lock (gntdev_mmap()), and the map ioctl copies to user space
        # under priv->lock (gntdev_ioctl_map_grant_ref(), drivers/xen/gntdev.c:670-681). Not
        # the series'; allowed only if that is the report (lockdep reports one per boot).
        gntdev = tb.check("dmesg | grep -A5 'possible circular locking dependency' || true")
        if gntdev and any(re.search(r"\(&priv->lock\).* at: gntdev_mmap\+", x) for x in gntdev):
            tb.allow_findings(r"WARNING: possible circular locking dependency detected")
        domu_pool = guests.GuestSession(tb, g).pool_stats
        g.check("forkbench --n 200 >/dev/null; (sleep 100000 >/dev/null 2>&1 &)")
        filled, first_id = domu_pool(), g.domid
        # A save that runs out of space after the domU suspended (a 16 MiB tmpfs): the toolstack
        # cancels the suspend, and the domU goes on in the same domain with its marks.
        tb.check("mkdir -p /tmp/small && mount -t tmpfs -o size=16m none /tmp/small")
        tb.run("timeout 300 xl save %s /tmp/small/domu.save </dev/null >/dev/null 2>&1" % g.name, timeout=330)
        tb.check("umount /tmp/small")
        resumed_id = int(tb.check("xl domid %s" % g.name)[-1])
        g.check("forkbench --n 20 >/dev/null")
        # Until the tables in their grace period have reached the pool: 10 s at most.
        for _ in range(20):
            resumed = domu_pool()
            audit = measure.parse_stats(tb.check("xenpvsw audit %d" % resumed_id))
            if audit.get("marked") == declared(resumed):
                break
            tb.check("usleep 500000")
        bdf = tb.check("xl pci-list %s" % g.name)[-1].split()[1]
        tb.check("xl pci-detach %s %s" % (g.name, bdf), timeout=300)
        # Restored from guestboot's config less the device, with the IOMMU off for the domain
        # (else libxl may keep it on, as the saved config asked, and Xen keeps the marks' use).
        tb.check("sed '/^pci/d' /tmp/{0}.cfg > /tmp/restore.cfg && echo 'passthrough = \"disabled\"' "
                 ">> /tmp/restore.cfg && timeout 300 xl save {0} /tmp/domu.save </dev/null >/dev/null 2>&1 && "
                 "timeout 300 xl restore -e /tmp/restore.cfg /tmp/domu.save </dev/null >/dev/null 2>&1; "
                 "rc=$?; rm -f /tmp/domu.save; [ $rc = 0 ]".format(g.name), timeout=660)
        g.domid = restored_id = int(tb.check("xl domid %s" % g.name)[-1])
        # The holder's tables are freed, the pool's are given back, the shrinker asked for all.
        g.check("kill $(pidof sleep); forkbench --n 50 >/dev/null; echo 2 > /proc/sys/vm/drop_caches; sleep 2")
        restored = domu_pool()
        said = g.check("dmesg | grep 'pgtable pool' || true")
    return {"filled": filled, "first_id": first_id, "resumed_id": resumed_id, "restored_id": restored_id, "resumed": resumed,
            "resumed_marked": audit.get("marked"), "resumed_violations": audit["violations"],
            "restored": restored, "said": said}


def test_save_and_restore_leaves_nothing_quarantined(tmp_path):
    res = save_and_restore(race_parts(guest=True), tmp_path)
    print(res)
    assert res["filled"]["pages"] > 0 and res["filled"]["marked"] > res["filled"]["pages"], res
    # The cancelled save: the domU went on in its domain, and Xen holds a mark for every page the
    # pool counts as declared.
    assert res["first_id"] == res["resumed_id"] != res["restored_id"], res
    assert res["resumed_violations"] == 0 and res["resumed_marked"] == declared(res["resumed"]), res
    # Restored: nothing kept, nothing leaked, nothing waiting for another try.
    r = res["restored"]
    assert r["pages"] == 0 and r["leaked"] == 0 and r["unmark_retried"] == 0, res
    assert any("Xen no longer takes declarations" in x for x in res["said"]), res


# Each broken shape, against the test written to catch it (one kernel build each, from ccache,
# and a boot). make test runs the conservation test's shape; make test-all all five (for the
# time budget of make test: each is a boot of 1-3 minutes).
SHAPES = {"free-to-the-page-allocator": "switch", "tag-a-table-in-flight": "dontneed",
          "uncharged-pool-pages": "limit", "ebusy-retried-quietly": "busy",
          "restore-keeps-pages-declared": "restore", "prefill-under-pressure": "pressure"}
IN_MAKE_TEST = ("free-to-the-page-allocator",)


@pytest.mark.parametrize("broken", [pytest.param(p, marks=[] if os.path.basename(p)[:-len(".patch")] in IN_MAKE_TEST
                                                 else [pytest.mark.slow]) for p in BROKEN],
                         ids=lambda p: os.path.basename(p)[:-len(".patch")])
def test_the_race_tests_find_the_broken_shapes(broken, tmp_path):
    # The same test against each shape it was written to catch: it must fail there.
    test = SHAPES[os.path.basename(broken)[:-len(".patch")]]
    found = caught((broken,), tmp_path, test)
    print(os.path.basename(broken), test, "caught:", found)
    assert found, "the %s test passed against %s" % (test, os.path.basename(broken))
