"""What each design's fork+exit, fork+execve and fork+/bin/sh would take on hardware.

QEMU completes an IOTLB invalidation at once, so the testbed's -icount times hold only the
CPU work. Per operation this model adds what -icount does not see:

    t = instructions / instr_per_us            (guest and Xen, as -icount counted them)
      + page-selective invalidations * t_inv
      + domain-selective invalidations * t_inv_domain   (the xen-only design's one per pin)
      + IOMMU maps * t_map
      + hypercalls * t_hypercall
      + PTE writes emulated * t_emulate

Every constant has a name, a source and a range (evaluation/hardware.json); the rate is
calibrated on this machine. Each estimate is swept over every corner of the ranges, and each
saving against stock strict is computed within one corner, so a constant both sides share
moves them together.

    python3 -m evaluation.hwmodel [RESULTS]    # reads RESULTS/designs.json (default results)
"""

import itertools
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HARDWARE = os.path.join(HERE, "hardware.json")
OPS = ("fork", "exec", "shell")
OP_NAMES = {"fork": "fork+exit", "exec": "fork+execve", "shell": "fork+/bin/sh -c"}
TERMS = (("t_inv", "qi_iotlb_inv_psi"), ("t_inv_domain", "pin_batch_flush"), ("t_map", "iommu_map_type"),
         ("t_hypercall", "hypercalls"), ("t_emulate", "ptwr_emulations"))


def load_constants(path=HARDWARE):
    with open(path) as f:
        return json.load(f)["constants"]


def calibrate(constants, calibration):
    """Fill instr_per_us from CALIBRATION: {op: {"instructions": n, "host_us": t (the least
    disturbed host run), "host_runs_us": [every run]}}, from the operation hardware.json names."""
    op = constants["instr_per_us"]["calibrated"]
    c = calibration.get(op) or {}
    if not c.get("instructions") or not c.get("host_us"):
        raise ValueError("no calibration for %s: need its -icount instructions and host time" % OP_NAMES[op])
    runs = c.get("host_runs_us") or [c["host_us"]]
    out = {k: dict(v) for k, v in constants.items()}
    out["instr_per_us"].update(
        value=c["instructions"] / c["host_us"], low=c["instructions"] / max(runs), high=c["instructions"] / min(runs),
        calibration={o: {"instructions": x["instructions"], "host_runs_us": x.get("host_runs_us") or [x["host_us"]],
                         "instr_per_us": round(x["instructions"] / x["host_us"], 1)}
                     for o, x in calibration.items() if x.get("instructions") and x.get("host_us")})
    return out


def components(counts):
    """Per-operation counts of one design -> the model's inputs."""
    inv = counts.get("qi_iotlb_inv", 0.0)
    batch = counts.get("pin_batch_flush", 0.0)
    return {"instructions": counts["instructions"], "qi_iotlb_inv_psi": max(inv - batch, 0.0),
            "pin_batch_flush": batch, "iommu_map_type": counts.get("iommu_map_type", 0.0),
            "hypercalls": counts.get("hypercalls", 0.0), "ptwr_emulations": counts.get("ptwr_emulations", 0.0)}


def estimate(comp, values):
    t = comp["instructions"] / values["instr_per_us"]
    for const, key in TERMS:
        t += comp[key] * values[const]
    return t


def corners(constants):
    names = sorted(constants)
    for choice in itertools.product((0, 1), repeat=len(names)):
        yield {n: constants[n]["high" if c else "low"] for n, c in zip(names, choice)}


def point(constants):
    return {n: c["value"] for n, c in constants.items()}


def model(designs, constants, baseline="stock strict"):
    """DESIGNS: {row name: {op: per-op counts with 'instructions'}} -> rows of estimates."""
    if baseline not in designs:
        raise ValueError("no '%s' row to compare with" % baseline)
    rows = []
    for name, per_op in designs.items():
        for op in OPS:
            if op not in per_op or op not in designs[baseline]:
                continue
            comp, base = components(per_op[op]), components(designs[baseline][op])
            est = [estimate(comp, v) for v in corners(constants)]
            save = [1 - estimate(comp, v) / estimate(base, v) for v in corners(constants)]
            p = point(constants)
            rows.append({"design": name, "op": op, "estimate_us": round(estimate(comp, p), 1),
                         "estimate_low_us": round(min(est), 1), "estimate_high_us": round(max(est), 1),
                         "saving_vs_stock_strict": round(1 - estimate(comp, p) / estimate(base, p), 4),
                         "saving_low": round(min(save), 4), "saving_high": round(max(save), 4),
                         "cpu_us": round(comp["instructions"] / p["instr_per_us"], 1),
                         "invalidation_us": round(comp["qi_iotlb_inv_psi"] * p["t_inv"]
                                                  + comp["pin_batch_flush"] * p["t_inv_domain"], 1)})
    return rows


