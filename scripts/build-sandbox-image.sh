#!/usr/bin/env bash
# Builds the sandbox image locally (there is no registry to pull from):
# a Debian root filesystem from debootstrap, imported with `docker import`.
# Idempotent: skips the build when an image built from this exact script exists.
set -euo pipefail

IMAGE="${TACK_SANDBOX_IMAGE:-tack-sandbox:bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# libstdc++6 for node, which is not Debian's (bookworm's is Node 18, past its end of life) but the one Tack runs on.
PACKAGES="bash,coreutils,findutils,grep,sed,gawk,git,ripgrep,python3,procps,ca-certificates,tar,gzip,less,diffutils,patch,libstdc++6"
here="$(cd "$(dirname "$0")" && pwd)"
# Node: the pinned version of .node-version (decision 0023), the binary of .tack/node (scripts/ensure-node.sh),
# at /usr/local/bin/node. It runs the language servers and run_code's programs (`node -e <runner>`).
node_version="$(tr -d ' \t\r\n' < "$here/../.node-version")"
node_bin="$("$here/ensure-node.sh")/node"
# Language servers for the lsp tool (services/tools/src/lsp), copied from this checkout's node_modules:
# the sandbox has no network to install them. Their versions are part of the recipe.
LSP_PACKAGES="typescript-language-server typescript"
LSP_DIR=/usr/local/lib/tack-lsp
modules="$here/../node_modules"
for package in $LSP_PACKAGES; do
  [ -f "$modules/$package/package.json" ] || { printf 'sandbox-image: %s is missing from node_modules; run make deps first\n' "$package" >&2; exit 1; }
done
recipe_hash="$( (cat "$here/build-sandbox-image.sh" $(for package in $LSP_PACKAGES; do echo "$modules/$package/package.json"; done); echo "node $node_version") | sha256sum | cut -c1-16)"

say() { printf 'sandbox-image: %s\n' "$*"; }

if ! docker info >/dev/null 2>&1; then
  say "the Docker engine is not reachable; start it with: sudo scripts/ensure-docker.sh" >&2
  exit 1
fi
if [ "$(docker image inspect -f '{{ index .Config.Labels "tack.recipe" }}' "$IMAGE" 2>/dev/null || true)" = "$recipe_hash" ]; then
  say "$IMAGE is up to date (recipe $recipe_hash)"
  exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ]; then
    say "installing debootstrap"
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
  else
    say "debootstrap is missing; install it: sudo apt-get install -y debootstrap" >&2
    exit 1
  fi
fi
if [ "$(id -u)" != "0" ]; then
  say "debootstrap needs root; run: sudo make sandbox-image" >&2
  exit 1
fi

work="$(mktemp -d /var/tmp/tack-rootfs.XXXXXX)"
trap 'rm -rf "$work"' EXIT
say "debootstrap bookworm into $work (a few minutes; progress below)"
# debootstrap prints one line per stage; show them as a running progress log.
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$work/rootfs" "$MIRROR" 2>&1 \
  | awk '/^I: (Retrieving|Validating|Extracting|Unpacking|Configuring|Installing|Base system)/ { n++; printf "\r\033[K  [%4d] %s", n, substr($0, 1, 70); fflush() } END { printf "\n" }'
[ -x "$work/rootfs/bin/bash" ] || { say "debootstrap failed (see above)" >&2; exit 1; }

say "adding the unprivileged user 'tack' (uid 1000) and /workspace"
chroot "$work/rootfs" /usr/sbin/groupadd -g 1000 tack
chroot "$work/rootfs" /usr/sbin/useradd -u 1000 -g 1000 -m -d /home/tack -s /bin/bash tack
mkdir -p "$work/rootfs/workspace"
chown 1000:1000 "$work/rootfs/workspace"
say "copying Node $node_version to /usr/local/bin/node"
install -m 0755 -o 0 -g 0 "$node_bin" "$work/rootfs/usr/local/bin/node"
chroot "$work/rootfs" /usr/local/bin/node --version >/dev/null || { say "node does not run in the image (a missing library?)" >&2; exit 1; }
say "copying the language servers ($LSP_PACKAGES) to $LSP_DIR"
mkdir -p "$work/rootfs$LSP_DIR/node_modules"
for package in $LSP_PACKAGES; do cp -rL "$modules/$package" "$work/rootfs$LSP_DIR/node_modules/"; done
chown -R 0:0 "$work/rootfs$LSP_DIR" && chmod -R a+rX,go-w "$work/rootfs$LSP_DIR"
# Drop caches and docs that only make the image bigger.
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"* \
  "$work/rootfs/usr/share/doc" "$work/rootfs/usr/share/man" "$work/rootfs/usr/share/locale"

say "importing into Docker as $IMAGE"
tar -C "$work/rootfs" -c . | docker import \
  --change 'USER 1000:1000' \
  --change 'WORKDIR /workspace' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/home/tack LANG=C.UTF-8' \
  --change "LABEL tack.recipe=$recipe_hash tack.node=$node_version" \
  --change 'CMD ["sleep", "infinity"]' \
  - "$IMAGE" >/dev/null
say "built $IMAGE ($(docker image inspect -f '{{ .Size }}' "$IMAGE" | awk '{ printf "%.0f MB", $1/1e6 }'))"
