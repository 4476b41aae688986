"""The QEMU that runs the testbed: its binary, its version, and Debian 12's QEMU 7.2 beside it.

The testbed runs the host's qemu-system-x86_64, QEMU 10 from bookworm-backports
(testbed/install-deps.sh). Debian 12's own QEMU 7.2 stays available for comparison (the flake
census): its .debs are taken from apt's bookworm lists and unpacked into the build cache, and
run with its own firmware directory. `use()` picks one for the whole process; every boot and
every result's versions name it.
"""

import glob
import os
import re
import shutil
import subprocess
import tempfile

from . import tools
from .progress import ToolError, capture, log

SYSTEM = "qemu-system-x86_64"
# Debian 12's QEMU: the packages that hold its binary and its option ROMs (its BIOS is seabios',
# installed on the host with either QEMU).
DEBIAN12 = ("qemu-system-x86", "qemu-system-common", "qemu-system-data")
CHOICES = ("system", "7.2")

_selected = {"which": "system"}
_info = {}


def use(which):
    """Run every later boot of this process on WHICH: 'system' (the host's QEMU) or '7.2'."""
    if which not in CHOICES:
        raise ToolError("unknown QEMU '%s' (%s)" % (which, ", ".join(CHOICES)))
    _selected["which"] = which


def selected():
    return _selected["which"]


def argv0():
    """The binary and its firmware directories, as the start of a QEMU command line."""
    if selected() == "system":
        return [SYSTEM]
    root = _debian12_root()
    return [os.path.join(root, "usr", "bin", SYSTEM), "-L", os.path.join(root, "usr", "share", "qemu"),
            "-L", "/usr/share/seabios", "-L", "/usr/share/qemu"]


def info():
    """{'qemu_version': '10.0.2', 'qemu_package': ..., 'qemu_binary': ...} of the QEMU in use."""
    which = selected()
    if which not in _info:
        binary = argv0()[0]
        if which == "system":
            tools.require(SYSTEM)
            binary = shutil.which(SYSTEM)
        out = capture([binary, "--version"], "%s --version" % binary)
        m = re.search(r"QEMU emulator version (\S+)(?: \((?:Debian )?(.*?)\))?", out)
        if not m:
            raise ToolError("%s --version printed no version: %s" % (binary, out.strip()[:200]))
        _info[which] = {"qemu_version": m.group(1), "qemu_package": m.group(2) or "", "qemu_binary": binary}
    return dict(_info[which])


def _cache():
    from . import build
    return os.path.join(build.CACHE, "qemu")


def _debian12_root():
    """Debian 12's QEMU 7.2 unpacked (once) under the build cache; its directory, looked up once
    per process so that every boot and every row of a run name the same build."""
    if "root" not in _info:
        _info["root"] = _unpack_debian12()
    return _info["root"]


def _unpack_debian12():
    versions = {p: _bookworm_version(p) for p in DEBIAN12}
    root = os.path.join(_cache(), "debian12-" + re.sub(r"[^0-9A-Za-z.+~]", "_", versions[DEBIAN12[0]]))
    if os.path.exists(os.path.join(root, "usr", "bin", SYSTEM)):
        return root
    tools.require("apt-get", "dpkg-deb")
    os.makedirs(_cache(), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="debian12.", dir=_cache())
    try:
        log("qemu: unpacking Debian 12's QEMU %s into %s" % (versions[DEBIAN12[0]], root))
        for p in DEBIAN12:
            res = subprocess.run(["apt-get", "download", "%s=%s" % (p, versions[p])], cwd=tmp, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            debs = glob.glob(os.path.join(tmp, "%s_*.deb" % p))
            if res.returncode or not debs:
                raise ToolError("apt-get download %s=%s failed: %s" % (p, versions[p], res.stdout.strip()[-500:]))
            capture(["dpkg-deb", "-x", debs[0], os.path.join(tmp, "root")], "unpacking %s" % debs[0])
        if os.path.exists(root):
            shutil.rmtree(root)
        os.rename(os.path.join(tmp, "root"), root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _bookworm_version(package):
    """The newest 7.2 version of PACKAGE that apt's lists hold (bookworm or its security suite)."""
    out = capture(["apt-cache", "madison", package], "apt-cache madison %s" % package)
    found = sorted({m.group(1) for m in re.finditer(r"\|\s*(1:7\.2\S*)\s*\|", out)}, key=_debver)
    if not found:
        raise ToolError("apt's lists hold no QEMU 7.2 %s (Debian 12's own); run apt-get update" % package)
    return found[-1]


def _debver(v):
    # Among one series' own builds (7.2+dfsg-7+deb12uN[+bM]) comparing the numbers is enough.
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", v)]


# testbed/reproducers/xsave_ts.c: a multiboot kernel asking whether this QEMU raises #NM
# for XSAVE, XSAVEOPT and XRSTOR while CR0.TS is set (docs/qemu-xsave-ts.md).
XSAVE_TS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testbed", "reproducers")
XSAVE_TS_TIMEOUT = 60


def xsave_ts():
    """{instruction: raised #NM under CR0.TS} on the selected QEMU (TCG, the testbed's CPU)."""
    from .testbed import CPU
    tools.require("gcc")
    tools.require("ld")
    with tempfile.TemporaryDirectory(prefix="flushless-xsave-ts-") as d:
        obj, elf = os.path.join(d, "xsave_ts.o"), os.path.join(d, "xsave_ts.elf")
        capture(["gcc", "-m32", "-O2", "-ffreestanding", "-fno-pic", "-fno-stack-protector", "-nostdlib",
                 "-Wall", "-Werror", "-c", os.path.join(XSAVE_TS, "xsave_ts.c"), "-o", obj],
                "compiling the reproducer")
        capture(["ld", "-m", "elf_i386", "--no-warn-rwx-segments", "-T", os.path.join(XSAVE_TS, "xsave_ts.ld"),
                 obj, "-o", elf], "linking the reproducer")
        argv = argv0() + ["-accel", "tcg", "-cpu", CPU, "-kernel", elf, "-display", "none", "-serial", "stdio",
                          "-device", "isa-debug-exit,iobase=0xf4,iosize=4", "-no-reboot", "-nodefaults"]
        try:
            # subprocess.run kills QEMU when the timeout expires.
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL, timeout=XSAVE_TS_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise ToolError("the XSAVE/CR0.TS reproducer did not end within %d s" % XSAVE_TS_TIMEOUT)
    lines = [x.split() for x in p.stdout.splitlines() if x.startswith("XSAVE-TS ")]
    result = {x[1]: x[2] == "nm" for x in lines if len(x) == 3 and x[2] in ("nm", "no-nm")}
    # isa-debug-exit: QEMU's status is (code << 1) | 1; the reproducer's code is 0 or 1 after
    # a full run, 2 after an unexpected fault, 3 without XSAVE.
    done = any(x[1:2] == ["done"] for x in lines)
    if not done or p.returncode not in (1, 3) or not {"pxor", "fxsave", "xsave", "xrstor"} <= set(result):
        raise ToolError("the XSAVE/CR0.TS reproducer failed (QEMU exit %d):\n%s%s"
                        % (p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
    return result
