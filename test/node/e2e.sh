#!/usr/bin/env bash
# `make node-e2e`: the node harness (docs/node-harness.md). Without
# UPSTREAM and KATA it runs the part CI can keep: kube-apiserver + etcd, a
# real kubelet and containerd with runc and the CNI plugins, a pod run,
# read and removed (test/node's TestPodRunsOnARealNode), and the remediation
# sidecar repairing containerd's configuration after a GKE rewrite under a
# running pod (TestSidecarRestoresKataRemote, with and without kata-deploy's
# snapshotter mapping), and Ctrl-C leaving nothing (TestInterruptLeavesNothing).
# With them it checks
# the checkouts against the pins, builds kata's shim and CAA with our series
# from them (test/node/kata-build.sh, cached by commit) and runs the kata
# stage too (TestKataRemotePodThroughCAA: a GPU peer pod through kubelet,
# containerd, kata's remote shim and CAA to the GCE emulator's instance, as
# far as the chain goes without a podVM agent).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
: "${KUBE_VERSION:?set by the Makefile}" "${ETCD_VERSION:?set by the Makefile}" "${CNI_PLUGINS_VERSION:?set by the Makefile}"
: "${NODE_CONTAINERD_VERSION:?set by the Makefile}" "${NODE_CONTAINERD17_VERSION:?set by the Makefile}" "${APT_LOCK_FILE:?set by the Makefile}"

kata=
if [[ -n ${UPSTREAM:-} || -n ${KATA:-} ]]; then
	pins=$("$here/pins.sh" "${UPSTREAM:-}" "${KATA:-}")
	ucommit=$(awk '$1 == "UPSTREAM" { print $2 }' <<<"$pins")
	kcommit=$(awk '$1 == "KATA" { print $2 }' <<<"$pins")
	# The commits match; the trees must hold what is built from them.
	for want in "UPSTREAM:$ucommit:src/cloud-api-adaptor/cmd/cloud-api-adaptor" "KATA:$kcommit:src/runtime/cmd/containerd-shim-kata-v2"; do
		IFS=: read -r var commit path <<<"$want"
		if ! git -C "${!var}" cat-file -e "$commit:$path" 2>/dev/null; then
			echo "node-e2e: $var=${!var} matches the pin but has no $path at $commit; give a clone of the real repository" >&2
			exit 2
		fi
	done
	kata=1
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "node-e2e: kubelet and containerd need root (mounts, cgroups, network namespaces); run it as root" >&2
	exit 2
fi
# apt-get from two make targets at once would fail on dpkg's lock.
mkdir -p "$(dirname "$APT_LOCK_FILE")"
flock "$APT_LOCK_FILE" "$here/deps.sh"
echo "node-e2e: kube-apiserver and etcd (test/controlplane), kubelet $KUBE_VERSION, containerd $NODE_CONTAINERD_VERSION and $NODE_CONTAINERD17_VERSION (+ ctr, runc shim), CNI plugins $CNI_PLUGINS_VERSION: each built once from the module proxy and cached by version" >&2
export CONTROLPLANE_KUBE_APISERVER CONTROLPLANE_ETCD NODE_KUBELET NODE_CONTAINERD NODE_CONTAINERD17 NODE_CNI_DIR
CONTROLPLANE_KUBE_APISERVER=$("$root/test/controlplane/build.sh" kube-apiserver "$KUBE_VERSION")
CONTROLPLANE_ETCD=$("$root/test/controlplane/build.sh" etcd "$ETCD_VERSION")
NODE_KUBELET=$("$root/test/controlplane/build.sh" kubelet "$KUBE_VERSION")
NODE_CNI_DIR=$("$root/test/controlplane/build.sh" cni-plugins "$CNI_PLUGINS_VERSION")
NODE_CONTAINERD=$("$root/test/containerd/build.sh" "$NODE_CONTAINERD_VERSION")
# containerd 1.7, the line GKE ran before 2.x: the first scenarios run on
# it too (NODE_CONTAINERD17; test/node/node_test.go containerdLines).
NODE_CONTAINERD17=$("$root/test/containerd/build.sh" "$NODE_CONTAINERD17_VERSION")
for v in "$NODE_CONTAINERD_VERSION" "$NODE_CONTAINERD17_VERSION"; do
	for cmd in ctr containerd-shim-runc-v2; do
		CONTAINERD_CMD=$cmd "$root/test/containerd/build.sh" "$v" >/dev/null
	done
done
# The remediation sidecar (this tree's gcp-t4-node, built each run into a
# directory of this run: the Go cache makes it quick) and the nydus
# snapshotter stand-in (test/node/_snapshotter, its own module; cached by
# its sources), for the config-reset scenarios.
cacheroot=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4
ours=$(mktemp -d)
trap 'rm -rf "$ours"' EXIT
(cd "$root/gcp-t4" && unset GOWORK && go build -o "$ours/gcp-t4-node" ./cmd/gcp-t4-node) >&2
ssum=$(cat "$here"/_snapshotter/*.go "$here"/_snapshotter/go.mod "$here"/_snapshotter/go.sum | sha256sum | cut -c1-16)
scache=$cacheroot/node-snapshotter-$ssum
if [[ ! -x $scache/snapshotter-standin ]]; then
	echo "node-e2e: building the nydus snapshotter stand-in (once)" >&2
	rm -rf "$scache.tmp.$$"
	mkdir -p "$scache.tmp.$$"
	(cd "$here/_snapshotter" && GOWORK=off CGO_ENABLED=0 go build -o "$scache.tmp.$$/snapshotter-standin" .) >&2
	rm -rf "$scache"
	mv "$scache.tmp.$$" "$scache"
fi
export NODE_GCP_T4_NODE=$ours/gcp-t4-node NODE_SNAPSHOTTER=$scache/snapshotter-standin
if [[ -n $kata ]]; then
	# NAME=path lines: the shim, its configuration, CAA, the emulator, gcp-t4.
	while IFS= read -r line; do
		export "${line?}"
	done < <("$here/kata-build.sh" "$UPSTREAM" "$KATA" "$ucommit" "$kcommit")
	echo "node-e2e: kata stage: CAA $ucommit + our series, kata $kcommit" >&2
fi
cd "$here"
GOWORK=off "$root/scripts/go-progress.sh" deps ./...
# Every test of the module: the pod on a real node, the kata stage (which
# skips, saying why, unless the kata variables are set), and the pin checks
# (which run this script with UPSTREAM and KATA set against made
# checkouts, so stop before here).
GOWORK=off ${GO:-go} test -count=1 -v -timeout 40m .
