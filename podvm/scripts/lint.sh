#!/usr/bin/env bash
# Static checks of the podVM sources: shellcheck on every script;
# systemd-analyze verify on the units of the skeleton tree (against a scratch
# root holding stand-ins for the binaries the units name, so it runs without
# building the image); and the guest contract's static half: the forwarder's
# command line uses only flags upstream's forwarder defines, every unit that
# restarts cannot run into systemd's start limit, and the default agent
# policy has a rule for every request kata-agent asks it about.
set -euo pipefail
cd "$(dirname "$0")/../.."
podvm/scripts/setup-host.sh
scripts=(podvm/scripts/*.sh test/podvm/*.sh)
shellcheck -x "${scripts[@]}"
# Every guest script, by directory: a list by name had left measure-initdata
# and boot-failed out.
shellcheck -s sh podvm/mkosi.postinst podvm/mkosi.finalize podvm/mkosi.extra/usr/lib/caa-gcp-t4/* \
	podvm/initrd/mkosi.extra/usr/lib/caa-gcp-t4/*
(cd test/podvm/standin && GOWORK=off go vet ./...)
units_dir=podvm/mkosi.extra/usr/lib/systemd/system
fail() { echo "podvm lint: $*" >&2; exit 1; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cp -a podvm/mkosi.extra/. "$root/"
for b in bin/mkdir usr/bin/ip usr/bin/gpu-init usr/bin/podvm-notice usr/bin/podvm-cache-mirror usr/bin/podvm-cache-store usr/local/bin/kata-agent usr/local/bin/agent-protocol-forwarder \
	usr/local/bin/process-user-data usr/local/bin/attestation-agent usr/local/bin/confidential-data-hub usr/local/bin/api-server-rest \
	usr/sbin/veritysetup; do
	mkdir -p "$root/$(dirname "$b")"
	printf '#!/bin/sh\n' >"$root/$b"
	chmod +x "$root/$b"
done
# The template is verified through the instance the image enables.
ln -s 'netns@.service' "$root/usr/lib/systemd/system/netns@podns.service"
units=()
for u in "$units_dir"/*.service "$units_dir"/*.path "$units_dir"/*.mount "$units_dir"/*.socket; do
	case "$u" in *@.service) continue ;; esac
	units+=("$root/usr/lib/systemd/system/$(basename "$u")")
done
units+=("$root/usr/lib/systemd/system/netns@podns.service")
# Units the image's packages provide (nvidia-persistenced, networkd) are not
# in the scratch root; "not found" for them is expected, anything else fails.
out=$(SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no --recursive-errors=no --root="$root" "${units[@]}" 2>&1 || true)
bad=$(grep -v -E "Unit (nvidia-persistenced|systemd-[a-z-]+|network[a-z-]*|basic|sysinit|multi-user)\.[a-z]+ not found|^$" <<<"$out" || true)
if [ -n "$bad" ]; then
	echo "$out" >&2
	fail "systemd-analyze verify found problems in the podVM units"
fi

# The forwarder's flags: each one upstream v0.22.0 defines (value flags
# take the next word). $TLS_OPTIONS/$OPTIONS come from an optional
# environment file the image does not ship.
flags=test/podvm/fixtures/agent-protocol-forwarder-flags.txt
exec_line=$(sed -n 's/^ExecStart=//p' "$units_dir/agent-protocol-forwarder.service")
read -r -a words <<<"$exec_line"
[ "${words[0]}" = /usr/local/bin/agent-protocol-forwarder ] || fail "agent-protocol-forwarder.service runs ${words[0]}"
[ ! -e podvm/mkosi.extra/etc/default/agent-protocol-forwarder ] || fail "etc/default/agent-protocol-forwarder: the image must not set the forwarder's TLS_OPTIONS/OPTIONS (apf.json carries TLS)"
i=1
nflags=0
while [ "$i" -lt "${#words[@]}" ]; do
	w=${words[$i]}
	case "$w" in
	\$TLS_OPTIONS | \$OPTIONS) i=$((i + 1)); continue ;;
	-*) ;;
	*) fail "agent-protocol-forwarder.service: '$w' is not a flag" ;;
	esac
	f=${w#-}
	f=${f#-}
	f=${f%%=*}
	kind=$(awk -v f="$f" '$1 == f {print $2}' "$flags")
	[ -n "$kind" ] || fail "agent-protocol-forwarder.service passes -$f, which upstream's v0.22.0 forwarder does not define ($flags)"
	if [ "$kind" = value ] && [[ "$w" != *=* ]]; then i=$((i + 1)); fi
	i=$((i + 1))
	nflags=$((nflags + 1))
done

# Restarting units: systemd stops restarting a unit that starts more than
# StartLimitBurst times in StartLimitIntervalSec; 0 turns the limit off.
nrestart=0
for u in "$units_dir"/*.service; do
	if grep -qE '^Restart=(always|on-failure|on-abnormal|on-abort|on-watchdog)' "$u"; then
		grep -qx 'StartLimitIntervalSec=0' "$u" || fail "$(basename "$u") restarts but keeps systemd's start limit (add StartLimitIntervalSec=0 to [Unit])"
		grep -qE '^RestartSec=[1-9]' "$u" || fail "$(basename "$u") restarts without a RestartSec= of at least 1 s"
		nrestart=$((nrestart + 1))
	fi
done

# The default policy covers every request of kata-agent's service.
policy=podvm/mkosi.extra/etc/kata-opa/allow-all.rego
grep -qx 'package agent_policy' "$policy" || fail "$policy: kata-agent queries data.agent_policy"
nreq=0
while read -r req; do
	case "$req" in "" | \#*) continue ;; esac
	grep -qx "default $req := true" "$policy" || fail "$policy has no rule for $req (test/podvm/fixtures/kata-agent-requests.txt)"
	nreq=$((nreq + 1))
done <test/podvm/fixtures/kata-agent-requests.txt
[ "$(readlink podvm/mkosi.extra/etc/kata-opa/default-policy.rego)" = /run/peerpod/policy.rego ] || fail "etc/kata-opa/default-policy.rego must link to /run/peerpod/policy.rego (initdata replaces it)"

echo "podvm lint: shellcheck and systemd-analyze verify ok (${#scripts[@]} scripts, ${#units[@]} units); forwarder's $nflags flags within upstream v0.22.0's; $nrestart restarting units without a start limit; policy covers $nreq agent requests"
