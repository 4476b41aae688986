"""flushless reproduce: the paper's evaluation, run on the testbed.

Seven boots of the project-built Xen and dom0 (strict unless said):
  baseline   cache off; the busy state (churn) for G scaled minutes, sampled every minute
  pre        pool on from boot with the study's fixed policy (testbed/linux: xen_pgtable_pool_paper=1,
             the pool gives back what it holds over the tables in use); the same busy state
  adaptive   pool on from boot as the series leaves it (up to its cap, given back to the shrinker)
  dyn        cache off at boot, switched on at scaled minute 5 by dom0's study script
  relaxed    dom0-iommu=relaxed, cache off: the no-protection reference
  timing     -icount, 1 vCPU, the cache switched at run time between interleaved runs:
             process latencies, the CPU-bound suite, the seed lab's benchmarks; then a dyn busy
             state with per-level alloc/free timing on (instruction time, which repeats)
  network    an e1000e: the TCP stream to the host, interleaved
and the seed lab's benchmarks natively on the host. Each experiment writes
results/NAME.json (configuration, versions, every run) and results/NAME.csv (its rows);
flushless/report/ turns them into report/index.html.

Time scale: one paper minute is MINUTE_S seconds of testbed time holding the paper's 542
process creations (churn runs at 542 * 60 / MINUTE_S per real minute). Emulation cannot
run the paper's browser at hardware speed; counts per scaled minute are counts per 542
creations, which is what the paper's per-minute figures measure.
"""

import dataclasses
import datetime
import os
import signal
import socket
import threading
import time
import traceback

from ..progress import ToolError, log
from ..testbed import build, qemu
from ..testbed.boot import BootConfig, Testbed
from . import ledger, measure, workloads
from .busy import (CACHE_GROUPS, alloc_free_summary, cache_miss_rows, cache_size_summary,
                   paired_summary, run_group, start_profile, stop_profile)
from .results import git_commit, read_json, write_experiment, write_json

PAPER_RATE = 542  # process creations and exits per minute in the paper's busy state
# One PTE page made and freed in a live address space, against the same cycle with the page
# kept (workloads/ptcycle.c): the study's per-page alloc and free cost wherever the work lands.
# On 7.3 the profiled hooks above only queue their hypercalls while lazy MMU mode is on
# (xen_mc_issue(!is_lazy_mmu_mode_active()) in mmu_pv.c), so Xen's IOMMU work is outside them.
PTCYCLE_ARGS = ["--n", "1000", "--warmup", "100"]
PT_CYCLE_FIGURES = ("pte_alloc_ns", "pte_free_ns", "table_fault_ns", "control_fault_ns", "table_unmap_ns",
                    "control_unmap_ns")
CPU_PROGRAMS = workloads.CPU_PROGRAMS
CACHE_FROM_BOOT = ("pre", "adaptive")
LAT_WHAT = ("fork", "exec", "shell")
TIMING_ICOUNT = ("dom0 clock under QEMU -icount shift=0 (1 ns per executed instruction), 1 vCPU; baseline (cache "
                 "off) and dyn (cache switched on at run time) interleaved within one boot")
TIMING_BUSY_ICOUNT = ("dom0 clock under QEMU -icount shift=0 (1 ns per executed instruction), 1 vCPU; one dyn busy "
                      "state: the cache off, then switched on at the switch minute, timing=1 throughout")
TIMING_WALL = ("dom0 wall clock under TCG (emulation time), 2 vCPUs; baseline and dyn interleaved within one boot")
GUEST_IP, HOST_IP = "10.0.2.15", "10.0.2.2"  # QEMU user networking: 10.0.2.2 is the host


