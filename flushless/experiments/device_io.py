"""Do the IOMMU flushes of page-table churn hurt a device's DMA, and does the cache help?

The study's open question. An NVMe disk (QEMU's, a sparse raw image) sits behind the emulated
VT-d, and QEMU traces its IOTLB (boot.IOTLB_EVENTS): every translation of the disk's DMA
(data and queues) as a hit or a miss, every refused DMA, every reset of a full IOTLB, and every
invalidation Xen sends, by kind. dom0 reads the disk with dmaread (O_DIRECT into one buffer:
without invalidations its translations stay cached) while churn, the study's busy state, runs
beside it at several rates, with the cache off and on, interleaved in one boot. Idle is the
same read with nothing beside it. Caching mode (a virtualised IOMMU, where maps into empty
entries are flushed too) and relaxed mode are boots of their own; in a fourth, a PV domU reads
the same disk through dom0's blkback, with persistent grants and with a grant per request, the
other flush source. Counts are taken over the disk's DMA, its first translation to its last;
Xen's counters (its queued IOTLB invalidations, superpage coalesces and shatters) enclose that.
Everything per GiB read.
"""

import dataclasses
import gzip
import os
import re
import shutil
import statistics
import tempfile

from ..progress import ToolError
from ..testbed import build
from ..testbed.boot import NVME_SLOT
from . import measure
from .workloads import CHURN_SHAPE

# The disk's requester ID on the emulated VT-d: bus 0, device NVME_SLOT, function 0.
NVME_SID = NVME_SLOT << 3
NVME_DEV = "/dev/nvme0n1"
IMAGE_MIB = 256
GIB = 1 << 30
CHURN_PID, CHURN_OUT = "/tmp/io-churn.pid", "/tmp/io-churn.out"
COUNTS = ("translations", "hits", "misses", "faults", "resets", "inv_pages", "inv_pages_4k", "inv_domain",
          "inv_global")
XEN_COUNTS = ("qi_iotlb_inv", "iommu_pt_coalesces", "iommu_pt_shatters", "iommu_unmap_type", "iommu_map_type")
_EVENT = re.compile(r"\b(vtd_iotlb_page_hit|vtd_iotlb_page_update|vtd_dmar_fault|vtd_iotlb_reset|"
                    r"vtd_inv_desc_iotlb_pages|vtd_inv_desc_iotlb_domain|vtd_inv_desc_iotlb_global)\b(.*)$")


@dataclasses.dataclass(frozen=True)
class Plan:
    reads: tuple  # (KiB per read, MiB per run): each condition is run with each, for a few seconds
    rounds: int
    rates: tuple  # churn's process rates per minute for the busy state (the curve)
    side_rate: int  # the busy state's rate in the relaxed and caching-mode boots


PLANS = {
    "quick": Plan(reads=((4, 16), (64, 128)), rounds=1, rates=(2168,), side_rate=2168),
    "default": Plan(reads=((4, 64), (64, 512)), rounds=3, rates=(542, 2168, 8672), side_rate=2168),
    "full": Plan(reads=((4, 128), (64, 1024)), rounds=5, rates=(271, 542, 1084, 2168, 4336, 8672), side_rate=2168),
}


def parse_trace(lines, sid=NVME_SID):
    """QEMU's trace lines -> the counts of COUNTS over the span of the device SID's DMA (its
    first translation to its last): its translations, hits and misses, the resets of the
    IOTLB and the invalidations by kind (pages: descriptors, and the 4 KiB pages they cover)
    in that span. What Xen flushed before the read began or after it ended touched no DMA."""
    c = dict.fromkeys(COUNTS, 0)
    pending = dict.fromkeys(COUNTS, 0)  # since the device's last translation: committed by the next
    started = False
    for line in lines:
        m = _EVENT.search(line)
        if not m:
            continue
        event, rest = m.groups()
        if event == "vtd_dmar_fault":
            # A refused DMA ends no translation: it counts where it falls, like an invalidation.
            s = re.search(r"\bsid 0x([0-9a-f]+)", rest)
            if s and int(s.group(1), 16) == sid:
                pending["faults"] += 1
            continue
        if event in ("vtd_iotlb_page_hit", "vtd_iotlb_page_update"):
            s = re.search(r"\bsid 0x([0-9a-f]+)", rest)
            if not s or int(s.group(1), 16) != sid:
                continue
            if started:
                for k, v in pending.items():
                    c[k] += v
            started = True
            pending = dict.fromkeys(COUNTS, 0)
            c["translations"] += 1
            c["hits" if event == "vtd_iotlb_page_hit" else "misses"] += 1
        elif event == "vtd_iotlb_reset":
            pending["resets"] += 1
        elif event == "vtd_inv_desc_iotlb_pages":
            mask = re.search(r"\bmask 0x([0-9a-f]+)", rest)
            pending["inv_pages"] += 1
            pending["inv_pages_4k"] += 1 << (int(mask.group(1), 16) if mask else 0)
        elif event == "vtd_inv_desc_iotlb_domain":
            pending["inv_domain"] += 1
        else:
            pending["inv_global"] += 1
    return c


