#!/usr/bin/env bash
# The side-by-side benchmark of the README: tern, BIRD 2, FRR and GoBGP (and the null
# daemon, the injector's ceiling) on the same loads in network namespaces, alternating,
# with median (min-max) figures. Needs root; installs the daemons if missing.
#   scripts/bench.sh                 the README's set (about 27 min on 2 cores)
#   scripts/bench.sh SCENARIO...     others, e.g. prefixes:10000 peers:50
# Output: the tables on stdout and target/tmp/bench{,-rib,-large,-rib-large,-scale,-reflector}.json,
# all tables in target/tmp/bench.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --lab >/dev/null
cargo build --release --locked -p tern -p tern-interop --bins
mkdir -p target/tmp
if [ $# -eq 0 ]; then
  set -- prefixes:100000 peers:200 restart:100000 --reps 3
  full=1
else
  full=0
fi
target/release/tern-lab bench "$@" --json target/tmp/bench.json | tee target/tmp/bench.txt
if [ $full = 1 ]; then
  # RIB only (no daemon touches the kernel, each pinned to one core), polled every
  # 10 ms: BIRD takes 100,000 routes in about 0.04 s.
  target/release/tern-lab bench rib:100000 --reps 3 --poll-ms 10 \
    --json target/tmp/bench-rib.json | tee -a target/tmp/bench.txt
  # The largest loads once each: a run of GoBGP or FRR with 1M prefixes takes minutes.
  target/release/tern-lab bench prefixes:1000000 peers:1000 churn:100000:1000:60 --reps 1 \
    --json target/tmp/bench-large.json | tee -a target/tmp/bench.txt
  target/release/tern-lab bench rib:1000000 --reps 1 --poll-ms 10 \
    --json target/tmp/bench-rib-large.json | tee -a target/tmp/bench.txt
  # Scale: a 5,000-node mesh (IPv6) against BIRD, the reference; and a route reflector
  # with 1,000 clients (each client decodes what it is sent; RIB only, pinned to one
  # core), where GoBGP alone takes about 9 minutes.
  target/release/tern-lab bench peers:5000 --daemons tern,bird --reps 1 \
    --json target/tmp/bench-scale.json | tee -a target/tmp/bench.txt
  target/release/tern-lab bench reflector:1000 --daemons tern,bird,frr,gobgp --reps 1 \
    --json target/tmp/bench-reflector.json | tee -a target/tmp/bench.txt
fi