def sensitivity(designs, constants, design, op, baseline="stock strict"):
    """How far each constant alone, from its low to its high end, moves DESIGN's saving."""
    comp, base = components(designs[design][op]), components(designs[baseline][op])
    out = {}
    for name in sorted(constants):
        s = []
        for end in ("low", "high"):
            v = dict(point(constants), **{name: constants[name][end]})
            s.append(round(1 - estimate(comp, v) / estimate(base, v), 4))
        out[name] = s
    return out


def report_text(rows, constants, published=None):
    lines = ["constants (point value, swept range, source):"]
    for name in sorted(constants):
        c = constants[name]
        lines.append("  %-13s %10.4g  [%.4g .. %.4g] %s" % (name, c["value"], c["low"], c["high"], c["unit"]))
        lines.append("      source: %s" % c["source"])
        for op, m in sorted(c.get("calibration", {}).items()):
            lines.append("      measured here, %s: %d instructions under -icount, host %s us: %.0f/us%s" % (
                OP_NAMES[op], m["instructions"], ", ".join("%.1f" % t for t in m["host_runs_us"]),
                m["instr_per_us"], " (used)" if op == c["calibrated"] else " (cross-check)"))
    lines.append("")
    lines.append("%-14s %-16s %10s %20s %9s %18s" % ("design", "operation", "est. us", "range us", "saving",
                                                    "saving range"))
    for r in rows:
        lines.append("%-14s %-16s %10.1f %9.1f .. %7.1f %8.1f%% %7.1f%% .. %5.1f%%" % (
            r["design"], OP_NAMES[r["op"]], r["estimate_us"], r["estimate_low_us"], r["estimate_high_us"],
            100 * r["saving_vs_stock_strict"], 100 * r["saving_low"], 100 * r["saving_high"]))
    if published:
        lines.append("")
        lines.append("the paper, measured on hardware: %s below its baseline" % ", ".join(
            "%s %d%%" % (OP_NAMES[op], round(100 * published[op]["below_baseline"])) for op in OPS))
    return "\n".join(lines)


# --- a device's DMA beside the page-table churn (results/io.json) ---------------------------

IO_GBPS = (10, 40, 100, 200)
GIB_BITS = 8 * 2 ** 30
# The configurations of the line-rate table: (name, io.json boot, cache or grant mode).
IO_CONFIGS = (("stock strict", "strict", "off"), ("the cache", "strict", "on"), ("relaxed", "relaxed", "-"),
              ("caching mode", "caching-mode", "off"), ("caching mode, the cache", "caching-mode", "on"),
              ("a domU's disk, grant per request", "grants", "grant per request"))
GRANT_BASELINE = "persistent grants"


def load_io_constants(path=HARDWARE):
    with open(path) as f:
        doc = json.load(f)
    return ({k: dict(v) for k, v in doc["io_constants"].items()},
            {k: dict(doc["constants"][k]) for k in ("t_inv", "t_inv_domain")})


def _extra(r, idle):
    """A busy read's misses beyond the idle read's rate (idle: (misses, bytes) of its boot and size)."""
    m, b = idle.get((r["boot"], r["block_kb"]), (0, 0))
    return max(r["misses"] - (m * r["bytes"] / b if b else 0.0), 0.0)


