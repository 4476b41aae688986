"""Build the testbed's parts from Debian's packages, cached by the hash of their inputs.

A part lives in $FLUSHLESS_CACHE/parts/NAME-KEY/ (default ~/.cache/flushless) with a
manifest.json recording its inputs and versions. KEY hashes everything that goes in:
package versions, our patches, config fragments, guest programs. A second build with the
same inputs is a lookup; changing a patch builds again.
"""

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile

from .. import tools
from ..progress import ToolError, capture, log, nproc, run_logged
from . import debian
from .cpio import write_gz

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("FLUSHLESS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "flushless")

# Debian 13's Xen and Linux, pinned: the series and the tests' counts are written against
# these versions, and the archive moves on (on 2026-11-23 its lists named Xen 4.20.4+63,
# whose source files this mirror does not serve, and linux-source-6.12 6.12.117).
# Each part is resolved through the suites' signed indices (debian.resolve, docs/sources.md);
# the Pins below are the sums recorded for when an index no longer lists the pinned version.
# The sums of the .debs are those of apt's signed lists; Xen's .dsc was never served here,
# so its tarballs' sums were recorded at download (2026-11-23).
TRIXIE = ("trixie", "trixie-security", "trixie-updates")
XEN_SOURCE_VERSION = "4.20.3+127-gc42374a105-0+deb13u1"
XEN_SOURCE_FILES = [
    debian.Pin("pool/main/x/xen/xen_4.20.3+127-gc42374a105.orig.tar.xz",
               "df0831854a55a8f31cb3cb85036f2edc928e2ef098d77f815f5714bfafac68f3"),
    debian.Pin("pool/main/x/xen/xen_4.20.3+127-gc42374a105-0+deb13u1.debian.tar.xz",
               "b1f909d626f3d4ba6965ba291dd97b0dfbbe48bb8e2510913cbc1760c5e8cb3e"),
]
XEN_DEBIAN = debian.Wanted(["xen"], XEN_SOURCE_VERSION, "4.20", TRIXIE, source=True, recorded=XEN_SOURCE_FILES)
# Applied after patches/xen for the testbed only (never part of the series).
XEN_TESTBED_PATCHES = os.path.join(REPO, "testbed", "xen")
# Kconfig seeds merged into Xen's defaults: perf counters need EXPERT; shadow paging (off by
# default in 4.20, and in Debian's build) runs PVH domUs with hap=0 (--guest pvh-shadow).
XEN_CONFIG = ["CONFIG_EXPERT=y", "CONFIG_PERF_COUNTERS=y", "CONFIG_SHADOW_PAGING=y"]
# check-series also builds Xen without PV guests: the series' PV-only code must compile away.
XEN_CONFIG_NO_PV = ["# CONFIG_PV is not set"]
# Linux 7.3 from trixie-backports, where a version stays only until the next one: the pins
# below are the sums of its signed index (2026-11-27), used once the index moves on.
BACKPORTS = ("trixie-backports",)
LINUX_SOURCE = "linux-source-7.3"
LINUX_VERSION = "7.3.4-1~bpo13+1"
LINUX_SOURCE_DEB = debian.Pin("pool/main/l/linux/linux-source-7.3_7.3.4-1~bpo13+1_all.deb",
                              "703e369ddd4cce971452f5a593ee55df3a5c10c83caf0fa0df039633ed181ee3")
LINUX_SOURCE_DEBIAN = debian.Wanted.debs([LINUX_SOURCE_DEB], BACKPORTS, series="7.3")
# Debian's own build of that source: the stock baseline. Since 7.x linux-image-* only depends
# on linux-binary-* (vmlinuz), linux-modules-* and linux-base-* (config, System.map); their
# names carry the kernel ABI, so a newer 7.3 is other packages.
LINUX_RELEASE = "7.3.4+deb13-amd64"
LINUX_IMAGE_DEBS = [
    debian.Pin("pool/main/l/linux-signed-amd64/linux-binary-7.3.4+deb13-amd64_7.3.4-1~bpo13+1_amd64.deb",
               "7e3248d03a84dcdda88c567aa8c4038f2e7795d2dd167b112c56f8901b6f513f"),
    debian.Pin("pool/main/l/linux-signed-amd64/linux-modules-7.3.4+deb13-amd64_7.3.4-1~bpo13+1_amd64.deb",
               "b3ea01922c9f133767a83cf6891c19b3693858ded617bf22d1e34f95382c08ea"),
    debian.Pin("pool/main/l/linux-signed-amd64/linux-base-7.3.4+deb13-amd64_7.3.4-1~bpo13+1_amd64.deb",
               "5663505495b5c90be94af42105c7b28629802516779102dac48d5a00cc00fccf"),
]
LINUX_IMAGE_DEBIAN = debian.Wanted([p.package for p in LINUX_IMAGE_DEBS], LINUX_VERSION, "7.3", BACKPORTS,
                                   recorded=LINUX_IMAGE_DEBS, label="linux-image-" + LINUX_RELEASE,
                                   patterns={p.package: re.escape(p.package.split("7.3.4")[0]) + r"7\.3\.\d+\+deb13-amd64"
                                             for p in LINUX_IMAGE_DEBS})
LINUX_CONFIG = os.path.join(REPO, "testbed", "linux", "flushless.config")
# Where safety is tested: the checks a maintainer switches on (the series' VM_WARN_ONs among them).
LINUX_DEBUG_CONFIG = os.path.join(REPO, "testbed", "linux", "debug.config")
# check-series also builds the kernel without Xen PV: the pool (XEN_PV only) must compile away.
LINUX_NO_PV_CONFIG = os.path.join(REPO, "testbed", "linux", "no-pv.config")
XEN_DEBUG_CONFIG = ["CONFIG_DEBUG=y"]
# Debian's own build of our Xen's source version, unpatched: the census boots it to tell a flaw
# of our build (patches/xen, testbed/xen, our config) from one of Xen or the emulator. No signed
# index lists this version any more; the sum was recorded at first download (2026-11-26).
XEN_HYPERVISOR_DEB = debian.Pin("pool/main/x/xen/xen-hypervisor-4.20-amd64_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
                                "49965ec3db19f0dbaaa1ea87c56939cb4e7a7fe418cb1f4c701baa1a0fe13233")
XEN_HYPERVISOR_DEBIAN = debian.Wanted(["xen-hypervisor-4.20-amd64"], XEN_SOURCE_VERSION, "4.20", TRIXIE,
                                      recorded=[XEN_HYPERVISOR_DEB])
# The toolstack for the domUs of --guest (xl, xenstored, xenconsoled), from Debian 13's build of
# our Xen's own source version. apt's lists name 4.20.4+63 by now, so the sums of these Xen
# debs were recorded at download (2026-11-25); the libraries' are those of trixie's signed
# lists of that day.
TOOLSTACK_DEBS = [
    debian.Pin("pool/main/x/xen/xen-utils-4.20_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
               "33251b8d3312fd30614fd9eef719071f31a6881533bc1dac84768d5496d22463"),
    debian.Pin("pool/main/x/xen/xenstore-utils_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
               "4e052283c82ed0c6c2a261b2f732b1974456416bee17d2c178d81da0925d3e08"),
    debian.Pin("pool/main/x/xen/libxencall1_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
               "44fbd6e722139c618e48617ab38253d5782bf5f4dfeb053b39352f783904aba5"),
    debian.Pin("pool/main/x/xen/libxendevicemodel1_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
               "64d6fbcbcd1c482f9b27ee54688d9e99350b8a17b69f019f49aecce45c36c656"),
    debian.Pin("pool/main/x/xen/libxenevtchn1_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
               "0e450a8fd51a01e7a173c33548a6311adba6d9ce911f64101562f0c035e3bf40"),
    debian.Pin("pool/main/x/xen/libxenforeignmemory1_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
               "11e6d3479bba514cca439ad53bf04fff11d7c06961c3f06b5eb125ee996f042d"),
    debian.Pin("pool/main/x/xen/libxengnttab1_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
               "7e8bd2d8902ef6abeeb1a70f7ffa7a6dc89846d79bd43d209a14e22de3b482ae"),
    debian.Pin("pool/main/x/xen/libxenhypfs1_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
               "9bb38674e4c448ca0863b0da43e76daddb34ad1e96c93bd007fa54d09f5daa4c"),
    debian.Pin("pool/main/x/xen/libxenmisc4.20_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
               "78dd8fe25963c9431b36edc50915559b13937a3c0d9a45497f71289ff064e12c"),
    debian.Pin("pool/main/x/xen/libxenstore4_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
               "a8de020b8c3129a248171e393e38536beeabf2d0aa03e291fa09b415a5f77486"),
    debian.Pin("pool/main/x/xen/libxentoolcore1_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
               "0d24256af25c64eb873101104ee26c7224e77c74a085a9d9363ee6b19a6bd2f5"),
    debian.Pin("pool/main/x/xen/libxentoollog1_4.20.3+127-gc42374a105-0+deb13u1_amd64.deb",
               "ec76fae0971e3f88dcb33b10605e503a4e88243a151ff0cedfce35313d00a0bf"),
    debian.Pin("pool/main/y/yajl/libyajl2_2.1.0-5+b2_amd64.deb",
               "98497e30d6672298111b74e59890b3232b947abe4ecf04e39f480413b755e4f5"),
    debian.Pin("pool/main/g/glibc/libc6_2.41-12+deb13u5_amd64.deb",
               "b59b0625cd1a791375d40dab23a4d5d3d0641e3d0a773501becdc3725b7f99cf"),
    debian.Pin("pool/main/x/xz-utils/liblzma5_5.8.1-1+deb13u2_amd64.deb",
               "b38acab30f295bf1066a6632e31cbd0a1980f2924b38040cda131d5dea5384ec"),
    debian.Pin("pool/main/u/util-linux/libuuid1_2.41.5-0+deb13u1_amd64.deb",
               "c1bf4c4c3ff48c57fabf93307dfb56996b60cfa33927afc4158b5db36fb2721e"),
    debian.Pin("pool/main/libz/libzstd/libzstd1_1.5.7+dfsg-1_amd64.deb",
               "2f6a2aeacfc925eba8b00ac9139bc4bfccf8cacb09eb93de067074b26948eef9"),
    debian.Pin("pool/main/z/zlib/zlib1g_1.3.dfsg+really1.3.1-1+deb13u1_amd64.deb",
               "8c27c342230503b73dfde629642c3b352e87b554e06d60cf58772f236a305ceb"),
    debian.Pin("pool/main/g/gcc-14/libgcc-s1_14.2.0-19_amd64.deb",
               "3c71917b490d1a17aed43196a2787a256ecf060526cdb20216a74bedc061b150"),
]
# Xen's binaries are taken at one version, of Xen's series; each library on its own.
TOOLSTACK_DEBIAN = ([debian.Wanted.debs([p for p in TOOLSTACK_DEBS if "/x/xen/" in p.path], TRIXIE, series="4.20",
                                        label="xen toolstack")]
                    + [debian.Wanted.debs([p], TRIXIE) for p in TOOLSTACK_DEBS if "/x/xen/" not in p.path])
# What dom0 runs of it; the libraries they load are found by their DT_NEEDED entries, plus
# libgcc_s (glibc loads it for pthread_cancel(): without it 'xl create' aborts).
TOOLSTACK_PROGRAMS = ["usr/lib/xen-4.20/bin/" + p for p in
                      ("xl", "xenstored", "xenconsoled", "xen-init-dom0", "libxl-save-helper")] + \
                     ["usr/bin/xenstore-" + p for p in ("read", "write", "watch", "exists", "rm", "ls")]
TOOLSTACK_DLOPENED = ["libgcc_s.so.1"]
# Modules Debian builds as =m that the guest needs (our own kernel has them built in);
# Debian 13 ships them xz-compressed.
DEBIAN_MODULES = ["drivers/xen/xen-privcmd.ko.xz", "drivers/xen/xenfs/xenfs.ko.xz"]


def _sha(h, item):
    if isinstance(item, bytes):
        h.update(item)
    else:
        h.update(str(item).encode())
    h.update(b"\0")


def hash_inputs(inputs):
    h = hashlib.sha256()
    for label, value in inputs:
        _sha(h, label)
        if label.startswith("file:"):
            with open(value, "rb") as f:
                _sha(h, os.path.relpath(value, REPO))
                _sha(h, f.read())
        else:
            _sha(h, value)
    return h.hexdigest()[:16]


def file_list(pattern):
    return sorted(glob.glob(os.path.join(REPO, pattern), recursive=True))


# The Xen series as posted is based on xen-project/xen's staging branch; a patch whose hunks
# must differ on Debian's 4.20 (the testbed) has a backport of the same file name here.
XEN_SERIES = os.path.join(REPO, "patches", "xen")
XEN_BACKPORTS = "4.20"


def xen_series_as_posted(series_dir=XEN_SERIES):
    """The series as posted (staging), without backports: SERIES_DIR/*.patch in order."""
    return sorted(glob.glob(os.path.join(series_dir, "*.patch")))


def xen_series_for_testbed(series_dir=XEN_SERIES):
    """What the testbed applies to Debian's 4.20: the posted series, each patch that has a
    backport in SERIES_DIR/4.20/ replaced by it."""
    posted = xen_series_as_posted(series_dir)
    backport_dir = os.path.join(series_dir, XEN_BACKPORTS)
    backports = {os.path.basename(p): p for p in glob.glob(os.path.join(backport_dir, "*.patch"))}
    # A backport whose patch was renamed or dropped would silently stop being applied.
    stray = sorted(set(backports) - {os.path.basename(p) for p in posted})
    if stray:
        raise ToolError("%s: %s replace%s no patch of the series in %s (a backport must carry the file name of "
                        "the patch it replaces; rename or remove it)"
                        % (os.path.relpath(backport_dir, REPO), ", ".join(stray), "s" if len(stray) == 1 else "",
                           os.path.relpath(series_dir, REPO)))
    return [backports.get(os.path.basename(p), p) for p in posted]


def patches(kind):
    if kind == "xen":
        return xen_series_for_testbed()
    return file_list("patches/%s/*.patch" % kind)


# The broken shape that every make test runs (tests/fixtures, tests/test_pool_safety.py): its
# debug kernel is built with the rest. The other shapes, in make test-all, are built there.
DEFAULT_RACE_FIXTURES = ("linux-broken/free-to-the-page-allocator.patch",)


# Fixes of stock Linux bugs that the testbed meets, applied to Debian's source before anything
# else in every kernel we build (vanilla too: it stays the source the series starts from).
LINUX_FIXES = "testbed/linux/fixes/*.patch"


def testbed_linux_series(broken=()):
    """The series, BROKEN fixtures if any, then the testbed-only patches (testbed/linux): PTE
    update modes on fork, the pool on bare metal, the study's fixed policy."""
    return patches("linux") + list(broken) + file_list("testbed/linux/*.patch")


class Part:
    """One cached build product."""

    name = None

    def inputs(self):
        """[(label, value)] where value is a string or a file path (hashed by content)."""
        raise NotImplementedError

    def _key(self):
        return hash_inputs(self.inputs())

    @property
    def key(self):
        if not hasattr(self, "_cached_key"):
            self._cached_key = self._key()
        return self._cached_key

    @property
    def dir(self):
        return os.path.join(CACHE, "parts", "%s-%s" % (self.name, self.key))

    def path(self, name):
        return os.path.join(self.dir, name)

    def manifest(self):
        with open(self.path("manifest.json")) as f:
            return json.load(f)

    def built(self):
        return os.path.exists(self.path("manifest.json"))

    def ensure(self):
        """Build unless cached; return the part's directory."""
        if self.built():
            log("%s: cached (%s)" % (self.name, self.dir))
            return self.dir
        os.makedirs(os.path.join(CACHE, "parts"), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix="%s-%s." % (self.name, self.key), dir=os.path.join(CACHE, "parts"))
        try:
            log("%s: building (key %s)" % (self.name, self.key))
            info = self.build(tmp) or {}
            info.update({"part": self.name, "key": self.key,
                         "inputs": [[k, os.path.relpath(v, REPO) if k.startswith("file:") else v]
                                    for k, v in self.inputs()]})
            with open(os.path.join(tmp, "manifest.json"), "w") as f:
                json.dump(info, f, indent=2)
            if os.path.exists(self.dir):
                shutil.rmtree(self.dir)
            os.rename(tmp, self.dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            # The source tree a build unpacked (work_dir()), kept only while it runs.
            for d in getattr(self, "work_dirs", ()):
                shutil.rmtree(d, ignore_errors=True)
        log("%s: built (%s)" % (self.name, self.dir))
        return self.dir

    def build(self, out):
        raise NotImplementedError

    def work_dir(self, name):
        d = work_dir(name)
        self.work_dirs = getattr(self, "work_dirs", []) + [d]
        return d


def downloads(*parts):
    return os.path.join(CACHE, "downloads", *parts)


def work_dir(name):
    """A fresh directory of its own for one build: two builds may run at once."""
    os.makedirs(os.path.join(CACHE, "work"), exist_ok=True)
    return tempfile.mkdtemp(prefix=name + ".", dir=os.path.join(CACHE, "work"))


def apply_patches(tree, series, logfile, label, source=None):
    """SOURCE (debian.Resolved) names the Debian version in a failure: after a fallback the
    series may not fit."""
    for p in series:
        log("%s: applying %s" % (label, os.path.basename(p)))
        try:
            run_logged(["patch", "-p1", "--forward", "--batch", "--fuzz=0", "-i", p], logfile, "%s: patch %s"
                       % (label, os.path.basename(p)), cwd=tree)
        except ToolError as e:
            if source is None:
                raise
            raise ToolError("%s does not apply to %s %s%s\n%s" % (os.path.relpath(p, REPO), source.wanted.label,
                                                                   source.version, source.gone_note(), e))


# A pinned version the archive no longer has is replaced by another (debian.resolve); the part
# is then keyed by the version taken too. The key of the pinned inputs stays the lookup key, so
# a part built from the pin is found without the network; a build that fell back leaves a note
# under downloads/resolved/ keyed by the pinned inputs, read offline, that adds the version taken.

def taken_note(part):
    return downloads("resolved", "%s-%s.json" % (part.name, hash_inputs(part.pinned_inputs())))


def resolved_inputs(part):
    note = taken_note(part)
    if not os.path.exists(note):
        return part.pinned_inputs()
    with open(note) as f:
        return part.pinned_inputs() + [("debian-taken", json.load(f)["taken"])]


def resolve(part, wanted, dest):
    """Download WANTED's files for PART's build: [debian.Resolved]. A version other than the pin
    re-keys PART, before Part.ensure() stores it."""
    loaded = {}
    res = [debian.resolve(w, dest, downloads("indices"), loaded) for w in wanted]
    taken = "; ".join(r.describe() for r in res if not r.is_pin)
    note = taken_note(part)
    if taken:
        os.makedirs(os.path.dirname(note), exist_ok=True)
        with open(note, "w") as f:
            json.dump({"taken": taken, "debian": [r.record() for r in res]}, f, indent=2)
    elif os.path.exists(note):
        os.unlink(note)
    part.__dict__.pop("_cached_key", None)
    return res


def gcc_version():
    return capture(["gcc", "-dumpfullversion"], "gcc --version").strip()


class Xen(Part):
    """Xen from Debian's source package, our patches on top, perf counters on."""

    name = "xen"

    def __init__(self, series=None, config=None):
        self.series = patches("xen") if series is None else series
        self.config = XEN_CONFIG + list(config or [])
        if "CONFIG_DEBUG=y" in self.config:
            self.name = "xen-debug"

    def testbed_patches(self):
        return file_list(os.path.relpath(os.path.join(XEN_TESTBED_PATCHES, "*.patch"), REPO))

    def version(self):
        return XEN_SOURCE_VERSION

    def inputs(self):
        return resolved_inputs(self)

    def pinned_inputs(self):
        return ([("xen-source", self.version()), ("gcc", gcc_version()), ("config", " ".join(self.config))]
                + [("file:patch", p) for p in self.series]
                + [("file:testbed-patch", p) for p in self.testbed_patches()])

    def build(self, out):
        tools.require("gcc", "make", "flex", "bison", "python3", "patch", "tar", "xz")
        source, = resolve(self, [XEN_DEBIAN], downloads("xen"))
        files = source.files
        work = self.work_dir("xen")
        tree = os.path.join(work, "src")
        logfile = os.path.join(out, "build.log")
        log("xen: unpacking %s" % ", ".join(sorted(files)))
        debian_patches = debian.unpack_source(files, tree, logfile)
        apply_patches(tree, self.series + self.testbed_patches(), logfile, "xen", source)
        with open(os.path.join(tree, "xen", ".config"), "w") as f:
            f.write("\n".join(self.config) + "\n")
        env, make = dict(os.environ), ["make", "-C", "xen"]
        if tools.have("ccache"):
            # Variants (debug, fixtures, prefixes) share most objects: hash relative paths only.
            env.update(CCACHE_DIR=os.path.join(CACHE, "ccache"), CCACHE_BASEDIR=work, CCACHE_NOHASHDIR="true",
                       CCACHE_MAXSIZE="5G")
            make.append("CC=ccache gcc")
        run_logged(make + ["olddefconfig"], logfile, "xen: config", cwd=tree, env=env)
        with open(os.path.join(tree, "xen", ".config")) as f:
            config = f.read().splitlines()
        for line in self.config:
            if line not in config:
                raise ToolError("xen: %s did not stick in the config (Kconfig refused it)" % line)
        run_logged(make + ["-j%d" % nproc()], logfile, "xen: build", cwd=tree, env=env,
                   count=r"^\s+CC\s")
        # QEMU's multiboot loader takes the ELF (xen/xen), not xen.gz: a gzip image hangs silently.
        shutil.copy(os.path.join(tree, "xen", "xen"), os.path.join(out, "xen"))
        shutil.copy(os.path.join(tree, "xen", ".config"), os.path.join(out, "config"))
        shutil.copytree(os.path.join(tree, "xen", "include", "public"), os.path.join(out, "include", "public"))
        version = xen_version(tree)
        shutil.rmtree(work)
        return {"xen_source_version": source.version, "debian": source.record(), "xen_version": version,
                "debian_patches": len(debian_patches),
                "patches": [os.path.basename(p) for p in self.series],
                "testbed_patches": [os.path.basename(p) for p in self.testbed_patches()],
                "config": self.config}


class DebianXen(Part):
    """Debian 13's prebuilt Xen of our source version, as it is (no perf counters, no marks)."""

    name = "xen-debian"

    def inputs(self):
        return resolved_inputs(self)

    def pinned_inputs(self):
        return [("package", "xen-hypervisor-4.20-amd64"), ("version", XEN_SOURCE_VERSION)]

    def build(self, out):
        image, = resolve(self, [XEN_HYPERVISOR_DEBIAN], downloads("deb"))
        deb, = image.files.values()
        with tempfile.TemporaryDirectory(dir=os.path.join(CACHE, "parts")) as tmp:
            debian.extract_deb(deb, tmp)
            gz = glob.glob(os.path.join(tmp, "boot", "xen-*.gz"))
            if len(gz) != 1:
                raise ToolError("%s holds %d boot/xen-*.gz, expected 1" % (deb, len(gz)))
            # QEMU's multiboot loader takes the ELF, not the gzip image.
            with open(os.path.join(out, "xen"), "wb") as f:
                subprocess.run(["gzip", "-dc", gz[0]], stdout=f, check=True)
        return {"package": image.packages[0], "version": image.version, "debian": image.record()}


def xen_version(tree):
    """'4.20.4-pre' etc. from the tree's own Makefile."""
    fields = {}
    with open(os.path.join(tree, "xen", "Makefile")) as f:
        for line in f:
            m = re.match(r"(?:export\s+)?(XEN_VERSION|XEN_SUBVERSION|XEN_EXTRAVERSION)\s*\??=\s*([^$\s]*)", line)
            if m:
                fields[m.group(1)] = m.group(2)
    return "%s.%s%s" % (fields.get("XEN_VERSION", "?"), fields.get("XEN_SUBVERSION", "?"),
                        fields.get("XEN_EXTRAVERSION", ""))


class Kernel(Part):
    """A dom0 kernel: 'vmlinuz' plus modules the guest must load ('modules/*.ko')."""

    def release(self):
        return self.manifest()["release"]


class DebianKernel(Kernel):
    """Debian's prebuilt 7.3 kernel (trixie-backports), as it is: the stock baseline."""

    name = "linux-debian"

    def package(self):
        return "linux-image-" + LINUX_RELEASE, LINUX_VERSION

    def inputs(self):
        return resolved_inputs(self)

    def pinned_inputs(self):
        pkg, ver = self.package()
        return [("package", pkg), ("version", ver)] + [("module", m) for m in DEBIAN_MODULES]

    def build(self, out):
        image, = resolve(self, [LINUX_IMAGE_DEBIAN], downloads("deb"))
        with tempfile.TemporaryDirectory(dir=os.path.join(CACHE, "parts")) as tmp:
            for deb in image.files.values():
                debian.extract_deb(deb, tmp)
            # Debian 13 installs the kernel, its config and modules under /usr/lib/modules/RELEASE.
            vmlinuz = glob.glob(os.path.join(tmp, "usr", "lib", "modules", "*", "vmlinuz"))
            if len(vmlinuz) != 1:
                raise ToolError("%s hold %d vmlinuz files, expected 1" % (", ".join(image.packages), len(vmlinuz)))
            moddir = os.path.dirname(vmlinuz[0])
            release = os.path.basename(moddir)
            shutil.copy(vmlinuz[0], os.path.join(out, "vmlinuz"))
            shutil.copy(os.path.join(moddir, "config"), os.path.join(out, "config"))
            os.makedirs(os.path.join(out, "modules"))
            for m in DEBIAN_MODULES:
                src = os.path.join(moddir, "kernel", m)
                if not os.path.exists(src):
                    raise ToolError("%s has no %s" % (", ".join(image.packages), m))
                dest = os.path.join(out, "modules", os.path.basename(m)[:-len(".xz")])
                with open(dest, "wb") as f:
                    subprocess.run(["xz", "-dc", src], stdout=f, check=True)
        return {"package": self.package()[0], "packages": image.packages, "version": image.version,
                "release": release, "debian": image.record()}


class BuiltKernel(Kernel):
    """linux-source-7.3 (trixie-backports) with testbed/linux/fixes/ and patches/linux/ applied, x86_64_defconfig +
    xen.config + our fragment. vanilla=True: the same source and config without the series,
    so that "off = stock" compares like with like.
    debug=True: the debug fragment (testbed/linux/debug.config) merged on top. no_pv=True:
    without Xen PV (testbed/linux/no-pv.config), for make check-series only."""

    name = "linux-built"

    def __init__(self, series=None, jobs=None, vanilla=False, debug=False, no_pv=False):
        if vanilla:
            self.name = "linux-vanilla"
            series = []
        self.fragments = ([LINUX_CONFIG] + ([LINUX_DEBUG_CONFIG] if debug else [])
                          + ([LINUX_NO_PV_CONFIG] if no_pv else []))
        if debug:
            self.name += "-debug"
        if no_pv:
            self.name += "-nopv"
        self.series = patches("linux") if series is None else series
        self.fixes = file_list(LINUX_FIXES)
        self.jobs = jobs or nproc()
        # A prefix of the series (or none) does not offer every option of the fragments
        # (the pool's KUnit suite needs patches/linux 0004): then a dropped line only warns.
        self.partial = (series is not None and series != patches("linux")) or no_pv

    def version(self):
        return LINUX_VERSION

    def inputs(self):
        return resolved_inputs(self)

    def pinned_inputs(self):
        return ([("linux-source", self.version()), ("gcc", gcc_version())]
                + [("file:config", f) for f in self.fragments] + [("file:fix", p) for p in self.fixes]
                + [("file:patch", p) for p in self.series])

    def build(self, out):
        tools.require("dpkg-deb", "gcc", "make", "flex", "bison", "bc", "patch", "xz")
        source, = resolve(self, [LINUX_SOURCE_DEBIAN], downloads("deb"))
        deb, = source.files.values()
        work = self.work_dir("linux")
        logfile = os.path.join(out, "build.log")
        log("linux: unpacking %s (1.5 GB tree, about a minute)" % os.path.basename(deb))
        tarball = "./usr/src/%s.tar.xz" % LINUX_SOURCE
        run_logged(["sh", "-c", "dpkg-deb --fsys-tarfile '%s' | tar -xO '%s' | tar -xJ" % (deb, tarball)],
                   logfile, "linux: unpack", cwd=work)
        tree = os.path.join(work, LINUX_SOURCE)
        apply_patches(tree, self.fixes + self.series, logfile, "linux", source)
        env = dict(os.environ)
        make = ["make", "-C", tree]
        if tools.have("ccache"):
            # Same compiler hits across work trees: hash relative paths only.
            env.update(CCACHE_DIR=os.path.join(CACHE, "ccache"), CCACHE_BASEDIR=work, CCACHE_NOHASHDIR="true",
                       CCACHE_MAXSIZE="5G")
            make.append("CC=ccache gcc")
        else:
            log("linux: ccache not installed, rebuilds will be slow (apt-get install ccache)")
        env.update(KBUILD_BUILD_TIMESTAMP="flushless", KBUILD_BUILD_USER="flushless", KBUILD_BUILD_HOST="testbed")
        run_logged(make + ["x86_64_defconfig"], logfile, "linux: defconfig", env=env)
        run_logged(make + ["xen.config"], logfile, "linux: xen.config", env=env)
        run_logged([os.path.join(tree, "scripts", "kconfig", "merge_config.sh"), "-m", "-O", tree,
                    os.path.join(tree, ".config")] + self.fragments, logfile, "linux: config fragments", cwd=tree,
                   env=env)
        run_logged(make + ["olddefconfig"], logfile, "linux: olddefconfig", env=env)
        for fragment in self.fragments:
            try:
                check_fragment(os.path.join(tree, ".config"), fragment)
            except ToolError as e:
                if not self.partial or fragment == LINUX_NO_PV_CONFIG:
                    raise
                log("%s (expected for a prefix of the series, or without Xen PV)" % e)
        log("linux: compiling bzImage with %d jobs (10-15 min cold, about 1 min from ccache)" % self.jobs)
        run_logged(make + ["-j%d" % self.jobs, "bzImage"], logfile, "linux: build", env=env,
                   count=r"^\s+CC\s")
        release = capture(make + ["-s", "kernelrelease"], "linux: kernelrelease", env=env).strip()
        shutil.copy(os.path.join(tree, "arch", "x86", "boot", "bzImage"), os.path.join(out, "vmlinuz"))
        shutil.copy(os.path.join(tree, ".config"), os.path.join(out, "config"))
        shutil.copy(os.path.join(tree, "System.map"), os.path.join(out, "System.map"))
        os.makedirs(os.path.join(out, "modules"))
        shutil.rmtree(work)
        return {"linux_source_version": source.version, "debian": source.record(), "release": release,
                "fixes": [os.path.basename(p) for p in self.fixes], "patches": [os.path.basename(p) for p in self.series]}


def check_fragment(config_path, fragment_path):
    """Every line of the fragment must hold in the final .config: a silently dropped
    option (a dependency missing) would build a kernel that is not what we asked for."""
    with open(config_path) as f:
        have = set(line.strip() for line in f)
    lost = []
    with open(fragment_path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("CONFIG_") and line not in have:
                lost.append(line)
            elif line.startswith("# CONFIG_") and line.endswith(" is not set"):
                sym = line.split()[1]
                if any(h.startswith(sym + "=") for h in have):
                    lost.append(line)
    if lost:
        raise ToolError("linux: config fragment lines that did not stick: %s" % ", ".join(lost))


class Busybox(Part):
    name = "busybox"

    def inputs(self):
        return [("package", "busybox-static"), ("version", debian.candidate("busybox-static"))]

    def build(self, out):
        ver = dict(self.inputs())["version"]
        deb = debian.download_binary("busybox-static", ver, downloads("deb"))
        with tempfile.TemporaryDirectory(dir=os.path.join(CACHE, "parts")) as tmp:
            debian.extract_deb(deb, tmp)
            shutil.copy(os.path.join(tmp, "bin", "busybox"), os.path.join(out, "busybox"))
        return {"busybox_version": ver}


# The testbed's QEMU: the upstream tarball of the source package that bookworm-backports builds
# its QEMU 10.0.2 from (the host's qemu-system-x86, testbed/install-deps.sh), with testbed/qemu's
# fixes, above all the SVM event injection that PVH guests met under -icount
# (docs/qemu-svm-evtinj.md). The mirror serves this .orig tarball and not the backport's .dsc or
# .debian.tar.xz, so Debian's own patches (packaging and build changes) are not applied. The
# firmware comes from the host's qemu-system-data of the same version (qemu.argv0's -L).
QEMU_ORIG = debian.Pin("pool/main/q/qemu/qemu_10.0.2+ds.orig.tar.xz",
                       "0901da33844a331bf8b3602b9c1fbd178e60b737c8e3ade678255bd090c9b9f1")
# The +ds tarball drops the wheels QEMU's configure installs meson from; the versions it pins.
QEMU_WHEELS = ("meson==1.5.0", "pycotap==1.3.1")
QEMU_CONFIGURE = ["--target-list=x86_64-softmmu", "--enable-tcg", "--enable-slirp", "--disable-kvm",
                  "--disable-xen", "--disable-user", "--disable-docs", "--disable-install-blobs",
                  "--disable-gtk", "--disable-sdl", "--disable-vnc", "--disable-opengl", "--disable-spice",
                  "--disable-werror"]


QEMU_SYSTEM = "qemu-system-x86_64"


class Qemu(Part):
    """qemu-system-x86_64 built from Debian's QEMU 10.0.2 source with testbed/qemu's patches."""

    name = "qemu"

    def patches(self):
        return file_list("testbed/qemu/*.patch")

    def inputs(self):
        return ([("orig", "%s %s" % (QEMU_ORIG.path, QEMU_ORIG.sha256)), ("wheels", " ".join(QEMU_WHEELS)),
                 ("configure", " ".join(QEMU_CONFIGURE)), ("gcc", gcc_version())]
                + [("file:patch", p) for p in self.patches()])

    def build(self, out):
        tools.require("gcc", "ninja", "pkg-config", "python3", "patch", "tar", "xz")
        orig = debian.fetch_file("%s/%s" % (debian.mirror_for_path(QEMU_ORIG.path), QEMU_ORIG.path),
                                 QEMU_ORIG.sha256, downloads("qemu"), "the sum recorded in flushless/testbed/build.py")
        work = self.work_dir("qemu")
        tree, logfile = os.path.join(work, "src"), os.path.join(out, "build.log")
        os.makedirs(tree)
        log("qemu: unpacking %s" % os.path.basename(orig))
        run_logged(["tar", "-xf", orig, "-C", tree, "--strip-components=1"], logfile, "qemu: unpack")
        apply_patches(tree, self.patches(), logfile, "qemu")
        run_logged(["python3", "-m", "pip", "download", "-q", "--no-deps", "-d", os.path.join(tree, "python", "wheels")]
                   + list(QEMU_WHEELS), logfile, "qemu: meson's wheels")
        env = dict(os.environ)
        # meson puts ccache in front of the compiler by itself when it finds it.
        env.update(CCACHE_DIR=os.path.join(CACHE, "ccache"), CCACHE_BASEDIR=work, CCACHE_NOHASHDIR="true",
                   CCACHE_MAXSIZE="5G")
        build_dir = os.path.join(tree, "build")
        os.makedirs(build_dir)
        run_logged(["../configure"] + QEMU_CONFIGURE, logfile, "qemu: configure", cwd=build_dir, env=env)
        log("qemu: compiling qemu-system-x86_64 with %d jobs (about 5 min cold on 2 cores)" % nproc())
        run_logged(["ninja", "-j%d" % nproc(), "qemu-system-x86_64"], logfile, "qemu: build", cwd=build_dir,
                   env=env, count=r"^\[\d+/\d+\] Compiling")
        binary = os.path.join(out, QEMU_SYSTEM)
        shutil.copy(os.path.join(build_dir, QEMU_SYSTEM), binary)
        version = capture([binary, "--version"], "the built QEMU's --version").splitlines()[0]
        shutil.rmtree(work)
        return {"qemu_version_line": version, "orig": QEMU_ORIG.name,
                "patches": [os.path.basename(p) for p in self.patches()], "configure": QEMU_CONFIGURE}


class Toolstack(Part):
    """xl, xenstored and xenconsoled with the libraries they load, as a cpio archive that is
    appended to dom0's initramfs only when a domU is asked for (testbed/guest/xenstack)."""

    name = "toolstack"

    def inputs(self):
        return resolved_inputs(self)

    def pinned_inputs(self):
        return ([("deb", "%s %s" % (pin.path, pin.sha256)) for pin in TOOLSTACK_DEBS]
                + [("program", p) for p in TOOLSTACK_PROGRAMS]
                + [("file:guest", p) for p in file_list("testbed/guest/xenstack")]
                + [("file:recipe", p) for p in file_list("flushless/testbed/build.py")])

    def build(self, out):
        tools.require("dpkg-deb", "readelf")
        tree = self.work_dir("toolstack")
        taken = resolve(self, TOOLSTACK_DEBIAN, downloads("deb"))
        for res in taken:
            for deb in res.files.values():
                debian.extract_deb(deb, tree)
        libdir = "usr/lib/x86_64-linux-gnu"
        wanted, todo = {}, list(TOOLSTACK_PROGRAMS) + [os.path.join(libdir, n) for n in TOOLSTACK_DLOPENED]
        while todo:
            rel = todo.pop()
            if rel in wanted:
                continue
            path = os.path.join(tree, rel)
            if not os.path.exists(path):
                raise ToolError("toolstack: %s is in none of the debs (TOOLSTACK_DEBS)" % rel)
            wanted[rel] = os.path.realpath(path)
            dynamic = capture(["readelf", "-d", path], "readelf %s" % rel)
            todo += [os.path.join(libdir, n) for n in re.findall(r"Shared library: \[(.*?)\]", dynamic)]

        def fill(w):
            for rel, path in sorted(wanted.items()):
                w.add_path(rel, path, 0o755)
            w.symlink("lib64/ld-linux-x86-64.so.2", "/%s/ld-linux-x86-64.so.2" % libdir)
            for prog in ("xl", "xenstored", "xenconsoled"):
                w.symlink("usr/sbin/" + prog, "/usr/lib/xen-4.20/bin/" + prog)
            w.add_path("bin/xenstack", os.path.join(REPO, "testbed", "guest", "xenstack"), 0o755)
            # xl's defaults are right here; without the file it warns on every command.
            w.file("etc/xen/xl.conf", b"# flushless: xl's built-in defaults\n")

        write_gz(os.path.join(out, "toolstack.cpio.gz"), fill)
        return {"debs": sorted(n for res in taken for n in res.files), "debian": [res.record() for res in taken],
                "files": sorted(wanted)}


class Initramfs(Part):
    """dom0's root: busybox, our init, the workloads and xenperfc, the kernel's modules."""

    name = "initramfs"

    def __init__(self, kernel, xen, busybox):
        self.kernel, self.xen, self.busybox = kernel, xen, busybox

    def inputs(self):
        return ([("kernel", self.kernel.key), ("xen", self.xen.key), ("busybox", self.busybox.key),
                 ("gcc", gcc_version())]
                + [("file:workload", p) for p in file_list("workloads/*.[ch]") + file_list("workloads/Makefile")]
                + [("file:guest", p) for p in file_list("testbed/guest/*")]
                # Cheap to rebuild, so its recipe is an input too.
                + [("file:recipe", p) for p in file_list("flushless/testbed/build.py") + file_list("flushless/testbed/cpio.py")])

    def build(self, out):
        tools.require("gcc", "make")
        for part in (self.kernel, self.xen, self.busybox):
            part.ensure()
        bindir = os.path.join(out, "bin")
        logfile = os.path.join(out, "build.log")
        run_logged(["make", "-C", os.path.join(REPO, "workloads"), "OUT=" + bindir], logfile, "workloads: build")
        guest = os.path.join(REPO, "testbed", "guest")
        # dom0's tools talk to the Xen under test: built against its public headers.
        with open(self.xen.path("include/public/domctl.h")) as f:
            series_abi = "XEN_DOMCTL_pv_iommu_audit" in f.read()
        for src in file_list("testbed/guest/*.c"):
            prog = os.path.basename(src)[:-2]
            try:
                run_logged(["gcc", "-O2", "-static", "-Wall", "-Wextra", "-Werror", "-I", self.xen.path("include"),
                            "-o", os.path.join(bindir, prog), src], logfile, "%s: build" % prog)
            except ToolError:
                if series_abi:
                    raise
                # A Xen without patches/xen/0002-0004 (a prefix of the series): no audit, no marks.
                log("%s: not built, this Xen lacks the no-DMA marks and the audit" % prog)

        def fill(w):
            for d in ("dev", "proc", "sys", "tmp", "run", "root", "sbin", "usr/bin", "usr/sbin"):
                w.mkdir(d)
            w.chardev("dev/console", 5, 1)
            w.chardev("dev/null", 1, 3, 0o666)
            w.add_path("bin/busybox", self.busybox.path("busybox"), 0o755)
            w.symlink("bin/sh", "busybox")
            w.add_path("init", os.path.join(guest, "init"), 0o755)
            for script in ("measure", "study", "domu", "domu-measure", "guestboot", "guestrun", "xen-block-phy"):
                w.add_path("bin/" + script, os.path.join(guest, script), 0o755)
            for prog in sorted(os.listdir(bindir)):
                if prog.endswith(".o"):
                    continue
                w.add_path("opt/flushless/bin/" + prog, os.path.join(bindir, prog), 0o755)
            for mod in sorted(glob.glob(self.kernel.path("modules/*.ko"))):
                w.add_path("lib/modules/" + os.path.basename(mod), mod, 0o644)

        write_gz(os.path.join(out, "initramfs.cpio.gz"), fill)
        shutil.rmtree(bindir)
        return {"programs": sorted(os.listdir(os.path.join(REPO, "workloads")))}


class GuestBundle(Part):
    """dom0's initramfs for boots with a domU: dom0's own archive, the toolstack's, and the
    domU's kernel and ramdisk under /opt/flushless/domu (our kernel and dom0's archive:
    testbed/guest/init starts a domU's shell there). Linux unpacks concatenated archives."""

    name = "guest-bundle"

    def __init__(self, kernel, initramfs, toolstack):
        self.kernel, self.initramfs, self.toolstack = kernel, initramfs, toolstack

    def inputs(self):
        return [("kernel", self.kernel.key), ("initramfs", self.initramfs.key), ("toolstack", self.toolstack.key)]

    def build(self, out):
        for part in (self.kernel, self.initramfs, self.toolstack):
            part.ensure()
        dom0 = self.initramfs.path("initramfs.cpio.gz")
        payload = os.path.join(out, "domu.cpio.gz")

        def fill(w):
            w.add_path("opt/flushless/domu/vmlinuz", self.kernel.path("vmlinuz"), 0o644)
            w.add_path("opt/flushless/domu/initramfs.cpio.gz", dom0, 0o644)

        write_gz(payload, fill)
        with open(os.path.join(out, "initramfs.cpio.gz"), "wb") as f:
            for archive in (dom0, self.toolstack.path("toolstack.cpio.gz"), payload):
                with open(archive, "rb") as src:
                    shutil.copyfileobj(src, f)
        os.unlink(payload)
        return {"bytes": os.path.getsize(os.path.join(out, "initramfs.cpio.gz"))}


def kernel_part(which, linux_series=None, debug=False):
    if which == "debian":
        return DebianKernel()
    if which == "built":
        return BuiltKernel(series=linux_series, debug=debug)
    if which == "vanilla":
        return BuiltKernel(vanilla=True)
    raise ToolError("unknown kernel '%s' (debian, built or vanilla)" % which)


class Parts:
    """The set of parts one testbed boot needs."""

    def __init__(self, kernel="debian", xen_series=None, linux_series=None, guest=False, debug=False):
        """DEBUG: Xen with its ASSERTs, and the built kernel (not Debian's) with
        testbed/linux/debug.config."""
        self.xen = Xen(series=xen_series, config=XEN_DEBUG_CONFIG if debug else None)
        self.kernel = kernel_part(kernel, linux_series, debug and kernel == "built")
        self.busybox = Busybox()
        self.initramfs = Initramfs(self.kernel, self.xen, self.busybox)
        # A boot with a domU: dom0 gets the toolstack and the domU's files as well.
        self.guest_bundle = GuestBundle(self.kernel, self.initramfs, Toolstack()) if guest else None

    def ensure(self):
        for part in (self.xen, self.kernel, self.busybox, self.initramfs, self.guest_bundle):
            if part is not None:
                part.ensure()
        return self

    def dom0_initramfs(self):
        return (self.guest_bundle or self.initramfs).path("initramfs.cpio.gz")

    def versions(self):
        out = {}
        for part in (self.xen, self.kernel, self.busybox):
            m = part.manifest()
            out[part.name] = {k: v for k, v in m.items() if k not in ("inputs", "part")}
        return out


def clean_stale():
    """Remove half-built parts left by an interrupted build (names with a '.' suffix)."""
    for d in glob.glob(os.path.join(CACHE, "parts", "*.*")):
        if os.path.isdir(d):
            shutil.rmtree(d, ignore_errors=True)


