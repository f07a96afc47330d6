#!/usr/bin/env bash
# Runs two commands at once: a side lane in the background, its lines
# prefixed with its name, and the main lane in the foreground as it is.
# make test uses it to build and boot the podVM image (downloads, then one
# QEMU vCPU: much of it waiting, little of it Go) while the Go checks
# compile and run, where one after the other took the sum of both.
#
#   lanes.sh NAME 'SIDE COMMAND' MAIN COMMAND...
#
# SIDE COMMAND is one string, run by bash -c in a process group of its
# own. Exit status: 0 when both lanes pass; else the main lane's status if
# it failed, else the side lane's. When the main lane fails the side lane
# is stopped (its whole process group: a make and what it started), so a
# failure is reported in minutes, not after a 30-minute boot. Ctrl-C or
# SIGTERM stops both (exit 130 or 143). A last line says how each ended.
#
# gcp-t4/internal/repocheck's TestLanes runs every path: both pass, either
# fails, the side lane stopped on the main lane's failure, and a signal.
set -euo pipefail

if [[ $# -lt 3 ]]; then
	echo "usage: lanes.sh NAME 'SIDE COMMAND' MAIN COMMAND..." >&2
	exit 2
fi
name=$1 side=$2
shift 2

# Job control gives the background lane its own process group, so one
# kill reaches the make, its recipes and their children.
set -m
bash -c "$side" > >(sed -u "s/^/$name | /") 2>&1 &
sidepid=$!
set +m

stop_side() {
	if kill -0 "$sidepid" 2>/dev/null; then
		kill -TERM -- "-$sidepid" 2>/dev/null || true
	fi
}
mainpid=
# on_signal: both lanes stopped, then the shell's status for the signal.
# The main lane runs in the background and is waited for, because bash
# runs a trap only after the foreground command returns; it stays in this
# script's process group, so a terminal's Ctrl-C reaches it as before.
on_signal() {
	trap - INT TERM
	echo "lanes: $1; stopping both lanes" >&2
	stop_side
	[[ -z $mainpid ]] || kill -TERM "$mainpid" 2>/dev/null || true
	wait 2>/dev/null || true
	exit "$2"
}
trap 'on_signal interrupted 130' INT
trap 'on_signal terminated 143' TERM

"$@" &
mainpid=$!
mainrc=0
wait "$mainpid" || mainrc=$?
if ((mainrc != 0)); then
	echo "lanes: the main lane failed (exit $mainrc); stopping $name" >&2
	stop_side
fi
siderc=0
wait "$sidepid" || siderc=$?
# The prefixing sed ends when the side lane's output closes; let it print
# its last lines before the summary.
wait 2>/dev/null || true

if ((mainrc != 0)); then
	echo "lanes: main lane failed (exit $mainrc); $name stopped (exit $siderc)" >&2
	exit "$mainrc"
fi
if ((siderc != 0)); then
	echo "lanes: main lane passed; $name failed (exit $siderc): its lines above start with '$name | '" >&2
	exit "$siderc"
fi
echo "lanes: main lane and $name passed"
