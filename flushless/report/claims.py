"""The comparison table: each published number beside ours, with the rule that decides
whether it reproduced (counts, or times compared within one boot)."""

import statistics

from ..experiments import busy, study
from ..experiments.results import mean, stdev


# A group's flushes count as "zero" below this share of baseline's steady rate.
ZERO_SHARE = 0.01


def pct(x, digits=1):
    return "n/a" if x is None else "%+.*f %%" % (digits, 100 * x)


def level_group(lv):
    # The paper's PGD is the kernel and the user PGD of x86-64 PV together.
    return "pgd" if lv in ("pgd", "pgd_user") else lv


def flush_claims(doc):
    rows = doc["rows"]
    p = doc["profile_settings"]
    by = {}
    for r in rows:
        by.setdefault(r["group"], []).append(r)
    out = []
    base = by.get("baseline", [])
    # "Stable after 5 minutes": the window from minute 5, or from 1 in a short run.
    start = p["switch_minute"] if p["group_minutes"] > p["switch_minute"] + 2 else 1
    steady = [r["qi_iotlb_inv"] for r in base if r["minute"] >= start]
    m, sd = mean(steady), stdev(steady)
    cv = sd / m if m else None
    out.append(("IOTLB flushes/min, baseline", "high, stable after 5 min",
                "%.0f ± %.0f per scaled minute from minute %d (CV %.2f)" % (m or 0, sd, start, cv or 0),
                bool(m and m > 100 and cv is not None and cv <= 0.15),
                "mean > 100 and coefficient of variation <= 0.15"))
    limit = ZERO_SHARE * (m or 0)
    # Groups with the cache on from boot: zero from minute 1.
    for group, item, published in (("pre", "IOTLB flushes/min, pre", "zero within a minute"),
                                   ("adaptive", "IOTLB flushes/min, adaptive (the series' default policy)",
                                    "(not in the study: its future work)")):
        late = [r["qi_iotlb_inv"] for r in by.get(group, []) if r["minute"] >= 1]
        if late:
            out.append((item, published, "minute 0: %d; from minute 1: at most %d (%s of baseline)"
                        % (by[group][0]["qi_iotlb_inv"], max(late),
                           "%.2f %%" % (100 * max(late) / m) if m else "n/a"),
                        bool(m) and max(late) <= limit, "every minute from 1 <= 1 % of baseline's steady rate"))
    dyn = by.get("dyn", [])
    sw = p["switch_minute"]
    after = [r["qi_iotlb_inv"] for r in dyn if r["minute"] >= sw + 2]
    before = [r["qi_iotlb_inv"] for r in dyn if r["minute"] < sw]
    if after:
        out.append(("IOTLB flushes/min, dyn", "to zero within 2 min of enabling",
                    "before minute %d: %.0f/min; from minute %d: at most %d (%s of baseline)"
                    % (sw, mean(before) or 0, sw + 2, max(after),
                       "%.2f %%" % (100 * max(after) / m) if m else "n/a"),
                    bool(m) and max(after) <= limit, "every minute from switch + 2 <= 1 % of baseline's steady rate"))
    rel = [r["qi_iotlb_inv"] for r in by.get("relaxed", [])]
    if rel:
        out.append(("IOTLB flushes/min, relaxed (reference)", "(no protection: none)",
                    "at most %d" % max(rel), max(rel) == 0, "zero in every minute"))
    return out


