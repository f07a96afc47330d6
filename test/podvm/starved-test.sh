#!/usr/bin/env bash
# starved.sh against consoles from real boots: run 4's starved guest
# (docs/benchmarks.md; its lines as the console held them, escapes and
# carriage returns included) is named, a healthy boot's console is not,
# and a missing file fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "starved-test: FAIL: $*" >&2; exit 1; }
got=$(test/podvm/starved.sh test/podvm/fixtures/starved/run4-console.txt) || fail "run 4's starved console is not named"
[ "$got" = "1 rcu: INFO: rcu_preempt detected stalls;1 systemd-networkd-wait-online failed;1 watchdog: BUG: soft lockup" ] ||
	fail "run 4's console reads '$got'"
if out=$(test/podvm/starved.sh test/podvm/fixtures/starved/healthy-console.txt); then
	fail "a healthy boot's console is called starved: $out"
fi
if test/podvm/starved.sh /nonexistent/console.log 2>/dev/null; then
	fail "a missing console is called starved"
fi
echo "starved-test: ok (3 cases)"