def trace_since(tb, offset):
    """The counts of QEMU's trace after byte OFFSET (fault_trace_size() taken before)."""
    with open(tb.cfg.fault_trace, errors="replace") as f:
        f.seek(offset)
        return parse_trace(f)


def per_gib(row):
    """Counts per GiB read, added to ROW."""
    scale = GIB / row["bytes"]
    for k in COUNTS + XEN_COUNTS:
        row[k + "_per_gib"] = round(row[k] * scale, 1)
    row["miss_ratio"] = round(row["misses"] / row["translations"], 5) if row["translations"] else None
    return row


class Runner:
    """One boot with the disk: dmaread runs, each beside churn at a rate or idle."""

    def __init__(self, tb, plan, boot_name, session=None, dev=NVME_DEV):
        self.tb, self.plan, self.boot_name, self.dev = tb, plan, boot_name, dev
        self.session = session or measure.Session(tb)
        self.cache = None

    def check_disk(self):
        status, lines = self.tb.run("cat /sys/block/nvme0n1/size", timeout=60)
        if status != 0 or not lines or not lines[-1].strip().isdigit():
            raise ToolError("dom0 has no NVMe disk (%s): is CONFIG_BLK_DEV_NVME in the kernel?"
                            % " | ".join(lines[-3:]))

    def set_cache(self, on):
        if on != self.cache:
            self.session.configure_pool(measure.cache_settings(on))
            self.cache = on

    def churn_row(self):
        """churn's last progress row: (seconds since it started, processes created)."""
        rows = [line for line in self.tb.check("cat %s" % CHURN_OUT, timeout=60) if line.startswith("row ")]
        if not rows:
            raise ToolError("churn printed no progress row beside the read")
        kv = dict(x.split("=", 1) for x in rows[-1].split()[1:])
        return float(kv["t_s"]), int(kv["created"])

    def run(self, read, condition, rate, cache, round_, extra=None):
        """One read of READ = (KiB at a time, MiB in all): CONDITION idle (nothing beside it) or
        busy (churn at RATE per minute beside it), the cache on or off (None: a boot or domain
        without the pool's settings). EXTRA: fields added to the row."""
        if cache is not None:
            self.set_cache(cache)
        busy = condition == "busy"
        try:
            if busy:
                self.tb.check("(churn --duration 86400 --rate %d --report 1 %s >%s 2>&1 & echo $! > %s)"
                              % (rate, " ".join(CHURN_SHAPE), CHURN_OUT, CHURN_PID), timeout=60)
                # Its resident processes and first trees up, and a progress row, before the read.
                self.tb.check("sleep 2", timeout=60)
                before = self.churn_row()
            at = self.tb.fault_trace_size()
            rec = self.session.run("dmaread", ["--dev", self.dev, "--mib", str(read[1]),
                                               "--block-kb", str(read[0])])
            counts = trace_since(self.tb, at)
            after = self.churn_row() if busy else None
            # A read shorter than churn's one-second rows: its rate over the next row.
            for _ in range(3):
                if not busy or after[0] > before[0]:
                    break
                self.tb.check("sleep 1", timeout=60)
                after = self.churn_row()
            if busy and after[0] <= before[0]:
                raise ToolError("churn printed no progress row for 3 s beside the read")
        finally:
            if busy:
                # churn may have died already: its own output says why, and the error is raised.
                status, lines = self.tb.run("kill $(cat %s) 2>/dev/null; while kill -0 $(cat %s) 2>/dev/null; do "
                                            "usleep 100000; done; rm -f %s; cat %s; rm -f %s"
                                            % (CHURN_PID, CHURN_PID, CHURN_PID, CHURN_OUT, CHURN_OUT), timeout=120)
                if status != 0:
                    raise ToolError("churn could not be stopped:\n%s" % "\n".join(lines[-10:]))
        row = {"boot": self.boot_name, "block_kb": read[0], "condition": condition, "rate_per_min": rate if busy else 0,
               "cache": {None: "-", True: "on", False: "off"}[cache], "round": round_,
               "bytes": rec["result"]["bytes"], "seconds": rec["result"]["seconds"], "mbps": rec["result"]["mbps"]}
        # The process creations beside the read: churn's rate between its rows before and after it.
        per_s = (after[1] - before[1]) / (after[0] - before[0]) if busy else 0.0
        row["churn_per_s"] = round(per_s, 2)
        row["creations"] = round(per_s * row["seconds"], 1)
        row.update(counts)
        row.update({k: rec["counters"].get(k, 0) for k in XEN_COUNTS})
        row["invariant_violations"] = rec.get("invariant_violations")
        row.update(extra or {})
        check_row(row)
        return per_gib(row)


