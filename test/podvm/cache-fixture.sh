#!/usr/bin/env bash
# Makes the cache disk the boot test attaches (docs/cache.md), the way an
# admin makes one: `gcp-t4 cache build -disk` from a registry, by digest.
# Two multi-layer images of random layers (test/startup/pull_bench.py) are
# pushed with skopeo to a local CNCF distribution registry, the cache is
# built from their digests, and the registry is stopped, so that whatever
# the boot test pulls later can only have come from the podVM's mirror.
# Beside them, a model image made by `gcp-t4 cache model` (docs/cache.md,
# "Weights") from a stand-in model: its configuration and two shards of
# random bytes, one large enough for a layer of its own; the podVM mounts
# it from the store and reads the shards, which must be these bytes.
# Then one byte of the second image's first layer is flipped on the disk,
# in the layout's blob and in the pre-unpacked store's copy of its file:
# a client must refuse that image, through the mirror and from the store,
# and pull the first.
#   cache-fixture.sh OUT [GOOD_MIB]
# GOOD_MIB (default 24, in 3 layers) sizes the first image: the benchmark
# of docs/benchmarks.md gives 1100 (8 layers of ~137 MiB); the second stays
# 24 MiB.
# Writes OUT/disk.raw (the ext4 image and its dm-verity hash tree as GCE
# would import it, tampered), OUT/layout (the untampered layout), and
# OUT/fixture.json: the good, the tampered and the model references, the
# model's files and their sha256, the tampered layer, the disk's
# GCP_CACHE_VERITY value.
# Needs skopeo, docker-registry, e2fsprogs and python3 (apt-get on Debian).
set -euo pipefail
out=$1
good_mib=${2:-24}
[[ "$good_mib" =~ ^[1-9][0-9]*$ ]] || { echo "cache-fixture: GOOD_MIB '$good_mib' is not a whole number of MiB" >&2; exit 2; }
good_layers=3
[ "$good_mib" -lt 384 ] || good_layers=$((good_mib / 128))
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
die() { echo "cache-fixture: $*" >&2; exit 1; }
for c in skopeo docker-registry debugfs dumpe2fs veritysetup python3 jq go; do
	command -v "$c" >/dev/null || die "no $c: apt-get install -y skopeo docker-registry e2fsprogs cryptsetup-bin python3 jq, and Go (make test installs what it needs)"
done
rm -rf "$out"
mkdir -p "$out"
tmp=$(mktemp -d)
rpid=""
trap '[ -z "$rpid" ] || kill "$rpid" 2>/dev/null || true; rm -rf "$tmp"' EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$tmp/registry.yml" <<YML
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $tmp/registry
http:
  addr: 127.0.0.1:$port
YML
docker-registry serve "$tmp/registry.yml" >"$tmp/registry.log" 2>&1 &
rpid=$!
for i in $(seq 50); do
	bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null && break
	[ "$i" -lt 50 ] || { cat "$tmp/registry.log" >&2; die "the registry did not listen on 127.0.0.1:$port"; }
	sleep 0.1
done
printf '[[registry]]\nlocation = "127.0.0.1:%s"\ninsecure = true\n' "$port" >"$tmp/registries.conf"
refs=()
for name in good tampered; do
	mib=24 layers=3
	[ "$name" = tampered ] || mib=$good_mib layers=$good_layers
	python3 "$root/test/startup/pull_bench.py" image "$tmp/$name" "$mib" "$layers" >/dev/null
	skopeo --registries-conf "$tmp/registries.conf" copy -q --digestfile "$tmp/$name.digest" \
		"oci:$tmp/$name:latest" "docker://127.0.0.1:$port/cachetest/$name:latest" >/dev/null
	refs+=("127.0.0.1:$port/cachetest/$name@$(cat "$tmp/$name.digest")")
done
# gcp-t4, and the modelcar binary beside it where cache model looks for
# it, as make build lays them out.
(cd "$root/gcp-t4" && go build -o "$tmp/gcp-t4" ./cmd/gcp-t4 &&
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags "-s -w" -o "$tmp/modelcar" ./cmd/modelcar)
mdir="$tmp/model/tiny-model"
mkdir -p "$mdir/.cache"
printf '{"architectures":["MistralForCausalLM"]}\n' >"$mdir/config.json"
head -c $((40 << 20)) /dev/urandom >"$mdir/model-00001-of-00002.safetensors"
head -c $((3 << 20)) /dev/urandom >"$mdir/model-00002-of-00002.safetensors"
echo "a download's own file" >"$mdir/.cache/left-out"
model=$("$tmp/gcp-t4" cache model -dir "$mdir" -push "127.0.0.1:$port/cachetest/model:latest" 2>"$tmp/model.err") ||
	{ cat "$tmp/model.err" >&2; die "gcp-t4 cache model failed"; }
