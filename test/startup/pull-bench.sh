#!/usr/bin/env bash
# Image pull through a shaped link (issue #36 item 4): how much of a link's
# rate a real registry client gets when it pulls an image, the figure the
# start-up model (`gcp-t4 plan`) uses for a podVM pulling through Cloud NAT.
#
# Three network namespaces: the registry (the CNCF distribution registry,
# plain HTTP), a router, and the client (skopeo). The router shapes the link
# with tc tbf in both directions and delays it with a packet delay line
# (test/startup/pull_bench.py delay; the kernel may have no sch_netem), half
# the RTT each way. A synthetic image of incompressible random gzip layers
# is pushed to the registry unshaped, then pulled with
# `skopeo copy docker://... dir:...` once per link shape. The client's
# registries.conf marks the registry insecure, in the containers-registries.conf
# format image-rs reads in the podVM. Last, it times `tar -xzf` of the layers
# (the guest unpacks each layer after its download) to disk and to tmpfs, and
# of a gzip tar of real files (PULL_BENCH_REAL_SRC) as a compressible layer.
#
# Prints one JSON line per case; efficiency = achieved / link rate.
# Runs as root; installs skopeo, docker-registry and iproute2 with apt-get
# when missing. Nothing is written inside the repository: the image, the
# registry's storage and the pulls live in one temp dir removed on exit.
#
#   PULL_BENCH_MIB=1024      image size in MiB (a quick run: 128)
#   PULL_BENCH_LAYERS=4      layers
#   PULL_BENCH_CASES="same-region:1000:2 regional:400:20 far:100:60"
#                            name:link Mbit/s:RTT ms, space-separated
#   PULL_BENCH_CC=           the registry's TCP congestion control (default: the
#                            kernel's; a namespace may set only those in
#                            net.ipv4.tcp_allowed_congestion_control)
#   PULL_BENCH_REAL_SRC=/usr/bin  a directory tarred as the compressible layer ("" skips)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
mib=${PULL_BENCH_MIB:-1024}
layers=${PULL_BENCH_LAYERS:-4}
cases=${PULL_BENCH_CASES:-same-region:1000:2 regional:400:20 far:100:60}
cc=${PULL_BENCH_CC:-}
real_src=${PULL_BENCH_REAL_SRC-/usr/bin}

die() {
	echo "pull-bench: $*" >&2
	exit 1
}

[ "$(id -u)" -eq 0 ] || die "runs as root (network namespaces, tc, tmpfs): sudo $0"
command -v python3 >/dev/null || die "python3 is missing: apt-get install -y python3"

# Tools: the command each package provides.
declare -A pkg_of=([skopeo]=skopeo [docker-registry]=docker-registry [ip]=iproute2 [tc]=iproute2 [tar]=tar [gzip]=gzip)
missing=()
for c in "${!pkg_of[@]}"; do
	command -v "$c" >/dev/null 2>&1 || missing+=("${pkg_of[$c]}")
