"""flushless series: what the Linux series (patches/linux) must show, measured on the testbed.

Experiments (each writes RESULTS/NAME.json and RESULTS/NAME.csv):
  offstock   the series booted with the pool off (xen_pgtable_pool=0) against vanilla (same
             source and config, no series), -icount, 1 vCPU, fork+exit and fork+exec, median of
             R runs per boot
  native     the kernels booted without Xen (no IOMMU), -icount, 1 vCPU: vanilla; the series,
             which has no pool there; the series with testbed/linux's pool that declares
             nothing, off and on: the paper's proposed native port
  protection strict mode with the cache on against relaxed mode (no DMA protection at all),
             -icount, 1 vCPU, lat_proc fork and exec, median of R runs, cache off and on in each
  flushes    cache on (adaptive, warm) against off, invalidations per operation for fork+exit,
             fork+exec and a 64 MiB fork, at 1, 2, 4 and 8 vCPUs (strict mode)
  scale      N parallel fork+exit loops (N = vCPUs), cache off and on interleaved in one boot
  workloads  churn's default shape without residents, the study's busy state and a shell
             script in bursts: invalidations with the cache on against off, pool against use
  boots      N boots per kernel and TCG threading, none retried: crashes and stalls counted
  soak       churn for M minutes with the pool switched every minute, its cap and the study's
             policy changed at random, drop_caches and a memory hog in between; then every check

Counts decide; times are emulation times: -icount medians (offstock) or compared within one
boot, interleaved (scale, the relaxed comparison).
"""

import os
import random
import statistics
import time

from ..progress import ToolError, log
from ..testbed import build, findings, qemu
from ..testbed.boot import BootConfig, Testbed
from . import measure, workloads
from .census import boot_once
from .results import write_csv, write_json

EXPERIMENTS = ("offstock", "xenoff", "native", "boots", "protection", "flushes", "scale", "workloads", "soak")

FORK = ("fork+exit", "forkbench", ["--n", "200", "--warmup", "100"])
EXEC = ("fork+exec", "forkbench", ["--n", "100", "--exec", "--warmup", "100"])
TOUCH = ("fork+exit 64 MiB", "forkbench", ["--n", "30", "--touch-mb", "64", "--warmup", "20"])

# churn's default (browser-sized) shape, no residents; the study's busy state; a script.
WORKLOADS = [
    ("churn default shape", "churn", ["--duration", "20", "--warmup", "5"]),
    ("busy state", "churn", ["--duration", "20", "--warmup", "5", "--rate", "300", "--tabs", "4", "--libs", "3",
                             "--lib-kb", "64", "--heap-kb", "256", "--resident", "16"]),
    ("shell script", "shloop", ["--bursts", "20", "--k", "20", "--gap-ms", "500", "--warmup", "2"]),
]


class _Boot(Testbed):
    """A testbed boot with ASLR off: with it, how many page tables a process needs varies by
    about 10 % from run to run (libraries straddling a 2 MiB boundary or not), which would
    drown every comparison here."""

    def start(self, attempts=2):
        super().start(attempts)
        _RELEASES.add(self.release)
        measure.Session(self).set_aslr(False)


# The kernel releases booted since the last results file was written: each file names them.
_RELEASES = set()


def _boot(parts, console_dir, name, **kw):
    cfg = BootConfig(xen=parts.xen.path("xen"), kernel=parts.kernel.path("vmlinuz"),
                     initramfs=parts.dom0_initramfs(), **kw)
    os.makedirs(console_dir, exist_ok=True)
    return _Boot(cfg, os.path.join(console_dir, name + ".log"))


