"""Debian packages: resolve them through the archive's signed indices, download, unpack.

The Debian 13 parts the series is written against are named in flushless/testbed/build.py by suites,
package, upstream series and a pinned version (Wanted). resolve() finds them as apt would:
dists/SUITE/InRelease verified with gpgv, Sources.xz / Packages.xz checked against it, the
files checked against the index. Point releases drop versions from the indices (the pool keeps
their files a while): a pinned version no longer listed is taken with the sum recorded in
build.py, and one no longer served falls back to the newest of its series (docs/sources.md).
Host tools (busybox) come from the host's own lists.
"""

import datetime
import email.utils
import functools
import glob
import hashlib
import http.client
import lzma
import os
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request

from .. import tools
from ..progress import ToolError, capture, log, run_logged

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY_MIRROR = "http://deb.debian.org/debian-security"
DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


# Read at call time, not import: the tests point them at a fixture mirror.
def mirror():
    return os.environ.get("FLUSHLESS_DEBIAN_MIRROR", DEFAULT_MIRROR).rstrip("/")


def security_mirror():
    return os.environ.get("FLUSHLESS_DEBIAN_SECURITY_MIRROR", DEFAULT_SECURITY_MIRROR).rstrip("/")


def keyring():
    return os.environ.get("FLUSHLESS_DEBIAN_KEYRING", DEFAULT_KEYRING)


def mirror_for(suite):
    """The archive that carries SUITE: Debian keeps the security suites apart."""
    return security_mirror() if suite.endswith("-security") else mirror()


def mirror_for_path(path):
    return security_mirror() if path.startswith("pool/updates/") else mirror()


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
    """One file of Debian's archive, by its path in the pool and a sha256 recorded in build.py
    (from an earlier signed index, or at first download)."""

    def __init__(self, path, sha256):
        self.path, self.sha256 = path, sha256

    @property
    def name(self):
        return os.path.basename(self.path)

    @property
    def package(self):
        """A .deb's package name, from its pool file name (NAME_VERSION_ARCH.deb)."""
        return self.name.split("_")[0]

    @property
    def version(self):
        return urllib.parse.unquote(self.name.split("_")[1])


class Wanted:
    """A Debian part as the build names it: PACKAGES (binary, or one source with SOURCE=True)
    at the pinned VERSION, looked up in SUITES; a fallback stays within the upstream SERIES.
    PATTERNS maps a package to a regex for names that change with the version (a kernel
    image carries its ABI: linux-image-6.12.117+deb13-amd64). RECORDED are Pins of the pinned
    version's files, used when the indices no longer list it. Several PACKAGES are taken at
    one version (the toolstack's binaries of one Xen source)."""

    def __init__(self, packages, version, series, suites, source=False, patterns=None, recorded=(), label=None):
        self.packages, self.version, self.series, self.suites = list(packages), version, series, tuple(suites)
        self.source, self.patterns, self.recorded = source, dict(patterns or {}), list(recorded)
        self.label = label or self.packages[0]

    @classmethod
    def debs(cls, pins, suites, series=None, label=None):
        """The binary packages of PINS (one version), fallback within SERIES (default: the
        pinned upstream version's first two components)."""
        version = pins[0].version
        if any(p.version != version for p in pins):
            raise ToolError("%s: the pins are not of one version" % (label or pins[0].package))
        if series is None:
            series = ".".join(re.split(r"[.+~-]", upstream(version))[:2])
        return cls([p.package for p in pins], version, series, suites, recorded=pins, label=label)

    def is_pin(self, version):
        # A pool file name carries no epoch: a pin read from one matches any epoch.
        return version == self.version or (":" not in self.version and version.partition(":")[2] == self.version)

    def in_series(self, version):
        return re.match(re.escape(self.series) + r"([.+~]|$)", upstream(version)) is not None

    def name_matcher(self, package):
        return re.compile(self.patterns.get(package, re.escape(package)))


# Debian version order, as dpkg --compare-versions.

def split_version(v):
    epoch, _, rest = v.partition(":") if ":" in v else ("0", "", v)
    up, _, rev = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return int(epoch or 0), up, rev


