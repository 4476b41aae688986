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
# The configurations of the line-rate table: (name, io.json boot, cache).
IO_CONFIGS = (("stock strict", "strict", "off"), ("the cache", "strict", "on"), ("relaxed", "relaxed", "-"),
              ("caching mode", "caching-mode", "off"), ("caching mode, the cache", "caching-mode", "on"),
              ("a domU's disk, grant per request", "grants", "grant per request"),
              ("a domU's disk, persistent grants", "grants", "persistent grants"))


def load_io_constants(path=HARDWARE):
    with open(path) as f:
        doc = json.load(f)
    return {k: dict(v) for k, v in doc["io_constants"].items()}, {k: dict(doc["constants"][k]) for k in ("t_inv",
                                                                                                       "t_inv_domain")}


def io_inputs(rows):
    """io.json's rows -> per (boot, cache, block_kb): invalidations per process creation by kind,
    the disk's misses per GiB when idle, its extra misses per domain-wide invalidation, from the
    sums over the busy runs (the device's counts, QEMU's trace)."""
    out = {}
    idle = {}
    for r in rows:
        if r["condition"] == "idle":
            i = idle.setdefault((r["boot"], r["block_kb"]), {"misses": 0, "bytes": 0})
            i["misses"] += r["misses"]
            i["bytes"] += r["bytes"]
    for r in rows:
        if r["boot"] == "grants":
            # A domU's reads through blkback: the invalidations follow its requests, not processes.
            g = out.setdefault((r["boot"], r["condition"], r["block_kb"]), {"creations": 0.0, "inv_pages": 0,
                                                                              "inv_domain": 0, "misses": 0,
                                                                              "bytes": 0, "runs": 0, "per_gib": True})
            g["inv_pages"] += r["inv_pages"]
            g["inv_domain"] += r["inv_domain"] + r["inv_global"]
            g["misses"] += r["misses"]
            g["bytes"] += r["bytes"]
            g["runs"] += 1
            continue
        if r["condition"] != "busy":
            continue
        k = (r["boot"], r["cache"], r["block_kb"])
        o = out.setdefault(k, {"creations": 0.0, "inv_pages": 0, "inv_domain": 0, "misses": 0, "bytes": 0,
                               "runs": 0})
        o["creations"] += r["creations"]
        o["inv_pages"] += r["inv_pages"]
        o["inv_domain"] += r["inv_domain"] + r["inv_global"]
        o["misses"] += r["misses"]
        o["bytes"] += r["bytes"]
        o["runs"] += 1
    slopes = page_inv_slopes(rows)
    res = {}
    for (boot, cache, block), o in out.items():
        if o.get("per_gib"):
            gib = o["bytes"] / 2 ** 30
            res[(boot, cache, block)] = {
                "runs": o["runs"], "creations": 0.0, "page_inv_per_creation": 0.0, "domain_inv_per_creation": 0.0,
                "page_inv_per_gib": o["inv_pages"] / gib, "domain_inv_per_gib": o["inv_domain"] / gib,
                "idle_misses_per_gib": 0.0, "misses_per_gib": o["misses"] / gib,
                "extra_misses_per_domain_inv": None, "misses_per_1000_page_inv": None}
            continue
        i = idle.get((boot, block))
        idle_per_gib = i["misses"] * 2 ** 30 / i["bytes"] if i and i["bytes"] else 0.0
        extra = max(o["misses"] - idle_per_gib * o["bytes"] / 2 ** 30, 0.0)
        res[(boot, cache, block)] = {
            "runs": o["runs"], "creations": round(o["creations"], 1),
            "page_inv_per_creation": o["inv_pages"] / o["creations"] if o["creations"] else 0.0,
            "domain_inv_per_creation": o["inv_domain"] / o["creations"] if o["creations"] else 0.0,
            "idle_misses_per_gib": idle_per_gib,
            "extra_misses_per_domain_inv": extra / o["inv_domain"] if o["inv_domain"] else None,
            "misses_per_1000_page_inv": slopes.get((boot, block))}
    return res


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
    """One configuration's figures at GBPS with constants V: the share of the device's time spent
    walking after invalidations, and of one CPU waiting for them."""
    per_s, gib_per_s = v["creations_per_s"], gbps * 1e9 / GIB_BITS
    page = inp["page_inv_per_creation"] * per_s + inp.get("page_inv_per_gib", 0.0) * gib_per_s
    dom = inp["domain_inv_per_creation"] * per_s + inp.get("domain_inv_per_gib", 0.0) * gib_per_s
    # A domU's reads through blkback (per GiB figures): all their misses are the grants' own.
    walks = (dom * v["w_refill"] + page * v["psc_share"] + inp["idle_misses_per_gib"] * gib_per_s
             + inp.get("misses_per_gib", 0.0) * gib_per_s)
    base = inp["idle_misses_per_gib"] * gib_per_s
    return {"device_share": walks * v["t_walk"] / 1e6, "idle_share": base * v["t_walk"] / 1e6,
            "cpu_share": (page * v["t_inv"] + dom * v["t_inv_domain"]) / 1e6,
            "invalidations_per_s": page + dom}


def io_model(rows, constants=None):
    """The line-rate table: per configuration, I/O size and line rate, the throughput the device
    loses to the walks the invalidations cause (beyond the idle device's own misses), at the
    point values and over every corner of the ranges, and the CPU share of the flush waits."""
    io_c, inv_c = constants or load_io_constants()
    inputs = io_inputs(rows)
    measured = [x["extra_misses_per_domain_inv"] for x in inputs.values() if x["extra_misses_per_domain_inv"]]
    io_c["w_refill"]["value"] = io_c["w_refill"]["low"] = round(max(measured), 1) if measured else 0.0
    consts = dict(io_c, **inv_c)
    out = []
    for name, boot, cache in IO_CONFIGS:
        for block in sorted({k[2] for k in inputs}):
            inp = inputs.get((boot, cache, block))
            if inp is None:
                continue
            for gbps in IO_GBPS:
                p = io_loss(inp, gbps, point(consts))
                # Loss beyond the idle device's: the walks the invalidations caused.
                losses = [io_loss(inp, gbps, c) for c in corners(consts)]
                extra = [x["device_share"] - x["idle_share"] for x in losses]
                out.append({"config": name, "block_kb": block, "gbps": gbps,
                            "invalidations_per_s": round(p["invalidations_per_s"], 2),
                            "loss": p["device_share"] - p["idle_share"], "loss_low": min(extra),
                            "loss_high": max(extra), "cpu_share": p["cpu_share"],
                            "cpu_share_high": max(x["cpu_share"] for x in losses)})
    return {"rows": out, "inputs": {"%s/%s/%d" % k: v for k, v in inputs.items()}, "constants": consts,
            "psc_sensitivity": io_psc_sensitivity(inputs, consts)}


def io_psc_sensitivity(inputs, consts):
    """Stock strict's loss at the point values with the paging-structure-cache share from 0 to 1."""
    out = []
    for (boot, cache, block), inp in sorted(inputs.items()):
        if (boot, cache) != ("strict", "off"):
            continue
        for share in (0.0, 0.25, 0.5, 0.75, 1.0):
            v = dict(point(consts), psc_share=share)
            x = io_loss(inp, IO_GBPS[-1], v)
            out.append({"block_kb": block, "psc_share": share, "loss": x["device_share"] - x["idle_share"]})
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
