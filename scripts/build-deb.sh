#!/usr/bin/env bash
# Builds tern's Debian package with dpkg-deb from a built binary: /usr/sbin/tern, the
# systemd unit in /lib/systemd/system (installed disabled, never started by the
# package), /etc/tern/tern.yaml as a conffile, the man pages (tern(8) and one per
# command), bash, zsh and fish completions, and the docs and examples under
# /usr/share/doc/tern. The man pages and completions come from running the binary
# (`tern man`, `tern completions`), so it must run on this machine.
#
# Usage: scripts/build-deb.sh --binary PATH --out DIR [--version V] [--compression C]
#   --binary PATH     the tern to package (scripts/release.sh passes the static musl
#                     build, which needs no shared library: hence no Depends)
#   --out DIR         where tern_VERSION_amd64.deb goes (created if missing)
#   --version V       the package version (default: what `tern --version` says)
#   --compression C   dpkg-deb's -Z: xz (default), gzip, zstd or none (the tests use
#                     none: packing a 280 MB debug binary with xz takes minutes)
# Prints the package's path. Reproducible: every file time is SOURCE_DATE_EPOCH
# (default: the last commit's time), owners are root:root (--root-owner-group), the
# gzip files carry no name or time (-n), and dpkg-deb sorts the members and takes its
# own time stamps from SOURCE_DATE_EPOCH; the same binary and commit give the same
# bytes. MAINTAINER overrides the Maintainer field.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: scripts/build-deb.sh --binary PATH --out DIR [--version V] [--compression xz|gzip|zstd|none]"
binary=""
out=""
version=""
compression="xz"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="${2:?--binary needs a path}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --version) version="${2:?--version needs a value}"; shift 2 ;;
    --compression) compression="${2:?--compression needs xz, gzip, zstd or none}"; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
[ -n "$binary" ] && [ -n "$out" ] || { echo "$usage" >&2; exit 2; }
[ -x "$binary" ] || { echo "scripts/build-deb.sh: --binary $binary is not an executable file" >&2; exit 2; }
command -v dpkg-deb >/dev/null || { echo "scripts/build-deb.sh: dpkg-deb is not installed (package dpkg)" >&2; exit 2; }

if [ -z "$version" ]; then
  # `tern 0.1.0` -> 0.1.0
  version="$("$binary" --version | awk '{print $2}')"
fi
case "$version" in
  [0-9]*) ;;
  *) echo "scripts/build-deb.sh: version '$version' does not start with a digit (Debian policy 5.6.12)" >&2; exit 2 ;;
esac
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH="$(git log -1 --format=%ct 2>/dev/null || echo 0)"
fi
export SOURCE_DATE_EPOCH
maintainer="${MAINTAINER:-tern maintainers <tern@example.org>}"

umask 022
stage="$(mktemp -d "${TMPDIR:-/tmp}/tern-deb.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
root="$stage/tern"
doc="$root/usr/share/doc/tern"

install -D -m 0755 "$binary" "$root/usr/sbin/tern"
install -D -m 0644 packaging/systemd/tern.service "$root/lib/systemd/system/tern.service"
install -D -m 0644 packaging/tern.yaml "$root/etc/tern/tern.yaml"

# Man pages: tern(8) and tern-COMMAND(8), compressed as Debian policy asks.
install -d "$root/usr/share/man/man8"
"$binary" man --dir "$root/usr/share/man/man8" >/dev/null || {
  echo "scripts/build-deb.sh: $binary man --dir failed: is it a tern with the man and completions commands?" >&2
  exit 1
}
gzip -9n "$root"/usr/share/man/man8/*.8
chmod 0644 "$root"/usr/share/man/man8/*

# Completions where each shell's Debian package looks for them.
install -d "$root/usr/share/bash-completion/completions" \
  "$root/usr/share/zsh/vendor-completions" "$root/usr/share/fish/vendor_completions.d"
"$binary" completions bash >"$root/usr/share/bash-completion/completions/tern"
"$binary" completions zsh >"$root/usr/share/zsh/vendor-completions/_tern"
"$binary" completions fish >"$root/usr/share/fish/vendor_completions.d/tern.fish"

# Docs and examples; the unit's Documentation= names README.md.
install -d "$doc/examples"
install -m 0644 README.md docs/daemon.md docs/configuration.md "$doc/"
cp -R config/examples/. "$doc/examples/"
{
  echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
  echo "Upstream-Name: tern"
  echo
  echo "Files: *"
  echo "License: Apache-2.0"
  echo
  echo "License: Apache-2.0"
  sed -e 's/^[[:space:]]*$/./' -e 's/^/ /' LICENSE
} >"$doc/copyright"
changelog_date="$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
printf 'tern (%s) unstable; urgency=medium\n\n  * Release %s.\n\n -- %s  %s\n' \
  "$version" "$version" "$maintainer" "$changelog_date" | gzip -9n >"$doc/changelog.Debian.gz"
find "$doc" -type d -exec chmod 0755 {} + && find "$doc" -type f -exec chmod 0644 {} +

# Control files.
install -d "$root/DEBIAN"
installed_size="$(du -sk --apparent-size "$root" | awk '{print $1}')"
sed -e "s/@VERSION@/$version/" -e "s/@INSTALLED_SIZE@/$installed_size/" \
  -e "s/@MAINTAINER@/$maintainer/" packaging/debian/control.in >"$root/DEBIAN/control"
install -m 0644 packaging/debian/conffiles "$root/DEBIAN/conffiles"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$root/DEBIAN/"
(cd "$root" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -printf '%P\0' \
  | LC_ALL=C sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"

# Fixed times on everything, links included.
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

mkdir -p "$out"
deb="$out/tern_${version}_amd64.deb"
dpkg-deb --root-owner-group -Z"$compression" --build "$root" "$deb" >/dev/null
echo "$deb"
