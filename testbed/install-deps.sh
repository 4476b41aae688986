#!/usr/bin/env bash
# Install what the flushless testbed needs on a Debian bookworm machine (run as root).
# Idempotent: a second run only checks. Used by .ci/run and 'make deps'.
# Debian 13's Xen and Linux are not installed: the build downloads them from the archive
# (flushless/testbed/build.py). The one apt source added is Debian 12's own bookworm-backports, for
# QEMU 10: Debian 12's QEMU 7.2 runs stale translations of changed code under multi-threaded
# TCG (fixed in QEMU 8.1, deba78709ae8).
set -euo pipefail

# The testbed machine (TCG, q35, intel-iommu), from bookworm-backports.
QEMU_MIN=10.0
BACKPORTS=/etc/apt/sources.list.d/flushless-bookworm-backports.sources

packages=(
	busybox-static       # dom0's userland (the build takes it from the .deb)
	gcc make patch xz-utils python3
	flex bison bc libelf-dev libssl-dev dwarves   # Xen and Linux build dependencies
	ccache               # fast kernel rebuilds after a patch changes
	pkg-config ninja-build libglib2.0-dev libpixman-1-dev libslirp-dev python3-venv   # the testbed's QEMU (build.Qemu)
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

qemu_version() {
	dpkg-query -W -f='${Status} ${Version}' qemu-system-x86 2>/dev/null |
		sed -n 's/^install ok installed \(1:\)\{0,1\}\([0-9][0-9.]*\).*/\2/p'
}
if ! printf '%s\n%s\n' "$QEMU_MIN" "$(qemu_version)" | sort -V -C; then
	if ! grep -rqsE '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d; then
		echo "install-deps: adding bookworm-backports ($BACKPORTS)"
		cat >"$BACKPORTS" <<-EOF
		Types: deb
		URIs: http://deb.debian.org/debian
		Suites: bookworm-backports
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
		EOF
	fi
	echo "install-deps: apt-get update"
	apt-get update -q >/dev/null
	echo "install-deps: installing qemu-system-x86 from bookworm-backports"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		-t bookworm-backports qemu-system-x86 >/dev/null
	if ! printf '%s\n%s\n' "$QEMU_MIN" "$(qemu_version)" | sort -V -C; then
		echo "install-deps: qemu-system-x86 is '$(qemu_version)', the testbed needs $QEMU_MIN or newer" >&2
		exit 1
	fi
fi

# The Python packages pyproject.toml declares, its test extra too: pip's, or Debian's python3-NAME.
missing=$(python3 - "$(dirname "$0")/../pyproject.toml" <<'EOF'
import importlib.util, re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
for req in project["dependencies"] + project["optional-dependencies"]["test"]:
    if importlib.util.find_spec(re.split(r"[<>=!~ \[;]", req)[0]) is None:
        print(req)
EOF
)
for req in $missing; do
	echo "install-deps: installing $req"
	python3 -m pip install -q "$req" || DEBIAN_FRONTEND=noninteractive apt-get install -y -q "python3-${req%%[<>=!~]*}" >/dev/null
done
echo "install-deps: ok"
