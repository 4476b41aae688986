"""report/index.html from results/: the published numbers beside ours, then every figure.

Each verdict is a rule on counts or on times compared within one boot, written out in the
table so that a reader can check it. The figures are PNGs next to index.html.
"""

import html
import json
import os
import statistics

from . import ledger, study
from .progress import ToolError

PUBLISHED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "evaluation", "published.json")
EXPERIMENTS = ("flush_frequency", "pt_alloc_free_time", "pt_cycle_cost", "cache_size", "cache_miss", "process_latency",
               "cpu_suite", "tcp_stream", "seed_fork_vs_memory", "seed_access_latency")
GROUP_STYLE = {"baseline": ("tab:red", "-"), "pre": ("tab:blue", "-"), "dyn": ("tab:green", "-"),
               "adaptive": ("tab:purple", "-"), "relaxed": ("tab:gray", ":"), "native": ("black", "--")}
# A group's flushes count as "zero" below this share of baseline's steady rate.
ZERO_SHARE = 0.01


def check_tools():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ToolError("the report needs matplotlib: python3 -m pip install matplotlib (or make deps)")


# Written by stages the paper did not have; the report shows them apart from the comparison.
EXTRA_EXPERIMENTS = ("designs", "pte_modes", "seed_xen", "seed_model", "io")


def load(results):
    docs = load_some(results)
    if not docs:
        raise ToolError("no results in %s: run 'flushless reproduce' first" % results)
    return docs


def load_some(results):
    """The results files there are; a missing or unreadable one is left out."""
    docs = {}
    for name in EXPERIMENTS + EXTRA_EXPERIMENTS:
        doc = study.read_json(os.path.join(results, name + ".json"))
        if doc is not None:
            docs[name] = doc
    return docs


# --- what this run did not measure --------------------------------------------------------

def missing_stages(results, docs):
    """{stage: why} for each stage whose results files are not all there, the reason taken
    from RESULTS/stages.json (ledger.py), or "not run"."""
    stages = (ledger.read(results) or {}).get("stages", {})
    out = {}
    for stage, names in study.STAGE_OUTPUTS.items():
        absent = [n for n in names if n not in docs and study.read_json(os.path.join(results, n + ".json")) is None]
        if absent:
            out[stage] = stage_reason(stages.get(stage), [n + ".json" for n in absent])
    return out


def stage_reason(e, absent):
    if not e:
        return "not run"
    status, when = e.get("status"), e.get("ended") or e.get("started")
    if status == "done":
        return "recorded done at %s, but %s missing" % (when, ", ".join(absent))
    if status == "failed":
        error = (e.get("error") or "no message").strip().splitlines()[0][:300]
        why = "failed at %s: %s" % (when, error)
        if e.get("console_log"):
            why += "; console log %s" % e["console_log"]
    elif status == "interrupted":
        why = "interrupted at %s" % when
    else:
        why = "started at %s and never ended (the run was killed)" % when
    if e.get("kept"):
        why += "; %d of %d parts finished and kept for the resume (%s)" % (len(e["kept"]), e.get("of", 0),
                                                                           ", ".join(e["kept"]))
    return why


def missing_line(stage, missing):
    return "<p class='missing' style='color:#a00'>not measured in this run: %s (%s)</p>" % (
        html.escape(stage), html.escape(missing.get(stage, "not run")))


def missing_lines(stages, missing):
    return "".join("\n" + missing_line(s, missing) for s in stages if s in missing)


def missing_section(missing):
    if not missing:
        return ""
    items = "".join("<li><b>%s</b>: %s</li>" % (html.escape(s), html.escape(why)) for s, why in missing.items())
    return ("\n<h2>Not measured in this run</h2>\n<ul>%s</ul>\n<p>Each section below says what it lacks. "
            "The results directory's stages.json records every stage; running the same command again resumes "
            "from the first stage not done (docs/reproduce.md).</p>" % items)


def pct(x, digits=1):
    return "n/a" if x is None else "%+.*f %%" % (digits, 100 * x)


def level_group(lv):
    # The paper's PGD is the kernel and the user PGD of x86-64 PV together.
    return "pgd" if lv in ("pgd", "pgd_user") else lv


