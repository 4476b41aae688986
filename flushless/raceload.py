"""The race tests' load (tests/test_ptcache_race.py), also run by the flake census.

One fork loop per vCPU, each reporting a failed run with its exit status, and a ptfault loop
whose threads lose PTE-page races; rounds of the cache switched on for 0.2 s, then off, the
pools read 300 ms and again 500 ms after each switch-off. Timing stays on throughout, so
ptcache's static key stays taken: the rounds are about the pools, not text patching. With
SWITCH false the cache is never switched on: the same load on the stock paths.
"""

import re

from . import measure

# init_on_free=1: the page allocator checks every page freed to it. print-fatal-signals=1: a
# process killed by a signal gets its registers printed (how a death is counted).
DOM0_ARGS = ("ptcache_test_free_delay_us=500", "ptcache_test_free_sleep_ms=100", "init_on_free=1",
             "print-fatal-signals=1")

SCRIPT = """
S=/sys/kernel/mm/ptcache; rm -f /tmp/stop; echo 1 > $S/timing;
for p in $(seq %(smp)d); do
    (n=0; while [ ! -e /tmp/stop ]; do
        forkbench --n 20 --touch-mb 4 >/dev/null 2>&1 || echo "LOADFAIL $?"; n=$((n+1));
    done; echo "loop $n") &
done;
(n=0; while [ ! -e /tmp/stop ]; do
    ptfault --threads %(smp)d --ranges 64 --n 10 >/dev/null 2>&1 || echo "LOADFAIL $?"; n=$((n+1));
done; echo "faults $n") &
for i in $(seq %(rounds)d); do
    echo %(on)d > $S/enabled; usleep 200000;
    echo 0 > $S/enabled; usleep 300000;
    a=$(grep -E '^(pool_pages|front_pages) ' $S/stats | tr '\\n' ' '); usleep 200000;
    b=$(grep -E '^(pool_pages|front_pages) ' $S/stats | tr '\\n' ' '); echo "round $i $a $b";
    if [ %(stop)d = 1 ] && echo "$a" | grep -q ' [1-9]' && echo "$b" | grep -q ' [1-9]'; then break; fi;
done;
touch /tmp/stop; wait
"""
SCRIPT = " ".join(SCRIPT.split())
DEATH = re.compile(r"potentially unexpected fatal signal (\d+)")
# What the kernel prints of a user-space death without print-fatal-signals (show_unhandled_signals).
TRAP = re.compile(r"traps: .*(general protection|trap invalid opcode)|segfault at ")
STORM = ("rm -f /tmp/stop; for p in $(seq %(smp)d); do (n=0; while [ ! -e /tmp/stop ]; do "
         "forkbench --n 20 --exec >/dev/null 2>&1 || echo \"LOADFAIL $?\"; "
         "forkbench --n 20 --touch-mb 4 >/dev/null 2>&1 || echo \"LOADFAIL $?\"; n=$((n+1)); "
         "done; echo \"loop $n\") & done; sleep %(seconds)d; touch /tmp/stop; wait")


def script(smp, rounds, switch=True, stop_when_left=False):
    """STOP_WHEN_LEFT: end after the first round that left pages (a broken shape's test needs
    one; the census counts all ROUNDS)."""
    return SCRIPT % {"smp": smp, "rounds": rounds, "on": 1 if switch else 0, "stop": 1 if stop_when_left else 0}


def deaths(tb):
    """({signal: count}, lines) of every user-space death the kernel reported."""
    fatal = tb.check("dmesg | grep -E -A14 'potentially unexpected fatal signal|traps: |segfault at ' || true")
    by_signal, lines = {}, []
    for line in fatal:
        m = DEATH.search(line)
        if m:
            by_signal[m.group(1)] = by_signal.get(m.group(1), 0) + 1
        if m or TRAP.search(line):
            lines.append(line.strip())
    return fatal, by_signal, lines


def storm(tb, smp, seconds):
    """SMP fork and exec loops for SECONDS, no ptcache involved: deaths by signal."""
    out = tb.check(STORM % {"smp": smp, "seconds": seconds}, timeout=seconds + 300)
    fatal, by_signal, lines = deaths(tb)
    failed = [int(line.split()[1]) for line in out if line.startswith("LOADFAIL ")]
    loops = [int(line.split()[1]) for line in out if line.startswith("loop ")]
    # The kernel's whole report of each death (registers, FS base, code bytes), for locating it.
    return {"deaths_by_signal": by_signal, "death_lines": fatal[:80], "load_failures": failed, "loops": loops,
            "summary": "%d s, loops %s, deaths %s, load failures %s" % (seconds, loops, by_signal or 0, failed or 0)}


def left_pages(line):
    """A round line's two reads: did both see pages in the pools?"""
    values = [int(v) for v in re.findall(r"(?:pool_pages|front_pages) (\d+)", line)]
    assert len(values) == 4, line
    return any(values[:2]) and any(values[2:])


def run(tb, smp, rounds, switch=True, stop_when_left=False):
    """The load on a booted testbed: rounds read, deaths by signal, load failures."""
    out = tb.check(script(smp, rounds, switch, stop_when_left), timeout=60 + 20 * rounds)
    fatal, by_signal, lines = deaths(tb)
    read = [line for line in out if line.startswith("round ") and len(re.findall(r"_pages \d+", line)) == 4]
    failed = [int(line.split()[1]) for line in out if line.startswith("LOADFAIL ")]
    loops = [int(line.split()[1]) for line in out if line.startswith("loop ")]
    faults = [int(line.split()[1]) for line in out if line.startswith("faults ")]
    stats = measure.parse_stats(tb.check("cat /sys/kernel/mm/ptcache/stats"))
    return {"out": out, "fatal_signals": fatal, "deaths_by_signal": by_signal, "death_lines": lines[:10],
            "rounds_read": len(read), "rounds_left_pages": sum(left_pages(x) for x in read),
            "load_failures": failed, "loops": loops, "ptfault_runs": faults[0] if faults else 0, "stats": stats,
            "summary": "%d rounds read, loops %s, ptfault runs %s, deaths %s, load failures %s"
                       % (len(read), loops, faults, by_signal or 0, failed or 0)}