@dataclasses.dataclass
class Profile:
    name: str
    minute_s: float  # testbed seconds per scaled minute
    group_minutes: int
    switch_minute: int  # dyn: cache switched on at this scaled minute
    relaxed_minutes: int
    lat_rounds: int  # interleaved off/on rounds
    lat_n: dict
    lat_warmup: int
    cpu_reps: int
    cpu_input_kb: int
    tcp_runs: int  # per group
    tcp_seconds: int
    fork_max_kb: int
    fork_n: int
    tlb_max_kb: int
    tlb_accesses: int

    @property
    def churn_rate(self):
        return round(PAPER_RATE * 60 / self.minute_s)

    @property
    def timing_busy_minutes(self):
        """The -icount boot's dyn busy state: as many minutes on as off, and the two after
        the switch that the steady state skips."""
        return 2 * self.switch_minute + 2

    def timing_plan(self):
        """The -icount boot's runs, in order: (experiment, group, workload, argv, tags)."""
        plan = []
        for r in range(self.lat_rounds):
            for group in _interleave(r):
                for what in LAT_WHAT:
                    plan.append(("process_latency", group, "lat_proc",
                                 ["--what", what, "--n", str(self.lat_n[what]), "--warmup", str(self.lat_warmup)],
                                 {"round": r, "what": what}))
        for r in range(self.cpu_reps):
            for group in _interleave(r):
                for prog in CPU_PROGRAMS:
                    plan.append(("cpu_suite", group, "cpusuite",
                                 ["--program", prog, "--n", "1", "--input-kb", str(self.cpu_input_kb)],
                                 {"rep": r, "program": prog}))
        for r in range(self.lat_rounds):
            for group in _interleave(r):
                plan.append(("pt_cycle_cost", group, "ptcycle", PTCYCLE_ARGS, {"round": r}))
        for group in ("baseline", "dyn"):
            plan.append(("seed_fork_vs_memory", group, "pagetable_bench",
                         ["--max-kb", str(self.fork_max_kb), "--n", str(self.fork_n)], {}))
        plan.append(("seed_access_latency", "baseline", "tlb_bench",
                     ["--max-kb", str(self.tlb_max_kb), "--accesses", str(self.tlb_accesses)], {}))
        return plan

    def network_plan(self, port):
        """The network boot's runs: the TCP stream to the host's receiver on PORT, interleaved."""
        return [("tcp_stream", group, "tcpstream",
                 ["--host", HOST_IP, "--port", str(port), "--seconds", str(self.tcp_seconds)], {"run": r})
                for r in range(self.tcp_runs) for group in _interleave(r)]


def _interleave(r):
    # Alternate which group goes first, so drift within the boot falls on both.
    return ("baseline", "dyn") if r % 2 == 0 else ("dyn", "baseline")


PROFILES = {
    "quick": Profile("quick", minute_s=15, group_minutes=4, switch_minute=1, relaxed_minutes=1,
                     lat_rounds=2, lat_n={"fork": 100, "exec": 50, "shell": 20}, lat_warmup=20,
                     cpu_reps=1, cpu_input_kb=64, tcp_runs=3, tcp_seconds=1,
                     fork_max_kb=8192, fork_n=5, tlb_max_kb=8192, tlb_accesses=20000),
    "default": Profile("default", minute_s=15, group_minutes=30, switch_minute=5, relaxed_minutes=5,
                       lat_rounds=5, lat_n={"fork": 200, "exec": 100, "shell": 40}, lat_warmup=50,
                       cpu_reps=5, cpu_input_kb=256, tcp_runs=30, tcp_seconds=2,
                       fork_max_kb=131072, fork_n=10, tlb_max_kb=262144, tlb_accesses=200000),
    "full": Profile("full", minute_s=60, group_minutes=30, switch_minute=5, relaxed_minutes=30,
                    lat_rounds=10, lat_n={"fork": 1000, "exec": 500, "shell": 200}, lat_warmup=100,
                    cpu_reps=10, cpu_input_kb=512, tcp_runs=30, tcp_seconds=10,
                    fork_max_kb=131072, fork_n=20, tlb_max_kb=262144, tlb_accesses=1000000),
}

STAGES = ("groups", "timing", "network", "io", "native", "native_kernel", "designs", "pte_modes", "seed")
# What each stage does (its start line), and the results files (RESULTS/NAME.json and .csv)
# it writes: the report names a missing section by its stage.
STAGE_INTRO = {"groups": "the busy state in five boots: baseline, pre, adaptive, dyn, relaxed",
               "timing": "latencies, the CPU suite, a PTE page's cost and the seed benchmarks in one -icount boot",
               "network": "the TCP stream to the host",
               "io": "an NVMe disk's DMA beside the busy state, cache off and on: IOTLB misses and invalidations per GiB",
               "native": "the seed lab's benchmarks on the host",
               "native_kernel": "the kernels booted without Xen",
               "designs": "stock strict and relaxed, the paper's design and xen-only, side by side",
               "pte_modes": "PTE update modes on fork: late pin, early pin with hypercalls, early pin emulated",
               "seed": "seed 002 on Xen: fork and access latency in PVH domUs with hap=1 and hap=0, -icount"}
