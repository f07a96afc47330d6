#!/usr/bin/env bash
# Boots a built podVM under QEMU (UEFI with OVMF, TCG unless told kvm)
# with the serial console in a file, a TPM 2.0 (swtpm) like GCE's Shielded
# VM vTPM, and, for a signed image (podvm.db.crt next to it), Secure Boot
# enforcing with only that certificate enrolled (PK, KEK and db: no
# Microsoft keys, so nothing else could boot). It checks what a GCE
# serial-port reader would see on a VM without a GPU:
#   - Secure Boot on (the kernel says so), for a signed image;
#   - the initdata line: the digest process-user-data wrote is the one
#     computed here from the served initdata, and PCR 8 holds
#     SHA-256(32 zero bytes || its first 32 bytes), as upstream extends it;
#   - the GPU init unit's readiness line, state "no-gpu", with a reason;
#   - it comes before the guest-binaries line, which the agent slots are
#     ordered after (Before=kata-agent.service …);
#   - the boot reaches multi-user.target without stopping at any prompt;
#   - the state partition (/var) and its filesystem grow to a larger disk
#     (as on GCE); the root partition is not written;
#   - an ACPI power-off (GCE's stop) shuts the VM down cleanly;
#   - then a second boot of the same image with one root block changed
#     (the squashfs superblock, block 0 of the verity data) fails cleanly:
#     dm-verity reports the block, the initrd prints the boot-failed line
#     and powers the VM off, with no prompt and no multi-user.target.
#   - with stand-ins for CDH and kata-agent, a third boot whose CDH never
#     listens: kata-agent is never started, and the console carries one
#     CAA-GCP-T4-CDH-FAILED line saying why. With PODVM_BOOT_CACHE it also
#     has the cache disk, its metadata naming another root hash: the disk
#     is not opened (CAA-GCP-T4-STORE unused, verity-refused), and neither
#     the mirror nor the store runs.
#   - with stand-ins for process-user-data and kata-agent, a fourth boot
#     whose process-user-data writes no initdata digest, the TPM there:
#     measure-initdata fails closed (state no-digest, "kata_agent":"not
#     started"), process-user-data.service fails, and systemd refuses
#     kata-agent.service for it (Requires=): the agent never starts.
# With PODVM_BOOT_CACHE (a directory test/podvm/cache-fixture.sh wrote), the
# first boot also has the cache disk attached as a second disk, writable as
# GCE attaches it (docs/cache.md), and, once booted:
#   - the metadata server gives the disk's dm-verity value (the fixture's,
#     as the provider sets it), and the guest contract says the disk is
#     mounted read-only from its verity device, opened by
#     caa-gcp-t4-cache-open.service before the mount;
#   - the mirror's CAA-GCP-T4-CACHE line says it serves the disk's images on
#     127.0.0.1:5000, and the guest contract says the disk is mounted
#     read-only by the unit udev started on its label;
#   - podvm-cache-store's CAA-GCP-T4-STORE line says the disk's pre-unpacked
#     store is in use (both images), and the guest contract that it ran
#     before CDH, that image-rs's work_dir holds the disk's meta_store.json
#     byte for byte, that the first image mounts as image-rs mounts it (its
#     layers on the disk as overlay lowerdirs) and reads whole, and that the
#     disk's noexec and nosymfollow do not reach through such an overlay;
#   - skopeo on this machine, reading a containers-registries.conf (the
#     format image-rs reads) whose mirror is the podVM's, pulls the first
#     image by digest, its source registry gone, and gets the manifest the
#     layout holds; it cannot pull the second, whose layer was changed on
#     the disk after build: dm-verity fails the read of the changed block,
#     and the kernel's line on the console says so.
#   The client reaches the mirror, which listens on the VM's loopback only,
#   through a relay the CDH stand-in opens (asked through a metadata
#   attribute) and a QEMU host port forward.
# The VM reaches a GCE-style metadata server at 169.254.169.254
# (test/podvm/gce-metadata.py through QEMU's guestfwd) that serves the
# attribute user-data, base64-encoded as CAA's GCP provider stores it, and
# a host maintenance notice (maintenance-event TERMINATE_ON_HOST_MAINTENANCE)
# that podvm-notice must pass to the pod's namespace.
#
# With stand-in guest binaries in the slots (PODVM_BOOT_STANDINS lists
# them; test/podvm/standin), it also checks the peer-pod guest contract
# from the records they leave on the disk:
#   - /run/netns/podns exists and the forwarder opened it;
#   - a client in the pod's namespace reads the maintenance notice at
#     127.0.0.1:8007/v1/notice (caa-gcp-t4-notice.socket there, the
#     service in the VM's namespace reading the metadata server);
#   - / is the squashfs on the dm-verity device, read-only; the NVIDIA
#     module's signature is accepted (Secure Boot's lockdown enforces it);
#   - /run/kata-containers is the state partition's ext4 with the disk's
#     room, not a tmpfs;
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
#   PODVM_BOOT_CACHE (a cache fixture directory, above),
#   PODVM_BOOT_USER_DATA (file served as the user-data attribute, before base64;
#   default fixtures/user-data.yaml); for manual runs, PODVM_BOOT_HOSTFWD (QEMU
#   hostfwd rule, e.g. tcp:127.0.0.1:25150-:15150) and PODVM_BOOT_WHILE_UP (a
#   command run on this machine once the boot is done, before power-off).
set -euo pipefail
dir=$1
results=${2:-}
timeout=${PODVM_BOOT_TIMEOUT:-900}
standins=${PODVM_BOOT_STANDINS:-}
here=$(cd "$(dirname "$0")" && pwd)
user_data=${PODVM_BOOT_USER_DATA:-$here/fixtures/user-data.yaml}
cache=${PODVM_BOOT_CACHE:-}
fail() {
	echo "boot-test: FAIL: $*" >&2
	if [ -n "$results" ] && [ -f "${log:-}" ]; then
		mkdir -p "$results"
		tr -d '\r' <"$log" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g' >"$results/console.log"
		echo "boot-test: console saved in $results/console.log" >&2
		if [ -n "$standins" ] && [ -f "${work:-}/state.raw" ]; then
			mkdir -p "$results/standin"
			debugfs -R "rdump /lib/caa-gcp-t4-standin $results/standin" "$work/state.raw" 2>/dev/null || true
			echo "boot-test: stand-in records and the guest units' journal saved in $results/standin" >&2
		fi
	fi
	if [ -f "${log:-}" ]; then
		echo "---- last 40 console lines ----" >&2
		tr -d '\r' <"$log" | sed 's/\x1b\[[0-9;]*m//g' | tail -n 40 >&2
		# A guest starved of CPU fails in ways that look like the image's
		# (starved.sh): say so, so the reader looks at the load first.
		if starved=$("$here/starved.sh" "$log"); then
			echo "boot-test: the guest was starved of CPU (console: $starved): under ${accel:-tcg} on a loaded machine its own timeouts fire; rerun on a less loaded machine or with PODVM_QEMU_ACCEL=kvm before suspecting the image" >&2
		fi
	fi
	exit 1
}
[ -f "$dir/podvm.raw" ] || fail "no $dir/podvm.raw"
vars=/usr/share/OVMF/OVMF_VARS_4M.fd
cert=$dir/podvm.db.crt
secure_boot=no
if [ -f "$cert" ]; then
	# OVMF built with Secure Boot, which needs SMM (and so the secure pflash).
	secure_boot=yes
	code=/usr/share/OVMF/OVMF_CODE_4M.secboot.fd
