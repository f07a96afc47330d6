#!/usr/bin/env bash
# Unpacks Debian 12's own e2fsprogs (bookworm main, 1.47.0 today, not the
# bookworm-backports 1.47.2 that podvm/scripts/setup-host.sh installs for
# mkosi) into a cache directory keyed by its version, and prints that
# directory: TestCacheDiskImage builds the cache disk twice with it as well
# as with the installed one, so `cache build -disk` is shown reproducible
# with the e2fsprogs a fresh machine of this kind has, whatever this
# machine has installed. Nothing is installed on the system.
set -euo pipefail
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4"
PACKAGES=(e2fsprogs libext2fs2 libss2 libcom-err2)
command -v apt-get >/dev/null || { echo "e2fsprogs-release.sh: no apt-get: Debian's own e2fsprogs is fetched with apt-get download" >&2; exit 1; }
version=$(apt-cache policy e2fsprogs 2>/dev/null | awk '
	/^ (\*\*\*|   ) [0-9]/ { v = ($1 == "***") ? $2 : $1 }
	/ bookworm\/main / && v != "" { print v; exit }')
if [ -z "$version" ]; then
	echo "e2fsprogs-release.sh: apt knows no e2fsprogs from bookworm/main; as root run: apt-get update" >&2
	exit 1
fi
dir="$CACHE/e2fsprogs-$version"
if [ -x "$dir/sbin/mke2fs" ] && [ -x "$dir/sbin/debugfs" ]; then
	echo "$dir"
	exit 0
fi
mkdir -p "$CACHE"
tmp=$(mktemp -d "$CACHE/.e2fsprogs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pkgs=()
for p in "${PACKAGES[@]}"; do
	pkgs+=("$p/bookworm")
done
# apt-get download writes into the working directory; as root it warns that
# _apt cannot write there, which is harmless and not shown. A failed
# download is said here, with apt's words, and ends below ("fetched
# nothing").
downloaded=true
(cd "$tmp" && exec apt-get download -qq "${pkgs[@]}") 2>"$tmp/apt.err" || downloaded=false
grep -v "couldn't be accessed by user '_apt'" "$tmp/apt.err" >&2 || true
$downloaded || echo "e2fsprogs-release.sh: apt-get download ${pkgs[*]} failed" >&2
for p in "${PACKAGES[@]}"; do
	debs=("$tmp/${p}"_*.deb)
	[ -f "${debs[0]}" ] || { echo "e2fsprogs-release.sh: apt-get download $p/bookworm fetched nothing" >&2; exit 1; }
	dpkg-deb -x "${debs[0]}" "$tmp/root"
done
LD_LIBRARY_PATH="$tmp/root/lib/x86_64-linux-gnu" "$tmp/root/sbin/mke2fs" -V >/dev/null 2>&1 || { echo "e2fsprogs-release.sh: the unpacked mke2fs does not run" >&2; exit 1; }
rm -rf "$dir"
mv "$tmp/root" "$dir"
echo "$dir"
