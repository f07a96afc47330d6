#!/usr/bin/env bash
# The peer-pod guest contract, checked after a boot of an image whose slots
# hold test/podvm/standin, from the records the stand-ins wrote to
# /var/lib/caa-gcp-t4-standin on the root filesystem (read with debugfs
# after the VM powered off). Called by boot-test.sh; prints one summary line.
#   check-guest.sh <root fs image> <slots line> <stand-in slots> <root fs bytes> <served user-data> [real slots]
# Real slots hold upstream's binaries (a manual run against the real
# neighbour): their units are checked, their records do not exist.
set -euo pipefail
root=$1
slots_line=$2
standins=$3
fs_bytes=$4
served=$5
real=${6:-}
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "check-guest: FAIL: $*" >&2; exit 1; }
rec() { debugfs -R "cat /var/lib/caa-gcp-t4-standin/$1.json" "$root" 2>/dev/null; }
has() { grep -qw -- "$1" <<<"$standins"; }
filled() { has "$1" || grep -qw -- "$1" <<<"$real"; }

slots=$(jq -c . <<<"${slots_line#CAA-GCP-T4-SLOTS }") || fail "slot line is not JSON: $slots_line"
report=$(rec report) || true
if [ -z "$report" ] || ! jq -e . <<<"$report" >/dev/null; then
	fail "no stand-in report (the kata-agent stand-in writes it once the boot is over)"
fi
unit() { jq -r --arg u "$1" --arg p "$2" '.units[$u][$p] // ""' <<<"$report"; }
n=0

# Every slot: a stand-in's is "ok", the others "missing" and their units
# skipped by their condition, holding nothing up.
for s in kata-agent agent-protocol-forwarder process-user-data attestation-agent confidential-data-hub api-server-rest; do
	state=$(jq -r --arg s "$s" '.[$s]' <<<"$slots")
	u=$s.service
	if filled "$s"; then
		[ "$state" = ok ] || fail "slot $s is '$state', want ok"
		[ "$(unit "$u" ActiveState)" = active ] || fail "$u is '$(unit "$u" ActiveState)/$(unit "$u" SubState)', want active"
		[ "$(unit "$u" NRestarts)" = 0 ] || fail "$u restarted $(unit "$u" NRestarts) times"
	else
		[ "$state" = missing ] || fail "slot $s is '$state', want missing (no binary staged)"
		if [ "$s" = agent-protocol-forwarder ]; then u="agent-protocol-forwarder.path"; fi
		[ "$(unit "$u" ConditionResult)" = no ] || fail "$u ran its condition as '$(unit "$u" ConditionResult)', want no (skipped, empty slot)"
	fi
	n=$((n + 1))
done
[ "$(jq -r '."pause-bundle"' <<<"$slots")" = ok ] || fail "pause bundle is not ok in $slots_line"

# The pod network namespace exists and the forwarder opened it.
jq -e '.run_netns | index("podns")' <<<"$report" >/dev/null || fail "/run/netns holds $(jq -c .run_netns <<<"$report"), no podns"
[ "$(unit netns@podns.service ActiveState)" = active ] || fail "netns@podns.service is not active"
n=$((n + 1))

# /run/kata-containers: the root disk's ext4 (magic 0xef53), with the room
# the grown disk gives, not a tmpfs (0x1021994).
agent=$(rec kata-agent)
fstype=$(jq -r '.found.kata_containers_fs_type' <<<"$agent")
fsz=$(jq -r '.found.kata_containers_bytes' <<<"$agent")
[ "$fstype" = 0xef53 ] || fail "/run/kata-containers has file system type $fstype, want ext4 (0xef53; 0x1021994 is tmpfs)"
[ "$fsz" -ge $((fs_bytes * 9 / 10)) ] || fail "/run/kata-containers has $fsz bytes, the root file system $fs_bytes"
jq -r '.kata_containers_mount' <<<"$report" | grep -q ' /var/lib/kata-containers /run/kata-containers ' ||
	fail "/run/kata-containers is not the bind mount of /var/lib/kata-containers: $(jq -r .kata_containers_mount <<<"$report")"
