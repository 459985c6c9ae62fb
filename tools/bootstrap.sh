#!/usr/bin/env bash
# Install what `make run` or `make test` needs on a fresh Debian/Ubuntu machine, saying what
# it does, a line per step. Safe to run again: it installs only what is absent.
#
#   tools/bootstrap.sh run     `make run`: redis-server (apt) and the project in .venv, with
#                              the Kafka client of the README's example (extra `examples`)
#   tools/bootstrap.sh spark   `make setup-spark`: that, a Java runtime and PySpark (extra
#                              `spark`), for the README's Spark example
#   tools/bootstrap.sh [test]  `make test`: that, and what the tests use: haproxy, valgrind,
#                              Chromium (the console's browser tests), a Java runtime (Spark;
#                              SKIP_JAVA=1 leaves it out), the test and Spark extras, the Quix
#                              Streams venv, kafkajs (npm)
#   --dry-run                  say the steps without doing them
#
# apt-get needs root or sudo. VENV and QUIX_VENV name the virtualenvs (.venv, .venv-quix).
set -euo pipefail
case "${BASH_SOURCE[0]}" in  # (no dirname: --dry-run runs on bash's builtins alone)
  */*) cd "${BASH_SOURCE[0]%/*}/.." ;;
  *) cd .. ;;
esac

dry_run=0
mode=test
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    run | spark | test) mode=$arg ;;
    *) echo "usage: tools/bootstrap.sh [--dry-run] [run|spark|test]" >&2; exit 2 ;;
  esac
done
VENV=${VENV:-.venv}
QUIX_VENV=${QUIX_VENV:-.venv-quix}

# step "what" command...: say it, do it (unless --dry-run), say how long it took.
step() {
  local what=$1 started=$SECONDS
  shift
  if [ "$dry_run" = 1 ]; then
    echo "bootstrap: $what (dry run: $*)"
    return
  fi
  echo "bootstrap: $what ..."
  "$@"
  echo "bootstrap:   done in $((SECONDS - started))s"
}

finished() {
  if [ "$dry_run" = 1 ]; then
    echo "bootstrap: dry run, nothing done"
  else
    case "$mode" in
      spark) echo "bootstrap: ready for make run and the Spark example" ;;
      *) echo "bootstrap: ready for make $mode" ;;
    esac
  fi
}

have() { command -v "$1" >/dev/null 2>&1; }

apt_install() {
  local sudo=""
  [ "$EUID" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# An install is current when its marker is newer than everything it was made from.
current() {
  local marker=$1 source
  shift
  [ -f "$marker" ] || return 1
  for source in "$@"; do [ ! "$source" -nt "$marker" ] || return 1; done
}
# What the project's install is made from: its declaration and its C extension's source (the
# install compiles it: setup.py).
PROJECT_SOURCES=(pyproject.toml setup.py adapter/kafka/_walk.c mapping/connection/_resp_scan.c
  adapter/v1/_consume.c mapping/connection/raw_entries.h mapping/connection/append_module.c
  mapping/connection/module_api.h mapping/connection/kafka_record.h adapter/kafka/_produce.c
  mapping/connection/produce_commands.h mapping/topic/_fnv.c)

pip_install() {  # marker, then pip's arguments
  local marker=$1
  shift
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "$@"
  touch "$marker"
}

make_venv() { python3 -m venv "$1"; }

# kafkajs (tests/kafka/test_kafkajs.py) from the npm registry, as its lock file pins it, into
# build/kafkajs; without Node.js and npm its tests skip.
kafkajs_install() {
  mkdir -p build/kafkajs
  cp tests/kafka/kafkajs/package.json tests/kafka/kafkajs/package-lock.json build/kafkajs/
  (cd build/kafkajs && npm ci --no-audit --no-fund --loglevel=error)
  touch build/kafkajs/.installed
}

quix_venv() {
  [ -x "$QUIX_VENV/bin/python" ] || make_venv "$QUIX_VENV"
  "$QUIX_VENV/bin/python" -m pip install -q -r tests/apps/quix-requirements.txt
  touch "$QUIX_VENV/.installed"
}

# --- system packages (one apt-get run for both parts) ---------------------------------------
packages=()
have redis-server || packages+=(redis-server)  # `make run`'s embedded Redis; the tests' too
if [ "$mode" = test ]; then
  # haproxy: the tests check the compose stack's load-balancer config with `haproxy -c`.
  have haproxy || packages+=(haproxy)
  # valgrind: `python -m bench.script_cost` counts the append scripts' instructions (and a
  # smoke test runs it).
  have valgrind || packages+=(valgrind)
  # chromium: the console's browser tests (tests/console) drive Debian's Chromium at
  # /usr/bin/chromium through Playwright (Playwright's own browser download is not used).
  # (`have` too, so that a dry run with an empty PATH lists it as on a bare machine.)
  { [ -x /usr/bin/chromium ] && have chromium; } || packages+=(chromium)
  # krb5-kdc, krb5-admin-server, krb5-user: the real KDC of the GSSAPI tests
  # (tests/support/kerberos.py); libsasl2-modules-gssapi-mit: kcat's GSSAPI (Cyrus SASL);
  # libkrb5-dev: the test extra's gssapi has no Linux wheel, pip builds it with krb5-config.
  # (/usr/sbin is not on every PATH: the files themselves, or `have` for a dry run.)
  { [ -x /usr/sbin/krb5kdc ] && [ -x /usr/sbin/kadmin.local ] && have kinit \
    && have krb5-config && compgen -G "/usr/lib/*/sasl2/libgssapiv2.so" >/dev/null; } \
    || packages+=(krb5-kdc krb5-admin-server krb5-user libsasl2-modules-gssapi-mit libkrb5-dev)