def alloc_free_claims(doc):
    """One -icount boot: dyn's minutes before the switch (off) against those from switch + 2
    (on); instruction time, which repeats."""
    s = doc["summary"]
    out = []
    for kind, paper in (("alloc", 0.45), ("free", 0.55)):
        off, on = (s.get(g, {}).get("all", {}).get("avg_%s_ns" % kind) for g in ("off", "on"))
        less = (1 - on / off) if off and on else None
        levels = "; ".join("%s %s" % (lv.upper(), pct(-(1 - s["on"][lv]["avg_%s_ns" % kind] /
                                                         s["off"][lv]["avg_%s_ns" % kind])))
                           for lv in busy.TIMING_LEVELS
                           if s.get("off", {}).get(lv, {}).get("avg_%s_ns" % kind)
                           and s.get("on", {}).get(lv, {}).get("avg_%s_ns" % kind))
        out.append(("page-table %s time, Xen PV hooks" % kind, "pre %d %% less than baseline" % round(100 * paper),
                    "%s per page, cache on vs off in one -icount boot: %s (%.0f against %.0f ns; %s)"
                    % (kind, pct(-less if less is not None else None), on or 0, off or 0, levels),
                    less is not None and less > 0.10, "at least 10 % less with the cache (instruction time)"))
    return out


def pt_cycle_claims(doc):
    """ptcycle in the -icount boot, pool off (baseline) against on (dyn), interleaved: one PTE
    page made and freed in a live address space, Xen's pin and IOMMU work included."""
    s = doc["summary"]
    out = []
    for kind, key, paper in (("alloc", "pte_alloc_ns", 0.45), ("free", "pte_free_ns", 0.55)):
        off, on = s[key]["baseline"]["mean"], s[key]["dyn"]["mean"]
        less = (1 - on / off) if off and on is not None else None
        out.append(("page-table %s time, whole (ptcycle)" % kind, "pre %d %% less than baseline" % round(100 * paper),
                    "a PTE page made and freed in a live address space, less the same cycle with it kept, "
                    "cache on vs off, %d interleaved runs in one -icount boot: %s (%.0f against %.0f ns)"
                    % (s[key]["dyn"]["n"], pct(-less if less is not None else None), on or 0, off or 0),
                    less is not None and less > 0.10, "at least 10 % less with the cache (instruction time)"))
    return out


def pt_cycle_hardware_claims(doc, calibration):
    """ptcycle's PTE page on hardware (evaluation/hwmodel.py): its instructions at the rate
    calibrated in results/designs.json, plus, per table cycle, Xen's IOTLB invalidations (on the
    alloc side: the pin) at t_inv and its IOMMU maps (on the free side: the map back) at t_map.
    The figure at the constants' point values; the range over t_inv's (QEMU completes an
    invalidation at once, so -icount counts none of its wait)."""
    from ..experiments import designs
    hw = designs._hwmodel()
    c = hw.calibrate(hw.load_constants(), calibration)
    ipu = c["instr_per_us"]["value"]
    s = doc["summary"]
    counts = {g: {k: statistics.median([r["per_op"][k] for r in doc["runs"] if r["group"] == g])
                  for k in ("qi_iotlb_inv", "iommu_map_type")} for g in ("baseline", "dyn")}
    out = []
    for kind, key, count, const, paper in (("alloc", "pte_alloc_ns", "qi_iotlb_inv", "t_inv", 0.45),
                                            ("free", "pte_free_ns", "iommu_map_type", "t_map", 0.55)):
        def less(t):
            off = s[key]["baseline"]["mean"] / ipu + counts["baseline"][count] * t
            on = s[key]["dyn"]["mean"] / ipu + counts["dyn"][count] * t
            return 1 - on / off
        k = c[const]
        point, lo, hi = less(k["value"]), less(k["low"]), less(k["high"])
        out.append(("page-table %s time, whole, hardware-time model" % kind,
                    "pre %d %% less than baseline" % round(100 * paper),
                    "ptcycle's instructions at %.0f per µs, plus %.3f against %.3f %s per PTE page at %s = %g µs: "
                    "%s (%s to %s for %s %g-%g µs)"
                    % (ipu, counts["baseline"][count], counts["dyn"][count],
                       "IOTLB invalidations" if count == "qi_iotlb_inv" else "IOMMU maps", const, k["value"],
                       pct(-point), pct(-lo), pct(-hi), const, k["low"], k["high"]),
                    point >= paper * 0.8, "within a fifth of the study's figure, at the constants' point values"))
    return out


def steady_start(doc, group):
    """First minute of a group's steady state: pre from minute 1, dyn from 2 after the switch."""
    return doc["profile_settings"]["switch_minute"] + 2 if group == "dyn" else 1


