#!/usr/bin/env bash
# Tests podvm/scripts/build-caa-programs.sh (make podvm-binaries' source
# slots) on two small git repositories shaped as upstream's are where the
# script reads them: a cloud-api-adaptor tree (src/cloud-api-adaptor with
# upstream's module path, cmd/<program>, the cmd.VERSION/COMMIT stamps, a
# go.mod requiring the kata runtime module by a pseudo-version, no replace;
# src/cloud-providers, src/peerpod-ctrl) and a kata tree (src/runtime, a
# package the programs import, so the replace is what makes them build).
# Upstream's real trees are never used here (make test builds nothing from
# fetched code). Checks that it builds both programs with the pinned Go,
# -trimpath and the stamps, writes SHA256SUMS and VERSIONS, leaves the
# checkouts untouched, and refuses a checkout at another commit, one with a
# modified file, a kata tree that is not the one CAA's go.mod pins, and a
# pin file without its build lines, each with nothing staged.
set -euo pipefail
cd "$(dirname "$0")/../.."
script=podvm/scripts/build-caa-programs.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "build-caa-programs-test: FAIL: $*" >&2; exit 1; }
n=0
go_version=$(awk '$1 == "#@" && $2 == "go" {print $3}' podvm/guest-artefacts.pins)
[ -n "$go_version" ] || fail "podvm/guest-artefacts.pins has no '#@ go' line"
g() { git -C "$1" -c user.name=test -c user.email=test@example.invalid "${@:2}"; }

test/podvm/fake-upstream.sh "$work"
k=$work/kata
c=$work/caa
m=$c/src/cloud-api-adaptor
kc=$(git -C "$k" rev-parse HEAD)
cc=$(git -C "$c" rev-parse HEAD)

pins() { # file caa-commit kata-commit
	printf '#@ caa-commit  %s\n#@ caa-version v0.22.0\n#@ kata-commit %s\n#@ go          %s\n' "$2" "$3" "$go_version" >"$1"
}
pins "$work/pins" "$cc" "$kc"
before=$(cd "$c" && git status --porcelain --untracked-files=all && find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)

refused() { # name fragment env...
	local name=$1 want=$2 out
	shift 2
	if out=$(env PODVM_BINARIES="$work/out-$name" "$@" "$script" 2>&1); then fail "$name: accepted"; fi
	grep -qF -- "$want" <<<"$out" || fail "$name: '$out' lacks '$want'"
	[ ! -e "$work/out-$name" ] || fail "$name: staged $(ls "$work/out-$name") despite refusing"
	n=$((n + 1))
}

# Built, stamped, recorded.
PODVM_BINARIES=$work/out PODVM_PINS=$work/pins CAA_SRC=$c KATA_SRC=$k "$script" 2>"$work/log" || { cat "$work/log" >&2; fail "build"; }
for p in agent-protocol-forwarder process-user-data; do
	[ "$("$work/out/$p")" = "$p v0.22.0 $cc kata-stand-in" ] || fail "$p prints '$("$work/out/$p")'"
	go version -m "$work/out/$p" >"$work/m"
	grep -q "^$work/out/$p: go$go_version\$" "$work/m" || fail "$p not built with go$go_version: $(head -n 1 "$work/m")"
	grep -qE $'^\tbuild\t-trimpath=true$' "$work/m" || fail "$p not built with -trimpath"
	grep -qE $'^\tbuild\tCGO_ENABLED=0$' "$work/m" || fail "$p not static"
	# No path of this machine in the binary (the replace is relative).
	grep -qE $'^\t=>\t\.\./kata-runtime\t' "$work/m" || fail "$p records the kata replace as $(grep -A1 kata-containers "$work/m" | tail -n 1)"
	! grep -qF "$work" "$work/out/$p" || fail "$p holds the build machine's path $work"
	grep -qE "^$p v0.22.0 github.com/confidential-containers/cloud-api-adaptor@$cc \(cmd/$p, built from source: go$go_version, -trimpath, kata runtime replaced by kata-containers@$kc\)\$" "$work/out/VERSIONS" ||
		fail "VERSIONS: $(cat "$work/out/VERSIONS")"
done
(cd "$work/out" && sha256sum --check --strict --quiet SHA256SUMS) || fail "SHA256SUMS does not match"
[ "$(wc -l <"$work/out/SHA256SUMS")" = 2 ] || fail "SHA256SUMS: $(cat "$work/out/SHA256SUMS")"
after=$(cd "$c" && git status --porcelain --untracked-files=all && find . -path ./.git -prune -o -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
[ "$before" = "$after" ] || fail "the CAA checkout was changed"
n=$((n + 1))
# Same sources, same bits; a second run replaces its own lines.
sums=$(cat "$work/out/SHA256SUMS")
PODVM_BINARIES=$work/out PODVM_PINS=$work/pins CAA_SRC=$c KATA_SRC=$k "$script" 2>/dev/null
[ "$(cat "$work/out/SHA256SUMS")" = "$sums" ] || fail "a rebuild differs: $(cat "$work/out/SHA256SUMS") vs $sums"
[ "$(wc -l <"$work/out/VERSIONS")" = 2 ] || fail "a second run duplicated VERSIONS lines"
# Checkouts elsewhere (another machine's paths): the same bits.
mkdir -p "$work/elsewhere"
cp -a "$c" "$k" "$work/elsewhere/"
PODVM_BINARIES=$work/out-elsewhere PODVM_PINS=$work/pins CAA_SRC=$work/elsewhere/caa KATA_SRC=$work/elsewhere/kata "$script" 2>/dev/null
[ "$(cat "$work/out-elsewhere/SHA256SUMS")" = "$sums" ] || fail "checkouts at other paths give other binaries: $(cat "$work/out-elsewhere/SHA256SUMS") vs $sums"
n=$((n + 1))

# A checkout at another commit.
pins "$work/pins-other" "$(printf '%040d' 1)" "$kc"
refused other-commit "CAA_SRC=$c is at $cc, the pin is $(printf '%040d' 1): run git -C $c checkout" PODVM_PINS="$work/pins-other" CAA_SRC="$c" KATA_SRC="$k"
# A modified tracked file.
echo "// local change" >>"$m/cmd/version.go"
refused dirty "CAA_SRC=$c has modified tracked files" PODVM_PINS="$work/pins" CAA_SRC="$c" KATA_SRC="$k"
g "$c" checkout -q -- .
# Not a git checkout: its commit cannot be checked.
mkdir -p "$work/plain"
refused plain "is not a git checkout" PODVM_PINS="$work/pins" CAA_SRC="$work/plain" KATA_SRC="$k"
# A kata tree other than the one CAA's go.mod pins.
g "$k" commit -q --allow-empty -m later
kc2=$(git -C "$k" rev-parse HEAD)
pins "$work/pins-kata" "$cc" "$kc2"
refused kata-pin "go.mod requires kata runtime v0.0.0-20260720141120-${kc:0:12}, the pin's kata-commit is $kc2" PODVM_PINS="$work/pins-kata" CAA_SRC="$c" KATA_SRC="$k"
# A pin file without the build lines.
grep -v '^#@ go ' "$work/pins" >"$work/pins-nogo"
refused no-go "has no '#@ go <value>' line" PODVM_PINS="$work/pins-nogo" CAA_SRC="$c" KATA_SRC="$k"
echo "build-caa-programs-test: ok ($n cases; go$go_version)"
