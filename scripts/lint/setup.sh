#!/usr/bin/env bash
# Installs what `make lint` runs, idempotently:
#   - Debian packages shellcheck and protobuf-compiler (apt-get, as root;
#     otherwise it prints the command to run and fails);
#   - staticcheck at STATICCHECK_VERSION, `go install`ed from the module
#     proxy into the tool cache by version;
#   - protoc-gen-go and protoc-gen-go-ttrpc at the versions gcp-t4/go.mod
#     requires, cached by version (gcp-t4/internal/hypervisor/generate.sh).
# Prints nothing but errors when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${STATICCHECK_VERSION:?set STATICCHECK_VERSION (the Makefile does)}"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4
# go install compiles for minutes on a fresh clone: counted, on stderr.
progress=$PWD/scripts/go-progress.sh

missing=()
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "lint setup: missing Debian packages; run: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
		exit 1
	fi
	echo "lint setup: installing ${missing[*]} with apt-get" >&2
	# Other jobs may hold the dpkg lock for a while; wait rather than fail.
	apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# go_install NAME PACKAGE VERSION: PACKAGE@VERSION into $cache/NAME-VERSION/
# unless it is there. One install at a time per tool (flock), built into a
# temp dir and moved, so a concurrent or interrupted run never leaves a
# half-written binary that later runs would trust.
go_install() {
	local name=$1 pkg=$2 version=$3
	local dir=$cache/$name-$version
	[ -x "$dir/$name" ] && return
	mkdir -p "$cache"
	exec 9>"$cache/.$name.lock"
	flock 9
	if [ ! -x "$dir/$name" ]; then
		echo "lint setup: installing $pkg@$version into $dir" >&2
		local tmp
		tmp=$(mktemp -d "$cache/.$name.XXXXXX")
		(cd "$tmp" && GOWORK=off GOFLAGS='' GOBIN="$tmp" "$progress" install "$pkg@$version") >&2
		mkdir -p "$dir"
		mv -f "$tmp/$name" "$dir/$name"
		rm -rf "$tmp"
	fi
	exec 9>&-
}

go_install staticcheck honnef.co/go/tools/cmd/staticcheck "$STATICCHECK_VERSION"
gcp-t4/internal/hypervisor/generate.sh --tools >/dev/null
