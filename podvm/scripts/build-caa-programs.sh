#!/usr/bin/env bash
# Builds upstream CAA's two podVM programs, agent-protocol-forwarder and
# process-user-data, from upstream's source at the pinned commit, and stages
# them into the guest-binaries input with their sha256 (SHA256SUMS) and
# provenance (VERSIONS). make podvm-binaries runs it for the pin file's
# `source` slots; upstream publishes no binaries of these two for v0.22.0
# (its podvm-binaries image is built without being pushed).
#
# Sources, both pinned in podvm/guest-artefacts.pins (the "source" lines):
#   CAA_SRC=<dir>   a git checkout of confidential-containers/cloud-api-adaptor
#                   at the pinned commit (its HEAD must be that commit, with
#                   no tracked file modified); default: cloned at that commit
#   KATA_SRC=<dir>  a git checkout of kata-containers/kata-containers at the
#                   commit CAA's go.mod pins for src/runtime; default: cloned
# The checkouts are only read: the build works on a copy of CAA's three Go
# modules, whose go.mod gets a replace of the kata runtime module to
# KATA_SRC/src/runtime (the Go module proxy serves neither CAA's nor kata's
# modules, and CAA's go.mod has no replace of its own for kata).
#
# Reproducible: GOTOOLCHAIN pinned to upstream's Go (versions.yaml
# tools.golang; the go command fetches that toolchain through the module
# proxy when the local one differs), CGO_ENABLED=0, -trimpath, empty build
# ID, upstream's -X VERSION/COMMIT stamps.
#
# Environment:
#   PODVM_BINARIES  where to stage (default podvm/binaries)
#   PODVM_PINS      pin file (default podvm/guest-artefacts.pins)
#   PODVM_SLOTS     only these of the two slots (default: both)
#   CAA_GIT_URL, KATA_GIT_URL  where to clone from when CAA_SRC/KATA_SRC are unset
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${PODVM_BINARIES:-podvm/binaries}
pins=${PODVM_PINS:-podvm/guest-artefacts.pins}
fail() { echo "podvm-binaries: $*" >&2; exit 1; }
[ -f "$pins" ] || fail "no pin file $pins"
for t in git go jq sha256sum; do command -v "$t" >/dev/null || fail "$t is missing on this build machine (docs/podvm-build-guide.md#building-the-two-caa-programs)"; done

# The pin file's build lines: "#@ <key> <value>".
pin() { awk -v k="$1" '$1 == "#@" && $2 == k {print $3; exit}' "$pins"; }
for k in caa-commit caa-version kata-commit go; do
	[ -n "$(pin "$k")" ] || fail "$pins has no '#@ $k <value>' line"
done
caa_commit=$(pin caa-commit)
caa_version=$(pin caa-version)
kata_commit=$(pin kata-commit)
go_version=$(pin go)
[[ "$caa_commit" =~ ^[0-9a-f]{40}$ ]] || fail "$pins: caa-commit $caa_commit is not a full commit id"
[[ "$kata_commit" =~ ^[0-9a-f]{40}$ ]] || fail "$pins: kata-commit $kata_commit is not a full commit id"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# checkout NAME DIR COMMIT URL: a read-only checkout at COMMIT (the one named,
# checked, or a fresh clone), printed.
checkout() {
	local name=$1 dir=$2 commit=$3 url=$4 head
	if [ -n "$dir" ]; then
		[ -d "$dir" ] || fail "$name=$dir is not a directory"
		head=$(git -C "$dir" rev-parse HEAD 2>/dev/null) || fail "$name=$dir is not a git checkout (its commit must be checkable: clone $url and check out $commit)"
		[ "$head" = "$commit" ] || fail "$name=$dir is at $head, the pin is $commit: run git -C $dir checkout $commit (or point $name at a checkout of it)"
		if [ -n "$(git -C "$dir" status --porcelain --untracked-files=no)" ]; then
			fail "$name=$dir has modified tracked files (git -C $dir status): the build takes the pinned commit as it is"
		fi
		echo "$dir"
		return
	fi
	echo "podvm-binaries: cloning $url at $commit ($name unset)" >&2
	git init -q "$work/$name"
	git -C "$work/$name" fetch -q --depth 1 "$url" "$commit" ||
		fail "could not clone $url at $commit (no network?): clone it on a machine that has one and run again with $name=<checkout>"
	git -C "$work/$name" checkout -q FETCH_HEAD
	echo "$work/$name"
}

