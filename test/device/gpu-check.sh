#!/usr/bin/env bash
# GPU check for a machine with a real NVIDIA driver: runs the podVM's GPU
# init logic (`gpu-init`) and `nvidia-ctk cdi generate` against it.
# Build the inputs first with test/device/bundle.sh DIR, copy DIR to the GPU
# machine, and run: gpu-check.sh DIR OUTDIR
set -uo pipefail
dir=$(cd "${1:?usage: gpu-check.sh BUNDLE_DIR OUT_DIR}" && pwd)
out=${2:?usage: gpu-check.sh BUNDLE_DIR OUT_DIR}
mkdir -p "$out"
exec > >(tee "$out/log") 2>&1
set -x
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv
cat /proc/driver/nvidia/version
"$dir/nvidia-ctk" cdi generate --output="$out/nvidia-direct.yaml" --nvidia-cdi-hook-path=/usr/bin/nvidia-cdi-hook
echo "nvidia-ctk rc=$?"
grep -E '^kind|^cdiVersion|  - name:' "$out/nvidia-direct.yaml"
smi=$(command -v nvidia-smi)
# As on a podVM: modprobe, device nodes, nvidia-smi, CDI spec, readiness line.
"$dir/gpu-init" --root / --cdi-output /var/run/cdi/nvidia.yaml --nvidia-ctk "$dir/nvidia-ctk" \
	--nvidia-smi "$smi" --nvidia-cdi-hook /usr/bin/nvidia-cdi-hook --console "" --timeout 60s
echo "gpu-init rc=$?"
# In a container the driver is the host's and modprobe is absent: the
# modules are loaded already, so the rest of the sequence is what is tested.
"$dir/gpu-init" --root / --cdi-output /var/run/cdi/nvidia.yaml --modprobe /bin/true --nvidia-ctk "$dir/nvidia-ctk" \
	--nvidia-smi "$smi" --nvidia-cdi-hook /usr/bin/nvidia-cdi-hook --console "" --timeout 60s
echo "gpu-init (modules preloaded) rc=$?"
cp /var/run/cdi/nvidia.yaml "$out/nvidia-gpuinit.yaml"
