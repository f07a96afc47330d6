#!/usr/bin/env bash
# make podvm-binaries: fills the guest-binary slots (podvm/binaries) from the
# artefacts upstream publishes for the pinned release (podvm/guest-artefacts.pins)
# and, for the pin file's "source" slots (agent-protocol-forwarder,
# process-user-data: upstream publishes no binaries of them for v0.22.0),
# by building them from upstream CAA's source at the pinned commit
# (podvm/scripts/build-caa-programs.sh; CAA_SRC/KATA_SRC name checkouts).
#
# For each pinned slot it
#   1. finds the artefact in a local OCI image layout under PODVM_ARTEFACTS
#      (one layout per repository), or, unless PODVM_OFFLINE=1, copies it
#      there from its registry with oras (built from the Go module proxy);
#   2. refuses it unless the layout's tag is the pinned tag (and its manifest
#      digest the pinned digest, where the pin names one), and verifies the
#      sha256 and size of every blob it reads against its descriptor;
#   3. unpacks the member (the binary) and stages it into PODVM_BINARIES with
#      its sha256 (SHA256SUMS) and provenance (VERSIONS: tag and
#      reference@digest), which the image build copies into the image
#      manifest.
# Offline, it says for each missing artefact what to fetch, with which
# command, and where to put it. A reference override that differs from the
# pin (PODVM_ARTEFACT_REF_<SLOT>=…) is refused.
#
# Environment:
#   PODVM_ARTEFACTS  OCI layouts (default ${XDG_CACHE_HOME:-~/.cache}/caa-gcp-t4/guest-artefacts)
#   PODVM_BINARIES   where to stage (default podvm/binaries)
#   PODVM_PINS       pin file (default podvm/guest-artefacts.pins)
#   PODVM_SLOTS      only these slots (default: every pinned slot)
#   PODVM_OFFLINE=1  never contact a registry
#   PODVM_RECORD_DIGESTS=1  write the digest of each artefact whose pin has
#                    none into the pin file (without it such an artefact is
#                    refused: a tag alone is trust on first use)
#   PODVM_FETCH_TIMEOUT  seconds per registry copy (default 600)
set -euo pipefail
cd "$(dirname "$0")/../.."
cache=${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4
layouts=${PODVM_ARTEFACTS:-$cache/guest-artefacts}
out=${PODVM_BINARIES:-podvm/binaries}
pins=${PODVM_PINS:-podvm/guest-artefacts.pins}
ORAS_VERSION=v1.3.6
fail() { echo "podvm-binaries: $*" >&2; exit 1; }
for t in jq sha256sum tar zstd xz; do command -v "$t" >/dev/null || fail "$t is missing: run podvm/scripts/setup-host.sh"; done
[ -f "$pins" ] || fail "no pin file $pins"

# blob LAYOUT DESCRIPTOR-JSON: the verified blob's path.
blob() {
	local d s hex p got size
	d=$(jq -r .digest <<<"$2")
	s=$(jq -r .size <<<"$2")
	[[ "$d" =~ ^sha256:[0-9a-f]{64}$ ]] || { echo "descriptor digest '$d' is not sha256" >&2; return 1; }
	hex=${d#sha256:}
	p=$1/blobs/sha256/$hex
	[ -f "$p" ] || { echo "blob $d is missing from $1" >&2; return 1; }
	got=$(sha256sum "$p" | cut -c1-64)
	[ "$got" = "$hex" ] || { echo "blob $d in $1 has sha256 $got: the layout is corrupt or was altered" >&2; return 1; }
	size=$(stat -c %s "$p")
	[ "$size" = "$s" ] || { echo "blob $d in $1 is $size bytes, its descriptor says $s" >&2; return 1; }
	echo "$p"
}

# untar BLOB MEDIATYPE-OR-NAME MEMBER DEST: extract one member, decompressing by type.
untar() {
	local dec=cat
	case "$2" in
	*zst*) dec="zstd -dc" ;;
	*.xz | *+xz) dec="xz -dc" ;;
	*gzip* | *.gz | *.tgz) dec="gzip -dc" ;;
	esac
	$dec <"$1" | tar -xO -f - "$3" >"$4" 2>/dev/null
}

