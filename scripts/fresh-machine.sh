#!/usr/bin/env bash
# The gate before a piece of work is called done: runs `./demo.sh` and then the whole CI
# (`bash .ci/run`) the way a newcomer and CI see the project, in a throw-away copy of a
# new machine (only the Debian packages a new machine has, a clone of the committed
# HEAD, the Rust toolchain without extra targets, CI=true). Uncommitted changes are not
# in it. About 3 min for the demo and 20-30 for everything on 2 cores; prints both times.
#   scripts/fresh-machine.sh            the demo, then CI
#   scripts/fresh-machine.sh 'CMD'      any command in the clone's root
# The throw-away machine is made by the team's fresh-machine tool, which lives in the
# team's workspace beside this repository (not in it); set FRESH_MACHINE to its path.
set -euo pipefail
cd "$(dirname "$0")/.."
tool="${FRESH_MACHINE:-../shared/tools/fresh-machine}"
if [ ! -x "$tool" ]; then
  echo "fresh-machine: the tool is not here ($tool): it comes with the team's workspace;" \
    "set FRESH_MACHINE to its path" >&2
  exit 2
fi
[ "$(id -u)" = 0 ] || { echo "fresh-machine: run as root" >&2; exit 2; }
if [ $# -gt 0 ]; then
  exec "$tool" "$@"
fi
t0=$(date +%s)
"$tool" 'set -e; start=$(date +%s); ./demo.sh; demo=$(( $(date +%s) - start )); start=$(date +%s); bash .ci/run; echo "[fresh-machine] ./demo.sh took ${demo} s, bash .ci/run took $(( $(date +%s) - start )) s"'
echo "[fresh-machine] passed in $(( $(date +%s) - t0 )) s in all"