def upstream(v):
    return split_version(v)[1]


def _order(c):
    if c == "~":
        return -1
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def _compare_part(a, b):
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) and not a[i].isdigit() else 0
            bc = _order(b[j]) if j < len(b) and not b[j].isdigit() else 0
            if ac != bc:
                return ac - bc
            i, j = i + 1, j + 1
        m = re.match(r"0*(\d*)", a[i:])
        n = re.match(r"0*(\d*)", b[j:])
        i, j = i + m.end(), j + n.end()
        x, y = m.group(1), n.group(1)
        if len(x) != len(y):
            return len(x) - len(y)
        if x != y:
            return -1 if x < y else 1
    return 0


def compare_versions(a, b):
    """<0, 0, >0 as Debian orders versions A and B (7.3.4-1~bpo13+1 < 7.3.4-1)."""
    ea, ua, ra = split_version(a)
    eb, ub, rb = split_version(b)
    if ea != eb:
        return ea - eb
    return _compare_part(ua, ub) or _compare_part(ra, rb)


def newest_first(versions):
    return sorted(versions, key=functools.cmp_to_key(compare_versions), reverse=True)


# deb822: the stanza format of InRelease, Sources and Packages.

def parse_deb822(text, what="deb822 text"):
    """[{field: value}]; a continued field keeps its lines, joined by newlines."""
    stanzas, cur, key = [], {}, None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            if cur:
                stanzas.append(cur)
            cur, key = {}, None
        elif line[0] in " \t":
            if key is None:
                raise ToolError("%s line %d: a continuation line with no field" % (what, n))
            cur[key] += "\n" + line.strip()
        elif not line.startswith("#"):
            field, sep, value = line.partition(":")
            if not sep:
                raise ToolError("%s line %d: not 'Field: value': %r" % (what, n, line[:80]))
            key = field.strip()
            cur[key] = value.strip()
    if cur:
        stanzas.append(cur)
    return stanzas


def checksums(value):
    """[(sha256, size, name)] of a multi-line checksum field (InRelease SHA256, Checksums-Sha256)."""
    out = []
    for line in value.splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((parts[0], int(parts[1]), parts[2]))
    return out


# The signed indices of one suite.

class Unreachable(ToolError):
    """A suite's index could not be had (network, mirror); other suites may still do."""


class Index:
    """One suite's InRelease (verified) and the lists it vouches for, cached under
    INDEX_DIR/SUITE/HASH/ where HASH is the InRelease's sha256: a second build is a lookup."""

    def __init__(self, suite, base, directory, release):
        self.suite, self.base, self.dir, self.release = suite, base, directory, release
        self.hashes = {name: (sha, size) for sha, size, name in checksums(release.get("SHA256", ""))}
        self._names = {}

    def stanzas(self, kind):
        """{package name: [stanza text]} of main/source/Sources.xz or main/binary-amd64/Packages.xz."""
        if kind not in self._names:
            self._names[kind] = _by_name(_read_xz(self._list(kind)))
        return self._names[kind]

    def _list(self, kind):
        rel = "main/source/Sources.xz" if kind == "source" else "main/binary-amd64/Packages.xz"
        if rel not in self.hashes:
            raise ToolError("the InRelease of %s lists no %s" % (self.suite, rel))
        sha, size = self.hashes[rel]
        path = os.path.join(self.dir, rel.replace("/", "_"))
        if os.path.exists(path) and sha256_of(path) == sha:
            return path
        url = "%s/dists/%s/%s" % (self.base, self.suite, rel)
        log("downloading %s" % url)
        try:
            _get(url, path + ".part")
        except (OSError, http.client.HTTPException) as e:
            raise Unreachable("%s: %s" % (url, e))
        got, got_size = sha256_of(path + ".part"), os.path.getsize(path + ".part")
        if got != sha or got_size != size:
            os.unlink(path + ".part")
            raise ToolError("%s: sha256 %s, %d bytes; the signed InRelease of %s says %s, %d bytes "
                            "(a broken or tampered mirror: FLUSHLESS_DEBIAN_MIRROR picks another)"
                            % (url, got, got_size, self.suite, sha, size))
        os.replace(path + ".part", path)
        return path