STAGE_OUTPUTS = {"groups": ("flush_frequency", "cache_size", "cache_miss"),
                 "timing": ("pt_alloc_free_time", "pt_cycle_cost", "process_latency", "cpu_suite"),
                 "network": ("tcp_stream",),
                 "io": ("io",),
                 "native": ("seed_fork_vs_memory", "seed_access_latency"),
                 "native_kernel": ("native_kernel",),
                 "designs": ("designs",),
                 "pte_modes": ("pte_modes",),
                 "seed": ("seed_xen", "seed_model")}


# --- the timing boot ----------------------------------------------------------------------

class TcpReceiver:
    """The TCP stream's receiver on the host's loopback: reads each connection to EOF."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.received = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
        return False

    def check_run(self, rec):
        """A tcpstream record: the host must have received every byte dom0 sent."""
        got = self.received[-1] if self.received else None
        rec["host_received_bytes"] = got
        if got != rec["result"]["bytes"]:
            raise ToolError("TCP stream: dom0 sent %s bytes, the host received %s" % (rec["result"]["bytes"], got))

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            n = 0
            with conn:
                conn.settimeout(120)
                try:
                    while True:
                        b = conn.recv(1 << 17)
                        if not b:
                            break
                        n += len(b)
                except OSError:
                    n = -1
                # Before the close that ends the sender's run, so the count is there when it reports.
                self.received.append(n)


def bring_up_network(tb):
    """dom0's e1000e: address, link, route to the host (QEMU user networking)."""
    tb.check("ip addr add %s/24 dev eth0 && ip link set eth0 up" % GUEST_IP, timeout=60)
    tb.check("i=0; while [ \"$(cat /sys/class/net/eth0/carrier 2>/dev/null)\" != 1 ]; do "
             "i=$((i+1)); [ $i -gt 300 ] && exit 1; usleep 100000; done", timeout=60)


def run_plan(session, plan, progress, check=None):
    """Runs of baseline (cache off) and dyn (switched on) within one boot; {experiment: [records]}.
    check(record), when given, vets each run's record (raises ToolError)."""
    out = {}
    current = None
    for i, (exp, group, name, argv, tags) in enumerate(plan):
        want = 1 if group == "dyn" else 0
        if want != current:
            session.configure_pool(measure.cache_settings(want))
            current = want
        progress("%d/%d: %s (%s) %s" % (i + 1, len(plan), exp, group, " ".join(argv)))
        rec = session.run(name, argv)
        rec.update({"group": group, "cache": "on" if want else "off"}, **tags)
        if check:
            check(rec)
        out.setdefault(exp, []).append(rec)
    return out


def run_native(profile):
    """The seed lab's benchmarks on the host, natively: {experiment: record}."""
    plan = [("pagetable_bench", ["--max-kb", str(profile.fork_max_kb), "--n", str(profile.fork_n)]),
            ("tlb_bench", ["--max-kb", str(profile.tlb_max_kb), "--accesses", str(profile.tlb_accesses)])]
    fork, tlb = workloads.run_native(plan)
    return {"seed_fork_vs_memory": dict(fork, group="native"), "seed_access_latency": dict(tlb, group="native")}


