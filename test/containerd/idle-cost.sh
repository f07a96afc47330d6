#!/usr/bin/env bash
# Idle cost of `gcp-t4-node remediate` on a converged node: RSS and CPU time of
# the watch loop over a window (default 60 s), with the default debounce and
# resync, and /metrics scraped every 15 s as Prometheus would. Figures go to
# docs/benchmarks.md.
#
#   test/containerd/idle-cost.sh [path/to/gcp-t4-node] [seconds] [port]
set -euo pipefail
bin=${1:-bin/gcp-t4-node}
secs=${2:-60}
port=${3:-19102}
[ -x "$bin" ] || { echo "idle-cost.sh: $bin not built; run make build" >&2; exit 1; }
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
# The host: kata-deploy 4.x's shim and remote configuration, and the node's
# containerd (1.7.29, built and cached by build.sh), which checks every change.
mkdir -p "$dir/etc" "$dir/host/opt/kata/bin" "$dir/host/opt/kata/share/defaults/kata-containers/runtimes/remote" "$dir/host/usr/bin"
touch "$dir/host/opt/kata/bin/containerd-shim-kata-v2" "$dir/host/opt/kata/share/defaults/kata-containers/runtimes/remote/configuration-remote.toml"
ln -s "$("$here/build.sh" v1.7.29)" "$dir/host/usr/bin/containerd"
sed "s|@TMP@|$dir|g" "$here/../../gcp-t4/internal/remediate/testdata/gke-v2.toml" >"$dir/etc/config.toml"
args=(--config "$dir/etc/config.toml" --host-root "$dir/host" --kata-dir "$dir/host/opt/kata" --lock "$dir/lock"
	--containerd-version 1.7.29 --cri-socket "" --restart none --listen "127.0.0.1:$port" --log-level warn)
"$bin" remediate --once "${args[@]}" >/dev/null
"$bin" remediate "${args[@]}" &
pid=$!
sleep 2 # start-up done; measure the steady state
ticks=$(getconf CLK_TCK)
cpu0=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
max=0
scrape() {
	exec 3<>"/dev/tcp/127.0.0.1/$port"
	printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
	cat <&3 >/dev/null
	exec 3<&-
}
for ((i = 0; i < secs; i++)); do
	sleep 1
	((i % 15 == 0)) && scrape
	rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")
	((rss > max)) && max=$rss
done
cpu1=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")
awk -v c0="$cpu0" -v c1="$cpu1" -v t="$ticks" -v s="$secs" -v rss="$max" -v hwm="$hwm" 'BEGIN {
	cpu = (c1 - c0) / t
	printf "window %d s: RSS max %.1f MiB (peak since start %.1f MiB), CPU %.2f s (%.3f%% of one core)\n", s, rss / 1024, hwm / 1024, cpu, 100 * cpu / s
}'