else
	code=/usr/share/OVMF/OVMF_CODE_4M.fd
fi
for f in "$code" "$vars"; do
	[ -f "$f" ] || fail "OVMF not installed ($f): run podvm/scripts/setup-host.sh"
done
for t in swtpm virt-fw-vars qemu-io; do
	command -v "$t" >/dev/null || fail "no $t: run podvm/scripts/setup-host.sh"
done
if [ -n "$cache" ]; then
	if [ ! -f "$cache/disk.raw" ] || [ ! -f "$cache/fixture.json" ]; then
		fail "PODVM_BOOT_CACHE=$cache: no disk.raw and fixture.json (test/podvm/cache-fixture.sh writes them)"
	fi
	grep -qw confidential-data-hub <<<"$standins" || fail "PODVM_BOOT_CACHE needs the CDH stand-in, whose relay reaches the mirror"
	command -v skopeo >/dev/null || fail "no skopeo: run test/cache/deps.sh"
fi

work=$(mktemp -d)
qpid=""
tpid=""
meta_extra=""
stop_vm() {
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
		kill "$qpid" 2>/dev/null || true
		wait "$qpid" 2>/dev/null || true
	fi
	qpid=""
	if [ -n "$tpid" ] && kill -0 "$tpid" 2>/dev/null; then
		kill "$tpid" 2>/dev/null || true
		wait "$tpid" 2>/dev/null || true
	fi
	tpid=""
}
cleanup() {
	stop_vm
	rm -rf "$work"
}
trap cleanup EXIT
log=$work/console.log
# The variable store: for a signed image, Secure Boot on with the image's
# certificate as PK, KEK and db, and nothing else enrolled.
fresh_vars() {
	if [ "$secure_boot" = yes ]; then
		virt-fw-vars --input "$vars" --output "$work/vars.fd" --no-microsoft --secure-boot \
			--set-pk "$sb_owner" "$cert" --add-kek "$sb_owner" "$cert" --add-db "$sb_owner" "$cert" >"$work/vars.log" 2>&1 ||
			{ cat "$work/vars.log" >&2; fail "virt-fw-vars could not enrol $cert"; }
	else
		cp "$vars" "$work/vars.fd"
	fi
}
# The signature owner GUID of the enrolled entries (any GUID; this one is the
# image's Seed= in podvm/mkosi.conf).
sb_owner=5f1d3c2a-8b4e-4c6d-9e2f-7a1b0c3d4e5f
# 4 GiB, and room for the cache disk's images once more: the stand-in's
# pull through the mirror unpacks them onto the state partition.
disk_bytes=$((4 * 1024 * 1024 * 1024))
if [ -n "$cache" ]; then
	disk_bytes=$((disk_bytes + $(stat -c %s "$cache/disk.raw")))
fi
qemu-img create -q -f qcow2 -b "$(realpath "$dir/podvm.raw")" -F raw "$work/disk.qcow2" "$disk_bytes"
# CAA's GCP provider base64-encodes user-data; process-user-data decodes it.
base64 -w0 "$user_data" >"$work/user-data.b64"

# TCG by default: on machines like ours /dev/kvm can exist and initialise
# yet never run a guest (nested virtualisation), which would hang the test.
accel=${PODVM_QEMU_ACCEL:-tcg}

