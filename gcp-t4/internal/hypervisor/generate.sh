#!/usr/bin/env bash
# Regenerates the Go code for hypervisor.proto:
#   generate.sh            write hypervisor.pb.go and hypervisor_ttrpc.pb.go here
#   generate.sh OUTDIR     write them to OUTDIR instead (the freshness check,
#                          scripts/lint/check-generated.sh, in make lint)
#   generate.sh --tools    only install the generators and print their bin dir
#
# protoc comes from Debian's protobuf-compiler (scripts/lint/setup.sh
# installs it). protoc-gen-go and protoc-gen-go-ttrpc are installed with `go
# install` at the versions gcp-t4/go.mod requires for their runtimes, so the
# generated code always matches the libraries it is compiled against; they
# live in a per-version cache outside the repository.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module_dir=$(cd "$here/../.." && pwd)
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4

mod_version() {
	(cd "$module_dir" && go list -m -f '{{.Version}}' "$1")
}

protobuf_version=$(mod_version google.golang.org/protobuf)
ttrpc_version=$(mod_version github.com/containerd/ttrpc)
if [ -z "$protobuf_version" ] || [ -z "$ttrpc_version" ]; then
	echo "generate.sh: gcp-t4/go.mod must require google.golang.org/protobuf and github.com/containerd/ttrpc" >&2
	exit 1
fi

ensure_protoc() {
	if ! command -v protoc >/dev/null 2>&1; then
		echo "generate.sh: protoc is missing; run scripts/lint/setup.sh as root, or: sudo apt-get install -y protobuf-compiler" >&2
		exit 1
	fi
}

# ensure_plugin NAME PACKAGE VERSION: go install PACKAGE@VERSION into
# $cache_root/NAME-VERSION/bin unless it is already there, and print the dir.
ensure_plugin() {
	local name=$1 pkg=$2 version=$3
	local bin=$cache_root/$name-$version/bin
	if [ ! -x "$bin/$name" ]; then
		echo "generate.sh: installing $pkg@$version" >&2
		mkdir -p "$bin"
		# Build into a temp dir and move, so an interrupted install never
		# leaves a half-written plugin that later runs would trust.
		local tmp
		tmp=$(mktemp -d "$cache_root/.install.XXXXXX")
		(cd "$tmp" && GOWORK=off GOFLAGS='' GOBIN="$tmp" go install "$pkg@$version")
		mv -f "$tmp/$name" "$bin/$name"
		rm -rf "$tmp"
	fi
	echo "$bin"
}

mkdir -p "$cache_root"
go_bin=$(ensure_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$protobuf_version")
ttrpc_bin=$(ensure_plugin protoc-gen-go-ttrpc github.com/containerd/ttrpc/cmd/protoc-gen-go-ttrpc "$ttrpc_version")

if [ "${1:-}" = "--tools" ]; then
	echo "$go_bin:$ttrpc_bin"
	exit 0
fi

ensure_protoc
out=${1:-$here}
mkdir -p "$out"
PATH="$go_bin:$ttrpc_bin:$PATH" protoc \
	-I "$here" \
	--go_out="$out" --go_opt=paths=source_relative \
	--go-ttrpc_out="$out" --go-ttrpc_opt=paths=source_relative \
	"$here/hypervisor.proto"
