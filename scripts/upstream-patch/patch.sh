#!/usr/bin/env bash
# Turns an upstream Cloud API Adaptor checkout plus our gcpt4 provider into a
# reviewable `git format-patch` series:
#   1. the gcpt4 package in src/cloud-providers with the tests that need no
#      emulator (+ go mod tidy there)
#   2. test-only: gcpt4/gcefake, the in-process Compute Engine emulator, and
#      the tests that drive the provider against it (*_gcefake_test.go)
#   3. registration in the CAA command behind build tag gcp_t4, and the tag in
#      BUILTIN_CLOUD_PROVIDERS (+ go mod tidy in src/cloud-api-adaptor)
#   4. registration in the peer-pod controller, so it can delete the VMs of
#      dangling PeerPods (+ go mod tidy in every other module that replaces
#      src/cloud-providers)
# Commits 1 and 2 each build, vet and pass gcpt4's tests on their own.
# It refuses a checkout whose provider API differs from the one gcpt4 targets,
# builds each module with -tags gcp_t4 and runs gcpt4's tests in upstream's
# module. The checkout itself is never modified: the work happens in a clone.
#
#   patch.sh [-r REF] [-o OUTDIR] [-w WORKDIR] [-n] [-e] UPSTREAM
#     UPSTREAM  an upstream CAA git work tree or bare repository
#     -r REF    the commit to patch (default HEAD)
#     -o OUTDIR where the series goes (default bin/upstream-patches); its
#               old *.patch files are replaced
#     -w WORKDIR keep the patched tree here (must not exist); default: a
#               temporary directory, removed at the end
#     -n        build and vet gcpt4 there but do not run its tests (for a
#               second run on a checkout they already passed on)
#     -e        tolerate upstream dependencies the module proxy does not
#               serve: tidy with -e keeping what it cannot load, and skip
#               (and name) any module that cannot be built for that reason;
#               the series is still written, and the exit status is 3
# Environment: CAA_API_CHECK and TIDY_KEEP, prebuilt caa-api-check and
# tidy-keep binaries (default: go run from test/upstream).
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
ref=HEAD
out=$here/bin/upstream-patches
keep=
notest=
usage() {
	echo "usage: $0 [-r REF] [-o OUTDIR] [-w WORKDIR] [-n] [-e] UPSTREAM_CAA_CHECKOUT" >&2
	exit 2
}
while getopts r:o:w:ne opt; do
	case $opt in
	n) notest=1 ;;
	e) export DROPIN_TOLERATE_UNAVAILABLE=1 ;;
	r) ref=$OPTARG ;;
	o) out=$OPTARG ;;
	w) keep=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
upstream=$1
if [ -z "$upstream" ] || [ ! -d "$upstream" ]; then
	echo "UPSTREAM ${upstream:+($upstream) }must be an upstream cloud-api-adaptor checkout: make upstream-patch UPSTREAM=/path/to/cloud-api-adaptor" >&2
	exit 2
fi

# Fixed identity and dates: the same checkout and sources give byte-identical
# patches. A contributor re-signs them with their own identity (docs/upstream.md).
export GIT_AUTHOR_NAME="caa-gcp-t4" GIT_AUTHOR_EMAIL="caa-gcp-t4@example.invalid"
export GIT_COMMITTER_NAME=$GIT_AUTHOR_NAME GIT_COMMITTER_EMAIL=$GIT_AUTHOR_EMAIL
export GIT_AUTHOR_DATE="2026-01-01T00:00:00+0000" GIT_COMMITTER_DATE="2026-01-01T00:00:00+0000"
export GOWORK=off
git_() { git -c commit.gpgsign=false -c core.hooksPath=/dev/null -c core.autocrlf=false -C "$work" "$@"; }

if ! base=$(git -C "$upstream" rev-parse --verify --quiet "$ref^{commit}"); then
	echo "$upstream: no commit $ref there; UPSTREAM must be a cloud-api-adaptor git checkout (work tree or bare) and REF a commit in it" >&2
	exit 2
fi
if [ -z "$keep" ]; then
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	rmdir "$work"
else
	if [ -e "$keep" ]; then
		echo "-w $keep exists; name a new directory for the patched tree" >&2
		exit 2
	fi
	work=$keep
