#!/usr/bin/env bash
# Builds tern's OCI image (FROM scratch, the static binary at /usr/sbin/tern) with
# buildah and writes it as an OCI archive, with no image registry involved. The build
# is reproducible: file times, the image's created time and the archive's own tar
# headers come from SOURCE_DATE_EPOCH (default: the last commit's time), so the same
# commit and binary give the same image digest and the same archive bytes.
#
# Usage: scripts/image.sh --binary PATH [--out DIR] [--check-reproducible]
#   --binary PATH           the static x86_64-unknown-linux-musl tern (scripts/release.sh
#                           passes its stripped copy in dist/)
#   --out DIR               where tern-VERSION-oci.tar goes (default dist/)
#   --check-reproducible    build twice and fail unless both archives are identical
# Prints the archive's path and the image's manifest digest. buildah's storage is a
# throw-away directory under target/tmp (vfs driver): the machine's own container
# store is never touched. Needs root (or buildah's rootless set-up) and buildah.
set -euo pipefail
cd "$(dirname "$0")/.."

binary=""
out="dist"
check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="${2:?--binary needs a path}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --check-reproducible) check=1; shift ;;
    *) echo "usage: scripts/image.sh --binary PATH [--out DIR] [--check-reproducible]" >&2; exit 2 ;;
  esac
done
[ -n "$binary" ] || { echo "scripts/image.sh: --binary PATH is required" >&2; exit 2; }
[ -f "$binary" ] || { echo "scripts/image.sh: the binary $binary does not exist" >&2; exit 1; }
command -v buildah >/dev/null || { echo "scripts/image.sh: buildah is not installed (scripts/setup.sh --release)" >&2; exit 1; }
# A dynamic binary would start in the build and fail in the scratch image: refuse it.
if file -b "$binary" | grep -q 'dynamically linked'; then
  echo "scripts/image.sh: $binary is dynamically linked; the image needs the static x86_64-unknown-linux-musl build" >&2
  exit 1
fi

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "scripts/image.sh: no version in Cargo.toml's [workspace.package]" >&2; exit 1; }
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
# A binary built from a checkout with changes is not that commit's: say so in the label.
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  revision="$revision-dirty"
  echo "scripts/image.sh: warning: the checkout has uncommitted changes; revision label $revision" >&2
fi
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
# The source label only when the checkout says where it comes from (or it is given):
# a made-up URL would be worse than none.
source_url="${TERN_IMAGE_SOURCE:-$(git config --get remote.origin.url 2>/dev/null || true)}"
name="localhost/tern:$version"

work="$PWD/target/tmp/image-build"
storage=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)
cleanup() {
  buildah "${storage[@]}" rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# build_archive DEST: one complete build into the OCI archive DEST.
build_archive() {
  local dest="$1"
  cleanup
  mkdir -p "$work/context/rootfs/usr/sbin" "$work/layout"
  install -m 0755 "$binary" "$work/context/rootfs/usr/sbin/tern"
  find "$work/context" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  local labels=(--label "org.opencontainers.image.version=$version"
    --label "org.opencontainers.image.revision=$revision")
  [ -n "$source_url" ] && labels+=(--label "org.opencontainers.image.source=$source_url")
  # --timestamp fixes the created time and every file time in the layer;
  # --identity-label=false leaves out buildah's own version, which would change the
  # digest with the build machine's buildah.
  buildah "${storage[@]}" build --quiet --layers=false --pull=never \
    --timestamp "$SOURCE_DATE_EPOCH" --identity-label=false \
    --platform linux/amd64 "${labels[@]}" \
    -f packaging/oci/Containerfile -t "$name" "$work/context" >/dev/null
  buildah "${storage[@]}" push --quiet "$name" "oci:$work/layout:$name" >/dev/null
  # buildah writes an oci-archive's tar headers with the current time; the layout
  # directory it wrote is packed here instead, sorted and with fixed times and owners.
  find "$work/layout" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    --format=gnu -C "$work/layout" -cf "$dest" .
}

# manifest_digest ARCHIVE: the image's digest (its manifest's, as index.json names it).
manifest_digest() {
  tar -xOf "$1" ./index.json | grep -o '"digest":"sha256:[0-9a-f]*"' | head -1 | cut -d'"' -f4
}

mkdir -p "$out"
archive="$out/tern-$version-oci.tar"
build_archive "$archive"
digest=$(manifest_digest "$archive")
if [ $check = 1 ]; then
  second="$work-second.tar"
  build_archive "$second"
  again=$(manifest_digest "$second")
  if ! cmp -s "$archive" "$second"; then
    echo "scripts/image.sh: not reproducible: two builds differ (image digests $digest and $again)" >&2
    rm -f "$second"
    exit 1
  fi
  rm -f "$second"
  echo "reproducible: two builds gave the same archive and image digest"
fi
echo "image $name: $archive ($(du -h "$archive" | cut -f1)), digest $digest"
