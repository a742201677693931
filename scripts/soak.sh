#!/usr/bin/env bash
# The soak (= ./test.sh --soak MINUTES): builds the release binaries and runs
#   tern-lab soak --minutes MINUTES (default 20)
# a 10-node tern mesh with a BIRD ToR and pods, under churn (blocks moving between
# nodes, workload routes added and deleted) and flaps (kill -9 + restart, link down past
# the hold time), every tern's RSS and CPU sampled every 5 s. Fails if a route is lost
# or left stale, a pod is unreachable at the end, or a never-restarted tern's RSS grew.
# Prints an ASCII chart of RSS over time; every sample lands in target/soak/soak.csv,
# the report in target/soak/report.txt. Root; namespaces soak-*.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-20}"
cargo build --release --locked -p tern --bin tern -p tern-interop --bin tern-lab
rm -rf target/soak && mkdir -p target/soak
target/release/tern-lab soak --minutes "$minutes" --dir "$PWD/target/soak" | tee target/soak/report.txt
