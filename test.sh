#!/usr/bin/env bash
# Runs every test of tern: installs what is missing (scripts/setup.sh), then formatting,
# lints, all unit / property / namespace tests, and the Windows build check.
#   ./test.sh               everything CI runs
#   ./test.sh --fuzz SECS   also run each fuzz target (decode, fsm, cluster, tern_yaml,
#                           structured)
#                           with cargo-fuzz for SECS seconds
#   ./test.sh --audit       cargo audit against the advisory database fetched from the
#                           network (without the flag, a local snapshot is used when
#                           present: $TERN_ADVISORY_DB, else the team's shared copy)
#   ./test.sh --bench       also run the codec benchmarks (figures in README)
#   ./test.sh --lab-bench   also run tern against BIRD, FRR and GoBGP (scripts/bench.sh,
#                           about 27 min; the README's benchmark table) and the BFD
#                           load (1,000 sessions against FRR's bfdd, about a minute)
#   ./test.sh --soak [MIN]  also run the soak for MIN minutes (default 20): a 10-node lab
#                           under churn and flaps, RSS and CPU sampled (scripts/soak.sh)
#   ./test.sh --release     also build the release artifacts (scripts/release.sh: static
#                           binary, .exe, .deb, OCI image; minutes) and run the image
#                           under podman in a lab namespace (tests/image_lab.rs)
set -euo pipefail
cd "$(dirname "$0")"

fuzz_secs=0
bench=0
lab_bench=0
audit=0
soak_min=0
release=0
while [ $# -gt 0 ]; do
  case "$1" in
    --fuzz) fuzz_secs="${2:?--fuzz needs seconds}"; shift 2 ;;
    --bench) bench=1; shift ;;
    --lab-bench) lab_bench=1; shift ;;
    --audit) audit=1; shift ;;
    --release) release=1; shift ;;
    --soak)
      if [[ "${2:-}" =~ ^[0-9]+([.][0-9]+)?$ ]]; then soak_min="$2"; shift 2; else soak_min=20; shift; fi ;;
    *) echo "usage: ./test.sh [--fuzz SECS] [--bench] [--lab-bench] [--audit] [--soak [MINUTES]] [--release]" >&2; exit 2 ;;
  esac
done

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
# Every skip, the tests' own included (tests/support/skip.rs), lands in one list that
# is printed at the end: the test harness hides a passing test's stderr.
mkdir -p target/tmp
export TERN_SKIP_LOG="$PWD/target/tmp/skips.txt"
rm -f "$TERN_SKIP_LOG"
loud_skip() {
  printf '\n\033[1;33m*** SKIP: %s ***\033[0m\n\n' "$*" >&2
  printf 'test.sh: %s\n' "$*" >>"$TERN_SKIP_LOG"
}
start=$(date +%s)

step "setup"
if [ $release = 1 ]; then scripts/setup.sh --release; else scripts/setup.sh; fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "the protocol core without its tokio driver (tern-bgp --no-default-features)"
cargo clippy -p tern-bgp --no-default-features --lib --locked -- -D warnings
cargo test -p tern-bgp --no-default-features --lib --locked

# The Wine lab (interop/tests/wine_lab.rs) runs tern.exe from this build; without the
# target the test skips loudly (a failure under CI=true).
if rustup target list --installed 2>/dev/null | grep -q '^x86_64-pc-windows-gnu$'; then
  step "Windows: tern.exe for the Wine lab (interop/tests/wine_lab.rs)"
  cargo build -p tern --target x86_64-pc-windows-gnu --bin tern --locked
fi

step "cargo test (workspace)"
rm -f target/tmp/lab-timings.txt
cargo test --workspace --locked
if [ -s target/tmp/lab-timings.txt ]; then
  step "lab scenario timings (tests/lab_scenarios.rs)"
  cat target/tmp/lab-timings.txt
fi

