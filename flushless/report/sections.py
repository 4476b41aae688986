"""The sections for what the study did not measure: designs, PTE update modes, device I/O,
the native kernel."""

import html
import json
import os

from ..experiments.results import read_json
from .figures import plain_log_axes, pyplot
from .inputs import PUBLISHED, missing_line


def fig_designs(doc, pub, path):
    """Each design's estimated hardware saving against stock strict, swept, beside the paper's."""
    plt = pyplot()
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
    doc = read_json(os.path.join(results, "designs.json"))
    if doc is None:
        return missing_line("designs", missing or {})
    e = html.escape
    from ..experiments import designs
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
    plt = pyplot()
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
    doc = read_json(os.path.join(results, "io.json"))
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
    plt = pyplot()
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
    plain_log_axes(ax)
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
    plain_log_axes(bx)
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
    from ..experiments import ptemodes
    doc = read_json(os.path.join(results, "pte_modes.json"))
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
    doc = read_json(os.path.join(results, "native_kernel.json"))
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
