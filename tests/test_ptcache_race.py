"""Integration: switching the cache off while every vCPU frees page tables.

A free reads the switch, then puts its page in a CPU's front cache. If the cache is
switched off in between, the page must not land in a pool that nothing takes from any
more, still declared to Xen (issue 9, finding 3): the grace period before the drain and
the re-check under the front cache's lock keep it out. A testbed-only delay
(testbed/linux/) widens that window to 500 us. With it, the test must find the race in
the shape it was written against (tests/fixtures/linux-broken) and none in patches/linux.
"""

import glob
import os

import pytest

from flushless import build, measure
from flushless.build import REPO
from flushless.testbed import BootConfig, Testbed

pytestmark = pytest.mark.testbed

DELAY = sorted(glob.glob(os.path.join(REPO, "testbed", "linux", "*.patch")))
BROKEN = sorted(glob.glob(os.path.join(REPO, "tests", "fixtures", "linux-broken", "*.patch")))
SMP = 4
ROUNDS = 25
TABLES = ("l1", "l2", "l3", "l4")

# One fork loop per vCPU; the cache on for 0.2 s, then off; 20 ms after switching it off
# (longer than the widened window) the pools must be empty, and stay so.
SCRIPT = " ".join("""
S=/sys/kernel/mm/ptcache; rm -f /tmp/stop;
for p in $(seq %(smp)d); do
    (while [ ! -e /tmp/stop ]; do forkbench --n 20 --touch-mb 4 >/dev/null || exit 1; done) &
done;
for i in $(seq %(rounds)d); do
    echo 1 > $S/enabled; usleep 200000;
    echo 0 > $S/enabled; usleep 20000;
    echo "round $i $(grep -E '^(pool_pages|front_pages) ' $S/stats | tr '\\n' ' ')";
done;
touch /tmp/stop; wait
""".split())


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
        rounds = [measure.parse_stats([" ".join(line.split()[i:i + 2]) for i in (2, 4)])
                  for line in out if line.startswith("round ")]
        tb.check("sleep 1")  # tables still in flight come back and are given back
        marked = set(tb.check("xenpvsw audit 0 marked"))
        tables = set()
        for kind in TABLES:
            tables |= set(tb.check("xenpvsw audit 0 %s" % kind))
        audit = measure.parse_stats(tb.check("xenpvsw audit 0"))
        bad = tb.check("dmesg | grep -E 'Bad page|WARNING|BUG' || true")
    assert len(rounds) == ROUNDS, out
    return {"rounds_left_pages": sum(1 for r in rounds if r["pool_pages"] or r["front_pages"]),
            "rounds": rounds, "marked_not_tables": len(marked - tables),
            "violations": audit["violations"], "dmesg": bad}


def test_switching_off_during_frees_leaves_nothing(tmp_path):
    res = switch_while_freeing(build.patches("linux") + DELAY, tmp_path)
    assert res["rounds_left_pages"] == 0, res
    assert res["marked_not_tables"] == 0 and res["violations"] == 0 and not res["dmesg"], res


def test_switching_off_finds_the_broken_shapes_race(tmp_path):
    # The same test against the shape it was written to catch: it must fail there.
    res = switch_while_freeing(build.patches("linux") + BROKEN + DELAY, tmp_path)
    assert res["rounds_left_pages"] > 0 or res["marked_not_tables"] > 0, res
