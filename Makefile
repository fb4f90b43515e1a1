# Everything installs from nothing: python3 and make are all a machine needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PLUGINS := $(sort $(wildcard plugins/*))
STAMP := $(VENV)/.installed
LINT_PATHS := $(wildcard agentcore plugins tests bench examples)

.PHONY: install demo test lint typecheck pytest bench clean

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

pytest: install
	$(VENV)/bin/pytest

test: lint typecheck pytest

bench: install
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/hooks.py

clean:
	rm -rf $(VENV)
