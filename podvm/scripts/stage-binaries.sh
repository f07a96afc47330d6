#!/usr/bin/env bash
# Stages the guest binaries into an mkosi extra tree, after checking them
# against the input directory's SHA256SUMS (sha256sum format) and finding a
# version for each in its VERSIONS file (lines "<slot> <version> <source>";
# make podvm-binaries writes both). Only the six slot names are accepted; a
# slot whose binary is absent stays empty and its unit is skipped at boot
# (ConditionPathExists=), which the slot report line says.
#   stage-binaries.sh <input dir> <tree dir>
# Writes <tree>/usr/local/bin/<slot> and, under <tree>/usr/lib/caa-gcp-t4/,
# guest-binaries.sha256 (read by the slot report) and guest-binaries.tsv
# ("<slot> <sha256> <version> <source>", folded into the image manifest).
# PODVM_IMAGE_KIND=production (the default) also refuses an input without
# the four programs a pod cannot run without (below); test lets any slot
# stay empty. Everything is checked before anything is written: a refused
# input leaves the tree as it was.
set -euo pipefail
in=$1
tree=$2
kind=${PODVM_IMAGE_KIND:-production}
# The guest components upstream CAA v0.22.0's podVM ships (podvm/Makefile.inc
# BINARIES at 38d0fcf7c7b7); the pause bundle comes from Debian (mkosi.postinst).
slots=(kata-agent agent-protocol-forwarder process-user-data attestation-agent confidential-data-hub api-server-rest)
# Without these a podVM runs no pod: CAA talks to the forwarder on :15150,
# the forwarder to kata-agent; process-user-data writes the forwarder's
# config and the agent's policy from user-data; kata-agent pulls images
# through CDH and panics on the first pull when CDH was not up at its start
# (kata 4.0.0 src/agent/src/confidential_data_hub/mod.rs).
required=(kata-agent agent-protocol-forwarder process-user-data confidential-data-hub)
fail() { echo "podvm: $*" >&2; exit 1; }
provides() {
	case "$1" in
	kata-agent) echo "make podvm-binaries (kata's agent artefact for the pin in podvm/guest-artefacts.pins)" ;;
	confidential-data-hub) echo "make podvm-binaries (guest-components' artefact for the pin in podvm/guest-artefacts.pins)" ;;
	agent-protocol-forwarder | process-user-data) echo "make podvm-binaries (built from upstream CAA v0.22.0's source; without network: make podvm-binaries CAA_SRC=<checkout> KATA_SRC=<checkout>)" ;;
	esac
}

present=()
if [ -d "$in" ]; then
	for f in "$in"/*; do
		[ -f "$f" ] || continue
		name=$(basename "$f")
		case "$name" in
		SHA256SUMS | VERSIONS | README.md) continue ;;
		esac
		ok=0
		for s in "${slots[@]}"; do [ "$s" = "$name" ] && ok=1; done
		[ "$ok" = 1 ] || fail "$in/$name is not a guest binary slot (${slots[*]}): remove it, or rename it to the slot it fills"
		present+=("$name")
	done
fi

if [ "$kind" != test ]; then
	missing=()
	for r in "${required[@]}"; do
		[ -f "$in/$r" ] || missing+=("$r")
	done
	if [ "${#missing[@]}" -gt 0 ]; then
		{
			echo "podvm: refusing to build a production image without ${missing[*]} (in $in): it would boot and run no pod."
			for m in "${missing[@]}"; do echo "  $m: $(provides "$m")"; done
			echo "  Optional, may stay empty: attestation-agent (this image's CDH starts without it; only KBS-backed"
			echo "  features, sealed secrets, kbs:// resources and encrypted images, need it) and api-server-rest (the"
			echo "  in-guest REST API for workloads on 127.0.0.1:8006; nothing on a pod's start path uses it)."
			echo "  A test image with stand-ins or empty slots: PODVM_IMAGE_KIND=test (make podvm-test-image); it is"
			echo "  marked as such in the image and gce-pack.sh refuses to upload it."
		} >&2
		exit 1
	fi
fi

if [ "${#present[@]}" -gt 0 ]; then
	[ -f "$in/SHA256SUMS" ] || fail "$in has binaries but no SHA256SUMS: run make podvm-binaries, or (cd $in && sha256sum ${present[*]} > SHA256SUMS) after checking them yourself"
	[ -f "$in/VERSIONS" ] || fail "$in has binaries but no VERSIONS: run make podvm-binaries, or write one line '<slot> <version> <where it came from>' per binary"
	while read -r want name; do
		name=${name#\*}
		[ -n "$name" ] || continue
		[ -f "$in/$name" ] || fail "$in/SHA256SUMS lists $name, but there is no $in/$name: restore the binary or remove its line"
	done <"$in/SHA256SUMS"
	for name in "${present[@]}"; do
		want=$(awk -v n="$name" '$2 == n || $2 == "*" n {print $1; exit}' "$in/SHA256SUMS")
		[[ "$want" =~ ^[0-9a-f]{64}$ ]] || fail "$name is not listed in $in/SHA256SUMS: run make podvm-binaries, or add '<sha256>  $name' after checking the binary"
		got=$(sha256sum "$in/$name" | cut -c1-64)
		[ "$got" = "$want" ] ||
			fail "$in/$name has sha256 $got, $in/SHA256SUMS says $want (checksum mismatch): it is not the binary the manifest names; stage it again with make podvm-binaries (or, for a binary you checked yourself, correct its SHA256SUMS line)"
		awk -v n="$name" '$1 == n && NF >= 3 {found=1} END {exit !found}' "$in/VERSIONS" ||
			fail "$name has no line in $in/VERSIONS: add '$name <version> <where it came from>' (the image manifest records every non-Debian binary's version; make podvm-binaries writes this file)"
		if [ "$kind" != test ] && awk -v n="$name" '$1 == n && /stand-in|test-standin/ {found=1} END {exit !found}' "$in/VERSIONS"; then
			fail "$in/VERSIONS says $name is a test stand-in: a production image takes only real guest binaries (make podvm-binaries), a stand-in only PODVM_IMAGE_KIND=test"
		fi
	done
fi

# Checked: now write.
mkdir -p "$tree/usr/local/bin" "$tree/usr/lib/caa-gcp-t4"
manifest=$tree/usr/lib/caa-gcp-t4/guest-binaries.sha256
record=$tree/usr/lib/caa-gcp-t4/guest-binaries.tsv
: >"$manifest"
: >"$record"
if [ "${#present[@]}" -eq 0 ]; then
	echo "podvm: test image: no guest binaries in $in: all six slots stay empty" >&2
	exit 0
fi
for name in "${present[@]}"; do
	install -m 0755 "$in/$name" "$tree/usr/local/bin/$name"
	sum=$(awk -v n="$name" '$2 == n || $2 == "*" n {print $1; exit}' "$in/SHA256SUMS")
	printf '%s  %s\n' "$sum" "$name" >>"$manifest"
	awk -v n="$name" -v s="$sum" '$1 == n {v=$2; $1=""; $2=""; sub(/^ +/, ""); printf "%s\t%s\t%s\t%s\n", n, s, v, $0; exit}' "$in/VERSIONS" >>"$record"
done
echo "podvm: staged guest binaries ($kind image): ${present[*]}" >&2
