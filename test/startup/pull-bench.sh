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
#
# `pull-bench.sh cache` (make bench-cache, issue #37): the podVM's cache disk
# against Cloud NAT, as ratios from one run. It builds gcp-t4 and
# podvm-cache-mirror (with $GO, default go), pushes two random-layer images
# to the same registry, writes the first into an OCI layout with
# `gcp-t4 cache build -o LAYOUT REF@sha256:...`, and serves the layout with
# podvm-cache-mirror on the client namespace's loopback, as the podVM does.
# Then, PULL_BENCH_PULLS rounds, skopeo pulls the cached image by digest:
# through a registries.conf whose [[registry.mirror]] is the mirror, with
# the layout dropped from the page cache first (mirror-cold: read from this
# machine's disk) and again at once (mirror-warm); from the registry with
# no mirror over the unshaped link (registry-unshaped: this machine's
# ceiling for the client); and from the registry behind the Cloud NAT link
# (nat). Last, it pulls the image the cache does not hold through the
# mirror configuration (fallback): skopeo must try the mirror, be refused,
# and take the registry over the shaped link. Every pull's manifest must
# have the pinned digest. Prints one JSON line per pull (link_bytes: what
# the router sent the client; *_cpu_s: CPU seconds of skopeo, the mirror
# and the registry), the locations the fallback tried, and a summary with
# each case's MB/s and its ratio to nat. PULL_BENCH_CASES and the unpack
# step are not part of it.
#
#   PULL_BENCH_PULLS=3       rounds (each: mirror-cold, mirror-warm, registry-unshaped, nat)
#   PULL_BENCH_NAT=400:20    the Cloud NAT link, Mbit/s:RTT ms (the start-up
#                            model's registry rate, gcp-t4/internal/startup/startup.yaml)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
mib=${PULL_BENCH_MIB:-1024}
layers=${PULL_BENCH_LAYERS:-4}
cases=${PULL_BENCH_CASES:-same-region:1000:2 regional:400:20 far:100:60}
cc=${PULL_BENCH_CC:-}
real_src=${PULL_BENCH_REAL_SRC-/usr/bin}
pulls=${PULL_BENCH_PULLS:-3}
nat=${PULL_BENCH_NAT:-400:20}
go=${GO:-go}
kind=${1:-shaped}

die() {
	echo "pull-bench: $*" >&2
	exit 1
}

case $kind in
shaped | cache) ;;
*) die "usage: $0 [shaped|cache]: shaped (the default) pulls through each of PULL_BENCH_CASES; cache pulls through the podVM's cache mirror and through a Cloud NAT link" ;;
esac
[ "$(id -u)" -eq 0 ] || die "runs as root (network namespaces, tc, tmpfs): sudo $0 $kind"
command -v python3 >/dev/null || die "python3 is missing: apt-get install -y python3"
if [ "$kind" = cache ]; then
	command -v "$go" >/dev/null || die "Go is missing (GO=$go): the cache bench builds gcp-t4 and podvm-cache-mirror (make tools)"
	[[ $pulls =~ ^[1-9][0-9]*$ ]] || die "PULL_BENCH_PULLS=$pulls: give a count of 1 or more"
	[[ $nat =~ ^[0-9]+:[0-9]+$ ]] || die "PULL_BENCH_NAT=$nat: give link Mbit/s:RTT ms, such as 400:20"
fi

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
reg_pid=$!
pids+=("$reg_pid")
for i in $(seq 50); do
	in_ns "$srv" bash -c "exec 3<>/dev/tcp/$reg/5000" 2>/dev/null && break
	[ "$i" -lt 50 ] || {
		cat "$tmp/registry.log" >&2
		die "the registry did not listen on $reg:5000"
	}
	sleep 0.1
done

