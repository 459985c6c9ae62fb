#!/usr/bin/env bash
# Debian's packaged Kafka clients for tests/kafka/test_debian_clients.py: kcat, Debian's Go
# with the Sarama and kafka-go sources (our Go programs are built from them offline, in
# GOPATH mode), Burrow, and ZooKeeper's jars (Burrow 1.2.1 does not start without a
# ZooKeeper; the tests run its server on the Java runtime tools/bootstrap.sh installs).
# Installs only what is missing, as root or with sudo. A package that cannot be installed
# is reported and skipped: its tests skip, the rest of the set-up goes on.
set -uo pipefail

packages=(
  kcat
  golang-go
  golang-github-shopify-sarama-dev
  golang-github-segmentio-kafka-go-dev
  burrow
  libzookeeper-java
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "bootstrap-clients: no apt-get; not installing ${missing[*]} (their tests skip)" >&2
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing ${missing[*]} with apt-get"
$sudo apt-get update -qq
install() {
  # --no-install-recommends: libzookeeper-java and the Go sources need no desktop Java or
  # extra tools. Burrow's package starts no service outside systemd.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if ! install "${missing[@]}"; then
  # one at a time, so one package that cannot be had does not keep the others out
  for package in "${missing[@]}"; do
    install "$package" || echo "bootstrap-clients: could not install $package (its tests skip)" >&2
  done
fi
exit 0
