#!/usr/bin/env bash
# `go mod tidy -diff` in every tracked Go module (the synthetic upstream tree
# under testdata excepted: it is a fixture, not a module we build). Each runs
# with GOWORK=off, as its own go.mod and go.sum must stand alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
untidy=()
n=0
while IFS= read -r mod; do
	dir=$(dirname "$mod")
	n=$((n + 1))
	if ! (cd "$dir" && GOWORK=off GOFLAGS='' go mod tidy -diff); then
		untidy+=("$dir")
	fi
done < <(git ls-files '*go.mod' | grep -v '/testdata/' | grep '\(^\|/\)go\.mod$')
if [ ${#untidy[@]} -gt 0 ]; then
	echo "tidy.sh: not tidy (diff above): ${untidy[*]}; run \`go mod tidy\` there (GOWORK=off) and commit the result" >&2
	exit 1
fi
echo "go mod tidy: $n modules tidy"
