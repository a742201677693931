#!/usr/bin/env bash
# Builds tern's release artifacts into dist/ (see docs/release.md):
#   tern-VERSION-x86_64-linux-musl    the static Linux binary, symbols stripped
#   tern-VERSION-x86_64-windows.exe   the Windows binary (x86_64-pc-windows-gnu), stripped
#   tern_VERSION_*.deb                the Debian package, when scripts/build-deb.sh exists
#   tern-VERSION-oci.tar              the OCI image (FROM scratch), scripts/image.sh
#   SHA256SUMS                        SHA-256 of every file in dist/
# Usage: scripts/release.sh [--image-only] [--no-image] [--no-windows] [--check-reproducible]
#   --image-only            only the static binary and the image (what tests/image_lab.rs needs)
#   --no-image              everything but the image (no buildah needed)
#   --no-windows            skip the Windows binary
#   --check-reproducible    build the image twice and fail unless both are identical
# Needs what `scripts/setup.sh --release` installs. Prints each artifact's size and
# the image's digest.
set -euo pipefail
cd "$(dirname "$0")/.."

image=1
windows=1
deb=1
check=()
while [ $# -gt 0 ]; do
  case "$1" in
    --image-only) windows=0; deb=0; shift ;;
    --no-image) image=0; shift ;;
    --no-windows) windows=0; shift ;;
    --check-reproducible) check=(--check-reproducible); shift ;;
    *) echo "usage: scripts/release.sh [--image-only] [--no-image] [--no-windows] [--check-reproducible]" >&2; exit 2 ;;
  esac
done

say() { printf '\033[1m[release]\033[0m %s\n' "$*"; }
size() { stat -c %s "$1" | numfmt --to=iec-i --suffix=B; }
start=$(date +%s)
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "release.sh: no version in Cargo.toml's [workspace.package]" >&2; exit 1; }
# The file times of the image and the package: one value for the whole run, handed to
# those scripts only. Not exported to cargo: the cc crate lists SOURCE_DATE_EPOCH as
# an input of ring's build script, so a value that moves with every commit would
# rebuild ring and everything above it on each run.
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
mkdir -p dist

# --- the static Linux binary ---------------------------------------------------
# ring's C code is compiled with musl-gcc (musl-tools).
musl_target=x86_64-unknown-linux-musl
rustup target list --installed 2>/dev/null | grep -q "^$musl_target\$" ||
  { echo "release.sh: the rustup target $musl_target is missing (scripts/setup.sh --release)" >&2; exit 1; }
command -v musl-gcc >/dev/null || { echo "release.sh: musl-gcc is missing (Debian package musl-tools)" >&2; exit 1; }
say "cargo build --release --target $musl_target"
cargo build --release --locked --target "$musl_target" -p tern --bin tern
built="target/$musl_target/release/tern"
if ! file -b "$built" | grep -Eq 'static(-pie)? linked|statically linked'; then
  echo "release.sh: $built is not statically linked: $(file -b "$built")" >&2
  exit 1
fi
linux="dist/tern-$version-x86_64-linux-musl"
# A stripped copy: the release profile keeps symbol names (target/ keeps that binary,
# which names the functions of a stripped one's backtrace addresses).
strip --strip-all -o "$linux" "$built"
touch -d "@$epoch" "$linux"
say "$linux: $(size "$linux") (unstripped $(size "$built")), $(file -b "$linux" | grep -Eo 'stat[a-z-]* linked')"

# --- Windows --------------------------------------------------------------------
if [ $windows = 1 ]; then
  win_target=x86_64-pc-windows-gnu
  rustup target list --installed 2>/dev/null | grep -q "^$win_target\$" ||
    { echo "release.sh: the rustup target $win_target is missing (scripts/setup.sh)" >&2; exit 1; }
  say "cargo build --release --target $win_target"
  cargo build --release --locked --target "$win_target" -p tern --bin tern
  exe="dist/tern-$version-x86_64-windows.exe"
  x86_64-w64-mingw32-strip --strip-all -o "$exe" "target/$win_target/release/tern.exe"
  touch -d "@$epoch" "$exe"
  say "$exe: $(size "$exe")"
fi

# --- the Debian package (scripts/build-deb.sh, when present) ------------------------
if [ $deb = 1 ]; then
  if [ -x scripts/build-deb.sh ]; then
    say "scripts/build-deb.sh"
    # The stripped binary: the package ships the same bytes as the checksummed one.
    SOURCE_DATE_EPOCH=$epoch scripts/build-deb.sh --binary "$linux" --out dist
  else
    say "no scripts/build-deb.sh: no Debian package"
  fi
fi

# --- the OCI image --------------------------------------------------------------------
if [ $image = 1 ]; then
  say "scripts/image.sh"
  SOURCE_DATE_EPOCH=$epoch scripts/image.sh --binary "$linux" --out dist "${check[@]}"
fi

# --- checksums ---------------------------------------------------------------------------
(cd dist && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort |
  xargs -r sha256sum >SHA256SUMS)
say "dist/SHA256SUMS:"
sed 's/^/  /' dist/SHA256SUMS
say "done in $(($(date +%s) - start)) s"
