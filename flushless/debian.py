"""Debian packages: download and unpack them.

The Debian 13 parts the series is written against are pinned by pool path and sha256
(flushless/build.py): point releases replace them in apt's lists, and a mirror may list a
source whose files it does not serve. Host tools (busybox) come from the host's own lists.
"""

import glob
import hashlib
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request

from . import tools
from .progress import ToolError, capture, log, run_logged

MIRROR = os.environ.get("FLUSHLESS_DEBIAN_MIRROR", "http://deb.debian.org/debian").rstrip("/")


def candidate(package):
    """The version apt would install of a binary package."""
    tools.require("apt-get")
    out = capture(["apt-cache", "policy", package], "apt-cache policy %s" % package)
    m = re.search(r"Candidate:\s*(\S+)", out)
    if not m or m.group(1) == "(none)":
        raise ToolError("Debian package '%s' not found in apt's lists; run 'apt-get update' "
                        "(run 'make deps', which adds the sources the testbed needs)" % package)
    return m.group(1)


def download_binary(package, version, dest):
    """Download PACKAGE=VERSION's .deb into DEST (once); return its path."""
    os.makedirs(dest, exist_ok=True)
    pattern = os.path.join(dest, "%s_%s_*.deb" % (package, version.replace(":", "%3a")))
    found = glob.glob(pattern)
    if not found:
        log("downloading %s %s" % (package, version))
        capture_in(dest, ["apt-get", "download", "%s=%s" % (package, version)],
                   "download of %s %s" % (package, version))
        found = glob.glob(pattern)
    if not found:
        raise ToolError("apt-get download %s=%s left no .deb in %s" % (package, version, dest))
    return found[0]


class Pin:
    """One file of Debian's archive, by its path in the pool and its sha256."""

    def __init__(self, path, sha256):
        self.path, self.sha256 = path, sha256

    @property
    def name(self):
        return os.path.basename(self.path)


def fetch_pinned(pin, dest):
    """Download PIN into DEST (once) from MIRROR's pool, checked against its sha256; return
    its path. The pool keeps a file for a while after apt's lists stop naming it."""
    os.makedirs(dest, exist_ok=True)
    path = os.path.join(dest, pin.name)
    if os.path.exists(path) and sha256_of(path) == pin.sha256:
        return path
    url = "%s/%s" % (MIRROR, pin.path)
    log("downloading %s" % url)
    tmp = path + ".part"
    try:
        with urllib.request.urlopen(url, timeout=60) as res, open(tmp, "wb") as f:
            shutil.copyfileobj(res, f, 1 << 20)
    except (OSError, urllib.error.URLError) as e:
        raise ToolError("download of %s failed: %s (the archive may have dropped it: see the pins in "
                        "flushless/build.py; FLUSHLESS_DEBIAN_MIRROR picks another mirror)" % (url, e))
    got = sha256_of(tmp)
    if got != pin.sha256:
        os.unlink(tmp)
        raise ToolError("%s: sha256 %s, the pin says %s (removed)" % (url, got, pin.sha256))
    os.replace(tmp, path)
    return path


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def unpack_source(files, tree, logfile):
    """Unpack a 3.0 (quilt) source package without its .dsc: the upstream tarball, then
    debian/ over it, then debian/patches/series in order (what dpkg-source -x does)."""
    orig = [p for n, p in files.items() if ".orig.tar." in n]
    deb = [p for n, p in files.items() if ".debian.tar." in n]
    if len(orig) != 1 or len(deb) != 1:
        raise ToolError("expected one .orig and one .debian tarball, got %s" % ", ".join(sorted(files)))
    os.makedirs(tree)
    run_logged(["tar", "-xf", orig[0], "-C", tree, "--strip-components=1"], logfile, "unpack %s" % orig[0])
    run_logged(["tar", "-xf", deb[0], "-C", tree], logfile, "unpack %s" % deb[0])
    series = os.path.join(tree, "debian", "patches", "series")
    if not os.path.exists(series):
        return []
    applied = []
    with open(series) as f:
        for line in f:
            name = line.split("#")[0].strip()
            if not name:
                continue
            run_logged(["patch", "-p1", "--batch", "--forward", "-i", os.path.join("debian", "patches", name)],
                       logfile, "debian patch %s" % name, cwd=tree)
            applied.append(name)
    return applied


def extract_deb(deb, dest):
    tools.require("dpkg-deb")
    capture(["dpkg-deb", "-x", deb, dest], "unpacking %s" % deb)


def capture_in(cwd, cmd, what):
    res = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise ToolError("%s failed: %s\n%s" % (what, " ".join(cmd), res.stdout.strip()[-2000:]))
