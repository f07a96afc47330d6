#!/usr/bin/env bash
# The serving checks for a machine with a real NVIDIA GPU, in one go (a few
# minutes): the podVM's CDI path (gpu-check.sh: gpu-init and nvidia-ctk),
# the figures `gcp-t4 plan serve` and docs/runbook-mistral-tp2.md assume
# (gpu_figures.py: CUDA context size and memory bandwidth reached, with the
# driver only), and the example's nccl_check.py on every GPU there
# (versions, FlexAttention compile time, NCCL), where torch is installed.
#
# Prepare the bundle where the network is (test/device/bundle.sh DIR), copy
# the repository and DIR to the GPU machine, then:
#   test/device/serving-check.sh DIR OUT
# Each part's result is one line in OUT/summary; a part that cannot run
# says why and the others still run. Exit status: 0 when every part that
# could run passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bundle=$(cd "${1:?usage: serving-check.sh BUNDLE_DIR OUT_DIR}" && pwd)
out=${2:?usage: serving-check.sh BUNDLE_DIR OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary="$out/summary"
: >"$summary"
status=0

note() { echo "$*" | tee -a "$summary"; }

# 1. gpu-init's CDI path, as on a podVM.
if [[ -x "$bundle/gpu-init" && -x "$bundle/nvidia-ctk" ]]; then
	"$here/gpu-check.sh" "$bundle" "$out/cdi" >/dev/null 2>&1
	if grep -q '"state":"ready"' "$out/cdi/log"; then
		note "cdi PASS $(grep -o '"gpus":[0-9]*' "$out/cdi/log" | head -n1) $(grep -o '"elapsed_ms":[0-9]*' "$out/cdi/log" | tail -n1)"
	else
		note "cdi FAIL: see $out/cdi/log"
		status=1
	fi
else
	note "cdi SKIP: no gpu-init and nvidia-ctk in $bundle (run test/device/bundle.sh there first)"
fi

# 2. The figures, with the driver only.
if python3 "$here/gpu_figures.py" --out "$out/figures.json" >"$out/figures.log" 2>&1; then
	note "$(grep '^GPU-FIGURES' "$out/figures.log")"
else
	note "figures FAIL: $(tail -n1 "$out/figures.log")"
	status=1
fi

# 3. The example's check on this machine's GPUs: versions, FlexAttention's
# compile time, and NCCL between its GPUs (or one rank alone).
check="$repo/install/examples/mistral-tp2/nccl-check/nccl_check.py"
if python3 -c 'import torch, torch.distributed' >/dev/null 2>&1 && command -v torchrun >/dev/null; then
	gpus=$(nvidia-smi -L | grep -c '^GPU ')
	(
		export NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo MTU_TIMEOUT_S=60
		timeout 900 torchrun --standalone --nnodes=1 --nproc-per-node="$gpus" "$check"
	) >"$out/nccl-check.log" 2>&1
	line=$(grep -h '^NCCL-CHECK' "$out/nccl-check.log" | head -n1)
	note "nccl-check (${gpus} GPU): ${line:-no summary line, see $out/nccl-check.log}"
	[[ $line == "NCCL-CHECK PASS"* ]] || status=1
else
	note "nccl-check SKIP: no torch/torchrun on this machine (the serving image has them; FlexAttention compile time not measured)"
fi

note "serving-check done: status $status"
exit "$status"
