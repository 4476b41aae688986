# flushless: see README.md.
PYTHON ?= python3
FLUSHLESS = $(PYTHON) -m flushless

.PHONY: all deps build test test-all test-unit test-testbed check-series check-staging reproduce census clean

all: build

deps:
	bash testbed/install-deps.sh

build: deps
	$(FLUSHLESS) build

# Unit tests, native workloads, the testbed: everything but the tests marked slow (the quick
# reproduce end to end), within about 15 minutes warm. Builds first, outside pytest, so a
# cold build (about 15 minutes) shows its progress.
test: build
	$(PYTHON) -m pytest -v -p no:cacheprovider --durations=30 -m "not slow" tests

# Everything, the slow tests too.
test-all: build
	$(PYTHON) -m pytest -v -p no:cacheprovider --durations=15 tests

test-unit:
	$(PYTHON) -m pytest -v -p no:cacheprovider -m "not testbed" tests

test-testbed: deps
	$(PYTHON) -m pytest -v -p no:cacheprovider -m testbed tests

# Each patch of both series builds on its own (a few minutes with ccache warm).
check-series: deps
	$(FLUSHLESS) build --each-patch

# The Xen series as posted, on xen-project/xen's staging: base-commit, apply, the hypervisor
# built with and without CONFIG_PV (results/staging/staging-check.json). Needs a staging tree, so
# not part of make test. STAGING_TREE=DIR (a checkout), or STAGING_GIT=GITDIR STAGING_COMMIT=REV;
# STAGING_FLAGS=--each-patch builds every prefix.
STAGING_TREE ?=
STAGING_GIT ?=
STAGING_COMMIT ?=
STAGING_FLAGS ?=
check-staging:
ifneq ($(STAGING_TREE),)
	$(FLUSHLESS) check-staging --tree $(STAGING_TREE) $(STAGING_FLAGS)
else ifneq ($(and $(STAGING_GIT),$(STAGING_COMMIT)),)
	$(FLUSHLESS) check-staging --git-dir $(STAGING_GIT) --commit $(STAGING_COMMIT) $(STAGING_FLAGS)
else
	@echo "check-staging needs a staging tree: make check-staging STAGING_TREE=DIR, or" >&2
	@echo "  make check-staging STAGING_GIT=GITDIR STAGING_COMMIT=REV (e.g. a mirror of xen-project/xen and staging)" >&2
	@exit 2
endif

# The paper's evaluation on the testbed: results/*.json|csv and report/index.html.
# About 48 minutes with a warm build cache; REPRODUCE_FLAGS=--quick (11 min) or --full (about 3 h).
REPRODUCE_FLAGS ?=
reproduce: deps
	$(FLUSHLESS) reproduce $(REPRODUCE_FLAGS)

# The testbed's own failures, counted per QEMU: results/census/ and docs/census.md.
# CENSUS_FLAGS='--qemu 7.2' for Debian 12's QEMU; --sections boot,race,... for a part.
CENSUS_FLAGS ?=
census: build
	$(FLUSHLESS) census $(CENSUS_FLAGS)

# Keeps results/census: the flake census is kept with the code.
clean:
	find results -mindepth 1 -maxdepth 1 ! -name census -exec rm -rf {} + 2>/dev/null || true
	rm -rf report workloads/build