def cache_means(doc, group):
    """Mean, min and max pool and in-use pages over the steady minutes (one pool for every level:
    "total" is its figures).

    The pool swings with the busy state's cycle (a session's tabs all exit, then the next
    session takes their pages back), so one sample says little; the mean over the run is
    what repeats from run to run.
    """
    start = steady_start(doc, group)
    rows = [r for r in doc["rows"] if r["group"] == group and r["minute"] >= start]
    minutes = sorted(set(r["minute"] for r in rows))
    out = {}
    for lv in (busy.POOL_LEVEL, "total"):
        for k in ("pool", "in_use"):
            xs = [sum(r[k] for r in rows if r["minute"] == m and lv in (r["level"], "total")) for m in minutes]
            out.setdefault(lv, {})[k] = {"mean": mean(xs), "min": min(xs), "max": max(xs)} if xs else None
    return out


def cache_size_claims(doc, pub):
    out = []
    for group in busy.CACHE_GROUPS:
        s = doc["summary"].get(group)
        if not s:
            continue
        c = cache_means(doc, group)
        if not c["total"]["pool"]:
            continue
        pool, use = c["total"]["pool"], c["total"]["in_use"]
        used_kb = s["total"]["dom0_used_kb"]
        levels = "one pool for every level"
        if group in pub["cache_size"]:
            paper = pub["cache_size"][group]
            published = ("total %d/%d (PGD %d/%d, PMD %d/%d, PTE %d/%d), < 1 MB, 0.2 %% of the tool"
                         % tuple(paper["total"] + paper["pgd"] + paper["pmd"] + paper["pte"]))
        else:
            published = "(not in the study; the paper's pool was 176 against 193 in use)"
        out.append(("cache pages / page-table pages, %s" % group, published,
                    "mean from minute %d: total %.0f/%.0f = %.0f KB (at most %d pages = %d KB), %.2f %% of dom0's "
                    "used memory (%s)" % (steady_start(doc, group) + 1, pool["mean"], use["mean"], 4 * pool["mean"],
                                          pool["max"], 4 * pool["max"], 100 * 4 * pool["mean"] / used_kb, levels),
                    4 * pool["max"] < 1024, "cache under 1 MB at every minute"))
    return out


def cache_miss_claims(doc, pub):
    out = []
    for group in busy.CACHE_GROUPS:
        rows = [r for r in doc["rows"] if r["group"] == group]
        if not rows:
            continue
        agg = {}
        for r in rows:
            a = agg.setdefault(level_group(r["level"]), [0, 0])
            a[0] += r["misses"]
            a[1] += r["allocations"]
        ours = "; ".join("%s %d/%d = %.1f %%" % (lv.upper(), m, n, 100 * m / n if n else 0)
                         for lv, (m, n) in agg.items())
        paper = pub["cache_miss"].get(group)
        theirs = ("; ".join("%s %d/%d = %.1f %%" % (lv.upper(), m, n, 100 * m / n) for lv, (m, n) in paper.items())
                  if paper else "(not in the study)")
        ok = bool(agg) and all(n and m / n < 0.10 for m, n in agg.values())
        out.append(("cache-miss probability, %s" % group, theirs, ours, ok,
                    "below 10 % (one pool serves every level; the study counted PGD, PMD and PTE apart)"))
    return out


def paired_claim(label, summary, key, paper, better, unit):
    s = summary[key]
    b, d = s["baseline"], s["dyn"]
    diff, se = s.get("dyn_vs_baseline"), s.get("se_rel") or 0
    ours = "%.4g %s vs %.4g %s (dyn %s, ±%.1f %% SE; n=%d+%d)" % (
        d["mean"], unit, b["mean"], unit, pct(diff), 100 * se, d["n"], b["n"])
    if better == "lower":
        ok, rule = diff is not None and diff < -2 * se, "dyn below baseline by more than 2 SE"
    else:
        ok = diff is not None and abs(diff) <= max(0.01, 2 * se)
        rule = "|difference| <= max(1 %, 2 SE)"
    return (label, paper, ours, ok, rule)


