"""report/index.html from results/: the published numbers beside ours, then every figure.

Each verdict is a rule on counts or on times compared within one boot, written out in the
table so that a reader can check it. The figures are PNGs next to index.html.
"""

import html
import json
import os
import shutil
import subprocess
import tempfile

from ..experiments import ledger, study
from ..experiments.results import write_csv
from ..progress import ToolError
from . import claims
from .claims import comparison, published_tcp
from .figures import (fig_alloc_free, fig_cache_size, fig_flush, fig_miss, fig_paired, fig_relative, fig_seed,
                      fig_seed_xen, seed_caption)
from .inputs import (EXPERIMENTS, EXTRA_EXPERIMENTS, PUBLISHED, check_tools, load_some, missing_lines, missing_section,
                     missing_stages)
from .sections import designs_html, io_html, native_kernel_html, pte_modes_html


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
    write_csv(os.path.join(out, "comparison.csv"), table)
    rows = claims.claims(docs, pub)
    with open(os.path.join(out, "claims.json"), "w") as f:
        json.dump(rows, f, indent=1)
    write_csv(os.path.join(out, "claims.csv"), rows)
    with open(os.path.join(out, "claims.md"), "w") as f:
        f.write(claims.markdown(rows))

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
        f.write(page(docs, rows, figs, results, out, missing))
    return path


def page(docs, table, figs, results, out, missing=None):
    """index.html; TABLE: every claim (claims.claims)."""
    e = html.escape
    missing = missing or {}
    any_doc = run_doc(docs)
    ts = any_doc.get("time_scale") or {"meaning": "not recorded (no results of the testbed stages)",
                                       "churn_rate_per_real_min": "?", "minute_s": "?"}
    versions = any_doc.get("versions", {})
    paper, _ = claims.split(table)
    ok = sum(1 for r in paper if r["verdict"] == "reproduced")
    held = sum(1 for r in table if r["verdict"] == "holds")
    good = ("reproduced", "holds")
    rows = "\n".join("<tr class='%s'><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td><code>%s</code> "
                     "&rarr; %s</td></tr>" % (
                         "yes" if r["verdict"] in good else "no", e(r["claim"]), e(r["paper"]), e(r["ours"]),
                         e(r["verdict"]) if r["verdict"] in good else "<b>%s</b>" % e(r["verdict"]), e(r["rule"]),
                         e(r["command"]), e(r["file"])) for r in table)
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
tr.no td {{ background: #fff0f0; }} tr.yes td:nth-child(4) {{ color: #060; }}
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
<h2>Claims, the study's and ours ({ok} of {n} of the study's reproduced; {held} of {ours} of ours hold)</h2>
<table><tr><th>claim</th><th>the study's figure</th><th>ours</th><th>verdict</th><th>rule</th>
<th>command that checks it &rarr; the file it writes</th></tr>
{rows}
</table>
<p>Also in <a href="claims.json">claims.json</a>, <a href="claims.csv">claims.csv</a> and
<a href="claims.md">claims.md</a> (docs/claims.md is this table, written by <code>flushless report --docs</code>); the
study's rows alone in <a href="comparison.json">comparison.json</a> and <a href="comparison.csv">comparison.csv</a>.
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
           rate=ts["churn_rate_per_real_min"], ok=ok, n=len(paper), held=held, ours=len(table) - len(paper), rows=rows, files=files, figs=fig_html,
           minute_s=ts["minute_s"], boots=boot_html, versions=e(ver), native=native_kernel_html(results, missing),
           designs=designs_html(results, out, missing), pte_modes=pte_modes_html(results, out, missing),
           io=io_html(results, out, missing),
           missing=missing_section(missing),
           missing_table=missing_lines(("groups", "timing", "network"), missing),
           missing_figs=missing_lines(("groups", "timing", "network", "native", "seed"), missing))


# --- the docs written from results --------------------------------------------------------