oras_bin() {
	local d=$cache/oras-$ORAS_VERSION
	if [ ! -x "$d/oras" ]; then
		echo "podvm-binaries: building oras $ORAS_VERSION from the Go module proxy" >&2
		GOBIN="$d" GOWORK=off GOFLAGS=-trimpath CGO_ENABLED=0 go install "oras.land/oras/cmd/oras@$ORAS_VERSION" >&2 || return 1
	fi
	echo "$d/oras"
}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
missing=()
staged=()
sources=()
record=()
unpinned=()
while read -r slot ref kind title member digest; do
	case "$slot" in "" | \#*) continue ;; esac
	if [ -n "${PODVM_SLOTS:-}" ] && ! grep -qw -- "$slot" <<<"$PODVM_SLOTS"; then continue; fi
	if [ "$kind" = source ]; then
		# Built from upstream's source at the pinned commit, after the
		# pulled artefacts (build-caa-programs.sh).
		sources+=("$slot")
		continue
	fi
	var=PODVM_ARTEFACT_REF_$(tr 'a-z-' 'A-Z_' <<<"$slot")
	if [ -n "${!var:-}" ] && [ "${!var}" != "$ref" ]; then
		fail "$var=${!var} does not match the pin for $slot ($ref in $pins): the image takes only the pinned release's artefacts; change the pin, with its upstream source, to use another"
	fi
	repo=${ref%:*}
	tag=${ref##*:}
	layout=$layouts/$(tr '/:' '__' <<<"$repo")
	mdesc=""
	if [ -f "$layout/index.json" ]; then
		mdesc=$(jq -c --arg t "$tag" '[.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $t)][0] // empty' "$layout/index.json")
	fi
	if [ -z "$mdesc" ] && [ "${PODVM_OFFLINE:-0}" != 1 ]; then
		# Fetched into a directory of its own beside the layout and renamed
		# into place only once whole and tagged, so a copy that fails or is
		# cut off midway leaves nothing a later run takes for the cache.
		# Leftovers of a run killed outright are removed first.
		rm -rf "$layout".fetch.*
		tmp=""
		err=""
		if o=$(oras_bin) && mkdir -p "$layouts" && tmp=$(mktemp -d "$layout.fetch.XXXXXX") &&
			err=$(timeout "${PODVM_FETCH_TIMEOUT:-600}" "$o" copy --to-oci-layout "$ref" "$tmp:$tag" 2>&1) &&
			mdesc=$(jq -c --arg t "$tag" '[.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $t)][0] // empty' "$tmp/index.json") &&
			[ -n "$mdesc" ]; then
			rm -rf "$layout.old"
			if [ -e "$layout" ]; then mv "$layout" "$layout.old"; fi
			mv "$tmp" "$layout"
			rm -rf "$layout.old"
		else
			mdesc=""
			[ -z "$tmp" ] || rm -rf "$tmp"
			echo "podvm-binaries: could not fetch $ref: $(tail -n 1 <<<"${err:-oras unavailable}")" >&2
		fi
	fi
	if [ -z "$mdesc" ]; then
		if [ -e "$layout" ]; then
			have=$(jq -r '[.manifests[].annotations["org.opencontainers.image.ref.name"] // "(untagged)"] | join(", ")' "$layout/index.json" 2>/dev/null) || have=""
			if [ -z "$have" ] || [ "$have" = "(untagged)" ]; then
				fail "$layout is an incomplete fetch for $slot (no tagged manifest; an earlier copy was cut off): remove it with rm -rf '$layout' and run again"
			fi
			fail "$layout holds tags $have, not the pinned $tag for $slot: refusing it (remove it with rm -rf '$layout' and run again to fetch the pinned reference $ref)"
		fi
		missing+=("$slot|$ref|$layout|$tag")
		continue
	fi
	mdigest=$(jq -r .digest <<<"$mdesc")
	if [ "$digest" != - ] && [ "$mdigest" != "$digest" ]; then
		fail "$ref in $layout is $mdigest, the pin says $digest: refusing it"
	fi
	# A tag can be moved; a digest cannot. Without a digest in the pin the
	# artefact is refused (fail closed) unless PODVM_RECORD_DIGESTS=1 asks
	# to write the digest seen now into the pin file, to be reviewed and
	# committed like any pin change; every later run then checks it.
	if [ "$digest" = - ]; then
		if [ "${PODVM_RECORD_DIGESTS:-0}" = 1 ]; then
			record+=("$slot $mdigest")
		else
			unpinned+=("$slot $ref $mdigest")
			continue
		fi
	fi
	m=$(blob "$layout" "$mdesc") || fail "$slot: manifest of $ref unusable (above)"
	mt=$(jq -r '.mediaType // ""' "$m")
	if [[ "$mt" == *index* || "$mt" == *manifest.list* ]]; then
		sub=$(jq -c '[.manifests[] | select(.platform.os == "linux" and .platform.architecture == "amd64")][0] // empty' "$m")
		[ -n "$sub" ] || fail "$slot: $ref is an index without a linux/amd64 manifest"
		m=$(blob "$layout" "$sub") || fail "$slot: linux/amd64 manifest of $ref unusable (above)"
	fi
	jq -e '.layers | length > 0' "$m" >/dev/null || fail "$slot: $ref has no layers"
	dest=$stage/$slot
	case "$kind" in
	file)
		ldesc=$(jq -c --arg t "$title" '[.layers[] | select(.annotations["org.opencontainers.image.title"] == $t)][0] // empty' "$m")
		[ -n "$ldesc" ] || fail "$slot: $ref has no file $title (files: $(jq -r '[.layers[].annotations["org.opencontainers.image.title"]] | join(", ")' "$m"))"
		lb=$(blob "$layout" "$ldesc") || fail "$slot: $title in $ref unusable (above)"
		# kata's artefacts carry "<target>-sha256sum" for their tarball.
		sdesc=$(jq -c '[.layers[] | select(.annotations["org.opencontainers.image.title"] // "" | endswith("-sha256sum"))][0] // empty' "$m")
		if [ -n "$sdesc" ]; then
			sb=$(blob "$layout" "$sdesc") || fail "$slot: checksum file in $ref unusable (above)"
			want=$(awk -v t="$title" '$2 == t || $2 == "*" t || $2 ~ "/" t "$" {print $1}' "$sb")
			if [ -n "$want" ] && [ "$want" != "$(sha256sum "$lb" | cut -c1-64)" ]; then
				fail "$slot: $title does not match the sha256 its artefact's own checksum file gives"
			fi
		fi
		untar "$lb" "$title" "$member" "$dest" || fail "$slot: $title in $ref holds no $member"
		what=$title
		;;
	image)
		found=""
		while read -r ldesc; do
			lb=$(blob "$layout" "$ldesc") || fail "$slot: a layer of $ref unusable (above)"
			if untar "$lb" "$(jq -r .mediaType <<<"$ldesc")" "$member" "$dest.try"; then
				mv "$dest.try" "$dest"
				found=$(jq -r .digest <<<"$ldesc")
			fi
		done < <(jq -c '.layers[]' "$m")
		rm -f "$dest.try"
		[ -n "$found" ] || fail "$slot: no layer of $ref holds $member"
		what="layer $found"
		;;
	*) fail "$pins: $slot has kind '$kind', want file, image or source" ;;
	esac
	[ -s "$dest" ] || fail "$slot: $member from $ref is empty"
	chmod 0755 "$dest"
	printf '%s %s %s@%s (%s, %s)\n' "$slot" "$tag" "$repo" "$mdigest" "$what" "$member" >"$stage/$slot.version"
	staged+=("$slot")
