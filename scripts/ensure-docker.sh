#!/usr/bin/env bash
# Makes sure a Docker engine (with the gVisor runtime declared) is installed and running.
# Idempotent: safe to run again. Installs from Debian's packages when run as root.
set -euo pipefail

say() { printf 'ensure-docker: %s\n' "$*"; }

if docker info >/dev/null 2>&1; then
  say "Docker engine already running"
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v runsc >/dev/null 2>&1; then
  if [ "$(id -u)" != "0" ]; then
    say "dockerd or runsc is missing; run as root: apt-get install -y docker.io runsc" >&2
    exit 1
  fi
  say "installing docker.io and runsc from Debian's packages"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io runsc >/dev/null
fi

if [ "$(id -u)" != "0" ]; then
  say "dockerd is installed but not running; start it as root: sudo $0" >&2
  exit 1
fi

mkdir -p /etc/docker
if [ ! -f /etc/docker/daemon.json ] || ! grep -q runsc /etc/docker/daemon.json; then
  cat > /etc/docker/daemon.json <<JSON
{
  "runtimes": {
    "runsc": { "path": "$(command -v runsc)", "runtimeArgs": ["--network=none"] }
  }
}
JSON
fi

say "starting dockerd"
nohup dockerd >/var/log/dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then say "Docker engine ready"; exit 0; fi
  sleep 0.5
done
say "dockerd did not become ready in 30 s; see /var/log/dockerd.log" >&2
exit 1
