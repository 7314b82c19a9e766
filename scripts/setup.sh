#!/usr/bin/env bash
# Everything a fresh Debian 12 machine needs to build, demo and test offline-bundle.
# Run as root (or with sudo available). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

# Real peers (docker-registry, skopeo, podman, umoci, containerd), zstd/openssl/jq for the
# interop checks, and a C++ toolchain for node-gyp: the native addon (zstd-napi) builds from
# source since no prebuilt binary can be fetched here. `pnpm package` also uses binutils
# (strip), systemd (systemd-analyze, for the unit's tests) and apt-get download + dpkg-deb
# (the image's base layer).
# arm64 artifacts: the cross compiler builds the zstd addon for arm64, the arm64 package lists
# let `apt-get download` fetch the arm64 image's base (.debs), and qemu-user runs the arm64
# outputs in test/package (qemu-aarch64 -L SYSROOT; no binfmt_misc needed). groff-base renders
# the man pages in the tests. zsh and fish load the generated completion scripts in the tests.
# systemd-container (systemd-nspawn) and mmdebstrap boot a node root under its own systemd for
# test/node (test/helpers/node.ts). chromium (headless, driven by playwright-core) loads
# `bundle cluster dashboard`'s page in test/cluster/dashboard-browser.test.ts.
# fuse3, fusefat, exfat-fuse, exfatprogs and dosfstools: FAT32 and exFAT images mounted through
# FUSE (this kernel has no vfat/exfat) for `bundle write-media`'s tests.
# iproute2 (ip netns, tc tbf) and nftables (numgen drops, byte counters): the peer tests' and
# bench's nodes in network namespaces and their link faults (test/helpers/netns.ts).
# prometheus: the real scraper of the agent's authenticated metrics (test/status/metrics-prometheus.test.ts).
if ! dpkg --print-foreign-architectures | grep -qx arm64; then $SUDO dpkg --add-architecture arm64; fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  docker-registry skopeo podman umoci containerd zstd openssl jq ca-certificates \
  python3 make g++ binutils tar gzip util-linux e2fsprogs systemd \
  g++-aarch64-linux-gnu qemu-user groff-base zsh fish systemd-container mmdebstrap \
  fuse3 fusefat exfat-fuse exfatprogs dosfstools chromium iproute2 nftables prometheus >/dev/null
# the tests run their own Prometheus on a free port: none left listening on 9090
if [ -d /run/systemd/system ]; then $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true; fi

# Node 20 is the target runtime; pnpm 10 is the last major that runs on it.
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' \
  || { echo "setup: Node.js 20 or newer is required (found $(node --version))" >&2; exit 1; }
if ! pnpm --version 2>/dev/null | grep -q '^10\.'; then
  $SUDO npm install -g pnpm@10 >/dev/null
fi

export npm_config_nodedir=/usr   # build addons against the system's Node headers (also in .npmrc)
pnpm install --frozen-lockfile
pnpm build

# What `pnpm package` builds from and cannot make itself (the Node runtimes, the agent image's
# Debian packages), fetched once into ~/.cache/offline-bundle: every build after this is offline.
# Debian's archive keeps only the current version of a package: when a point release replaced a
# pinned .deb (apt says "Version … was not found"), a test machine re-pins to what its apt offers,
# said loudly (a factory commits the new scripts/base-debs.lock.json). Any other failure stops here.
if ! fetch_log=$(pnpm -s package:fetch 2>&1); then
  printf '%s\n' "$fetch_log" >&2
  if grep -q "was not found" <<<"$fetch_log"; then
    echo "setup: a pinned .deb is gone from Debian's archive; re-pinning to this machine's apt (commit scripts/base-debs.lock.json if this is the factory)" >&2
    pnpm -s package:fetch --update-pins
  else
    exit 1
  fi
else
  printf '%s\n' "$fetch_log"
fi