def _write(results, name, rows, **doc):
    os.makedirs(results, exist_ok=True)
    doc.update({"experiment": name, "rows": rows, "qemu": qemu.info(), "kernel_release": sorted(_RELEASES),
                "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    _RELEASES.clear()
    write_json(os.path.join(results, name + ".json"), doc)
    write_csv(os.path.join(results, name + ".csv"), rows)
    log("wrote %s/%s.{json,csv} (%d rows)" % (results, name, len(rows)))


def _check_clean(session, what):
    """Xen's invariant and dom0's log: nothing may be wrong after WHAT."""
    audit = measure.parse_stats(session.tb.check("xenpvsw audit 0"))
    if audit.get("violations"):
        raise ToolError("%s: Xen's audit found %d violations" % (what, audit["violations"]))
    bad = findings.in_dmesg(session.tb)
    return audit, bad


# The lmbench runs of the -icount experiments: fork+exit and fork+exec, after a warm-up.
LAT_PROC = (("fork", ["--n", "200", "--warmup", "50"]), ("exec", ["--n", "100", "--warmup", "20"]))


def offstock(results, console_dir, rounds=5):
    """Built kernel, pool off at boot, against vanilla: -icount, 1 vCPU, R rounds each."""
    rows = []
    for kernel in ("vanilla", "built"):
        parts = build.Parts(kernel).ensure()
        args = ("xen_pgtable_pool=0",) if kernel == "built" else ()
        with _boot(parts, console_dir, "offstock-" + kernel, smp=1, icount=True, dom0_args=args) as tb:
            session = measure.Session(tb)
            active = None
            if kernel == "built":
                active = int(session.pool_get("max_pages"))
            for r in range(rounds):
                for what, argv in LAT_PROC:
                    rec = session.run("lat_proc", ["--what", what] + argv)
                    rows.append({"kernel": kernel, "release": tb.release, "round": r, "what": what,
                                 "mean_us": rec["result"]["time_us"], "median_us": rec["result"]["median_us"],
                                 "qi_iotlb_inv_per_op": rec["per_op"]["qi_iotlb_inv"], "pool_cap": active})
    summary = {}
    for what in ("fork", "exec"):
        med = {k: statistics.median(r["mean_us"] for r in rows if r["kernel"] == k and r["what"] == what)
               for k in ("vanilla", "built")}
        summary[what] = dict(med, delta_pct=round(100 * (med["built"] / med["vanilla"] - 1), 3),
                             within_0_3_pct=abs(med["built"] / med["vanilla"] - 1) <= 0.003)
    log("offstock: %s" % summary)
    _write(results, "offstock", rows, summary=summary,
           timing="-icount shift=0 (1 ns per instruction), 1 vCPU, median of %d rounds per kernel" % rounds)
    return summary


def _has_no_pool(tb, what):
    """No pool where no hypervisor takes declarations: its debugfs directory is absent."""
    out = tb.check("test -e %s && echo present || echo absent" % measure.POOL_DIR)
    if out[-1:] != ["absent"]:
        raise ToolError("%s: %s" % (what, out))
    return out


NATIVE_KERNELS = (("vanilla", None, ()), ("built", None, ()),
                  ("testbed", build.testbed_linux_series(), ("xen_pgtable_pool_test_native=1",)))


def native(results, console_dir, rounds=5, name="native"):
    """The kernels without Xen (no marks, no IOMMU), -icount, 1 vCPU, R rounds each: vanilla;
    the series (off, and switching on must fail: no hypervisor takes declarations); and the
    series with testbed/linux's ops that declare nothing, cache off and on interleaved, for
    what caching alone would save natively."""
    rows, end_stats, no_pool, versions = [], {}, None, {}
    for kernel, series, args in NATIVE_KERNELS:
        parts = build.Parts("vanilla" if kernel == "vanilla" else "built", linux_series=series).ensure()
        versions[kernel] = {k: v for k, v in parts.kernel.manifest().items() if k != "inputs"}
        with _boot(parts, console_dir, "native-" + kernel, smp=1, icount=True, native=True,
                   dom0_args=args) as tb:
            if kernel == "built":
                no_pool = _has_no_pool(tb, "native: a pool without a hypervisor")
            for r in range(rounds):
                for cache in ((0, 1) if r % 2 == 0 else (1, 0)) if kernel == "testbed" else (None,):
                    if cache is not None:
                        measure.Session(tb).configure_pool(measure.cache_settings(cache))
                    for what, argv in (("fork", "--n 200 --warmup 50"), ("exec", "--n 100 --warmup 20")):
                        result, _ = workloads.parse_output(tb.check("lat_proc --what %s %s" % (what, argv)))
                        rows.append({"kernel": kernel, "release": tb.release, "cache": cache, "round": r,
                                     "what": what, "mean_us": result["time_us"], "median_us": result["median_us"]})
            if kernel == "testbed":
                s = measure.Session(tb).pool_stats()
                end_stats = {k: s[k] for k in ("hits", "misses", "marked") if k in s}
    summary = {"pool_stats_end": end_stats, "series_has_no_pool": no_pool}
    for what in ("fork", "exec"):
        med = {name: statistics.median(r["mean_us"] for r in rows if r["kernel"] == k and r["cache"] == c
                                       and r["what"] == what)
               for name, k, c in (("vanilla", "vanilla", None), ("built_off", "built", None),
                                  ("testbed_off", "testbed", 0), ("testbed_on", "testbed", 1))}
        med["on_vs_off_pct"] = round(100 * (med["testbed_on"] / med["testbed_off"] - 1), 3)
        med["off_vs_vanilla_pct"] = round(100 * (med["built_off"] / med["vanilla"] - 1), 3)
        summary[what] = med
    log("native: %s" % summary)
    _write(results, name, rows, summary=summary, versions=versions, args={k: list(a) for k, _, a in NATIVE_KERNELS},
           timing="-icount shift=0 (1 ns per instruction), 1 vCPU, no Xen, median of %d rounds" % rounds)
    return summary


def protection(results, console_dir, rounds=5):
    """Is the cache protection for free? strict + cache on against relaxed, -icount, 1 vCPU."""
    rows = []
    parts = build.Parts("built").ensure()
    for mode in ("strict", "relaxed"):
        with _boot(parts, console_dir, "protection-" + mode, smp=1, icount=True, mode=mode) as tb:
            session = measure.Session(tb)
            if mode == "relaxed":
                # No IOMMU sync, so Xen offers no declarations: there is no pool.
                _has_no_pool(tb, "protection: a pool in relaxed mode")
            for r in range(rounds):
                for cache in (0, 1) if mode == "strict" else (0,):
                    if mode == "strict":
                        session.configure_pool(measure.cache_settings(cache))
                    for what, argv in LAT_PROC:
                        rec = session.run("lat_proc", ["--what", what] + argv)
                        rows.append({"mode": mode, "cache": cache, "round": r, "what": what,
                                     "mean_us": rec["result"]["time_us"],
                                     "qi_iotlb_inv_per_op": rec["per_op"]["qi_iotlb_inv"]})
    summary = {}
    for what in ("fork", "exec"):
        med = {"%s_cache%d" % (m, c): statistics.median(r["mean_us"] for r in rows if r["mode"] == m
                                                         and r["cache"] == c and r["what"] == what)
               for m, c in (("strict", 0), ("strict", 1), ("relaxed", 0))}
        med["strict_on_vs_relaxed_off_pct"] = round(100 * (med["strict_cache1"] / med["relaxed_cache0"] - 1), 3)
        med["at_or_below_relaxed"] = med["strict_cache1"] <= med["relaxed_cache0"]
        summary[what] = med
    log("protection: %s" % summary)
    _write(results, "protection", rows, summary=summary,
           timing="-icount shift=0 (1 ns per instruction), 1 vCPU, median of %d rounds, cache switched within "
                  "each boot; QEMU completes an IOTLB invalidation at once, so strict mode's extra cost here is "
                  "the CPU work only" % rounds)
    return summary


def flushes(results, console_dir, smps=(1, 2, 4, 8), modes=("strict",)):
    """Invalidations per operation, cache off and on (adaptive, warm); relaxed mode has none
    (protection compares the two)."""
    rows = []
    parts = build.Parts("built").ensure()
    for smp in smps:
        for mode in modes:
            with _boot(parts, console_dir, "flushes-%s-%d" % (mode, smp), smp=smp, mode=mode) as tb:
                session = measure.Session(tb)
                for cache in (0, 1):
                    session.configure_pool(measure.cache_settings(cache))
                    for label, name, argv in (FORK, EXEC, TOUCH):
                        rec = session.run(name, argv)
                        rows.append({"smp": smp, "mode": mode, "cache": cache, "what": label, "ops": rec["ops"],
                                     "qi_iotlb_inv_per_op": rec["per_op"]["qi_iotlb_inv"],
                                     "iommu_unmap_type_per_op": rec["per_op"]["iommu_unmap_type"],
                                     "iommu_map_type_per_op": rec["per_op"]["iommu_map_type"],
                                     "time_us": rec["result"]["time_us"],
                                     "violations": rec.get("invariant_violations")})
                        log("flushes: %d vCPUs %s cache %d %s: %.3f invalidations/op"
                            % (smp, mode, cache, label, rows[-1]["qi_iotlb_inv_per_op"]))
                _check_clean(session, "flushes")
            # After every boot: a long run cut short keeps what it measured.
            worst = max((r["qi_iotlb_inv_per_op"] for r in rows if r["cache"] and r["mode"] == "strict"),
                        default=None)
            summary = {"worst_cache_on_strict_per_op": worst, "goal": 0.05,
                       "met": worst is not None and worst <= 0.05, "vcpus_done": sorted({r["smp"] for r in rows})}
            _write(results, "flushes", rows, summary=summary,
                   timing="counts are exact; time_us is TCG wall clock: compare only within one boot")
    log("flushes: %s" % summary)
    return summary


def scale(results, console_dir, smps=(1, 2, 4, 8), rounds=4):
    """N parallel fork+exit loops, cache off and on interleaved (ABBA) in one boot per vCPU
    count: medians of ROUNDS runs each."""
    rows = []
    parts = build.Parts("built").ensure()
    for smp in smps:
        # More vCPU threads than host CPUs: a vCPU spinning on another's IPI waits for the host
        # scheduler (docs/linux-series.md, "Scale"); round robin runs every vCPU on one thread instead.
        tcg_thread = "multi" if smp <= (os.cpu_count() or 1) else "single"
        with _boot(parts, console_dir, "scale-%d" % smp, smp=smp, tcg_thread=tcg_thread) as tb:
            session = measure.Session(tb)
            for r in range(rounds):
                for cache in (0, 1) if r % 2 == 0 else (1, 0):
                    session.configure_pool(measure.cache_settings(cache))
                    rec = session.run("forkbench", ["--n", "100", "--warmup", "20", "--procs", str(smp)])
                    rows.append({"smp": smp, "tcg_thread": tcg_thread, "round": r, "cache": cache, "ops": rec["ops"],
                                 "ops_per_s": rec["result"]["ops_per_s"],
                                 "qi_iotlb_inv_per_op": rec["per_op"]["qi_iotlb_inv"]})
                    log("scale: %d loops, cache %d: %.0f fork+exit/s" % (smp, cache, rows[-1]["ops_per_s"]))
    summary = {}
    for smp in smps:
        off = statistics.median(r["ops_per_s"] for r in rows if r["smp"] == smp and not r["cache"])
        on = statistics.median(r["ops_per_s"] for r in rows if r["smp"] == smp and r["cache"])
        summary[str(smp)] = {"off_ops_per_s": off, "on_ops_per_s": on, "on_at_least_off": on >= off}
    log("scale: %s" % summary)
    _write(results, "scale", rows, summary=summary,
           timing="TCG wall clock, cache off and on interleaved within one boot per vCPU count")
    return summary


def workloads_exp(results, console_dir):
    """Each workload once unmeasured (warm), then measured, cache off then on (adaptive)."""
    rows = []
    parts = build.Parts("built").ensure()
    with _boot(parts, console_dir, "workloads") as tb:
        session = measure.Session(tb)
        for label, name, argv in WORKLOADS:
            for cache in (0, 1):
                session.configure_pool(measure.cache_settings(cache))
                session.run(name, argv)  # warm: the pools fill (or not) as they would
                rec = session.run(name, argv)
                pt = rec.get("pool", {})
                meminfo = dict(line.split(":", 1) for line in tb.check("cat /proc/meminfo") if ":" in line)
                rows.append({"workload": label, "cache": cache, "ops": rec["ops"],
                             "qi_iotlb_inv": rec["counters"]["qi_iotlb_inv"],
                             "pool_pages": pt.get("pages"),
                             "page_tables_in_use": pt.get("in_use"),
                             "page_tables_kb": int(meminfo.get("PageTables", "0 kB").split()[0]),
                             "anon_kb": int(meminfo.get("AnonPages", "0 kB").split()[0]),
                             "violations": rec.get("invariant_violations")})
                log("workloads: %s cache %d: %d invalidations" % (label, cache, rows[-1]["qi_iotlb_inv"]))
        _check_clean(session, "workloads")
    summary = {}
    for label, _, _ in WORKLOADS:
        off = next(r for r in rows if r["workload"] == label and not r["cache"])["qi_iotlb_inv"]
        on = next(r for r in rows if r["workload"] == label and r["cache"])["qi_iotlb_inv"]
        summary[label] = {"off": off, "on": on, "on_pct_of_off": round(100 * on / off, 3) if off else None,
                          "within_1_pct": off > 0 and on <= 0.01 * off}
    log("workloads: %s" % summary)
    _write(results, "workloads", rows, summary=summary, timing="counts only")
    return summary


def soak(results, console_dir, minutes=30, seed=1):
    """Churn with the cache switched every minute and everything else changed at random."""
    rng = random.Random(seed)
    # The study's fixed policy (paper_ratio) is testbed/linux's, not the series'.
    parts = build.Parts("built", linux_series=build.testbed_linux_series()).ensure()
    rows = []
    # init_on_free=1 makes the page allocator check every freed page's flags: a page that
    # reached it still declared to Xen (PT_pooled, PG_private) is reported as a "Bad page state".
    with _boot(parts, console_dir, "soak", dom0_args=("init_on_free=1",)) as tb:
        session = measure.Session(tb)
        t_end = time.monotonic() + minutes * 60
        m = 0
        while time.monotonic() < t_end:
            settings = {"max_pages": rng.choice((16, 256, 4096)) if m % 2 else 0,
                        "paper_ratio": rng.choice((0, 0, 1, 2, 4))}
            session.configure_pool(settings)
            extra = rng.choice(("drop_caches", "hog", "none"))
            cmd = "churn --duration 50 --rate 600 --resident %d >/dev/null" % rng.choice((0, 4))
            if extra == "drop_caches":
                cmd += " & sleep 20; echo 3 > /proc/sys/vm/drop_caches; wait"
            elif extra == "hog":
                cmd += " & sleep 20; forkbench --n 1 --touch-mb 600 >/dev/null; wait"
            tb.check(cmd, timeout=600)
            s = session.pool_stats()
            rows.append(dict(settings, minute=m, extra=extra, pool_pages=s["pages"], in_use=measure.pool_in_use(s),
                             leaked=s["leaked"], unmark_retried=s["unmark_retried"]))
            if s["pages"] > settings["max_pages"] + s["unmark_retried"]:
                raise ToolError("soak: pool holds %d pages over its cap %d" % (s["pages"], settings["max_pages"]))
            log("soak: minute %d: %s, %s, pool %d pages" % (m, settings, extra, s["pages"]))
            m += 1
        session.configure_pool({"max_pages": 0, "paper_ratio": 0})
        audit, bad = _check_clean(session, "soak")
        s = session.pool_stats()
    # Marked frames after off: declared tables still in use (those of the shell and its
    # children), none in the pool; the audit checks each is a table or a pool page.
    summary = {"minutes": m, "violations": audit["violations"], "dmesg_warnings": bad,
               "marked_frames_after_off": audit.get("marked"), "declared_in_use_after_off": measure.pool_in_use(s),
               "leaked": s["leaked"], "pool_pages_after_off": s["pages"],
               "ok": not audit["violations"] and not bad and s["pages"] == 0 and not s["leaked"]
                     and audit.get("marked") == measure.pool_in_use(s)}
    log("soak: %s" % summary)
    _write(results, "soak", rows, summary=summary, seed=seed)
    if not summary["ok"]:
        raise ToolError("soak failed: %s" % summary)
    return summary


BOOT_CONFIGS = (("built", "multi"), ("debian", "multi"), ("built", "single"))


def boots(results, console_dir, n=30, smp=2, configs=BOOT_CONFIGS, xen_series=None):
    """N boots per (kernel, TCG threading), each to dom0's shell and no further, none
    retried: how often a boot crashes or stalls. XEN_SERIES [] boots Xen without patches/xen."""
    rows = []
    for kernel, thread in configs:
        parts = build.Parts(kernel, xen_series=xen_series).ensure()
        for i in range(n):
            name = "boots-%s-%s-%d" % (kernel, thread, i)
            tb = _boot(parts, console_dir, name, smp=smp, tcg_thread=thread, boot_timeout=120)
            try:
                outcome, what = boot_once(tb)
            finally:
                tb.stop()
            rows.append({"kernel": kernel, "tcg_thread": thread, "xen_patched": xen_series != [],
                         "boot": i, "outcome": outcome, "what": what,
                         "console_log": os.path.join(console_dir, name + ".log")})
            log("boots: %s, TCG %s, %d/%d: %s %s" % (kernel, thread, i + 1, n, outcome, what))
    summary = {"%s-%s" % c: {k: sum(1 for r in rows if (r["kernel"], r["tcg_thread"]) == c and r["outcome"] == k)
                             for k in ("ok", "crash", "stall", "error")} for c in configs}
    log("boots: %s" % summary)
    _write(results, "boots", rows, summary=summary, smp=smp, boots_per_config=n)
    return summary


def run(names, results, console_dir, quick=False, restart=False):
    """Each experiment in turn, recorded in RESULTS/stages.json (ledger.py): a rerun keeps those
    done with the same build and --quick; RESTART moves their results aside and runs them all.
    The first failure ends the run (recorded, then raised). {name: result} of those run now."""
    from . import ledger
    book = ledger.Ledger(results, log)
    # The built parts' keys and the other parts' inputs, as for reproduce's stages (Study.depends).
    q = qemu.info()
    base = {"quick": quick, "parts": ledger.parts_keys(build.Parts("built")), "sources": ledger.sources_digest(),
            "qemu": "%s %s" % (q["qemu_version"], q["qemu_package"])}
    if restart:
        for name in names:
            book.restart(name, (name,))
    out = {}
    for i, name in enumerate(names):
        depends = dict(base, experiment=name)
        if not book.prepare(name, depends, (name,)):
            continue
        log("series %d/%d %s: start" % (i + 1, len(names), name))
        t0 = time.monotonic()
        # Set again for each: a testbed boot resets SIGTERM to the default when it ends.
        with ledger.sigterm_interrupts():
            try:
                out[name] = book.run(name, depends, lambda: _experiment(name, results, console_dir, quick),
                                     console_dir)
            except Exception:
                log("series %s: failed after %.0f s (console log: %s); recorded in %s, the same command "
                    "resumes from it" % (name, time.monotonic() - t0, book.entry(name).get("console_log"), book.path))
                raise
        log("series %d/%d %s: done in %.0f s" % (i + 1, len(names), name, time.monotonic() - t0))
    return out


def xenoff(results, console_dir, rounds=5):
    """What the Xen series costs a guest that never marks: Debian's kernel on Xen with the
    counters patch alone (patches/xen 0001, the reference: measuring needs its counters)
    against the whole series, strict mode, -icount, 1 vCPU, R rounds each."""
    rows = []
    series = build.patches("xen")
    for name, xen_series in (("counters-only", series[:1]), ("series", series)):
        parts = build.Parts("debian", xen_series=xen_series).ensure()
        with _boot(parts, console_dir, "xenoff-" + name, smp=1, icount=True) as tb:
            # The audit comes with the series (0004); it runs after each run, not in it.
            session = measure.Session(tb, audit=name == "series")
            for r in range(rounds):
                for what, argv in LAT_PROC:
                    rec = session.run("lat_proc", ["--what", what] + argv)
                    rows.append({"xen": name, "round": r, "what": what, "mean_us": rec["result"]["time_us"],
                                 "median_us": rec["result"]["median_us"],
                                 "qi_iotlb_inv_per_op": rec["per_op"]["qi_iotlb_inv"],
                                 "iommu_unmap_type_per_op": rec["per_op"]["iommu_unmap_type"]})
    summary = {}
    for what in ("fork", "exec"):
        med = {k: statistics.median(r["mean_us"] for r in rows if r["xen"] == k and r["what"] == what)
               for k in ("counters-only", "series")}
        summary[what] = dict(med, delta_pct=round(100 * (med["series"] / med["counters-only"] - 1), 3))
    log("xenoff: %s" % summary)
    _write(results, "xenoff", rows, summary=summary,
           timing="-icount shift=0 (1 ns per instruction), 1 vCPU, median of %d rounds per Xen, one boot each" % rounds)
    return summary


def _experiment(name, results, console_dir, quick):
    if name == "offstock":
        return offstock(results, console_dir, rounds=3 if quick else 5)
    if name == "xenoff":
        return xenoff(results, console_dir, rounds=3 if quick else 5)
    if name == "boots":
        return boots(results, console_dir, n=5 if quick else 30)
    if name == "native":
        return native(results, console_dir, rounds=3 if quick else 5)
    if name == "protection":
        return protection(results, console_dir, rounds=3 if quick else 5)
    if name == "flushes":
        return flushes(results, console_dir, smps=(2,) if quick else (1, 2, 4, 8))
    if name == "scale":
        return scale(results, console_dir, smps=(2,) if quick else (1, 2, 4, 8))
    if name == "workloads":
        return workloads_exp(results, console_dir)
    if name == "soak":
        return soak(results, console_dir, minutes=3 if quick else 30)
    raise ToolError("unknown experiment '%s' (%s)" % (name, ", ".join(EXPERIMENTS)))
