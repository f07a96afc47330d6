#!/usr/bin/env bash
# Stages the CAA/kata guest binaries into an mkosi extra tree, after checking
# them against the input directory's SHA256SUMS (sha256sum format). Only the
# known slot names are accepted; a slot whose binary is absent stays empty
# and its unit is skipped at boot (ConditionPathExists).
#   stage-binaries.sh <input dir> <tree dir>
set -euo pipefail
in=$1
tree=$2
slots=(kata-agent agent-protocol-forwarder process-user-data)
mkdir -p "$tree/usr/local/bin" "$tree/usr/lib/caa-gcp-t4"
manifest=$tree/usr/lib/caa-gcp-t4/guest-binaries.sha256
: >"$manifest"
if [ ! -d "$in" ]; then
	echo "podvm: no guest binaries input at $in: all agent slots stay empty" >&2
	exit 0
fi
present=()
for f in "$in"/*; do
	[ -f "$f" ] || continue
	name=$(basename "$f")
	case "$name" in
	SHA256SUMS | README.md) continue ;;
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
	echo "podvm: no guest binaries in $in: all agent slots stay empty" >&2
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
done
(cd "$in" && sha256sum --check --strict --quiet SHA256SUMS) || {
	echo "podvm: checksum mismatch in $in (see above): the binaries are not the ones the manifest names" >&2
	exit 1
}
for name in "${present[@]}"; do
	install -m 0755 "$in/$name" "$tree/usr/local/bin/$name"
	grep -E " [ *]$name\$" "$in/SHA256SUMS" | sed 's/ \*/  /' >>"$manifest"
done
echo "podvm: staged guest binaries: ${present[*]}" >&2
