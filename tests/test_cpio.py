import gzip
import stat

from flushless.testbed.cpio import CpioWriter, read_newc, write_gz


def test_roundtrip_with_parents_and_alignment(tmp_path):
    path = str(tmp_path / "a.cpio.gz")

    def fill(w):
        w.file("opt/x/bin/prog", b"\x7fELF" + b"a" * 5, 0o755)  # odd size: padding must follow
        w.symlink("bin/sh", "busybox")
        w.chardev("dev/console", 5, 1)
        w.file("opt/x/data", b"", 0o644)

    write_gz(path, fill)
    entries = read_newc(gzip.open(path).read())
    names = [e[0] for e in entries]
    assert names == ["opt", "opt/x", "opt/x/bin", "opt/x/bin/prog", "bin", "bin/sh", "dev", "dev/console",
                     "opt/x/data"]
    by = {e[0]: e for e in entries}
    assert stat.S_ISDIR(by["opt/x"][1])
    assert by["opt/x/bin/prog"][2] == b"\x7fELFaaaaa" and by["opt/x/bin/prog"][1] & 0o777 == 0o755
    assert stat.S_ISLNK(by["bin/sh"][1]) and by["bin/sh"][2] == b"busybox"
    assert stat.S_ISCHR(by["dev/console"][1])


def test_headers_are_newc_and_padded():
    import io
    buf = io.BytesIO()
    w = CpioWriter(buf)
    w.file("f", b"xyz")
    w.close()
    data = buf.getvalue()
    assert data.startswith(b"070701")
    assert len(data) % 4 == 0
    assert data.rstrip(b"\0").endswith(b"TRAILER!!!")


def test_reproducible(tmp_path):
    def fill(w):
        w.file("a", b"1")

    write_gz(str(tmp_path / "1.gz"), fill)
    write_gz(str(tmp_path / "2.gz"), fill)
    assert (tmp_path / "1.gz").read_bytes() == (tmp_path / "2.gz").read_bytes()
