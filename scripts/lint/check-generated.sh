#!/usr/bin/env bash
# Fails when the committed Go code for the kata remote-hypervisor protocol
# (gcp-t4/internal/hypervisor) is not what hypervisor.proto and the pinned
# generators produce. Needs protoc and the cached plugins: scripts/lint/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=gcp-t4/internal/hypervisor
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$dir/generate.sh" "$out"
# The protoc version line differs between Debian releases' protoc builds
# without changing the code.
tab=$(printf '\t')
strip() { sed -e "/^\/\/ ${tab}protoc  *v/d" "$1"; }
stale=0
for f in hypervisor.pb.go hypervisor_ttrpc.pb.go; do
	if [ ! -f "$out/$f" ]; then
		echo "check-generated.sh: generate.sh did not write $f" >&2
		exit 1
	fi
	if ! diff -u --label "committed $dir/$f" --label "generated" <(strip "$dir/$f") <(strip "$out/$f") >&2; then
		stale=1
	fi
done
if [ "$stale" -ne 0 ]; then
	echo "check-generated.sh: $dir is stale: hypervisor.proto or a generator version changed; run \`go generate ./$dir\` and commit the result" >&2
	exit 1
fi
echo "generated code in $dir is current"