class Study:
    """The stages in order, each recorded in RESULTS/stages.json (ledger.py): a rerun keeps
    the stages done with the same settings and build, and goes on from the first one not done
    (docs/evaluation.md)."""

    def __init__(self, profile, results, stages=STAGES, console_dir=None, restart=False):
        self.profile = profile
        self.results = results
        self.stages = stages
        self.restart = restart
        self.console_dir = console_dir or os.path.join(results, "console")
        self.t0 = time.monotonic()
        self.boots = {}
        self.parts = None
        self.ledger = None
        self._sources = None
        self._seed = {}  # the seed benchmarks' testbed rows, written with the native ones
        self._seed_meta = None

    def progress(self, msg):
        log("[reproduce %s] %s" % (_mmss(time.monotonic() - self.t0), msg))

    def boot_config(self, parts, mode="strict", dom0_args=(), smp=2, icount=False, net=False):
        return BootConfig(xen=parts.xen.path("xen"), kernel=parts.kernel.path("vmlinuz"),
                          initramfs=parts.initramfs.path("initramfs.cpio.gz"), mode=mode,
                          dom0_args=tuple(dom0_args), smp=smp, icount=icount, net=net)

    def boot(self, name, cfg):
        """A Testbed to use with 'with' (which boots it); the boot is recorded by booted()."""
        os.makedirs(self.console_dir, exist_ok=True)
        return Testbed(cfg, os.path.join(self.console_dir, name + ".log"))

    def booted(self, name, tb):
        cfg = tb.cfg
        self.boots[name] = {"mode": cfg.mode, "xen_cmdline": cfg.xen_cmdline(), "dom0_cmdline": cfg.dom0_cmdline(),
                            "qemu_argv": cfg.qemu_argv(), "boot_seconds": round(tb.boot_seconds, 1),
                            "boot_attempts": tb.boot_attempts, "kernel_release": tb.release}

    def meta(self, parts, **extra):
        p = self.profile
        m = {"profile": p.name, "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "flushless_commit": git_commit(), "versions": qemu.versions(parts), "boots": self.boots,
             "time_scale": {"minute_s": p.minute_s, "paper_rate_per_min": PAPER_RATE,
                            "churn_rate_per_real_min": p.churn_rate,
                            "meaning": "one scaled minute = %g s of testbed time holding the paper's %d process "
                                       "creations" % (p.minute_s, PAPER_RATE)},
             "profile_settings": dataclasses.asdict(p)}
        m.update(extra)
        return m

    # --- the run and its ledger ----------------------------------------------------------

    def run(self):
        """Every stage not already done; None when all are, else the failed stage's ledger
        entry. The run stops at the first failure: a broken testbed mostly breaks the next boot
        too, and the report can be drawn at once from what exists."""
        os.makedirs(self.results, exist_ok=True)
        # The series with the testbed's patches, inert unless switched: the pre group's fixed
        # policy (xen_pgtable_pool_paper=) is one of them.
        self.parts = build.Parts("built", linux_series=build.testbed_linux_series()).ensure()
        self.ledger = ledger.Ledger(self.results, self.progress)
        todo = [s for s in STAGES if s in self.stages]
        if self.restart:
            for name in todo:
                self.ledger.restart(name, STAGE_OUTPUTS[name])
        with ledger.sigterm_interrupts():
            for i, name in enumerate(todo):
                if not self.ledger.prepare(name, self.depends(name), STAGE_OUTPUTS[name]):
                    self.boots.update(self.ledger.entry(name).get("boots", {}))
                    continue
                failure = self.run_recorded(name, "%d/%d" % (i + 1, len(todo)))
                if failure:
                    return failure
        self.progress("done in %s" % _mmss(time.monotonic() - self.t0))
        return None

    def depends(self, name):
        """What stage NAME's results depend on, digested into its fingerprint: the profile, the
        keys of the built parts (Xen, dom0 kernel, busybox, the initramfs with the workloads)
        the other parts' inputs (patches/, testbed/, workloads/) and QEMU. Not flushless's own
        Python: a fix there, the usual reason to rerun after a failure, keeps what is done."""
        if self._sources is None:
            self._sources = ledger.sources_digest()
        # The emulator too: results from another QEMU are not the same measurement.
        q = qemu.info()
        d = {"stage": name, "profile": dataclasses.asdict(self.profile),
             "parts": ledger.parts_keys(self.parts), "sources": self._sources,
             "qemu": "%s %s" % (q["qemu_version"], q["qemu_package"])}
        if name == "native":
            # Its files hold the timing boot's rows when there are any: a native stage written
            # without them is redone once they exist.
            if not self._seed:
                self.load_timing_handoff()
            d["with_testbed_rows"] = bool(self._seed)
        return d

    def fingerprint(self, name):
        return ledger.fingerprint(self.depends(name))

    def run_recorded(self, name, position):
        """One stage, its start and end logged and recorded; None, or the failed stage's entry."""
        self.progress("stage %s %s: %s" % (position, name, STAGE_INTRO[name]))
        t0, before = time.monotonic(), dict(self.boots)
        # A testbed boot resets SIGTERM to the default when it ends (boot.py).
        signal.signal(signal.SIGTERM, ledger.on_sigterm)
        try:
            self.ledger.run(name, self.depends(name), self.stage_function(name),
                            self.console_dir)
        except KeyboardInterrupt:
            self.progress("%s: interrupted after %s; the stages done stay done for the next run"
                          % (name, _mmss(time.monotonic() - t0)))
            raise
        except Exception as e:
            if not isinstance(e, ToolError):
                log(traceback.format_exc().rstrip())
            entry = self.ledger.entry(name)
            self.progress("%s: failed after %s: %s\n  console log: %s\n  stopping here: the stages after it "
                          "are not run" % (name, _mmss(time.monotonic() - t0), e,
                                            entry.get("console_log") or "none written in this stage"))
            return dict(entry, stage=name)
        self.ledger.note(name, boots={k: v for k, v in self.boots.items() if before.get(k) is not v})
        self.progress("stage %s %s: done in %s" % (position, name, _mmss(time.monotonic() - t0)))
        return None

    def stage_function(self, name):
        return {"groups": lambda: self.run_groups(self.parts),
                "timing": lambda: self.run_timing_boot(self.parts),
                "network": lambda: self.run_network_boot(self.parts),
                "io": self.run_io_stage,
                "native": lambda: self.run_native_stage(self.parts),
                "native_kernel": self.run_native_kernel_stage,
                "designs": self.run_designs_stage,
                "pte_modes": self.run_pte_modes_stage,
                "seed": self.run_seed_stage}[name]

    def partial(self, name, part):
        return os.path.join(self.results, "partial", "%s-%s.json" % (name, part))

    # --- the stages --------------------------------------------------------------------------

    def group_plan(self):
        """(group, dom0-iommu mode, dom0 arguments, switch minute, minutes) of each group."""
        p = self.profile
        off = ["xen_pgtable_pool=0"]
        return [("baseline", "strict", off, 0, p.group_minutes),
                ("pre", "strict", ["xen_pgtable_pool_paper=1"], 0, p.group_minutes),
                ("adaptive", "strict", [], 0, p.group_minutes),
                ("dyn", "strict", off, p.switch_minute, p.group_minutes),
                ("relaxed", "relaxed", off, 0, p.relaxed_minutes)]

    def run_groups(self, parts):
        groups = self.group_plan()
        fp = self.fingerprint("groups")
        recs = []
        for i, (group, mode, dom0_args, switch, minutes) in enumerate(groups):
            rec = self.kept_group(group, fp)
            if rec:
                self.progress("group %d/%d: %s kept from %s" % (i + 1, len(groups), group,
                                                                self.partial("groups", group)))
            else:
                self.progress("group %d/%d: %s (dom0-iommu=%s%s)" % (i + 1, len(groups), group, mode,
                                                                     ", " + " ".join(dom0_args) if dom0_args else ""))
                rec = self.measure_group(parts, group, mode, dom0_args, switch, minutes)
                # Each group is a boot of minutes: kept at once, so that a death in a later one
                # costs only that one (the rerun takes the finished groups from here).
                write_json(self.partial("groups", group), {"fingerprint": fp, "rec": rec,
                                                           "boot": self.boots.get(group)})
            recs.append(rec)
            if self.ledger:
                self.ledger.note("groups", kept=[r["group"] for r in recs], of=len(groups))
        self.write_groups(parts, recs)

    def kept_group(self, group, fp):
        """GROUP's record from an earlier, unfinished run with the same fingerprint, or None."""
        doc = read_json(self.partial("groups", group))
        if not doc or doc.get("fingerprint") != fp:
            return None
        if doc.get("boot"):
            self.boots[group] = doc["boot"]
        return doc["rec"]

    def measure_group(self, parts, group, mode, dom0_args, switch, minutes):
        """One group's boot and busy state: its record."""
        with self.boot(group, self.boot_config(parts, mode, dom0_args)) as tb:
            self.booted(group, tb)
            session = measure.Session(tb)
            # In relaxed mode Xen offers no declarations: no pool at all.
            cap = int(session.pool_get("max_pages")) if mode == "strict" else 0
            if (cap > 0) != (group in CACHE_FROM_BOOT):
                raise ToolError("%s: the pool's cap is %d after boot" % (group, cap))
            rec = run_group(tb, group, self.profile, minutes, switch)
            rec.update({"mode": mode, "dom0_args": dom0_args, "pool_cap_at_start": cap})
            if rec["invariant_violations"] is None:
                raise ToolError("%s: Xen's audit was unavailable (xenpvsw audit failed)" % group)
            if rec["invariant_violations"]:
                raise ToolError("%s: Xen's audit found %d IOMMU invariant violations"
                                % (group, rec["invariant_violations"]))
            return rec

    def write_groups(self, parts, recs):
        meta = self.meta(parts, workload="churn " + " ".join(workloads.CHURN_SHAPE), timing="counts are exact")
        flush = [r for rec in recs for r in rec["flush_rows"]]
        pools = [r for rec in recs for r in rec["pool_rows"]]
        runs = [{k: v for k, v in rec.items() if k not in ("flush_rows", "pool_rows", "timing_rows")}
                for rec in recs]
        write_experiment(self.results, "flush_frequency", meta, flush, runs=runs)
        size_rows = [{k: r[k] for k in ("group", "minute", "level", "pool", "in_use")}
                     for r in pools if r["group"] in CACHE_GROUPS]
        write_experiment(self.results, "cache_size", meta, size_rows, summary=cache_size_summary(recs))
        write_experiment(self.results, "cache_miss", meta, cache_miss_rows(pools))

    def run_timing_boot(self, parts):
        # -icount: dom0's clock counts executed instructions (1 ns each), so host load does not
        # reach the figures; one vCPU, as lmbench's lat_proc and SPEC's rate-1 runs use one CPU.
        self.progress("timing boot (-icount, 1 vCPU): latencies, CPU suite, seed benchmarks, interleaved")
        with self.boot("timing", self.boot_config(parts, smp=1, icount=True)) as tb:
            self.booted("timing", tb)
            session = measure.Session(tb)
            runs = run_plan(session, self.profile.timing_plan(), lambda m: self.progress("timing " + m))
            # Per-level alloc/free time: the pool off, then switched on, in this one boot.
            session.configure_pool(measure.cache_settings(False))
            start_profile(tb)
            busy = run_group(tb, "dyn", self.profile, self.profile.timing_busy_minutes, self.profile.switch_minute)
            stop_profile(tb)
            session.configure_pool(measure.cache_settings(False))
        meta = self.meta(parts, timing=TIMING_ICOUNT)
        write_experiment(self.results, "pt_alloc_free_time",
                         dict(meta, workload="churn " + " ".join(workloads.CHURN_SHAPE), timing=TIMING_BUSY_ICOUNT),
                         busy["timing_rows"],
                         runs=[{k: v for k, v in busy.items() if k not in ("flush_rows", "pool_rows", "timing_rows")}],
                         summary=alloc_free_summary(busy["timing_rows"], self.profile.switch_minute))
        lat_rows = [{"round": r["round"], "group": r["group"], "what": r["what"], "ops": r["ops"],
                     "mean_us": r["result"]["time_us"], "median_us": r["result"]["median_us"],
                     "min_us": r["result"]["min_us"], "max_us": r["result"]["max_us"],
                     "qi_iotlb_inv_per_op": r["per_op"]["qi_iotlb_inv"]} for r in runs["process_latency"]]
        write_experiment(self.results, "process_latency", meta, lat_rows, runs=runs["process_latency"],
                         summary=paired_summary(lat_rows, "what", "mean_us"))
        cycle_rows = [dict({"round": r["round"], "group": r["group"]},
                           **{k: r["result"][k] for k in PT_CYCLE_FIGURES}) for r in runs["pt_cycle_cost"]]
        write_experiment(self.results, "pt_cycle_cost", dict(meta, workload="ptcycle " + " ".join(PTCYCLE_ARGS)),
                         cycle_rows, runs=runs["pt_cycle_cost"],
                         summary={k: paired_summary(cycle_rows, None, k)["all"] for k in PT_CYCLE_FIGURES})
        cpu_rows = [{"rep": r["rep"], "group": r["group"], "program": r["program"], "us": r["result"]["time_us"]}
                    for r in runs["cpu_suite"]]
        write_experiment(self.results, "cpu_suite", meta, cpu_rows, runs=runs["cpu_suite"],
                         summary=paired_summary(cpu_rows, "program", "us"))
        for exp in ("seed_fork_vs_memory", "seed_access_latency"):
            self._seed[exp] = [dict(row, where="testbed", group=r["group"]) for r in runs[exp] for row in r["rows"]]
        self._seed_meta = meta
        # For the native stage of a later run, should this one end before it.
        write_json(os.path.join(self.results, "partial", "handoff-timing.json"),
                   {"fingerprint": self.fingerprint("timing"), "rows": self._seed, "meta": meta})

    def run_network_boot(self, parts):
        # Not under -icount: the host's receiver and QEMU's user networking run in real time.
        # Two vCPUs: with one, interrupts and the sender share it and the runs spread 3-4 times
        # wider (8 runs of 2 s: sigma 49 against 13 Mbit/s).
        self.progress("network boot (2 vCPUs, e1000e): TCP stream to the host, interleaved")
        with TcpReceiver() as rx:
            with self.boot("network", self.boot_config(parts, smp=2, net=True)) as tb:
                self.booted("network", tb)
                bring_up_network(tb)
                runs = run_plan(measure.Session(tb), self.profile.network_plan(rx.port),
                                lambda m: self.progress("network " + m), check=rx.check_run)
        meta = self.meta(parts, timing=TIMING_WALL, network="dom0 e1000e (QEMU user networking, DMA translated by "
                                                            "the emulated VT-d) to a receiver on the host's loopback")
        tcp_rows = [{"run": r["run"], "group": r["group"], "mbps": r["result"]["mbps"], "bytes": r["result"]["bytes"],
                     "seconds": r["result"]["seconds"], "qi_iotlb_inv": r["counters"]["qi_iotlb_inv"]}
                    for r in runs["tcp_stream"]]
        write_experiment(self.results, "tcp_stream", meta, tcp_rows, runs=runs["tcp_stream"],
                         summary=paired_summary(tcp_rows, None, "mbps"))

    def run_native_stage(self, parts):
        self.progress("native: the seed lab's benchmarks on the host")
        if not self._seed:
            self.load_timing_handoff()
        native = run_native(self.profile)
        for exp in ("seed_fork_vs_memory", "seed_access_latency"):
            rows = self._seed.get(exp, []) + [dict(row, where="native", group="native") for row in native[exp]["rows"]]
            meta = self._seed_meta or self.meta(parts, timing="testbed not run in this study")
            meta = dict(meta, native={"args": native[exp]["args"], "result": native[exp]["result"],
                                      "host": os.uname().nodename, "cpus": os.cpu_count()})
            write_experiment(self.results, exp, meta, rows)

    def load_timing_handoff(self):
        """The timing boot's seed rows from an earlier run (the timing stage kept, not run now)."""
        doc = read_json(os.path.join(self.results, "partial", "handoff-timing.json"))
        if doc and doc.get("fingerprint") == self.fingerprint("timing"):
            self._seed, self._seed_meta = doc["rows"], doc["meta"]

    def run_io_stage(self):
        from . import device_io
        device_io.run_stage(self, self.profile.name)

    def run_designs_stage(self):
        from . import designs
        designs.run_stage(self, self.profile.name)

    def run_pte_modes_stage(self):
        from . import ptemodes
        ptemodes.run_stage(self, self.profile.name)

    def run_seed_stage(self):
        from . import seed
        seed.run_stage(self, self.profile.name)

    def run_native_kernel_stage(self):
        """The paper's proposed native port: the kernels booted without Xen (series.native)."""
        from . import series
        self.progress("native kernel: vanilla, the series and the series with no-op ops, no Xen, -icount")
        series.native(self.results, self.console_dir, rounds=self.profile.lat_rounds, name="native_kernel")


def _mmss(s):
    return "%d:%02d" % (s // 60, s % 60)
