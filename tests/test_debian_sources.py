"""Resolution of Debian parts through signed indices (flushless/testbed/debian.py, docs/sources.md),
against a fixture mirror in tmp_path signed with a throwaway key. No network, except
test_real_trixie_index, which skips when deb.debian.org cannot be reached."""

import hashlib
import json
import lzma
import os
import shutil
import subprocess
import tempfile
import urllib.request

import pytest

from flushless.testbed import build, debian
from flushless.progress import ToolError

SUITES = ("trixie", "trixie-security")
PIN = "4.20.3+127-gc42374a105-0+deb13u1"
NEXT = "4.20.4+63-g7abfd2bce2-0+deb13u1"


@pytest.fixture(scope="module")
def gpg_key():
    """A throwaway signing key: (GNUPGHOME, keyring file with its public key)."""
    if not shutil.which("gpg") or not shutil.which("gpgv"):
        pytest.skip("gpg and gpgv are needed to sign the fixture mirror")
    # Short path: gpg-agent's socket lives in GNUPGHOME.
    home = tempfile.mkdtemp(prefix="fl-gpg.")
    env = dict(os.environ, GNUPGHOME=home)
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "flushless test <test@invalid>",
                    "ed25519", "sign", "never"], env=env, check=True, capture_output=True)
    ring = os.path.join(home, "archive.gpg")
    with open(ring, "wb") as f:
        subprocess.run(["gpg", "--batch", "--export"], env=env, check=True, stdout=f)
    yield home, ring
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, capture_output=True)
    shutil.rmtree(home, ignore_errors=True)


def sha(data):
    return hashlib.sha256(data).hexdigest()


class Mirror:
    """A Debian-shaped tree: pool files, per-suite Sources.xz / Packages.xz, InRelease."""

    def __init__(self, root, gpg_key):
        self.root, self.home, self.ring = str(root), gpg_key[0], gpg_key[1]
        self.url = "file://" + self.root
        self.lists = {}   # suite -> {"source": [stanza], "binary": [stanza]}

    def pool_file(self, path, data, serve=True):
        if serve:
            os.makedirs(os.path.dirname(os.path.join(self.root, path)), exist_ok=True)
            with open(os.path.join(self.root, path), "wb") as f:
                f.write(data)
        return sha(data), len(data)

    def source(self, suite, package, version, serve=True, pool="pool/main"):
        d = "%s/%s/%s" % (pool, package[0], package)
        up = version.rsplit("-", 1)[0]
        lines = []
        for name in ("%s_%s.dsc" % (package, version), "%s_%s.orig.tar.xz" % (package, up),
                     "%s_%s.debian.tar.xz" % (package, version)):
            # The .dsc is listed but never served, as for Xen in trixie.
            h, n = self.pool_file("%s/%s" % (d, name), ("%s %s" % (name, suite)).encode(),
                                  serve and not name.endswith(".dsc"))
            lines.append(" %s %d %s" % (h, n, name))
        self.lists.setdefault(suite, {}).setdefault("source", []).append(
            "Package: %s\nVersion: %s\nDirectory: %s\nChecksums-Sha256:\n%s\n" % (package, version, d, "\n".join(lines)))

    def binary(self, suite, package, version, serve=True, source="src"):
        path = "pool/main/%s/%s/%s_%s_amd64.deb" % (source[0], source, package, version)
        h, n = self.pool_file(path, ("%s %s" % (package, version)).encode(), serve)
        self.lists.setdefault(suite, {}).setdefault("binary", []).append(
            "Package: %s\nSource: %s\nVersion: %s\nArchitecture: amd64\nDescription: a\n multi-line field\n"
            "Filename: %s\nSize: %d\nSHA256: %s\n" % (package, source, version, path, n, h))
        return path, h

    def publish(self, valid_until=None):
        for suite, lists in self.lists.items():
            dists = os.path.join(self.root, "dists", suite)
            entries = []
            for kind, rel in (("source", "main/source/Sources.xz"), ("binary", "main/binary-amd64/Packages.xz")):
                data = lzma.compress("\n".join(lists.get(kind, [])).encode())
                os.makedirs(os.path.dirname(os.path.join(dists, rel)), exist_ok=True)
                with open(os.path.join(dists, rel), "wb") as f:
                    f.write(data)
                entries.append(" %s %d %s" % (sha(data), len(data), rel))
            release = "Origin: Debian\nSuite: %s\nCodename: %s\nDate: Thu, 26 Nov 2026 00:00:00 UTC\n" % (suite, suite)
            if valid_until:
                release += "Valid-Until: %s\n" % valid_until
            release += "SHA256:\n%s\n" % "\n".join(entries)
            with open(os.path.join(dists, "Release"), "w") as f:
                f.write(release)
            subprocess.run(["gpg", "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", "",
                            "--clearsign", "-o", os.path.join(dists, "InRelease"), os.path.join(dists, "Release")],
                           env=dict(os.environ, GNUPGHOME=self.home), check=True, capture_output=True)


