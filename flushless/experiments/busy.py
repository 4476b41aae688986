"""The busy state, minute by minute: the study script's output parsed into one row per scaled
minute (flushes, processes created, the pool, per-level alloc and free time), and the summaries
the report draws from those rows."""

import shlex
import time

from ..progress import ToolError, log
from . import measure, workloads
from .measure import COUNTERS, OPTIONAL_COUNTERS, parse_counters, parse_stats
from .results import mean, stdev

# The pool (patches/linux) is one pool for every level: its figures are "all". Making a page a
# table of a live address space, and back, is timed per level by ftrace's function profiler on
# the Xen PV hooks of each level (where Xen does the IOMMU work).
POOL_LEVEL = "all"
TIMING_LEVELS = ("pte", "pmd", "pud")
PROFILED = {"xen_alloc_pte": ("pte", "alloc"), "xen_alloc_pmd": ("pmd", "alloc"), "xen_alloc_pud": ("pud", "alloc"),
            "xen_release_pte": ("pte", "free"), "xen_release_pmd": ("pmd", "free"), "xen_release_pud": ("pud", "free")}
TRACING = "/sys/kernel/tracing"
CACHE_GROUPS = ("pre", "adaptive", "dyn")


# --- the busy-state timeline ------------------------------------------------------------

def parse_study(lines):
    """The study script's output -> (samples, switched_at, output lines, audit, status)."""
    samples, cur, part, output, audit, status, switched = [], None, None, [], [], None, None
    for line in lines:
        if line.startswith("@@sample "):
            _, idx, t = line.split()
            cur = {"index": idx, "t": float(t), "counters": [], "pool": [], "profile": [], "meminfo": []}
            samples.append(cur)
            part = cur["counters"]
        elif line in ("@@pool", "@@profile", "@@meminfo"):
            part = cur[line[2:]]
        elif line.startswith("@@switched "):
            switched = float(line.split()[1])
        elif line == "@@switch-failed":
            raise ToolError("dom0 could not switch the page-table pool on")
        elif line == "@@output":
            part = output
        elif line == "@@audit":
            part = audit
        elif line.startswith("@@status "):
            status = int(line.split()[1])
            part = None
        elif part is not None:
            part.append(line)
    if status is None or not samples:
        raise ValueError("the study script printed no status or no samples")
    for s in samples:
        s["counters"] = parse_counters(s["counters"])
        s["pool"] = parse_stats(s["pool"])
        if s["pool"]:
            s["pool"]["in_use"] = measure.pool_in_use(s["pool"])
        s["profile"] = parse_profile(s["profile"])
        s["meminfo"] = {k.rstrip(":"): int(v.split()[0]) for k, v in
                        (m.split(None, 1) for m in s["meminfo"])}
    return samples, switched, output, parse_stats(audit), status


def parse_profile(lines):
    """ftrace's trace_stat/function* lines -> {function: (hits, ns)}, summed over CPUs."""
    units = {"ns": 1, "us": 1000, "ms": 1000000, "s": 1000000000}
    out = {}
    for line in lines:
        f = line.split()
        if len(f) >= 4 and f[0] in PROFILED and f[1].isdigit() and f[3] in units:
            hits, ns = out.get(f[0], (0, 0))
            out[f[0]] = (hits + int(f[1]), ns + round(float(f[2]) * units[f[3]]))
    return out


def start_profile(tb):
    """Time the per-level hooks with ftrace's function profiler (counted from now)."""
    tb.check("echo %s > %s/set_ftrace_filter && echo 0 > %s/function_profile_enabled && "
             "echo 1 > %s/function_profile_enabled" % (" ".join(PROFILED), TRACING, TRACING, TRACING))


def stop_profile(tb):
    tb.check("echo 0 > %s/function_profile_enabled && echo > %s/set_ftrace_filter" % (TRACING, TRACING))