slots=()
for s in agent-protocol-forwarder process-user-data; do
	if [ -n "${PODVM_SLOTS:-}" ] && ! grep -qw -- "$s" <<<"$PODVM_SLOTS"; then continue; fi
	slots+=("$s")
done
[ "${#slots[@]}" -gt 0 ] || exit 0

caa=$(checkout CAA_SRC "${CAA_SRC:-}" "$caa_commit" "${CAA_GIT_URL:-https://github.com/confidential-containers/cloud-api-adaptor}")
kata=$(checkout KATA_SRC "${KATA_SRC:-}" "$kata_commit" "${KATA_GIT_URL:-https://github.com/kata-containers/kata-containers}")
# CAA's go.mod names the kata runtime by a pseudo-version ending in the
# commit's first 12 digits: the kata tree must be that commit.
want=$(awk '{for (i = 1; i < NF; i++) if ($i == "github.com/kata-containers/kata-containers/src/runtime") {print $(i + 1); exit}}' "$caa/src/cloud-api-adaptor/go.mod")
[ "${want##*-}" = "${kata_commit:0:12}" ] || fail "$caa/src/cloud-api-adaptor/go.mod requires kata runtime $want, the pin's kata-commit is $kata_commit: fix the pin"
[ -f "$kata/src/runtime/go.mod" ] || fail "KATA_SRC=$kata has no src/runtime/go.mod"

# A copy of CAA's modules (the checkout stays untouched), with the replace.
mkdir -p "$work/caa/src"
for m in cloud-api-adaptor cloud-providers peerpod-ctrl; do
	cp -a "$caa/src/$m" "$work/caa/src/$m"
done
mod=$work/caa/src/cloud-api-adaptor
# Through a link at a fixed relative path: the replace's path is recorded in
# the binaries' build info, and an absolute one would make them differ from
# one build machine (or checkout location) to the next.
ln -s "$(cd "$kata/src/runtime" && pwd)" "$work/caa/src/kata-runtime"
(cd "$mod" && go mod edit -replace "github.com/kata-containers/kata-containers/src/runtime=../kata-runtime")

export GOTOOLCHAIN=go$go_version GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 GOOS=linux GOARCH=amd64
got=$(cd "$mod" && go env GOVERSION) || fail "go could not provide toolchain go$go_version (it comes through the Go module proxy when the local Go differs)"
[ "$got" = "go$go_version" ] || fail "the build runs $got, the pin is go$go_version"
pkg=github.com/confidential-containers/cloud-api-adaptor/src/cloud-api-adaptor/cmd
ldflags="-buildid= -X '$pkg.VERSION=$caa_version' -X '$pkg.COMMIT=$caa_commit'"
for s in "${slots[@]}"; do
	echo "podvm-binaries: building $s ($caa_version, $caa_commit) with go$go_version" >&2
	(cd "$mod" && go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$work/bin/$s" "./cmd/$s") ||
		fail "building $s from $caa failed (above)"
done

mkdir -p "$out"
touch "$out/SHA256SUMS" "$out/VERSIONS"
for s in "${slots[@]}"; do
	install -m 0755 "$work/bin/$s" "$out/$s.new"
	mv "$out/$s.new" "$out/$s"
	sum=$(sha256sum "$out/$s" | cut -c1-64)
	{ grep -v -E " [ *]?$s\$" "$out/SHA256SUMS" || true; printf '%s  %s\n' "$sum" "$s"; } >"$work/sums"
	mv "$work/sums" "$out/SHA256SUMS"
	{ awk -v n="$s" '$1 != n' "$out/VERSIONS"; printf '%s %s github.com/confidential-containers/cloud-api-adaptor@%s (cmd/%s, built from source: go%s, -trimpath, kata runtime replaced by kata-containers@%s)\n' "$s" "$caa_version" "$caa_commit" "$s" "$go_version" "$kata_commit"; } >"$work/versions"
	mv "$work/versions" "$out/VERSIONS"
	echo "podvm-binaries: staged $s: $caa_version from source, sha256 $sum" >&2
done
