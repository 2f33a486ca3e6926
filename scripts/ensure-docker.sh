#!/usr/bin/env bash
# Makes sure a Docker engine (with the gVisor runtimes declared) is installed and running.
# Idempotent: safe to run again. Installs from Debian's packages when run as root.
#
# Two gVisor runtimes: `runsc` (--network=none) for the networkless sandbox modes, and
# `runsc-net` for the networked one, which joins the sandbox service's egress-guarded network
# (services/sandbox/src/backends/docker-egress.ts). A running engine that lacks `runsc-net` gets it added to
# /etc/docker/daemon.json and is reloaded with SIGHUP, which re-reads the runtimes without
# touching running containers.
set -euo pipefail

say() { printf 'ensure-docker: %s\n' "$*"; }

# runsc's network for runsc-net: gVisor's own network stack (--network=sandbox) where it can
# start, else --network=host, where gVisor passes socket calls to the host kernel, still inside
# the container's own network namespace (so the egress guard's rules apply alike). gVisor
# releases such as Debian's 20221219 take any network namespace in which
# /proc/sys/net/core/rmem_default exists for the host's and refuse to start their stack there;
# recent kernels show that file in every namespace. TACK_RUNSC_NETWORK=sandbox|host overrides.
runsc_network() {
  if [ -n "${TACK_RUNSC_NETWORK:-}" ]; then
    printf -- '--network=%s' "$TACK_RUNSC_NETWORK"
  elif unshare --net sh -c 'test -e /proc/sys/net/core/rmem_default' 2>/dev/null; then
    printf -- '--network=host'
  else
    printf -- '--network=sandbox'
  fi
}

# Adds runsc and runsc-net to /etc/docker/daemon.json, keeping everything else in it (and an
# operator's own runsc-net); prints "changed" when it wrote the file.
declare_runtimes() {
  mkdir -p /etc/docker
  RUNSC_PATH="$(command -v runsc)" RUNSC_NET="$(runsc_network)" node -e '
    const fs = require("fs");
    const file = "/etc/docker/daemon.json";
    let config = {};
    try {
      config = JSON.parse(fs.readFileSync(file, "utf8"));
    } catch (error) {
      if (error.code !== "ENOENT") {
        console.error(`ensure-docker: ${file} is not valid JSON (${error.message}); fix it first`);
        process.exit(1);
      }
    }
    config.runtimes = config.runtimes || {};
    let changed = false;
    if (!config.runtimes.runsc) {
      config.runtimes.runsc = { path: process.env.RUNSC_PATH, runtimeArgs: ["--network=none"] };
      changed = true;
    }
    if (!config.runtimes["runsc-net"]) {
      config.runtimes["runsc-net"] = { path: config.runtimes.runsc.path || process.env.RUNSC_PATH, runtimeArgs: [process.env.RUNSC_NET] };
      changed = true;
    }
    if (changed) {
      fs.writeFileSync(`${file}.tmp`, JSON.stringify(config, null, 2) + "\n");
      fs.renameSync(`${file}.tmp`, file);
      console.log("changed");
    }
  '
}

engine_has_runsc_net() {
  docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc-net"'
}

if docker info >/dev/null 2>&1; then
  say "Docker engine already running"
  if command -v runsc >/dev/null 2>&1 && ! engine_has_runsc_net; then
    if [ "$(id -u)" != "0" ]; then
      say "the engine has no runsc-net runtime, so networked gVisor sandboxes are refused; run as root: sudo $0" >&2
      exit 0
    fi
    declare_runtimes >/dev/null
    pid="$(cat /var/run/docker.pid 2>/dev/null || pidof dockerd || true)"
    if [ -z "$pid" ]; then
      say "declared runsc-net in /etc/docker/daemon.json, but found no dockerd process to reload; restart the engine" >&2
      exit 1
    fi
    say "declared runsc-net ($(runsc_network)); reloading dockerd (SIGHUP: running containers are not touched)"
    kill -HUP "$pid"
    for _ in $(seq 1 40); do
      if engine_has_runsc_net; then say "runsc-net ready"; exit 0; fi
      sleep 0.25
    done
    say "dockerd did not pick up runsc-net after SIGHUP; see its log, or restart it" >&2
    exit 1
  fi
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

declare_runtimes >/dev/null

say "starting dockerd"
nohup dockerd >/var/log/dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then say "Docker engine ready"; exit 0; fi
  sleep 0.5
done
say "dockerd did not become ready in 30 s; see /var/log/dockerd.log" >&2
exit 1
