#!/usr/bin/env bash
# Boots a built podVM under QEMU (UEFI with OVMF, TCG unless told kvm)
# with the serial console in a file, and checks what a GCE serial-port
# reader would see on a VM without a GPU:
#   - the GPU init unit's readiness line, state "no-gpu", with a reason;
#   - it comes before the guest-binaries line, which the agent slots are
#     ordered after (Before=kata-agent.service …);
#   - the boot reaches multi-user.target without stopping at any prompt;
#   - the root partition and filesystem grow to a larger disk (as on GCE);
#   - an ACPI power-off (GCE's stop) shuts the VM down cleanly.
# The VM reaches a GCE-style metadata server at 169.254.169.254
# (test/podvm/gce-metadata.py through QEMU's guestfwd) that serves the
# attribute user-data, base64-encoded as CAA's GCP provider stores it.
#
# With stand-in guest binaries in the slots (PODVM_BOOT_STANDINS lists
# them; test/podvm/standin), it also checks the peer-pod guest contract
# from the records they leave on the disk:
#   - /run/netns/podns exists and the forwarder opened it;
#   - /run/kata-containers is the root disk's ext4 with the disk's room,
#     not a tmpfs;
#   - the forwarder's command line uses only flags upstream's forwarder
#     defines (fixtures/agent-protocol-forwarder-flags.txt);
#   - process-user-data finished before kata-agent started, CDH's socket
#     existed when kata-agent started, and kata-agent's socket existed when
#     the forwarder started; the forwarder listens on :15150 and is ready;
#   - an empty slot's unit is skipped and holds nothing up;
#   - every listening socket, in the root and the pod namespace, is one we
#     expect (no LLMNR on 5355).
# The image is never written: QEMU runs on a larger qcow2 overlay.
#   boot-test.sh <podvm dir> [result dir]
# Environment: PODVM_BOOT_TIMEOUT (seconds, default 900), PODVM_QEMU_ACCEL (tcg|kvm),
#   PODVM_BOOT_STANDINS (slots holding test/podvm/standin, space-separated),
#   PODVM_BOOT_REAL (slots holding upstream's real binaries, for a manual run),
#   PODVM_BOOT_USER_DATA (file served as the user-data attribute, before base64;
#   default fixtures/user-data.yaml).
set -euo pipefail
dir=$1
results=${2:-}
timeout=${PODVM_BOOT_TIMEOUT:-900}
standins=${PODVM_BOOT_STANDINS:-}
here=$(cd "$(dirname "$0")" && pwd)
user_data=${PODVM_BOOT_USER_DATA:-$here/fixtures/user-data.yaml}
fail() {
	echo "boot-test: FAIL: $*" >&2
	if [ -n "$results" ] && [ -f "${log:-}" ]; then
		mkdir -p "$results"
		tr -d '\r' <"$log" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g' >"$results/console.log"
		echo "boot-test: console saved in $results/console.log" >&2
		if [ -n "$standins" ] && [ -f "${work:-}/root.raw" ]; then
			mkdir -p "$results/standin"
			debugfs -R "rdump /var/lib/caa-gcp-t4-standin $results/standin" "$work/root.raw" 2>/dev/null || true
			echo "boot-test: stand-in records and the guest units' journal saved in $results/standin" >&2
		fi
	fi
	if [ -f "${log:-}" ]; then
		echo "---- last 40 console lines ----" >&2
		tr -d '\r' <"$log" | sed 's/\x1b\[[0-9;]*m//g' | tail -n 40 >&2
	fi
	exit 1
}
[ -f "$dir/podvm.raw" ] || fail "no $dir/podvm.raw"
code=/usr/share/OVMF/OVMF_CODE_4M.fd
vars=/usr/share/OVMF/OVMF_VARS_4M.fd
[ -f "$code" ] || fail "OVMF not installed ($code): run podvm/scripts/setup-host.sh"

