"""What `flushless run` and `flushless shell` boot and run, resolved once from the command line
and checked before anything is built: the rest of the command reads the plan, never the
arguments."""

import dataclasses
import glob
import os
import re

from .experiments import designs, measure, workloads
from .testbed.boot import BootConfig

XEN_ARG = re.compile(r"[a-z0-9_-]+(=[A-Za-z0-9_.,:-]+)?$")


@dataclasses.dataclass(frozen=True)
class Plan:
    kernel: str                     # debian | built | vanilla
    xen_series: object              # patch paths, or None for patches/xen
    xen_args: tuple
    mode: str                       # dom0-iommu=strict | relaxed
    dom0_args: tuple
    guest: str = "dom0"             # where the workload runs
    cache: object = None            # on | off | None (as booted)
    pool_settings: dict = dataclasses.field(default_factory=dict)
    design: object = None           # designs.Design, or None
    workload: object = None         # workloads.Workload, or None (shell)
    workload_args: tuple = ()

    @property
    def has_domu(self):
        return self.guest != "dom0"

    def boot_config(self, parts, args):
        return BootConfig(xen=parts.xen.path("xen"), kernel=parts.kernel.path("vmlinuz"),
                          initramfs=parts.dom0_initramfs(), mode=self.mode,
                          caching_mode=args.caching_mode == "on", smp=args.smp, icount=args.icount,
                          xen_args=self.xen_args, dom0_args=self.dom0_args)


def resolve(args, rest=None):
    """The plan of ARGS (and the workload's own arguments REST, for run); bad input raises
    workloads.UsageError."""
    workload = workload_args = None
    if getattr(args, "workload", None) is not None:
        workload = workloads.get(args.workload)
        workload_args = tuple(workload.check_args(rest or []))
    guest = getattr(args, "guest", None) or "dom0"
    design = designs.get(args.design) if args.design else None
    kernel, cache = _design_kernel_and_cache(args, design)
    wants_pool = cache is not None or getattr(args, "pool_cap", None) is not None
    if kernel is None:
        kernel = "built" if wants_pool or guest != "dom0" else "debian"
    elif kernel != "built" and wants_pool:
        raise workloads.UsageError("--cache and --pool-cap need --kernel built (the %s kernel has no page-table "
                                   "pool)" % kernel)
    settings = _pool_settings(args, cache)
    if guest != "dom0" and kernel == "debian":
        raise workloads.UsageError("--guest %s needs --kernel built or vanilla (dom0's toolstack needs Xen "
                                   "drivers that Debian's kernel has as modules)" % guest)
    xen_args = _xen_args(args)
    return Plan(kernel=kernel, xen_series=_xen_series(args, design), xen_args=xen_args,
                mode=args.mode or ("relaxed" if guest != "dom0" else "strict"),
                dom0_args=design.dom0_args if design else (), guest=guest, cache=cache, pool_settings=settings,
                design=design, workload=workload, workload_args=workload_args or ())


def _design_kernel_and_cache(args, design):
    """--design fixes the kernel, the Xen series and the cache: giving them too must agree."""
    cache = getattr(args, "cache", None)
    if not design:
        return args.kernel, cache
    if args.xen_series:
        raise workloads.UsageError("--design %s brings its own Xen series; drop --xen-series" % design.name)
    if args.kernel not in (None, design.kernel):
        raise workloads.UsageError("--design %s boots the %s kernel, not --kernel %s"
                                   % (design.name, design.kernel, args.kernel))
    if cache not in (None, design.cache):
        raise workloads.UsageError("--design %s runs with the cache %s; drop --cache %s"
                                   % (design.name, design.cache or "absent", cache))
    return design.kernel, design.cache if hasattr(args, "cache") else None


def _pool_settings(args, cache):
    """The pool's settings asked for on the command line."""
    if getattr(args, "pool_cap", None) is not None:
        if cache == "off":
            raise workloads.UsageError("--pool-cap sets the cap of a cache that is on: drop --cache off")
        return {"max_pages": args.pool_cap}
    if cache is not None:
        return measure.cache_settings(cache == "on")
    return {}


def _xen_args(args):
    for a in args.xen_arg:
        if not XEN_ARG.match(a):
            raise workloads.UsageError("--xen-arg takes NAME or NAME=VALUE (letters, digits, _.,:-), not '%s'" % a)
    return tuple(args.xen_arg)


def _xen_series(args, design):
    if design:
        return design.xen_series()
    if args.xen_series:
        series = sorted(glob.glob(os.path.join(os.path.abspath(args.xen_series), "*.patch")))
        if not series:
            raise workloads.UsageError("--xen-series %s holds no *.patch files" % args.xen_series)
        return series
    return None
