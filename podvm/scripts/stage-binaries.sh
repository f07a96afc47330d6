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
set -euo pipefail
in=$1
tree=$2
# The guest components upstream CAA v0.22.0's podVM ships (podvm/Makefile.inc
# BINARIES at 38d0fcf7c7b7); the pause bundle comes from Debian (mkosi.postinst).
slots=(kata-agent agent-protocol-forwarder process-user-data attestation-agent confidential-data-hub api-server-rest)
mkdir -p "$tree/usr/local/bin" "$tree/usr/lib/caa-gcp-t4"
manifest=$tree/usr/lib/caa-gcp-t4/guest-binaries.sha256
record=$tree/usr/lib/caa-gcp-t4/guest-binaries.tsv
: >"$manifest"
: >"$record"
if [ ! -d "$in" ]; then
	echo "podvm: no guest binaries input at $in: all six slots stay empty" >&2
	exit 0
fi
present=()
for f in "$in"/*; do
	[ -f "$f" ] || continue
	name=$(basename "$f")
	case "$name" in
	SHA256SUMS | VERSIONS | README.md) continue ;;
	esac
	ok=0
	for s in "${slots[@]}"; do [ "$s" = "$name" ] && ok=1; done
	if [ "$ok" = 0 ]; then
		echo "podvm: $in/$name is not a guest binary slot (${slots[*]}): remove or rename it" >&2
		exit 1
	fi
	present+=("$name")
done
if [ "${#present[@]}" -eq 0 ]; then
	echo "podvm: no guest binaries in $in: all six slots stay empty" >&2
	exit 0
fi
if [ ! -f "$in/SHA256SUMS" ]; then
	echo "podvm: $in has binaries but no SHA256SUMS: run (cd $in && sha256sum ${present[*]} > SHA256SUMS) after checking them" >&2
	exit 1
fi
for name in "${present[@]}"; do
	if ! grep -Eq "^[0-9a-f]{64} [ *]$name\$" "$in/SHA256SUMS"; then
		echo "podvm: $name is not listed in $in/SHA256SUMS" >&2
		exit 1
	fi
	if ! awk -v n="$name" '$1 == n && NF >= 3 {found=1} END {exit !found}' "$in/VERSIONS" 2>/dev/null; then
		echo "podvm: $name has no line in $in/VERSIONS: add '$name <version> <where it came from>' (the image manifest records every non-Debian binary's version; make podvm-binaries writes this file)" >&2
		exit 1
	fi
done
(cd "$in" && sha256sum --check --strict --quiet SHA256SUMS) || {
	echo "podvm: checksum mismatch in $in (see above): the binaries are not the ones the manifest names" >&2
	exit 1
}
for name in "${present[@]}"; do
	install -m 0755 "$in/$name" "$tree/usr/local/bin/$name"
	sum=$(grep -E " [ *]$name\$" "$in/SHA256SUMS" | cut -c1-64)
	printf '%s  %s\n' "$sum" "$name" >>"$manifest"
	awk -v n="$name" -v s="$sum" '$1 == n {v=$2; $1=""; $2=""; sub(/^ +/, ""); printf "%s\t%s\t%s\t%s\n", n, s, v, $0; exit}' "$in/VERSIONS" >>"$record"
done
echo "podvm: staged guest binaries: ${present[*]}" >&2