def io_inputs(rows):
    """io.json's rows -> the model's inputs, from the device's counts (QEMU's trace):
    per (boot, cache) of the busy state, invalidations per process creation by kind, pooled
    over the read sizes, and the domain-wide ones per rate; per (boot, cache, block_kb) the
    idle misses per GiB; per grant mode and size, invalidations and misses per GiB; over every
    busy read with a domain-wide invalidation, the extra misses per such invalidation."""
    idle = {}
    for r in rows:
        if r["condition"] == "idle":
            m, b = idle.get((r["boot"], r["block_kb"]), (0, 0))
            idle[(r["boot"], r["block_kb"])] = (m + r["misses"], b + r["bytes"])
    busy, grants, refill = {}, {}, [0.0, 0]
    for r in rows:
        dom = r["inv_domain"] + r["inv_global"]
        if r["boot"] == "grants":
            g = grants.setdefault((r["condition"], r["block_kb"]), [0, 0, 0, 0])
            g[0] += r["inv_pages"]
            g[1] += dom
            g[2] += r["misses"]
            g[3] += r["bytes"]
        elif r["condition"] == "busy":
            b = busy.setdefault((r["boot"], r["cache"]), {"creations": 0.0, "inv_pages": 0, "inv_domain": 0,
                                                          "by_rate": {}, "blocks": set()})
            b["creations"] += r["creations"]
            b["inv_pages"] += r["inv_pages"]
            b["inv_domain"] += dom
            b["blocks"].add(r["block_kb"])
            x = b["by_rate"].setdefault(r["rate_per_min"], [0, 0.0, 0.0])
            x[0] += dom
            x[1] += r["creations"]
            x[2] += r["seconds"]
            if dom:
                refill[0] += _extra(r, idle)
                refill[1] += dom
    out = {"w_refill": refill[0] / refill[1] if refill[1] else None, "configs": {}, "domain_by_rate": {}}
    slopes = page_inv_slopes(rows)
    for (boot, cache), b in busy.items():
        out["domain_by_rate"]["%s/%s" % (boot, cache)] = [
            {"rate_per_min": rate, "inv_domain": x[0], "creations": round(x[1], 1),
             "achieved_per_min": round(60 * x[1] / x[2], 1) if x[2] else None}
            for rate, x in sorted(b["by_rate"].items())]
        for block in sorted(b["blocks"]):
            m, by = idle.get((boot, block), (0, 0))
            out["configs"]["%s/%s/%d" % (boot, cache, block)] = {
                "page_inv_per_creation": b["inv_pages"] / b["creations"] if b["creations"] else 0.0,
                "domain_inv_per_creation": b["inv_domain"] / b["creations"] if b["creations"] else 0.0,
                "idle_misses_per_gib": m * 2 ** 30 / by if by else 0.0,
                "misses_per_1000_page_inv": slopes.get((boot, block))}
    for (mode, block), (page, dom, misses, nbytes) in grants.items():
        base = grants.get((GRANT_BASELINE, block), [0, 0, 0, 0])
        gib, bgib = nbytes / 2 ** 30, base[3] / 2 ** 30
        beyond = lambda x, b: max(x / gib - (b / bgib if bgib else 0.0), 0.0)
        out["configs"]["grants/%s/%d" % (mode, block)] = {
            "page_inv_per_creation": 0.0, "domain_inv_per_creation": 0.0, "idle_misses_per_gib": 0.0,
            "inv_per_gib": (page + dom) / gib, "domain_inv_per_gib": dom / gib, "misses_per_gib": misses / gib,
            # Beyond the same reads with persistent grants: what a grant per request adds.
            "extra_page_inv_per_gib": beyond(page, base[0]), "extra_domain_inv_per_gib": beyond(dom, base[1]),
            "extra_misses_per_gib": beyond(misses, base[2]), "misses_per_1000_page_inv": None}
    return out


def page_inv_slopes(rows):
    """Per (boot, block_kb): the disk's misses per 1000 page-selective invalidations, the slope of
    a least-squares line through the busy reads that had no domain-wide or global invalidation
    (cache off and on together); None with fewer than two distinct counts."""
    pts = {}
    for r in rows:
        if r["condition"] == "busy" and not r["inv_domain"] and not r["inv_global"]:
            pts.setdefault((r["boot"], r["block_kb"]), []).append((r["inv_pages"], r["misses"]))
    out = {}
    for k, xy in pts.items():
        n = len(xy)
        mx, my = sum(x for x, _ in xy) / n, sum(y for _, y in xy) / n
        sxx = sum((x - mx) ** 2 for x, _ in xy)
        out[k] = round(1000 * sum((x - mx) * (y - my) for x, y in xy) / sxx, 3) if sxx else None
    return out