HEADLINE_BEGIN = "<!-- headline table: written by flushless report from results/; do not edit -->"
HEADLINE_END = "<!-- end of headline table -->"
CLAIMS_DOC = os.path.join("docs", "claims.md")
CLAIMS_INTRO = """# Claims and how to check each

Written by `flushless report --docs` from the results of {run}; do not edit. The report
(report/index.html) opens with the same table.

Each row is a claim: the study's figure where it has one, ours, the verdict under the rule beside
it, the command that reruns the stage that checks it, and the results file that stage writes.
`make reproduce` runs every stage; `flushless reproduce --stages NAME` one of them, keeping the
others' results ([evaluation.md](evaluation.md)). Counts decide; times are emulation times,
compared within one boot or under -icount, as each rule says.
"""


def run_doc(docs):
    """The first results file with the run's time scale (series' native_kernel.json has none)."""
    return next((d for d in docs.values() if "time_scale" in d), {})


def run_stamp(docs):
    doc = run_doc(docs)
    return "the %s run of %s (flushless %s)" % (doc.get("profile", "?"), doc.get("generated", "?"),
                                                 doc.get("flushless_commit", "?"))


def claims_doc(rows, docs):
    paper, ours = claims.split(rows)
    cols = ("claim", "paper", "ours", "verdict", "rule", "command", "file")
    return (CLAIMS_INTRO.format(run=run_stamp(docs)) + "\n## The study's claims\n\n" + claims.markdown(paper, cols)
            + "\n## Ours, beyond the study\n\n" + claims.markdown(ours, cols))


def headline_block(rows, docs):
    return "%s\nFrom %s:\n\n%s%s" % (HEADLINE_BEGIN, run_stamp(docs), claims.markdown(
        claims.headline(rows), ("claim", "paper", "ours", "verdict")), HEADLINE_END)


def replace_headline(readme, block):
    if readme.count(HEADLINE_BEGIN) != 1 or readme.count(HEADLINE_END) != 1:
        raise ToolError("README.md needs one '%s' line and one '%s' line" % (HEADLINE_BEGIN, HEADLINE_END))
    a, b = readme.index(HEADLINE_BEGIN), readme.index(HEADLINE_END) + len(HEADLINE_END)
    return readme[:a] + block + readme[b:]


def write_docs(results, repo):
    """docs/claims.md and the README's headline table from RESULTS: a whole default run only, so
    that the docs never show a partial or shortened one."""
    docs = load_some(results)
    missing = missing_stages(results, docs)
    profiles = {d.get("profile") for d in docs.values() if "time_scale" in d}
    if missing or profiles != {"default"}:
        raise ToolError("the docs are written from a whole default run only (%s): run make reproduce"
                        % ("stages missing: %s" % ", ".join(sorted(missing)) if missing
                           else "profiles %s" % ", ".join(sorted(map(str, profiles)))))
    with open(PUBLISHED) as f:
        rows = claims.claims(docs, json.load(f))
    with open(os.path.join(repo, CLAIMS_DOC), "w") as f:
        f.write(claims_doc(rows, docs))
    readme = os.path.join(repo, "README.md")
    with open(readme) as f:
        text = replace_headline(f.read(), headline_block(rows, docs))
    with open(readme, "w") as f:
        f.write(text)
    return [os.path.join(repo, CLAIMS_DOC), readme]


SCREENSHOT = os.path.join("docs", "img", "report.png")


def screenshot(index_html, repo):
    """docs/img/report.png: the report's first screen, drawn by Debian's headless Chromium."""
    browser = shutil.which("chromium")
    if not browser:
        raise ToolError("the report's screenshot needs Debian's chromium (apt-get install chromium)")
    path = os.path.join(repo, SCREENSHOT)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="flushless-chromium-") as profile:
        # No background networking: the machine's network may be closed, and the page is local.
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--user-data-dir=" + profile, "--hide-scrollbars", "--window-size=1280,1000",
               "--screenshot=" + path, "file://" + os.path.abspath(index_html)]
        try:
            res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 text=True, timeout=120)
        except subprocess.TimeoutExpired:
            raise ToolError("chromium took over 120 s to draw %s" % index_html)
    if res.returncode != 0 or not os.path.exists(path):
        raise ToolError("chromium drew no screenshot of %s: %s" % (index_html, res.stdout.strip()[-500:]))
    return path
