"""Bad input to the CLI: a clear message and exit 2, before anything is built or booted."""

import os
import subprocess
import sys

import pytest

from flushless import cli, plan
from flushless.testbed.build import REPO


def flushless(*args):
    return subprocess.run([sys.executable, "-m", "flushless"] + list(args), cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60,
                          env=dict(os.environ, FLUSHLESS_CACHE="/nonexistent/flushless-cache"))


@pytest.mark.parametrize("args,msg", [
    (["run", "nosuch"], "unknown workload 'nosuch'"),
    (["run", "forkbench", "--bogus"], "unknown argument --bogus"),
    (["run", "forkbench", "--n", "x"], "whole number"),
    (["run", "forkbench", "--mode", "lax"], "invalid choice: 'lax'"),
    (["run", "forkbench", "--caching-mode", "maybe"], "invalid choice"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["build", "--kernel", "mine"], "invalid choice"),
    (["bench", "native", "nosuch"], "unknown workload"),
    (["run", "tcpstream", "--host", "10.0.2.300"], "IPv4 address"),
    (["run", "cpusuite", "--program", "gcc"], "takes one of"),
    (["reproduce", "--quick", "--full"], "not allowed with"),
    (["reproduce", "--minute-seconds", "2"], "5 to 600"),
    (["reproduce", "--stages", "groups,nosuch"], "subset of groups,timing,network,io,native"),
    (["reproduce", "--bogus"], "unrecognized arguments"),
    (["census", "--sections", "boot,nosuch"], "subset of xsave,boot,race,console,storm,pvh,passthrough"),
    (["census", "--qemu", "6.2"], "invalid choice: '6.2'"),
    (["report", "--results", "/nonexistent/results"], "no results in /nonexistent/results"),
    (["run", "forkbench", "--design", "nosuch"], "invalid choice: 'nosuch'"),
    (["run", "forkbench", "--design", "xen-only", "--kernel", "built"], "boots the vanilla kernel"),
    (["run", "forkbench", "--design", "xen-only", "--cache", "on"], "runs with the cache absent"),
    (["run", "forkbench", "--design", "paper", "--cache", "off"], "runs with the cache on"),
    (["run", "forkbench", "--design", "paper", "--kernel", "vanilla"], "boots the built kernel"),
    (["run", "forkbench", "--design", "guest-only"], "invalid choice: 'guest-only'"),
    (["run", "forkbench", "--pool-cap", "16", "--cache", "off"], "drop --cache off"),
    (["run", "forkbench", "--design", "xen-only", "--xen-series", "tests/fixtures/xen-old-design"],
     "brings its own Xen series"),
    (["run", "forkbench", "--guest", "hvm"], "invalid choice: 'hvm'"),
    (["run", "forkbench", "--aslr", "2"], "invalid choice: '2'"),
    (["run", "forkbench", "--guest", "pvh-hap", "--kernel", "debian"], "needs --kernel built or vanilla"),
    (["run", "forkbench", "--kernel", "vanilla", "--cache", "off", "--pool-cap", "16"], "need --kernel built"),
])
def test_bad_input_exits_2(args, msg):
    res = flushless(*args)
    assert res.returncode == (1 if args[0] == "report" else 2), res.stderr
    assert msg in res.stderr
    assert "Traceback" not in res.stderr


def test_bench_native_one_workload():
    res = flushless("bench", "native", "forkbench", "--n", "20", "--json")
    assert res.returncode == 0, res.stderr
    assert '"ops": 20' in res.stdout


def test_native_boot_has_no_xen_and_no_iommu(tmp_path):
    from flushless.testbed.boot import BootConfig
    for name in ("vmlinuz", "initrd"):
        (tmp_path / name).write_text("")
    cfg = BootConfig(xen=None, kernel=str(tmp_path / "vmlinuz"), initramfs=str(tmp_path / "initrd"),
                     native=True, icount=True, smp=1)
    argv = cfg.qemu_argv()
    assert argv[argv.index("-kernel") + 1] == str(tmp_path / "vmlinuz")
    assert not any("intel-iommu" in a or "edu" in a for a in argv)
    assert "console=ttyS0" in argv[argv.index("-append") + 1]
    assert "shift=0,sleep=off" in argv


def resolved(*argv):
    args, rest = cli.make_parser().parse_known_args(list(argv))
    return plan.resolve(args, rest)


def test_the_plan_is_resolved_once_from_the_arguments():
    p = resolved("run", "forkbench", "--n", "5", "--guest", "pv-passthrough", "--cache", "on")
    assert (p.kernel, p.mode, p.guest, p.cache, p.workload.name, p.workload_args) == (
        "built", "relaxed", "pv-passthrough", "on", "forkbench", ("--n", "5"))
    assert p.pool_settings and p.xen_series is None and p.has_domu
    # A design brings its kernel, its cache and its Xen series; a domU takes the design's kernel.
    p = resolved("run", "forkbench", "--design", "stock", "--guest", "pv-passthrough")
    assert (p.kernel, p.cache, p.design.name, p.mode) == ("vanilla", None, "stock", "relaxed")
    p = resolved("shell", "--design", "paper")
    assert (p.kernel, p.cache, p.workload) == ("built", None, None) and p.xen_series
