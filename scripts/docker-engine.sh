#!/usr/bin/env bash
# Start a real dockerd that needs no registry, and make the chaos-busybox image with `docker import`.
# Usage: source scripts/docker-engine.sh   (exports DOCKER_HOST). Needs root and Debian's docker.io and
# busybox-static (apt-get install -y docker.io busybox-static). Safe to run twice.
set -u
ROOT=${CHAOS_DOCKER_ROOT:-/tmp/chaos-dockerd}
export DOCKER_HOST=unix://$ROOT/docker.sock
mkdir -p "$ROOT"
if ! docker version >/dev/null 2>&1; then
  # vfs: no overlay needed; no iptables or bridge: containers use --network host (loopback only).
  nohup dockerd --storage-driver=vfs --iptables=false --ip6tables=false --bridge=none \
    --data-root "$ROOT/data" --exec-root "$ROOT/exec" -H "$DOCKER_HOST" --pidfile "$ROOT/docker.pid" \
    >"$ROOT/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do docker version >/dev/null 2>&1 && break; sleep 0.5; done
fi
if docker version >/dev/null 2>&1 && ! docker image inspect chaos-busybox:latest >/dev/null 2>&1; then
  tmp=$(mktemp -d)
  mkdir -p "$tmp/bin" "$tmp/tmp" "$tmp/proc" "$tmp/sys" "$tmp/dev" "$tmp/etc"
  cp "$(command -v busybox)" "$tmp/bin/busybox"
  for c in sh sleep cat echo ls; do ln -sf busybox "$tmp/bin/$c"; done
  tar -C "$tmp" -cf "$tmp.tar" . && docker import "$tmp.tar" chaos-busybox:latest >/dev/null
  rm -rf "$tmp" "$tmp.tar"
fi
docker version --format 'docker engine {{.Server.Version}} at '"$DOCKER_HOST" 2>/dev/null || echo "no docker engine could start (see $ROOT/dockerd.log)"
