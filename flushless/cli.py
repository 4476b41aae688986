"""flushless command line: build the testbed, run workloads on it or natively."""

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import tempfile

from . import plan
from .experiments import census, designs, device_io, guests, measure, series, study, workloads
from .progress import ToolError, log
from .report import compare, document
from .testbed import build, qemu, staging
from .testbed.boot import Testbed

EPILOG = """workloads: %s
examples:
  flushless build
  flushless run forkbench --n 200 --mode strict --json
  flushless run lat_proc --what exec --caching-mode on
  flushless run forkbench --n 200 --warmup 100 --guest pv-passthrough --cache on --json
  flushless bench native
  flushless reproduce --quick""" % ", ".join(sorted(workloads.WORKLOADS))


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        raise workloads.UsageError(message)


def add_boot_options(p):
    g = p.add_argument_group("testbed")
    g.add_argument("--mode", choices=("strict", "relaxed"), default=None,
                   help="dom0-iommu mode: strict keeps dom0's memory in sync with the IOMMU (default strict; "
                        "relaxed with a --guest other than dom0, so that only the domU's IOMMU work counts)")
    g.add_argument("--caching-mode", choices=("on", "off"), default="off",
                   help="VT-d caching mode of the emulated IOMMU (default off, as real hardware)")
    g.add_argument("--kernel", choices=("debian", "built", "vanilla"), default=None,
                   help="dom0 kernel: Debian's prebuilt 7.3 (trixie-backports), linux-source-7.3 built with "
                        "patches/linux, or vanilla: the same source and config without the series "
                        "(default debian; built when --cache or --pool-cap is given)")
    g.add_argument("--smp", type=int, default=2, choices=range(1, 9), metavar="N", help="vCPUs (default 2)")
    g.add_argument("--icount", action="store_true",
                   help="QEMU -icount shift=0,sleep=off: guest time counts executed instructions (repeatable timing)")
    g.add_argument("--console-log", metavar="FILE", help="where the console goes (default: a temporary file)")
    g.add_argument("--xen-arg", action="append", default=[], metavar="ARG",
                   help="append ARG to Xen's command line, e.g. iommu-test-map-delay=500 (the testbed-only "
                        "delay of testbed/xen/, in microseconds); repeatable")
    g.add_argument("--xen-series", metavar="DIR",
                   help="build Xen with the patches in DIR instead of patches/xen (e.g. "
                        "tests/fixtures/xen-old-design: the first design, which marked pages semi-writable)")
    g.add_argument("--design", choices=tuple(designs.DESIGNS),
                   help="boot a design with the Xen, kernel and cache setting it needs: %s"
                        % "; ".join("%s: %s" % (d.name, d.what) for d in designs.DESIGNS.values()))


