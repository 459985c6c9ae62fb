# The front door: `make run` serves the adapter on 127.0.0.1:9092 with an embedded Redis;
# `make test` runs every test. Both install what they need first (tools/bootstrap.sh).
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: setup run test lint format

setup:
	./tools/bootstrap.sh

run: setup
	$(PY) -m adapter serve $(ARGS)

test: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest $(ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