def minute_rows(group, samples, churn_rows):
    """Per scaled minute: Xen's counts, the pool's figures, the per-level hooks' time (when
    profiled), processes created."""
    timed = [s for s in samples if s["index"] != "end"]
    flush, pools, timing = [], [], []
    for m, (a, b) in enumerate(zip(timed, timed[1:])):
        d = measure.delta(a["counters"], b["counters"])
        row = {"group": group, "minute": m, "t_s": round(b["t"] - timed[0]["t"], 2)}
        row.update({key: d[xen] for xen, key in list(COUNTERS.items()) + list(OPTIONAL_COUNTERS.items())
                    if xen in d})
        # churn's --report rows are cumulative, one per scaled minute of its own clock.
        prev = churn_rows[m - 1]["created"] if 0 < m <= len(churn_rows) else 0
        row["created"] = churn_rows[m]["created"] - prev if m < len(churn_rows) else None
        flush.append(row)
        pa, pb = a["pool"], b["pool"]
        if pb:
            r = {"group": group, "minute": m, "level": POOL_LEVEL}
            for k in ("hits", "misses", "marked", "unmarked", "shrunk"):
                r[k] = pb[k] - pa[k]
            r["given_back"] = r["unmarked"]
            r["pool"], r["in_use"] = pb["pages"], pb["in_use"]
            pools.append(r)
        if b["profile"]:
            for lv in TIMING_LEVELS:
                r = {"group": group, "minute": m, "level": lv}
                for fn, (flv, kind) in PROFILED.items():
                    if flv == lv:
                        hb, nb = b["profile"].get(fn, (0, 0))
                        ha, na = a["profile"].get(fn, (0, 0))
                        r[kind + "_count"], r[kind + "_ns"] = hb - ha, nb - na
                r["avg_alloc_ns"] = round(r["alloc_ns"] / r["alloc_count"], 1) if r["alloc_count"] else None
                r["avg_free_ns"] = round(r["free_ns"] / r["free_count"], 1) if r["free_count"] else None
                timing.append(r)
    return flush, pools, timing


def run_group(tb, group, profile, minutes, switch, cap=measure.POOL_DEFAULT_CAP):
    """One group's busy state on a booted testbed; returns its record. SWITCH: the scaled
    minute after which the pool's cap is raised to CAP (0: never)."""
    duration = int(minutes * profile.minute_s)
    churn = ["churn", "--duration", str(duration), "--rate", str(profile.churn_rate),
             "--report", str(int(profile.minute_s))] + workloads.CHURN_SHAPE
    workloads.get("churn").check_args(churn[1:])
    cmd = "study %s %d %d %d %s" % (profile.minute_s, minutes, switch, cap, " ".join(shlex.quote(a) for a in churn))
    log("%s: %d scaled minutes of %g s, churn at %d creations/min%s"
        % (group, minutes, profile.minute_s, profile.churn_rate,
           ", cache switched on at minute %d" % switch if switch else ""))
    # churn's processes are all forked from one exec, so ASLR picks one address-space layout
    # per run, and with it how many page-table pages each process needs (libraries and heap
    # straddling a 2 MiB or 1 GiB boundary or not): about 10 % between runs. Fixed layout:
    # the same counts on every run.
    measure.Session(tb).set_aslr(False)
    t0 = time.monotonic()

    def minute_done(m):
        if m.group("sample") != "0":
            log("%s: minute %s/%d" % (group, m.group("sample"), minutes))

    status, lines = tb.run(cmd, timeout=3 * duration + 600, progress=(r"@@sample (?P<sample>\d+) ", minute_done))
    if status == 125:
        raise ToolError("xenperfc could not read Xen's counters in dom0:\n%s" % "\n".join(lines[-10:]))
    try:
        samples, switched, output, audit, rc = parse_study(lines)
        result, churn_rows = workloads.parse_output(output)
    except ValueError as e:
        raise ToolError("%s: could not parse the study's output: %s\n%s"
                        % (group, e, "\n".join("    " + x for x in lines[-20:])))
    if rc != 0:
        raise ToolError("%s: churn exited %d:\n%s" % (group, rc, "\n".join("    " + x for x in output[-20:])))
    flush, pools, timing = minute_rows(group, samples, churn_rows)
    last = [s for s in samples if s["index"] != "end"][-1]
    rec = {"group": group, "minutes": minutes, "switch_minute": switch or None, "churn_argv": churn[1:],
           "randomize_va_space": 0,
           "churn_result": result, "audit": audit, "invariant_violations": audit.get("violations"),
           "overrun_s": round(samples[-1]["t"] - last["t"], 2), "host_seconds": round(time.monotonic() - t0, 1),
           "switched_at_s": round(switched - samples[0]["t"], 2) if switched else None,
           "meminfo_kb": last["meminfo"], "pool_end": last["pool"],
           "flush_rows": flush, "pool_rows": pools, "timing_rows": timing}
    total = sum(r["qi_iotlb_inv"] for r in flush)
    log("%s: %d IOTLB invalidations in %d minutes, %d processes created (%.0f/min achieved), audit %s violations"
        % (group, total, minutes, result["ops"], result.get("rate_per_min", 0), audit.get("violations")))
    return rec


