"""Host tools the testbed needs, and how to install each when it is missing."""

import shutil

from .progress import ToolError

# tool -> Debian package that provides it
PACKAGES = {
    "qemu-system-x86_64": "qemu-system-x86",
    "apt-get": "apt",
    "dpkg-deb": "dpkg",
    "dpkg-source": "dpkg-dev",
    "gcc": "gcc",
    "make": "make",
    "flex": "flex",
    "bison": "bison",
    "bc": "bc",
    "patch": "patch",
    "xz": "xz-utils",
    "ccache": "ccache",
    "pahole": "dwarves",
}


def require(*tools):
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pkgs = sorted({PACKAGES.get(t, t) for t in missing})
        raise ToolError("missing tool%s: %s. Install with: apt-get install --no-install-recommends %s "
                        "(or run 'make deps', which installs everything the testbed needs)"
                        % ("s" if len(missing) > 1 else "", ", ".join(missing), " ".join(pkgs)))


def have(tool):
    return shutil.which(tool) is not None
