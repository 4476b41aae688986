"""The workload programs (workloads/*.c): their options, and how to read their output.

Options are checked here before anything boots, so a typo costs no 30-second boot. The
programs check them again (tests/test_workloads.py keeps both lists the same).
"""

import argparse
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import tempfile

from ..progress import ToolError, log
from ..testbed.build import REPO


@dataclasses.dataclass
class Opt:
    name: str
    kind: str = "int"  # int | flag | choice | list | path | ipv4
    lo: int = 0
    hi: int = 2 ** 63
    choices: tuple = ()
    help: str = ""


@dataclasses.dataclass
class Workload:
    name: str
    help: str
    opts: list
    # Seconds one run may take on the testbed before it counts as stalled, from its args.
    # Generous: TCG runs these 10-40x slower than the host; a stall is still caught.
    timeout: object = lambda args: 1800
    # Calls measure_point() after set-up and warm-up: counters then cover timed ops only.
    sync: bool = False
    # A dom0 tool (testbed/guest/), not a workload that also runs natively.
    guest_only: bool = False
    # Figures of the result line that the run's record also holds at its top level.
    lift: tuple = ()
    # A check: exits 3 when it found what it looks for (the result line printed first).
    finds: bool = False
    # Provokes DMA faults, each checked against QEMU's trace of the device.
    dma_faults: bool = False

    def parser(self):
        p = argparse.ArgumentParser(prog="flushless run %s" % self.name, description=self.help, add_help=False,
                                    exit_on_error=False, allow_abbrev=False)
        for o in self.opts:
            flag = "--" + o.name
            if o.kind == "flag":
                p.add_argument(flag, action="store_true", help=o.help)
            else:
                p.add_argument(flag, help=o.help)
        return p

    def check_args(self, argv):
        """Validate ARGV against the options; return the argv to pass to the program."""
        try:
            ns, extra = self.parser().parse_known_args(argv)
        except argparse.ArgumentError as e:
            raise UsageError("%s: %s" % (self.name, e))
        if extra:
            raise UsageError("%s: unknown argument%s %s (options: %s)" % (
                self.name, "s" if len(extra) > 1 else "", " ".join(extra),
                " ".join("--" + o.name for o in self.opts)))
        out = []
        for o in self.opts:
            v = getattr(ns, o.name.replace("-", "_"))
            if v is None or v is False:
                continue
            if o.kind == "flag":
                out.append("--" + o.name)
                continue
            if o.kind == "int":
                if not re.fullmatch(r"\d+", v) or not o.lo <= int(v) <= o.hi:
                    raise UsageError("%s: --%s takes a whole number from %d to %d, not '%s'"
                                     % (self.name, o.name, o.lo, o.hi, v))
            elif o.kind == "choice" and v not in o.choices:
                raise UsageError("%s: --%s takes one of %s, not '%s'" % (self.name, o.name, ", ".join(o.choices), v))
            elif o.kind == "ipv4" and not re.fullmatch(r"(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}", v):
                raise UsageError("%s: --%s takes an IPv4 address, not '%s'" % (self.name, o.name, v))
            elif o.kind == "list" and not re.fullmatch(r"\d+(,\d+)*", v):
                raise UsageError("%s: --%s takes comma-separated numbers, not '%s'" % (self.name, o.name, v))
            out += ["--" + o.name, v]
        return out



def _arg(argv, name, default):
    """Value of option NAME in a checked argv, as int."""
    for i, a in enumerate(argv):
        if a == "--" + name and i + 1 < len(argv):
            return int(argv[i + 1])
    return default


class UsageError(Exception):
    pass


N = Opt("n", lo=1, hi=10000000, help="repetitions")
WARMUP = Opt("warmup", lo=0, hi=10000000, help="untimed repetitions first")
HELLO = Opt("hello", kind="path", help="program to exec")
# The busy state's process tree: 4 tabs per browser, each mapping two 32 KiB "libraries"
# and writing 128 KiB of heap, beside 16 resident processes (the rest of a desktop, so
# that the 1:1 policy sees a system's worth of page tables, not only the burst).
CHURN_SHAPE = ["--tabs", "4", "--libs", "2", "--lib-kb", "32", "--heap-kb", "128", "--resident", "16"]
CPU_PROGRAMS = ("gzip", "bzip2", "lzop", "sha256", "sort", "awk", "bc")

