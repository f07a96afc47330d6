#!/usr/bin/env bash
# Tests podvm/scripts/podvm-binaries.sh's unpack-verify-stage path on local
# OCI layouts this test builds, shaped as upstream publishes the pinned
# artefacts: kata's and guest-components' single-file artefacts are pushed
# with oras (as their CI does; oras from the Go module proxy), the
# podvm-binaries image is an image whose layer holds usr/local/bin/… (made
# with Debian's umoci). The references and tags are the real pins
# (podvm/guest-artefacts.pins); the binaries are small scripts. Checks that
# every slot is staged with its sha256 and provenance and that a tampered
# blob, a layout of another tag, a digest other than a pinned one, an
# overridden reference, a checksum file that disagrees and a missing member
# are refused, and what offline says.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
script=podvm/scripts/podvm-binaries.sh
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
# The forwarder and process-user-data are built from source (kind "source",
# test/podvm/build-caa-programs-test.sh); the artefact path's "image" kind
# (a podvm-binaries image, which v0.22.0 does not publish) is tested here on
# the pin file with those two lines as image pins of upstream's
# podvm-binaries reference.
pins=$work/pins
awk '$3 == "source" {printf "%-27s quay.io/confidential-containers/podvm-binaries-ubuntu-amd64:b8f75e94301bd8335f37c6835358f90e32ac12b60dbc5d165859ce7c62a36f4e image - usr/local/bin/%s -\n", $1, $1; next} {print}' podvm/guest-artefacts.pins >"$pins"
export PODVM_PINS=$pins
command -v umoci >/dev/null || { echo "podvm-binaries-test: umoci missing: run podvm/scripts/setup-host.sh" >&2; exit 1; }
cache=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4
ORAS_VERSION=$(sed -n 's/^ORAS_VERSION=//p' "$script")
oras=$cache/oras-$ORAS_VERSION/oras
if [ ! -x "$oras" ]; then
	GOBIN=$(dirname "$oras") GOWORK=off GOFLAGS=-trimpath CGO_ENABLED=0 go install "oras.land/oras/cmd/oras@$ORAS_VERSION"
fi
n=0
lay() { echo "$work/layouts/$(tr '/:' '__' <<<"${1%:*}")"; }
content() { printf '#!/bin/sh\necho %s stand-in\n' "$1"; }

# Single-file artefacts, as `oras push <ref> <file>` makes them.
while read -r slot ref kind title member _; do
	case "$slot" in "" | \#*) continue ;; esac
	d=$work/src/$slot
	mkdir -p "$d/tree/$(dirname "$member")"
	content "$slot" >"$d/tree/$member"
	chmod 0755 "$d/tree/$member"
	if [ "$kind" = file ]; then
		case "$title" in
		*.tar.zst) (cd "$d/tree" && tar -cf - "$member" | zstd -q) >"$d/$title" ;;
		*.tar.xz) (cd "$d/tree" && tar -cf - "$member" | xz) >"$d/$title" ;;
		esac
		files=("$title")
		if [ "$slot" = kata-agent ]; then
			# kata-deploy-binaries.sh pushes agent-sha256sum beside the tarball.
			(cd "$d" && sha256sum "$title" >agent-sha256sum && echo v4.0.0 >agent-version)
			files+=(agent-sha256sum agent-version)
		fi
		(cd "$d" && "$oras" push --no-tty --oci-layout "$(lay "$ref"):${ref##*:}" "${files[@]}" >/dev/null)
	fi
done <"$pins"

# The podvm-binaries image (both Go programs in one layer), with umoci.
img=$(awk '!/^#/ && $3 == "image" {print $2; exit}' "$pins")
L=$(lay "$img")
umoci init --layout "$L"
umoci new --image "$L:${img##*:}"
umoci unpack --rootless --image "$L:${img##*:}" "$work/bundle" >/dev/null
mkdir -p "$work/bundle/rootfs/usr/local/bin"
for s in agent-protocol-forwarder process-user-data; do
	content "$s" >"$work/bundle/rootfs/usr/local/bin/$s"
	chmod 0755 "$work/bundle/rootfs/usr/local/bin/$s"
done
umoci repack --image "$L:${img##*:}" "$work/bundle" >/dev/null
cp -a "$work/layouts" "$work/pristine"

run() { PODVM_OFFLINE=1 PODVM_ARTEFACTS="$work/layouts" PODVM_BINARIES="$work/out" "$script"; }
refused() { # name, fragment, [env assignments…]
	local name=$1 want=$2 out
	shift 2
	if out=$(env "$@" PODVM_OFFLINE=1 PODVM_ARTEFACTS="$work/layouts" PODVM_BINARIES="$work/out-$name" "$script" 2>&1); then
		echo "podvm-binaries-test: $name: accepted, want a refusal mentioning '$want'" >&2
		exit 1
	fi
	grep -q -- "$want" <<<"$out" || { echo "podvm-binaries-test: $name: '$out' lacks '$want'" >&2; exit 1; }
	[ ! -e "$work/out-$name" ] || [ -z "$(ls -A "$work/out-$name")" ] || { echo "podvm-binaries-test: $name: staged something despite refusing" >&2; exit 1; }
	n=$((n + 1))
}
reset() { rm -rf "$work/layouts" && cp -a "$work/pristine" "$work/layouts"; }