done
if [ ${#missing[@]} -gt 0 ]; then
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	echo "pull-bench: installing ${missing[*]}" >&2
	if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
		die "could not install ${missing[*]}; install them (Debian bookworm: apt-get install -y ${missing[*]}) and rerun"
	fi
	for c in "${!pkg_of[@]}"; do
		command -v "$c" >/dev/null 2>&1 || die "$c is still missing after apt-get install ${pkg_of[$c]}"
	done
fi

tmp=$(mktemp -d /tmp/pull-bench.XXXXXX)
ns=pb$$
srv=${ns}s rtr=${ns}r cli=${ns}c
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for n in "$srv" "$rtr" "$cli"; do ip netns del "$n" 2>/dev/null || true; done
	umount "$tmp/tmpfs" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
# A background job is started with ip netns exec itself, never through this
# function, so that $! is the process the trap ends.
in_ns() {
	local n=$1
	shift
	ip netns exec "$n" "$@"
}

# Topology: srv 10.231.1.1 -- 10.231.1.2 rtr 10.231.2.1 -- 10.231.2.2 cli.
# In rtr, what arrives from one side is routed into a tun device (dla from
# the client, dlb from the registry); the delay line writes it into the
# other tun, and the main table routes it on.
reg=10.231.1.1
for n in "$srv" "$rtr" "$cli"; do
	ip netns add "$n"
	in_ns "$n" ip link set lo up
done
ip link add vs0 netns "$srv" type veth peer name vs1 netns "$rtr"
ip link add vc0 netns "$cli" type veth peer name vc1 netns "$rtr"
in_ns "$srv" ip addr add $reg/30 dev vs0
in_ns "$rtr" ip addr add 10.231.1.2/30 dev vs1
in_ns "$rtr" ip addr add 10.231.2.1/30 dev vc1
in_ns "$cli" ip addr add 10.231.2.2/30 dev vc0
in_ns "$srv" ip link set vs0 up
in_ns "$cli" ip link set vc0 up
in_ns "$rtr" ip link set vs1 up
in_ns "$rtr" ip link set vc1 up
in_ns "$srv" ip route add default via 10.231.1.2
in_ns "$cli" ip route add default via 10.231.2.1
if [ -n "$cc" ]; then
	in_ns "$srv" sysctl -qw net.ipv4.tcp_congestion_control="$cc" ||
		die "TCP congestion control $cc is not allowed in a namespace; allowed: $(sysctl -n net.ipv4.tcp_allowed_congestion_control)"
fi
cc=$(in_ns "$srv" sysctl -n net.ipv4.tcp_congestion_control)
in_ns "$rtr" sysctl -qw net.ipv4.ip_forward=1
for k in all default vs1 vc1; do in_ns "$rtr" sysctl -qw "net.ipv4.conf.$k.rp_filter=0"; done
for t in dla dlb; do
	in_ns "$rtr" ip tuntap add dev $t mode tun vnet_hdr
	in_ns "$rtr" sysctl -qw "net.ipv4.conf.$t.rp_filter=0"
	in_ns "$rtr" ip link set $t up
done
in_ns "$rtr" ip addr add 10.231.3.1/32 dev dla
in_ns "$rtr" ip addr add 10.231.3.2/32 dev dlb
in_ns "$rtr" ip route add default dev dla table 101
in_ns "$rtr" ip route add default dev dlb table 102
route_via_delay() { # on|off: whether rtr routes through the delay line
	local op=add
	[ "$1" = on ] || op=del
	in_ns "$rtr" ip rule $op iif vc1 table 101
	in_ns "$rtr" ip rule $op iif vs1 table 102
}

delay_pid=
start_delay() { # RTT ms
	stop_delay
	ip netns exec "$rtr" python3 "$here/pull_bench.py" delay dla dlb "$(awk -v r="$1" 'BEGIN { print r / 2 }')" >"$tmp/delay.out" 2>&1 &
	delay_pid=$!
	pids+=("$delay_pid")
	for _ in $(seq 50); do
		grep -q ready "$tmp/delay.out" && return 0
		sleep 0.1
	done
	cat "$tmp/delay.out" >&2
	die "the delay line did not start"
}
stop_delay() {
	if [ -n "$delay_pid" ]; then
		kill "$delay_pid" 2>/dev/null || true
		wait "$delay_pid" 2>/dev/null || true
		delay_pid=
	fi
}
shape() { # link Mbit/s, RTT ms: tbf on both of rtr's egresses, queue one BDP (at least 256 KiB)
	local dev limit
	limit=$(awk -v m="$1" -v r="$2" 'BEGIN { b = m * 1e6 / 8 * r / 1000; if (b < 262144) b = 262144; printf "%d", b }')
	for dev in vs1 vc1; do
		in_ns "$rtr" tc qdisc replace dev $dev root tbf rate "${1}mbit" burst 128kb limit "$limit"
	done
}

# Registry: plain HTTP on the registry namespace's veth address.
mkdir -p "$tmp/registry"
cat >"$tmp/registry.yml" <<EOF
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $tmp/registry
http:
  addr: $reg:5000
EOF
cat >"$tmp/registries.conf" <<EOF
[[registry]]
location = "$reg:5000"
insecure = true
EOF
skopeo=(skopeo --registries-conf "$tmp/registries.conf")
ip netns exec "$srv" docker-registry serve "$tmp/registry.yml" >"$tmp/registry.log" 2>&1 &
pids+=("$!")
for i in $(seq 50); do
	in_ns "$srv" bash -c "exec 3<>/dev/tcp/$reg/5000" 2>/dev/null && break
	[ "$i" -lt 50 ] || {
		cat "$tmp/registry.log" >&2
		die "the registry did not listen on $reg:5000"
	}
	sleep 0.1
done

echo "pull-bench: building a ${mib} MiB image of $layers random layers" >&2
python3 "$here/pull_bench.py" image "$tmp/oci" "$mib" "$layers" >/dev/null
image=$reg:5000/bench/random:latest
in_ns "$srv" "${skopeo[@]}" copy -q "oci:$tmp/oci:latest" "docker://$image" >/dev/null
rm -rf "$tmp/oci"

pull() { # prints seconds and bytes of one pull into a fresh dir
	rm -rf "$tmp/pull"
	local t0 t1
	t0=$(now)
	in_ns "$cli" "${skopeo[@]}" copy -q "docker://$image" "dir:$tmp/pull" >/dev/null
	t1=$(now)
	echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') $(du -sb "$tmp/pull" | cut -f1)"
}
report() { # case link rtt seconds bytes
	awk -v c="$1" -v cc="$cc" -v l="$2" -v r="$3" -v s="$4" -v b="$5" 'BEGIN {
		a = b * 8 / s / 1e6
		if (l == "null") e = "null"; else e = sprintf("%.3f", a / l)
		printf "{\"case\":\"%s\",\"link_mbit\":%s,\"rtt_ms\":%s,\"bytes\":%d,\"seconds\":%.3f,\"achieved_mbit\":%.1f,\"efficiency\":%s,\"cc\":\"%s\"}\n", c, l, r, b, s, a, e, cc
	}'
}

# Ceilings of this machine: the pull with rtr forwarding directly (skopeo and
# the registry's CPU), and through the delay line (no tbf, 2 ms RTT). A shaped
# case well below both measures the link, not the machine.
out=$(pull)
read -r s b <<<"$out"
report "unshaped-direct" null 0 "$s" "$b"
route_via_delay on
start_delay 2
out=$(pull)
read -r s b <<<"$out"
report "unshaped-delay-line" null 2 "$s" "$b"

for c in $cases; do
	IFS=: read -r name link rtt <<<"$c"
	shape "$link" "$rtt"
	start_delay "$rtt"
	out=$(pull)
read -r s b <<<"$out"
	report "$name" "$link" "$rtt" "$s" "$b"
done
stop_delay

# Unpack: each pulled layer (gzip tar) with tar -xzf, to disk and to tmpfs.
mkdir -p "$tmp/tmpfs"
mount -t tmpfs -o size=$((mib * 2 + 1024))m pull-bench "$tmp/tmpfs"
mapfile -t blobs < <(find "$tmp/pull" -type f -size +1M)
unpack() { # label target blobs...
	local label=$1 target=$2 t0 t1 in out
	shift 2
	rm -rf "$target" && mkdir -p "$target"
	sync
	t0=$(now)
	for f in "$@"; do tar -xzf "$f" -C "$target"; done
	sync
	t1=$(now)
	in=$(cat "$@" | wc -c)
	out=$(du -sb "$target" | cut -f1)
	awk -v c="$label" -v a="$t0" -v z="$t1" -v i="$in" -v o="$out" 'BEGIN {
		s = z - a
		printf "{\"case\":\"%s\",\"compressed_bytes\":%d,\"unpacked_bytes\":%d,\"seconds\":%.3f,\"compressed_mib_s\":%.1f,\"unpacked_mib_s\":%.1f}\n", c, i, o, s, i / s / 1048576, o / s / 1048576
	}'
	rm -rf "$target"
}
unpack unpack-random-disk "$tmp/unpack" "${blobs[@]}"
unpack unpack-random-tmpfs "$tmp/tmpfs/unpack" "${blobs[@]}"
if [ -n "$real_src" ]; then
	tar -czf "$tmp/real.tar.gz" -C "$(dirname "$real_src")" "$(basename "$real_src")"
	unpack unpack-real-disk "$tmp/unpack" "$tmp/real.tar.gz"
	unpack unpack-real-tmpfs "$tmp/tmpfs/unpack" "$tmp/real.tar.gz"
fi
