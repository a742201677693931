#!/usr/bin/env bash
# Installs what tern's build and tests need on a Debian/Ubuntu machine, only what is
# missing: Rust components and targets, and the Debian packages of the test peers and
# tools. Safe to run again. Usage: scripts/setup.sh [--minimal | --lab]
#   --minimal   only what building and running `tern` needs (no test peers, no Windows)
#   --lab       what `tern-lab up` needs: the peer daemons and ping (no Windows)
set -euo pipefail

minimal=0
lab=0
[ "${1:-}" = "--minimal" ] && minimal=1
[ "${1:-}" = "--lab" ] && { minimal=1; lab=1; }

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
loud_skip() { printf '\n\033[1;33m*** SKIP: %s ***\033[0m\n\n' "$*" >&2; }
is_ci() { [ "${CI:-}" = "true" ]; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else SUDO="none"; fi
fi

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
packages=(iproute2 protobuf-compiler)
if [ $lab = 1 ]; then
  packages+=(bird2 gobgpd frr iputils-ping)
fi
if [ $minimal = 0 ]; then
  packages+=(bird2 gobgpd frr exabgp etcd-server iputils-ping nftables tshark tcpdump gcc-mingw-w64-x86-64 wine wine64)
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
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    added_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO -E apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ $added_policy = 1 ] && $SUDO rm -f /usr/sbin/policy-rc.d
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
say "ready"