def io_loss(inp, gbps, v):
    """One configuration at GBPS with constants V: the share of the device's time spent on the walks
    the invalidations cause (each taken to hold its DMA: no overlap), and of one CPU waiting for
    them. Page-table invalidations follow process creations, so in this model their cost per
    second does not depend on the line rate; a grant per request's follow the bytes."""
    gib_per_s = gbps * 1e9 / GIB_BITS
    if "extra_misses_per_gib" in inp:
        page, dom = inp["extra_page_inv_per_gib"] * gib_per_s, inp["extra_domain_inv_per_gib"] * gib_per_s
        refills = inp["extra_misses_per_gib"] * gib_per_s  # measured: the refills are in them
    else:
        page = inp["page_inv_per_creation"] * v["creations_per_s"]
        dom = inp["domain_inv_per_creation"] * v["creations_per_s"]
        refills = dom * v["w_refill"]
    # A page-selective invalidation that drops a paging-structure-cache entry makes a later walk
    # longer, never one more: at most as many as the device walks at all.
    walks = refills + inp["idle_misses_per_gib"] * gib_per_s
    longer = min(page * v["psc_share"], walks)
    return {"device_share": (refills * v["t_walk"] + longer * v["t_psc"]) / 1e6,
            "cpu_share": (page * v["t_inv"] + dom * v["t_inv_domain"]) / 1e6, "invalidations_per_s": page + dom}


def io_model(rows, constants=None):
    """The line-rate table: per configuration, read size and line rate, the share of the device's
    time lost to the walks the invalidations cause and the share of one CPU waiting for them, at
    the point values and over every corner of the constants' ranges."""
    io_c, inv_c = constants or load_io_constants()
    io_c = {k: dict(c) for k, c in io_c.items()}
    inputs = io_inputs(rows)
    w = inputs["w_refill"]
    # The floor: dmaread keeps one request in flight; a device with more buffers loses more.
    io_c["w_refill"].update(value=round(w, 1) if w else 0.0, low=round(w, 1) if w else 0.0)
    consts = dict(io_c, **inv_c)
    out = []
    for name, boot, mode in IO_CONFIGS:
        for key in sorted((k for k in inputs["configs"] if k.startswith("%s/%s/" % (boot, mode))),
                          key=lambda k: int(k.rsplit("/", 1)[1])):
            inp, block = inputs["configs"][key], int(key.rsplit("/", 1)[1])
            for gbps in IO_GBPS:
                p = io_loss(inp, gbps, point(consts))
                swept = [io_loss(inp, gbps, c) for c in corners(consts)]
                out.append({"config": name, "block_kb": block, "gbps": gbps,
                            "invalidations_per_s": round(p["invalidations_per_s"], 2),
                            "loss": p["device_share"], "loss_low": min(x["device_share"] for x in swept),
                            "loss_high": max(x["device_share"] for x in swept), "cpu_share": p["cpu_share"],
                            "cpu_share_high": max(x["cpu_share"] for x in swept)})
    return {"rows": out, "inputs": inputs, "constants": consts, "psc_sensitivity": io_psc_sensitivity(inputs, consts)}


def io_psc_sensitivity(inputs, consts):
    """Stock strict's device loss at 200 Gbit/s, point values, the paging-structure share 0 to 1."""
    out = []
    for key, inp in sorted(inputs["configs"].items()):
        if not key.startswith("strict/off/"):
            continue
        for share in (0.0, 0.25, 0.5, 0.75, 1.0):
            x = io_loss(inp, IO_GBPS[-1], dict(point(consts), psc_share=share))
            out.append({"block_kb": int(key.rsplit("/", 1)[1]), "psc_share": share, "loss": x["device_share"]})
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    results = argv[0] if argv else "results"
    path = os.path.join(results, "designs.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print("hwmodel: cannot read %s (%s); run 'flushless reproduce --stages designs' first" % (path, e),
              file=sys.stderr)
        return 2
    constants = calibrate(load_constants(), doc["calibration"])
    with open(os.path.join(HERE, "published.json")) as f:
        published = json.load(f)["process_latency"]
    order = [r["design"] for r in doc.get("rows", []) if r["design"] in doc["per_op"]] or list(doc["per_op"])
    print(report_text(model({r: doc["per_op"][r] for r in order}, constants), constants, published))
    return 0


if __name__ == "__main__":
    sys.exit(main())