# --- the comparison table -----------------------------------------------------------------

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
    m, sd = study.mean(steady), study.stdev(steady)
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
                    % (sw, study.mean(before) or 0, sw + 2, max(after),
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
                           for lv in study.TIMING_LEVELS
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
    from . import designs
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
    for lv in (study.POOL_LEVEL, "total"):
        for k in ("pool", "in_use"):
            xs = [sum(r[k] for r in rows if r["minute"] == m and lv in (r["level"], "total")) for m in minutes]
            out.setdefault(lv, {})[k] = {"mean": study.mean(xs), "min": min(xs), "max": max(xs)} if xs else None
    return out


def cache_size_claims(doc, pub):
    out = []
    for group in study.CACHE_GROUPS:
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
    for group in study.CACHE_GROUPS:
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
    out = []
    if "process_latency" in docs:
        s = docs["process_latency"]["summary"]
        for what, name in (("fork", "fork+exit"), ("exec", "fork+execve"), ("shell", "fork+/bin/sh -c")):
            if what in s:
                p = pub["process_latency"][what]
                out.append(paired_claim("%s latency" % name, s, what, "%d µs, %d %% below baseline"
                                        % (p["us"], round(100 * p["below_baseline"])), "lower", "µs"))
    if "cpu_suite" in docs:
        s = docs["cpu_suite"]["summary"]
        worst = max(s, key=lambda k: abs(s[k].get("dyn_vs_baseline") or 0))
        row = paired_claim("CPU-bound suite (largest difference: %s)" % worst, s, worst,
                           "SPECint: largest difference 0.42 %", "same", "µs")
        others = ", ".join("%s %s" % (k, pct(v.get("dyn_vs_baseline"))) for k, v in sorted(s.items()))
        out.append(row[:2] + (row[2] + "; all: " + others,) + row[3:])
    if "tcp_stream" in docs:
        s = docs["tcp_stream"]["summary"]
        row = paired_claim("TCP stream throughput", s, "all", published_tcp(pub) + ", 30 runs", "same", "Mbps")
        b, d = s["all"]["baseline"], s["all"]["dyn"]
        extra = "; σ %.3f / %.3f, range %.2f-%.2f / %.2f-%.2f" % (d["stdev"], b["stdev"], d["min"], d["max"],
                                                                 b["min"], b["max"])
        out.append(row[:2] + (row[2] + extra,) + row[3:])
    return out


def comparison(docs, pub):
    rows = []
    if "flush_frequency" in docs:
        rows += flush_claims(docs["flush_frequency"])
    if "pt_alloc_free_time" in docs:
        rows += alloc_free_claims(docs["pt_alloc_free_time"])
    if "pt_cycle_cost" in docs:
        rows += pt_cycle_claims(docs["pt_cycle_cost"])
        if "designs" in docs:
            rows += pt_cycle_hardware_claims(docs["pt_cycle_cost"], docs["designs"]["calibration"])
    if "cache_size" in docs:
        rows += cache_size_claims(docs["cache_size"], pub)
    if "cache_miss" in docs:
        rows += cache_miss_claims(docs["cache_miss"], pub)
    rows += timing_claims(docs, pub)
    return [{"item": a, "published": b, "ours": c, "reproduced": bool(d), "rule": e} for a, b, c, d, e in rows]


# --- figures ------------------------------------------------------------------------------

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _plain(value, _pos=None):
    return "%d" % value if value >= 1 and value == int(value) else "%g" % value


def _plain_log_axes(ax):
    """Log axes labelled with plain numbers ("6", not "6 x 10^0"); minor ticks are labelled
    only on an axis that spans less than a decade (it may have no major tick at all)."""
    from matplotlib.ticker import FuncFormatter
    for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        axis.set_major_formatter(FuncFormatter(_plain))
        lo, hi = sorted(limits)
        narrow = lo > 0 and hi / lo < 10
        axis.set_minor_formatter(FuncFormatter(_plain if narrow else lambda v, p: ""))


def _minutes_axis(ax):
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def fig_flush(doc, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for group in ("baseline", "pre", "adaptive", "dyn", "relaxed"):
        rs = [r for r in doc["rows"] if r["group"] == group]
        if rs:
            c, ls = GROUP_STYLE[group]
            ax.plot([r["minute"] + 1 for r in rs], [r["qi_iotlb_inv"] for r in rs], ls, color=c, marker=".",
                    label=group)
    sw = doc["profile_settings"]["switch_minute"]
    ax.axvline(sw, color="tab:green", lw=0.8, ls="--")
    ax.text(sw, ax.get_ylim()[1] * 0.95, " dyn: cache on", color="tab:green", va="top", fontsize=8)
    ax.set_xlabel("scaled minute (1 = %g s of testbed time, %d process creations)"
                  % (doc["time_scale"]["minute_s"], study.PAPER_RATE))
    ax.set_ylabel("IOTLB invalidations queued per minute")
    _minutes_axis(ax)
    ax.set_title("IOTLB-flush frequency in the busy state")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_alloc_free(doc, path):
    plt = _plt()
    fig, axes = plt.subplots(2, len(study.TIMING_LEVELS), figsize=(12, 6), sharex=True)
    sw = doc["profile_settings"]["switch_minute"]
    for j, lv in enumerate(study.TIMING_LEVELS):
        for i, kind in enumerate(("alloc", "free")):
            ax = axes[i][j]
            rs = [r for r in doc["rows"] if r["level"] == lv]
            ax.plot([r["minute"] + 1 for r in rs], [(r["avg_%s_ns" % kind] or 0) / 1000 for r in rs], "-",
                    color=GROUP_STYLE["dyn"][0], marker=".", label="dyn")
            ax.axvline(sw, color="tab:green", lw=0.8, ls="--")
            ax.set_title("%s %s" % (lv.upper(), kind), fontsize=9)
            _minutes_axis(ax)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("µs per %s (instruction time)" % kind)
            if i == 1:
                ax.set_xlabel("scaled minute")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Average page-table page allocation and free time per minute and level: cache off, "
                 "switched on at the dashed line (one -icount boot)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def fig_cache_size(doc, path):
    plt = _plt()
    fig, axes = plt.subplots(1, len(study.CACHE_GROUPS), figsize=(16, 4))
    for ax, group in zip(axes, study.CACHE_GROUPS):
        rs = [r for r in doc["rows"] if r["group"] == group]
        minutes = sorted(set(r["minute"] for r in rs))
        x = [m + 1 for m in minutes]
        ax.plot(x, [sum(r["pool"] for r in rs if r["minute"] == m) for m in minutes], "-", color="black", lw=2,
                label="all cache")
        ax.plot(x, [sum(r["in_use"] for r in rs if r["minute"] == m) for m in minutes], ":", color="black", lw=2,
                label="all in use")
        ax.set_title("%s: cache pages (solid) vs page-table pages (dotted)" % group, fontsize=10)
        ax.set_xlabel("scaled minute")
        ax.set_ylabel("pages")
        _minutes_axis(ax)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def fig_miss(doc, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    levels = [study.POOL_LEVEL]
    width = 0.8 / len(study.CACHE_GROUPS)
    for k, group in enumerate(study.CACHE_GROUPS):
        rs = {r["level"]: r for r in doc["rows"] if r["group"] == group}
        ys = [100 * (rs[lv]["miss_probability"] or 0) if lv in rs else 0 for lv in levels]
        ax.bar([i + width * k for i in range(len(levels))], ys, width=width, color=GROUP_STYLE[group][0], label=group)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(levels))], [lv.upper() for lv in levels])
    ax.set_ylabel("cache-miss probability (%)")
    ax.set_title("Allocations the pool could not serve (one pool for every level)")
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_paired(doc, key, value, names, ylabel, title, path):
    plt = _plt()
    fig, axes = plt.subplots(1, len(names), figsize=(max(3.2 * len(names), 5.5), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names):
        for k, group in enumerate(("baseline", "dyn")):
            xs = [r[value] for r in doc["rows"] if r["group"] == group and (key is None or r[key] == name)]
            ax.scatter([k + (i % 7 - 3) * 0.03 for i in range(len(xs))], xs, s=10, color=GROUP_STYLE[group][0])
            if xs:
                m, sd = study.mean(xs), study.stdev(xs)
                ax.errorbar([k + 0.25], [m], yerr=[sd], fmt="o", color="black", capsize=4)
        ax.set_xticks([0, 1], ["baseline", "dyn"])
        ax.set_xlim(-0.5, 1.6)
        ax.set_title(name or "", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].set_ylabel(ylabel)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def fig_relative(doc, key, value, names, title, path):
    """Each run against its program's baseline mean, in per cent: small differences on one scale."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for i, name in enumerate(names):
        base = study.mean([r[value] for r in doc["rows"] if r["group"] == "baseline" and r[key] == name])
        for k, group in enumerate(("baseline", "dyn")):
            xs = [100 * (r[value] / base - 1) for r in doc["rows"] if r["group"] == group and r[key] == name]
            ax.scatter([i + 0.3 * k - 0.15] * len(xs), xs, s=12, color=GROUP_STYLE[group][0],
                       label=group if i == 0 else None)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("run time vs baseline mean (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_seed(fork_doc, tlb_doc, path):
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, doc, key, ylabel, title in ((axes[0], fork_doc, "fork_us", "fork time (µs)",
                                         "fork time against resident memory"),
                                        (axes[1], tlb_doc, "ns_per_access", "ns per access",
                                         "access latency against map size")):
        if not doc:
            continue
        series = {}
        for r in doc["rows"]:
            series.setdefault("%s %s" % (r["where"], r["group"]) if r["where"] == "testbed" else "native", []).append(r)
        for name, rs in sorted(series.items()):
            group = "native" if name == "native" else name.split()[1]
            c, ls = GROUP_STYLE[group]
            ax.plot([r["size_kb"] for r in rs], [r[key] for r in rs], ls, color=c, marker=".", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _plain_log_axes(ax)
        ax.set_xlabel("size (KiB)")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def fig_seed_xen(xen_doc, model_doc, lab, path):
    """Seed 002 on Xen: fork time against resident memory in the hap=1 and hap=0 domUs, their
    ratio beside the lab's, and the page-walk model's access latency beside the lab's."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.3))
    style = {"hap1": ("tab:blue", "hap=1 (nested paging)"), "hap0": ("tab:red", "hap=0 (shadow paging)")}
    if xen_doc:
        table = xen_doc["summary"]["pagetable_bench"]
        sizes = [r["size_kb"] for r in table]
        for label, (c, name) in style.items():
            med = [r[label]["median"] for r in table]
            err = [[m - r[label]["min"] for m, r in zip(med, table)], [r[label]["max"] - m for m, r in zip(med, table)]]
            axes[0].errorbar(sizes, med, yerr=err, color=c, marker=".", capsize=2, label="ours, %s" % name)
        axes[1].plot(sizes, [r["ratio_hap0_hap1"] for r in table], color="black", marker=".",
                     label="ours: hap=0 / hap=1 (medians, %d rounds)" % xen_doc["plan"]["rounds"])
        if all(r.get("ratio_of_minima") for r in table):
            axes[1].plot(sizes, [r["ratio_of_minima"] for r in table], color="black", ls=":", marker=".",
                         label="ours: of the fastest runs (first round)")
    fork = lab["fork_vs_memory"]
    lo, hi = fork["ept0_s"][0] / fork["ept1_s"][1], fork["ept0_s"][1] / fork["ept1_s"][0]
    axes[1].axhspan(lo, hi, color="tab:orange", alpha=0.25, label="lab: EPT=0 / EPT=1, %.1f-%.1f" % (lo, hi))
    axes[1].axhline(fork["ratio"], color="tab:orange", ls="--")
    for ax, ylabel, title in ((axes[0], "fork+exit+wait (µs, -icount)", "fork time against resident memory"),
                              (axes[1], "ratio", "shadow / nested paging, fork")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("resident memory (KiB)")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_yscale("log")
    _plain_log_axes(axes[0])
    ax = axes[2]
    if model_doc:
        rows = model_doc["rows"]
        native = sorted({r["size_kb"]: r["host_native_ns"] for r in rows}.items())
        ax.plot([k for k, _ in native], [v for _, v in native], "k.", label="this host, measured (calibration)")
        for mode, c, ls, name in (("shadow", "tab:red", "-", "model: shadow (= native 1D walk)"),
                                  ("nested", "tab:blue", "-", "model: nested, 4 KiB host pages"),
                                  ("nested_2m", "tab:blue", ":", "model: nested, 2 MiB host pages")):
            rs = [r for r in rows if r["mode"] == mode]
            ax.plot([r["size_kb"] for r in rs], [r["ns"] for r in rs], ls, color=c, label=name)
    acc = lab["access_latency"]
    ax.plot([acc["at_kb"]], [acc["ept0_ns"]], "s", color="tab:red", mfc="none", label="lab: EPT=0")
    ax.plot([acc["at_kb"]], [acc["ept1_ns"]], "s", color="tab:blue", mfc="none", label="lab: EPT=1")
    ax.axvline(acc["equal_up_to_kb"], color="gray", ls="--", lw=0.8, label="lab: equal up to %d KiB" % acc["equal_up_to_kb"])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _plain_log_axes(ax)
    ax.set_xlabel("map size (KiB)")
    ax.set_ylabel("ns per access")
    ax.set_title("access latency (tlb_bench): model against the lab", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def seed_caption(xen_doc, model_doc, lab):
    parts = []
    if xen_doc:
        sm = xen_doc["summary"]
        pf = sm["per_fork"]
        lo, hi = sm["fork_ratio_range"]
        parts.append("Left and middle: workload pagetable_bench (fork, child exits, parent waits; %d forks per size) "
                     "in two PVH domUs of one boot, hap=1 and hap=0 (Xen: %s / %s), %d rounds alternating, medians "
                     "with min-max bars. Timing: %s. hap=0 / hap=1: %.2f-%.2f across sizes (medians), against the "
                     "lab's about %.1f; with hap=0 the first round is the fastest (see README, \"Seed 002 on Xen\"). Per fork+exit (forkbench, Xen's counters): hap=0 %.0f shadow faults, %.0f "
                     "emulated writes, %.0f unshadows, %.0f VM exits; hap=1 %.0f VM exits, %.0f shadow faults."
                     % (xen_doc["plan"]["fork_n"], xen_doc["xen_paging"].get("hap1"), xen_doc["xen_paging"].get("hap0"),
                        xen_doc["plan"]["rounds"], xen_doc["timing"], lo, hi, lab["fork_vs_memory"]["ratio"],
                        pf["hap0"]["shadow_faults"], pf["hap0"]["shadow_emulated_writes"],
                        pf["hap0"]["shadow_unshadows"], pf["hap0"]["vmexits"], pf["hap1"]["vmexits"],
                        pf["hap1"]["shadow_faults"]))
        after = sm.get("per_fork_after_tlb", {})
        if after.get("hap0", {}).get("runs"):
            parts.append("After tlb_bench's maps (up to %d KiB) a fork+exit took %.0f µs with hap=0 (%.0f before, "
                         "%.0f shadow faults) and %.0f µs with hap=1 (%.0f before)."
                         % (xen_doc["plan"]["tlb_max_kb"], after["hap0"]["fork_exit_us"], pf["hap0"]["fork_exit_us"],
                            after["hap0"]["shadow_faults"], after["hap1"]["fork_exit_us"], pf["hap1"]["fork_exit_us"]))
    if model_doc:
        p, fit = model_doc["params"], model_doc["fit"]
        parts.append("Right: the page-walk model (evaluation/pagewalk.py; every parameter and its source in "
                     "results/seed_model.json), calibrated on this host's tlb_bench (base %.2f ns, an L2 TLB hit "
                     "%.2f ns, one walk reference %.2f ns, L3 share %g; fit: relative rms %.0f %% over %d sizes, the "
                     "host's own walks taken as %s), then predicting shadow and nested paging with the same "
                     "constants. Under -icount a load costs its instructions only, so the domUs' own tlb_bench is "
                     "flat (in results/seed_xen.csv)."
                     % (p["base_ns"]["value"], p["l2_dtlb"]["ns"], p["ref_ns"]["value"], fit["l3_share"],
                        100 * fit["rms_rel"], fit["sizes"], fit["host_curve_as"]))
    parts.append("Lab: %s; %s (%s)." % (lab["fork_vs_memory"]["note"], lab["access_latency"]["note"], lab["source"]))
    return " ".join(parts)


# --- the page -----------------------------------------------------------------------------

def write(results, out):
    """report/index.html from the results there are; what a stage did not write is listed
    as not measured, with the reason the ledger gives."""
    check_tools()
    docs = load_some(results)
    missing = missing_stages(results, docs)
    if len(missing) == len(study.STAGES) and ledger.read(results) is None:
        raise ToolError("no results in %s: run 'flushless reproduce' first" % results)
    with open(PUBLISHED) as f:
        pub = json.load(f)
    os.makedirs(out, exist_ok=True)
    table = comparison(docs, pub)
    with open(os.path.join(out, "comparison.json"), "w") as f:
        json.dump(table, f, indent=1)
    study.write_csv(os.path.join(out, "comparison.csv"), table)

    figs = []

    def figure(fname, draw, caption):
        draw(os.path.join(out, fname))
        figs.append((fname, caption))

    busy = ""  # the busy state, named in the captions of the figures that come from it
    if "flush_frequency" in docs:
        ts = docs["flush_frequency"]["time_scale"]
        busy = ("Workload: %s (address-space randomisation off) at %d process creations per real minute = the "
                "paper's %d per scaled minute; time scale: 1 scaled minute = %g s of testbed time."
                % (docs["flush_frequency"]["workload"], ts["churn_rate_per_real_min"], study.PAPER_RATE,
                   ts["minute_s"]))
    if "flush_frequency" in docs:
        figure("flush_frequency.png", lambda p: fig_flush(docs["flush_frequency"], p),
               "IOTLB-flush frequency (Xen's vtd_qi_iotlb_inv per scaled minute), groups baseline (cache off), "
               "pre (cache on from boot, the paper's policy), adaptive (on from boot, the series' default policy), "
               "dyn (switched on at minute %d), relaxed (dom0-iommu=relaxed). %s "
               "Timing method: exact counts. Published: baseline high and stable after 5 min; pre at zero within "
               "a minute; dyn at zero within two minutes of enabling."
               % (docs["flush_frequency"]["profile_settings"]["switch_minute"], busy))
    if "pt_alloc_free_time" in docs:
        figure("pt_alloc_free_time.png", lambda p: fig_alloc_free(docs["pt_alloc_free_time"], p),
               "Average time to make a page a table of a live address space, and back, per scaled minute and "
               "level (ftrace's function profiler on xen_alloc_pte/pmd/pud and xen_release_pte/pmd/pud; on Linux 7.3 "
               "these hooks only queue their pin and protection hypercalls while lazy MMU mode is on, so most "
               "of Xen's pin and IOMMU work lands outside them: ptcycle's row in the comparison table times it "
               "whole): one dyn busy state, the pool off until the dashed "
               "line, then on. %s Timing method: -icount, 1 vCPU (1 ns per "
               "executed instruction), one boot. Published: pre spends 45 %% less CPU time in allocation and "
               "55 %% less in free than baseline." % busy)
    if "cache_size" in docs:
        figure("cache_size.png", lambda p: fig_cache_size(docs["cache_size"], p),
               "Cache pages against page-table pages in use, per level and in all (black), groups pre, adaptive "
               "and dyn, "
               "sampled at the end of each minute; the pool swings with the sessions (a burst of exits fills "
               "it, the next session empties it), so the table gives the mean over the run. %s Timing method: "
               "exact counts at each minute's sample. Published (cache/in use), pre: PGD 5/4, PMD 26/12, PTE "
               "145/177, total 176/193; dyn: 4/2, 20/4, 136/182, 160/188; under 1 MB." % busy)
    if "cache_miss" in docs:
        figure("cache_miss.png", lambda p: fig_miss(docs["cache_miss"], p),
               "Cache-miss probability per level over the whole run (dyn: from the switch), groups pre, adaptive "
               "and dyn. "
               "%s Timing method: exact counts. Published, pre: PGD 9/550, PMD 38/2200, PTE 322/6633; dyn: "
               "7/540, 24/2160, 320/6333." % busy)
    def timing(name):
        # These are per operation or per run: the busy state's time scale does not apply.
        return "Time scale: none (per operation, not scaled). Timing method: %s." % docs[name]["timing"]

    if "process_latency" in docs:
        figure("process_latency.png", lambda p: fig_paired(
            docs["process_latency"], "what", "mean_us", ["fork", "exec", "shell"], "µs per operation (mean of a run)",
            "lmbench lat_proc: fork+exit, fork+execve, fork+/bin/sh -c", p),
            "Process latencies, workload lat_proc (each dot one run's mean), groups baseline (cache off) and dyn "
            "(cache on at run time, warmed by the run's own warm-up). %s Published: 344, 365, 1567 µs with the "
            "cache, 11 %%, 17 %%, 21 %% below baseline." % timing("process_latency"))
    if "cpu_suite" in docs:
        figure("cpu_suite.png", lambda p: fig_relative(
            docs["cpu_suite"], "program", "us", list(study.CPU_PROGRAMS),
            "CPU-bound integer programs (busybox): each run against its program's baseline mean", p),
            "CPU-bound suite standing in for SPECint, workload cpusuite (gzip, bzip2, lzop, sha256sum, sort, awk, "
            "bc on a fixed generated input), groups baseline and dyn. %s Published: largest difference 0.42 %%."
            % timing("cpu_suite"))
    if "tcp_stream" in docs:
        figure("tcp_stream.png", lambda p: fig_paired(
            docs["tcp_stream"], None, "mbps", [None], "Mbit/s delivered",
            "TCP stream, dom0 to host (e1000e behind VT-d)", p),
            "TCP stream throughput, workload tcpstream to a receiver on the host's loopback through QEMU's e1000e "
            "(DMA translated by the emulated VT-d) and user networking, groups baseline and dyn. %s Published "
            "(dyn vs baseline): %s, on a 100 Mbit/s link; ours is bounded by emulation."
            % (timing("tcp_stream"), published_tcp(pub)))
    if "seed_xen" in docs or "seed_model" in docs:
        figure("seed_benchmarks.png", lambda p: fig_seed_xen(docs.get("seed_xen"), docs.get("seed_model"),
                                                             pub["seed_002"], p),
               "Seed 002 on Xen. " + seed_caption(docs.get("seed_xen"), docs.get("seed_model"), pub["seed_002"]))
    elif "seed_fork_vs_memory" in docs or "seed_access_latency" in docs:
        figure("seed_benchmarks.png", lambda p: fig_seed(docs.get("seed_fork_vs_memory"),
                                                         docs.get("seed_access_latency"), p),
               "The seed lab's benchmarks, workloads pagetable_bench (fork time against resident memory; testbed "
               "with the cache off and on) and tlb_bench (random-order access latency against map size), on the "
               "testbed and natively on the host. Time scale: none (per operation). Timing method: testbed %s; "
               "native: the host's wall clock. "
               "Under -icount a load costs its instructions only (QEMU's softmmu translates, no TLB is "
               "modelled), so the testbed's access latency is flat: emulation cannot time TLB misses. "
               "No published figure." % (docs.get("seed_fork_vs_memory") or docs["seed_access_latency"])["timing"])

    path = os.path.join(out, "index.html")
    with open(path, "w") as f:
        f.write(page(docs, table, figs, results, out, missing))
    return path


def fig_designs(doc, pub, path):
    """Each design's estimated hardware saving against stock strict, swept, beside the paper's."""
    plt = _plt()
    model = doc["model"]
    names = [r["design"] for r in doc["rows"] if r["design"] != "stock strict"]
    ops = (("fork", "fork+exit"), ("exec", "fork+execve"), ("shell", "fork+/bin/sh -c"))
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharey=True)
    for ax, (op, title) in zip(axes, ops):
        rows = [next(m for m in model if m["design"] == n and m["op"] == op) for n in names]
        mid = [100 * r["saving_vs_stock_strict"] for r in rows]
        err = [[100 * (r["saving_vs_stock_strict"] - r["saving_low"]) for r in rows],
               [100 * (r["saving_high"] - r["saving_vs_stock_strict"]) for r in rows]]
        x = list(range(len(names)))
        ax.bar(x, mid, color=["tab:gray" if n == "stock relaxed" else "tab:blue" for n in names])
        ax.errorbar(x, mid, yerr=err, fmt="none", ecolor="black", capsize=4)
        paper = 100 * pub["process_latency"][op]["below_baseline"]
        ax.axhline(paper, color="tab:red", ls="--", label="the paper, on hardware (%.0f %%)" % paper)
        ax.axhline(0, color="black", lw=0.8)
        for i, m in enumerate(mid):
            ax.annotate("%.1f" % m, (i, m), ha="center", va="bottom" if m >= 0 else "top", fontsize=8)
        ax.set_xticks(x)
        ax.set_xticklabels(names, fontsize=9)
        ax.set_title(title)
        ax.legend(fontsize=8, loc="upper right")
    axes[0].set_ylabel("estimated time saved against stock strict, %")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def constants_html(constants):
    """The hardware model's constants as list items: value, range and source of each."""
    e = html.escape
    return "".join("<li><b>%s</b> = %.4g %s (swept %.4g .. %.4g): %s</li>" % (
        e(n), c["value"], e(c["unit"]), c["low"], c["high"], e(c["source"])) for n, c in sorted(constants.items()))


def designs_html(results, out, missing=None):
    """Stage designs (results/designs.json): the table and its figure, or why there is none."""
    doc = study.read_json(os.path.join(results, "designs.json"))
    if doc is None:
        return missing_line("designs", missing or {})
    e = html.escape
    from . import designs
    # The model is applied here, so that a change of evaluation/hardware.json shows at once.
    constants, model = designs.apply_model(doc["per_op"], doc["calibration"])
    doc = dict(doc, constants=constants, model=model, rows=designs.with_model(doc["rows"], model))
    with open(PUBLISHED) as f:
        fig_designs(doc, json.load(f), os.path.join(out, "designs.png"))
    trip = lambda r, k, fmt: " / ".join(fmt % r["%s_%s" % (op, k)] for op in ("fork", "exec", "shell"))
    rows = "".join(
        "<tr><td>{d}</td><td>{inv2}</td><td>{inv}</td><td>{maps}</td><td>{hyp}</td><td>{emu}</td><td>{ins}</td>"
        "<td>{hw}</td><td>{save}</td><td>{xen}</td><td>{guest}</td><td>{iso}</td></tr>".format(
            d=e(r["design"]), inv2="%.2f / %.2f / %.2f" % (r["inv_fork_exit"], r["inv_fork_exec"], r["inv_fork64"]),
            inv=trip(r, "inv", "%.2f"), maps=trip(r, "maps", "%.2f"), hyp=trip(r, "hypercalls", "%.0f"),
            emu=trip(r, "emulations", "%.1f"), ins=trip(r, "instructions", "%d"),
            hw=" / ".join("%.0f (%s)" % (r["%s_hw_us" % op], r["%s_hw_us_range" % op]) for op in ("fork", "exec", "shell")),
            save=trip(r, "hw_saving", "%.3f").replace("0.", "."), xen="yes" if r["xen_change"] else "no",
            guest="yes" if r["guest_change"] else "no", iso=e(r["isolation"])) for r in doc["rows"])
    consts = constants_html(doc["constants"])
    return """<p>Each row is one design booted with the Xen and dom0 kernel it needs ({timing}). Invalidations
per operation come from forkbench on 2 vCPUs after its warm-up, and, like the other counts, from lmbench's lat_proc
under -icount on 1 vCPU, whose instructions (guest and Xen together) are the median of the rounds. Cells read
fork+exit / fork+execve / fork+/bin/sh. The estimated hardware time is evaluation/hwmodel.py: the instructions at
the calibrated rate plus each count times its constant, swept over every corner of the constants' ranges; the
saving is against stock strict within each corner (fraction of its time).</p>
<table><tr><th>design</th><th>invalidations, forkbench: fork+exit / fork+exec / 64 MiB fork</th>
<th>invalidations</th><th>IOMMU maps</th><th>hypercalls</th><th>PTE writes emulated</th><th>instructions</th>
<th>estimated µs on hardware (range)</th><th>saving vs stock strict</th><th>Xen change</th><th>guest change</th>
<th>isolation tests passed here</th></tr>{rows}</table>
<figure><img src="designs.png" alt="designs.png"><figcaption>Estimated hardware time each design saves against
stock strict (evaluation/hwmodel.py; bars: the constants' point values, error bars: every corner of their ranges,
each saving computed within one corner); stock relaxed (grey) has no DMA protection. Dashed: what the paper measured
on hardware. Timing method: instructions under -icount (1 vCPU, median of the rounds) plus counts times published
or estimated hardware costs.</figcaption></figure>
<p>Constants (evaluation/hardware.json):</p><ul>{consts}</ul>""".format(timing=e(doc["timing"]), rows=rows,
                                                                      consts=consts)


IO_STYLE = {("strict", "off"): ("tab:red", "o", "strict, cache off"), ("strict", "on"): ("tab:blue", "s",
                                                                                         "strict, cache on"),
            ("caching-mode", "off"): ("tab:orange", "^", "caching mode, cache off"),
            ("caching-mode", "on"): ("tab:cyan", "v", "caching mode, cache on"),
            ("relaxed", "-"): ("tab:gray", "D", "relaxed")}


def fig_io(doc, path):
    """The disk's misses per GiB against the invalidations per GiB during its reads, every run."""
    plt = _plt()
    blocks = sorted({r["block_kb"] for r in doc["rows"]})
    fig, axes = plt.subplots(1, len(blocks), figsize=(6.5 * len(blocks), 4.4), squeeze=False)
    for ax, block in zip(axes[0], blocks):
        rows = [r for r in doc["rows"] if r["block_kb"] == block]
        idle = [r["misses_per_gib"] for r in rows if r["condition"] == "idle" and r["boot"] == "strict"]
        if idle:
            ax.axhline(sorted(idle)[len(idle) // 2], color="black", ls=":", lw=1, label="strict, idle (median)")
        for (boot, cache), (color, marker, label) in IO_STYLE.items():
            pts = [r for r in rows if r["boot"] == boot and r["cache"] == cache and r["condition"] == "busy"]
            if pts:
                ax.scatter([r["inv_pages_per_gib"] + r["inv_domain_per_gib"] + r["inv_global_per_gib"] for r in pts],
                           [r["misses_per_gib"] for r in pts], color=color, marker=marker, label=label, alpha=0.8)
        ax.set_xscale("symlog", linthresh=10)
        ax.set_yscale("symlog", linthresh=10)
        ax.set_xlabel("IOTLB invalidations per GiB read (QEMU's trace, all kinds)")
        ax.set_ylabel("the disk's IOTLB misses per GiB")
        ax.set_title("%d KiB reads, the busy state at several rates" % block)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def io_html(results, out, missing=None):
    """Stage io (results/io.json): the study's open question, the counts, the line-rate table."""
    doc = study.read_json(os.path.join(results, "io.json"))
    if doc is None:
        return missing_line("io", missing or {})
    from evaluation import hwmodel
    e = html.escape
    # The model is applied here, so that a change of evaluation/hardware.json shows at once.
    model = hwmodel.io_model(doc["rows"])
    fig_io(doc, os.path.join(out, "io.png"))
    summ = sorted(doc["summary"], key=lambda r: (r["boot"] != "strict", r["boot"], r["block_kb"], r["rate_per_min"],
                                                  r["cache"]))
    rows = "".join("<tr><td>%s</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td>%.0f</td><td>%.0f</td>"
                   "<td>%.0f</td><td>%.0f</td><td>%.1f</td><td>%.0f</td><td>%.1f</td><td>%.1f</td></tr>" % (
                       e(r["boot"]), r["block_kb"], e(r["condition"]),
                       "%d" % r["rate_per_min"] if r["condition"] == "busy" else "-", e(r["cache"]), r["runs"],
                       r["translations_per_gib"], r["misses_per_gib"], r["inv_pages_per_gib"],
                       r["inv_domain_per_gib"] + r["inv_global_per_gib"], r["resets_per_gib"],
                       r["qi_iotlb_inv_per_gib"], r["iommu_pt_coalesces_per_gib"], r["iommu_pt_shatters_per_gib"])
                   for r in summ)
    return io_text(doc, model) + """
<figure><img src="io.png" alt="io.png"><figcaption>Every read of the io stage: the disk's IOTLB misses per GiB
against the invalidations per GiB that fell within its DMA (QEMU's trace of the emulated VT-d, the disk's requester
ID), the busy state beside it at each rate; dotted, the strict boot's idle reads. Timing method: exact counts
(emulation time only sets how many invalidations fall into a GiB).</figcaption></figure>
<p>Per condition, per GiB read, over all its runs together. Device side (QEMU's trace): translations, misses, invalidations
(page-selective; domain-wide and global), IOTLB resets (QEMU empties its 1024-entry IOTLB when full). Xen's side
(its perf counters, over the measured command, which encloses the disk's DMA): queued IOTLB invalidations, superpage
coalesces and shatters.</p>
<table><tr><th>boot</th><th>KiB/read</th><th>condition</th><th>process creations/min</th><th>cache</th><th>runs</th>
<th>translations</th><th>misses</th><th>page inv.</th><th>domain inv.</th><th>resets</th><th>Xen: invalidations</th>
<th>Xen: coalesces</th><th>Xen: shatters</th></tr>{rows}</table>
{table}""".format(rows=rows, table=io_model_html(model))


def io_model_html(model):
    e = html.escape
    rows = "".join("<tr><td>%s</td><td>%d</td><td>%d</td><td>%.1f</td><td>%s</td><td>%s .. %s</td><td>%s</td></tr>" % (
        e(r["config"]), r["block_kb"], r["gbps"], r["invalidations_per_s"], _share(r["loss"]), _share(r["loss_low"]),
        _share(r["loss_high"]), _share(r["cpu_share"])) for r in model["rows"])
    consts = constants_html(model["constants"])
    sens = model["psc_sensitivity"]
    psc = ", ".join("%g: %s" % (x["psc_share"], _share(x["loss"])) for x in sens
                    if x["block_kb"] == max(y["block_kb"] for y in sens)) if sens else "no strict reads"
    return """<p>The line-rate estimate (evaluation/hwmodel.py <code>io_model</code>): the share of the device's time
spent on the walks that the invalidations cause (refills after a domain-wide one, and walks made longer by a
page-selective one; each walk taken to hold the device's DMA, which a device with requests in flight overlaps), at the
study's busy state on hardware, and the share of one CPU that waits for the invalidations. A domU's disk with a grant
per request counts what it adds to the same reads with persistent grants. Range: every corner of the constants'
ranges. Above 100 %: more than the device or one CPU has, so the line rate is out of reach.</p>
<table><tr><th>configuration</th><th>KiB/read</th><th>Gbit/s</th><th>invalidations/s</th><th>device time lost</th>
<th>range</th><th>CPU share waiting</th></tr>{rows}</table>
<p>Sensitivity to the one assumption QEMU cannot check, the paging-structure caches (psc_share; stock strict,
200 Gbit/s, the largest reads, the other constants at their point values): {psc}.</p>
<p>Constants (evaluation/hardware.json):</p><ul>{consts}</ul>""".format(rows=rows, psc=e(psc), consts=consts)


def _share(x):
    """A share of a device's or a CPU's time; 1 and above is more than it has."""
    if not x:
        return "0"
    return "%.2g %%" % (100 * x) if x < 1 else "%.0f %% (%.1f times all of it)" % (100 * x, x)


def grants_text(model):
    """The other flush source, side by side: a domU's disk through blkback, grant per request."""
    rows = {(r["config"], r["block_kb"], r["gbps"]): r for r in model["rows"]}
    cfg = model["inputs"]["configs"]
    per_req = sorted(int(k.rsplit("/", 1)[1]) for k in cfg if k.startswith("grants/grant per request/"))
    if not per_req:
        return ""
    block = per_req[0]
    v, keep = cfg["grants/grant per request/%d" % block], cfg.get("grants/persistent grants/%d" % block)
    name = "a domU's disk, grant per request"
    lo, hi = rows[(name, block, IO_GBPS_LOW)], rows[(name, block, IO_GBPS_HIGH)]
    return ("The other source, side by side: a PV domU reading the same disk through dom0's blkback (strict dom0) "
            "with a grant per request sent %.0f invalidations per GiB of %d KiB reads (%.2f per read, %.0f %% of "
            "them domain-wide)%s; at %d "
            "Gbit/s that is %.0f per second, %s of a CPU waiting and %s of the device's time, at %d Gbit/s %s and "
            "%s: this source grows with the line rate. "
            % (v["inv_per_gib"], block, v["inv_per_gib"] * block / 2 ** 20,
               100 * v["domain_inv_per_gib"] / v["inv_per_gib"] if v["inv_per_gib"] else 0,
               ", against %.0f with persistent grants" % keep["inv_per_gib"] if keep else "",
               IO_GBPS_LOW, lo["invalidations_per_s"], _share(lo["cpu_share"]), _share(lo["loss"]), IO_GBPS_HIGH,
               _share(hi["cpu_share"]), _share(hi["loss"])))


IO_GBPS_LOW, IO_GBPS_HIGH = 10, 200


def io_text(doc, model):
    """The study's question and the answer these counts give, in numbers from DOC and MODEL."""
    e = html.escape
    inp = model["inputs"]
    cfg = inp["configs"]
    blocks = sorted(int(k.rsplit("/", 1)[1]) for k in cfg if k.startswith("strict/off/"))
    if not blocks or "strict/on/%d" % blocks[-1] not in cfg:
        return "<p>The io stage wrote no busy reads of the strict boot with the cache off and on.</p>"
    big = blocks[-1]
    off, on = cfg["strict/off/%d" % big], cfg["strict/on/%d" % big]
    summ = [r for r in doc["summary"] if r["boot"] == "strict" and r["block_kb"] == big]
    top = max(r["rate_per_min"] for r in summ)
    pick = lambda cond, cache, rate: next((r for r in summ if r["condition"] == cond and r["cache"] == cache
                                          and r["rate_per_min"] == rate), None)
    idle, b_off, b_on = pick("idle", "off", 0), pick("busy", "off", top), pick("busy", "on", top)
    by_rate = inp["domain_by_rate"].get("strict/off", [])
    achieved = next((x["achieved_per_min"] for x in by_rate if x["rate_per_min"] == top), None)
    busy_off = [r for r in doc["rows"] if r["boot"] == "strict" and r["condition"] == "busy" and r["cache"] == "off"]
    stock = {r["gbps"]: r for r in model["rows"] if r["config"] == "stock strict" and r["block_kb"] == big}
    cache = {r["gbps"]: r for r in model["rows"] if r["config"] == "the cache" and r["block_kb"] == big}
    slope = off["misses_per_1000_page_inv"]
    fmt = lambda r, k: "%.0f" % r[k] if r else "?"
    return """<p><b>The study's open question.</b> Its netperf run (87.9 Mbit/s both ways) showed nothing, and it
deferred to future work whether the flushes hurt fast I/O. Here an NVMe disk behind the emulated VT-d is read with
O_DIRECT into one buffer while the busy state runs beside it, and QEMU's trace counts every translation of the
disk's DMA (its queues' included) as a hit or a miss, and every invalidation by kind, over the disk's DMA (device:
{device}).</p>
<p><b>What the counts say.</b> With the cache off the busy state sent {pinv:.1f} page-selective and {dinv:.3f}
domain-wide invalidations per process creation (pooled over the read sizes); with the cache on {pinv_on:.3f} and
{dinv_on:.3f}. Domain-wide ones within the reads, by rate asked: {dom}; by round: {rounds}; Xen counted {coal}
superpage coalesces and {shat} shatters in the same reads. Each domain-wide one cost the disk {w} extra misses (pooled over the reads that had
one; a floor, dmaread keeping one request in flight). The page-selective ones name one page each: {slope}. At {top}
process creations per minute asked ({ach} achieved), {big} KiB reads: {m_idle} misses per GiB idle, {m_off} with the
cache off, {m_on} with the cache on.</p>
<p><b>On hardware, by the model.</b> Page-table invalidations follow process creations, not bytes, so in the model
their cost per second does not grow with the line rate. At the study's rate stock strict loses {l_lo} of the device's
time at {g_lo} Gbit/s and {l_hi} at {g_hi} ({l_hi_lo} .. {l_hi_hi} over the ranges), the cache {c_hi}; a CPU waits {cpu}
of its time for them. {grants}To confirm on hardware: VT-d's performance monitor (Sapphire Rapids on; Linux's
drivers/iommu/intel/perfmon.c names iotlb_lookup, iotlb_hit, ss_nonleaf_lookup and ss_nonleaf_hit, the
paging-structure caches QEMU does not model) counting during the same reads; under Xen, Xen owns the IOMMU and would
have to read those counters itself.</p>""".format(
        device=e(doc.get("device", "")), pinv=off["page_inv_per_creation"], dinv=off["domain_inv_per_creation"],
        pinv_on=on["page_inv_per_creation"], dinv_on=on["domain_inv_per_creation"],
        dom=e("; ".join("%d at %d/min (%.0f creations)" % (x["inv_domain"], x["rate_per_min"], x["creations"])
                        for x in by_rate)),
        rounds=", ".join(str(sum(r["inv_domain"] + r["inv_global"] for r in busy_off if r["round"] == k))
                         for k in sorted({r["round"] for r in busy_off})),
        coal=sum(r["iommu_pt_coalesces"] for r in busy_off), shat=sum(r["iommu_pt_shatters"] for r in busy_off),
        w="%.1f" % inp["w_refill"] if inp["w_refill"] is not None else "no (none fell within a read)",
        slope=("over the reads without a domain-wide one, the disk's misses changed by %+.2f per 1000 of them" % slope
               if slope is not None else "too few reads went without a domain-wide one to fit the disk's misses to "
                                         "them"),
        top=top, ach="%.0f" % achieved if achieved else "?", big=big, m_idle=fmt(idle, "misses_per_gib"),
        m_off=fmt(b_off, "misses_per_gib"), m_on=fmt(b_on, "misses_per_gib"),
        g_lo=IO_GBPS_LOW, g_hi=IO_GBPS_HIGH, l_lo=_share(stock[IO_GBPS_LOW]["loss"]),
        l_hi=_share(stock[IO_GBPS_HIGH]["loss"]), l_hi_lo=_share(stock[IO_GBPS_HIGH]["loss_low"]),
        l_hi_hi=_share(stock[IO_GBPS_HIGH]["loss_high"]), c_hi=_share(cache[IO_GBPS_HIGH]["loss"]),
        cpu=_share(stock[IO_GBPS_HIGH]["cpu_share"]), grants=e(grants_text(model)))


def fig_pte_modes(doc, pub, path):
    """Instructions per fork+exit against dirty PTEs per table, per mode; the thread's figures."""
    plt = _plt()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.4), gridspec_kw={"width_ratios": [3, 2]})
    style = {"late": ("tab:green", "late pin (today)"), "early": ("tab:blue", "early pin, batched hypercalls"),
             "emulate": ("tab:red", "early pin, trapped and emulated")}
    for mode, (color, label) in style.items():
        rows = sorted((r for r in doc["rows"] if r["mode"] == mode), key=lambda r: r["ptes"])
        if rows:
            ax.plot([r["ptes"] for r in rows], [r["instructions_per_fork"] / 1000 for r in rows], "o-", color=color,
                    label=label)
    for pair, k in doc["summary"]["break_even"].items():
        if k:
            ax.axvline(k, color="gray", ls=":", lw=1)
            ax.annotate("%s: K=%.1f" % (pair.replace("_vs_", " = "), k), (k, ax.get_ylim()[1]), rotation=90,
                        va="top", ha="right", fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_axes(ax)
    lo, hi = ax.get_ylim()
    ax.set_yticks([t for t in (1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000) if lo <= t <= hi])
    ax.set_xticks(sorted({r["ptes"] for r in doc["rows"]}))
    ax.set_xlabel("dirty PTEs per page-table page (K), %d tables" % doc["rows"][0]["tables"])
    ax.set_ylabel("thousand instructions per fork+exit (-icount)")
    ax.set_title("this testbed: Xen 4.20, Linux 6.12")
    ax.legend(fontsize=8)
    t = pub["pte_update_thread"]["us_per_fork"]
    for mode, color, label in (("writable", "tab:green", "writable page tables"),
                               ("emulate", "tab:red", "trap-and-emulate")):
        pts = sorted((int(k), v) for k, v in t[mode].items())
        bx.plot([p for p, _ in pts], [v for _, v in pts], "s--", color=color, label=label)
    bx.set_xscale("log")
    bx.set_yscale("log")
    _plain_log_axes(bx)
    bx.set_xticks(sorted({int(k) for m in t.values() for k in m}))
    bx.set_xlabel("pages")
    bx.set_ylabel("µs per fork")
    bx.set_title("the Xen thread (2005 hardware): break-even about %d PTEs per page"
                 % pub["pte_update_thread"]["break_even_ptes_per_page"], fontsize=9)
    bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def pte_modes_html(results, out, missing=None):
    from . import ptemodes
    doc = study.read_json(os.path.join(results, "pte_modes.json"))
    if doc is None:
        return missing_line("pte_modes", missing or {})
    with open(PUBLISHED) as f:
        pub = json.load(f)
    fig_pte_modes(doc, pub, os.path.join(out, "pte_modes.png"))
    e = html.escape
    be = ", ".join("%s: %s" % (k.replace("_vs_", " = "), "K = %.1f" % v if v else "no crossing in K = %d..%d" % (
        doc["plan"]["ks"][0], doc["plan"]["ks"][-1])) for k, v in doc["summary"]["break_even"].items())
    rows = "".join("<tr><td>%s</td><td>%d</td><td>%d</td><td>%.1f</td><td>%.1f</td><td>%.1f</td><td>%.2f</td></tr>" % (
        e(r["mode"]), r["ptes"], r["instructions_per_fork"], r["hypercalls"], r["mmu_page_updates"],
        r["ptwr_emulations"], r["qi_iotlb_inv"]) for r in doc["rows"])
    return """<p>{doc}</p><p>Break-even: {be}.</p>
<figure><img src="pte_modes.png" alt="pte_modes.png"><figcaption>Left: instructions per fork+exit (guest and Xen,
-icount, 1 vCPU) against the dirty PTEs per page-table page, workload forkdirty, one boot per mode of the testbed
kernel (testbed/linux/0003); dotted: where two modes cross. Right: the Xen mailing-list thread's figures, µs per
fork on 2005 hardware, writable page tables against trap-and-emulate. {timing}</figcaption></figure>
<table><tr><th>mode</th><th>K</th><th>instructions per fork+exit</th><th>hypercalls</th><th>mmu_update entries</th>
<th>PTE writes emulated</th><th>invalidations</th></tr>{rows}</table>""".format(
        doc=e(ptemodes.DESCRIPTION),
        be=e(be), timing=e(doc["timing"]), rows=rows)


def native_kernel_html(results, missing=None):
    """The paper's proposed native port (results/native_kernel.json, series.native): a table."""
    doc = study.read_json(os.path.join(results, "native_kernel.json"))
    if doc is None:
        return missing_line("native_kernel", missing or {})
    s = doc["summary"]
    rows = "".join("<tr><td>%s</td><td>%.2f</td><td>%.2f (%+.3f %%)</td><td>%.2f</td><td>%.2f (%+.3f %%)</td></tr>" % (
        what, s[what]["vanilla"], s[what]["built_off"], s[what]["off_vs_vanilla_pct"], s[what]["testbed_off"],
        s[what]["testbed_on"], s[what]["on_vs_off_pct"]) for what in ("fork", "exec"))
    absent = "absent" in (s.get("series_has_no_pool") or [])
    return """<p>The kernels booted without Xen and without an IOMMU ({timing}). The series has a pool only where a
hypervisor takes its declarations: natively, its debugfs directory was {absent}. To measure what keeping page
tables alone would save there, the series was also booted with the testbed-only
<code>xen_pgtable_pool_test_native=1</code> (testbed/linux: a pool that declares nothing), off and on interleaved
in one boot. lmbench lat_proc, µs per operation, median of the rounds:</p>
<table><tr><th>operation</th><th>vanilla</th><th>series (no pool)</th><th>series + pool declaring nothing, off</th>
<th>series + pool declaring nothing, on</th></tr>{rows}</table>""".format(
        timing=html.escape(doc["timing"]), rows=rows,
        absent="absent, as it must be" if absent else "<b>present</b>")


def page(docs, table, figs, results, out, missing=None):
    e = html.escape
    missing = missing or {}
    # The first results file with the run's time scale (series' native_kernel.json has none).
    any_doc = next((d for d in docs.values() if "time_scale" in d), {})
    ts = any_doc.get("time_scale") or {"meaning": "not recorded (no results of the testbed stages)",
                                       "churn_rate_per_real_min": "?", "minute_s": "?"}
    versions = any_doc.get("versions", {})
    ok = sum(1 for r in table if r["reproduced"])
    rows = "\n".join("<tr class='%s'><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>" % (
        "yes" if r["reproduced"] else "no", e(r["item"]), e(r["published"]), e(r["ours"]),
        "yes" if r["reproduced"] else "<b>no</b>", e(r["rule"])) for r in table)
    fig_html = "\n".join("<figure><img src='%s' alt='%s'><figcaption>%s</figcaption></figure>" % (
        e(f), e(f), e(c)) for f, c in figs)
    rel = os.path.relpath(os.path.abspath(results), os.path.abspath(out))
    files = " ".join("<a href='%s/%s.json'>%s.json</a> <a href='%s/%s.csv'>csv</a>" % (rel, n, n, rel, n)
                     for n in EXPERIMENTS + EXTRA_EXPERIMENTS if n in docs)
    ver = "; ".join("%s: %s" % (k, ", ".join("%s=%s" % kv for kv in sorted(v.items()) if kv[0] != "key"))
                    for k, v in versions.items())
    boots = any_doc.get("boots", {})
    boot_html = "".join("<li>%s: dom0-iommu=%s, dom0 <code>%s</code>, boot %s s</li>" % (
        e(k), e(b["mode"]), e(b["dom0_cmdline"]), b["boot_seconds"]) for k, b in sorted(boots.items()))
    return """<!doctype html>
<html><head><meta charset="utf-8"><title>flushless: the paper's evaluation on the testbed</title>
<style>
body {{ font-family: sans-serif; max-width: 1200px; margin: 2em auto; line-height: 1.4; }}
table {{ border-collapse: collapse; font-size: 90%; }} td, th {{ border: 1px solid #ccc; padding: 4px 6px; vertical-align: top; }}
tr.no td {{ background: #fff0f0; }} tr.yes td:nth-child(5) {{ color: #060; }}
figure {{ margin: 2em 0; }} img {{ max-width: 100%; border: 1px solid #eee; }} figcaption {{ font-size: 90%; color: #333; }}
code {{ font-size: 85%; }}
</style></head><body>
<h1>flushless: the paper's evaluation, reproduced on the testbed</h1>
<p>Profile <b>{profile}</b>, generated {generated}, flushless {commit}. Xen and dom0 built from Debian's sources with
patches/xen and patches/linux, booted under QEMU (TCG, q35, emulated VT-d), dom0 a PV domain with
<code>dom0-iommu=strict</code> unless said. <b>Time scale:</b> {meaning}; the busy state runs at {rate} process
creations per real minute. Counts are exact. Times are emulation times: they are compared only within one boot
(baseline and dyn interleaved, the cache switched at run time), the latencies and the CPU suite under QEMU's
-icount (instruction time, immune to the host's load); each figure says which, and rows that compare separate
boots say so.</p>{missing}
<h2>Published numbers and ours ({ok} of {n} reproduced)</h2>
<table><tr><th>item</th><th>published</th><th>ours</th><th>reproduced</th><th>rule</th></tr>
{rows}
</table>
<p>Also in <a href="comparison.json">comparison.json</a> and <a href="comparison.csv">comparison.csv</a>.
Results files: {files}.</p>{missing_table}
<h2>Figures</h2>
{figs}{missing_figs}
<h2>The native-kernel question</h2>
{native}
<h2>Designs side by side</h2>
{designs}
<h2>PTE update modes on fork</h2>
{pte_modes}
<h2>Device I/O: do the flushes hurt it, and does the cache help?</h2>
{io}
<h2>Where emulation changes what can be measured</h2>
<ul>
<li>TCG runs dom0 10-50 times slower than hardware, so the paper's 542 process creations per minute are run in
one scaled minute of {minute_s} s (the count per minute is the paper's; the wall time is not).</li>
<li>An IOTLB invalidation in QEMU's VT-d costs emulation time, not the hardware's latency. Under -icount (the
latencies, the CPU suite, the seed benchmarks) dom0's clock counts instructions only: the invalidation's own latency
is zero there, so the latency gain shown is the CPU work saved (Xen's IOMMU unmap/map and the hypercall paths),
a lower bound of what hardware shows. The counts show how many invalidations there are.</li>
<li>The TCP stream's throughput is bounded by QEMU's e1000e and user networking, far below the paper's link;
what carries over is whether the cache changes it.</li>
<li>The CPU-bound suite is busybox's integer programs, not SPECint.</li>
</ul>
<h2>Configuration</h2>
<ul>{boots}</ul>
<p>Versions: {versions}</p>
</body></html>
""".format(profile=e(any_doc.get("profile", "?")), generated=e(any_doc.get("generated", "?")),
           commit=e(str(any_doc.get("flushless_commit"))), meaning=e(ts["meaning"]),
           rate=ts["churn_rate_per_real_min"], ok=ok, n=len(table), rows=rows, files=files, figs=fig_html,
           minute_s=ts["minute_s"], boots=boot_html, versions=e(ver), native=native_kernel_html(results, missing),
           designs=designs_html(results, out, missing), pte_modes=pte_modes_html(results, out, missing),
           io=io_html(results, out, missing),
           missing=missing_section(missing),
           missing_table=missing_lines(("groups", "timing", "network"), missing),
           missing_figs=missing_lines(("groups", "timing", "network", "native", "seed"), missing))


# --- two runs side by side ----------------------------------------------------------------

def profile_of(results):
    return next(iter(load(results).values())).get("profile")


def key_figures(results):
    """The figures a second run must repeat: counts, and ratios of times within one boot."""
    docs = load(results)
    out = []  # (name, kind, value); kind: count | ratio | noisy

    if "flush_frequency" in docs:
        doc = docs["flush_frequency"]
        sw = doc["profile_settings"]["switch_minute"]
        by = {}
        for r in doc["rows"]:
            by.setdefault(r["group"], []).append(r)
        base = study.mean([r["qi_iotlb_inv"] for r in by["baseline"] if r["minute"] >= sw])
        out.append(("baseline IOTLB flushes/min", "count", base))
        out.append(("dyn IOTLB flushes/min before the switch", "count",
                    study.mean([r["qi_iotlb_inv"] for r in by["dyn"] if r["minute"] < sw])))
        # Near-zero counts compare as the share of baseline's flushes they remove.
        out.append(("pre: share of flushes removed", "ratio",
                    1 - study.mean([r["qi_iotlb_inv"] for r in by["pre"] if r["minute"] >= 1]) / base))
        out.append(("dyn: share of flushes removed from switch + 2", "ratio",
                    1 - study.mean([r["qi_iotlb_inv"] for r in by["dyn"] if r["minute"] >= sw + 2]) / base))
        for g in ("baseline", "pre", "dyn"):
            out.append(("%s processes created" % g, "count", sum(r["created"] or 0 for r in by[g])))
    if "cache_size" in docs:
        for g in study.CACHE_GROUPS:
            c = cache_means(docs["cache_size"], g)
            if c["total"]["pool"]:
                out.append(("%s page-table pages in use, mean" % g, "count", c["total"]["in_use"]["mean"]))
                out.append(("%s cache pages, mean" % g, "count", c["total"]["pool"]["mean"]))
    if "cache_miss" in docs:
        for r in docs["cache_miss"]["rows"]:
            out.append(("%s %s allocations" % (r["group"], r["level"]), "count", r["allocations"]))
            out.append(("%s %s hit ratio" % (r["group"], r["level"]), "ratio", 1 - (r["miss_probability"] or 0)))
    if "pt_alloc_free_time" in docs:
        doc = docs["pt_alloc_free_time"]
        sw = doc["profile_settings"]["switch_minute"]
        rows = [r for r in doc["rows"] if r["group"] == "dyn"]
        for kind in ("alloc", "free"):
            def avg(rs):
                n = sum(r[kind + "_count"] for r in rs)
                return sum(r[kind + "_ns"] for r in rs) / n if n else None
            off, on = avg([r for r in rows if r["minute"] < sw]), avg([r for r in rows if r["minute"] >= sw + 2])
            if off and on:
                out.append(("dyn %s time, cache on / off (-icount)" % kind, "instruction time", on / off))
    if "pt_cycle_cost" in docs:
        s = docs["pt_cycle_cost"]["summary"]
        for kind, key in (("alloc", "pte_alloc_ns"), ("free", "pte_free_ns")):
            if s[key]["baseline"]["mean"] and s[key]["dyn"]["mean"] is not None:
                out.append(("ptcycle PTE page %s time, cache on / off (-icount)" % kind, "instruction time",
                            s[key]["dyn"]["mean"] / s[key]["baseline"]["mean"]))
    for name, key in (("process_latency", "what"), ("cpu_suite", "program"), ("tcp_stream", None)):
        if name in docs:
            for k, s in sorted(docs[name]["summary"].items()):
                if s.get("dyn_vs_baseline") is not None:
                    label = "%s %s" % (name, k) if key else name
                    out.append(("%s: dyn / baseline" % label, "noisy" if name == "tcp_stream" else "ratio",
                                1 + s["dyn_vs_baseline"]))
    return out


def compare(results_a, results_b, tolerance=0.05):
    """Rows (name, kind, a, b, relative difference, within); noisy rows never fail."""
    a = {n: (k, v) for n, k, v in key_figures(results_a)}
    b = {n: (k, v) for n, k, v in key_figures(results_b)}
    rows = []
    for name in a:
        if name not in b:
            continue
        kind, va = a[name]
        vb = b[name][1]
        rel = abs(va - vb) / abs(va) if va else (0.0 if vb == va else float("inf"))
        rows.append((name, kind, va, vb, rel, rel <= tolerance or kind == "noisy"))
    return rows
