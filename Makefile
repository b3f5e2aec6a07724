# Two commands do everything on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
PY := $(BIN)/python
PYTHON ?= python3
export PATH := $(BIN):$(PATH)
# Debian packages the tests drive as real, independent tools (command:package).
SYSTOOLS := zsh:zsh jq:jq fish:fish bsdtar:libarchive-tools gm:graphicsmagick zstd:zstd tmux:tmux curl:curl xz:xz-utils bzip2:bzip2 gzip:gzip script:bsdutils /usr/bin/time:time

.PHONY: all install demo test test-fast bench fuzz sysdeps benchdeps clean completion
# a single-node Slurm cluster for kujob --slurm (tests/slurm_cluster.py)
SYSTOOLS += /usr/sbin/munged:munge /usr/sbin/slurmctld:slurmctld /usr/sbin/slurmd:slurmd /usr/bin/sbatch:slurm-client

all: install

$(VENV)/.installed: setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e . --config-settings editable_mode=compat 2>&1 | grep -v '^WARNING: Location' || true
	$(PY) -m compileall -q -j 0 tarproc  # byte code cached even where PYTHONDONTWRITEBYTECODE is set
	$(BIN)/tarcat --version
	touch $@

install: $(VENV)/.installed

$(VENV)/.test-deps: $(VENV)/.installed setup.cfg
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]' --config-settings editable_mode=compat 2>&1 | grep -v '^WARNING: Location' || true
	$(PY) -c 'import pytest, hypothesis, webdataset, moto, pyarrow, duckdb, datasets'  # (pyarrow: the extra tarproc[parquet])
	touch $@

# Install the system tools the tests need, from Debian's packages, when missing.
sysdeps:
	@missing=""; for pair in $(SYSTOOLS); do \
	  command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair##*:}"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# The benches' real servers: nginx serves Range requests for bench_netread (Python's http.server does not).
BENCHTOOLS := /usr/sbin/nginx:nginx-light
benchdeps:
	@$(MAKE) -s sysdeps SYSTOOLS="$(BENCHTOOLS)"

demo: install
	@bash testdata/demo.sh

# Shell completion for every command at once: `make completion` (for $SHELL) or `make completion FOR=zsh`
completion: install
	@$(PY) -m tarproc.cli.completion $(FOR)

test: $(VENV)/.test-deps sysdeps
	$(PY) -m compileall -q -j 0 tarproc
	$(PY) -m pytest -n 2 -q tests

# The suite without the tests that need the system packages above (no root, no apt-get).
test-fast: $(VENV)/.test-deps
	$(PY) -m compileall -q -j 0 tarproc
	$(PY) -m pytest -n 2 -q -m "not sysdeps" tests

bench: $(VENV)/.test-deps sysdeps benchdeps
	$(PY) bench/run.py

fuzz: $(VENV)/.test-deps
	TARPROC_FUZZ_EXAMPLES=20000 TARPROC_FUZZ_RANDOM=1 $(PY) -m pytest -q -p no:xdist tests/library/test_fuzz.py
	TARPROC_HOSTILE_FULL=1 $(PY) -m pytest -q -n 2 tests/concerns/test_hostile_corpus.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
