"""flushless census: how often the testbed itself fails, counted per configuration and per QEMU.

Every trial is done once, never retried, and the console log of each failure kept: a boot to dom0's shell,
rounds of the race tests' load (cache switching, or off), a PVH domU created under -icount, a
PV domU with the edu device passed through. Each trial's row is appended to
RESULTS/census/census.jsonl as soon as it ends, so a census killed half-way resumes where it
stopped; `table()` draws the markdown table of docs/census.md from those rows only.
"""

import gzip
import json
import os
import re
import shutil
import time

from ..progress import ToolError, log
from ..testbed import build, qemu
from ..testbed.boot import BootConfig, Testbed, _BootStalled
from ..testbed.qemu import CPU
from . import guests
from . import results as results_files

# Trials per configuration (the census's plan) and a quick one for trying the census out.
PLAN = {"boot": 30, "race_rounds": 200, "pvh": 50, "passthrough": 20, "console_lines": 100000, "storm_s": 600,
        "fixtures": 4}
QUICK = {"boot": 2, "race_rounds": 10, "pvh": 2, "passthrough": 2, "console_lines": 5000, "storm_s": 60,
         "fixtures": 1}
SECTIONS = ("xsave", "boot", "race", "console", "storm", "pvh", "passthrough", "fixtures")
XSAVE_CONFIG = "emulator: #NM for XSAVE, XSAVEOPT, XRSTOR under CR0.TS"
# Programs exec'd and forked on every vCPU of Debian's kernel: user-space deaths by Xen build
# (ours against Debian's own build of the same source, or none: the kernel booted natively),
# TCG threading, dom0's vCPUs and Xen's FPU switching: (xen, TCG threads, vCPUs, dom0-iommu
# mode, FPU). With lazy switching processes die (docs/qemu-xsave-ts.md): the testbed boots Xen
# eager, and the lazy rows show the cause. STORM_LOOPS loops run whatever the vCPUs. Single-
# threaded TCG only: it runs 5-6 times the loops of multi-threaded TCG on this host, and the
# race load rows are our Xen under multi-threaded TCG.
STORMS = (("ours", "single", 4, "strict", "eager"), ("debian", "single", 4, "strict", "eager"),
          ("none", "single", 4, None, None), ("debian", "single", 4, "strict", "lazy"),
          ("debian", "single", 1, "strict", "eager"), ("debian", "single", 1, "strict", "lazy"))
# Rows booted with Xen's lazy FPU switching are named so; rows from before the testbed chose
# eager switching recorded no xen_fpu and were lazy (Xen's default on TCG's AMD CPU model).
LAZY = ", Xen lazy FPU"
STORM_LOOPS = 4
STORM_S_PER_BOOT = 120
CONSOLE_LINES_PER_BOOT = 20000
# Known lines printed by dom0 while the study's busy state runs: every byte the console
# changes or loses shows as a line that differs (the end marker of a reproduce run once
# arrived with one byte changed).
CONSOLE_LINE = "@@L %d ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
CONSOLE_SCRIPT = ("churn --duration 600 --rate 542 --tabs 4 --libs 2 --lib-kb 32 --heap-kb 128 --resident 16 "
                  ">/dev/null 2>&1 & c=$!; i=0; while [ $i -lt %d ]; do "
                  "echo \"@@L $i ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789\"; i=$((i+1)); "
                  "done; kill $c || echo @@NO-LOAD; wait $c 2>/dev/null; true")
# (kernel, vCPUs, -icount): multi-threaded TCG at 2 and 4 vCPUs (4 is where QEMU 7.2's stale
# int3 showed), and -icount (single-threaded TCG, as the timing boots run) at 2 and 4 (4 is
# where the silent stall in dom0's XENMEM_exchange showed).
BOOTS = (("built", 2, False), ("built", 4, False), ("debian", 4, False), ("built", 2, True), ("built", 4, True))
RACE_ROUNDS_PER_BOOT = 25
RACE_SMP = 4
PVH_PER_BOOT = 10
# A fork loop in each PVH domU (the seed stage's forkbench); 5 minutes, against about 20 s.
PVH_WORK = "forkbench --n 200 --warmup 20 >/dev/null"
PVH_WORK_S = 300
PASSTHROUGH_PER_BOOT = 5
# The race tests' broken shapes (tests/fixtures), booted as make test boots them: the debug
# variant, the load's command line, FIXTURE_ROUNDS rounds on RACE_SMP vCPUs. A boot catches
# a shape when a round leaves pages in the pools, dom0 crashes, or its logs hold a finding;
# the tests also count marked frames that are no table at the end, so these rates are lower
# bounds on theirs. patches/linux alone is the control: it must catch nothing.
FIXTURE_ROUNDS = 10
FIXTURES = (("patches/linux", (), ()),) + tuple((os.path.basename(f)[:-len(".patch")], (f,), ())
                                                for f in build.DEFAULT_RACE_FIXTURES)