[ "$(jq -r .found.pause_bundle <<<"$agent")" = true ] || fail "kata-agent found no /pause_bundle/config.json"
# The default policy, or initdata's when the user-data carries initdata
# (process-user-data writes its policy.rego over the default).
allow_all=$(sha256sum <"$here/../../podvm/mkosi.extra/etc/kata-opa/allow-all.rego" | cut -c1-64)
got_policy=$(jq -r .found.policy_sha256 <<<"$agent")
if base64 -d "$served" | grep -q 'path: /run/peerpod/initdata'; then
	[ "$got_policy" != "$allow_all" ] || fail "kata-agent read allow-all.rego although the user-data's initdata carries a policy"
else
	[ "$got_policy" = "$allow_all" ] || fail "kata-agent read a default policy other than allow-all.rego (no initdata policy was given)"
fi
[ "$(jq -c .argv <<<"$agent")" = '["--config","/etc/agent-config.toml"]' ] || fail "kata-agent argv $(jq -c .argv <<<"$agent")"
n=$((n + 1))

# Order: process-user-data done → CDH listening → kata-agent → forwarder.
ts() { unit "$1" "$2"; }
pud_done=$(ts process-user-data.service ActiveEnterTimestampMonotonic)
agent_start=$(ts kata-agent.service ExecMainStartTimestampMonotonic)
fwd_start=$(ts agent-protocol-forwarder.service ExecMainStartTimestampMonotonic)
if filled process-user-data; then
	{ [ "$pud_done" -gt 0 ] && [ "$pud_done" -le "$agent_start" ]; } || fail "process-user-data finished at $pud_done µs, kata-agent started at $agent_start µs"
fi
if has process-user-data; then
	pud=$(rec process-user-data)
	[ "$(jq -c .argv <<<"$pud")" = '["provision-files"]' ] || fail "process-user-data argv $(jq -c .argv <<<"$pud")"
	[ "$(jq -r .found.user_data_status <<<"$pud")" = 200 ] || fail "process-user-data's metadata request got $(jq -r .found.user_data_status <<<"$pud")"
	[ "$(jq -r .found.user_data_sha256 <<<"$pud")" = "$(sha256sum <"$served" | cut -c1-64)" ] || fail "process-user-data got other user-data than the metadata server serves"
