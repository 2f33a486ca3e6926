#!/usr/bin/env bash
# Brings the Node that runs Tack: the version pinned in .node-version (decision 0023), installed from the
# npm registry's official binary package (node-linux-<arch>, the nodejs.org build with its headers) into
# .tack/node of this checkout. Idempotent: a second run with the same pin does nothing.
#
#   scripts/ensure-node.sh           installs when missing, then prints the bin directory to put first on PATH
#
# `make` and .ci/run put .tack/node/bin first on PATH and set npm_config_nodedir=.tack/node, so npm ci
# builds native modules (better-sqlite3) for this Node from its own headers, without downloading any.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/.tack/node"
say() { printf 'ensure-node: %s\n' "$*" >&2; }

version="$(tr -d ' \t\r\n' < "$root/.node-version")"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { say ".node-version holds \"$version\"; it must be one exact version such as 24.22.3"; exit 1; }
if [ "$("$dir/bin/node" -p process.versions.node 2>/dev/null || true)" = "$version" ]; then
  echo "$dir/bin"
  exit 0
fi

case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) say "no official Node binary package for $(uname -m); install Node $version yourself and link it as $dir/bin/node"; exit 1 ;;
esac
# Tack runs on Linux (Docker, gVisor, debootstrap); the registry's Linux packages follow every Node release.
os=linux
[ "$(uname -s)" = Linux ] || { say "Tack runs on Linux; this is $(uname -s)"; exit 1; }
command -v npm >/dev/null || { say "npm is missing: it fetches Node $version from the npm registry; install any npm (e.g. apt-get install -y npm)"; exit 1; }

package="node-$os-$arch@$version"
mkdir -p "$root/.tack"
work="$(mktemp -d "$root/.tack/node-download.XXXXXX")"
trap 'rm -rf "$work"' EXIT
say "installing Node $version ($package from the npm registry, about 55 MB) into $dir"
if ! (cd "$work" && npm pack "$package" >/dev/null 2>"$work/npm.log"); then
  say "npm pack $package failed: $(grep -m1 -E 'npm error (code|404|notarget)|ETIMEDOUT|ENOTFOUND' "$work/npm.log" || tail -n1 "$work/npm.log")"
  say "check that $version is a Node release (npm view node-$os-$arch versions) and that the npm registry is reachable"
  exit 1
fi
mkdir "$work/node"
tar -xzf "$work"/node-*.tgz -C "$work/node" --strip-components=1
[ "$("$work/node/bin/node" -p process.versions.node)" = "$version" ] || { say "$package does not run Node $version here"; exit 1; }
rm -rf "$dir"
mv "$work/node" "$dir"
say "Node $version is in $dir"
echo "$dir/bin"