@pytest.fixture
def mirror(tmp_path, gpg_key, monkeypatch):
    m = Mirror(tmp_path / "mirror", gpg_key)
    monkeypatch.setenv("FLUSHLESS_DEBIAN_MIRROR", m.url)
    monkeypatch.setenv("FLUSHLESS_DEBIAN_SECURITY_MIRROR", m.url)
    monkeypatch.setenv("FLUSHLESS_DEBIAN_KEYRING", m.ring)
    return m


def xen(recorded=()):
    return debian.Wanted(["xen"], PIN, "4.20", SUITES, source=True, recorded=recorded)


def resolve(tmp_path, wanted):
    return debian.resolve(wanted, str(tmp_path / "downloads"), str(tmp_path / "indices"))


def test_pinned_version_listed_is_taken_verified_by_the_index(tmp_path, mirror):
    mirror.source("trixie", "xen", PIN)
    mirror.source("trixie", "xen", NEXT)
    mirror.publish()
    res = resolve(tmp_path, xen())
    assert res.version == PIN and res.is_pin
    assert res.record() == {"suite": "trixie", "package": "xen", "version": PIN, "pinned": PIN,
                            "is_pin": True, "verified_by": "signed-index trixie"}
    assert sorted(res.files) == ["xen_4.20.3+127-gc42374a105-0+deb13u1.debian.tar.xz",
                                 "xen_4.20.3+127-gc42374a105.orig.tar.xz"]


def test_pinned_version_gone_takes_the_newest_of_the_series(tmp_path, mirror, capsys):
    """A pinned version the mirror does not have at all."""
    mirror.source("trixie", "xen", "4.20.2-1")
    mirror.source("trixie", "xen", NEXT)
    mirror.source("trixie", "xen", "4.21.0-1")   # another series: never taken
    mirror.publish()
    gone = debian.Pin("pool/main/x/xen/xen_4.20.3+127-gc42374a105.orig.tar.xz", "0" * 64)
    res = resolve(tmp_path, xen(recorded=[gone]))
    assert res.version == NEXT and not res.is_pin
    assert res.record() == {"suite": "trixie", "package": "xen", "version": NEXT, "pinned": PIN,
                            "is_pin": False, "verified_by": "signed-index trixie"}
    err = capsys.readouterr().err
    assert "pinned %s is gone from the archive; using %s from trixie" % (PIN, NEXT) in err


def test_pinned_version_unlisted_but_in_the_pool_is_taken_by_recorded_sum(tmp_path, mirror, capsys):
    mirror.source("trixie", "xen", NEXT)
    mirror.publish()
    pins = [debian.Pin("pool/main/x/xen/%s" % name, sha(data)) for name, data in
            (("xen_4.20.3+127-gc42374a105.orig.tar.xz", b"orig"),
             ("xen_%s.debian.tar.xz" % PIN, b"debian"))]
    for pin, data in zip(pins, (b"orig", b"debian")):
        mirror.pool_file(pin.path, data)
    res = resolve(tmp_path, xen(recorded=pins))
    assert res.is_pin and res.verified_by == "recorded-sum" and res.suite is None
    assert "verified_by recorded-sum" in capsys.readouterr().err
    # A recorded sum the pool's file does not match is refused.
    mirror.pool_file(pins[0].path, b"tampered")
    shutil.rmtree(tmp_path / "downloads")
    with pytest.raises(ToolError, match="sha256 .* recorded in flushless/testbed/build.py"):
        resolve(tmp_path, xen(recorded=pins))


def test_newest_version_not_served_falls_to_the_next(tmp_path, mirror):
    mirror.source("trixie", "xen", "4.20.5-1", serve=False)   # listed, pool answers 404
    mirror.source("trixie", "xen", NEXT)
    mirror.publish()
    res = resolve(tmp_path, xen())
    assert res.version == NEXT and res.suite == "trixie"