fi
if has confidential-data-hub; then
	cdh_up=$(ts confidential-data-hub.service ActiveEnterTimestampMonotonic)
	[ "$cdh_up" -le "$agent_start" ] || fail "CDH active at $cdh_up µs, after kata-agent started ($agent_start µs)"
	[ "$(jq -r .found.cdh_socket_at_start <<<"$agent")" = true ] || fail "kata-agent started before CDH's socket existed"
	cdh=$(rec confidential-data-hub)
	[ "$(jq -r .env.OCICRYPT_KEYPROVIDER_CONFIG <<<"$cdh")" = /etc/ocicrypt_config.json ] || fail "CDH env: $(jq -c .env <<<"$cdh")"
	[ "$(jq -r .env.CDH_DEFAULT_IMAGE_AUTHENTICATED_REGISTRY_CREDENTIALS <<<"$cdh")" = file:///run/peerpod/auth.json ] || fail "CDH env: $(jq -c .env <<<"$cdh")"
fi
if filled agent-protocol-forwarder; then
	[ "$agent_start" -le "$fwd_start" ] || fail "the forwarder started at $fwd_start µs, before kata-agent ($agent_start µs)"
fi
if has agent-protocol-forwarder; then
	fwd=$(rec agent-protocol-forwarder)
	[ "$(jq -r .found.agent_socket_dialled <<<"$fwd")" = true ] || fail "the forwarder could not dial kata-agent's socket"
	[ "$(jq -r .found.pod_netns <<<"$fwd")" != "$(jq -r .netns <<<"$fwd")" ] || fail "podns is the forwarder's own namespace"
	# Go listens on 0.0.0.0 with one dual-stack socket, shown as [::].
	jq -e '.listens | (index("tcp:0.0.0.0:15150") or index("tcp:[::]:15150"))' <<<"$fwd" >/dev/null || fail "the forwarder listens on $(jq -c .listens <<<"$fwd"), not 0.0.0.0:15150"
	[ -n "$(jq -r '.env.NOTIFY_SOCKET // ""' <<<"$fwd")" ] || fail "the forwarder has no NOTIFY_SOCKET (its unit is not Type=notify)"
	# Flags: each -name the fixture defines, values after the value flags.
	mapfile -t argv < <(jq -r '.argv[]' <<<"$fwd")
	i=0
	while [ "$i" -lt "${#argv[@]}" ]; do
		a=${argv[$i]}
		[[ "$a" == -* ]] || fail "forwarder argument '$a' is not a flag (Go's flag package stops there)"
		f=${a#-}
		f=${f#-}
		f=${f%%=*}
		kind=$(awk -v f="$f" '$1 == f {print $2}' "$here/fixtures/agent-protocol-forwarder-flags.txt")
		[ -n "$kind" ] || fail "forwarder flag -$f is not defined by upstream's v0.22.0 forwarder (fixtures/agent-protocol-forwarder-flags.txt); it would exit 'flag provided but not defined'"
		if [ "$kind" = value ] && [[ "$a" != *=* ]]; then i=$((i + 1)); fi
		i=$((i + 1))
	done
fi
n=$((n + 1))

# Listening sockets: only these. The resolver's stub listeners answer the
# VM itself on loopback; systemd-networkd's DHCP client keeps a socket on
# the VM's own address for lease renewals (port 68); :15150 is the
# forwarder CAA dials (Go listens on 0.0.0.0 with one dual-stack socket,
# listed as tcp6 [::]); 127.0.0.1:8006 in the pod's namespace is
# api-server-rest for the pod's containers.
expect_root="tcp 127.0.0.53:53
tcp 127.0.0.54:53
udp 127.0.0.53:53
udp 127.0.0.54:53"
if filled agent-protocol-forwarder; then expect_root+=$'\ntcp6 [::]:15150'; fi
# The real forwarder's VXLAN tunnel to the worker node (VXLAN_PORT 4789).
if grep -qw -- agent-protocol-forwarder <<<"$real"; then expect_root+=$'\nudp 0.0.0.0:4789'; fi
expect_pod=""
if filled api-server-rest; then expect_pod="tcp 127.0.0.1:8006"; fi
root_all=$(jq -r '.listening_root[]' <<<"$report")
dhcp=$(grep -E '^udp ([0-9]{1,3}\.){3}[0-9]{1,3}:68$' <<<"$root_all" || true)
[ "$(grep -c . <<<"$dhcp")" -le 1 ] || fail "more than one DHCP client socket: $(tr '\n' ';' <<<"$dhcp")"
root_l=$(grep -v -xF -- "${dhcp:-none}" <<<"$root_all" || true)
pod_l=$(jq -r '.listening_podns[]?' <<<"$report")
if grep -q ':5355$' <<<"$root_l"; then fail "LLMNR listens: $(grep ':5355$' <<<"$root_l" | tr '\n' ' ')"; fi
extra=$(comm -23 <(sort -u <<<"$root_l") <(sort -u <<<"$expect_root") | grep -v '^$' || true)
[ -z "$extra" ] || fail "unexpected listening sockets in the root namespace: $(tr '\n' ';' <<<"$extra")"
missing=$(comm -13 <(sort -u <<<"$root_l") <(sort -u <<<"$expect_root") | grep -v '^$' || true)
[ -z "$missing" ] || fail "expected listening sockets absent in the root namespace: $(tr '\n' ';' <<<"$missing")"
[ "$(sort -u <<<"$pod_l" | grep -v '^$' || true)" = "$expect_pod" ] || fail "the pod namespace listens on '$(tr '\n' ';' <<<"$pod_l")', want '$expect_pod'"
n=$((n + 1))

echo "  guest contract: ok ($n groups): podns, /run/kata-containers ext4 $((fsz / 1024 / 1024)) MiB, forwarder flags within upstream's, order process-user-data -> CDH -> kata-agent -> forwarder, listening: $(tr '\n' ' ' <<<"$root_l")| podns: $(tr '\n' ' ' <<<"$pod_l")"
