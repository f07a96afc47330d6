#!/usr/bin/env bash
# Tests podvm/scripts/stage-binaries.sh: what it accepts, what it refuses,
# and what it writes into the guest-binaries tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
stage=podvm/scripts/stage-binaries.sh
# The staging mechanics, in the test kind (empty slots allowed); the
# production kind's refusals are test/podvm/refusal-test.sh's.
export PODVM_IMAGE_KIND=test
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0
expect_fail() { # name, input dir, message fragment
	local out
	if out=$("$stage" "$2" "$work/tree-$1" 2>&1); then
		echo "stage-binaries-test: $1: accepted, want a refusal mentioning '$3'" >&2
		exit 1
	fi
	grep -q -- "$3" <<<"$out" || { echo "stage-binaries-test: $1: message '$out' lacks '$3'" >&2; exit 1; }
	n=$((n + 1))
}
mk() { mkdir -p "$work/$1"; printf '#!/bin/sh\necho %s\n' "$2" >"$work/$1/$2"; echo "$2 v1.0 test" >>"$work/$1/VERSIONS"; }

# No input directory, or only the README: every slot stays empty.
"$stage" "$work/absent" "$work/tree-absent" 2>/dev/null
[ ! -s "$work/tree-absent/usr/lib/caa-gcp-t4/guest-binaries.sha256" ] || { echo "manifest not empty without input" >&2; exit 1; }
n=$((n + 1))

mk nosums kata-agent
expect_fail nosums "$work/nosums" "no SHA256SUMS"

mk unknown kata-agent
mk unknown sshd
expect_fail unknown "$work/unknown" "$work/unknown/sshd is not a guest binary slot"
[ ! -e "$work/tree-unknown" ] || { echo "stage-binaries-test: a refused input wrote $work/tree-unknown" >&2; exit 1; }

mk unlisted kata-agent
mk unlisted process-user-data
(cd "$work/unlisted" && sha256sum kata-agent >SHA256SUMS)
expect_fail unlisted "$work/unlisted" "process-user-data is not listed"

mk tampered kata-agent
(cd "$work/tampered" && sha256sum kata-agent >SHA256SUMS && echo tampered >>kata-agent)
expect_fail tampered "$work/tampered" "$work/tampered/kata-agent has sha256 $(sha256sum "$work/tampered/kata-agent" | cut -c1-64), $work/tampered/SHA256SUMS says"
[ ! -e "$work/tree-tampered" ] || { echo "stage-binaries-test: a refused input wrote $work/tree-tampered" >&2; exit 1; }

mk listed kata-agent
(cd "$work/listed" && sha256sum kata-agent >SHA256SUMS && echo "$(sha256sum kata-agent | cut -d' ' -f1)  process-user-data" >>SHA256SUMS)
expect_fail listed-absent "$work/listed" "SHA256SUMS lists process-user-data, but there is no $work/listed/process-user-data: restore the binary or remove its line"

# A binary without a version line: the image manifest must say what it is.
mk noversion kata-agent
mk noversion confidential-data-hub
(cd "$work/noversion" && sha256sum kata-agent confidential-data-hub >SHA256SUMS && sed -i '/^confidential-data-hub /d' VERSIONS)
expect_fail noversion "$work/noversion" "confidential-data-hub has no line in $work/noversion/VERSIONS"
[ ! -e "$work/tree-noversion" ] || { echo "stage-binaries-test: a refused input wrote $work/tree-noversion" >&2; exit 1; }

# The guest components upstream ships all have slots.
mk gc attestation-agent
mk gc confidential-data-hub
mk gc api-server-rest
(cd "$work/gc" && sha256sum attestation-agent confidential-data-hub api-server-rest >SHA256SUMS)
"$stage" "$work/gc" "$work/tree-gc" 2>/dev/null
[ "$(cut -f1 "$work/tree-gc/usr/lib/caa-gcp-t4/guest-binaries.tsv" | sort | tr '\n' ' ')" = "api-server-rest attestation-agent confidential-data-hub " ] ||
	{ echo "guest-components slots not staged: $(cat "$work/tree-gc/usr/lib/caa-gcp-t4/guest-binaries.tsv")" >&2; exit 1; }
n=$((n + 1))

mk good kata-agent
mk good agent-protocol-forwarder
(cd "$work/good" && sha256sum kata-agent agent-protocol-forwarder >SHA256SUMS)
"$stage" "$work/good" "$work/tree-good" 2>/dev/null
for b in kata-agent agent-protocol-forwarder; do
	[ -x "$work/tree-good/usr/local/bin/$b" ] || { echo "$b not staged executable" >&2; exit 1; }
done
[ ! -e "$work/tree-good/usr/local/bin/process-user-data" ] || { echo "absent slot filled" >&2; exit 1; }
diff <(sort "$work/good/SHA256SUMS") <(sort "$work/tree-good/usr/lib/caa-gcp-t4/guest-binaries.sha256") ||
	{ echo "image manifest differs from the input's SHA256SUMS" >&2; exit 1; }
# The record the image manifest is made from: slot, sha256, version, source.
want=$(printf 'agent-protocol-forwarder\t%s\tv1.0\ttest\nkata-agent\t%s\tv1.0\ttest' "$(sha256sum <"$work/good/agent-protocol-forwarder" | cut -c1-64)" "$(sha256sum <"$work/good/kata-agent" | cut -c1-64)")
[ "$(sort "$work/tree-good/usr/lib/caa-gcp-t4/guest-binaries.tsv")" = "$want" ] ||
	{ echo "guest-binaries.tsv is '$(cat "$work/tree-good/usr/lib/caa-gcp-t4/guest-binaries.tsv")', want '$want'" >&2; exit 1; }
n=$((n + 1))
# The production kind refuses what the test kind takes.
if PODVM_IMAGE_KIND=production "$stage" "$work/good" "$work/tree-prod" 2>"$work/prod.txt"; then
	echo "stage-binaries-test: production took an input without process-user-data and confidential-data-hub" >&2
	exit 1
fi
grep -q "without process-user-data confidential-data-hub" "$work/prod.txt" || { echo "stage-binaries-test: production: $(cat "$work/prod.txt")" >&2; exit 1; }
[ ! -e "$work/tree-prod" ] || { echo "stage-binaries-test: a refused production input wrote $work/tree-prod" >&2; exit 1; }
n=$((n + 1))
echo "stage-binaries-test: ok ($n cases)"