def test_version_listed_in_two_suites_is_taken_where_it_is_served(tmp_path, mirror):
    # trixie lists NEXT but does not serve it; trixie-security serves it under pool/updates.
    mirror.source("trixie", "xen", NEXT, serve=False)
    mirror.source("trixie-security", "xen", NEXT, pool="pool/updates/main")
    mirror.publish()
    res = resolve(tmp_path, xen())
    assert res.version == NEXT and res.verified_by == "signed-index trixie-security"


def test_bad_signature_is_refused(tmp_path, mirror):
    mirror.source("trixie", "xen", PIN)
    mirror.publish()
    path = os.path.join(mirror.root, "dists", "trixie", "InRelease")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("Origin: Debian", "Origin: Debjan"))
    with pytest.raises(ToolError, match="InRelease: bad or missing signature"):
        resolve(tmp_path, xen())


def test_unknown_key_is_refused(tmp_path, mirror, monkeypatch):
    mirror.source("trixie", "xen", PIN)
    mirror.publish()
    monkeypatch.setenv("FLUSHLESS_DEBIAN_KEYRING", "/usr/share/keyrings/debian-archive-keyring.gpg")
    if not os.path.exists("/usr/share/keyrings/debian-archive-keyring.gpg"):
        pytest.skip("no debian-archive-keyring")
    with pytest.raises(ToolError, match="bad or missing signature"):
        resolve(tmp_path, xen())


def test_list_not_matching_the_inrelease_is_refused(tmp_path, mirror):
    mirror.source("trixie", "xen", PIN)
    mirror.publish()
    with open(os.path.join(mirror.root, "dists", "trixie", "main", "source", "Sources.xz"), "wb") as f:
        f.write(lzma.compress(b"Package: xen\nVersion: 9.9-1\n"))
    with pytest.raises(ToolError, match="Sources.xz: sha256 .* the signed InRelease of trixie says"):
        resolve(tmp_path, xen())


def test_expired_inrelease_is_refused(tmp_path, mirror):
    mirror.source("trixie", "xen", PIN)
    mirror.publish(valid_until="Sun, 01 Nov 2026 00:00:00 UTC")
    with pytest.raises(ToolError, match="expired"):
        resolve(tmp_path, xen())


def test_nothing_in_the_series_names_suites_and_offers(tmp_path, mirror):
    mirror.source("trixie", "xen", "4.21.0-1")
    mirror.source("trixie-security", "xen", "4.20.9-1", serve=False)
    mirror.publish()
    with pytest.raises(ToolError) as e:
        resolve(tmp_path, xen())
    msg = str(e.value)
    assert "no usable xen of series 4.20: pinned %s" % PIN in msg
    assert "trixie offers nothing of series 4.20" in msg
    assert "trixie-security offers 4.20.9-1" in msg and "not served" in msg


def test_binary_whose_name_changes_with_the_version(tmp_path, mirror):
    """A kernel image carries its ABI in its name: the fallback is another package."""
    mirror.binary("trixie", "linux-image-6.12.117+deb13-amd64", "6.12.117-1", source="linux-signed-amd64")
    mirror.binary("trixie", "linux-image-6.12.117+deb13-amd64-unsigned", "6.12.118-1", source="linux")
    mirror.binary("trixie", "linux-image-6.1.0-40-amd64", "6.1.150-1", source="linux-signed-amd64")
    mirror.publish()
    pkg = "linux-image-6.12.107+deb13-amd64"
    wanted = debian.Wanted([pkg], "6.12.107-1", "6.12", ("trixie",),
                           patterns={pkg: r"linux-image-6\.12\.\d+\+deb13-amd64"})
    res = resolve(tmp_path, wanted)
    assert res.packages == ["linux-image-6.12.117+deb13-amd64"] and res.version == "6.12.117-1"
    assert list(res.files) == ["linux-image-6.12.117+deb13-amd64_6.12.117-1_amd64.deb"]


def test_group_is_taken_at_one_version(tmp_path, mirror):
    # xen-utils is listed at both, xenstore-utils only at NEXT: the group can only be NEXT.
    for pkg, versions in (("xen-utils-4.20", ("4.20.5-1", NEXT)), ("xenstore-utils", (NEXT,))):
        for v in versions:
            mirror.binary("trixie", pkg, v, source="xen")
    mirror.publish()
    pins = [debian.Pin("pool/main/x/xen/%s_%s_amd64.deb" % (p, PIN), "0" * 64)
            for p in ("xen-utils-4.20", "xenstore-utils")]
    wanted = debian.Wanted.debs(pins, ("trixie",), series="4.20", label="xen toolstack")
    res = resolve(tmp_path, wanted)
    assert res.version == NEXT and res.packages == ["xen-utils-4.20", "xenstore-utils"]
    assert res.record()["package"] == "xen toolstack" and res.record()["packages"] == res.packages


