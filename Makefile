# The front door: `make run` serves the adapter on 127.0.0.1:9092 with an embedded Redis,
# installing only what that needs (redis-server, the project); `make test` installs
# everything the tests use and runs them all (tools/bootstrap.sh says what it installs).
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: help setup setup-run setup-spark run test lint format

# `make` alone says what there is; nothing is installed or started.
help:
	@echo "make run          serve V1 on 127.0.0.1:9092 and Kafka on 127.0.0.1:9093, with an embedded Redis"
	@echo "                  (installs redis-server, the project and its example Kafka client first;"
	@echo "                  ARGS=\"...\" passes serve options)"
	@echo "make test         install everything the tests use, then run them all (ARGS=\"...\" for pytest)"
	@echo "make setup-spark  install a Java runtime and PySpark for the README's Spark example"
	@echo "make setup        only install what make test uses (setup-run: what make run uses)"
	@echo "make lint         ruff check and format check; make format rewrites the files"

setup:
	VENV=$(VENV) ./tools/bootstrap.sh test

setup-run:
	VENV=$(VENV) ./tools/bootstrap.sh run

setup-spark:
	VENV=$(VENV) ./tools/bootstrap.sh spark

# (tools/run.sh refuses when ADAPTER_REDIS_URL would replace the embedded Redis)
run:
	@VENV=$(VENV) ./tools/run.sh $(ARGS)

test: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest $(ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