def check_row(row):
    """What every read must show: the disk's DMA translated (every data page at least once), none
    of it refused, and what the device saw Xen counted too. Xen counts an invalidation before it
    queues it, and its counters are read before the reading program starts and after it ends,
    while the device's span is its first DMA to its last: an invalidation whose count and whose
    queueing straddle the program's start or end (a vCPU held for the whole of it) would be the
    device's alone, hence at most one at each end."""
    if row["translations"] < row["bytes"] // 4096:
        raise ToolError("QEMU's trace shows %d translations of the disk's DMA (requester 0x%x) for %d bytes read"
                        % (row["translations"], NVME_SID, row["bytes"]))
    if row["faults"]:
        raise ToolError("the emulated VT-d refused %d of the disk's DMAs within the read" % row["faults"])
    seen = row["inv_pages"] + row["inv_domain"] + row["inv_global"]
    if seen > row["qi_iotlb_inv"] + 2:
        raise ToolError("the device saw %d invalidations within the read, Xen counted %d around it"
                        % (seen, row["qi_iotlb_inv"]))


def strict_plan(plan):
    """(round, block, condition, rate, cache) of the strict boot's runs, round by round and block
    size by block size: idle, then each rate with the cache off and on, their order swapped every
    other round."""
    runs = []
    for r in range(plan.rounds):
        for b in plan.reads:
            runs.append((r, b, "idle", 0, False))
            for rate in plan.rates:
                pair = [("busy", rate, False), ("busy", rate, True)]
                runs += [(r, b) + x for x in (pair if r % 2 == 0 else pair[::-1])]
    return runs


def side_plan(plan, runs):
    """The same for a boot of (condition, cache) RUNS at the plan's side rate."""
    return [(r, b, c, plan.side_rate, cache) for r in range(plan.rounds) for b in plan.reads for c, cache in runs]


# (boot name, dom0-iommu mode, caching mode, its runs: the strict plan, (condition, cache) pairs,
# or "domU": a PV domU reading the disk through blkback, persistent grants on and off)
BOOTS = (("strict", "strict", False, None),
         ("caching-mode", "strict", True, (("idle", False), ("busy", False), ("busy", True))),
         ("relaxed", "relaxed", False, (("idle", None), ("busy", None))),
         ("grants", "strict", False, "domU"))
# blkfront's choice: with persistent grants blkback maps each granted page once and keeps it;
# without, it maps and unmaps the pages of every request, and Xen takes each out of dom0's
# IOMMU again (strict): the flush source of the PV-IOMMU RFC, for comparison.
GRANT_MODES = (("persistent grants", 1), ("grant per request", 0))


def grant_runs(tb, plan, progress):
    """The grants boot: a pv-disk domU per grant mode reads its xvda (dom0's NVMe through
    blkback) as dom0 reads the disk in the other boots."""
    from . import guests
    rows = []
    for condition, persistent in GRANT_MODES:
        with guests.Guest(tb, "pv-disk", vcpus=2,
                          kernel_args=("xen_blkfront.feature_persistent=%d" % persistent,)) as g:
            # What blkfront and blkback agreed on, from their xenstore keys (51712: xvda).
            keys = tb.check("xenstore-read /local/domain/0/backend/vbd/%d/51712/feature-persistent "
                            "/local/domain/%d/device/vbd/51712/feature-persistent" % (g.domid, g.domid), timeout=60)
            used = int(all(k.strip() == "1" for k in keys[-2:]))
            if len(keys) < 2 or used != persistent:
                raise ToolError("the pv-disk domU's persistent grants: backend and frontend say %s, not %d"
                                % (" and ".join(keys[-2:]), persistent))
            runner = Runner(tb, plan, "grants", session=guests.GuestSession(tb, g), dev="/dev/xvda")
            for r in range(plan.rounds):
                for read in plan.reads:
                    progress("io grants: a domU, %s, %d MiB in %d KiB reads" % (condition, read[1], read[0]))
                    rows.append(runner.run(read, condition, 0, None, r, extra={"persistent_grants": used}))
    return rows


