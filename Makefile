# flushless: see README.md.
PYTHON ?= python3
FLUSHLESS = $(PYTHON) -m flushless

.PHONY: all deps build test test-unit test-testbed check-series reproduce clean

all: build

deps:
	bash testbed/install-deps.sh

build: deps
	$(FLUSHLESS) build

# Everything: unit tests, native workloads, the testbed. Builds first, outside pytest, so
# a cold build (about 15 minutes) shows its progress.
test: build
	$(PYTHON) -m pytest -v -p no:cacheprovider --durations=15 tests

test-unit:
	$(PYTHON) -m pytest -v -p no:cacheprovider -m "not testbed" tests

test-testbed: deps
	$(PYTHON) -m pytest -v -p no:cacheprovider -m testbed tests

# Each patch of both series builds on its own (a few minutes with ccache warm).
check-series: deps
	$(FLUSHLESS) build --each-patch

# The paper's evaluation on the testbed: results/*.json|csv and report/index.html.
# About 48 minutes with a warm build cache; REPRODUCE_FLAGS=--quick (11 min) or --full (about 3 h).
REPRODUCE_FLAGS ?=
reproduce: deps
	$(FLUSHLESS) reproduce $(REPRODUCE_FLAGS)

clean:
	rm -rf results report workloads/build
