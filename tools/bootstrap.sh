#!/usr/bin/env bash
# Set up everything `make run` and `make test` need on a fresh Debian/Ubuntu machine:
# redis-server, haproxy, valgrind and a Java runtime (for the Spark tests) from the system
# packages when missing, then the project's virtualenv. Safe to run again; it only installs
# what is absent.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
# haproxy: the tests check the compose stack's load-balancer config with `haproxy -c`.
command -v haproxy >/dev/null 2>&1 || need_apt+=(haproxy)
# valgrind: `python -m bench.script_cost` counts the append scripts' instructions (and a
# smoke test runs it).
command -v valgrind >/dev/null 2>&1 || need_apt+=(valgrind)
if [ "${SKIP_JAVA:-0}" != 1 ] && ! command -v java >/dev/null 2>&1; then
  need_apt+=(openjdk-17-jre-headless)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing ${need_apt[*]} with apt-get"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# The Debian package starts a redis-server on 6379; the project never uses it.
./tools/bootstrap-clients.sh  # Debian's Kafka clients and Burrow (tests/kafka/test_debian_clients.py)

VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
if [ ! -f "$VENV/.installed" ] || [ pyproject.toml -nt "$VENV/.installed" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e ".[test,spark]"
  touch "$VENV/.installed"
fi

# Quix Streams (tests/apps/test_quix.py) pins confluent-kafka below the project's bound, so
# its app runs in an interpreter of its own; the tests skip while it is missing.
QUIX_VENV=${QUIX_VENV:-.venv-quix}
if [ ! -x "$QUIX_VENV/bin/python" ]; then
  python3 -m venv "$QUIX_VENV"
fi
if [ ! -f "$QUIX_VENV/.installed" ] || [ tests/apps/quix-requirements.txt -nt "$QUIX_VENV/.installed" ]; then
  "$QUIX_VENV/bin/python" -m pip install -q -r tests/apps/quix-requirements.txt
  touch "$QUIX_VENV/.installed"
fi
