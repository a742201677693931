#!/usr/bin/env bash
# Prepares a Wine prefix in which Windows unit tests (x86_64-pc-windows-gnu) run, and
# prints its path. Idempotent: an existing prefix with the stub is reused.
#
# Why a stub: Rust's std (since about 1.78) imports ProcessPrng from
# bcryptprimitives.dll, which Wine 8 (Debian bookworm) lacks; every test exe would exit
# silently with code 53. A six-line DLL forwarding to BCryptGenRandom fixes that.
# Usage: WINEPREFIX=$(scripts/wine-prefix.sh [DIR])   (default DIR: target/wine)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="$(realpath -m "${1:-target/wine}")"
dll="$prefix/drive_c/windows/system32/bcryptprimitives.dll"
if [ ! -f "$dll" ]; then
  mkdir -p "$prefix"
  WINEPREFIX="$prefix" WINEDEBUG=-all wineboot -i >/dev/null 2>&1
  # wineboot returns before the prefix is fully written; wait for its server.
  WINEPREFIX="$prefix" wineserver -w
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  cat > "$work/bcryptprimitives.c" <<'C'
#include <windows.h>
#include <bcrypt.h>
BOOL WINAPI ProcessPrng(PBYTE d, SIZE_T n) { return BCryptGenRandom(NULL, d, (ULONG)n, BCRYPT_USE_SYSTEM_PREFERRED_RNG) == 0; }
C
  printf 'LIBRARY bcryptprimitives.dll\nEXPORTS\n    ProcessPrng\n' > "$work/bcryptprimitives.def"
  x86_64-w64-mingw32-gcc -O2 -shared -o "$work/bcryptprimitives.dll" \
    "$work/bcryptprimitives.c" "$work/bcryptprimitives.def" -lbcrypt
  cp "$work/bcryptprimitives.dll" "$dll"
fi
echo "$prefix"