class Census:
    def __init__(self, results, plan=PLAN, only=None):
        self.dir = os.path.join(results, "census")
        self.plan = plan
        self.path = os.path.join(self.dir, "census.jsonl")
        self.q = qemu.info()
        self.tag = "qemu-" + self.q["qemu_version"]
        self.logs = os.path.join(self.dir, "logs", self.tag)
        os.makedirs(self.logs, exist_ok=True)
        self.rows = load(self.path)
        # Only the configurations whose name holds this text (two single-threaded storms can
        # run at once, one per host core, each in its own census process).
        self.only = only
        self.fpu = BootConfig.xen_fpu  # the current trial's: its dom0's domU rows are added under it

    def wanted(self, config):
        return not self.only or self.only in config

    def done(self, config):
        """The trials of CONFIG on this QEMU and CPU model; an interrupted one is on record but
        not done."""
        return [r for r in self.rows if r["qemu_version"] == self.q["qemu_version"] and r["config"] == config
                and row_cpu(r) == CPU and r["outcome"] != "interrupted"]

    def add(self, config, outcome, log_path, **extra):
        # A failure's log stays, or one with findings, and the first of each configuration (each
        # row of the table links to a log); another good trial's goes (its row says what it held).
        keep_log = extra.pop("keep_log", False)
        keep = outcome != "ok" or extra.get("findings") or keep_log or not self.sample(config)
        if log_path:
            trace = log_path + ".vtd-faults"
            if os.path.exists(trace) and not os.path.getsize(trace):
                os.unlink(trace)
        row = dict(extra, qemu_version=self.q["qemu_version"], qemu_package=self.q["qemu_package"],
                   cpu=CPU, xen_fpu=self.fpu, config=config, outcome=outcome,
                   log=self.keep(log_path) if keep else _drop(log_path),
                   time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self.rows.append(row)
        with open(self.path, "a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        log("census %s %s #%d: %s %s" % (self.tag, config, len(self.done(config)), outcome, extra.get("what", "")))
        return row

    def sample(self, config):
        """A kept log of CONFIG on this QEMU (its own, or for a domU its dom0's), if any."""
        return any(r.get("log") or r.get("dom0_log") for r in self.done(config))

    def give_up_after_failures(self, config, fine=("ok",), n=3):
        """N failures in a row: the testbed is broken, not flaky; a census would never end."""
        last = [r["outcome"] for r in self.done(config)][-n:]
        if len(last) == n and not any(o in fine for o in last):
            raise ToolError("census: %s failed %d times in a row (%s); see %s" % (config, n, ", ".join(last),
                                                                                self.logs))

    def keep(self, path):
        """The console log, gzipped beside the rows; its path relative to RESULTS/census."""
        if not path or not os.path.exists(path):
            return None
        dest = path + ".gz"
        with open(path, "rb") as src, gzip.open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
        os.unlink(path)
        return os.path.relpath(dest, self.dir)

    def log_path(self, config):
        """A name no kept log uses yet (rows named before the FPU was in the name share their
        stem with today's; a trial killed hard leaves no row, and its log is overwritten)."""
        stem = os.path.join(self.logs, re.sub(r"[^A-Za-z0-9.-]", "_", config))
        n = sum(1 for r in self.rows if r["qemu_version"] == self.q["qemu_version"] and r["config"] == config)
        while os.path.exists("%s-%d.log.gz" % (stem, n)):
            n += 1
        return "%s-%d.log" % (stem, n)

    def run(self, sections=SECTIONS):
        for s in sections:
            getattr(self, "run_" + s)()

    def trial(self, config, cfg, body=None, fine=("ok",), **extra):
        """One boot of CFG and BODY(tb) -> (outcome, what, fields) on it. Its row is written
        whatever happens: a failure of ours or Ctrl-C is recorded (error, interrupted) and
        raised; QEMU is always stopped first."""
        self.fpu = None if cfg.native else cfg.xen_fpu
        if self.fpu == "lazy" and not config.endswith(LAZY):
            config += LAZY
        path = self.log_path(config)
        tb = Testbed(cfg, path)
        outcome, what, fields = "error", "", {}
        try:
            outcome, what = boot_once(tb)
            if outcome == "ok" and body:
                outcome, what, fields = body(tb)
        except ToolError as e:
            outcome, what = _failure(e)
        except KeyboardInterrupt:
            outcome, what = "interrupted", "stopped"
            raise
        except Exception as e:
            outcome, what = "error", "%s: %s" % (type(e).__name__, e)
            raise
        finally:
            tb.stop()
            fields = dict(extra, **fields)
            if outcome in ("ok", "death"):
                fields.setdefault("findings", scan(path))
            self.add(config, outcome, path, what=what, **fields)
        self.give_up_after_failures(config, fine)
        return outcome

    # -- the emulator itself: the instructions Xen's lazy FPU switching relies on --
    def run_xsave(self):
        if self.done(XSAVE_CONFIG) or not self.wanted(XSAVE_CONFIG):
            return
        self.fpu = None
        res = qemu.xsave_ts()
        missing = sorted(k for k in ("xsave", "xsaveopt", "xrstor") if k in res and not res[k])
        self.add(XSAVE_CONFIG, "no #NM" if missing else "ok", None, result=res,
                 what=("no #NM for %s" % ", ".join(missing)) if missing else "")

    # -- boots to dom0's shell, none retried --
    def run_boot(self):
        for kernel, smp, icount in BOOTS:
            config = "boot %s %d vCPUs%s" % (kernel, smp, " -icount" if icount else "")
            if not self.wanted(config):
                continue
            parts = build.Parts(kernel).ensure()
            while len(self.done(config)) < self.plan["boot"]:
                self.trial(config, _cfg(parts, smp=smp, icount=icount, boot_timeout=120 * (1 + icount)),
                           kernel=kernel, smp=smp, icount=icount)

    # -- the race tests' load, cache switching and cache off --
    def run_race(self):
        from . import raceload
        parts = build.Parts("built", linux_series=build.testbed_linux_series()).ensure()
        rounds = min(RACE_ROUNDS_PER_BOOT, self.plan["race_rounds"])

        def body(switch):
            def run(tb):
                res = raceload.run(tb, RACE_SMP, rounds, switch=switch)
                died = sum(res["deaths_by_signal"].values())
                fields = {"rounds": res["rounds_read"], "deaths": res["deaths_by_signal"],
                          "load_failures": res["load_failures"], "death_lines": res["death_lines"]}
                # A round may go unread only because its own commands died.
                if res["rounds_read"] < rounds - died:
                    return "error", "%d of %d rounds read; %s" % (res["rounds_read"], rounds, res["summary"]), fields
                return ("death" if died or res["load_failures"] else "ok"), res["summary"], fields
            return run

        for cache in ("on", "off"):
            config = "race load cache %s" % cache
            if not self.wanted(config):
                continue
            while sum(r.get("rounds", 0) for r in self.done(config)) < self.plan["race_rounds"]:
                self.trial(config, _cfg(parts, smp=RACE_SMP, dom0_args=raceload.DOM0_ARGS), body(cache == "on"),
                           fine=("ok", "death"), rounds=0)

    # -- the console under load: do known lines arrive as they were printed? With Xen's lazy
    # FPU switching too: the shell that prints them is a user process like any other. --
    def run_console(self):
        parts = build.Parts("built").ensure()
        n = min(CONSOLE_LINES_PER_BOOT, self.plan["console_lines"])

        def body(tb):
            status, lines = tb.run(CONSOLE_SCRIPT % n, timeout=60 + n // 20)
            fields = console_check(lines, n)
            if any(line.strip() == "@@NO-LOAD" for line in lines):
                return "error", "churn was not running at the end: not under load", fields
            bad = fields["bad_count"] or fields["lost"] or status
            return ("corrupt" if bad else "ok"), "%d lines, %d differ, %d lost, status %d" % (
                n, fields["bad_count"], fields["lost"], status), fields

        for fpu in ("eager", "lazy"):
            config = "console lines under load" + (LAZY if fpu == "lazy" else "")
            if not self.wanted(config):
                continue
            while sum(r.get("lines", 0) for r in self.done(config)) < self.plan["console_lines"]:
                self.trial(config, _cfg(parts, smp=2, xen_fpu=fpu), body, fine=("ok", "corrupt"), lines=0)

    # -- an exec storm on Debian's kernel: which Xen, TCG threading, FPU switching kills processes? --
    def run_storm(self):
        from . import raceload
        parts = build.Parts("debian").ensure()
        debian_xen = build.DebianXen()
        debian_xen.ensure()
        xens = {"ours": parts.xen.path("xen"), "debian": debian_xen.path("xen")}
        secs = min(STORM_S_PER_BOOT, self.plan["storm_s"])

        def body(tb):
            res = raceload.storm(tb, STORM_LOOPS, secs)
            fields = {"seconds": secs, "deaths": res["deaths_by_signal"], "load_failures": res["load_failures"],
                      "death_lines": res["death_lines"], "loops": res["loops"]}
            if len(res["loops"]) != STORM_LOOPS or not min(res["loops"]):
                return "error", "the loops did not run: %s" % res["summary"], fields
            return ("death" if res["deaths_by_signal"] or res["load_failures"] else "ok"), res["summary"], fields

        for xen, thread, smp, mode, fpu in STORMS:
            config = storm_config(xen, thread, smp, mode, fpu)
            if not self.wanted(config):
                continue
            while sum(r.get("seconds", 0) for r in self.done(config)) < self.plan["storm_s"]:
                cfg = _cfg(parts, smp=smp, tcg_thread=thread, dom0_args=("print-fatal-signals=1",),
                           native=xen == "none", mode=mode or "strict", xen_fpu=fpu or "eager")
                if xen != "none":
                    cfg.xen = xens[xen]
                self.trial(config, cfg, body, fine=("ok", "death"), xen=xen, tcg_thread=thread, smp=smp,
                           mode=mode, seconds=0)

    def domus(self, kinds, per_boot, check=None):
        """A body creating domUs of KINDS in turn on one dom0 until each has its trials, or
        one fails other than by a missing resource0 (dom0 is then booted afresh)."""
        def run(tb):
            failed, made, keep = False, 0, False
            for _ in range(per_boot):
                todo = [k for k in kinds if len(self.done(kinds[k])) < self.plan[_plan_key(k)]]
                for kind in todo:
                    outcome, what, secs = create_once(tb, kind, check)
                    made += 1
                    fine = outcome in ("ok", "missing")
                    failed = failed or not fine
                    # dom0's log holds the domU's boot: kept for every outcome but ok (a missing
                    # resource0 too, though dom0 goes on) and for the first of a kind.
                    keep = keep or outcome != "ok" or not self.sample(kinds[kind])
                    extra = {"dom0_log": os.path.relpath(tb.console_log + ".gz", self.dir)} if keep else {}
                    self.add(kinds[kind], outcome, None, what=what, seconds=secs, **extra)
                    if not fine:
                        return "ok", "dom0 of %d domUs, the last failed" % made, {"keep_log": True}
                if not todo:
                    break
            return "ok", "dom0 of %d domUs" % made, {"keep_log": keep}
        return run

    # -- PVH domUs created under -icount, hap=1 and hap=0 --
    def run_pvh(self):
        parts = build.Parts("built", guest=True).ensure()
        kinds = {k: c for k, c in (("pvh-hap", "pvh pvh-hap -icount"), ("pvh-shadow", "pvh pvh-shadow -icount"))
                 if self.wanted(c)}
        while any(len(self.done(c)) < self.plan["pvh"] for c in kinds.values()):
            cfg = _cfg(parts, guest=True, mode="relaxed", icount=True, boot_timeout=2 * BootConfig.boot_timeout)
            self.trial("pvh dom0", cfg, self.domus(kinds, PVH_PER_BOOT))

    # -- the race tests' broken shapes: how often 10 rounds catch each --
    def run_fixtures(self):
        from . import raceload
        for name, broken, args in FIXTURES:
            config = fixture_config(name)
            if not self.wanted(config):
                continue
            series = build.testbed_linux_series(tuple(os.path.join(build.REPO, "tests", "fixtures", p) for p in broken))
            parts = build.Parts("built", linux_series=series, debug=True).ensure()
            while len(self.done(config)) < self.plan["fixtures"]:
                # The control must catch nothing: three in a row that do stop the census.
                fine = ("ok",) if not broken else ("ok", "caught", "crash")
                self.trial(config, _cfg(parts, smp=RACE_SMP, dom0_args=raceload.DOM0_ARGS + args), fixture_trial,
                           fine=fine, rounds=0)

    # -- PV domU with edu passed through: is the BAR's resource0 there? --
    def run_passthrough(self):
        parts = build.Parts("built", guest=True).ensure()
        config = "pv-passthrough resource0"
        kinds = {"pv-passthrough": config}
        while self.wanted(config) and len(self.done(config)) < self.plan["passthrough"]:
            self.trial("passthrough dom0", _cfg(parts, guest=True, mode="relaxed"),
                       self.domus(kinds, PASSTHROUGH_PER_BOOT, check=RESOURCE0))


def fixture_config(name):
    return "broken shape %s, %d rounds" % (name, FIXTURE_ROUNDS)


def fixture_trial(tb):
    """One boot of the race load against a shape: (caught | ok, what, fields)."""
    from . import raceload
    res = raceload.run(tb, RACE_SMP, FIXTURE_ROUNDS)
    found = tb.take_findings()
    fields = {"rounds": res["rounds_read"], "rounds_left_pages": res["rounds_left_pages"],
              "deaths": res["deaths_by_signal"], "load_failures": res["load_failures"], "findings": found[:10]}
    # What the tests take as caught (tests/test_pool_safety.py, caught()); a load failure or
    # an unread round is recorded, not counted.
    caught = res["rounds_left_pages"] or found
    return ("caught" if caught else "ok"), "%d of %d rounds left pages, %d findings; %s" % (
        res["rounds_left_pages"], FIXTURE_ROUNDS, len(found), res["summary"]), fields


def storm_config(xen, thread, smp, mode, fpu):
    """A storm's row name; the first rows (4 vCPUs, strict) were named before the others."""
    what = "no Xen" if xen == "none" else "%s Xen" % xen
    if smp != 4:
        what += ", dom0 %d vCPU%s" % (smp, "s" if smp > 1 else "")
    if mode == "relaxed":
        what += ", dom0-iommu=relaxed"
    return "exec storm Debian kernel, %s, TCG %s%s" % (what, thread, LAZY if fpu == "lazy" else "")


def _plan_key(kind):
    return "passthrough" if kind == "pv-passthrough" else "pvh"


# What the domU's pcifront shows of edu: its BAR as a sysfs file, or not.
RESOURCE0 = "for d in /sys/bus/pci/devices/*; do grep -qi 0x11e8 $d/device && ls $d/resource0; done"


def console_check(lines, n):
    """Lines that differ from what was printed, and how many never arrived."""
    seen, bad = set(), []
    for line in lines:
        m = re.search(r"@@L (\d+) ", line)
        if m:
            seen.add(int(m.group(1)))
        if not (m and line == CONSOLE_LINE % int(m.group(1))) and line.strip() and line.strip() != "@@NO-LOAD":
            bad.append(line[:200])
    return {"lines": n, "bad_lines": bad[:20], "bad_count": len(bad), "lost": len(set(range(n)) - seen)}


def _drop(path):
    if path and os.path.exists(path):
        os.unlink(path)


def _cfg(parts, guest=False, **kw):
    return BootConfig(xen=parts.xen.path("xen"), kernel=parts.kernel.path("vmlinuz"),
                      initramfs=parts.dom0_initramfs() if guest else parts.initramfs.path("initramfs.cpio.gz"), **kw)


def _failure(e):
    what = str(e).splitlines()[0]
    return ("crash" if re.search(r"oops|panic|crash|BUG|triple", what, re.I) else "error"), what


def boot_once(tb):
    """Boot once, no retry: ('ok' | 'stall' | 'crash' | 'error', what)."""
    try:
        tb._start_once()
        return "ok", ""
    except _BootStalled as e:
        tb.stop()
        return "stall", e.error.what
    except ToolError as e:
        tb.stop()
        return _failure(e)


def create_once(tb, kind, check=None):
    """One domU of KIND created (no retry), CHECK run in it, destroyed: (outcome, what, seconds).
    A PVH domU runs a fork loop too: a PVH domU under -icount once hung in a workload."""
    t0 = time.monotonic()
    g = guests.Guest(tb, kind, name="census")
    try:
        g.start()
    except ToolError as e:
        text = str(e)
        secs = round(time.monotonic() - t0, 1)
        if "did not reach its shell" in text:
            return "stall", text.splitlines()[0], secs
        if "exited 3" in text:
            return "crash", text.splitlines()[0], secs
        if "exited 4" in text:
            return "no device", text.splitlines()[0], secs
        return "error", text.splitlines()[0], secs
    secs = round(time.monotonic() - t0, 1)
    outcome, what = "ok", ""
    try:
        if check:
            status, lines = g.run(check, timeout=120)
            if status != 0 or not any(line.endswith("resource0") for line in lines):
                outcome, what = "missing", "no resource0: %s" % " | ".join(lines[-3:])
        if kind.startswith("pvh"):
            status, lines = g.run(PVH_WORK, timeout=PVH_WORK_S)
            if status != 0:
                outcome, what = "error", "the fork loop exited %d: %s" % (status, " | ".join(lines[-3:]))
    except ToolError as e:
        first = str(e).splitlines()[0]
        outcome, what = ("hang" if "no end of" in first else "error"), "in the domU: %s" % first
        if outcome == "hang":
            tb.xen_debug_keys()  # every CPU's registers and stack, into dom0's kept log
    finally:
        g.stop()
    return outcome, what, secs


def scan(path):
    """Kernel or Xen lines of a good boot's log that say something went wrong."""
    pat = re.compile(r"WARNING:|BUG:|Oops|Call Trace|soft lockup|rcu_sched|RCU stall|\(XEN\).*(?:FATAL|Assertion)"
                     r"|traps: |segfault at |Segmentation fault")
    try:
        with open(path, errors="replace") as f:
            return [line.strip()[:200] for line in f if pat.search(line)][:10]
    except OSError:
        return []


def load(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    # A census killed while appending leaves its last line torn.
                    log("census: %s line %d is not a row (a run killed while writing it?); skipped" % (path, n))
                    continue
                if "xen_fpu" not in row and "no Xen" not in row["config"]:
                    row["xen_fpu"] = "lazy"
                    row["config"] += LAZY
                rows.append(row)
    return rows


def user_deaths_in_log(census_dir, rel):
    """A kept log's lines that report a user-space process killed (a boot that stalled because
    its init's grep died shows here, not in the stall itself)."""
    try:
        with gzip.open(os.path.join(census_dir, rel), "rt", errors="replace") as f:
            return [line.strip()[:200] for line in f if re.search(r"traps: |segfault at ", line)]
    except OSError:
        return []


def row_cpu(row):
    # Rows from before the CPU model was recorded were booted with plain -cpu max.
    return row.get("cpu", "max")


def column(row):
    """The table's column of ROW: its QEMU, and its CPU model where not the testbed's."""
    cpu = row_cpu(row)
    return row["qemu_version"] + ("" if cpu == CPU else " (-cpu %s)" % cpu)


def summary(rows, census_dir=None):
    """{(qemu_version, config): {outcome: count, ...}} with deaths by signal and rounds. With
    CENSUS_DIR, each failure's kept log is read for user-space deaths too."""
    out = {}
    for r in rows:
        if r["outcome"] == "interrupted":
            continue
        s = out.setdefault((column(r), r["config"]), {"trials": 0, "outcomes": {}, "rounds": 0,
                                                                "deaths": {}, "logs": []})
        s["trials"] += 1
        s["outcomes"][r["outcome"]] = s["outcomes"].get(r["outcome"], 0) + 1
        s["rounds"] += r.get("rounds", 0)
        if "rounds_left_pages" in r:
            s["rounds_left_pages"] = s.get("rounds_left_pages", 0) + r["rounds_left_pages"]
        s["lines"] = s.get("lines", 0) + r.get("lines", 0)
        s["bad_lines"] = s.get("bad_lines", 0) + r.get("bad_count", len(r.get("bad_lines", [])))
        s["lost"] = s.get("lost", 0) + r.get("lost", 0)
        s["loops"] = s.get("loops", 0) + sum(r.get("loops") or [])
        s["seconds"] = s.get("seconds", 0) + r.get("seconds", 0)
        for sig, n in r.get("deaths", {}).items():
            s["deaths"][sig] = s["deaths"].get(sig, 0) + n
        if r["outcome"] == "ok" and r.get("findings"):
            s["with_findings"] = s.get("with_findings", 0) + 1
        if (r["outcome"] != "ok" or r.get("findings")) and r.get("log"):
            s["logs"].append(r["log"])
            if census_dir and r["outcome"] != "death" and user_deaths_in_log(census_dir, r["log"]):
                s["killed_in_log"] = s.get("killed_in_log", 0) + 1
        elif r["outcome"] != "ok" and r.get("dom0_log"):
            s["logs"].append(r["dom0_log"])
        elif r.get("log") or r.get("dom0_log"):
            s.setdefault("good_log", r.get("log") or r.get("dom0_log"))
    return out


def table(rows, link_prefix="../results/census/", census_dir=None):
    """The census as a markdown table: one row per configuration, both QEMUs side by side."""
    s = summary(rows, census_dir)
    if not s:
        return "No trial counted yet.\n"
    versions = sorted({v for v, _ in s}, key=lambda v: ([int(x) for x in re.findall(r"\d+", v.split(" ")[0])], v))
    configs = sorted({c for _, c in s}, key=_config_order)
    head = "| configuration | " + " | ".join("QEMU %s" % v for v in versions) + " |"
    lines = [head, "|" + "---|" * (len(versions) + 1)]
    for c in configs:
        cells = []
        for v in versions:
            x = s.get((v, c))
            cells.append(_cell(x, link_prefix) if x else "not run")
        lines.append("| %s | %s |" % (c, " | ".join(cells)))
    return "\n".join(lines) + "\n"


def _cell(x, link_prefix):
    bad = {k: n for k, n in x["outcomes"].items() if k != "ok"}
    text = "%d of %d ok" % (x["outcomes"].get("ok", 0), x["trials"])
    if x["rounds"]:
        text += ", %d rounds" % x["rounds"]
    if "rounds_left_pages" in x:
        text += " (%d left pages)" % x["rounds_left_pages"]
    if x.get("loops"):
        # A storm loop forks and execs 20 programs and forks 20 more: deaths per exec compare.
        text += ", %d s, %d loops" % (x["seconds"], x["loops"])
    if x.get("lines"):
        text += ", %d lines, %d differ, %d lost" % (x["lines"], x["bad_lines"], x["lost"])
    if x["deaths"]:
        text += ", deaths by signal: %s" % ", ".join("%s: %d" % kv for kv in sorted(x["deaths"].items()))
    elif x["rounds"] or x.get("loops"):
        text += ", 0 deaths"
    if bad:
        text += "; " + ", ".join("%s %d" % kv for kv in sorted(bad.items()))
    if x.get("with_findings"):
        text += "; %d ok with warnings or killed processes in the log" % x["with_findings"]
    if x.get("killed_in_log"):
        text += " (%d with a user-space process killed in its log)" % x["killed_in_log"]
    if x["logs"]:
        text += " (logs: " + ", ".join("[%d](%s%s)" % (i + 1, link_prefix, p)
                                        for i, p in enumerate(sorted(set(x["logs"]))[:5])) + ")"
    elif x.get("good_log"):
        text += " ([a log](%s%s))" % (link_prefix, x["good_log"])
    return text


def _config_order(c):
    for i, prefix in enumerate(("emulator", "boot ", "race ", "console ", "exec storm", "pvh ", "pv-passthrough",
                                "passthrough dom0", "broken shape patches", "broken shape")):
        if c.startswith(prefix):
            return (i, c)
    return (9, c)


def write_json(results):
    rows = load(os.path.join(results, "census", "census.jsonl"))
    doc = {"rows": len(rows), "summary": [dict(qemu_version=v, config=c, **s)
                                          for (v, c), s in sorted(summary(rows).items())]}
    results_files.write_json(os.path.join(results, "census", "census.json"), doc)
    return doc


DOC_HEAD = """# The flake census

How often the testbed itself fails, counted by `flushless census` (`make census`), on the same
host with the same plan for each QEMU. Every trial is done once and never retried; the console
log of every failure is kept in `results/census/logs/`. This page is drawn from
`results/census/census.jsonl` by `flushless census --doc`: do not edit the table by hand.

Plan per QEMU: the emulator's `#NM` for the XSAVE family (`testbed/reproducers/xsave_ts.c`);
boots to dom0's shell (multi-threaded TCG, and `-icount`, which runs single-threaded),
%(boot)d per row; the race tests' load (`flushless/experiments/raceload.py`, 4 vCPUs, `init_on_free=1`),
%(race_rounds)d rounds with the cache switching and %(race_rounds)d with it off, deaths counted
by signal from the kernel's `print-fatal-signals` report; %(console_lines)d known lines printed
by dom0 under the study's busy state, each compared byte for byte, with Xen's eager and with
its lazy FPU switching; %(storm_s)d s of an exec storm (fork and exec loops on every vCPU) on
Debian's kernel under single-threaded TCG, against our Xen and against Debian's own build of
the same Xen source, with Xen's lazy FPU switching, with one dom0 vCPU, and without Xen (rows
under multi-threaded TCG are from before the cause was found); PVH domUs created under
`-icount`, %(pvh)d of each paging mode, each running a fork loop; PV domUs with edu passed
through, %(passthrough)d, each checked for its BAR's `resource0`; the race tests' broken
shapes (`tests/fixtures`) and `patches/linux` as their control, %(fixtures)d boots of 10 rounds
each, booted as `make test` boots them (the debug variant): a boot catches a shape when a round
leaves pages in the pools, dom0 crashes or its logs hold a finding (the tests count marked
frames that are no table too, so a rate here is a lower bound on theirs). The table shows what has
been counted so far; a cell says "not run" where nothing has. Most QEMU 10 rows of 2026-11-27
were counted while other emulations shared the host's 2 cores (a `make reproduce`, the other
QEMU's census). QEMU 7.2's column was counted alone from 04:54 UTC that day, but for its first
eight boots (beside other emulations: the three stalls of the built kernel at 2 vCPUs) and the
boots from 05:01 to 05:50, beside a kernel compile at idle priority (`SCHED_IDLE`): the stalls
of Debian's kernel are from then. A census meant to compare rates runs alone.

What each kind of failure is, as far as it is located (the counts are in the table below):

- **A process killed in its start-up** (`death`, and the Debian-kernel boot that stalled: its
  init's `grep` died): a freshly exec'd static program read another process's data where its
  TLS block holds the locale pointer. The cause is QEMU's TCG, which raises no `#NM` for
  XSAVE, XSAVEOPT and XRSTOR under CR0.TS (the `emulator:` row; `docs/qemu-xsave-ts.md`), with
  Xen's lazy FPU switching. Rows named `, Xen lazy FPU` booted Xen so; every row recorded
  before the testbed chose eager switching (`spec-ctrl=eager-fpu=1`) did too. The exec-storm
  rows compare lazy with eager, and with no Xen at all.
- **`Bad icount read`**: QEMU 10 aborts at Xen's timer check under `-icount` when the CPU offers
  x2APIC (Xen then reads the APIC timer through an MSR, outside an I/O instruction). The
  testbed boots `-cpu max,x2apic=off`, as every boot was on QEMU 7.2; the column marked
  `-cpu max` holds rows booted before that.
- **`stall` in `XENMEM_exchange`**: dom0 stops 1.5 s into its boot, while setting up swiotlb,
  its vCPU runnable and both of Xen's CPUs idle (Xen's `d`, `0` and `q` keys, in the kept
  log). The serial input of those keys revived it 3 times of 4: a wake-up lost between Xen's
  idle loop and the emulated CPUs. Seen on both QEMUs, each time with other emulations or a
  compile sharing the host's 2 cores; a stall in the console rows is this one too, and so is
  one of Debian's kernel on QEMU 7.2 that stopped earlier, at 0.9 s (after `percpu:`), its
  vCPU current on a CPU Xen shows idle, revived by the same keys. The testbed boots a stalled
  boot once more, visibly (docs/testbed.md, "Boot failures").
- **A console trial that lost lines and fell silent** (`error` in the console rows): 13,000 of
  20,000 lines missing in two runs of about 6,500, then nothing more from the machine, with
  other emulations running; the trials beside it on the same QEMU carried all their lines.
  Not located.
- **`hang` in a PVH domU under `-icount`**: the domU's only vCPU spins in
  `queued_spin_lock_slowpath` on `jiffies_lock`, or in `ktime_get_update_offsets_now`, with
  interrupts off (Xen's `d` dump in the kept log); the `error` beside it is the same domU kind
  dying of `Oops: stack guard page` after Xen's callback was taken at `error_entry+0x10`.
  Located: QEMU's TCG delivers an interrupt injected by VMRUN a second time, with IF clear,
  when an `-icount` budget ends inside the guest's handler (QEMU 7.2 and 10.0.2 alike;
  `docs/qemu-svm-evtinj.md`, with its reproducer). The testbed's QEMU carries the fix; the
  rows above were counted on QEMUs without it.
- **`missing` resource0 in a PV domU with edu passed through**: pcifront lists the device, but
  not its BAR's `resource0`, so nothing in the domU can map it. QEMU 7.2 only (1 in 20 here,
  4 in 10 in an earlier count); none in 20 on QEMU 10, which the testbed runs. Not located
  further.
- **QEMU 7.2's stale int3**: its multi-threaded TCG could run a stale translation of patched
  kernel text (fixed in QEMU 8.1, deba78709ae8); the history is in `docs/history.md`.

"""


def write_doc(results, path):
    rows = load(os.path.join(results, "census", "census.jsonl"))
    prefix = os.path.relpath(os.path.join(results, "census"), os.path.dirname(os.path.abspath(path))) + "/"
    with open(path, "w") as f:
        f.write(DOC_HEAD % PLAN + table(rows, link_prefix=prefix, census_dir=os.path.join(results, "census")))
    return path


def main(results, which="testbed", sections=SECTIONS, quick=False, only=None):
    qemu.use(which)
    c = Census(results, QUICK if quick else PLAN, only)
    log("census on QEMU %s (%s): %s; rows in %s" % (c.q["qemu_version"], c.q["qemu_binary"],
                                                   ", ".join(sections), c.path))
    try:
        c.run(sections)
    finally:
        write_json(results)
    print(table(c.rows, census_dir=c.dir))
    return 0
