"""Two runs side by side: the figures a second run must repeat."""

from ..experiments import busy
from ..experiments.results import mean
from .claims import cache_means
from .inputs import load


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
        base = mean([r["qi_iotlb_inv"] for r in by["baseline"] if r["minute"] >= sw])
        out.append(("baseline IOTLB flushes/min", "count", base))
        out.append(("dyn IOTLB flushes/min before the switch", "count",
                    mean([r["qi_iotlb_inv"] for r in by["dyn"] if r["minute"] < sw])))
        # Near-zero counts compare as the share of baseline's flushes they remove.
        out.append(("pre: share of flushes removed", "ratio",
                    1 - mean([r["qi_iotlb_inv"] for r in by["pre"] if r["minute"] >= 1]) / base))
        out.append(("dyn: share of flushes removed from switch + 2", "ratio",
                    1 - mean([r["qi_iotlb_inv"] for r in by["dyn"] if r["minute"] >= sw + 2]) / base))
        for g in ("baseline", "pre", "dyn"):
            out.append(("%s processes created" % g, "count", sum(r["created"] or 0 for r in by[g])))
    if "cache_size" in docs:
        for g in busy.CACHE_GROUPS:
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