def published_tcp(pub):
    """The paper's netperf figures, dyn against baseline."""
    d, b = pub["tcp_stream"]["dyn"], pub["tcp_stream"]["baseline"]
    return ("%.3f vs %.3f Mbps (σ %.3f / %.3f, range %.3f-%.3f / %.3f-%.3f)"
            % (d["mean_mbps"], b["mean_mbps"], d["stdev"], b["stdev"], d["min_mbps"], d["max_mbps"],
               b["min_mbps"], b["max_mbps"]))


def timing_claims(docs, pub):
    """Rows of the paired runs, each with the experiment it comes from as a sixth element."""
    out = []
    if "process_latency" in docs:
        s = docs["process_latency"]["summary"]
        for what, name in (("fork", "fork+exit"), ("exec", "fork+execve"), ("shell", "fork+/bin/sh -c")):
            if what in s:
                p = pub["process_latency"][what]
                out.append(paired_claim("%s latency" % name, s, what, "%d µs, %d %% below baseline"
                                        % (p["us"], round(100 * p["below_baseline"])), "lower", "µs")
                           + ("process_latency",))
    if "cpu_suite" in docs:
        s = docs["cpu_suite"]["summary"]
        worst = max(s, key=lambda k: abs(s[k].get("dyn_vs_baseline") or 0))
        row = paired_claim("CPU-bound suite (largest difference: %s)" % worst, s, worst,
                           "SPECint: largest difference 0.42 %", "same", "µs")
        others = ", ".join("%s %s" % (k, pct(v.get("dyn_vs_baseline"))) for k, v in sorted(s.items()))
        out.append(row[:2] + (row[2] + "; all: " + others,) + row[3:] + ("cpu_suite",))
    if "tcp_stream" in docs:
        s = docs["tcp_stream"]["summary"]
        row = paired_claim("TCP stream throughput", s, "all", published_tcp(pub) + ", 30 runs", "same", "Mbps")
        b, d = s["all"]["baseline"], s["all"]["dyn"]
        extra = "; σ %.3f / %.3f, range %.2f-%.2f / %.2f-%.2f" % (d["stdev"], b["stdev"], d["min"], d["max"],
                                                                 b["min"], b["max"])
        out.append(row[:2] + (row[2] + extra,) + row[3:] + ("tcp_stream",))
    return out


def comparison(docs, pub):
    """The published claims beside ours: item, published, ours, reproduced, rule, and the
    results file (experiment) each comes from."""
    rows = []

    def add(experiment, claims):
        rows.extend(c + (experiment,) for c in claims)

    if "flush_frequency" in docs:
        add("flush_frequency", flush_claims(docs["flush_frequency"]))
    if "pt_alloc_free_time" in docs:
        add("pt_alloc_free_time", alloc_free_claims(docs["pt_alloc_free_time"]))
    if "pt_cycle_cost" in docs:
        add("pt_cycle_cost", pt_cycle_claims(docs["pt_cycle_cost"]))
        if "designs" in docs:
            add("pt_cycle_cost", pt_cycle_hardware_claims(docs["pt_cycle_cost"], docs["designs"]["calibration"]))
    if "cache_size" in docs:
        add("cache_size", cache_size_claims(docs["cache_size"], pub))
    if "cache_miss" in docs:
        add("cache_miss", cache_miss_claims(docs["cache_miss"], pub))
    rows += timing_claims(docs, pub)
    return [{"item": a, "published": b, "ours": c, "reproduced": bool(d), "rule": e, "experiment": x}
            for a, b, c, d, e, x in rows]


# --- every claim, the paper's and ours, with the command that checks it ------------------

NOT_IN_STUDY = "not in the study"


def command_of(experiment):
    """The command that writes results/EXPERIMENT.json: its stage of reproduce."""
    stage = next((s for s, names in study.STAGE_OUTPUTS.items() if experiment in names), None)
    return "flushless reproduce --stages %s" % stage if stage else "make reproduce"