# The pins name tags only: refused, nothing staged, each digest shown.
refused unpinned "have no digest in $pins, only a tag"
# PODVM_RECORD_DIGESTS=1 writes the digests seen into the pin file; from
# then on they are checked.
PODVM_RECORD_DIGESTS=1 run 2>"$work/log" || { cat "$work/log" >&2; exit 1; }
while read -r slot ref kind _ _ digest; do
	case "$slot" in "" | \#*) continue ;; esac
	want=$(jq -r --arg t "${ref##*:}" '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $t) | .digest' "$(lay "$ref")/index.json")
	[ "$digest" = "$want" ] || { echo "podvm-binaries-test: $slot's recorded digest is '$digest', the layout's $want" >&2; exit 1; }
done <"$pins"
n=$((n + 1))
rm -rf "$work/out"

# Every slot staged, with sha256 and provenance, and accepted by the build's staging.
run 2>"$work/log" || { cat "$work/log" >&2; exit 1; }
for s in kata-agent agent-protocol-forwarder process-user-data attestation-agent confidential-data-hub api-server-rest; do
	[ "$(cat "$work/out/$s")" = "$(content "$s")" ] || { echo "podvm-binaries-test: $s staged wrong content" >&2; exit 1; }
	ref=$(awk -v s="$s" '$1 == s {print $2}' "$pins")
	awk -v s="$s" -v t="${ref##*:}" -v r="${ref%:*}@sha256:" '$1 == s && $2 == t && index($3, r) == 1 {ok=1} END {exit !ok}' "$work/out/VERSIONS" ||
		{ echo "podvm-binaries-test: VERSIONS lacks '$s ${ref##*:} ${ref%:*}@sha256:…':" >&2; cat "$work/out/VERSIONS" >&2; exit 1; }
done
(cd "$work/out" && sha256sum --check --strict --quiet SHA256SUMS)
env PODVM_IMAGE_KIND=test podvm/scripts/stage-binaries.sh "$work/out" "$work/tree" 2>/dev/null
[ "$(wc -l <"$work/tree/usr/lib/caa-gcp-t4/guest-binaries.tsv")" = 6 ] || { echo "podvm-binaries-test: the build staged not six slots" >&2; exit 1; }
n=$((n + 1))
# Run again: idempotent, one line per slot.
run 2>/dev/null
if [ "$(wc -l <"$work/out/SHA256SUMS")" != 6 ] || [ "$(wc -l <"$work/out/VERSIONS")" != 6 ]; then
	echo "podvm-binaries-test: a second run duplicated lines" >&2
	exit 1
fi
n=$((n + 1))

# A blob altered after the fetch.
kl=$(lay "$(awk '$1 == "kata-agent" {print $2}' "$pins")")
big=$(find "$kl/blobs/sha256" -type f -printf '%s %p\n' | sort -n | tail -n 1 | cut -d' ' -f2)
printf 'x' >>"$big"
refused tampered "has sha256"
reset

# A layout holding another tag than the pinned one.
sed -i 's/cf82bb35c80320178bf7570252fe75d6fb263209-x86_64/latest-main-x86_64/' "$kl/index.json"
refused other-tag "not the pinned cf82bb35c80320178bf7570252fe75d6fb263209-x86_64"
reset

# A pin with a digest the layout's manifest does not have.
awk '$1 == "kata-agent" {$6 = "sha256:" sprintf("%064d", 0)} {print}' "$pins" >"$work/pins-digest"
refused digest-pin "the pin says sha256:0000" PODVM_PINS="$work/pins-digest"

# A reference that is not the pin.
refused override "does not match the pin" PODVM_ARTEFACT_REF_KATA_AGENT=ghcr.io/kata-containers/cached-artefacts/agent:latest-main-x86_64

# The artefact's own checksum file disagrees with its tarball: re-push with a wrong one.
d=$work/src/kata-agent
echo "$(printf '%064d' 1)  kata-static-agent.tar.zst" >"$d/agent-sha256sum"
rm -rf "$kl"
(cd "$d" && "$oras" push --no-tty --oci-layout "$kl:cf82bb35c80320178bf7570252fe75d6fb263209-x86_64" kata-static-agent.tar.zst agent-sha256sum >/dev/null)
awk '$1 == "kata-agent" {$6 = "-"} {print}' "$pins" >"$work/pins-nodigest"
refused checksum-file "own checksum file" PODVM_PINS="$work/pins-nodigest" PODVM_RECORD_DIGESTS=1
reset

