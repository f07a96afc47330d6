#!/usr/bin/env bash
# Builds the kata stage of the node harness (docs/node-harness.md) from the
# two checkouts `make node-e2e UPSTREAM=… KATA=…` is given, once, into a
# cache outside the repository keyed by commit, and prints the variables
# test/node reads (NAME=path, one a line) on stdout:
#   - kata's containerd-shim-kata-v2 and configuration-remote.toml, from
#     KATA: `make pkg/katautils/config-settings.go config/configuration-remote.toml`
#     in src/runtime, then go build of cmd/containerd-shim-kata-v2 (and,
#     with NODE_KATA_RACE=1, a -race build of it, which the tests then run);
#   - cloud-api-adaptor (and the podVM's agent-protocol-forwarder) from UPSTREAM with our series applied
#     (scripts/upstream-patch/patch.sh) and -tags gcp_t4. The module proxy
#     refuses the kata module CAA requires (and, at v0.22.0,
#     github.com/IBM/platform-services-go-sdk, which only upstream's IBM
#     providers import), so the build replaces the kata runtime module
#     with KATA's src/runtime and that one with an empty module;
#   - the stand-in kata-agent (test/node/_agent), against KATA's agent
#     protocol package;
#   - CAA's peer-pods webhook (UPSTREAM's src/webhook, a module of its
#     own that imports no other CAA module: its go.mod and go.sum as
#     they are, the module proxy serving every dependency), unpatched;
#   - gceonly (the seeded GCE emulator alone) and gcp-t4, from this
#     repository.
# Each checkout is cloned into a temporary directory; neither is modified.
#
#   test/node/kata-build.sh UPSTREAM KATA UPSTREAM_COMMIT KATA_COMMIT
set -euo pipefail
upstream=$1 kata=$2 ucommit=$3 kcommit=$4
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cacheroot=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4
export GOWORK=off GOTOOLCHAIN=${GOTOOLCHAIN:-local}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say() { echo "node-e2e: $*" >&2; }

# kata: keyed by its commit.
kcache=$cacheroot/node-kata-$kcommit
if [[ ! -x $kcache/containerd-shim-kata-v2 || ! -f $kcache/configuration-remote.toml ]]; then
	say "building kata's containerd-shim-kata-v2 at $kcommit (once)"
	git clone -q --shared "$kata" "$work/kata"
	git -C "$work/kata" checkout -q "$kcommit"
	make -s -C "$work/kata/src/runtime" pkg/katautils/config-settings.go config/configuration-remote.toml >&2
	mkdir -p "$kcache.tmp"
	(cd "$work/kata/src/runtime" && go build -o "$kcache.tmp/containerd-shim-kata-v2" ./cmd/containerd-shim-kata-v2) >&2
	cp "$work/kata/src/runtime/config/configuration-remote.toml" "$kcache.tmp/"
	rm -rf "$kcache"
	mv "$kcache.tmp" "$kcache"
fi

# NODE_KATA_RACE=1: the shim built with -race as well (issue 54 asks for
# one run with it), cached beside the plain one; the tests then run it.
shim=$kcache/containerd-shim-kata-v2
if [[ -n ${NODE_KATA_RACE:-} ]]; then
	rcache=$cacheroot/node-kata-race-$kcommit
	if [[ ! -x $rcache/containerd-shim-kata-v2 ]]; then
		say "building kata's containerd-shim-kata-v2 at $kcommit with -race (once)"
		[[ -d $work/kata ]] || { git clone -q --shared "$kata" "$work/kata" && git -C "$work/kata" checkout -q "$kcommit"; }
		make -s -C "$work/kata/src/runtime" pkg/katautils/config-settings.go >&2
		mkdir -p "$rcache.tmp"
		(cd "$work/kata/src/runtime" && CGO_ENABLED=1 go build -race -o "$rcache.tmp/containerd-shim-kata-v2" ./cmd/containerd-shim-kata-v2) >&2
		rm -rf "$rcache"
		mv "$rcache.tmp" "$rcache"
	fi
	shim=$rcache/containerd-shim-kata-v2
fi