def test_backports_versions_are_in_their_series(tmp_path, mirror):
    mirror.binary("trixie-backports", "linux-source-7.3", "7.3.4-1~bpo13+1", source="linux")
    mirror.binary("trixie-backports", "linux-source-7.3", "7.3.6-1~bpo13+1", source="linux")
    mirror.publish()
    wanted = debian.Wanted(["linux-source-7.3"], "7.3.4-1~bpo13+1", "7.3", ("trixie-backports",))
    res = resolve(tmp_path, wanted)
    assert res.is_pin and res.verified_by == "signed-index trixie-backports"


def test_indices_are_cached_and_serve_an_offline_rebuild(tmp_path, mirror, monkeypatch):
    mirror.source("trixie", "xen", PIN)
    mirror.publish()
    resolve(tmp_path, xen())
    cached = [d for d in os.listdir(tmp_path / "indices" / "trixie") if os.path.isdir(tmp_path / "indices" / "trixie" / d)]
    assert len(cached) == 1 and "main_source_Sources.xz" in os.listdir(tmp_path / "indices" / "trixie" / cached[0])
    monkeypatch.setenv("FLUSHLESS_DEBIAN_MIRROR", "file:///nonexistent/mirror")
    monkeypatch.setenv("FLUSHLESS_DEBIAN_SECURITY_MIRROR", "file:///nonexistent/mirror")
    res = resolve(tmp_path, xen())
    assert res.is_pin and res.verified_by == "signed-index trixie"


def test_security_suites_use_the_security_mirror(monkeypatch):
    monkeypatch.setenv("FLUSHLESS_DEBIAN_MIRROR", "http://mirror.example/debian")
    monkeypatch.setenv("FLUSHLESS_DEBIAN_SECURITY_MIRROR", "http://mirror.example/debian-security/")
    assert debian.mirror_for("trixie-updates") == "http://mirror.example/debian"
    assert debian.mirror_for("trixie-security") == "http://mirror.example/debian-security"
    assert debian.mirror_for_path("pool/updates/main/x/xen/x.deb") == "http://mirror.example/debian-security"


@pytest.mark.parametrize("a, b", [
    ("4.20.3+127-gc42374a105-0+deb13u1", "4.20.4+63-g7abfd2bce2-0+deb13u1"),
    ("6.12.107-1", "6.12.117-1"),
    ("7.3.4-1~bpo13+1", "7.3.4-1"),
    ("1.0~rc1-1", "1.0-1"),
    ("2.41-12+deb13u4", "2.41-12+deb13u5"),
    ("9.9-1", "1:0.1-1"),
    ("1.2a-1", "1.2+b-1"),
])
def test_version_order(a, b):
    assert debian.compare_versions(a, b) < 0 < debian.compare_versions(b, a)
    assert debian.compare_versions(a, a) == 0


def test_series_membership():
    w = debian.Wanted(["xen"], PIN, "4.20", SUITES)
    assert w.in_series(NEXT) and w.in_series("4.20-1") and not w.in_series("4.200.1-1")
    assert not w.in_series("4.21.0-1")
    zlib = debian.Wanted.debs([debian.Pin("pool/main/z/zlib/zlib1g_1.3.dfsg+really1.3.1-1+deb13u1_amd64.deb",
                                          "0" * 64)], SUITES)
    assert zlib.series == "1.3"
    # Pool file names carry no epoch: trixie lists zlib1g as 1:1.3.dfsg+really1.3.1-1+deb13u1.
    assert zlib.is_pin("1:1.3.dfsg+really1.3.1-1+deb13u1") and not zlib.is_pin("1:1.3.dfsg+really1.3.1-1+deb13u2")


def test_deb822_parser():
    text = "# comment\nPackage: a\nDescription: one\n two\n .\n\n\nPackage: b\nVersion: 1\n"
    assert debian.parse_deb822(text) == [{"Package": "a", "Description": "one\ntwo\n."},
                                         {"Package": "b", "Version": "1"}]
    with pytest.raises(ToolError, match="line 1"):
        debian.parse_deb822(" orphan\n")


