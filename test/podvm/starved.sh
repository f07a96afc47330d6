#!/usr/bin/env bash
# Says whether a podVM console shows a guest starved of CPU: under QEMU's
# software emulation on a loaded machine the guest's own bounds fire and
# look like the image's faults (docs/benchmarks.md, run 4: an RCU stall,
# soft lockups, DHCP past systemd-networkd-wait-online's 2 minutes, then
# process-user-data with no network).
#   starved.sh CONSOLE_LOG
# Prints "N what; N what" and exits 0 when it does; prints nothing and
# exits 1 when it does not.
set -euo pipefail
out=$(tr -d '\r' <"$1" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g' |
	grep -aEo 'rcu: INFO: rcu_preempt detected stalls|watchdog: BUG: soft lockup|Failed to start systemd-ne(tworkd-wait-online|[^W]*Wait for Network)' |
	sed 's/Failed to start systemd-ne.*/systemd-networkd-wait-online failed/' | sort | uniq -c | sed 's/^ *//' | paste -sd';' -) || true
[ -n "$out" ] || exit 1
echo "$out"