# start_vm DISK CONSOLE: a fresh TPM and variable store, then QEMU.
start_vm() {
	rm -rf "$work/tpm"
	mkdir -p "$work/tpm"
	swtpm socket --tpm2 --tpmstate dir="$work/tpm" --ctrl type=unixio,path="$work/tpm/swtpm.sock" \
		--flags startup-clear --terminate </dev/null >"$work/swtpm.out" 2>&1 &
	tpid=$!
	for _ in $(seq 1 50); do
		[ -S "$work/tpm/swtpm.sock" ] && break
		kill -0 "$tpid" 2>/dev/null || { cat "$work/swtpm.out" >&2; fail "swtpm exited"; }
		sleep 0.1
	done
	fresh_vars
	local machine=q35 sbargs=() cacheargs=() cachefwd=""
	# The cache disk, on the first boot (and on the no-CDH boot, with the
	# wrong root hash: attach_cache): a second disk, writable as GCE
	# attaches it (READ_WRITE, auto-deleted), so that only the guest's
	# read-only mount keeps it unchanged; the test compares its bytes after.
	if [ -n "$cache" ] && { [ "$2" = "$work/console.log" ] || [ -n "${attach_cache:-}" ]; }; then
		# shellcheck disable=SC2054 # QEMU's option syntax, one argument
		cacheargs=(-drive "if=none,id=cache,format=raw,file=$cache/disk.raw" -device scsi-hd,drive=cache)
		cachefwd="hostfwd=tcp:127.0.0.1:$cache_port-:15000,"
	fi
	if [ "$secure_boot" = yes ]; then
		machine=q35,smm=on
		sbargs=(-global "driver=cfi.pflash01,property=secure,value=on")
	fi
	# The guest's own bounds (wait-online's 2 minutes, the kernel's
	# watchdogs) assume its vCPUs run: as root, QEMU runs before the
	# test's other processes (the Go lane's compiles beside it) when both
	# want the CPU. A process outside make's group is not outranked.
	local prio=()
	[ "$(id -u)" -ne 0 ] || prio=(nice -n -10)
	"${prio[@]}" qemu-system-x86_64 \
		-machine "$machine" -accel "$accel" -cpu max -smp 2 -m 2048 "${sbargs[@]}" \
		-nographic -monitor "unix:$work/monitor.sock,server=on,wait=off" -serial "file:$2" \
		-drive if=pflash,format=raw,unit=0,readonly=on,file="$code" \
		-drive if=pflash,format=raw,unit=1,file="$work/vars.fd" \
		-drive if=none,id=disk,format=qcow2,file="$1" \
		-device virtio-scsi-pci,id=scsi -device scsi-hd,drive=disk,bootindex=1 "${cacheargs[@]}" \
		-chardev socket,id=chrtpm,path="$work/tpm/swtpm.sock" -tpmdev emulator,id=tpm0,chardev=chrtpm -device tpm-crb,tpmdev=tpm0 \
		-netdev "user,id=net0,${PODVM_BOOT_HOSTFWD:+hostfwd=$PODVM_BOOT_HOSTFWD,}${cachefwd}net=169.254.169.0/24,host=169.254.169.2,dns=169.254.169.3,dhcpstart=169.254.169.15,guestfwd=tcp:169.254.169.254:80-cmd:env GCE_METADATA_LOG=$work/metadata.log GCE_METADATA_MAINTENANCE_EVENT=TERMINATE_ON_HOST_MAINTENANCE python3 $here/gce-metadata.py user-data=$work/user-data.b64${meta_extra:+ $meta_extra}" \
		-device virtio-net-pci,netdev=net0 \
		-device virtio-rng-pci \
		</dev/null >"$work/qemu.out" 2>&1 &
	qpid=$!
}

if [ -n "$cache" ]; then
	cache_sum=$(sha256sum "$cache/disk.raw" | cut -c1-64)
	cache_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	printf '0.0.0.0:15000' >"$work/cdh-relay"
	# The disk's dm-verity value, as the provider puts it in the metadata.
	jq -j .verity "$cache/fixture.json" >"$work/cache-verity"
	# The fixture's images as the mirror serves them (repository@digest,
	# the source registry's host dropped), for the stand-in's in-guest pull
	# measurement: each timed from the request to a mounted rootfs, from
	# the pre-unpacked store and through the mirror (standin/pull.go); and
	# the model image, from the store, its shards read and hashed.
	jq -c '{good: (.good | sub("^[^/]*/"; "")), tampered: (.tampered | sub("^[^/]*/"; "")), model: (.model | sub("^[^/]*/"; ""))}' "$cache/fixture.json" >"$work/pull-spec"
	meta_extra="caa-gcp-t4-standin-cdh-relay=$work/cdh-relay caa-gcp-t4-cache-verity=$work/cache-verity caa-gcp-t4-standin-pull=$work/pull-spec"
fi
start=$(date +%s)
start_vm "$work/disk.qcow2" "$log"
meta_extra=""

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
	# A firmware or accelerator that never starts says nothing at all;
	# fail early for it, at a third of the boot's bound. 90 s once fired
	# on a good image: make test boots it beside the Go checks and the
	# reproducing rebuild, and beside a CPU-bound job OVMF under TCG was
	# still silent then (docs/benchmarks.md, run 2).
	if [ $((now - start)) -ge $((timeout / 3)) ] && [ ! -s "$log" ]; then
		fail "no serial console output after $((timeout / 3))s ($accel): firmware or accelerator stuck"
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