refs+=("$model")
# The files the image holds, under /models, with their sha256.
model_files=$(cd "$mdir" && find . -path ./.cache -prune -o -type f -printf '%P\n' | sort |
	while read -r f; do jq -n --arg f "models/$f" --arg s "$(sha256sum "$f" | cut -c1-64)" '{($f): $s}'; done | jq -s -c add)
"$tmp/gcp-t4" cache build -o "$out/layout" -disk "$tmp/cache.tar.gz" "${refs[@]}" >"$tmp/build.out" ||
	{ cat "$tmp/build.out" >&2; die "gcp-t4 cache build failed"; }
kill "$rpid"
wait "$rpid" 2>/dev/null || true
rpid=""
tar -C "$out" -xzf "$tmp/cache.tar.gz"
[ -f "$out/disk.raw" ] || die "the image file holds no disk.raw"

# flip PATH: one byte of the second block of the file at PATH on the disk
# image is changed in place (located with debugfs); the file read back
# from the disk must then differ.
flip() {
	local path=$1 blk before
	blk=$(debugfs -R "bmap $path 1" "$out/disk.raw" 2>/dev/null | tail -n 1)
	[[ "$blk" =~ ^[1-9][0-9]*$ ]] || die "debugfs found no block of $path on the disk: '$blk'"
	before=$(debugfs -R "cat $path" "$out/disk.raw" 2>/dev/null | sha256sum)
	python3 - "$out/disk.raw" "$((blk * bsize + 17))" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2]))
    b = f.read(1)
    f.seek(int(sys.argv[2]))
    f.write(bytes([b[0] ^ 0xFF]))
PY
	[ "$(debugfs -R "cat $path" "$out/disk.raw" 2>/dev/null | sha256sum)" != "$before" ] || die "the flipped byte did not change $path on the disk"
}
bsize=$(dumpe2fs -h "$out/disk.raw" 2>/dev/null | awk -F': *' '/^Block size/ {print $2}')
# The tampered image's first layer in the layout.
man=$(cut -d@ -f2 <<<"${refs[1]}")
layer=$(jq -r '.layers[0].digest' "$out/layout/blobs/sha256/${man#sha256:}")
flip "/blobs/sha256/${layer#sha256:}"
# The same layer as the store holds it unpacked: its one file
# (pull_bench.py writes bench/layerN.bin), found through meta_store.json's
# entry for the image's config digest.
cfg=$(jq -r '.config.digest' "$out/layout/blobs/sha256/${man#sha256:}")
sp=$(debugfs -R "cat /image-rs/meta_store.json" "$out/disk.raw" 2>/dev/null | jq -r --arg c "$cfg" '.image_db[$c].layer_metas[0].store_path // ""')
[[ "$sp" =~ /image-rs/layers/[0-9]+$ ]] || die "the store has no first layer for the tampered image's config $cfg: '$sp'"
flip "/image-rs/layers/${sp##*/}/bench/layer0.bin"
# The dm-verity value the provider would put in the podVM's metadata: the
# flipped byte leaves the hash tree as built, so the disk opens and only
# reads of the changed block fail (EIO), as on a disk changed after build.
verity=$(cat "$tmp/cache.tar.gz.verity")
[[ "$verity" =~ ^root=[0-9a-f]{64},offset=[0-9]+$ ]] || die "gcp-t4 cache build wrote no dm-verity value beside the image: '$verity'"
jq -n --arg good "${refs[0]}" --arg tampered "${refs[1]}" --arg model "${refs[2]}" --argjson files "$model_files" --arg layer "$layer" \
	--arg source "127.0.0.1:$port" --arg verity "$verity" \
	'{good: $good, tampered: $tampered, model: $model, model_files: $files, tampered_layer: $layer, source: $source, verity: $verity}' >"$out/fixture.json"
echo "cache-fixture: $(tail -n 2 "$tmp/build.out" | tr '\n' ' ')" >&2
