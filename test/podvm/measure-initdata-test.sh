#!/usr/bin/env bash
# Tests podvm/mkosi.extra/usr/lib/caa-gcp-t4/measure-initdata on this
# machine, with tpm2_pcrextend and tpm2_pcrread shims on PATH and the
# digest file and TPM device at paths the test owns: a measured digest; no
# TPM (reported, exit 0, as upstream); a TPM that refuses the extend, and,
# with a TPM present, a digest that is missing, empty, not lower-case hex
# or of a length no algorithm gives (each exit 1: fail closed,
# process-user-data.service fails and kata-agent, which Requires= it, is not
# started); the same digests without a TPM (reported, exit 0).
set -euo pipefail
cd "$(dirname "$0")/../.."
script=podvm/mkosi.extra/usr/lib/caa-gcp-t4/measure-initdata
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "measure-initdata-test: FAIL: $*" >&2; exit 1; }
mkdir -p "$work/bin"
digest=$(printf 'initdata' | sha384sum | cut -c1-96)
printf '%s\n' "$digest" >"$work/digest"
: >"$work/tpmrm0"
cat >"$work/bin/tpm2_pcrextend" <<SH
#!/bin/sh
echo "\$*" >>$work/extend.calls
[ ! -e $work/refuse ] || { echo 'ERROR:esys:src/tss2-esys/api/Esys_PCR_Extend.c:339:Esys_PCR_Extend_Finish() Received TPM Error' >&2; exit 1; }
SH
cat >"$work/bin/tpm2_pcrread" <<SH
#!/bin/sh
out=\$3
printf '\\001%.0s' \$(seq 32) >"\$out"
SH
chmod 0755 "$work/bin"/*
run() { env PATH="$work/bin:$PATH" TMPDIR="$work" CAA_INITDATA_DIGEST="$work/digest" CAA_TPM_DEVICE="$1" sh "$script"; }
n=0

out=$(run "$work/tpmrm0") || fail "measured: exit $?: $out"
grep -q "^CAA-GCP-T4-INITDATA {\"state\":\"measured\",\"pcr\":8,\"bank\":\"sha256\",\"digest\":\"$digest\",\"pcr_sha256\":\"$(printf '01%.0s' $(seq 32))\"}$" <<<"$out" || fail "measured: $out"
[ "$(cat "$work/extend.calls")" = "8:sha256=${digest:0:64}" ] || fail "extended with $(cat "$work/extend.calls"), want the digest's first 32 bytes"
n=$((n + 1))

out=$(run "$work/absent") || fail "no TPM: exit $? (must be reported, not fatal): $out"
grep -q '"state":"no-tpm"' <<<"$out" || fail "no TPM: $out"
n=$((n + 1))

touch "$work/refuse"
if out=$(run "$work/tpmrm0"); then fail "a refused extend exited 0: $out"; fi
grep -q '"state":"failed".*"reason":"tpm2_pcrextend: ERROR:esys.*Received TPM Error.*"kata_agent":"not started"' <<<"$out" || fail "refused extend: $out"
rm "$work/refuse"
n=$((n + 1))

# Digests process-user-data could not have written (it writes 64, 96 or
# 128 lower-case hex digits): NAME|STATE|CONTENT ("-" = no file at all).
sha512=$(printf 'initdata' | sha512sum | cut -c1-128)
cases=(
	"missing|no-digest|-"
	"empty|no-digest|"
	"blank|no-digest| "
	"not hex|bad-digest|XYZ"
	"upper-case hex|bad-digest|$(tr a-f A-F <<<"$digest")"
	"hex with a prefix|bad-digest|sha384:$digest"
	"too short (sha1)|bad-digest|$(printf 'initdata' | sha1sum | cut -c1-40)"
	"one digit short|bad-digest|${digest:0:63}"
	"between lengths|bad-digest|${digest}0"
	"too long|bad-digest|${sha512}00"
)
: >"$work/extend.calls"
for c in "${cases[@]}"; do
	IFS='|' read -r name state content <<<"$c"
	if [ "$content" = - ]; then rm -f "$work/digest"; else printf '%s\n' "$content" >"$work/digest"; fi
	# With a TPM: fatal, nothing extended, and the line says the agent
	# does not start.
	if out=$(run "$work/tpmrm0"); then fail "$name digest with a TPM exited 0 (must fail closed): $out"; fi
	grep -q "^CAA-GCP-T4-INITDATA {\"state\":\"$state\",\"pcr\":8,\"reason\":\"[^\"]*\",\"kata_agent\":\"not started\"}$" <<<"$out" ||
		fail "$name digest with a TPM: want state $state and kata_agent not started: $out"
	[ ! -s "$work/extend.calls" ] || fail "$name digest: tpm2_pcrextend was called ($(cat "$work/extend.calls"))"
	# Without a TPM: reported, not fatal, as upstream.
	out=$(run "$work/absent") || fail "$name digest without a TPM: exit $? (must be reported, not fatal): $out"
	grep -q "^CAA-GCP-T4-INITDATA {\"state\":\"$state\",\"pcr\":8,\"reason\":\"[^\"]*no $work/absent either[^\"]*\"}$" <<<"$out" ||
		fail "$name digest without a TPM: want state $state, reported: $out"
	n=$((n + 1))
done
# The three lengths process-user-data writes are measured.
for d in "${digest:0:64}" "$digest" "$sha512"; do
	printf '%s\n' "$d" >"$work/digest"
	: >"$work/extend.calls"
	out=$(run "$work/tpmrm0") || fail "a ${#d}-digit digest: exit $?: $out"
	grep -q "\"state\":\"measured\".*\"digest\":\"$d\"" <<<"$out" || fail "a ${#d}-digit digest: $out"
	[ "$(cat "$work/extend.calls")" = "8:sha256=${d:0:64}" ] || fail "a ${#d}-digit digest extended with $(cat "$work/extend.calls")"
done
n=$((n + 1))

# The unit wiring that makes exit 1 fail closed.
grep -qx 'ExecStartPost=/usr/lib/caa-gcp-t4/measure-initdata' podvm/mkosi.extra/usr/lib/systemd/system/process-user-data.service || fail "process-user-data.service does not run it as ExecStartPost="
grep -qx 'Requires=process-user-data.service' podvm/mkosi.extra/usr/lib/systemd/system/kata-agent.service || fail "kata-agent.service does not Require process-user-data.service"
n=$((n + 1))
echo "measure-initdata-test: ok ($n cases)"
