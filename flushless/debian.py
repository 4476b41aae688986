"""Debian packages: resolve versions from apt's lists, download and unpack them.

Versions move with point releases (a kernel ABI number changes, an old source version
disappears), so nothing here is pinned beyond what the testbed needs; every build records
the exact versions it used.
"""

import glob
import os
import re
import subprocess

from . import tools
from .progress import ToolError, capture, log


def candidate(package):
    """The version apt would install of a binary package."""
    tools.require("apt-get")
    out = capture(["apt-cache", "policy", package], "apt-cache policy %s" % package)
    m = re.search(r"Candidate:\s*(\S+)", out)
    if not m or m.group(1) == "(none)":
        raise ToolError("Debian package '%s' not found in apt's lists; run 'apt-get update' "
                        "(bookworm main and bookworm-security must be in the sources)" % package)
    return m.group(1)


def depends(package):
    """Names of the packages PACKAGE depends on (first alternative of each)."""
    out = capture(["apt-cache", "depends", package], "apt-cache depends %s" % package)
    return re.findall(r"^\s+Depends:\s*(\S+)", out, re.M)


def source_versions(source):
    out = capture(["apt-cache", "showsrc", source], "apt-cache showsrc %s" % source)
    return re.findall(r"^Version:\s*(\S+)", out, re.M)


def source_version(source, upstream_prefix):
    """Newest source version of SOURCE whose upstream part starts with UPSTREAM_PREFIX."""
    versions = source_versions(source)
    if not versions:
        raise ToolError("no source package '%s' in apt's lists: add 'deb-src' to the Types: line of "
                        "/etc/apt/sources.list.d/debian.sources and run 'apt-get update' "
                        "(or run 'make deps')" % source)
    match = [v for v in versions if v.startswith(upstream_prefix)]
    if not match:
        raise ToolError("Debian has no %s source version %s* (it has: %s)"
                        % (source, upstream_prefix, ", ".join(versions)))
    best = match[0]
    for v in match[1:]:
        if subprocess.run(["dpkg", "--compare-versions", v, "gt", best]).returncode == 0:
            best = v
    return best


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


def download_source(source, version, dest):
    """Download SOURCE=VERSION's source package into DEST (once); return the .dsc path."""
    os.makedirs(dest, exist_ok=True)
    upstream = version.split(":")[-1]
    dsc = os.path.join(dest, "%s_%s.dsc" % (source, upstream))
    if not os.path.exists(dsc):
        log("downloading source %s %s" % (source, version))
        capture_in(dest, ["apt-get", "source", "--download-only", "%s=%s" % (source, version)],
                   "source download of %s %s" % (source, version))
    if not os.path.exists(dsc):
        raise ToolError("apt-get source left no %s" % dsc)
    return dsc


def extract_deb(deb, dest):
    tools.require("dpkg-deb")
    capture(["dpkg-deb", "-x", deb, dest], "unpacking %s" % deb)


def capture_in(cwd, cmd, what):
    res = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise ToolError("%s failed: %s\n%s" % (what, " ".join(cmd), res.stdout.strip()[-2000:]))
