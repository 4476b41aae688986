#!/usr/bin/env bash
# Install what the flushless testbed needs on a Debian bookworm machine (run as root).
# Idempotent: a second run only checks. Used by .ci/run and 'make deps'.
set -euo pipefail

packages=(
	qemu-system-x86      # the testbed machine (TCG, q35, intel-iommu)
	busybox-static       # dom0's userland (the build takes it from the .deb)
	dpkg-dev             # dpkg-source, to unpack Debian's xen source package
	gcc make patch xz-utils python3
	flex bison bc libelf-dev libssl-dev dwarves   # Xen and Linux build dependencies
	ccache               # fast kernel rebuilds after a patch changes
	procps               # pgrep, used by the tests
)

if [ "$(id -u)" != 0 ]; then
	echo "install-deps: run as root (apt-get install)" >&2
	exit 1
fi

have_xen_source() {
	# Not "| grep -q": under pipefail its early exit fails the pipeline with SIGPIPE.
	local out
	out=$(apt-cache showsrc xen 2>/dev/null || true)
	[[ "$out" == *"Version:"* ]]
}

# Source packages (apt-get source xen) need deb-src lines. Debian's deb822 sources file
# lists "Types: deb"; add ours beside it rather than editing the system's file.
if ! have_xen_source; then
	src=/etc/apt/sources.list.d/flushless-deb-src.sources
	echo "install-deps: adding deb-src entries ($src)"
	cat > "$src" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
	need_update=1
fi

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${need_update:-0}" = 1 ] || [ ${#missing[@]} -gt 0 ]; then
	echo "install-deps: apt-get update"
	apt-get update -q >/dev/null
fi
if [ ${#missing[@]} -gt 0 ]; then
	echo "install-deps: installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
have_xen_source || { echo "install-deps: still no xen source package in apt's lists" >&2; exit 1; }

if ! python3 -c 'import pytest' 2>/dev/null; then
	echo "install-deps: installing pytest"
	python3 -m pip install -q pytest || DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-pytest >/dev/null
fi
# The report's figures (flushless/report.py).
if ! python3 -c 'import matplotlib' 2>/dev/null; then
	echo "install-deps: installing matplotlib"
	python3 -m pip install -q 'matplotlib>=3.6' || DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-matplotlib >/dev/null
fi
echo "install-deps: ok"