def our_claims(docs, pub):
    """What this project claims beyond the study, each as (claim, the study's figure, ours, holds,
    rule, experiment); only the claims whose results files are there."""
    out = []
    if "designs" in docs:
        rows = {r["design"]: r for r in docs["designs"]["rows"]}
        stock, paper, xen = rows.get("stock strict"), rows.get("paper"), rows.get("xen-only")
        if stock and paper and xen:
            out.append(("The paper's design removes the type-change invalidations; xen-only, with no guest change, "
                        "removes part of them", "flushes removed (no per-design count)",
                        "invalidations per fork+exit: stock strict %.2f, paper %.2f, xen-only %.2f"
                        % (stock["inv_fork_exit"], paper["inv_fork_exit"], xen["inv_fork_exit"]),
                        paper["inv_fork_exit"] <= 0.01 * stock["inv_fork_exit"]
                        and xen["inv_fork_exit"] < stock["inv_fork_exit"],
                        "paper <= 1 % of stock strict; stock strict > xen-only", "designs"))
            protected = [r for r in docs["designs"]["rows"] if r["design"] != "stock relaxed"]
            out.append(("Every design with DMA protection passes the isolation tests",
                        "validation keeps isolation (argued, not tested)",
                        "; ".join("%s: %s" % (r["design"], r["isolation"]) for r in protected),
                        all("swrace" in r["isolation"] and "dmasweep" in r["isolation"] for r in protected),
                        "swrace and dmasweep passed for each", "designs"))
    if "native_kernel" in docs:
        s = docs["native_kernel"]["summary"]
        ops = [w for w in ("fork", "exec") if w in s]
        out.append(("The series costs nothing on a kernel without a hypervisor", NOT_IN_STUDY,
                    ", ".join("%s %+.3f %%" % (w, s[w]["off_vs_vanilla_pct"]) for w in ops)
                    + " against vanilla (instruction time)",
                    bool(ops) and all(abs(s[w]["off_vs_vanilla_pct"]) < 0.5 for w in ops),
                    "|series - vanilla| < 0.5 % for each", "native_kernel"))
        out.append(("A native kernel keeping its page tables (the study's proposed port) saves a little",
                    "proposed, not measured",
                    ", ".join("%s %+.2f %%" % (w, s[w]["on_vs_off_pct"]) for w in ops)
                    + " with a pool declaring nothing, on against off",
                    bool(ops) and all(s[w]["on_vs_off_pct"] < 0 for w in ops), "on below off for each",
                    "native_kernel"))
    if "pte_modes" in docs:
        s = docs["pte_modes"]["summary"]
        be = s["break_even"].get("late_vs_emulate")
        ks = docs["pte_modes"]["plan"]["ks"]
        out.append(("Batched page-table writes beat trap-and-emulate above a few PTEs per page",
                    "break-even about %d PTEs per page (Xen thread, 2005 hardware)"
                    % pub["pte_update_thread"]["break_even_ptes_per_page"],
                    "instructions per PTE: late pin %.0f, early pin %.0f, emulate %.0f; break-even late/emulate: %s"
                    % (s["late_instructions_per_pte"], s["early_instructions_per_pte"],
                       s["emulate_instructions_per_pte"],
                       "K = %.1f" % be if be else "none in K = %d..%d" % (ks[0], ks[-1])),
                    be is not None, "a crossing in the K measured", "pte_modes"))
    if "seed_xen" in docs:
        lo, hi = docs["seed_xen"]["summary"]["fork_ratio_range"]
        out.append(("Shadow paging makes fork slower than nested paging (seed 002, on Xen)",
                    "about %.1fx (a KVM host, EPT off against on)" % pub["seed_002"]["fork_vs_memory"]["ratio"],
                    "%.1fx .. %.1fx over the sizes (hap=0 against hap=1, -icount)" % (lo, hi),
                    lo > 1, "hap=0 slower at every size", "seed_xen"))
    if "io" in docs:
        out += io_claims(docs["io"])
    return out


