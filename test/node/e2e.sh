#!/usr/bin/env bash
# `make node-e2e`: the node harness (docs/node-harness.md). Without
# UPSTREAM and KATA it runs the part CI can keep: kube-apiserver + etcd, a
# real kubelet and containerd with runc and the CNI plugins, a pod run,
# read and removed (test/node's TestPodRunsOnARealNode). With them it checks
# the checkouts against the pins, then stops: the kata shim and CAA stage
# is not wired yet, and exits 2 saying so rather than passing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
: "${KUBE_VERSION:?set by the Makefile}" "${ETCD_VERSION:?set by the Makefile}" "${CNI_PLUGINS_VERSION:?set by the Makefile}"
: "${NODE_CONTAINERD_VERSION:?set by the Makefile}" "${APT_LOCK_FILE:?set by the Makefile}"

if [[ -n ${UPSTREAM:-} || -n ${KATA:-} ]]; then
	"$here/pins.sh" "${UPSTREAM:-}" "${KATA:-}"
	echo "node-e2e: the checkouts match the pins, but the kata shim + CAA stage is not wired yet (docs/node-harness.md, \"Not wired yet\"); nothing was run. Run make node-e2e without UPSTREAM and KATA for the part that is." >&2
	exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "node-e2e: kubelet and containerd need root (mounts, cgroups, network namespaces); run it as root" >&2
	exit 2
fi
# apt-get from two make targets at once would fail on dpkg's lock.
mkdir -p "$(dirname "$APT_LOCK_FILE")"
flock "$APT_LOCK_FILE" "$here/deps.sh"
echo "node-e2e: kube-apiserver and etcd (test/controlplane), kubelet $KUBE_VERSION, containerd $NODE_CONTAINERD_VERSION (+ ctr, runc shim), CNI plugins $CNI_PLUGINS_VERSION: each built once from the module proxy and cached by version" >&2
export CONTROLPLANE_KUBE_APISERVER CONTROLPLANE_ETCD NODE_KUBELET NODE_CONTAINERD NODE_CNI_DIR
CONTROLPLANE_KUBE_APISERVER=$("$root/test/controlplane/build.sh" kube-apiserver "$KUBE_VERSION")
CONTROLPLANE_ETCD=$("$root/test/controlplane/build.sh" etcd "$ETCD_VERSION")
NODE_KUBELET=$("$root/test/controlplane/build.sh" kubelet "$KUBE_VERSION")
NODE_CNI_DIR=$("$root/test/controlplane/build.sh" cni-plugins "$CNI_PLUGINS_VERSION")
NODE_CONTAINERD=$("$root/test/containerd/build.sh" "$NODE_CONTAINERD_VERSION")
for cmd in ctr containerd-shim-runc-v2; do
	CONTAINERD_CMD=$cmd "$root/test/containerd/build.sh" "$NODE_CONTAINERD_VERSION" >/dev/null
done
cd "$here"
GOWORK=off "$root/scripts/go-progress.sh" deps ./...
# Every test of the module: the pod on a real node, and the pin checks
# (which run this script with UPSTREAM and KATA set, so stop before here).
GOWORK=off ${GO:-go} test -count=1 -v -timeout 15m .
