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