_LISTS = {}


def _read_xz(path):
    if path not in _LISTS:
        with lzma.open(path, "rt", encoding="utf-8", errors="replace") as f:
            _LISTS[path] = f.read()
    return _LISTS[path]


def _by_name(text):
    """Index a list's stanzas by package name without parsing them all (trixie's Packages
    holds some 70000)."""
    out = {}
    for chunk in text.split("\n\n"):
        m = re.search(r"^Package:\s*(\S+)", chunk, re.M)
        if m:
            out.setdefault(m.group(1), []).append(chunk)
    return out


def load_suite(suite, index_dir):
    """SUITE's verified Index. A mirror that cannot be reached falls back to the newest cached
    InRelease (verified again, Valid-Until checked), so that a rebuild works offline."""
    base = mirror_for(suite)
    url = "%s/dists/%s/InRelease" % (base, suite)
    os.makedirs(os.path.join(index_dir, suite), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="InRelease.", dir=os.path.join(index_dir, suite))
    os.close(fd)
    os.chmod(tmp, 0o644)
    try:
        try:
            _get(url, tmp)
        except (OSError, http.client.HTTPException) as e:
            return _cached_suite(suite, base, index_dir, "%s: %s" % (url, e))
        release = verify_release(tmp, suite, url)
        directory = os.path.join(index_dir, suite, sha256_of(tmp)[:16])
        os.makedirs(directory, exist_ok=True)
        os.replace(tmp, os.path.join(directory, "InRelease"))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return Index(suite, base, directory, release)


def _cached_suite(suite, base, index_dir, why):
    cached = sorted(glob.glob(os.path.join(index_dir, suite, "*", "InRelease")), key=os.path.getmtime)
    if not cached:
        raise Unreachable(why)
    path = cached[-1]
    try:
        release = verify_release(path, suite, path)
    except ToolError as e:
        raise Unreachable("%s; the cached copy is no use: %s" % (why, e))
    log("%s; using the cached InRelease of %s (%s)" % (why, suite, release.get("Date", "undated")))
    return Index(suite, base, os.path.dirname(path), release)


