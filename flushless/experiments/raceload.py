"""The race tests' load (tests/test_pool_safety.py), also run by the flake census.

One fork loop per vCPU, each reporting a failed run with its exit status, and a ptfault loop
whose threads lose PTE-page races; rounds of the pool switched on (its cap raised) for 0.2 s,
then off (cap 0), the pool's size read 300 ms and again 500 ms after each switch-off. With
SWITCH false the pool is never switched on: the same load on the stock paths.
"""

import re

from . import measure

# Booted with the pool off; init_on_free=1: the page allocator checks every page freed to it
# (a declared one, PT_pooled, is a bad page). print-fatal-signals=1: a process killed by a
# signal gets its registers printed (how a death is counted).
DOM0_ARGS = ("xen_pgtable_pool=0", "init_on_free=1", "print-fatal-signals=1")

SCRIPT = """
P=%(pool)s; rm -f /tmp/stop;
for p in $(seq %(smp)d); do
    (n=0; while [ ! -e /tmp/stop ]; do
        forkbench --n 20 --touch-mb 4 >/dev/null 2>&1 || echo "LOADFAIL $?"; n=$((n+1));
    done; echo "loop $n") &
done;
(n=0; while [ ! -e /tmp/stop ]; do
    ptfault --threads %(smp)d --ranges 64 --n 10 >/dev/null 2>&1 || echo "LOADFAIL $?"; n=$((n+1));
done; echo "faults $n") &
for i in $(seq %(rounds)d); do
    echo %(cap)d > $P/max_pages; usleep 200000;
    echo 0 > $P/max_pages; usleep 300000;
    read -r a <$P/pages; usleep 200000;
    read -r b <$P/pages; echo "round $i pages $a $b";
    if [ %(stop)d = 1 ] && [ "$a" != 0 ] && [ "$b" != 0 ]; then break; fi;
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
    return SCRIPT % {"pool": measure.POOL_DIR, "smp": smp, "rounds": rounds,
                     "cap": measure.POOL_DEFAULT_CAP if switch else 0, "stop": 1 if stop_when_left else 0}


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
    """SMP fork and exec loops for SECONDS, no pool involved: deaths by signal."""
    out = tb.check(STORM % {"smp": smp, "seconds": seconds}, timeout=seconds + 300)
    fatal, by_signal, lines = deaths(tb)
    failed = [int(line.split()[1]) for line in out if line.startswith("LOADFAIL ")]
    loops = [int(line.split()[1]) for line in out if line.startswith("loop ")]
    # The kernel's whole report of each death (registers, FS base, code bytes), for locating it.
    return {"deaths_by_signal": by_signal, "death_lines": fatal[:80], "load_failures": failed, "loops": loops,
            "summary": "%d s, loops %s, deaths %s, load failures %s" % (seconds, loops, by_signal or 0, failed or 0)}


def left_pages(line):
    """A round line's two reads: did both see pages in the pool?"""
    values = [int(v) for v in line.split()[3:5]]
    assert len(values) == 2, line
    return all(values)


def run(tb, smp, rounds, switch=True, stop_when_left=False):
    """The load on a booted testbed: rounds read, deaths by signal, load failures."""
    out = tb.check(script(smp, rounds, switch, stop_when_left), timeout=60 + 20 * rounds)
    fatal, by_signal, lines = deaths(tb)
    read = [line for line in out if re.fullmatch(r"round \d+ pages \d+ \d+", line)]
    failed = [int(line.split()[1]) for line in out if line.startswith("LOADFAIL ")]
    loops = [int(line.split()[1]) for line in out if line.startswith("loop ")]
    faults = [int(line.split()[1]) for line in out if line.startswith("faults ")]
    stats = measure.Session(tb).pool_stats()
    return {"out": out, "fatal_signals": fatal, "deaths_by_signal": by_signal, "death_lines": lines[:10],
            "rounds_read": len(read), "rounds_left_pages": sum(left_pages(x) for x in read),
            "load_failures": failed, "loops": loops, "ptfault_runs": faults[0] if faults else 0, "stats": stats,
            "summary": "%d rounds read, loops %s, ptfault runs %s, deaths %s, load failures %s"
                       % (len(read), loops, faults, by_signal or 0, failed or 0)}
