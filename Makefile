# Everything installs from nothing: python3 and make are all a machine needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PLUGINS := $(sort $(wildcard plugins/*))
STAMP := $(VENV)/.installed
LINT_PATHS := $(wildcard agentcore plugins tests bench examples)

.PHONY: install demo test lint typecheck pytest bench clean chromium redis-server

$(STAMP): pyproject.toml $(wildcard plugins/*/pyproject.toml)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' $(foreach p,$(PLUGINS),-e $(p))
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/agentcore demo

lint: install
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)

typecheck: install
	$(VENV)/bin/mypy agentcore $(foreach p,$(PLUGINS),$(p)/src)

pytest: install chromium redis-server
	CHROMIUM=$(CHROMIUM) $(VENV)/bin/pytest

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

test: lint typecheck pytest

bench: install
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/hooks.py
	$(PY) bench/startup.py

clean:
	rm -rf $(VENV)
