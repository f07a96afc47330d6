#!/usr/bin/env bash
# Builds one test tool (kube-apiserver, etcd, kustomize; kubelet and the CNI
# plugins for the node harness, test/node) from its tool module under
# tools/<name>, through the Go module proxy, into a cache outside the
# repository keyed by version. Idempotent: a cached build is reused. Prints
# the binary's path on stdout; for cni-plugins, whose module names three
# tools, the directory holding them (a CNI bin dir).
#
#   test/controlplane/build.sh kube-apiserver v1.37.2
#   test/controlplane/build.sh kubelet v1.37.2
#   test/controlplane/build.sh cni-plugins v1.9.0
set -euo pipefail

name=${1:?usage: build.sh kube-apiserver|kubelet|etcd|kustomize|cni-plugins VERSION}
want=${2:?usage: build.sh $name VERSION}
here=$(cd "$(dirname "$0")" && pwd)
tooldir=$here/tools/$name

# The module whose version names the cache entry, per tool.
ldflags=-s
case $name in
kube-apiserver | kubelet)
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
cni-plugins) mod=github.com/containernetworking/plugins ;;
*)
	echo "build.sh: unknown tool '$name' (want kube-apiserver, kubelet, etcd, kustomize or cni-plugins)" >&2
	exit 2
	;;
esac

cache=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4/$name-$want
bin=$cache/$name
out=$bin
if [[ $name == cni-plugins ]]; then
	# Several tools: the cache entry is complete when its last one, renamed
	# into place last, is there.
	bin=$cache/loopback
	out=$cache
fi
if [[ -x $bin ]]; then
	echo "$out"
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
mapfile -t pkgs < <(go list tool)
[[ ${#pkgs[@]} -gt 0 ]] || {
	echo "build.sh: $tooldir/go.mod has no tool directive naming the package to build" >&2
	exit 1
}

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "build.sh: building ${pkgs[*]} ($mod $want) into $cache (cold on 2 cores: kube-apiserver ~15-30 min, kubelet ~4-10 min, etcd, kustomize and cni-plugins ~1-3 min)" >&2
start=$SECONDS
# binary PKG: the file a tool's package is built to. A module of one tool
# gives it the tool's own name (etcd's package is go.etcd.io/etcd/server/v3,
# kustomize's …/kustomize/v5: their last element is a major version); a
# module of several, each its package's last element, as go install names
# them. A cold run once built etcd as "v3" and then found no "etcd".
binary() {
	if ((${#pkgs[@]} == 1)); then
		echo "$name"
		return
	fi
	local p=$1
	[[ ${p##*/} =~ ^v[0-9]+$ ]] && p=${p%/*}
	echo "${p##*/}"
}
for pkg in "${pkgs[@]}"; do
	# Counted progress on stderr: stdout is the path alone.
	f=$(binary "$pkg")
	"$here/../../scripts/go-progress.sh" build "$pkg" -trimpath -ldflags="$ldflags" -o "$tmp/$f" >&2
	chmod 0755 "$tmp/$f"
done
[[ -f $tmp/${bin##*/} ]] || {
	echo "build.sh: the build of ${pkgs[*]} left no ${bin##*/}, which the cache entry is known by" >&2
	exit 1
}
# Renamed into place one by one, the one whose presence says "cached" last,
# so that a build killed half-way never leaves an entry the next run trusts.
for pkg in "${pkgs[@]}"; do
	f=$(binary "$pkg")
	[[ $cache/$f == "$bin" ]] || mv -f "$tmp/$f" "$cache/$f"
done
mv -f "$tmp/${bin##*/}" "$bin"
echo "build.sh: built $out in $((SECONDS - start))s" >&2
echo "$out"
