#!/usr/bin/env bash
# Builds one test control-plane tool (kube-apiserver, etcd, kustomize) from its
# tool module under tools/<name>, through the Go module proxy, into a cache
# outside the repository keyed by version. Idempotent: a cached binary is
# reused. Prints the binary's path on stdout.
#
#   test/controlplane/build.sh kube-apiserver v1.37.2
set -euo pipefail

name=${1:?usage: build.sh kube-apiserver|etcd|kustomize VERSION}
want=${2:?usage: build.sh $name VERSION}
here=$(cd "$(dirname "$0")" && pwd)
tooldir=$here/tools/$name

# The module whose version names the cache entry, per tool.
ldflags=-s
case $name in
kube-apiserver)
	mod=k8s.io/kubernetes
	# /version reports what it was built as, as a release build would.
	v=${want#v}
	ldflags+=" -X k8s.io/component-base/version.gitVersion=$want"
	ldflags+=" -X k8s.io/component-base/version.gitMajor=${v%%.*}"
	minor=${v#*.}
	ldflags+=" -X k8s.io/component-base/version.gitMinor=${minor%%.*}"
	;;
etcd) mod=go.etcd.io/etcd/server/v3 ;;
kustomize) mod=sigs.k8s.io/kustomize/kustomize/v5 ;;
*)
	echo "build.sh: unknown tool '$name' (want kube-apiserver, etcd or kustomize)" >&2
	exit 2
	;;
esac

cache=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4/$name-$want
bin=$cache/$name
if [[ -x $bin ]]; then
	echo "$bin"
	exit 0
fi

command -v go >/dev/null || {
	echo "build.sh: go is missing; install Go 1.26 (make tools says how)" >&2
	exit 1
}

cd "$tooldir"
export GOWORK=off GOFLAGS=-mod=readonly
have=$(go list -m -f '{{.Version}}' "$mod")
if [[ $have != "$want" ]]; then
	echo "build.sh: $tooldir/go.mod pins $mod $have but $want was asked for;" >&2
	echo "  run: cd $tooldir && go get -tool <package>@$want && go mod tidy (or ask for $have)" >&2
	exit 1
fi
pkg=$(go mod edit -json | awk '/"Tool"/ { t = 1 } t && /"Path"/ { gsub(/[",]/, "", $2); print $2; exit }')
[[ -n $pkg ]] || {
	echo "build.sh: $tooldir/go.mod has no tool directive naming the package to build" >&2
	exit 1
}

mkdir -p "$cache"
tmp=$(mktemp "$cache/.$name.XXXXXX")
trap 'rm -f "$tmp"' EXIT
echo "build.sh: building $pkg ($mod $want) into $cache (cold on 2 cores: kube-apiserver ~15-30 min, etcd and kustomize ~1-3 min)" >&2
start=$SECONDS
# Counted progress on stderr: stdout is the binary's path alone.
"$here/../../scripts/go-progress.sh" build "$pkg" -trimpath -ldflags="$ldflags" -o "$tmp" >&2
chmod 0755 "$tmp"
mv -f "$tmp" "$bin"
trap - EXIT
echo "build.sh: built $bin in $((SECONDS - start))s" >&2
echo "$bin"