def make_parser():
    p = Parser(prog="flushless", description=__doc__, epilog=EPILOG,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    b = sub.add_parser("build", help="build (or report cached) every part of the testbed")
    b.add_argument("--kernel", choices=("debian", "built", "vanilla", "all"), default="all",
                   help="which dom0 kernel(s) to prepare (default all: debian and built; vanilla is built "
                        "when asked for)")
    b.add_argument("--each-patch", action="store_true",
                   help="also build Xen and the kernel at every prefix of their patch series "
                        "(each patch must build on its own)")

    r = sub.add_parser("run", help="boot the testbed, run a workload, print the IOMMU counts",
                       usage="flushless run WORKLOAD [workload options] [--mode M] [--caching-mode C] [--json]",
                       allow_abbrev=False)
    r.add_argument("workload", help="one of: " + ", ".join(sorted(workloads.WORKLOADS)))
    add_boot_options(r)
    c = r.add_argument_group("page-table pool (patches/linux; implies --kernel built)")
    c.add_argument("--cache", choices=("on", "off"),
                   help="set the pool's cap (debugfs xen_pgtable_pool/max_pages) to its default (on) or to 0 "
                        "(off) before the workload")
    c.add_argument("--pool-cap", type=int, metavar="PAGES",
                   help="set the pool's cap to PAGES before the workload (0 stops the pool)")
    r.add_argument("--guest", choices=guests.KINDS, default="dom0",
                   help="where the workload runs: dom0 (default), or a domU that dom0 creates with xl: a PV "
                        "domU with QEMU's edu device passed through (pv-passthrough), a PV domU whose disk "
                        "is dom0's NVMe through blkback (pv-disk: /dev/xvda), or a PVH domU with "
                        "hardware-assisted (pvh-hap) or shadow paging (pvh-shadow); the domU boots the same "
                        "kernel as dom0, and --cache and --pool-cap apply to it")
    r.add_argument("--aslr", choices=("on", "off"), default="off",
                   help="user address-space randomisation where the workload runs (default off, as in make "
                        "reproduce's counting stages: with it, the page tables a process needs vary from run "
                        "to run, and so do the counts)")
    r.add_argument("--json", action="store_true", help="print one JSON object instead of a table")

    s = sub.add_parser("shell", help="boot the testbed with its console on this terminal (quit: Ctrl-A x)")
    add_boot_options(s)

    n = sub.add_parser("bench", help="run workloads natively on the host")
    n.add_argument("where", choices=("native",))
    n.add_argument("workload", nargs="?", help="one workload (default: each with small settings)")
    n.add_argument("--json", action="store_true")

    e = sub.add_parser("reproduce", help="run the paper's evaluation on the testbed; write results/ and report/",
                       description="Builds what is missing, boots the testbed for each group and for the timing "
                                   "runs, writes results/*.json and *.csv and report/index.html.")
    size = e.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_const", dest="profile", const="quick",
                      help="a short smoke version (about 11 minutes warm)")
    size.add_argument("--full", action="store_const", dest="profile", const="full",
                      help="the paper's durations: 30 one-minute minutes per group (about 3 hours)")
    e.add_argument("--minute-seconds", type=float, metavar="S",
                   help="testbed seconds per scaled minute, 5..600 (default 15; --full 60); the busy state "
                        "runs the paper's 542 process creations in each")
    e.add_argument("--stages", default=",".join(study.STAGES), metavar="LIST",
                   help="comma-separated subset of %s (default all)" % ",".join(study.STAGES))
    e.add_argument("--results", default="results", metavar="DIR", help="results directory (default results)")
    e.add_argument("--report", default="report", metavar="DIR", help="report directory (default report)")
    e.add_argument("--restart", action="store_true",
                   help="start over: move the chosen stages' earlier results to RESULTS/old/TIME/ and run them "
                        "again (default: resume; stages done with the same settings and build are kept, "
                        "RESULTS/stages.json records them; docs/evaluation.md)")

    ce = sub.add_parser("census", help="count the testbed's own failures: boots, the race tests' load, PVH "
                                       "domUs under -icount, passthrough domUs; one row per trial, resumable",
                        description=census.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ce.add_argument("--qemu", choices=qemu.CHOICES, default="testbed",
                    help="the testbed's QEMU (QEMU 10 built with testbed/qemu's fixes), the host's QEMU 10 as "
                         "Debian ships it (system), or Debian 12's QEMU 7.2, for comparison")
    ce.add_argument("--sections", default=",".join(census.SECTIONS), metavar="LIST",
                    help="comma-separated subset of %s (default all)" % ",".join(census.SECTIONS))
    ce.add_argument("--quick", action="store_true", help="a few trials of each, to try the census out")
    ce.add_argument("--only", metavar="TEXT", help="only the configurations whose name contains TEXT")
    ce.add_argument("--table", action="store_true", help="print the table of the rows so far and stop")
    ce.add_argument("--doc", metavar="FILE", help="write the census page (docs/census.md) from the rows so far")
    ce.add_argument("--results", default="results", metavar="DIR", help="results directory (default results)")

    se = sub.add_parser("series", help="what the Linux series must show: off is stock, flushes per operation at "
                                       "1-8 vCPUs, scaling, other workloads, a soak",
                        description=series.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    se.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                    help="any of %s (default all)" % ", ".join(series.EXPERIMENTS))
    se.add_argument("--quick", action="store_true", help="fewer rounds, 2 vCPUs only, a 3-minute soak")
    se.add_argument("--results", default="results/series", metavar="DIR",
                    help="results directory (default results/series)")
    se.add_argument("--restart", action="store_true",
                    help="start over: move the chosen experiments' earlier results to RESULTS/old/TIME/ and run "
                         "them again (default: resume; experiments done with the same build and --quick are kept)")

    rp = sub.add_parser("report", help="write report/index.html from an existing results/ directory (what is "
                                       "missing is listed, with the reason RESULTS/stages.json gives)")
    rp.add_argument("--results", default="results", metavar="DIR")
    rp.add_argument("--report", default="report", metavar="DIR")
    rp.add_argument("--docs", action="store_true",
                    help="also write docs/claims.md, the README's headline table and docs/img/report.png from the "
                         "same results (a whole default run only; the screenshot needs Debian's chromium)")

    cp = sub.add_parser("compare", help="compare two results directories: counts and ratios must agree")
    cp.add_argument("first", metavar="RESULTS_A")
    cp.add_argument("second", metavar="RESULTS_B")
    cp.add_argument("--tolerance", type=float, default=0.05, metavar="F",
                    help="largest relative difference allowed for counts and ratios (default 0.05)")

    st = sub.add_parser("check-staging", help="apply the Xen series as posted to xen-project/xen's staging and "
                                              "build the hypervisor there, with and without CONFIG_PV",
                        description=staging.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    st.add_argument("--tree", metavar="DIR", help="a checkout of staging (copied, never changed)")
    st.add_argument("--git-dir", metavar="GITDIR", help="a git directory or mirror of xen-project/xen (with --commit)")
    st.add_argument("--commit", metavar="REV", help="the commit of --git-dir to check, e.g. staging")
    st.add_argument("--series", metavar="DIR", help="the series to check (default patches/xen; its 4.20/ "
                                                    "backports are not used)")
    st.add_argument("--out", default=staging.DEFAULT_OUT, metavar="FILE",
                    help="the JSON record (default results/staging/staging-check.json; the logs go to FILE "
                         "without .json, plus -logs/)")
    st.add_argument("--each-patch", action="store_true",
                    help="build every prefix of the series, both configs (default: the whole series only)")

    sub.add_parser("workloads", help="list the workloads and their options")
    return p


def cmd_build(args):
    kinds = ("debian", "built") if args.kernel == "all" else (args.kernel,)
    for kind in kinds:
        parts = build.Parts(kind).ensure()
        if args.kernel == "all":
            # The debug variants the safety tests boot (make test): Xen's, and the race tests'
            # kernels with the testbed's widened windows, the series and the broken shapes that
            # run by default. Built here, their progress shows; in a test it would not.
            if kind == "debian":
                build.Parts(kind, debug=True).ensure()
            if kind == "built":
                for broken in ((),) + tuple((os.path.join(build.REPO, "tests", "fixtures", f),)
                                            for f in build.DEFAULT_RACE_FIXTURES):
                    build.Parts(kind, linux_series=build.testbed_linux_series(broken), debug=True).ensure()
                # The PTE-mode tests' (release, the testbed's patches) and off is stock's
                # reference (tests/test_offstock.py).
                build.Parts(kind, linux_series=build.testbed_linux_series()).ensure()
                build.Parts("vanilla").ensure()
        for name, info in qemu.versions(parts).items():
            log("%s: %s" % (name, {k: v for k, v in info.items() if k not in ("key", "inputs")}))
    if args.each_patch:
        for kind, part_class in (("xen", build.Xen), ("linux", build.BuiltKernel)):
            series = build.patches(kind)
            for k in range(1, len(series)):
                log("%s: building with the first %d of %d patches" % (kind, k, len(series)))
                part_class(series=series[:k]).ensure()
        # Xen without PV support must build at every prefix too (the mark and the audit are PV only).
        series = build.patches("xen")
        for k in range(1, len(series) + 1):
            log("xen: building with the first %d of %d patches and CONFIG_PV=n" % (k, len(series)))
            build.Xen(series=series[:k], config=build.XEN_CONFIG_NO_PV).ensure()
        # The series without Xen PV: its pool (arch/x86/xen, XEN_PV only) compiles away.
        log("linux: building the series with CONFIG_XEN_PV=n")
        build.BuiltKernel(no_pv=True).ensure()
        log("every prefix of patches/xen (with and without CONFIG_PV) and of patches/linux builds, "
            "and patches/linux without CONFIG_XEN_PV")
    return 0


def cmd_run(args, rest):
    p = plan.resolve(args, rest)
    parts = build.Parts(p.kernel, xen_series=p.xen_series, guest=p.has_domu).ensure()
    cfg = p.boot_config(parts, args)
    console_log = args.console_log or tempfile.mkstemp(prefix="flushless-console-", suffix=".log")[1]
    with contextlib.ExitStack() as scratch:
        if p.guest == "pv-disk":
            # The domU's disk: dom0's NVMe, a sparse image that lives as long as the boot.
            d = scratch.enter_context(tempfile.TemporaryDirectory(prefix="flushless-disk-"))
            cfg = dataclasses.replace(cfg, nvme_image=device_io.sparse_image(d))
        return run_booted(args, p, parts, cfg, console_log)


def run_booted(args, p, parts, cfg, console_log):
    w = p.workload
    with Testbed(cfg, console_log) as tb, contextlib.ExitStack() as stack:
        if p.has_domu:
            guest = stack.enter_context(guests.Guest(tb, p.guest, vcpus=cfg.smp, kernel_args=cfg.dom0_args))
            session = guests.GuestSession(tb, guest)
        else:
            guest, session = None, measure.Session(tb)
        session.configure_pool(p.pool_settings)
        session.set_aslr(args.aslr == "on")
        try:
            rec, failures = session.run(w.name, list(p.workload_args)), []
        except measure.VerdictError as e:
            rec, failures = e.rec, [str(e)]
        rec.update({"aslr": args.aslr, "cache": p.cache, "pool_settings": p.pool_settings,
                    "design": p.design.name if p.design else None, "guest": p.guest})
        if guest:
            rec.update({"domid": guest.domid, "guest_vcpus": guest.vcpus, "guest_mem_mb": guest.mem_mb,
                        "guest_boot_seconds": round(guest.boot_seconds, 1)})
        rec.update({"mode": cfg.mode, "caching_mode": args.caching_mode, "kernel": p.kernel,
                    "kernel_release": tb.release, "smp": cfg.smp, "icount": cfg.icount,
                    "boot_seconds": round(tb.boot_seconds, 1), "boot_attempts": tb.boot_attempts, "console_log": console_log,
                    "xen_version": tb.xen_version, "xen_cmdline": cfg.xen_cmdline(),
                    "dom0_cmdline": cfg.dom0_cmdline(),
                    "versions": qemu.versions(parts),
                    "timing": "guest wall clock under TCG%s" % (" -icount (1 ns per instruction)" if cfg.icount else
                                                                  " (emulation time: compare within one boot)")})
        if guest:
            guest.stop()  # its kernel log is read as it goes
        rec["findings"] = tb.take_findings()
        if rec["findings"]:
            failures.append("the logs show what went wrong:\n" + "\n".join("    " + x for x in rec["findings"]))
        rec["failures"] = failures
    if args.json:
        print(json.dumps(rec, indent=2, sort_keys=True))
    else:
        print_table(rec)
    if failures:
        raise ToolError("%s failed (console log %s): %s" % (w.name, console_log, "; ".join(failures)))
    return 0


def print_table(rec):
    print("%s %s: %d ops, dom0-iommu=%s, caching mode %s, kernel %s, %d vCPUs, ASLR %s"
          % (rec["workload"], " ".join(rec["args"]), rec["ops"], rec["mode"], rec["caching_mode"],
             rec["kernel_release"], rec["smp"], rec["aslr"]))
    print("  %-24s %12s %12s" % ("counter", "total", "per op"))
    for k, v in rec["counters"].items():
        print("  %-24s %12d %12.3f" % (k, v, rec["per_op"][k]))
    print("  %-24s %12s %12.1f" % ("time_us", "", rec["per_op"]["time_us"]))
    if "invariant_violations" in rec:
        print("  %-24s %12d" % ("invariant_violations", rec["invariant_violations"]))
    pool = rec.get("pool")
    if pool:
        print("  pool (%s): %s" % ("on" if rec.get("cache") == "on" else "as booted", " ".join(
            "%s=%s" % (k, pool[k]) for k in ("hits", "misses", "marked", "unmarked", "pages", "in_use", "max_pages")
            if k in pool)))
    for row in rec["rows"]:
        print("  " + " ".join("%s=%s" % kv for kv in row.items()))


def cmd_shell(args):
    p = plan.resolve(args)
    parts = build.Parts(p.kernel, xen_series=p.xen_series).ensure()
    argv = p.boot_config(parts, args).qemu_argv()
    argv[argv.index("-serial") + 1] = "mon:stdio"
    argv.remove("-monitor")
    argv.remove("none")
    log("console on this terminal; Ctrl-A x ends QEMU, Ctrl-A three times switches input to Xen")
    os.execvp(argv[0], argv)


def cmd_bench_native(args, rest):
    if args.workload:
        w = workloads.get(args.workload)
        if w.guest_only:
            raise workloads.UsageError("%s is a dom0 tool: it runs on the testbed only" % w.name)
        plan = [(args.workload, w.check_args(rest))]
    else:
        if rest:
            raise workloads.UsageError("workload options need a workload name")
        plan = NATIVE_PLAN
    recs = workloads.run_native(plan)
    if args.json:
        print(json.dumps(recs, indent=2))
    else:
        for r in recs:
            print("%s %s: %s" % (r["workload"], " ".join(r["args"]),
                                 " ".join("%s=%s" % kv for kv in r["result"].items())))
            for row in r["rows"]:
                print("  " + " ".join("%s=%s" % kv for kv in row.items()))
    return 0


NATIVE_PLAN = [
    ("forkbench", ["--n", "2000", "--warmup", "200"]),
    ("forkbench", ["--n", "500", "--exec", "--warmup", "50"]),
    ("lat_proc", ["--what", "fork", "--n", "500"]),
    ("lat_proc", ["--what", "exec", "--n", "300"]),
    ("lat_proc", ["--what", "shell", "--n", "200"]),
    ("pagetable_bench", ["--n", "20"]),
    ("tlb_bench", []),
    ("forkdirty", ["--n", "50"]),
]


def cmd_reproduce(args):
    prof = study.PROFILES[args.profile or "default"]
    if args.minute_seconds is not None:
        if not 5 <= args.minute_seconds <= 600:
            raise workloads.UsageError("--minute-seconds takes 5 to 600, not %g" % args.minute_seconds)
        prof = dataclasses.replace(prof, minute_s=args.minute_seconds)
    stages = tuple(x for x in args.stages.split(",") if x)
    bad = [x for x in stages if x not in study.STAGES]
    if bad or not stages:
        raise workloads.UsageError("--stages takes a comma-separated subset of %s, not '%s'"
                                   % (",".join(study.STAGES), args.stages))
    document.check_tools()
    log("reproduce (%s): one scaled minute = %g s of testbed time, busy state at %d creations/min; "
        "results in %s, report in %s" % (prof.name, prof.minute_s, prof.churn_rate, args.results, args.report))
    failure = study.Study(prof, args.results, stages, restart=args.restart).run()
    try:
        log("report: %s" % document.write(args.results, args.report))
    except Exception as e:
        if not failure:
            raise
        # The stage's failure is the news; the report's own is logged beside it.
        log("report: could not be drawn: %s: %s" % (type(e).__name__, e))
    if failure:
        raise ToolError("stage %s failed: %s\n  console log: %s\n  the report lists what is missing; the same "
                        "command resumes from %s (--restart starts over)"
                        % (failure["stage"], failure.get("error"), failure.get("console_log") or "none written",
                           failure["stage"]))
    return 0


def cmd_report(args):
    document.check_tools()
    index = document.write(args.results, args.report)
    log("report: %s" % index)
    if args.docs:
        for path in document.write_docs(args.results, build.REPO) + [document.screenshot(index, build.REPO)]:
            log("wrote %s" % os.path.relpath(path, build.REPO))
    return 0


def cmd_compare(args):
    if not 0 <= args.tolerance < 1:
        raise workloads.UsageError("--tolerance takes 0 to 1, not %g" % args.tolerance)
    rows = compare.compare(args.first, args.second, args.tolerance)
    profiles = compare.profile_of(args.first), compare.profile_of(args.second)
    if profiles[0] != profiles[1]:
        log("the two runs used different profiles (%s, %s): counts will differ" % profiles)
    if not rows:
        raise ToolError("%s and %s have no figures in common" % (args.first, args.second))
    print("%-58s %-6s %12s %12s %8s" % ("figure", "kind", "A", "B", "diff"))
    for name, kind, a, b, rel, ok in rows:
        print("%-58s %-6s %12.4g %12.4g %7.2f%% %s" % (name, kind, a, b, 100 * rel, "" if ok else "DIFFERS"))
    bad = [r for r in rows if not r[5]]
    print("%d of %d counts and ratios within %g %% (noisy timing rows are shown, not judged)"
          % (sum(1 for r in rows if r[1] != "noisy") - len(bad), sum(1 for r in rows if r[1] != "noisy"),
             100 * args.tolerance))
    return 1 if bad else 0


def cmd_workloads():
    for name in sorted(workloads.WORKLOADS):
        w = workloads.WORKLOADS[name]
        print("%-16s %s" % (name, w.help))
        print("%-16s %s" % ("", " ".join("--" + o.name + ("" if o.kind == "flag" else " " + o.kind.upper())
                                         for o in w.opts)))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = make_parser()
    try:
        args, rest = p.parse_known_args(argv)
        if rest and args.cmd not in ("run", "bench"):
            raise workloads.UsageError("unrecognized arguments: %s" % " ".join(rest))
        if args.cmd == "build":
            return cmd_build(args)
        if args.cmd == "run":
            return cmd_run(args, rest)
        if args.cmd == "shell":
            return cmd_shell(args)
        if args.cmd == "bench":
            return cmd_bench_native(args, rest)
        if args.cmd == "reproduce":
            return cmd_reproduce(args)
        if args.cmd == "series":
            for name in args.experiments:
                if name not in series.EXPERIMENTS:
                    raise workloads.UsageError("unknown experiment '%s' (%s)" % (name, ", ".join(series.EXPERIMENTS)))
            series.run(args.experiments or series.EXPERIMENTS, args.results,
                       os.path.join(args.results, "console"), quick=args.quick, restart=args.restart)
            return 0
        if args.cmd == "census":
            if args.doc:
                log("census: %s" % census.write_doc(args.results, args.doc))
                return 0
            if args.table:
                d = os.path.join(args.results, "census")
                print(census.table(census.load(os.path.join(d, "census.jsonl")), census_dir=d), end="")
                return 0
            sections = tuple(x for x in args.sections.split(",") if x)
            if not sections or set(sections) - set(census.SECTIONS):
                raise workloads.UsageError("--sections takes a comma-separated subset of %s, not '%s'"
                                           % (",".join(census.SECTIONS), args.sections))
            return census.main(args.results, args.qemu, sections, quick=args.quick, only=args.only)
        if args.cmd == "report":
            return cmd_report(args)
        if args.cmd == "compare":
            return cmd_compare(args)
        if args.cmd == "check-staging":
            if (args.tree is None) == (args.git_dir is None) or (args.git_dir is None) != (args.commit is None):
                raise workloads.UsageError("check-staging takes --tree DIR, or --git-dir GITDIR with --commit REV")
            src = staging.staging_source(args.tree, args.git_dir, args.commit)
            if args.series and not os.path.isdir(args.series):
                raise ToolError("--series %s: no such directory" % args.series)
            staging.check(src, args.series, args.out, each_patch=args.each_patch)
            return 0
        return cmd_workloads()
    except workloads.UsageError as e:
        sys.stderr.write("flushless: %s\n" % e)
        return 2
    except ToolError as e:
        sys.stderr.write("flushless: error: %s\n" % e)
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("flushless: interrupted; QEMU stopped\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