WORKLOADS = {w.name: w for w in [
    Workload("forkbench", "N x fork+exit, optionally exec, optionally with M MiB touched in the parent",
             [N, Opt("exec", "flag", help="child execs hello"), HELLO,
              Opt("touch-mb", lo=0, hi=4096, help="MiB the parent writes first"), WARMUP,
              Opt("procs", lo=1, hi=64, help="loops run at once")], sync=True),
    Workload("lat_proc", "lmbench lat_proc: fork+exit, fork+execve, fork+/bin/sh -c",
             [Opt("what", "choice", choices=("fork", "exec", "shell")), N, WARMUP, HELLO], sync=True),
    Workload("shloop", "a shell script in bursts on a quiet system: one sh runs hello K times, bursts GAP ms apart",
             [Opt("bursts", lo=1, hi=100000), Opt("k", lo=1, hi=10000), Opt("gap-ms", lo=0, hi=600000), HELLO,
              Opt("warmup", lo=0, hi=100000)], sync=True),
    Workload("ptfault", "T threads fault in the same fresh 2 MiB ranges at once: lost PTE-page races freed "
             "from process context", [Opt("threads", lo=1, hi=64), Opt("ranges", lo=1, hi=4096), N,
                                      Opt("dontneed", "flag", help="thread 0 empties each range (MADV_DONTNEED: "
                                          "PT_RECLAIM frees its PTE page) as the others fault in")], sync=True),
    Workload("ptcycle", "a PTE page made and freed in a live address space (map 1 MiB, write a page, unmap), "
             "against the same cycle with the PTE page kept: its alloc and free cost", [N, WARMUP], sync=True),
    Workload("pagetable_bench", "fork cost against resident memory (4 KB .. 128 MB)",
             [Opt("min-kb", lo=4, hi=16777216), Opt("max-kb", lo=4, hi=16777216), N]),
    Workload("tlb_bench", "access latency against map size (4 KB .. 256 MB), random page order",
             [Opt("min-kb", lo=4, hi=16777216), Opt("max-kb", lo=4, hi=16777216),
              Opt("accesses", lo=1, hi=10 ** 12), Opt("seed", lo=1, hi=2 ** 64 - 1)]),
    Workload("churn", "the busy state: browser-like process trees at a target process rate",
             [Opt("duration", lo=1, hi=86400), Opt("rate", lo=1, hi=100000), Opt("tabs", lo=1, hi=256),
              Opt("libs", lo=0, hi=64), Opt("lib-kb", lo=1, hi=1048576), Opt("heap-kb", lo=0, hi=4194304),
              Opt("report", lo=0, hi=86400), Opt("warmup", lo=0, hi=86400), Opt("resident", lo=0, hi=1024)],
             timeout=lambda a: 300 + 3 * (_arg(a, "duration", 60) + _arg(a, "warmup", 0)), sync=True),
    Workload("forkdirty", "fork after dirtying K PTEs in each page-table page",
             [Opt("tables", lo=1, hi=65536), Opt("ptes", lo=1, hi=512), Opt("ptes-list", "list"), N], sync=True),
    Workload("tcpstream", "TCP stream to a receiver (the host, through the emulated NIC and IOMMU)",
             [Opt("host", "ipv4"), Opt("port", lo=1, hi=65535), Opt("seconds", lo=1, hi=3600),
              Opt("chunk-kb", lo=1, hi=1024)], timeout=lambda a: 120 + 2 * _arg(a, "seconds", 3)),
    Workload("dmaread", "O_DIRECT reads of a block device into one buffer (QEMU's NVMe: DMA through the "
                        "emulated IOMMU)",
             [Opt("dev", kind="path"), Opt("mib", lo=1, hi=1048576), Opt("block-kb", lo=4, hi=4096)],
             timeout=lambda a: 120 + 2 * _arg(a, "mib", 64)),
    Workload("cpusuite", "a CPU-bound integer program (gzip, bzip2, ..., bc), timed: the SPECint stand-in",
             [Opt("program", "choice", choices=CPU_PROGRAMS), Opt("input-kb", lo=1, hi=1048576),
              Opt("n", lo=1, hi=10000)]),
    Workload("swrace", "mark, unmark, pin, unpin and give back the same frames from threads on every "
                       "vCPU; check after each round that no page table, marked or freed page is in the IOMMU",
             [Opt("seconds", lo=0, hi=86400), Opt("rounds", lo=0, hi=2 ** 40), Opt("frames", lo=1, hi=64),
              Opt("threads", lo=2, hi=16), Opt("ops", lo=1, hi=64), Opt("seed", lo=1, hi=2 ** 63)],
             timeout=lambda a: 600 + 3 * _arg(a, "seconds", 10), guest_only=True,
             lift=("rounds", "bad_states"), finds=True),
    Workload("iotlbrace", "a page marked in a batch is pinned as a page table inside the shared IOTLB "
                          "flush's window; the edu device must not read it (boot with iommu-test-flush-delay)",
             [Opt("rounds", lo=1, hi=100000), Opt("wait-ms", lo=0, hi=10000),
              Opt("one", kind="flag", help="mark the page alone: the page-selective flush")],
             timeout=lambda a: 300 + 5 * _arg(a, "rounds", 20), guest_only=True,
             lift=("rounds", "warm_ok", "pinned_in_window", "refused_in_window", "outside_window", "bad_reads",
                   "after_faulted"), finds=True, dma_faults=True),
    Workload("dmasweep", "the edu device reads every frame of dom0's RAM; QEMU's VT-d trace says which "
                         "reads it refused (run with --icount: edu's DMA waits 100 ms of virtual time)",
             [Opt("max-frames", lo=0, hi=2 ** 40)],
             timeout=lambda a: 7200, guest_only=True, dma_faults=True),
]}