work=$(mktemp -d)
qpid=""
cleanup() {
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
		kill "$qpid" 2>/dev/null || true
		wait "$qpid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
log=$work/console.log
cp "$vars" "$work/vars.fd"
disk_bytes=$((4 * 1024 * 1024 * 1024))
qemu-img create -q -f qcow2 -b "$(realpath "$dir/podvm.raw")" -F raw "$work/disk.qcow2" "$disk_bytes"
# CAA's GCP provider base64-encodes user-data; process-user-data decodes it.
base64 -w0 "$user_data" >"$work/user-data.b64"

# TCG by default: on machines like ours /dev/kvm can exist and initialise
# yet never run a guest (nested virtualisation), which would hang the test.
accel=${PODVM_QEMU_ACCEL:-tcg}

start=$(date +%s)
qemu-system-x86_64 \
	-machine q35 -accel "$accel" -cpu max -smp 2 -m 2048 \
	-nographic -monitor "unix:$work/monitor.sock,server=on,wait=off" -serial "file:$log" \
	-drive if=pflash,format=raw,unit=0,readonly=on,file="$code" \
	-drive if=pflash,format=raw,unit=1,file="$work/vars.fd" \
	-drive if=none,id=disk,format=qcow2,file="$work/disk.qcow2" \
	-device virtio-scsi-pci,id=scsi -device scsi-hd,drive=disk,bootindex=1 \
	-netdev "user,id=net0,net=169.254.169.0/24,host=169.254.169.2,dns=169.254.169.3,dhcpstart=169.254.169.15,guestfwd=tcp:169.254.169.254:80-cmd:env GCE_METADATA_LOG=$work/metadata.log python3 $here/gce-metadata.py user-data=$work/user-data.b64" \
	-device virtio-net-pci,netdev=net0 \
	-device virtio-rng-pci \
	</dev/null >"$work/qemu.out" 2>&1 &
qpid=$!

clean() { tr -d '\r' <"$log" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g'; }
gpu_at="" multi_at="" ready_at=""
while :; do
	now=$(date +%s)
	if ! kill -0 "$qpid" 2>/dev/null; then
		cat "$work/qemu.out" >&2
		fail "QEMU exited before the boot finished"
	fi
	if [ -f "$log" ]; then
		text=$(clean)
		if [ -z "$gpu_at" ] && grep -q 'CAA-GCP-T4-GPU {' <<<"$text"; then gpu_at=$((now - start)); fi
		if [ -z "$multi_at" ] && grep -q 'Reached target.*Multi-User System' <<<"$text"; then multi_at=$((now - start)); fi
		# A prompt on the console means the boot would hang on GCE too.
		if grep -Eiq 'login: *$|Please enter|Press .* to continue|Give root password|emergency mode|Enter passphrase' <<<"$text"; then
			fail "the boot stopped at a prompt"
		fi
		if [ -n "$gpu_at" ] && [ -n "$multi_at" ] && grep -q 'CAA-GCP-T4-SLOTS {' <<<"$text"; then
			# The kata-agent stand-in reports once systemd's boot jobs are done.
			if ! grep -qw kata-agent <<<"$standins" || grep -q 'CAA-GCP-T4-STANDIN-REPORT ' <<<"$text"; then
				ready_at=$((now - start))
				break
			fi
		fi
	fi
	if [ $((now - start)) -ge 90 ] && [ ! -s "$log" ]; then
		fail "no serial console output after 90s ($accel): firmware or accelerator stuck"
	fi
	if [ $((now - start)) -ge "$timeout" ]; then
		fail "no readiness line, guest-binaries line, multi-user.target (and stand-in report: '$standins') within ${timeout}s ($accel)"
	fi
	sleep 2
done
text=$(clean)

gpu_line=$(grep -m1 -o 'CAA-GCP-T4-GPU {.*}' <<<"$text")
json=${gpu_line#CAA-GCP-T4-GPU }
state=$(jq -r .state <<<"$json") || fail "readiness line is not JSON: $gpu_line"
reason=$(jq -r '.reason // ""' <<<"$json")
[ "$state" = no-gpu ] || fail "readiness state is '$state', want no-gpu (no GPU in QEMU): $gpu_line"
[ -n "$reason" ] || fail "no-gpu readiness line has no reason: $gpu_line"
[ "$(grep -c 'CAA-GCP-T4-GPU {' <<<"$text")" -eq 1 ] || fail "more than one readiness line on the console"

gpu_n=$(grep -n -m1 'CAA-GCP-T4-GPU {' <<<"$text" | cut -d: -f1)
slots_n=$(grep -n -m1 'CAA-GCP-T4-SLOTS {' <<<"$text" | cut -d: -f1)
[ "$gpu_n" -lt "$slots_n" ] || fail "readiness line (console line $gpu_n) is not before the agent slots (line $slots_n)"
slots=$(grep -m1 -o 'CAA-GCP-T4-SLOTS {.*}' <<<"$text")
agent_n=$(grep -n -m1 -E 'Kata Containers agent|kata-agent\.service' <<<"$text" | cut -d: -f1 || true)
if [ -n "$agent_n" ] && [ "$agent_n" -lt "$gpu_n" ]; then
	fail "the kata agent slot shows up (line $agent_n) before the readiness line (line $gpu_n)"
fi
for bad in 'Failed to start' 'FAILED'; do
	if grep -q "$bad" <<<"$text"; then
		grep "$bad" <<<"$text" >&2
		# A run against upstream's real binaries goes on to collect what they did.
		[ -n "${PODVM_BOOT_REAL:-}" ] || fail "a unit failed during boot"
		echo "boot-test: a unit failed; going on to collect the records (PODVM_BOOT_REAL)" >&2
	fi
done

# GCE stops a VM with an ACPI power button press: it must shut down cleanly.
# The press is repeated because one that arrives before systemd-logind
# watches the button is lost (GCE, too, presses and then waits).
powerdown() {
	# Wait for the monitor's greeting, send the command, and read its echo
	# before closing: a command on a connection closed at once can be lost.
	/usr/bin/python3 - "$work/monitor.sock" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
buf = b""
while b"(qemu)" not in buf:
    buf += s.recv(4096)
s.sendall(b"system_powerdown\n")
end = time.time() + 2
s.settimeout(0.5)
while time.time() < end:
    try:
        if not s.recv(4096):
            break
    except socket.timeout:
        pass
s.close()
PY
}
for i in $(seq 0 89); do
	kill -0 "$qpid" 2>/dev/null || break
	if [ $((i % 10)) -eq 0 ]; then powerdown || echo "boot-test: monitor command failed, retrying" >&2; fi
	sleep 2
done
if kill -0 "$qpid" 2>/dev/null; then
	fail "the VM did not power off within 180s of ACPI power-button presses"
fi
wait "$qpid" || true
qpid=""
clean | grep -q 'reboot: Power down' || fail "no clean power-down on the console"

# The root partition must have grown to the end of the 4 GiB disk, and its
# ext4 filesystem with it (systemd-repart, then systemd-growfs).
qemu-img convert -O raw "$work/disk.qcow2" "$work/after.raw"
json=$(sfdisk -J "$work/after.raw")
read -r pstart psize < <(jq -r '.partitiontable.partitions[] | select(.type == "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709") | "\(.start) \(.size)"' <<<"$json")
pend=$(( (pstart + psize) * 512 ))
[ "$pend" -ge $((disk_bytes - 2 * 1024 * 1024)) ] || fail "root partition ends at $pend bytes, not grown to the ${disk_bytes}-byte disk"
dd if="$work/after.raw" of="$work/root.raw" bs=512 skip="$pstart" count="$psize" conv=sparse status=none
sb=$(dumpe2fs -h "$work/root.raw" 2>/dev/null)
blocks=$(awk -F': *' '/^Block count/ {print $2}' <<<"$sb")
bsize=$(awk -F': *' '/^Block size/ {print $2}' <<<"$sb")
fs_bytes=$((blocks * bsize))
[ "$fs_bytes" -ge $((psize * 512 - 64 * 1024 * 1024)) ] || fail "root filesystem is $fs_bytes bytes in a $((psize * 512))-byte partition: not grown"

guest=""
if [ -n "$standins" ]; then
	guest=$("$here/check-guest.sh" "$work/root.raw" "$slots" "$standins" "$((fs_bytes))" "$work/user-data.b64" "${PODVM_BOOT_REAL:-}") || fail "peer-pod guest contract (above)"
fi

echo "boot-test: ok ($accel): readiness at ${gpu_at}s, multi-user at ${multi_at}s, boot done at ${ready_at}s; root grown to $((fs_bytes / 1024 / 1024)) MiB; clean power-off"
echo "  $gpu_line"
echo "  $slots"
[ -z "$guest" ] || echo "$guest"
if [ -n "$results" ]; then
	mkdir -p "$results"
	clean >"$results/console.log"
	printf '{"accel":"%s","readiness_seconds":%s,"multi_user_seconds":%s,"boot_done_seconds":%s}\n' "$accel" "$gpu_at" "$multi_at" "$ready_at" >"$results/boot-info.json"
	if [ -n "$standins" ]; then
		mkdir -p "$results/standin"
		debugfs -R "rdump /var/lib/caa-gcp-t4-standin $results/standin" "$work/root.raw" 2>/dev/null || true
	fi
	cp "$work/metadata.log" "$results/" 2>/dev/null || true
fi