# The member is not in the artefact (a pin naming the wrong path).
sed 's|\./usr/bin/kata-agent |./usr/bin/agent |' "$pins" >"$work/pins-member"
refused member "holds no ./usr/bin/agent" PODVM_PINS="$work/pins-member"

# Offline without one layout: the others are staged, and the message says
# what to fetch, how, and where to put it; the exit status is a failure.
rm -rf "$kl"
if out=$(PODVM_OFFLINE=1 PODVM_ARTEFACTS="$work/layouts" PODVM_BINARIES="$work/out-offline" "$script" 2>&1); then
	echo "podvm-binaries-test: offline with a layout missing: succeeded" >&2
	exit 1
fi
for want in "oras copy --to-oci-layout ghcr.io/kata-containers/cached-artefacts/agent:cf82bb35c80320178bf7570252fe75d6fb263209-x86_64" "to $work/layouts/ here"; do
	grep -qF -- "$want" <<<"$out" || { echo "podvm-binaries-test: offline message lacks '$want': $out" >&2; exit 1; }
done
if [ -e "$work/out-offline/kata-agent" ] || [ ! -x "$work/out-offline/confidential-data-hub" ]; then
	echo "podvm-binaries-test: offline staged the wrong slots: $(ls "$work/out-offline")" >&2
	exit 1
fi
n=$((n + 1))

# A fetch cut off midway: a stand-in registry on loopback (oras speaks
# plain HTTP to localhost) sends half of the layer and closes the
# connection. The run fails, naming the reference, and leaves nothing
# under the cache, so a later offline run says what to fetch instead of
# refusing a broken layout; a broken layout an older run left is refused
# with the command that clears it.
python3 test/podvm/dropping-registry.py "$work/registry.port" &
registry=$!
# The stand-in is killed below once the cases are done; by the time this
# trap runs bash may have reaped it, and kill then fails, which under
# set -e would end the script with 1 after it said ok.
trap 'kill "$registry" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
for _ in $(seq 100); do [ -s "$work/registry.port" ] && break; sleep 0.1; done
[ -s "$work/registry.port" ] || { echo "podvm-binaries-test: the stand-in registry did not start" >&2; exit 1; }
dref=localhost:$(cat "$work/registry.port")/kata-containers/cached-artefacts/agent:cf82bb35c80320178bf7570252fe75d6fb263209-x86_64
awk -v r="$dref" '$1 == "kata-agent" {$2 = r; print}' "$pins" >"$work/pins-drop"
dl=$work/drop-layouts
if out=$(PODVM_PINS="$work/pins-drop" PODVM_ARTEFACTS="$dl" PODVM_BINARIES="$work/out-drop" "$script" 2>&1); then
	echo "podvm-binaries-test: a fetch cut off midway succeeded: $out" >&2
	exit 1
fi
grep -qF "could not fetch $dref" <<<"$out" || { echo "podvm-binaries-test: cut-off fetch: '$out' lacks 'could not fetch $dref'" >&2; exit 1; }
[ -z "$(ls -A "$dl" 2>/dev/null)" ] || { echo "podvm-binaries-test: a fetch cut off midway left $(ls -A "$dl") in the cache" >&2; exit 1; }
out=$(PODVM_OFFLINE=1 PODVM_PINS="$work/pins-drop" PODVM_ARTEFACTS="$dl" PODVM_BINARIES="$work/out-drop" "$script" 2>&1) && { echo "podvm-binaries-test: offline after a cut-off fetch succeeded" >&2; exit 1; }
grep -qF "oras copy --to-oci-layout $dref" <<<"$out" || { echo "podvm-binaries-test: offline after a cut-off fetch: '$out' does not say what to fetch" >&2; exit 1; }
bl=$dl/$(tr '/:' '__' <<<"${dref%:*}")
mkdir -p "$bl" && echo '{"imageLayoutVersion":"1.0.0"}' >"$bl/oci-layout" && echo '{"schemaVersion":2,"manifests":[]}' >"$bl/index.json"
out=$(PODVM_OFFLINE=1 PODVM_PINS="$work/pins-drop" PODVM_ARTEFACTS="$dl" PODVM_BINARIES="$work/out-drop" "$script" 2>&1) && { echo "podvm-binaries-test: a broken layout was accepted" >&2; exit 1; }
if ! grep -qF "is an incomplete fetch for kata-agent" <<<"$out" || ! grep -qF "rm -rf '$bl'" <<<"$out"; then
	echo "podvm-binaries-test: broken layout: '$out' does not name the command that clears it" >&2
	exit 1
fi
kill "$registry"
wait "$registry" 2>/dev/null || true
n=$((n + 1))
echo "podvm-binaries-test: ok ($n cases; layouts from oras $ORAS_VERSION and umoci, refs from $pins)"
cd "$repo"