def get(name):
    if name not in WORKLOADS:
        raise UsageError("unknown workload '%s' (workloads: %s)" % (name, ", ".join(sorted(WORKLOADS))))
    return WORKLOADS[name]


def parse_output(lines):
    """Parse 'result k=v ...' and 'row k=v ...' lines; return (result dict, [row dicts])."""
    result, rows = None, []
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind not in ("result", "row"):
            continue
        rec = {}
        for tok in rest.split():
            k, eq, v = tok.partition("=")
            if not eq:
                raise ValueError("bad figure '%s' in line '%s'" % (tok, line))
            rec[k] = _number(v)
        if kind == "row":
            rows.append(rec)
        else:
            result = rec
    if result is None:
        raise ValueError("no 'result' line in the workload's output")
    for key in ("ops", "time_us"):
        if key not in result:
            raise ValueError("the result line has no %s=" % key)
    return result, rows


def _number(v):
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def run_native(plan, timeout=1800):
    """Build the programs into a temporary directory and run each (name, argv) of PLAN on
    the host; return their records. A program that fails is an error."""
    out = tempfile.mkdtemp(prefix="flushless-native-")
    try:
        subprocess.run(["make", "-s", "-C", os.path.join(REPO, "workloads"), "OUT=" + out], check=True)
        recs = []
        for name, argv in plan:
            cmd = [os.path.join(out, name)] + list(argv)
            log("native: %s" % " ".join(shlex.quote(c) for c in cmd))
            try:
                res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                raise ToolError("%s did not finish within %d s" % (name, timeout))
            if res.returncode != 0:
                raise ToolError("%s exited %d: %s" % (name, res.returncode, res.stderr.strip()))
            result, rows = parse_output(res.stdout.splitlines())
            recs.append({"workload": name, "args": list(argv), "result": result, "rows": rows, "where": "native"})
        return recs
    finally:
        shutil.rmtree(out, ignore_errors=True)
