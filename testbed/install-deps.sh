#!/usr/bin/env bash
# Install what the flushless testbed needs on a Debian bookworm machine (run as root).
# Idempotent: a second run only checks. Used by .ci/run and 'make deps'.
# Debian 13's Xen and Linux are not installed: the build downloads pinned files from the
# archive's pool (flushless/build.py), so no apt source is added.
set -euo pipefail

packages=(
	qemu-system-x86      # the testbed machine (TCG, q35, intel-iommu)
	busybox-static       # dom0's userland (the build takes it from the .deb)
	gcc make patch xz-utils python3
	flex bison bc libelf-dev libssl-dev dwarves   # Xen and Linux build dependencies
	ccache               # fast kernel rebuilds after a patch changes
	procps               # pgrep, used by the tests
)

if [ "$(id -u)" != 0 ]; then
	echo "install-deps: run as root (apt-get install)" >&2
	exit 1
fi

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "install-deps: apt-get update"
	apt-get update -q >/dev/null
	echo "install-deps: installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

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
