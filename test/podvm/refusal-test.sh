#!/usr/bin/env bash
# What a user meets before any image is built:
#   - `make podvm` on a fresh copy of the repository (podvm/binaries holding
#     only its README) exits non-zero naming kata-agent,
#     agent-protocol-forwarder, process-user-data and confidential-data-hub
#     and the command that provides them, and says which slots are optional;
#   - with some of the four staged, it names only the others;
#   - a stand-in in a production image, a binary whose sha256 does not match
#     SHA256SUMS, a file that is not one of the six slots, a binary without a
#     VERSIONS line: each refused with the file and the fix;
# and in every case before the host set-up, the build lock and mkosi: the
# commands those steps run first (apt-get, flock, mkosi) are shims on PATH
# that record a call, and none may be recorded; nothing is left in the
# cache (the staging tree is removed).
#   - gce-pack.sh refuses a test image, and one whose manifest has no kind.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "refusal-test: FAIL: $*" >&2; exit 1; }
n=0

mkdir -p "$work/shims"
for c in mkosi flock apt-get; do
	printf '#!/bin/sh\necho %s "$@" >>%s/calls\nexit 97\n' "$c" "$work" >"$work/shims/$c"
	chmod 0755 "$work/shims/$c"
done
# A fresh copy: the tracked files as they are in this tree, nothing else.
mkdir "$work/clone"
git ls-files -z | xargs -0 tar -cf - | tar -xf - -C "$work/clone"
[ "$(ls "$work/clone/podvm/binaries")" = README.md ] || fail "the copy's podvm/binaries holds $(ls "$work/clone/podvm/binaries")"

# refused NAME OUTPUT-FILE COMMAND...: the command must fail, with no shim
# called and no staging tree left behind.
refused() {
	local name=$1 outf=$2
	shift 2
	rm -f "$work/calls"
	if PATH=$work/shims:$PATH PODVM_CACHE=$work/cache-$name "$@" >"$outf" 2>&1; then
		fail "$name: accepted: $(cat "$outf")"
	fi
	[ ! -e "$work/calls" ] || fail "$name: got past the binaries check, ran: $(cat "$work/calls")"
	[ -z "$(find "$work/cache-$name" -mindepth 1 -maxdepth 1 2>/dev/null)" ] || fail "$name: left $(ls "$work/cache-$name") in the cache"
	n=$((n + 1))
}
has() { grep -qF -- "$2" "$1" || fail "$(basename "$1"): message lacks '$2': $(cat "$1")"; }

# 1. make podvm on the fresh copy.
refused fresh "$work/fresh.txt" make -s -C "$work/clone" podvm
for b in kata-agent agent-protocol-forwarder process-user-data confidential-data-hub; do
	grep -qE "^  $b: make podvm-binaries" "$work/fresh.txt" || fail "fresh: $b not named with its command: $(cat "$work/fresh.txt")"
done
has "$work/fresh.txt" "refusing to build a production image without kata-agent agent-protocol-forwarder process-user-data confidential-data-hub"
has "$work/fresh.txt" "CAA_SRC=<checkout> KATA_SRC=<checkout>"
has "$work/fresh.txt" "Optional, may stay empty: attestation-agent"
has "$work/fresh.txt" "api-server-rest"
has "$work/fresh.txt" "PODVM_IMAGE_KIND=test (make podvm-test-image)"

# Inputs as make podvm-binaries writes them.
bin() { # dir slot [version]
	mkdir -p "$1"
	printf '#!/bin/sh\necho %s\n' "$2" >"$1/$2"
	chmod 0755 "$1/$2"
	(cd "$1" && sha256sum "$2" >>SHA256SUMS)
	echo "$2 ${3:-v1.0} somewhere upstream" >>"$1/VERSIONS"
}
build() { env PODVM_BINARIES="$1" podvm/scripts/build.sh; }

# 2. Two of the four: only the other two are named.
bin "$work/half" kata-agent
bin "$work/half" confidential-data-hub
refused half "$work/half.txt" build "$work/half"
has "$work/half.txt" "without agent-protocol-forwarder process-user-data (in $work/half)"
if grep -qE '^  (kata-agent|confidential-data-hub):' "$work/half.txt"; then fail "half: names a staged binary: $(cat "$work/half.txt")"; fi

full() { for s in kata-agent agent-protocol-forwarder process-user-data confidential-data-hub; do bin "$1" "$s" "${2:-v1.0}"; done; }

# 3. A stand-in in a production image.
full "$work/standin" test-standin-0123
refused standin "$work/standin.txt" build "$work/standin"
has "$work/standin.txt" "$work/standin/VERSIONS says agent-protocol-forwarder is a test stand-in"
has "$work/standin.txt" "PODVM_IMAGE_KIND=test"

# 4. A checksum that does not match: the file, both sums, the fix.
full "$work/tampered"
echo tampered >>"$work/tampered/process-user-data"
refused tampered "$work/tampered.txt" build "$work/tampered"
has "$work/tampered.txt" "$work/tampered/process-user-data has sha256 $(sha256sum "$work/tampered/process-user-data" | cut -c1-64), $work/tampered/SHA256SUMS says"
has "$work/tampered.txt" "stage it again with make podvm-binaries"

# 5. A file that is not one of the six slots.
full "$work/unknown"
cp "$work/unknown/kata-agent" "$work/unknown/kata-agent.bak"
refused unknown "$work/unknown.txt" build "$work/unknown"
has "$work/unknown.txt" "$work/unknown/kata-agent.bak is not a guest binary slot"
has "$work/unknown.txt" "remove it, or rename it to the slot it fills"

# 6. A binary without its VERSIONS line.
full "$work/noversion"
sed -i '/^agent-protocol-forwarder /d' "$work/noversion/VERSIONS"
refused noversion "$work/noversion.txt" build "$work/noversion"
has "$work/noversion.txt" "agent-protocol-forwarder has no line in $work/noversion/VERSIONS: add 'agent-protocol-forwarder <version> <where it came from>'"

# 7. An unknown kind.
refused kind "$work/kind.txt" env PODVM_IMAGE_KIND=prod podvm/scripts/build.sh
has "$work/kind.txt" "PODVM_IMAGE_KIND=prod: want production (the default) or test"

# 8. gce-pack.sh takes only a production image.
for k in test none; do
	d=$work/img-$k
	mkdir -p "$d"
	truncate -s 1M "$d/podvm.raw"
	if [ "$k" = test ]; then
		echo '{"caa-gcp-t4": {"image_kind": "test", "secure_boot": {"signed": false}}}' >"$d/podvm.manifest"
	else
		echo '{"caa-gcp-t4": {"secure_boot": {"signed": false}}}' >"$d/podvm.manifest"
	fi
	if podvm/scripts/gce-pack.sh "$d" "$work/pack-$k" >"$work/pack-$k.txt" 2>&1; then fail "gce-pack took a $k image: $(cat "$work/pack-$k.txt")"; fi
	want=$k
	[ "$k" = none ] && want=unknown
	has "$work/pack-$k.txt" "gce-pack: $d is a $want image"
	[ ! -e "$work/pack-$k/podvm-gce.tar.gz" ] || fail "gce-pack wrote a tarball for a $k image"
	n=$((n + 1))
done
echo "refusal-test: ok ($n cases; $repo)"
