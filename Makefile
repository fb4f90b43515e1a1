# Everything installs from nothing: python3 and make are all a machine needs.
# uv installs the workspace (the kernel and every package under plugins/) from the
# committed uv.lock, so a fresh clone gets exactly what main was tested with.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PLUGINS := $(sort $(wildcard plugins/*))
STAMP := $(VENV)/.installed
LINT_PATHS := $(wildcard agentcore plugins tests bench examples)

# uv itself: the one on PATH, else a pinned release bootstrapped from PyPI (a wheel,
# installed by pip into .uv/; nothing else is downloaded). `make UV=/path/to/uv` to choose.
UV_VERSION := 0.13.9
UV ?= $(or $(shell command -v uv 2>/dev/null),.uv/bin/uv)
# uv uses this machine's python3 and never downloads an interpreter of its own.
export UV_PYTHON := $(PYTHON)
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)
# Bytecode caches on: each `agentcore` process a test starts would otherwise compile every
# module it imports from source again (a third of the suite's CPU).
unexport PYTHONDONTWRITEBYTECODE
SYNC := $(UV) sync --frozen --all-packages

.PHONY: install demo test lint typecheck pytest lockcheck bench dist upgrade clean chromium redis-server

.uv/bin/uv:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --target .uv 'uv==$(UV_VERSION)'

$(STAMP): $(UV) uv.lock pyproject.toml $(wildcard plugins/*/pyproject.toml)
	$(SYNC) --group dev
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/agentcore demo

lint: install
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)

typecheck: install
	$(VENV)/bin/mypy agentcore $(foreach p,$(PLUGINS),$(p)/src)

# Both cores: most tests wait on real processes, sockets and Redis, so four workers keep
# two CPUs busy (pytest-xdist; every test already uses free ports and its own temp folder).
# The few marked `serial` (waits planned near their bounds) then run alone.
PYTEST_WORKERS ?= 4
pytest: install chromium redis-server
	CHROMIUM=$(CHROMIUM) $(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist worksteal -m "not serial"
	CHROMIUM=$(CHROMIUM) $(VENV)/bin/pytest -m serial

# Real services the tests need come from Debian's packages when the machine lacks them and
# we are root; otherwise a clear message says what to install. Never a skip, never a fake.
CHROMIUM ?= $(or $(shell command -v chromium 2>/dev/null),/usr/bin/chromium)

chromium:  # the console page test drives it (Playwright, pointed at this binary)
	@if [ -x "$(CHROMIUM)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing chromium from Debian's packages (the console page test drives it)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	  echo "make test needs Chromium at $(CHROMIUM) for the console page test:" \
	    "install it (Debian/Ubuntu: sudo apt-get install chromium)," \
	    "or name another binary with make test CHROMIUM=/path/to/chromium"; \
	  exit 1; \
	fi

# The fleet tests run a real redis-server on loopback (the redis_server fixture starts one
# on a free port per test session): Debian's package when it is missing and we are root.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server; \
	  else \
	    echo "make test needs redis-server, which the fleet tests run for real:" \
	      "install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)" \
	      "and run make test again" >&2; \
	    exit 1; \
	  fi; }

# The lock must say what every pyproject.toml asks for: a dependency changed without
# `uv lock` fails here, not on a user's machine.
lockcheck: $(UV)
	$(UV) lock --check

test: lockcheck lint typecheck pytest

bench: install
	$(SYNC) --group dev --group bench
	$(PY) bench/hooks.py
	$(PY) bench/startup.py

# An sdist and a wheel for the kernel and every plugin, in dist/.
dist: $(UV)
	rm -rf dist
	$(UV) build --all-packages --out-dir dist

# Re-resolve the lock to the newest releases the pyproject ranges allow, install them and
# run the whole check: an upstream change arrives as a reviewed uv.lock diff.
upgrade: $(UV)
	$(UV) lock --upgrade
	$(MAKE) test

clean:
	rm -rf $(VENV) .uv dist