def verify_release(path, suite, where):
    """The fields of a clearsigned InRelease once gpgv vouches for it: only the signed text
    is read. It must name SUITE and not be past its Valid-Until."""
    ring = keyring()
    if not os.path.exists(ring):
        raise ToolError("keyring %s not found (apt-get install debian-archive-keyring, or set "
                        "FLUSHLESS_DEBIAN_KEYRING)" % ring)
    tools.require("gpgv")
    with tempfile.TemporaryDirectory() as d:
        signed = os.path.join(d, "Release")
        res = subprocess.run(["gpgv", "--keyring", ring, "--status-fd", "1", "--output", signed, path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        status = res.stdout.splitlines()
        # As apt: one good signature by a key of the keyring, and no bad one.
        good = any(s.startswith("[GNUPG:] GOODSIG ") for s in status)
        bad = [s for s in status if re.match(r"\[GNUPG:\] (BADSIG|EXPKEYSIG|REVKEYSIG) ", s)]
        if not good or bad or not os.path.exists(signed):
            raise ToolError("%s: bad or missing signature (gpgv --keyring %s): %s"
                            % (where, ring, (res.stderr.strip() or "no good signature").replace("\n", "; ")))
        with open(signed, encoding="utf-8", errors="replace") as f:
            stanzas = parse_deb822(f.read(), where)
    if len(stanzas) != 1:
        raise ToolError("%s: expected one Release stanza, got %d" % (where, len(stanzas)))
    release = stanzas[0]
    if suite not in (release.get("Codename"), release.get("Suite")):
        raise ToolError("%s: signed for %s/%s, not %s" % (where, release.get("Suite"), release.get("Codename"), suite))
    if "Valid-Until" in release:
        until = email.utils.parsedate_to_datetime(release["Valid-Until"])
        if until.tzinfo is None:
            until = until.replace(tzinfo=datetime.timezone.utc)
        if until < datetime.datetime.now(datetime.timezone.utc):
            raise ToolError("%s: expired (Valid-Until %s): the mirror serves stale indices"
                            % (where, release["Valid-Until"]))
    return release


# Resolution.

class Resolved:
    """What resolve() took: VERSION of PACKAGES from SUITE, its FILES ({name: path}) checked
    by VERIFIED_BY ('signed-index SUITE' or 'recorded-sum')."""

    def __init__(self, wanted, version, packages, suite, verified_by, files):
        self.wanted, self.version, self.packages, self.suite = wanted, version, packages, suite
        self.verified_by, self.files = verified_by, files

    @property
    def is_pin(self):
        return self.wanted.is_pin(self.version)

    def describe(self):
        return "%s %s" % (" ".join(self.packages), self.version)

    def record(self):
        """For the part's manifest, hence every result JSON."""
        out = {"suite": self.suite, "package": self.wanted.label, "version": self.version,
               "pinned": self.wanted.version, "is_pin": self.is_pin, "verified_by": self.verified_by}
        if self.packages != [self.wanted.label]:
            out["packages"] = self.packages
        return out

    def gone_note(self):
        return "" if self.is_pin else " (the pinned %s is gone from the archive)" % self.wanted.version


class Candidate:
    """One version of a Wanted that one suite's index lists, with its files."""

    def __init__(self, index, version, stanzas, source):
        self.index, self.version, self.source = index, version, source
        self.packages = [s["Package"] for s in stanzas]
        self.files = []   # (pool path, sha256, size)
        for s in stanzas:
            if source:
                # The tarballs only: unpack_source needs no .dsc (and for Xen it was never served).
                self.files += [("%s/%s" % (s["Directory"], name), sha, size)
                               for sha, size, name in checksums(s.get("Checksums-Sha256", ""))
                               if not name.endswith(".dsc")]
            else:
                self.files.append((s["Filename"], s["SHA256"], int(s.get("Size", -1))))


def candidates(wanted, index):
    """[Candidate] of WANTED's series in INDEX, newest first: versions at which every package
    is listed."""
    lists = index.stanzas("source" if wanted.source else "binary")
    per_package = []
    for package in wanted.packages:
        matcher = wanted.name_matcher(package)
        names = [package] if package not in wanted.patterns else [n for n in lists if matcher.fullmatch(n)]
        found = {}
        for name in names:
            for chunk in lists.get(name, ()):
                stanza = parse_deb822(chunk, "%s of %s" % (name, index.suite))[0]
                if wanted.in_series(stanza.get("Version", "")):
                    found.setdefault(stanza["Version"], stanza)
        per_package.append(found)
    versions = set(per_package[0]).intersection(*per_package[1:]) if per_package else set()
    return [Candidate(index, v, [f[v] for f in per_package], wanted.source) for v in newest_first(versions)]


def resolve(wanted, dest, index_dir, loaded=None):
    """Download WANTED's files into DEST and return a Resolved. In order: (1) the pinned
    version where a signed index lists it; (2) the pinned version from the pool, checked
    against the sums recorded in build.py; (3) the newest version of the series that an index
    lists and the mirror serves; (4) a ToolError saying what each suite offered. LOADED
    ({suite: Index or Unreachable}) shares the indices between the parts of one build."""
    loaded = {} if loaded is None else loaded
    indices, offered = [], {}
    for suite in wanted.suites:
        if suite not in loaded:
            try:
                loaded[suite] = load_suite(suite, index_dir)
            except Unreachable as e:
                log("index of %s unusable: %s" % (suite, e))
                loaded[suite] = e
        if isinstance(loaded[suite], Unreachable):
            offered[suite] = "nothing: index unusable (%s)" % loaded[suite]
        else:
            indices.append(loaded[suite])
    found = []
    for index in indices:
        cands = candidates(wanted, index)
        offered[index.suite] = ", ".join(c.version for c in cands) or "nothing of series %s" % wanted.series
        found += cands
    # Newest first; a version several suites list is tried in the order of SUITES.
    found.sort(key=functools.cmp_to_key(lambda a, b: compare_versions(b.version, a.version)))
    tried = []
    pinned = [c for c in found if wanted.is_pin(c.version)]
    for cand in pinned:
        res = _take(wanted, cand, dest, tried, check_first=False)
        if res:
            return res
    if not pinned and wanted.recorded:
        res = _take_recorded(wanted, dest, tried)
        if res:
            return res
    for cand in found:
        if wanted.is_pin(cand.version):
            continue
        res = _take(wanted, cand, dest, tried, check_first=True)
        if res:
            log("WARNING: %s: pinned %s is gone from the archive; using %s from %s"
                % (wanted.label, wanted.version, res.version, res.suite))
            return res
    raise ToolError("no usable %s of series %s: pinned %s; suites searched: %s%s"
                    % (wanted.label, wanted.series, wanted.version,
                       "; ".join("%s offers %s" % (s, offered[s]) for s in wanted.suites),
                       "".join("\n  " + t for t in tried)))


def _take(wanted, cand, dest, tried, check_first):
    """CAND's files in DEST, or None (noted in TRIED) when the mirror does not serve them. A
    fallback is checked with HEAD first: its files may be large."""
    base = cand.index.base
    if check_first:
        for path, _sha, _size in cand.files:
            try:
                _head("%s/%s" % (base, path))
            except (OSError, http.client.HTTPException) as e:
                tried.append("%s %s from %s: %s/%s not served (%s)" % (wanted.label, cand.version, cand.index.suite,
                                                                     base, path, e))
                return None
    files = {}
    for path, sha, _size in cand.files:
        try:
            files[os.path.basename(path)] = fetch_file("%s/%s" % (base, path), sha, dest, "the signed index of %s"
                                                       % cand.index.suite)
        except Unserved as e:
            tried.append("%s %s from %s: %s" % (wanted.label, cand.version, cand.index.suite, e))
            return None
    return Resolved(wanted, cand.version, cand.packages, cand.index.suite, "signed-index " + cand.index.suite, files)


def _take_recorded(wanted, dest, tried):
    log("%s: pinned %s is in none of the signed indices of %s; taking it from the pool, checked "
        "against the sums recorded in flushless/testbed/build.py (verified_by recorded-sum)"
        % (wanted.label, wanted.version, ", ".join(wanted.suites)))
    files = {}
    for pin in wanted.recorded:
        url = "%s/%s" % (mirror_for_path(pin.path), pin.path)
        try:
            files[pin.name] = fetch_file(url, pin.sha256, dest, "the sum recorded in flushless/testbed/build.py")
        except Unserved as e:
            tried.append("%s %s (recorded sums): %s" % (wanted.label, wanted.version, e))
            return None
    return Resolved(wanted, wanted.version, list(wanted.packages), None, "recorded-sum", files)


class Unserved(ToolError):
    """The mirror does not serve a file (404, network)."""


def fetch_file(url, sha256, dest, vouched_by):
    """URL's file in DEST (once), checked against SHA256; return its path. Unserved when the
    mirror does not serve it, ToolError when it is not what VOUCHED_BY says."""
    os.makedirs(dest, exist_ok=True)
    path = os.path.join(dest, os.path.basename(url))
    if os.path.exists(path) and sha256_of(path) == sha256:
        return path
    log("downloading %s" % url)
    tmp = path + ".part"
    try:
        _get(url, tmp)
    except (OSError, http.client.HTTPException) as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise Unserved("%s not served (%s)" % (url, e))
    got = sha256_of(tmp)
    if got != sha256:
        os.unlink(tmp)
        raise ToolError("%s: sha256 %s, %s says %s (removed)" % (url, got, vouched_by, sha256))
    os.replace(tmp, path)
    return path


def _get(url, path):
    with urllib.request.urlopen(url, timeout=60) as res, open(path, "wb") as f:
        shutil.copyfileobj(res, f, 1 << 20)


def _head(url):
    # file:// ignores the method: opening it is the check.
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60):
        pass


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