done <"$pins"

if [ "${#unpinned[@]}" -gt 0 ]; then
	{
		echo "podvm-binaries: ${#unpinned[@]} artefact(s) have no digest in $pins, only a tag, which a registry can move: refusing them, nothing staged."
		for x in "${unpinned[@]}"; do
			read -r slot ref d <<<"$x"
			echo "  $slot: $ref is $d here"
		done
		echo "  Check each digest against upstream's record of the release (for kata-agent, the agent-sha256sum file kata-deploy pushes"
		echo "  beside the tarball), then record them: PODVM_RECORD_DIGESTS=1 make podvm-binaries writes them into $pins's digest"
		echo "  column; commit that change. Later runs refuse anything else."
	} >&2
	exit 1
fi
if [ "${#record[@]}" -gt 0 ]; then
	for x in "${record[@]}"; do
		read -r slot d <<<"$x"
		awk -v s="$slot" -v d="$d" '$1 == s && $NF == "-" && $3 != "source" {sub(/-[ \t]*$/, d)} {print}' "$pins" >"$stage/pins"
		cat "$stage/pins" >"$pins"
		echo "podvm-binaries: recorded $slot's digest $d in $pins (review and commit it)" >&2
	done
fi

if [ "${#staged[@]}" -gt 0 ]; then
	mkdir -p "$out"
	touch "$out/SHA256SUMS" "$out/VERSIONS"
	for s in "${staged[@]}"; do
		install -m 0755 "$stage/$s" "$out/$s"
		sum=$(sha256sum "$out/$s" | cut -c1-64)
		grep -v -E " [ *]?$s\$" "$out/SHA256SUMS" >"$stage/sums" || true
		printf '%s  %s\n' "$sum" "$s" >>"$stage/sums"
		mv "$stage/sums" "$out/SHA256SUMS"
		awk -v n="$s" '$1 != n' "$out/VERSIONS" >"$stage/versions"
		cat "$stage/$s.version" >>"$stage/versions"
		mv "$stage/versions" "$out/VERSIONS"
		echo "podvm-binaries: staged $s: $(cut -d' ' -f2- "$stage/$s.version"), sha256 $sum" >&2
	done
