"""The results files a report is drawn from, and what a run did not measure (the ledger's reasons)."""

import html
import os

from ..experiments import ledger, study
from ..experiments.results import read_json
from ..progress import ToolError
from ..testbed.build import REPO


PUBLISHED = os.path.join(REPO, "evaluation", "published.json")


EXPERIMENTS = ("flush_frequency", "pt_alloc_free_time", "pt_cycle_cost", "cache_size", "cache_miss", "process_latency",
               "cpu_suite", "tcp_stream", "seed_fork_vs_memory", "seed_access_latency")


def check_tools():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ToolError("the report needs matplotlib: python3 -m pip install matplotlib (or make deps)")


# Written by stages the paper did not have; the report shows them apart from the comparison.
EXTRA_EXPERIMENTS = ("designs", "pte_modes", "seed_xen", "seed_model", "io", "native_kernel")


def load(results):
    docs = load_some(results)
    if not docs:
        raise ToolError("no results in %s: run 'flushless reproduce' first" % results)
    return docs


def load_some(results):
    """The results files there are; a missing or unreadable one is left out."""
    docs = {}
    for name in EXPERIMENTS + EXTRA_EXPERIMENTS:
        doc = read_json(os.path.join(results, name + ".json"))
        if doc is not None:
            docs[name] = doc
    return docs


def missing_stages(results, docs):
    """{stage: why} for each stage whose results files are not all there, the reason taken
    from RESULTS/stages.json (ledger.py), or "not run"."""
    stages = (ledger.read(results) or {}).get("stages", {})
    out = {}
    for stage, names in study.STAGE_OUTPUTS.items():
        absent = [n for n in names if n not in docs and read_json(os.path.join(results, n + ".json")) is None]
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
            "from the first stage not done (docs/evaluation.md).</p>" % items)