def measure_boots(parts, plan, console_dir, progress, boots=BOOTS, on_boot=None):
    """Every boot of BOOTS: the rows of every run."""
    from .series import _boot
    rows = []
    with tempfile.TemporaryDirectory(prefix="flushless-io-") as d:
        image = sparse_image(d)
        for name, mode, cm, runs in boots:
            kw = dict(mode=mode, caching_mode=cm, smp=2, nvme_image=image, iotlb_trace=True)
            tb = _boot(parts, console_dir, "io-" + name, **kw)
            try:
                with tb:
                    if on_boot:
                        on_boot("io-" + name, tb)
                    runner = Runner(tb, plan, name)
                    runner.check_disk()
                    if runs == "domU":
                        rows += grant_runs(tb, plan, progress)
                    else:
                        todo = strict_plan(plan) if runs is None else side_plan(plan, runs)
                        for i, (r, b, condition, rate, cache) in enumerate(todo):
                            progress("io %s %d/%d: %d MiB in %d KiB reads, %s%s, cache %s" % (
                                name, i + 1, len(todo), b[1], b[0], condition,
                                " at %d/min" % rate if condition == "busy" else "", {None: "-", True: "on", False: "off"}[cache]))
                            rows.append(runner.run(b, condition, rate, cache, r))
            finally:
                # Hundreds of MB of hit lines: kept compressed, the evidence of every count.
                if os.path.exists(tb.cfg.fault_trace):
                    compress(tb.cfg.fault_trace)
    return rows


def sparse_image(directory):
    """A disk image of IMAGE_MIB in DIRECTORY, sparse: the reads' data is zeros, their DMA is
    what counts."""
    image = os.path.join(directory, "disk.img")
    with open(image, "wb") as f:
        f.truncate(IMAGE_MIB << 20)
    return image


def compress(path):
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb", compresslevel=3) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.unlink(path)


def summary(rows):
    """Per (boot, read size, condition, rate, cache): the counts per GiB over all its runs together
    (an invalidation that comes now and then, as the domain-wide ones do, stays in), and the
    median throughput."""
    groups = {}
    for r in rows:
        groups.setdefault((r["boot"], r["block_kb"], r["condition"], r["rate_per_min"], r["cache"]), []).append(r)
    out = []
    for (boot, block, condition, rate, cache), rs in groups.items():
        s = {"boot": boot, "block_kb": block, "condition": condition, "rate_per_min": rate, "cache": cache,
             "runs": len(rs), "mbps": statistics.median(x["mbps"] for x in rs)}
        pooled = {k: sum(x[k] for x in rs) for k in COUNTS + XEN_COUNTS}
        pooled["bytes"] = sum(x["bytes"] for x in rs)
        per_gib(pooled)
        s.update({k: v for k, v in pooled.items() if k.endswith("_per_gib") or k == "miss_ratio"})
        out.append(s)
    return out


def run_stage(st, plan_name):
    """`reproduce` stage 'io': RESULTS/io.json and .csv."""
    from .results import write_experiment
    plan = PLANS[plan_name]
    # With the toolstack and the domU's files: the grants boot creates a domU.
    parts = build.Parts("built", linux_series=build.testbed_linux_series(), guest=True).ensure()

    def on_boot(name, tb):
        st.booted(name, tb)

    rows = measure_boots(parts, plan, st.console_dir, st.progress, on_boot=on_boot)
    from evaluation import hwmodel
    model = hwmodel.io_model(rows)
    write_experiment(st.results, "io", st.meta(parts, plan=dataclasses.asdict(plan), line_rate_model=model, device=(
        "QEMU's NVMe (a sparse raw image) at 00:%02x.0 behind the emulated VT-d; dmaread: O_DIRECT reads of "
        "(KiB per read, MiB per run) %s into one buffer; counts from QEMU's trace of the VT-d IOTLB (the disk's requester ID) and "
        "Xen's perf counters" % (NVME_SLOT, plan.reads)), timing=(
        "mbps: dom0 wall clock under TCG (emulation time), for context only; counts decide")),
        rows, summary=summary(rows))
