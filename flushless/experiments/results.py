"""Results files: every experiment writes results/NAME.json (its configuration, versions and
runs) and results/NAME.csv (its rows) through here, and the report reads them back."""

import csv
import json
import os
import subprocess

from ..progress import log
from ..testbed.build import REPO


def write_csv(path, rows):
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path + ".tmp", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in keys})
    os.replace(path + ".tmp", path)


def write_experiment(results, name, meta, rows, runs=None, summary=None):
    doc = dict(meta)
    doc.update({"experiment": name, "rows": rows})
    if summary is not None:
        doc["summary"] = summary
    if runs is not None:
        doc["runs"] = runs
    write_json(os.path.join(results, name + ".json"), doc)
    write_csv(os.path.join(results, name + ".csv"), rows)
    log("wrote %s/%s.{json,csv} (%d rows)" % (results, name, len(rows)))


def write_json(path, doc):
    # Renamed into place: a run killed while writing leaves no half file for the report.
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def git_commit():
    try:
        res = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, timeout=10)
        return res.stdout.strip() or None
    except OSError:
        return None


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def stdev(xs):
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5
