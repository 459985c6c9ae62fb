#!/usr/bin/env bash
# Stand-in base images for a machine that cannot pull from an image registry (an air gap, or a
# network that reaches only the Debian mirror and PyPI). Builds, from Debian packages only,
# the three images the project's Dockerfile and compose file start FROM:
#
#   python:3.11-slim   Debian bookworm's python3 (3.11) with venv and pip, `python` on PATH
#   redis:7            Debian bookworm's redis-server (7.0), /data, user redis
#   haproxy:2.6        Debian bookworm's haproxy (2.6), config at /usr/local/etc/haproxy
#
# An image that is already present, or that `docker pull` can fetch, is left alone: the
# stand-ins are made only for what is missing. Needs root (debootstrap), debootstrap and a
# Docker engine (DOCKER_HOST is honoured). Safe to run again.
#
#   sudo docker/offline-bases.sh            # only what is missing
#   sudo docker/offline-bases.sh --force    # rebuild the stand-ins even if images exist
#
# Builds inside the stand-ins reach the package indexes with this machine's own settings:
# its CA certificates, its Debian sources and the http(s) index settings of its pip config
# are copied in. Set DEBIAN_MIRROR to debootstrap from another mirror.
set -euo pipefail

BASE=rsa-standin/bookworm:minbase
IMAGES=(python:3.11-slim redis:7 haproxy:2.6)
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
force=0
[ "${1:-}" = "--force" ] && force=1

have() { docker image inspect "$1" >/dev/null 2>&1; }

missing=()
for image in "${IMAGES[@]}"; do
  if [ "$force" = 1 ]; then
    missing+=("$image")
  elif have "$image"; then
    echo "$image: present"
  elif timeout 120 docker pull -q "$image" >/dev/null 2>&1; then  # bounded: an air gap may hang
    echo "$image: pulled"
  else
    missing+=("$image")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "building stand-ins for: ${missing[*]}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- the common base: debootstrap minbase + this machine's CA certificates and sources -------
if [ "$force" = 1 ] || ! have "$BASE"; then
  command -v debootstrap >/dev/null || { echo "debootstrap is not installed" >&2; exit 1; }
  [ "$(id -u)" -eq 0 ] || { echo "debootstrap needs root" >&2; exit 1; }
  echo "debootstrap --variant=minbase bookworm from $DEBIAN_MIRROR"
  debootstrap --variant=minbase --include=ca-certificates bookworm "$work/rootfs" \
    "$DEBIAN_MIRROR" >"$work/debootstrap.log" 2>&1 || {
    tail -20 "$work/debootstrap.log" >&2
    exit 1
  }
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  # tar exits 1 when a file changed while read (logs of the chroot): not an error here.
  tar -C "$work/rootfs" --numeric-owner -cf "$work/rootfs.tar" . || [ $? -eq 1 ]
  rm -rf "$work/rootfs"
  docker import "$work/rootfs.tar" "$BASE-rootfs" >/dev/null
  rm -f "$work/rootfs.tar"

  mkdir -p "$work/base/apt"
  cp /etc/ssl/certs/ca-certificates.crt "$work/base/host-ca-bundle.crt"
  # Debian's sources of this machine (only Debian's: other vendors' keys are not in the base).
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    if [ -f "$f" ] && grep -qE '^[^#]*(deb|security)\.debian\.org' "$f"; then
      name=$(basename "$f")
      [ "$name" = sources.list ] && name=host.list
      cp "$f" "$work/base/apt/$name"
    fi
  done
  if [ -z "$(ls -A "$work/base/apt")" ]; then
    printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\n' \
      "$DEBIAN_MIRROR" >"$work/base/apt/debian.sources"
  fi
  # pip: the CA bundle plus the http(s) index settings (local file:// indexes stay behind).
  {
    echo "[global]"
    echo "cert = /etc/ssl/certs/ca-certificates.crt"
    if command -v pip3 >/dev/null 2>&1; then
      for key in index-url extra-index-url trusted-host; do
        value=$(pip3 config get "global.$key" 2>/dev/null || true)
        urls=$(tr ' ' '\n' <<<"$value" | grep -E '^https?://' | tr '\n' ' ' || true)
        if [ -n "$urls" ]; then echo "$key = $urls"; fi
      done
    fi
  } >"$work/base/pip.conf"
  cat >"$work/base/Dockerfile" <<EOF
FROM $BASE-rootfs
# Like Debian's official images: no service starts while packages install.
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \\
    && rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
COPY apt/ /etc/apt/sources.list.d/
COPY host-ca-bundle.crt /etc/ssl/certs/ca-certificates.crt
COPY host-ca-bundle.crt /usr/local/share/ca-certificates/host-ca-bundle.crt
COPY pip.conf /etc/pip.conf
ENV LANG=C.UTF-8
LABEL org.opencontainers.image.description="stand-in Debian bookworm base (docker/offline-bases.sh)"
CMD ["bash"]
EOF
  docker build -q -t "$BASE" "$work/base" >/dev/null
  docker rmi "$BASE-rootfs" >/dev/null 2>&1 || true  # the base keeps its layer
  echo "$BASE: built"
fi

# --- the three stand-ins --------------------------------------------------------------------
install='apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends'
clean='rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb'
mkdir -p "$work/images"

# As the official redis image's: a bare redis-server is reachable from other containers.
cat >"$work/redis-entrypoint.sh" <<'EOF'
#!/bin/sh
if [ "${1#-}" != "$1" ]; then set -- redis-server "$@"; fi
if [ "$1" = redis-server ]; then set -- "$@" --protected-mode no; fi
exec "$@"
EOF
chmod +x "$work/redis-entrypoint.sh"

standin() {  # standin IMAGE  (Dockerfile on stdin)
  local dir="$work/images/${1//[:\/]/_}"
  mkdir -p "$dir"
  cat >"$dir/Dockerfile"
  cp "$work/redis-entrypoint.sh" "$dir/docker-entrypoint.sh"
  docker build -q -t "$1" "$dir" >/dev/null
  echo "$1: stand-in built"
}

for image in "${missing[@]}"; do
  case "$image" in
    python:3.11-slim) standin "$image" <<EOF ;;
FROM $BASE
RUN $install python3 python3-venv python3-pip && $clean \\
    && ln -s /usr/bin/python3 /usr/local/bin/python && ln -s /usr/bin/pip3 /usr/local/bin/pip \\
    && rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED
LABEL org.opencontainers.image.description="stand-in for python:3.11-slim (docker/offline-bases.sh)"
CMD ["python3"]
EOF
    redis:7) standin "$image" <<EOF ;;
FROM $BASE
RUN $install redis-server && $clean && mkdir -p /data && chown redis:redis /data
COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
VOLUME /data
WORKDIR /data
USER redis
EXPOSE 6379
LABEL org.opencontainers.image.description="stand-in for redis:7 (docker/offline-bases.sh)"
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
EOF
    haproxy:2.6) standin "$image" <<EOF ;;
FROM $BASE
RUN $install haproxy && $clean && mkdir -p /usr/local/etc/haproxy
USER haproxy
WORKDIR /var/lib/haproxy
# As the official image: SIGUSR1 stops haproxy gracefully.
STOPSIGNAL SIGUSR1
LABEL org.opencontainers.image.description="stand-in for haproxy:2.6 (docker/offline-bases.sh)"
CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
EOF
  esac
done