fi
if [ -n "$(git -C "$upstream" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	echo "note: $upstream has uncommitted changes; the series is against commit $base only" >&2
fi
git clone -q --no-checkout "$upstream" "$work"
git_ checkout -q --detach "$base"
echo "upstream $ref = $base"

# The layout the patches edit; anything else is a different project shape.
cp=$work/src/cloud-providers
caa=$work/src/cloud-api-adaptor
ctrl=$work/src/peerpod-ctrl
module=github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers
for p in "$cp/go.mod" "$caa/go.mod" "$caa/cmd/cloud-api-adaptor" "$ctrl/go.mod" "$ctrl/controllers"; do
	if [ ! -e "$p" ]; then
		echo "refusing $upstream at $ref: ${p#"$work"/} is missing; the patches target upstream's src/{cloud-providers,cloud-api-adaptor,peerpod-ctrl} layout" >&2
		exit 1
	fi
done
if ! grep -qE "^module $module\$" "$cp/go.mod"; then
	echo "refusing $upstream at $ref: src/cloud-providers/go.mod is not module $module" >&2
	exit 1
fi

# 0. The provider API gcpt4 uses must be the one it targets.
if [ -n "${CAA_API_CHECK:-}" ]; then
	"$CAA_API_CHECK" -fork "$here/src/cloud-providers" -upstream "$cp"
else
	(cd "$here/test/upstream" && go run ./cmd/caa-api-check -fork "$here/src/cloud-providers" -upstream "$cp") ||
		exit 1
fi

# shellcheck source=scripts/upstream-patch/common.sh
. "$here/scripts/upstream-patch/common.sh"

# 1. The provider package and its tests that need no emulator. The
# emulator (gcefake/) and the tests that use it (*_gcefake_test.go) wait in
# a staging copy for commit 2, so a reviewer can take the provider without
# them, and commit 1 is checked to build and pass its tests on its own.
stage=$(mktemp -d)
trap 'rm -rf "$stage"; [ -n "$keep" ] || rm -rf "$work"' EXIT
dropin_copy "$here" "$stage"
# place_gcpt4 provider|emulator: copy that part of the staged package in.
place_gcpt4() {
	(cd "$stage" && find gcpt4 -type f -print0 | while IFS= read -r -d '' f; do
		case $f in
		gcpt4/gcefake/* | *_gcefake_test.go) [ "$1" = emulator ] || continue ;;
		*) [ "$1" = provider ] || continue ;;
		esac
		printf '%s\0' "$f"
	done | tar --null -T - -cf -) | tar -xf - -C "$cp"
}
# check_gcpt4 WHAT: build, vet and (without -n) test gcpt4 as the tree has it
# now, and say which of those WHAT went through: -n must not claim tests.
check_gcpt4() {
	if [ -n "$notest" ]; then
		(cd "$cp" && go build ./gcpt4/... && go vet ./gcpt4/...)
		echo "$1 builds and vets; its tests not run (-n)"
	else
		dropin_test "$cp"
		echo "$1 builds and passes its tests"
	fi
}
place_gcpt4 provider
if named=$(grep -rl gcefake --include='*.go' "$cp/gcpt4"); then
	echo "refusing: these files name gcefake but are neither in gcpt4/gcefake nor *_gcefake_test.go, so patch 1 would need the emulator:" >&2
	printf '%s\n' "${named//"$work/"/}" >&2
	exit 1
fi
DROPIN_ALWAYS_TIDY=1 dropin_tidy "$cp"
check_gcpt4 "patch 1: gcpt4 without the emulator"
git_ add -A src/cloud-providers
git_ commit -q -s -F - <<'EOF'
cloud-providers: add the gcp-t4 provider

gcp-t4 creates GCE podVMs for GPU pods: a pod's nvidia.com/gpu request
becomes an N1 VM with NVIDIA T4s attached (or a named profile), with
onHostMaintenance=TERMINATE, no external IP, a deterministic requestId so a
retried insert never makes a second VM, and zone fallback on stockouts.
CPU-only pods never get a GPU.

It uses only the provider API and the modules src/cloud-providers already
pins. The tests in this patch need no GCE: configuration, profile and
shape selection, request building and error classification. The tests
that drive the provider against an emulated Compute Engine are the next
patch.
EOF

# 2. Test-only: the emulator and the tests that use it.
place_gcpt4 emulator
dropin_mod_tidy "$cp" || {
	echo "go mod tidy failed in src/cloud-providers after adding gcpt4/gcefake" >&2
	exit 1
}
check_gcpt4 "patch 2: gcpt4 with the emulator"
git_ add -A src/cloud-providers
git_ commit -q -s -F - <<'EOF'
cloud-providers/gcpt4: add a test-only GCE emulator

Test-only. gcefake is an in-process Compute Engine emulator serving the
REST API the Google Cloud Go client calls: instances, operations, zones,
machine and accelerator types, images, instance templates, networks,
quotas, and the errors GCE returns (stockouts, quota, rate limits). The
*_gcefake_test.go tests drive the provider through the real client
against it: zone fallback, idempotent retries, clean-up after failed
creates, deletes, concurrency and injected faults.

Only _test.go files import gcefake, so no binary links it; it can be left
out of the tree without changing the provider.
EOF

# register DIR: add gcp_t4.go to a package that links providers by build tag.
register() {
	local dir=$1 pkg f
	pkg=$(sed -n 's/^package \([a-z_0-9]*\).*/\1/p' "$dir"/*.go | grep -v '_test$' | sort -u)
	if [ "$(wc -w <<<"$pkg")" != 1 ]; then
		echo "refusing: cannot tell the package of ${dir#"$work"/} (found: ${pkg:-none})" >&2
		exit 1
	fi
	f=$dir/gcp_t4.go
	cat >"$f.tmp" <<EOF
//go:build gcp_t4

// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package $pkg

import (
	_ "$module/gcpt4"
)
EOF
	mv "$f.tmp" "$f"
}

# build_module DIR TAGS PKGS...: tidy a module that replaces
# src/cloud-providers and build it with the tags. Returns 1 only in -e mode,
# when a module it needs is not served (the module is then named in unbuilt).
unbuilt=()
build_module() {
	local dir=$1 tags=$2 err
	shift 2
	dropin_mod_tidy "$dir" || {
		echo "go mod tidy failed in ${dir#"$work"/}: see above for the module that could not be fetched (GOPROXY=$(go env GOPROXY))" >&2
		exit 1
	}
	err=$(mktemp)
	if (cd "$dir" && CGO_ENABLED=0 go build -tags "$tags" "$@") 2>"$err"; then
		rm -f "$err"
		return 0
	fi
	cat "$err" >&2
	if [ "${DROPIN_TOLERATE_UNAVAILABLE:-}" = 1 ] && grep -qE "$dropin_unavailable_re" "$err"; then
		rm -f "$err"
		unbuilt+=("${dir#"$work"/}")
		echo "WARNING: ${dir#"$work"/} not built with -tags $tags: a module it needs is not served here" >&2
		return 1
	fi
	rm -f "$err"
	echo "building ${dir#"$work"/} with -tags $tags failed" >&2
	exit 1
}

# 3. The CAA command.
register "$caa/cmd/cloud-api-adaptor"
if ! grep -qE '^\s*BUILTIN_CLOUD_PROVIDERS\s*\?=' "$caa/Makefile" 2>/dev/null; then
	echo "refusing: src/cloud-api-adaptor/Makefile has no BUILTIN_CLOUD_PROVIDERS ?= line to add gcp_t4 to" >&2
	exit 1
fi
sed -i -E '/^\s*BUILTIN_CLOUD_PROVIDERS\s*\?=/{/\<gcp_t4\>/!s/[[:space:]]*$/ gcp_t4/}' "$caa/Makefile"
if build_module "$caa" gcp_t4 -o "$work/.caa-bin" ./cmd/cloud-api-adaptor; then
	if ! "$work/.caa-bin" help 2>&1 | grep -qw gcp-t4; then
		echo "cloud-api-adaptor built with -tags gcp_t4 does not list gcp-t4 in its help" >&2
		exit 1
	fi
	rm -f "$work/.caa-bin"
	echo "cloud-api-adaptor builds with -tags gcp_t4 and lists gcp-t4"
elif (cd "$caa" && go list -e -tags gcp_t4 -deps ./cmd/cloud-api-adaptor 2>/dev/null) | grep -qx "$module/gcpt4"; then
	# Not compiled, but the tag does put gcpt4 in the command's import graph.
	echo "cloud-api-adaptor with -tags gcp_t4 imports gcpt4 (go list -e; not compiled)"
else
	echo "cloud-api-adaptor with -tags gcp_t4 does not import gcpt4" >&2
	exit 1
fi
git_ add -A src/cloud-api-adaptor
git_ commit -q -s -F - <<'EOF'
cloud-api-adaptor: link gcp-t4 with build tag gcp_t4

Build tags cannot contain '-', so the gcp-t4 provider is linked with tag
gcp_t4, which BUILTIN_CLOUD_PROVIDERS now includes.
EOF

# 4. The peer-pod controller, and any other module that replaces
# src/cloud-providers.
register "$ctrl/controllers"
build_module "$ctrl" gcp_t4 ./... && echo "peerpod-ctrl builds with -tags gcp_t4"
for mod in "$work"/src/*/go.mod; do
	dir=$(dirname "$mod")
	case $dir in "$cp" | "$caa" | "$ctrl") continue ;; esac
	if grep -qE "^replace $module => " "$mod"; then
		build_module "$dir" gcp_t4 ./... && echo "${dir#"$work"/} tidied and builds with -tags gcp_t4"
	fi
done
git_ add -A src
git_ commit -q -s -F - <<'EOF'
peerpod-ctrl: link gcp-t4 with build tag gcp_t4

The controller deletes the VMs of PeerPods whose pod is gone through the
provider registered under the PeerPod's cloud provider name; without the
import it cannot clean up after gcp-t4.
EOF

# The series, written next to OUTDIR and swapped in whole.
mkdir -p "$out"
tmp=$(mktemp -d "$out/.series.XXXXXX")
git_ format-patch -q --no-signature --base="$base" -o "$tmp" "$base..HEAD"
rm -f "$out"/*.patch
mv "$tmp"/*.patch "$out"/
rmdir "$tmp"
echo "patch series against $base in $out:"
(cd "$out" && ls -1 ./*.patch)
if [ -n "$dropin_unavailable" ] || [ ${#unbuilt[@]} -gt 0 ]; then
	echo "NOT VERIFIED (-e): modules not served here: $(tr ' ' '\n' <<<"$dropin_unavailable" | sort -u | xargs); not built: ${unbuilt[*]:-none}. Rerun without -e where the proxy serves them before sending the series." >&2
	exit 3
fi
