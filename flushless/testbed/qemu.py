"""The QEMU that runs the testbed: its binary, its version, and the QEMUs beside it.

The testbed runs QEMU 10.0.2 built from Debian's source tarball with testbed/qemu's fixes
(build.Qemu; docs/qemu-svm-evtinj.md says why), with the firmware of the host's QEMU 10 from
bookworm-backports (testbed/install-deps.sh). That host binary, unpatched, stays available
('system'), and so does Debian 12's own QEMU 7.2 ('7.2', for the flake census): its .debs are
taken from apt's bookworm lists and unpacked into the build cache, and run with its own
firmware directory. `use()` picks one for the whole process; every boot and every result's
versions name it."""

import glob
import os
import re
import shutil
import subprocess
import tempfile

from .. import tools
from ..progress import ToolError, capture, log
from . import build

SYSTEM = build.QEMU_SYSTEM
# QEMU 10's TCG offers x2APIC (QEMU 7.2's did not), and Xen then reads the APIC timer through
# an MSR, which under -icount aborts QEMU ("Bad icount read": the clock is read outside an I/O
# instruction). The xAPIC's MMIO is what every boot used on QEMU 7.2.
CPU = "max,x2apic=off"
# Debian 12's QEMU: the packages that hold its binary and its option ROMs (its BIOS is seabios',
# installed on the host with either QEMU).
DEBIAN12 = ("qemu-system-x86", "qemu-system-common", "qemu-system-data")
CHOICES = ("testbed", "system", "7.2")
# Where Debian's QEMU 10 looks for firmware (`qemu-system-x86_64 -L help`: qemu-system-data,
# seabios, ipxe-qemu's option ROMs such as e1000e's), for the testbed's own build.
FIRMWARE = ("/usr/share/qemu", "/usr/share/seabios", "/usr/lib/ipxe/qemu")

_selected = {"which": "testbed"}
_info = {}


def use(which):
    """Run every later boot of this process on WHICH: 'testbed' (the build with testbed/qemu's
    fixes), 'system' (the host's QEMU, as Debian ships it) or '7.2'."""
    if which not in CHOICES:
        raise ToolError("unknown QEMU '%s' (%s)" % (which, ", ".join(CHOICES)))
    _selected["which"] = which


def selected():
    return _selected["which"]


def argv0():
    """The binary and its firmware directories, as the start of a QEMU command line."""
    if selected() == "system":
        return [SYSTEM]
    if selected() == "testbed":
        return [_testbed_binary()] + [a for d in FIRMWARE for a in ("-L", d)]
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
        version, package = m.group(1), m.group(2) or ""
        if which == "testbed":
            # Not the stock release: the version says so, and the census keeps its rows apart.
            version += "+testbed"
            package = "built from %s with testbed/qemu/%s" % (build.QEMU_ORIG.name,
                                                              ", ".join(build.Qemu().manifest()["patches"]))
        _info[which] = {"qemu_version": version, "qemu_package": package, "qemu_binary": binary}
    return dict(_info[which])


def versions(parts):
    """PARTS' versions and the QEMU in use: not built with them, but it runs every boot."""
    return dict(parts.versions(), qemu=info())


def _cache():
    return os.path.join(build.CACHE, "qemu")


def _testbed_binary():
    """The testbed's own build (built once, then cached by the hash of its inputs)."""
    if "testbed_binary" not in _info:
        _info["testbed_binary"] = os.path.join(build.Qemu().ensure(), SYSTEM)
    return _info["testbed_binary"]


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


# Multiboot kernels that each ask the selected QEMU one question (testbed/reproducers/*.c):
# built with the host's gcc, booted with -kernel, answered on COM1, ended by isa-debug-exit.
REPRODUCERS = os.path.join(build.REPO, "testbed", "reproducers")
REPRODUCER_TIMEOUT = 60


def run_reproducer(name, extra=()):
    """Boot testbed/reproducers/NAME.c on the selected QEMU; (QEMU's exit status, its COM1 lines)."""
    tools.require("gcc")
    tools.require("ld")
    with tempfile.TemporaryDirectory(prefix="flushless-%s-" % name) as d:
        obj, elf = os.path.join(d, name + ".o"), os.path.join(d, name + ".elf")
        capture(["gcc", "-m32", "-O2", "-ffreestanding", "-fno-pic", "-fno-stack-protector", "-nostdlib",
                 "-Wall", "-Werror", "-c", os.path.join(REPRODUCERS, name + ".c"), "-o", obj],
                "compiling the reproducer %s" % name)
        capture(["ld", "-m", "elf_i386", "--no-warn-rwx-segments", "-T", os.path.join(REPRODUCERS, "multiboot.ld"),
                 obj, "-o", elf], "linking the reproducer %s" % name)
        argv = argv0() + ["-accel", "tcg", "-cpu", CPU, "-kernel", elf, "-display", "none", "-serial", "stdio",
                          "-device", "isa-debug-exit,iobase=0xf4,iosize=4", "-no-reboot", "-nodefaults"]
        try:
            # subprocess.run kills QEMU when the timeout expires.
            p = subprocess.run(argv + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL, timeout=REPRODUCER_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise ToolError("the reproducer %s did not end within %d s" % (name, REPRODUCER_TIMEOUT))
    return p.returncode, p.stdout + p.stderr


def xsave_ts():
    """{instruction: raised #NM under CR0.TS} on the selected QEMU (TCG, the testbed's CPU):
    testbed/reproducers/xsave_ts.c, docs/qemu-xsave-ts.md."""
    rc, out = run_reproducer("xsave_ts")
    lines = [x.split() for x in out.splitlines() if x.startswith("XSAVE-TS ")]
    result = {x[1]: x[2] == "nm" for x in lines if len(x) == 3 and x[2] in ("nm", "no-nm")}
    # isa-debug-exit: QEMU's status is (code << 1) | 1; the reproducer's code is 0 or 1 after
    # a full run, 2 after an unexpected fault, 3 without XSAVE.
    done = any(x[1:2] == ["done"] for x in lines)
    if not done or rc not in (1, 3) or not {"pxor", "fxsave", "xsave", "xrstor"} <= set(result):
        raise ToolError("the XSAVE/CR0.TS reproducer failed (QEMU exit %d):\n%s" % (rc, out[-2000:]))
    return result


def svm_evtinj(icount=True):
    """How often the selected QEMU delivers one external interrupt injected with SVM's EVENTINJ:
    {'deliveries': N, 'if_clear': M} (testbed/reproducers/svm_evtinj.c,
    docs/qemu-svm-evtinj.md). Once is right; a second delivery, with IF clear, is the bug."""
    rc, out = run_reproducer("svm_evtinj", ["-icount", "shift=0,sleep=off"] if icount else [])
    m = re.search(r"^SVM-EVTINJ exit 0x([0-9a-f]+) deliveries (\d+) if-clear (\d+)$", out, re.M)
    # isa-debug-exit: (code << 1) | 1; code 0 once, 1 more than once, 2 a fault or a failed VMRUN.
    if not m or rc not in (1, 3) or int(m.group(1), 16) != 0x78:
        raise ToolError("the SVM EVENTINJ reproducer failed (QEMU exit %d):\n%s" % (rc, out[-2000:]))
    return {"deliveries": int(m.group(2)), "if_clear": int(m.group(3))}
