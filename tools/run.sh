#!/usr/bin/env bash
# `make run`: a pod on 127.0.0.1 (V1 9092, Kafka 9093) with its own embedded redis-server,
# after installing what that needs (tools/bootstrap.sh run). Arguments go to `adapter serve`.
#
# The pod reads its settings from ADAPTER_* variables too, so ADAPTER_REDIS_URL (or
# ADAPTER_REDIS_SENTINEL) left in the shell, e.g. from the blocks of docs/cli.md,
# would silently swap the embedded Redis for that one: refuse, saying how to go on.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

for name in ADAPTER_REDIS_URL ADAPTER_REDIS_SENTINEL; do
  if [ -n "${!name:-}" ]; then
    echo "make run: refusing: $name is set in this shell, and the pod would serve that" \
      "Redis instead of make run's embedded one. For the embedded Redis: unset $name;" \
      "to serve the Redis it names: ${VENV:-.venv}/bin/python -m adapter serve" >&2
    exit 2
  fi
done
./tools/bootstrap.sh run
exec "${VENV:-.venv}/bin/python" -m adapter serve "$@"