fi
if [ "${#sources[@]}" -gt 0 ]; then
	if ! PODVM_BINARIES=$out PODVM_PINS=$pins PODVM_SLOTS="${sources[*]}" podvm/scripts/build-caa-programs.sh; then
		echo "podvm-binaries: ${sources[*]} not built (above): they come from upstream CAA's source at the pinned commit; on a machine without network name checkouts: make podvm-binaries CAA_SRC=<cloud-api-adaptor checkout> KATA_SRC=<kata-containers checkout> (docs/podvm-build-guide.md#guest-binaries)" >&2
		exit 1
	fi
fi
if [ "${#missing[@]}" -gt 0 ]; then
	{
		echo "podvm-binaries: ${#missing[@]} pinned artefact(s) not available here (no registry reachable, or PODVM_OFFLINE=1):"
		for x in "${missing[@]}"; do
			IFS='|' read -r slot ref layout tag <<<"$x"
			echo "  $slot: on a machine that reaches the registry, run"
			echo "      oras copy --to-oci-layout $ref $(basename "$layout"):$tag"
			echo "    (oras $ORAS_VERSION: go install oras.land/oras/cmd/oras@$ORAS_VERSION), then copy the directory"
			echo "    $(basename "$layout")/ to $layouts/ here and run make podvm-binaries again (PODVM_OFFLINE=1 to stay offline)."
		done
		echo "  Or put a binary you built or checked yourself at $out/<slot>, with its line in $out/SHA256SUMS and"
		echo "  '<slot> <version> <source>' in $out/VERSIONS (docs/podvm-build-guide.md#guest-binaries)."
		echo "  Slots left empty are skipped at boot; the console's CAA-GCP-T4-SLOTS line says which."
	} >&2
	exit 1
fi
echo "podvm-binaries: ${#staged[@]} slot(s) staged into $out" >&2