def test_patch_failing_on_a_fallback_names_patch_and_version(tmp_path):
    if not shutil.which("patch"):
        pytest.skip("patch is not installed")
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "mm.c").write_text("int x = 2;\n")
    series = tmp_path / "0002-example.patch"
    series.write_text("--- a/mm.c\n+++ b/mm.c\n@@ -1 +1 @@\n-int x = 1;\n+int x = 3;\n")
    wanted = debian.Wanted(["xen"], PIN, "4.20", SUITES, source=True)
    taken = debian.Resolved(wanted, NEXT, ["xen"], "trixie", "signed-index trixie", {})
    with pytest.raises(ToolError) as e:
        build.apply_patches(str(tree), [str(series)], str(tmp_path / "log"), "xen", taken)
    msg = str(e.value)
    assert "0002-example.patch does not apply to xen %s (the pinned %s is gone from the archive)" % (NEXT, PIN) in msg


def test_fallback_rekeys_the_part_and_the_pin_keeps_its_key(tmp_path, mirror, monkeypatch):
    monkeypatch.setattr(build, "CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "XEN_DEBIAN", xen())
    part = build.Xen(series=[])
    pinned_key = part.key
    assert ("xen-source", PIN) in part.inputs()

    mirror.source("trixie", "xen", NEXT)
    mirror.publish()
    res, = build.resolve(part, [build.XEN_DEBIAN], str(tmp_path / "downloads"))
    assert res.version == NEXT
    assert part.key != pinned_key and ("debian-taken", "xen %s" % NEXT) in part.inputs()
    # Read offline by a new process: the same key without resolving.
    assert build.Xen(series=[]).key == part.key
    with open(build.taken_note(part)) as f:
        assert json.load(f)["debian"][0]["version"] == NEXT

    # A build that finds the pin again goes back to the pinned key.
    mirror.source("trixie", "xen", PIN)
    mirror.publish()
    res, = build.resolve(part, [build.XEN_DEBIAN], str(tmp_path / "downloads"))
    assert res.is_pin and part.key == pinned_key and not os.path.exists(build.taken_note(part))


def test_pinned_keys_unchanged():
    """The cache keys of the parts built from the pins still hash the pinned versions only."""
    assert ("xen-source", "4.20.3+127-gc42374a105-0+deb13u1") in build.Xen().pinned_inputs()
    assert ("linux-source", "7.3.4-1~bpo13+1") in build.BuiltKernel().pinned_inputs()
    assert build.LINUX_SOURCE_DEBIAN.version == build.LINUX_VERSION
    # Debian's 7.3 image is three packages whose names carry the kernel ABI: a later 7.3 matches.
    for pin in build.LINUX_IMAGE_DEBS:
        later = pin.package.replace("7.3.4+", "7.3.11+")
        assert build.LINUX_IMAGE_DEBIAN.name_matcher(pin.package).fullmatch(later)
        assert not build.LINUX_IMAGE_DEBIAN.name_matcher(pin.package).fullmatch(later.replace("7.3.", "7.4."))
    assert [w.version for w in build.TOOLSTACK_DEBIAN][0] == build.XEN_SOURCE_VERSION


def _reachable(url):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10):
            return True
    except OSError:
        return False


def test_real_trixie_index():
    """The real archive, indices only (no package file is downloaded): trixie-backports'
    InRelease verifies with Debian's keyring, and linux-source-7.3 has a 7.3 there; where the
    pin is still listed, the index's sum is the one recorded in build.py."""
    url = debian.DEFAULT_MIRROR + "/dists/trixie-backports/InRelease"
    if os.environ.get("FLUSHLESS_DEBIAN_MIRROR") or not _reachable(url):
        pytest.skip("deb.debian.org unreachable (or another mirror set): the real index cannot be checked")
    if not os.path.exists(debian.DEFAULT_KEYRING):
        pytest.skip("debian-archive-keyring is not installed")
    index = debian.load_suite("trixie-backports", build.downloads("indices"))
    cands = debian.candidates(build.LINUX_SOURCE_DEBIAN, index)
    assert cands, "trixie-backports lists no linux-source-7.3 of series 7.3"
    for c in cands:
        if c.version == build.LINUX_VERSION:
            assert c.files[0][1] == build.LINUX_SOURCE_DEB.sha256
