#!/usr/bin/env bash
# Builds what test/device/gpu-check.sh needs into DIR: a small static
# gpu-init binary (the podVM's own, cmd/gpu-init) and nvidia-ctk
# plus nvidia-cdi-hook from the NVIDIA Container Toolkit's Go module.
set -euo pipefail
out=$(mkdir -p "${1:?usage: bundle.sh DIR}" && cd "$1" && pwd)
here=$(cd "$(dirname "$0")/../.." && pwd)
ctk=${NVIDIA_CTK_VERSION:-v1.19.1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$here/gcp-t4" && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$out/gpu-init" ./cmd/gpu-init)
# nvidia-ctk needs cgo (its dxcore package).
(cd "$tmp" && GOBIN="$out" CGO_ENABLED=1 go install -ldflags "-s -w" \
	"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk@$ctk" \
	"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook@$ctk")
cp "$here/test/device/gpu-check.sh" "$out/"
echo "bundle in $out: copy it to the GPU machine and run gpu-check.sh DIR OUT"