def io_claims(doc):
    """The device I/O answer, from the line-rate model over the io stage's counts."""
    from evaluation import hwmodel
    model = hwmodel.io_model(doc["rows"])
    rows = model["rows"]

    def at(config, gbps, largest):
        pick = [r for r in rows if r["config"] == config and r["gbps"] == gbps]
        return (max if largest else min)(pick, key=lambda r: r["block_kb"]) if pick else None

    out = []
    top = max(hwmodel.IO_GBPS)
    stock, cache = at("stock strict", top, True), at("the cache", top, True)
    if stock and cache:
        out.append(("The page-table flushes cost a fast device little, at the study's rate (model over the "
                    "device's counted misses)", "future work: may matter for fast I/O",
                    "stock strict, %d KiB at %d Gbit/s: %.2g %% of the device's time (%.2g .. %.2g %%), CPU "
                    "waiting %.2g %%; the cache: %.2g %%"
                    % (stock["block_kb"], top, 100 * stock["loss"], 100 * stock["loss_low"],
                       100 * stock["loss_high"], 100 * stock["cpu_share"], 100 * cache["loss"]),
                    stock["loss_high"] < 0.01, "stock strict's loss over every constant's range < 1 %", "io"))
    low = min(hwmodel.IO_GBPS)
    grant, small = at("a domU's disk, grant per request", low, False), at("stock strict", low, False)
    if grant and small:
        out.append(("A grant per request costs far more than page tables: that flush source grows with the "
                    "line rate", NOT_IN_STUDY,
                    "%d KiB at %d Gbit/s: %.2g %% of a CPU waiting, against %.2g %% for stock strict's page tables"
                    % (grant["block_kb"], low, 100 * grant["cpu_share"], 100 * small["cpu_share"]),
                    grant["cpu_share"] > 10 * small["cpu_share"], "grant per request > 10 x page tables",
                    "io"))
    return out


def claims(docs, pub):
    """Every claim as a row: claim, paper (the study's figure), ours, verdict, rule, command, file."""
    out = []
    for r in comparison(docs, pub):
        out.append({"claim": r["item"], "paper": r["published"], "ours": r["ours"],
                    "verdict": "reproduced" if r["reproduced"] else "not reproduced", "rule": r["rule"],
                    "command": command_of(r["experiment"]), "file": "results/%s.json" % r["experiment"]})
    for claim, paper, ours, holds, rule, experiment in our_claims(docs, pub):
        out.append({"claim": claim, "paper": paper, "ours": ours, "verdict": "holds" if holds else "does not hold",
                    "rule": rule, "command": command_of(experiment), "file": "results/%s.json" % experiment})
    return out


def split(rows):
    """(the study's rows, ours)."""
    return ([r for r in rows if r["verdict"] in ("reproduced", "not reproduced")],
            [r for r in rows if r["verdict"] in ("holds", "does not hold")])


# The claims the README shows first, by their start.
HEADLINE = ("IOTLB flushes/min, baseline", "IOTLB flushes/min, pre", "IOTLB flushes/min, dyn", "fork+execve latency",
            "TCP stream throughput", "The paper's design removes", "Every design with DMA protection",
            "The page-table flushes cost a fast device", "A grant per request", "The series costs nothing")


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(rows, columns=("claim", "paper", "ours", "verdict", "command", "file")):
    heads = {"claim": "claim", "paper": "the study's figure", "ours": "our figure", "verdict": "verdict",
             "command": "command that checks it", "file": "file it writes", "rule": "rule"}
    lines = ["| %s |" % " | ".join(heads[c] for c in columns), "|%s" % ("---|" * len(columns))]
    lines += ["| %s |" % " | ".join(("`%s`" % _cell(r[c])) if c in ("command", "file") else _cell(r[c])
                                    for c in columns) for r in rows]
    return "\n".join(lines) + "\n"


def headline(rows):
    return [r for r in rows if r["claim"].startswith(HEADLINE)]
