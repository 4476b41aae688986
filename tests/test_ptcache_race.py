"""Integration: switching the cache off while every vCPU frees page tables.

A free reads the switch, then puts its page in a CPU's front cache. If the cache is
switched off in between, the page must not land in a pool that nothing takes from any
more, still declared to Xen: the grace period before the drain and the re-check under the
front cache's lock keep it out. A testbed-only delay
(testbed/linux/) widens that window to 500 us. With it, the test must find the race in
the shape it was written against (tests/fixtures/linux-broken) and none in patches/linux.
"""

import glob
import os
import re

import pytest

from flushless import build, measure
from flushless.build import REPO
from flushless.testbed import BootConfig, Testbed

# Opt-in (FLUSHLESS_RACE_TESTS=1) until two things are explained: switching the cache's static
# key at run time on 4 vCPUs can die of the text-patching int3 seen at boot (README, "Boot
# failures"), and one run found 3 marked non-table frames (issue 9's note).
pytestmark = [pytest.mark.testbed,
              pytest.mark.skipif(not os.environ.get("FLUSHLESS_RACE_TESTS"), reason="set FLUSHLESS_RACE_TESTS=1")]

DELAY = sorted(glob.glob(os.path.join(REPO, "testbed", "linux", "*.patch")))
BROKEN = sorted(glob.glob(os.path.join(REPO, "tests", "fixtures", "linux-broken", "*.patch")))
SMP = 4
ROUNDS = 25
TABLES = ("l1", "l2", "l3", "l4")
assert DELAY and BROKEN, "testbed/linux/*.patch or tests/fixtures/linux-broken/*.patch missing"

# One fork loop per vCPU, each printing how many runs it made; the cache on for 0.2 s, then
# off. Pools are read 20 ms and again 200 ms after switching off (longer than the widened
# window); a round leaves pages only if both reads see some: a page stranded in a switched-off
# pool stays until the next switch-on, while the counters of a free in progress settle.
SCRIPT = """
S=/sys/kernel/mm/ptcache; rm -f /tmp/stop;
for p in $(seq %(smp)d); do
    (n=0; while [ ! -e /tmp/stop ]; do
        forkbench --n 20 --touch-mb 4 >/dev/null 2>&1 || { echo LOADFAIL; exit 1; }; n=$((n+1));
    done; echo "loop $n") &
done;
for i in $(seq %(rounds)d); do
    echo 1 > $S/enabled; usleep 200000;
    echo 0 > $S/enabled; usleep 20000;
    a=$(grep -E '^(pool_pages|front_pages) ' $S/stats | tr '\\n' ' '); usleep 200000;
    echo "round $i $a $(grep -E '^(pool_pages|front_pages) ' $S/stats | tr '\\n' ' ')";
done;
touch /tmp/stop; wait
"""
SCRIPT = " ".join(SCRIPT.split())


def left_pages(line):
    """A round line's two reads: did both see pages in the pools?"""
    values = [int(v) for v in re.findall(r"(?:pool_pages|front_pages) (\d+)", line)]
    assert len(values) == 4, line
    return any(values[:2]) and any(values[2:])


def switch_while_freeing(series, tmp_path):
    """Rounds of the cache switched on and off under fork loops on every vCPU: the pool
    figures read while off, and the frames Xen holds marked that are no page table."""
    parts = build.Parts("built", linux_series=series).ensure()
    cfg = BootConfig(xen=parts.xen.path("xen"), kernel=parts.kernel.path("vmlinuz"),
                     initramfs=parts.initramfs.path("initramfs.cpio.gz"), mode="strict", smp=SMP,
                     dom0_args=("ptcache_test_free_delay_us=500",))
    with Testbed(cfg, str(tmp_path / "console.log")) as tb:
        assert tb.check("cat /sys/module/kernel/parameters/ptcache_test_free_delay_us") == ["500"]
        out = tb.check(SCRIPT % {"smp": SMP, "rounds": ROUNDS}, timeout=900)
        rounds = [left_pages(line) for line in out if line.startswith("round ")]
        loops = [int(line.split()[1]) for line in out if line.startswith("loop ")]
        # Tables still in flight come back and are given back; then nothing is owed.
        for _ in range(20):
            stats = measure.parse_stats(tb.check("cat /sys/kernel/mm/ptcache/stats"))
            if not stats["owed"]:
                break
            tb.check("sleep 0.5")
        marked = set(tb.check("xenpvsw audit 0 marked"))
        tables = set()
        for kind in TABLES:
            tables |= set(tb.check("xenpvsw audit 0 %s" % kind))
        audit = measure.parse_stats(tb.check("xenpvsw audit 0"))
        bad = tb.check("dmesg | grep -E 'Bad page|WARNING|BUG' || true")
    # Every round read, every loop ran all along: the frees did happen.
    assert len(rounds) == ROUNDS and "LOADFAIL" not in out and len(loops) == SMP and min(loops) > 0, out
    return {"rounds_left_pages": sum(rounds), "loops": loops, "owed": stats["owed"],
            "quarantined": stats["quarantined"], "marked_not_tables": len(marked - tables),
            "violations": audit["violations"], "dmesg": bad}


def test_switching_off_during_frees_leaves_nothing(tmp_path):
    res = switch_while_freeing(build.patches("linux") + DELAY, tmp_path)
    assert res["rounds_left_pages"] == 0, res
    assert res["violations"] == 0 and not res["dmesg"], res
    # Not asserted yet: one CI run of the series found 3 marked frames that are no page table
    # after the loops (owed and quarantined were not read then); two runs here found 0. Kept
    # in the output until it is explained (issue 9's note).
    print("after the rounds:", {k: res[k] for k in ("marked_not_tables", "owed", "quarantined")})


def test_switching_off_finds_the_broken_shapes_race(tmp_path):
    # The same test against the shape it was written to catch: it must fail there.
    res = switch_while_freeing(build.patches("linux") + BROKEN + DELAY, tmp_path)
    assert res["rounds_left_pages"] > 0 or res["marked_not_tables"] > 0, res