# The stand-in kata-agent (test/node/_agent): it imports kata's agent
# protocol package, which the module proxy does not serve, so it is built
# here, in a scratch module whose go.mod replaces kata's runtime module
# with KATA's src/runtime, and never by make test. Keyed by kata's commit
# and the stand-in's sources.
asum=$(cat "$here"/_agent/*.go | sha256sum | cut -c1-16)
acache=$cacheroot/node-agent-$kcommit-$asum
if [[ ! -x $acache/kata-agent-standin ]]; then
	say "building the stand-in kata-agent against kata $kcommit (once)"
	[[ -d $work/kata ]] || { git clone -q --shared "$kata" "$work/kata" && git -C "$work/kata" checkout -q "$kcommit"; }
	mkdir -p "$work/agent" "$acache.tmp"
	cp "$here"/_agent/*.go "$work/agent/"
	(
		cd "$work/agent"
		go mod init github.com/caa-gcp-t4/test/node/agent 2>/dev/null
		# Required before tidy, so that the protocol's own dependencies
		# (ttrpc, grpc, protobuf) come at the versions kata's go.mod names.
		go mod edit -require "github.com/kata-containers/kata-containers/src/runtime@v0.0.0-00010101000000-000000000000" \
			-replace "github.com/kata-containers/kata-containers/src/runtime=$work/kata/src/runtime"
		go mod tidy
		# The modelled pull's own test (pull_test.go), here where it builds.
		go test -count=1 -run 'TestPullerModel' .
		CGO_ENABLED=0 go build -o "$acache.tmp/kata-agent-standin" .
	) >&2
	rm -rf "$acache"
	mv "$acache.tmp" "$acache"
fi

# CAA: keyed by its commit, the kata commit it is built against, and our
# series' sources (the provider and the patch scripts).
series=$(cd "$root" && find src/cloud-providers scripts/upstream-patch -type f ! -path '*/testdata/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
ccache=$cacheroot/node-caa-$ucommit-$series
if [[ ! -x $ccache/cloud-api-adaptor || ! -x $ccache/agent-protocol-forwarder ]]; then
	say "building cloud-api-adaptor at $ucommit with our series ($series) and -tags gcp_t4 (once)"
	[[ -d $work/kata ]] || { git clone -q --shared "$kata" "$work/kata" && git -C "$work/kata" checkout -q "$kcommit"; }
	# -n: gcpt4's tests are make test's; -e: the proxy lacks modules the
	# CAA command needs, which the replace below supplies.
	rc=0
	"$root/scripts/upstream-patch/patch.sh" -n -e -r "$ucommit" -w "$work/caa" -o "$work/patches" "$upstream" >&2 || rc=$?
	if [[ $rc -ne 0 && $rc -ne 3 ]]; then
		say "patch.sh failed (exit $rc): the series does not apply to UPSTREAM at $ucommit"
		exit 1
	fi
	cd "$work/caa/src/cloud-api-adaptor"
	go mod edit -replace "github.com/kata-containers/kata-containers/src/runtime=$work/kata/src/runtime"
	# Modules in CAA's requirement graph that the proxy does not serve and
	# no package built with -tags gcp_t4 imports (upstream's other
	# providers need them): an empty module of that path stands in, so
	# the graph loads; were a package of one imported, the build would
	# fail naming it.
	for m in ${NODE_CAA_STUB_MODULES:-github.com/IBM/platform-services-go-sdk}; do
		mkdir -p "$work/stub/$m"
		printf 'module %s\n' "$m" >"$work/stub/$m/go.mod"
		go mod edit -replace "$m=$work/stub/$m"
	done
	mkdir -p "$ccache.tmp"
	CGO_ENABLED=0 go build -mod=mod -tags gcp_t4 -o "$ccache.tmp/cloud-api-adaptor" ./cmd/cloud-api-adaptor >&2
	# The podVM's side, built from the same tree as the podVM image's
	# Makefile does (no provider tags: it runs in the guest).
	CGO_ENABLED=0 go build -mod=mod -o "$ccache.tmp/agent-protocol-forwarder" ./cmd/agent-protocol-forwarder >&2
	rm -rf "$ccache"
	mv "$ccache.tmp" "$ccache"
	cd "$root"
fi

# CAA's peer-pods webhook: keyed by CAA's commit. Our series does not
# touch src/webhook; it is built as upstream's Dockerfile builds it
# (go build of the module's main package).
wcache=$cacheroot/node-webhook-$ucommit
if [[ ! -x $wcache/peer-pods-webhook ]]; then
	say "building CAA's peer-pods webhook at $ucommit (once)"
	git clone -q --shared "$upstream" "$work/caa-webhook"
	git -C "$work/caa-webhook" checkout -q "$ucommit"
	mkdir -p "$wcache.tmp"
	(cd "$work/caa-webhook/src/webhook" && CGO_ENABLED=0 go build -o "$wcache.tmp/peer-pods-webhook" .) >&2
	rm -rf "$wcache"
	mv "$wcache.tmp" "$wcache"
fi

# Ours: built each run (the Go cache makes a second build quick), as
# they change with the working tree; one directory per tree, so that runs
# from two checkouts on one machine do not overwrite each other's build.
ocache=$cacheroot/node-kata-ours-$(printf '%s' "$root" | sha256sum | cut -c1-12)
mkdir -p "$ocache"
# In the repository's workspace (go.work), as make build does.
(cd "$root/gcp-t4" && unset GOWORK && go build -o "$ocache/gceonly" ./internal/demo/gceonly && go build -o "$ocache/gcp-t4" ./cmd/gcp-t4) >&2

echo "NODE_KATA_SHIM=$shim"
echo "NODE_KATA_CONFIG=$kcache/configuration-remote.toml"
echo "NODE_CAA=$ccache/cloud-api-adaptor"
echo "NODE_FORWARDER=$ccache/agent-protocol-forwarder"
echo "NODE_AGENT=$acache/kata-agent-standin"
echo "NODE_WEBHOOK=$wcache/peer-pods-webhook"
echo "NODE_GCE_EMULATOR=$ocache/gceonly"
echo "NODE_GCP_T4=$ocache/gcp-t4"
echo "NODE_CAA_ENTRYPOINT=$root/scripts/image/entrypoint.sh"