# --- summaries ----------------------------------------------------------------------------

def alloc_free_summary(levels, switch):
    """Off (minutes before SWITCH) and on (from SWITCH + 2): total alloc/free time and count,
    per level and all levels."""
    out = {}
    for r in levels:
        if switch <= r["minute"] < switch + 2:
            continue
        g = out.setdefault("off" if r["minute"] < switch else "on", {})
        for lv in (r["level"], "all"):
            s = g.setdefault(lv, {"alloc_ns": 0, "alloc_count": 0, "free_ns": 0, "free_count": 0})
            for k in s:
                s[k] += r[k]
    for g in out.values():
        for s in g.values():
            s["avg_alloc_ns"] = round(s["alloc_ns"] / s["alloc_count"], 1) if s["alloc_count"] else None
            s["avg_free_ns"] = round(s["free_ns"] / s["free_count"], 1) if s["free_count"] else None
    return out


def cache_size_summary(recs):
    """Pool pages against declared page-table pages in use at the end of the groups with the
    cache (one pool for every level)."""
    out = {}
    for rec in recs:
        if rec["group"] not in CACHE_GROUPS:
            continue
        pt = rec["pool_end"]
        pool, in_use = pt["pages"], pt["in_use"]
        s = {}
        mi = rec["meminfo_kb"]
        used_kb = mi["MemTotal"] - mi["MemAvailable"]
        s["total"] = {"pool": pool, "in_use": in_use, "pool_kb": pool * 4, "dom0_used_kb": used_kb,
                      "pool_share_of_used": round(pool * 4 / used_kb, 5) if used_kb else None}
        out[rec["group"]] = s
    return out


def cache_miss_rows(levels):
    rows = []
    for group in CACHE_GROUPS:
        for lv in (POOL_LEVEL,):
            rs = [r for r in levels if r["group"] == group and r["level"] == lv]
            if not rs:
                continue
            hits, misses = sum(r["hits"] for r in rs), sum(r["misses"] for r in rs)
            rows.append({"group": group, "level": lv, "hits": hits, "misses": misses, "allocations": hits + misses,
                         "miss_probability": round(misses / (hits + misses), 5) if hits + misses else None})
    return rows


def paired_summary(rows, key, value):
    """baseline vs dyn per KEY: mean, standard deviation, n, range, and dyn's difference."""
    out = {}
    names = sorted(set(r[key] for r in rows)) if key else [None]
    for name in names:
        s = {}
        for group in ("baseline", "dyn"):
            xs = [r[value] for r in rows if r["group"] == group and (key is None or r[key] == name)]
            s[group] = {"n": len(xs), "mean": mean(xs), "stdev": stdev(xs),
                        "min": min(xs) if xs else None, "max": max(xs) if xs else None}
        b, d = s["baseline"], s["dyn"]
        if b["mean"] and d["mean"] is not None:
            s["dyn_vs_baseline"] = round(d["mean"] / b["mean"] - 1, 5)
            # Standard error of the difference of the means, relative to baseline's mean.
            se = ((b["stdev"] ** 2 / max(b["n"], 1)) + (d["stdev"] ** 2 / max(d["n"], 1))) ** 0.5
            s["se_rel"] = round(se / b["mean"], 5)
        out[name or "all"] = s
    return out
