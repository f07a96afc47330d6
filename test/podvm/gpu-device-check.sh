#!/usr/bin/env bash
# Runs `gpu-init` (the podVM's binary) against the real root of a machine with an NVIDIA
# GPU and its driver installed, writing the CDI spec to a scratch path so the
# host's own /var/run/cdi is untouched. Collects the readiness lines, the
# spec and the environment into $OUT (default /tmp/caa-gcp-t4-gpu-check).
#   gpu-device-check.sh <dir or .tar.gz with gpu-init, nvidia-ctk, nvidia-cdi-hook>
set -uo pipefail
src=$1
out=${OUT:-/tmp/caa-gcp-t4-gpu-check}
mkdir -p "$out"
bin=$(mktemp -d)
if [ -f "$src" ]; then tar -C "$bin" -xzf "$src"; else cp "$src"/* "$bin/"; fi
modprobe=$(command -v modprobe || echo /bin/true)
smi=$(command -v nvidia-smi || echo "")
cdi=/tmp/caa-gcp-t4-cdi/nvidia.json
{
	echo "## id"; id
	echo "## kernel"; uname -r
	echo "## os"; head -n 2 /etc/os-release
	echo "## tools"; echo "modprobe=$modprobe nvidia-smi=$smi"
	echo "## nvidia-smi -L"; ${smi:+$smi -L}
	echo "## /proc/driver/nvidia/version"; cat /proc/driver/nvidia/version
	echo "## /dev/nvidia*"; ls -l /dev/nvidia*
	echo "## NVIDIA PCI functions"
	for d in /sys/bus/pci/devices/*; do
		[ "$(cat "$d/vendor")" = 0x10de ] && echo "$(basename "$d") class $(cat "$d/class")"
	done
} >"$out/env.txt" 2>&1

run() {
	local name=$1
	shift
	"$bin/gpu-init" --root / --timeout 60s --console "" \
		--nvidia-smi "$smi" --modprobe "$modprobe" \
		--nvidia-ctk "$bin/nvidia-ctk" --nvidia-cdi-hook "$bin/nvidia-cdi-hook" "$@" \
		>"$out/$name.line" 2>"$out/$name.stderr"
	echo "rc=$?" >>"$out/$name.line"
}
rm -rf "$(dirname "$cdi")"
run ready --cdi-output "$cdi"
cp "$cdi" "$out/nvidia.json" 2>/dev/null
ls -la "$(dirname "$cdi")" /tmp >"$out/cdi-dir.txt" 2>&1
run again --cdi-output "$cdi"
# A module load that fails must give a failed line at step modprobe.
run badmodule --cdi-output /tmp/caa-gcp-t4-cdi-bad/nvidia.json --modprobe /bin/false
"$bin/nvidia-ctk" cdi list --spec-dir "$(dirname "$cdi")" >"$out/cdi-list.txt" 2>&1
for f in env.txt ready.line ready.stderr again.line badmodule.line cdi-dir.txt cdi-list.txt; do
	echo "==== $f"
	cat "$out/$f"
done
echo "==== nvidia.json (kind and device names)"
jq -r '.kind, .devices[].name' "$out/nvidia.json" 2>/dev/null | head -n 20
rm -rf "$bin"
