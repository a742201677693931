#!/usr/bin/env bash
# The main job, as a newcomer first sees it: a Calico-style cluster in network
# namespaces on this machine. Four tern nodes in a node-to-node mesh with a BIRD
# top-of-rack router, two pods per node plus one with an address borrowed from the next
# node's block, IPv4 and IPv6. Prints the nodes, the time to converge, every node's
# `tern status`, and the ping matrix between all pods; then removes everything.
#   ./demo.sh            build, bring the cluster up, show it, take it down
#   ./demo.sh --keep     leave it running (explore with target/release/tern-lab status |
#                        ping, `target/release/tern routes --socket /tmp/tern-lab/node-1/tern.sock`;
#                        remove it with target/release/tern-lab down)
#   ./demo.sh -- ARGS    other `tern-lab up` options, e.g. -- --nodes 8 --route-reflectors 2
# Needs root (network namespaces); installs bird2, gobgpd, frr and iputils-ping if missing.
# Touches nothing outside its own namespaces (tl-*), addresses from 198.51.100.0/24,
# 198.18.0.0/15 and 2001:db8::/32 only.
set -euo pipefail
cd "$(dirname "$0")"

keep=0
up_args=(--nodes 4 --tor bird --pods 2 --borrowed 1 --ipv6)
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1; shift ;;
    --) shift; up_args=("$@"); break ;;
    *) echo "usage: ./demo.sh [--keep] [-- tern-lab up options]" >&2; exit 2 ;;
  esac
done

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

scripts/setup.sh --lab
printf '\n\033[1m==> cargo build --release\033[0m\n'
cargo build --release --locked -q -p tern --bin tern -p tern-interop --bin tern-lab
lab=target/release/tern-lab

# A lab left over from an earlier run goes first.
$SUDO "$lab" down >/dev/null || true
cleanup() { [ $keep = 1 ] || $SUDO "$lab" down; }
trap cleanup EXIT

printf '\n\033[1m==> tern-lab up %s\033[0m\n' "${up_args[*]}"
start=$(date +%s%N)
$SUDO "$lab" up "${up_args[@]}"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf '(namespaces built, daemons started, converged and checked in %d.%01d s)\n' $((ms / 1000)) $(((ms % 1000) / 100))

printf '\n\033[1m==> tern-lab status\033[0m\n'
$SUDO "$lab" status
printf '\n\033[1m==> tern-lab ping\033[0m\n'
$SUDO "$lab" ping
if [ $keep = 1 ]; then
  printf '\nThe lab keeps running. Remove it with: sudo %s down\n' "$lab"
else
  printf '\n\033[1m==> tern-lab down\033[0m\n'
fi