if [ "$kind" = cache ]; then
	IFS=: read -r nat_mbit nat_rtt <<<"$nat"
	echo "pull-bench: building gcp-t4 and podvm-cache-mirror" >&2
	(cd "$here/../../gcp-t4" && CGO_ENABLED=0 "$go" build -o "$tmp/bin/" ./cmd/gcp-t4 ./cmd/podvm-cache-mirror) ||
		die "go build of gcp-t4 and podvm-cache-mirror failed"

	# Two images of random layers, pushed unshaped and pinned by the digest
	# the registry stored: the cache holds the first, not the second.
	echo "pull-bench: building two ${mib} MiB images of $layers random layers (cached, uncached) and pushing them" >&2
	for name in cached uncached; do
		python3 "$here/pull_bench.py" image "$tmp/oci" "$mib" "$layers" >/dev/null
		in_ns "$srv" "${skopeo[@]}" copy -q --digestfile "$tmp/$name.digest" "oci:$tmp/oci:latest" "docker://$reg:5000/bench/$name:latest" >/dev/null
		rm -rf "$tmp/oci"
	done
	cached=$reg:5000/bench/cached@$(cat "$tmp/cached.digest")
	uncached=$reg:5000/bench/uncached@$(cat "$tmp/uncached.digest")

	echo "pull-bench: gcp-t4 cache build -o LAYOUT $cached" >&2
	in_ns "$srv" "$tmp/bin/gcp-t4" cache build -o "$tmp/layout" "$cached" >&2

	# The mirror on the client's loopback, as in the podVM (127.0.0.1:5000
	# beside image-rs); its one console line says what it serves.
	ip netns exec "$cli" "$tmp/bin/podvm-cache-mirror" -dir "$tmp/layout" -listen 127.0.0.1:5000 >"$tmp/mirror.out" 2>"$tmp/mirror.log" &
	mirror_pid=$!
	pids+=("$mirror_pid")
	for i in $(seq 100); do
		grep -q '^CAA-GCP-T4-CACHE ' "$tmp/mirror.out" && break
		[ "$i" -lt 100 ] || {
			cat "$tmp/mirror.log" >&2
			die "podvm-cache-mirror printed no CAA-GCP-T4-CACHE line"
		}
		sleep 0.1
	done
	echo "pull-bench: $(cat "$tmp/mirror.out")" >&2
	grep -q '"state":"serving"' "$tmp/mirror.out" || die "podvm-cache-mirror does not serve the layout"
	# The registry through the mirror first, as image-rs is configured in
	# the podVM: a mirror that lacks an image answers 404 and the client
	# goes on to the registry.
	printf '[[registry]]\nprefix = "%s"\nlocation = "%s"\ninsecure = true\n\n[[registry.mirror]]\nlocation = "127.0.0.1:5000"\ninsecure = true\n' \
		"$reg:5000" "$reg:5000" >"$tmp/registries-mirror.conf"

	results=$tmp/results.jsonl
	tck=$(getconf CLK_TCK)
	cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
	link_bytes() { in_ns "$rtr" cat /sys/class/net/vc1/statistics/tx_bytes; }
	nat_link() { # on|off: the Cloud NAT link (tbf and delay line) or rtr forwarding unshaped
		local dev
		if [ "$1" = on ]; then
			shape "$nat_mbit" "$nat_rtt"
			route_via_delay on
		else
			route_via_delay off
			for dev in vs1 vc1; do in_ns "$rtr" tc qdisc del dev $dev root; done
		fi
	}
	last_bytes=0 last_link=0
	# One pull by digest into a fresh dir, with the CPU seconds skopeo, the
	# mirror and the registry used, and the bytes rtr sent the client (the
	# shaped link's traffic); the manifest must be the pinned one.
	cpull() { # case pull# registries.conf ref [skopeo global flags]
		local c=$1 n=$2 conf=$3 ref=$4 l0 l1 m0 m1 r0 r1 got wall usr sys line TIMEFORMAT='%3R %3U %3S'
		shift 4
		rm -rf "$tmp/pull"
		sync
		l0=$(link_bytes) m0=$(cpu_ticks "$mirror_pid") r0=$(cpu_ticks "$reg_pid")
		if ! { time in_ns "$cli" skopeo --registries-conf "$conf" "$@" copy -q "docker://$ref" "dir:$tmp/pull" >/dev/null 2>"$tmp/skopeo.log"; } 2>"$tmp/time.out"; then
			cat "$tmp/skopeo.log" >&2
			die "$c: skopeo copy docker://$ref failed"
		fi
		l1=$(link_bytes) m1=$(cpu_ticks "$mirror_pid") r1=$(cpu_ticks "$reg_pid")
		read -r wall usr sys <"$tmp/time.out"
		got=sha256:$(sha256sum "$tmp/pull/manifest.json" | cut -d' ' -f1)
		[ "$got" = "${ref#*@}" ] || die "$c: the pulled manifest is $got, not the pinned ${ref#*@}"
		last_bytes=$(du -sb "$tmp/pull" | cut -f1)
		last_link=$((l1 - l0))
		# A pull through the mirror that fell back to the registry would
		# look alike in MB/s: it must leave the link (nearly) idle.
		if [[ $c == mirror* ]] && [ "$last_link" -gt $((last_bytes / 100)) ]; then
			die "$c: $last_link bytes crossed the link for a $last_bytes-byte pull: it did not come from the mirror"
		fi
		line=$(awk -v c="$c" -v n="$n" -v s="$wall" -v u="$usr" -v y="$sys" -v b="$last_bytes" -v l="$last_link" \
			-v m=$((m1 - m0)) -v r=$((r1 - r0)) -v t="$tck" 'BEGIN {
			printf "{\"case\":\"%s\",\"pull\":%d,\"bytes\":%d,\"seconds\":%.3f,\"mb_s\":%.1f,\"link_bytes\":%d,\"skopeo_cpu_s\":%.2f,\"mirror_cpu_s\":%.2f,\"registry_cpu_s\":%.2f,\"manifest\":\"pinned\"}\n", c, n, b, s, b / s / 1e6, l, u + y, m / t, r / t
		}')
		echo "$line"
		echo "$line" >>"$results"
	}
	start_delay "$nat_rtt"
	echo "pull-bench: $pulls rounds of mirror-cold, mirror-warm, registry-unshaped, nat (${nat_mbit} Mbit/s, ${nat_rtt} ms RTT)" >&2
	for i in $(seq "$pulls"); do
		python3 "$here/pull_bench.py" evict "$tmp/layout" >/dev/null
		cpull mirror-cold "$i" "$tmp/registries-mirror.conf" "$cached"
		cpull mirror-warm "$i" "$tmp/registries-mirror.conf" "$cached"
		cpull registry-unshaped "$i" "$tmp/registries.conf" "$cached"
		nat_link on
		cpull nat "$i" "$tmp/registries.conf" "$cached"
		nat_link off
	done
	nat_link on
	cpull fallback 1 "$tmp/registries-mirror.conf" "$uncached" --debug
	# The mirror first (refused: not in the cache), then the registry, whose
	# bytes crossed the shaped link.
	python3 "$here/pull_bench.py" tried "$tmp/skopeo.log" 127.0.0.1:5000 "$reg:5000" ||
		die "the uncached image did not come from the registry after the mirror refused it"
	[ "$last_link" -ge "$last_bytes" ] ||
		die "the uncached image's $last_bytes bytes did not cross the shaped link (only $last_link did)"
	stop_delay
	python3 "$here/pull_bench.py" summary "$results"
	exit 0
fi

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