# Secure Boot: the kernel reports the firmware's state (arch/x86/kernel/
# setup.c, "secureboot: Secure boot enabled"); a UKI the firmware would not
# verify never gets this far.
if [ "$secure_boot" = yes ]; then
	grep -q 'secureboot: Secure boot enabled' <<<"$text" || fail "Secure Boot: the kernel did not report 'Secure boot enabled'"
	sb_state="Secure Boot enforcing (test key in PK/KEK/db only)"
else
	sb_state="Secure Boot off (unsigned image)"
fi
# systemd-stub 252 warned this loading our UKI (section alignment 0x200);
# the 254 stub the build uses must not.
if grep -q 'Overlapping PE sections' <<<"$text"; then
	fail "the UKI stub reports overlapping PE sections"
fi
if grep -q 'module verification failed' <<<"$text"; then
	fail "a module was loaded without a valid signature: $(grep 'module verification failed' <<<"$text" | head -n 1)"
fi

# Measured initdata: the digest upstream's process-user-data computes from
# the served initdata (sha256/384/512 of the decoded TOML, in its algorithm:
# CAA v0.22.0 pkg/initdata/initdata.go), computed here from the fixture, and
# PCR 8 after one extend of its first 32 bytes from zero.
toml=$work/initdata.toml
enc=$(base64 -d "$work/user-data.b64" | awk '
	$0 ~ /^  - path: \/run\/peerpod\/initdata$/ {f = 1; next}
	f && /^    content: \|$/ {c = 1; next}
	c && /^      / {sub(/^ +/, ""); printf "%s", $0; next}
	c {exit}')
if [ -n "$enc" ]; then
	base64 -d <<<"$enc" | gzip -dc >"$toml" || fail "the served initdata is not base64(gzip)"
else
	# Upstream's dummy initdata when the user-data carries none (provision.go).
	printf '%s' $'algorithm = "sha256"\nversion = "0.1.0"\n\n[data]\n"aa.toml" = \'\'\'\n\'\'\'' >"$toml"
fi
alg=$(sed -n 's/^algorithm *= *"\(sha[0-9]*\)" *$/\1/p' "$toml" | head -n 1)
case "$alg" in sha256 | sha384 | sha512) ;; *) fail "initdata algorithm '$alg'" ;; esac
want_digest=$("${alg}sum" "$toml" | cut -d' ' -f1)
want_pcr=$(/usr/bin/python3 -c 'import hashlib, sys; print(hashlib.sha256(bytes(32) + bytes.fromhex(sys.argv[1][:64])).hexdigest())' "$want_digest")
init_line=$(grep -m1 -o 'CAA-GCP-T4-INITDATA {.*}' <<<"$text") || fail "no CAA-GCP-T4-INITDATA line on the console"
ij=${init_line#CAA-GCP-T4-INITDATA }
if grep -qw process-user-data <<<"$standins ${PODVM_BOOT_REAL:-}"; then
	[ "$(jq -r .state <<<"$ij")" = measured ] || fail "initdata not measured: $init_line"
	[ "$(jq -r .pcr <<<"$ij")" = 8 ] || fail "initdata measured into PCR $(jq -r .pcr <<<"$ij"), want 8: $init_line"
	[ "$(jq -r .digest <<<"$ij")" = "$want_digest" ] || fail "initdata digest $(jq -r .digest <<<"$ij"), want $want_digest ($alg of the served initdata)"
	[ "$(jq -r .pcr_sha256 <<<"$ij")" = "$want_pcr" ] || fail "PCR 8 reads $(jq -r .pcr_sha256 <<<"$ij"), want $want_pcr (one extend of the digest's first 32 bytes)"
fi

for bad in 'Failed to start' 'FAILED'; do
	if grep -q "$bad" <<<"$text"; then
		grep "$bad" <<<"$text" >&2
		# A run against upstream's real binaries goes on to collect what they did.
		[ -n "${PODVM_BOOT_REAL:-}" ] || fail "a unit failed during boot"
		echo "boot-test: a unit failed; going on to collect the records (PODVM_BOOT_REAL)" >&2
	fi
done

# A manual run against upstream's real binaries may look at the running VM
# (through PODVM_BOOT_HOSTFWD's forwarded ports) before it is stopped.
if [ -n "${PODVM_BOOT_WHILE_UP:-}" ]; then
	bash -c "$PODVM_BOOT_WHILE_UP" || echo "boot-test: PODVM_BOOT_WHILE_UP exited $?" >&2
fi

# The cache: the mirror's console line, then skopeo through the podVM's
# mirror (registries.conf), the source registry long gone.
cache_line=""
store_line=""
if [ -n "$cache" ]; then
	cache_line=$(grep -m1 -o 'CAA-GCP-T4-CACHE {.*}' <<<"$text") || fail "cache disk attached: no CAA-GCP-T4-CACHE line on the console"
	cj=${cache_line#CAA-GCP-T4-CACHE }
	[ "$(jq -r .state <<<"$cj")" = serving ] || fail "cache disk attached: the mirror is not serving: $cache_line"
	[ "$(jq -r .listen <<<"$cj")" = 127.0.0.1:5000 ] || fail "cache disk attached: the mirror listens on $(jq -r .listen <<<"$cj"), want 127.0.0.1:5000: $cache_line"
	[ "$(jq -r .images <<<"$cj")" = 3 ] || fail "cache disk attached: the mirror serves $(jq -r .images <<<"$cj") images, want the fixture's 3: $cache_line"
	# The pre-unpacked store: the fixture's images are linux/amd64 and were
	# stored by cache build; the flipped bytes (in the layout's blob and in
	# the store's copy of one file) are read by no check at boot: dm-verity
	# fails their reads later, so podvm-cache-store hands the whole store
	# to image-rs.
	store_line=$(grep -m1 -o 'CAA-GCP-T4-STORE {.*}' <<<"$text") || fail "cache disk attached: no CAA-GCP-T4-STORE line on the console (podvm-cache-store did not run)"
	sj=${store_line#CAA-GCP-T4-STORE }
	[ "$(jq -r .state <<<"$sj")" = in-use ] || fail "cache disk attached: the pre-unpacked store is not in use: $store_line"
	[ "$(jq -r .images <<<"$sj")" = 3 ] || fail "cache disk attached: the store holds $(jq -r .images <<<"$sj") images, want the fixture's 3: $store_line"
	[ "$(jq -r .meta_store <<<"$sj")" = /run/kata-containers/image/meta_store.json ] || fail "cache disk attached: meta_store.json went to $(jq -r .meta_store <<<"$sj"), not image-rs's work_dir: $store_line"
	[ "$(grep -c 'CAA-GCP-T4-STORE {' <<<"$text")" -eq 1 ] || fail "cache disk attached: more than one CAA-GCP-T4-STORE line"
	good=$(jq -r .good "$cache/fixture.json")
	tampered=$(jq -r .tampered "$cache/fixture.json")
	tlayer=$(jq -r .tampered_layer "$cache/fixture.json")
	# The mirror's pull lines, from the stand-in's pulls in the guest (the
	# provider tells each container's route from them): the good image's
	# manifest and its layers were served, once each.
	for served in manifest layers; do
		[ "$(grep -c "CAA-GCP-T4-PULL {\"image\":\"${good#*@}\",\"served\":\"$served\"}" <<<"$text")" -eq 1 ] ||
			fail "cache disk attached: want one CAA-GCP-T4-PULL line saying the mirror served $served of ${good#*@}: $(grep -o 'CAA-GCP-T4-PULL {[^}]*}' <<<"$text" | tr '\n' ' ')"
	done
	# The model image came from the store alone: its manifest was served,
	# no layer of it (0 bytes of weights moved, from anywhere).
	model=$(jq -r .model "$cache/fixture.json")
	if [ "$(grep -c "CAA-GCP-T4-PULL {\"image\":\"${model#*@}\",\"served\":\"manifest\"}" <<<"$text")" -ne 1 ] ||
		[ "$(grep -c "CAA-GCP-T4-PULL {\"image\":\"${model#*@}\",\"served\":\"layers\"}" <<<"$text")" -ne 0 ]; then
		fail "cache disk attached: want the model image's manifest served once and none of its layers: $(grep -o 'CAA-GCP-T4-PULL {[^}]*}' <<<"$text" | tr '\n' ' ')"
	fi
	source=$(jq -r .source "$cache/fixture.json")
	cat >"$work/registries.conf" <<EOF
[[registry]]
prefix = "$source/cachetest"
location = "$source/cachetest"
insecure = true

[[registry.mirror]]
location = "127.0.0.1:$cache_port/cachetest"
insecure = true
EOF
	t0=$(date +%s.%N)
	skopeo --registries-conf "$work/registries.conf" copy -q "docker://$good" "dir:$work/pull-good" >"$work/pull-good.out" 2>&1 ||
		{ cat "$work/pull-good.out" >&2; fail "cache: skopeo could not pull $good through the podVM's mirror"; }
	t1=$(date +%s.%N)
	got=$(sha256sum "$work/pull-good/manifest.json" | cut -c1-64)
	[ "sha256:$got" = "${good#*@}" ] || fail "cache: the manifest pulled through the mirror has digest sha256:$got, want ${good#*@}"
	cmp -s "$work/pull-good/manifest.json" "$cache/layout/blobs/sha256/$got" || fail "cache: the manifest pulled differs from the layout's"
	nlayers=$(jq '.layers | length' "$work/pull-good/manifest.json")
	pulled=$(du -sb "$work/pull-good" | cut -f1)
	if skopeo --registries-conf "$work/registries.conf" copy -q "docker://$tampered" "dir:$work/pull-bad" >"$work/pull-bad.out" 2>&1; then
		fail "cache: skopeo pulled $tampered although its layer $tlayer was changed on the disk"
	fi
	# The disk is read through dm-verity: the changed block of layer
	# $tlayer fails its read in the guest (EIO), and the kernel says so on
	# the console, before any digest is compared.
	# (The console is read whole first: grep -m1 on a pipe would end it
	# early, and pipefail then fails a match found in a long console.)
	vtext=$(clean)
	vline=$(grep -m1 -oE 'device-mapper: verity: [^ ]+: data block [0-9]+ is corrupted' <<<"$vtext") ||
		{ cat "$work/pull-bad.out" >&2; fail "cache: the tampered image's pull failed, but the console has no dm-verity line for the disk's changed block (layer $tlayer)"; }
	cache_pull="cache disk (unchanged by the boot): skopeo pulled ${good##*/} ($nlayers layers, $pulled bytes) through the podVM's mirror by digest in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s, its source registry gone; refused ${tampered##*/}: dm-verity failed the read of its changed layer ${tlayer:0:19}… ($vline)"
	if [ -n "$results" ]; then mkdir -p "$results" && cp "$work/pull-bad.out" "$results/cache-tampered-pull.txt"; fi
fi

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
ptext=$(clean)
grep -q 'reboot: Power down' <<<"$ptext" || fail "no clean power-down on the console"
# The guest mounted the cache disk read-only with no journal replay: not
# one byte of it changed, although the disk itself was writable.
if [ -n "$cache" ] && [ "$(sha256sum "$cache/disk.raw" | cut -c1-64)" != "$cache_sum" ]; then
	fail "the cache disk changed during the boot: its mount wrote to it"
fi

# The state partition (the last; /var) must have grown to the end of the
# 4 GiB disk, and its ext4 filesystem with it (systemd-repart, then
# systemd-growfs); the root and its hash tree are as built.
qemu-img convert -O raw "$work/disk.qcow2" "$work/after.raw"
json=$(sfdisk -J "$work/after.raw")
read -r pstart psize < <(jq -r '.partitiontable.partitions[-1] | select(.type == "0FC63DAF-8483-4772-8E79-3D69D8477DE4") | "\(.start) \(.size)"' <<<"$json")
[ -n "${pstart:-}" ] || fail "the disk's last partition is not the state partition (linux-generic)"
pend=$(( (pstart + psize) * 512 ))
[ "$pend" -ge $((disk_bytes - 2 * 1024 * 1024)) ] || fail "state partition ends at $pend bytes, not grown to the ${disk_bytes}-byte disk"
dd if="$work/after.raw" of="$work/state.raw" bs=512 skip="$pstart" count="$psize" conv=sparse status=none
sb=$(dumpe2fs -h "$work/state.raw" 2>/dev/null)
blocks=$(awk -F': *' '/^Block count/ {print $2}' <<<"$sb")
bsize=$(awk -F': *' '/^Block size/ {print $2}' <<<"$sb")
fs_bytes=$((blocks * bsize))
[ "$fs_bytes" -ge $((psize * 512 - 64 * 1024 * 1024)) ] || fail "state filesystem is $fs_bytes bytes in a $((psize * 512))-byte partition: not grown"
read -r rstart _ < <(jq -r '.partitiontable.partitions[] | select(.type == "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709") | "\(.start) \(.size)"' <<<"$json")
read -r vstart vsize < <(jq -r '.partitiontable.partitions[] | select(.type == "2C7357ED-EBD2-46D9-AEC1-23D437EC2BF5") | "\(.start) \(.size)"' <<<"$json")
cmp -s -n $(((vstart + vsize - rstart) * 512)) -i "$((rstart * 512)):$((rstart * 512))" "$work/after.raw" "$dir/podvm.raw" ||
	fail "the root or its hash tree changed on the disk during the boot"
rm -f "$work/after.raw"

guest=""
if [ -n "$standins" ]; then
	guest=$(CHECK_GUEST_CACHE=$cache "$here/check-guest.sh" "$work/state.raw" "$slots" "$standins" "$((fs_bytes))" "$work/user-data.b64" "${PODVM_BOOT_REAL:-}" "$secure_boot" "$want_digest") || fail "peer-pod guest contract (above)"
fi
stop_vm

# A changed root block: block 0 of the root partition (the squashfs
# superblock, which the initrd reads to mount /sysroot) overwritten in a
# fresh overlay. dm-verity refuses it, sysroot.mount fails, and the initrd's
# emergency unit reports and powers off: no shell, no prompt, no pod.
qemu-img create -q -f qcow2 -b "$(realpath "$dir/podvm.raw")" -F raw "$work/tamper.qcow2" "$disk_bytes"
qemu-io -f qcow2 -c "write -P 0x5a $((rstart * 512)) 4096" "$work/tamper.qcow2" >/dev/null
tlog=$work/tamper.log
log=$tlog
tstart=$(date +%s)
start_vm "$work/tamper.qcow2" "$tlog"
while kill -0 "$qpid" 2>/dev/null; do
	if [ $(($(date +%s) - tstart)) -ge "$timeout" ]; then
		fail "tampered root: the VM did not power off within ${timeout}s"
	fi
	if [ -f "$tlog" ]; then
		ttext=$(tr -d '\r' <"$tlog" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g')
		# emergency.target ("Emergency Mode") is reached here by design; a
		# prompt is sulogin's or a getty's.
		if grep -Eiq 'login: *$|Please enter|Press .* to continue|Give root password|You are in (emergency|rescue) mode|Enter passphrase' <<<"$ttext"; then
			fail "tampered root: the boot stopped at a prompt"
		fi
	fi
	sleep 2
done
wait "$qpid" || true
qpid=""
tamper_s=$(($(date +%s) - tstart))
ttext=$(tr -d '\r' <"$tlog" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g')
grep -Eq 'device-mapper: verity: .*data block 0 is corrupted' <<<"$ttext" || fail "tampered root: dm-verity did not report data block 0 corrupted"
fl=$(grep -m1 -o 'CAA-GCP-T4-BOOT-FAILED {.*}' <<<"$ttext") || fail "tampered root: no CAA-GCP-T4-BOOT-FAILED line"
[ "$(jq -r .stage <<<"${fl#CAA-GCP-T4-BOOT-FAILED }")" = initrd ] || fail "tampered root: failed in stage $(jq -r .stage <<<"${fl#CAA-GCP-T4-BOOT-FAILED }"), want initrd: $fl"
! grep -q 'Reached target.*Multi-User System' <<<"$ttext" || fail "tampered root: the boot reached multi-user.target"
! grep -q 'CAA-GCP-T4-GPU {' <<<"$ttext" || fail "tampered root: the image's units ran"
grep -q 'reboot: Power down' <<<"$ttext" || fail "tampered root: no clean power-down"
# At once, on the verity error, not after waiting out the root device's
# timeout (initrd/mkosi.extra's udev rule marks the verity root ready).
! grep -Eq 'Timed out waiting for device.*(mapper/root|dev-mapper-root)|dev-mapper-root\.device: Job .* timed out' <<<"$ttext" ||
	fail "tampered root: the initrd waited out the root device's timeout instead of failing on the verity error"
log=$work/console.log

# boot_scenario NAME WHAT UNTIL: boots a copy of the image (with meta_extra
# as the caller set it) and polls its console every 2 s until the function
# UNTIL, given the cleaned console text, succeeds (it may fail the test
# itself); WHAT names the awaited event in failures. Leaves the console
# text in scenario_text and the seconds it took in scenario_s, the VM
# stopped and log pointing at its console.
boot_scenario() {
	local name=$1 what=$2 until=$3 start
	qemu-img create -q -f qcow2 -b "$(realpath "$dir/podvm.raw")" -F raw "$work/$name.qcow2" "$disk_bytes"
	log=$work/$name.log
	start=$(date +%s)
	start_vm "$work/$name.qcow2" "$log"
	while :; do
		kill -0 "$qpid" 2>/dev/null || fail "$name: QEMU exited before $what"
		[ $(($(date +%s) - start)) -lt "$timeout" ] || fail "$name: no $what within ${timeout}s"
		if [ -f "$log" ]; then
			scenario_text=$(clean)
			"$until" "$scenario_text" && break
		fi
		sleep 2
	done
	scenario_s=$(($(date +%s) - start))
	scenario_text=$(clean)
	stop_vm
}

# CDH that never listens (the stand-in, asked through a metadata attribute):
# kata-agent must not start, and the console must say why in one line.
cdh_line=""
if grep -qw confidential-data-hub <<<"$standins" && grep -qw kata-agent <<<"$standins"; then
	printf never-listen >"$work/cdh-mode"
	meta_extra="caa-gcp-t4-standin-cdh=$work/cdh-mode"
	# With a cache fixture, this boot also has the disk, given a root hash
	# that is not the disk's (one digit changed), as a provider configured
	# for another cache image would: the disk must not be opened, and the
	# console must say so; the mirror and the store must not run.
	attach_cache=""
	if [ -n "$cache" ]; then
		attach_cache=1
		jq -j '.verity | sub("^root=(?<a>.)"; "root=" + (if .a == "0" then "1" else "0" end))' "$cache/fixture.json" >"$work/wrong-verity"
		meta_extra+=" caa-gcp-t4-cache-verity=$work/wrong-verity"
		cdh_failed() { grep -q 'CAA-GCP-T4-CDH-FAILED {' <<<"$1" && grep -q 'CAA-GCP-T4-STORE {' <<<"$1"; }
	else
		cdh_failed() { grep -q 'CAA-GCP-T4-CDH-FAILED {' <<<"$1"; }
	fi
	boot_scenario nocdh "the CDH failure line (CAA-GCP-T4-CDH-FAILED)" cdh_failed
	nocdh_s=$scenario_s
	ntext=$scenario_text
	meta_extra=""
	attach_cache=""
	if [ -n "$cache" ]; then
		wrong_store=$(grep -m1 -o 'CAA-GCP-T4-STORE {.*}' <<<"$ntext")
		jq -e '.state == "unused" and .miss == "verity-refused"' <<<"${wrong_store#CAA-GCP-T4-STORE }" >/dev/null ||
			fail "no CDH, cache disk with another root hash: want the store unused (verity-refused), got: $wrong_store"
		! grep -q 'CAA-GCP-T4-CACHE {"state":"serving"' <<<"$ntext" || fail "no CDH, cache disk with another root hash: the mirror served the disk"
		! grep -q 'CAA-GCP-T4-PULL {' <<<"$ntext" || fail "no CDH, cache disk with another root hash: the mirror told a pull"
	fi
	grep -q 'CAA-GCP-T4-STANDIN {"name":"confidential-data-hub".*"mode":"never-listen"' <<<"$ntext" ||
		fail "no CDH: the CDH stand-in did not run in never-listen mode (metadata attribute not served?)"
	cdh_line=$(grep -m1 -o 'CAA-GCP-T4-CDH-FAILED {[^}]*}.*' <<<"$ntext")
	cj=$(grep -o '{[^}]*}' <<<"$cdh_line" | head -n 1)
	[ "$(jq -r .kata_agent <<<"$cj")" = inactive ] || fail "no CDH: kata-agent is '$(jq -r .kata_agent <<<"$cj")', want inactive: $cdh_line"
	jq -r .reason <<<"$cj" | grep -q 'did not listen within 60 s' || fail "no CDH: reason '$(jq -r .reason <<<"$cj")'"
	! grep -q 'CAA-GCP-T4-STANDIN {"name":"kata-agent"' <<<"$ntext" || fail "no CDH: kata-agent started without CDH's socket"
	[ "$(grep -c 'CAA-GCP-T4-CDH-FAILED {' <<<"$ntext")" -eq 1 ] || fail "no CDH: more than one failure line"
	if [ -n "$results" ]; then mkdir -p "$results" && printf '%s\n' "$ntext" >"$results/nocdh-console.log"; fi
	log=$work/console.log
fi

# process-user-data that leaves no initdata digest (the stand-in, asked
# through a metadata attribute), with the TPM there: measure-initdata must
# fail closed, and kata-agent must not start. CDH still listens (it is only
# ordered after process-user-data), so kata-agent.path does ask for the
# agent, and systemd's answer to that start, "Dependency failed for" the
# agent's unit (Requires=process-user-data.service), ends the wait: a boot
# that started the agent would print the stand-in's line instead. The path
# unit asks again when the agent's start fails; the second refusal ends the
# wait, and by then process-user-data must have run once only (its start
# limit): without it, each ask re-ran it, about once a second, for good.
digest_line=""
if grep -qw process-user-data <<<"$standins" && grep -qw kata-agent <<<"$standins"; then
	printf no-digest >"$work/pud-mode"
	meta_extra="caa-gcp-t4-standin-process-user-data=$work/pud-mode"
	# systemd's status lines on the console cut a unit's description to the
	# console's width ("kata…ontainers agent (caa-gcp-t4 slot)"); the journal
	# form names the unit. Either counts.
	dep_failed='Dependency failed for (kata-agent\.service - Kata Containers agent|Kata Containers agent|kata.*ontainers agent)'
	refused_twice() {
		! grep -q 'CAA-GCP-T4-STANDIN {"name":"kata-agent"' <<<"$1" || fail "no digest: kata-agent started although measure-initdata failed"
		[ "$(grep -Ec "$dep_failed" <<<"$1")" -ge 2 ]
	}
	boot_scenario nodigest "systemd's second refusal of kata-agent (Dependency failed)" refused_twice
	nodigest_s=$scenario_s
	dtext=$scenario_text
	meta_extra=""
	grep -q 'CAA-GCP-T4-STANDIN {"name":"process-user-data".*"mode":"no-digest"' <<<"$dtext" ||
		fail "no digest: the process-user-data stand-in did not run in no-digest mode (metadata attribute not served?)"
	digest_line=$(grep -m1 -o 'CAA-GCP-T4-INITDATA {.*}' <<<"$dtext") || fail "no digest: no CAA-GCP-T4-INITDATA line"
	dj=${digest_line#CAA-GCP-T4-INITDATA }
	[ "$(jq -r .state <<<"$dj")" = no-digest ] || fail "no digest: state '$(jq -r .state <<<"$dj")', want no-digest: $digest_line"
	[ "$(jq -r .kata_agent <<<"$dj")" = "not started" ] || fail "no digest: the line does not say kata-agent is not started: $digest_line"
	runs=$(grep -c 'CAA-GCP-T4-INITDATA {' <<<"$dtext")
	[ "$runs" -eq 1 ] || fail "no digest: process-user-data ran $runs times before systemd's second refusal of kata-agent, want once (its start limit: one run per boot)"
	grep -Eq 'Failed to start (process-user-data\.service - CAA process-user-data|process-us.*ocess-user-data|CAA process-user-data)' <<<"$dtext" || fail "no digest: process-user-data.service did not fail"
	! grep -q 'CAA-GCP-T4-STANDIN {"name":"kata-agent"' <<<"$dtext" || fail "no digest: kata-agent started although measure-initdata failed"
	! grep -Eq 'Started (kata-agent\.service - )?(Kata|kata).*ontainers agent' <<<"$dtext" || fail "no digest: systemd started kata-agent.service"
	if [ -n "$results" ]; then mkdir -p "$results" && printf '%s\n' "$dtext" >"$results/nodigest-console.log"; fi
	log=$work/console.log
fi

echo "boot-test: ok ($accel): $sb_state; readiness at ${gpu_at}s, multi-user at ${multi_at}s, boot done at ${ready_at}s; state grown to $((fs_bytes / 1024 / 1024)) MiB, root unchanged; clean power-off; a changed root block: verity refused it, boot-failed and powered off after ${tamper_s}s"
echo "  $gpu_line"
echo "  $init_line"
echo "  $slots"
echo "  $fl"
[ -z "$cdh_line" ] || echo "  CDH never listening: kata-agent not started, after ${nocdh_s}s: $cdh_line"
[ -z "$digest_line" ] || echo "  no initdata digest, TPM present: process-user-data failed, systemd refused kata-agent (Dependency failed), after ${nodigest_s}s: $digest_line"
[ -z "$guest" ] || echo "$guest"
[ -z "$cache_line" ] || { echo "  $cache_line"; echo "  $store_line"; echo "  $cache_pull"; }
if [ -n "$results" ]; then
	mkdir -p "$results"
	clean >"$results/console.log"
	tr -d '\r' <"$tlog" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g' >"$results/tampered-console.log"
	printf '{"accel":"%s","secure_boot":"%s","readiness_seconds":%s,"multi_user_seconds":%s,"boot_done_seconds":%s,"tampered_poweroff_seconds":%s}\n' "$accel" "$secure_boot" "$gpu_at" "$multi_at" "$ready_at" "$tamper_s" >"$results/boot-info.json"
	if [ -n "$standins" ]; then
		mkdir -p "$results/standin"
		debugfs -R "rdump /lib/caa-gcp-t4-standin $results/standin" "$work/state.raw" 2>/dev/null || true
	fi
	cp "$work/metadata.log" "$results/" 2>/dev/null || true
fi