fi
if [ "$mode" != run ] && [ "${SKIP_JAVA:-0}" != 1 ] && ! have java; then
  packages+=(openjdk-17-jre-headless)  # Spark
fi
if [ ${#packages[@]} -gt 0 ]; then
  step "installing ${packages[*]} with apt-get" apt_install "${packages[@]}"
fi
# (The Debian package starts a redis-server on 6379; the project never uses it.)

# --- the project -------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  step "creating the virtualenv $VENV" make_venv "$VENV"
fi
# .installed: the project with its test and Spark extras (what `make test` needs; the test
# extra has the examples' Kafka client), which is also all `make run` and the Spark example
# need; .installed-spark: the project with its examples and Spark extras; .installed-run:
# the project with its examples extra.
if [ "$mode" = run ]; then
  if ! current "$VENV/.installed" "${PROJECT_SOURCES[@]}" \
    && ! current "$VENV/.installed-spark" "${PROJECT_SOURCES[@]}" \
    && ! current "$VENV/.installed-run" "${PROJECT_SOURCES[@]}"; then
    step "installing the project and its Kafka client into $VENV (pip)" \
      pip_install "$VENV/.installed-run" -e ".[examples]"
  fi
  finished
  exit 0
fi
if [ "$mode" = spark ]; then
  if ! current "$VENV/.installed" "${PROJECT_SOURCES[@]}" \
    && ! current "$VENV/.installed-spark" "${PROJECT_SOURCES[@]}"; then
    step "installing the project, its Kafka client and PySpark into $VENV (pip; minutes at first)" \
      pip_install "$VENV/.installed-spark" -e ".[examples,spark]"
  fi
  finished
  exit 0
fi
if ! current "$VENV/.installed" "${PROJECT_SOURCES[@]}"; then
  step "installing the project, its test and Spark extras into $VENV (pip; minutes at first)" \
    pip_install "$VENV/.installed" -e ".[test,spark]"
fi

# --- what only the tests use ---------------------------------------------------------------
# Quix Streams (tests/apps/test_quix.py) pins confluent-kafka below the project's bound, so
# its app runs in an interpreter of its own; the tests skip while it is missing.
if ! current "$QUIX_VENV/.installed" tests/apps/quix-requirements.txt; then
  step "installing Quix Streams into $QUIX_VENV (pip)" quix_venv
fi
step "Debian's Kafka clients and Burrow (tests/kafka/test_debian_clients.py)" ./tools/bootstrap-clients.sh
if ! current build/kafkajs/.installed tests/kafka/kafkajs/package-lock.json; then
  if have npm; then
    step "installing kafkajs into build/kafkajs (npm)" kafkajs_install
  else
    echo "bootstrap: no npm: not installing kafkajs (tests/kafka/test_kafkajs.py skips)"
  fi
fi

finished
