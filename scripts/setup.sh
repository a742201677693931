#!/usr/bin/env bash
# Installs what tern's build and tests need on a Debian/Ubuntu machine, only what is
# missing: Rust components and targets, and the Debian packages of the test peers and
# tools. Safe to run again. Usage: scripts/setup.sh [--minimal | --lab | --release]
#   --minimal   only what building and running `tern` needs (no test peers, no Windows)
#   --lab       what `tern-lab up` needs: the peer daemons and ping (no Windows)
#   --release   everything, plus what scripts/release.sh needs: the musl target and
#               musl-gcc (the static binary), buildah, umoci and podman (the image)
set -euo pipefail

minimal=0
lab=0
release=0
[ "${1:-}" = "--minimal" ] && minimal=1
[ "${1:-}" = "--lab" ] && { minimal=1; lab=1; }
[ "${1:-}" = "--release" ] && release=1

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
loud_skip() { printf '\n\033[1;33m*** SKIP: %s ***\033[0m\n\n' "$*" >&2; }
is_ci() { [ "${CI:-}" = "true" ]; }

# as_root CMD...: runs CMD as root, through sudo when we are not root. (An empty $SUDO
# prefix used to run "-E" as the command when setup ran as root.)
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else SUDO="none"; fi
fi
# protoc_check: compiles the .proto on stdin with the protoc the build will use.
protoc_check() {
  local dir; dir=$(mktemp -d)
  cat >"$dir/check.proto"
  "${PROTOC:-protoc}" --proto_path="$dir" ${PROTOC_INCLUDE:+--proto_path="$PROTOC_INCLUDE"} \
    --descriptor_set_out=/dev/null "$dir/check.proto" 2>/dev/null
  local rc=$?; rm -rf "$dir"; return $rc
}
as_root() { if [ -z "$SUDO" ]; then "$@"; else sudo "$@"; fi; }

# --- Rust -------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is not installed: install Rust with rustup (https://rustup.rs) or 'apt-get install rustup', then re-run." >&2
  exit 1
fi
if command -v rustup >/dev/null 2>&1; then
  for comp in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$comp" || { say "rustup component add $comp"; rustup component add "$comp"; }
  done
fi

# --- Debian packages --------------------------------------------------------
# The etcd client's build script runs protoc on etcd's .proto files, which import
# google/protobuf/descriptor.proto: that file is in libprotobuf-dev, not in
# protobuf-compiler (whose Recommends would bring it, but setup installs without them).
packages=(iproute2 protobuf-compiler libprotobuf-dev)
if [ $lab = 1 ]; then
  packages+=(bird2 gobgpd frr iputils-ping)
fi
if [ $minimal = 0 ]; then
  packages+=(bird2 gobgpd frr exabgp etcd-server iputils-ping nftables tshark tcpdump gcc-mingw-w64-x86-64 wine wine64 mmdebstrap systemd-container)
  # kubectl checks the lab's Kubernetes API server stand-in. Debian's package is
  # kubernetes-client; a kubectl from elsewhere (a cloud SDK) does as well and would
  # conflict with it.
  command -v kubectl >/dev/null || packages+=(kubernetes-client)
fi
if [ $release = 1 ]; then
  # runc: podman's default crun (1.8) refuses hybrid cgroup hosts; the image test uses runc.
  packages+=(musl-tools buildah umoci podman runc)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$SUDO" = none ]; then
    echo "missing Debian packages (${missing[*]}) and no root or sudo to install them" >&2
    exit 1
  fi
  say "apt-get install ${missing[*]}"
  # Routing daemons must never start in this machine's own namespace: their package
  # scripts would start them as services. policy-rc.d 101 forbids that during install.
  added_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
    as_root chmod +x /usr/sbin/policy-rc.d
    added_policy=1
  fi
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ $added_policy = 1 ] && as_root rm -f /usr/sbin/policy-rc.d
fi

# --- BIRD 1.6 beside BIRD 2 ----------------------------------------------------
# Debian's `bird` package is BIRD 1.6.8, the base of the fork calico-node ships. It is
# unpacked, not installed (it would replace bird2's files): the side-by-side lab runs
# the text confd renders on it, as a Calico node does.
BIRD1_DIR=/opt/tern/bird1.6
if { [ $minimal = 0 ] || [ $lab = 1 ]; } && [ ! -x "$BIRD1_DIR/usr/sbin/bird" ]; then
  if [ "$SUDO" = none ]; then
    echo "BIRD 1.6 is missing ($BIRD1_DIR) and there is no root or sudo to unpack it" >&2
    exit 1
  fi
  say "apt-get download bird (BIRD 1.6), unpacked in $BIRD1_DIR"
  bird1_tmp=$(mktemp -d)
  chmod 777 "$bird1_tmp"
  [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ] \
    || as_root apt-get update -qq
  (cd "$bird1_tmp" && as_root apt-get download -qq bird >/dev/null)
  as_root mkdir -p "$BIRD1_DIR"
  as_root dpkg-deb -x "$bird1_tmp"/bird_*.deb "$BIRD1_DIR"
  rm -rf "$bird1_tmp"
  "$BIRD1_DIR/usr/sbin/bird" --version 2>&1 | grep -q '^BIRD version 1\.' \
    || { echo "$BIRD1_DIR/usr/sbin/bird is not BIRD 1.x" >&2; exit 1; }
fi

# protoc must find the well-known types, or the build fails deep inside etcd-client's
# build script; say so here, where the fix is obvious.
if ! printf 'syntax = "proto3";\nimport "google/protobuf/descriptor.proto";\n' \
    | protoc_check; then
  echo "protoc cannot compile a file importing google/protobuf/descriptor.proto:" \
    "install libprotobuf-dev (Debian/Ubuntu) or set PROTOC_INCLUDE to protoc's include directory" >&2
  exit 1
fi

# --- Windows cross target ---------------------------------------------------
if [ $minimal = 0 ]; then
  if command -v rustup >/dev/null 2>&1; then
    if ! rustup target list --installed | grep -q '^x86_64-pc-windows-gnu$'; then
      say "rustup target add x86_64-pc-windows-gnu"
      rustup target add x86_64-pc-windows-gnu || {
        is_ci && { echo "cannot install the Windows target under CI=true" >&2; exit 1; }
        loud_skip "Windows target x86_64-pc-windows-gnu could not be installed"
      }
    fi
  else
    is_ci && { echo "rustup is needed for the Windows target under CI=true" >&2; exit 1; }
    loud_skip "no rustup: cannot add the Windows target"
  fi
fi
# --- static (musl) target, for scripts/release.sh -----------------------------
if [ $release = 1 ]; then
  if ! rustup target list --installed | grep -q '^x86_64-unknown-linux-musl$'; then
    say "rustup target add x86_64-unknown-linux-musl"
    rustup target add x86_64-unknown-linux-musl
  fi
fi
say "ready"
