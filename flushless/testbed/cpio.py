"""Write a newc ("070701") cpio archive, the format the Linux initramfs unpacker reads.

Pure Python so building an initramfs needs no cpio binary and no root: entries get
uid/gid 0 and the modes given here, whatever the files on the host have.
"""

import gzip
import io
import os
import stat

TRAILER = "TRAILER!!!"


class CpioWriter:
    def __init__(self, fileobj):
        self._f = fileobj
        self._ino = 1
        self._dirs = set()

    def _header(self, name, mode, size, nlink=1, rdevmajor=0, rdevminor=0, mtime=0):
        data = name.encode() + b"\0"
        fields = (self._ino, mode, 0, 0, nlink, mtime, size, 0, 0, rdevmajor, rdevminor, len(data), 0)
        self._ino += 1
        hdr = b"070701" + b"".join(b"%08x" % v for v in fields)
        self._f.write(hdr + data)
        self._pad(len(hdr) + len(data))

    def _pad(self, length):
        self._f.write(b"\0" * (-length % 4))

    def _parents(self, name):
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.mkdir("/".join(parts[:i]))

    def mkdir(self, name, mode=0o755):
        name = name.strip("/")
        if not name or name in self._dirs:
            return
        self._parents(name)
        self._dirs.add(name)
        self._header(name, stat.S_IFDIR | mode, 0, nlink=2)

    def file(self, name, data, mode=0o644):
        name = name.strip("/")
        self._parents(name)
        self._header(name, stat.S_IFREG | mode, len(data))
        self._f.write(data)
        self._pad(len(data))

    def add_path(self, name, path, mode=None):
        """Add a host file; keeps its executable bits unless mode is given."""
        with open(path, "rb") as f:
            data = f.read()
        if mode is None:
            mode = 0o755 if os.stat(path).st_mode & 0o111 else 0o644
        self.file(name, data, mode)

    def symlink(self, name, target):
        name = name.strip("/")
        self._parents(name)
        data = target.encode()
        self._header(name, stat.S_IFLNK | 0o777, len(data))
        self._f.write(data)
        self._pad(len(data))

    def chardev(self, name, major, minor, mode=0o600):
        name = name.strip("/")
        self._parents(name)
        self._header(name, stat.S_IFCHR | mode, 0, rdevmajor=major, rdevminor=minor)

    def close(self):
        self._header(TRAILER, 0, 0, nlink=1)


def write_gz(path, fill):
    """Create PATH as a gzip-compressed newc archive; fill(writer) adds the entries."""
    buf = io.BytesIO()
    w = CpioWriter(buf)
    fill(w)
    w.close()
    tmp = path + ".tmp"
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=6, mtime=0) as f:
        f.write(buf.getvalue())
    os.replace(tmp, path)


def read_newc(data):
    """Parse an uncompressed newc archive into [(name, mode, bytes)]; used by the tests."""
    out = []
    off = 0
    while True:
        if data[off:off + 6] != b"070701":
            raise ValueError("bad cpio magic at offset %d" % off)
        fields = [int(data[off + 6 + 8 * i: off + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        off += 110
        name = data[off:off + namesize - 1].decode()
        off += namesize
        off += -off % 4
        body = data[off:off + size]
        off += size
        off += -off % 4
        if name == TRAILER:
            return out
        out.append((name, mode, body))