step "Windows: cargo clippy --target x86_64-pc-windows-gnu (warnings are errors)"
if rustup target list --installed 2>/dev/null | grep -q '^x86_64-pc-windows-gnu$'; then
  cargo clippy --workspace --all-targets --locked --target x86_64-pc-windows-gnu -- -D warnings
  step "Windows: unit tests (every crate's lib) under Wine"
  if command -v wine >/dev/null 2>&1; then
    WINEPREFIX="$(scripts/wine-prefix.sh)" WINEDEBUG=-all \
      CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine \
      cargo test --workspace --locked --lib --target x86_64-pc-windows-gnu
  else
    [ "${CI:-}" = "true" ] && { echo "wine missing under CI=true" >&2; exit 1; }
    loud_skip "Windows unit tests: wine not installed"
  fi
else
  [ "${CI:-}" = "true" ] && { echo "Windows target missing under CI=true" >&2; exit 1; }
  loud_skip "Windows check: target x86_64-pc-windows-gnu not installed"
fi

if [ "$fuzz_secs" != 0 ]; then
  step "cargo fuzz: decode, fsm, cluster, tern_yaml, structured for ${fuzz_secs}s each"
  command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
  (cd bgp/fuzz && for t in decode fsm; do mkdir -p corpus/$t
     cargo fuzz run -s none $t corpus/$t seeds/$t -- -max_total_time="$fuzz_secs" || exit 1; done)
  (cd config/fuzz && for t in cluster tern_yaml structured; do mkdir -p corpus/$t
     cargo fuzz run -s none $t corpus/$t seeds/$t -- -max_total_time="$fuzz_secs" -timeout=10 || exit 1; done)
fi

# RustSec advisories against every Cargo.lock. A local snapshot of the database is used
# when there is one (this workplace's machines cannot fetch it); --audit fetches it.
advisory_db="${TERN_ADVISORY_DB:-}"
if [ -n "$advisory_db" ] || [ $audit = 1 ]; then
  step "cargo audit (RustSec advisories against every Cargo.lock)"
  command -v cargo-audit >/dev/null 2>&1 || cargo install cargo-audit --locked --quiet
  if [ -n "$advisory_db" ]; then
    audit_args=(--db "$advisory_db" --no-fetch)
    echo "advisory database: $advisory_db ($(head -c 200 "$advisory_db/SNAPSHOT" 2>/dev/null | head -1))"
  else
    audit_args=()
  fi
  # Any advisory fails the run. To accept one, add its id with the reason to
  # .cargo/audit.toml ([advisories] ignore); none is accepted today.
  for lock in Cargo.lock bgp/fuzz/Cargo.lock config/fuzz/Cargo.lock; do
    echo "--- $lock"
    cargo audit "${audit_args[@]}" --file "$lock"
  done
else
  loud_skip "cargo audit: no advisory database here (set TERN_ADVISORY_DB to a copy of RustSec's advisory-db, or run ./test.sh --audit with network access)"
fi

if [ $bench = 1 ]; then
  step "benchmarks"
  cargo bench -p tern-bgp --bench wire
fi

if [ $lab_bench = 1 ]; then
  step "tern vs BIRD, FRR, GoBGP (scripts/bench.sh)"
  scripts/bench.sh
  step "BFD: 1,000 sessions at 100 ms x 3, tern's CPU against FRR's bfdd (tests/bfd_load.rs)"
  TERN_BFD_LOAD=1 cargo test --release --locked --test bfd_load -- --nocapture
fi

if [ "$soak_min" != 0 ]; then
  step "soak: 10 nodes under churn and flaps for ${soak_min} min (scripts/soak.sh)"
  scripts/soak.sh "$soak_min"
fi

if [ $release = 1 ]; then
  step "release artifacts (scripts/release.sh) and the image under podman"
  scripts/release.sh --check-reproducible
  TERN_IMAGE_TEST=1 cargo test --locked -p tern --test image_lab -- --nocapture
fi

step "skipped"
if [ -s "$TERN_SKIP_LOG" ]; then
  sed 's/^/  /' "$TERN_SKIP_LOG"
  echo "$(wc -l <"$TERN_SKIP_LOG") skipped (documented skips: tests/skips-allowed.txt)"
else
  echo "  nothing skipped"
fi

step "all tests passed in $(( $(date +%s) - start ))s"
