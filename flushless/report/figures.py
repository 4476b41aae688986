"""The figures of the paper's experiments, as PNGs beside index.html."""

from ..experiments import busy, study
from ..experiments.results import mean, stdev


GROUP_STYLE = {"baseline": ("tab:red", "-"), "pre": ("tab:blue", "-"), "dyn": ("tab:green", "-"),
               "adaptive": ("tab:purple", "-"), "relaxed": ("tab:gray", ":"), "native": ("black", "--")}


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _plain(value, _pos=None):
    return "%d" % value if value >= 1 and value == int(value) else "%g" % value


def plain_log_axes(ax):
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
    plt = pyplot()
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
    plt = pyplot()
    fig, axes = plt.subplots(2, len(busy.TIMING_LEVELS), figsize=(12, 6), sharex=True)
    sw = doc["profile_settings"]["switch_minute"]
    for j, lv in enumerate(busy.TIMING_LEVELS):
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
    plt = pyplot()
    fig, axes = plt.subplots(1, len(busy.CACHE_GROUPS), figsize=(16, 4))
    for ax, group in zip(axes, busy.CACHE_GROUPS):
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
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    levels = [busy.POOL_LEVEL]
    width = 0.8 / len(busy.CACHE_GROUPS)
    for k, group in enumerate(busy.CACHE_GROUPS):
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
    plt = pyplot()
    fig, axes = plt.subplots(1, len(names), figsize=(max(3.2 * len(names), 5.5), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names):
        for k, group in enumerate(("baseline", "dyn")):
            xs = [r[value] for r in doc["rows"] if r["group"] == group and (key is None or r[key] == name)]
            ax.scatter([k + (i % 7 - 3) * 0.03 for i in range(len(xs))], xs, s=10, color=GROUP_STYLE[group][0])
            if xs:
                m, sd = mean(xs), stdev(xs)
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
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for i, name in enumerate(names):
        base = mean([r[value] for r in doc["rows"] if r["group"] == "baseline" and r[key] == name])
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
    plt = pyplot()
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
        plain_log_axes(ax)
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
    plt = pyplot()
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
    plain_log_axes(axes[0])
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
    plain_log_axes(ax)
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
                     "lab's about %.1f; with hap=0 the first round is the fastest (see docs/second-domain.md, \"Seed 002 on Xen\"). Per fork+exit (forkbench, Xen's counters): hap=0 %.0f shadow faults, %.0f "
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
