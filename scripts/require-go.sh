#!/usr/bin/env bash
# Checks that a Go toolchain new enough for go.work (1.26) is on PATH and
# says exactly what is missing when it is not; Go is the only prerequisite
# the Makefile does not install itself.
set -euo pipefail
if ! command -v go >/dev/null 2>&1; then
	for d in /usr/local/go/bin "$HOME/go/bin"; do
		if [ -x "$d/go" ]; then
			echo "go is at $d/go but not on PATH: export PATH=\"$d:\$PATH\"" >&2
			exit 1
		fi
	done
	echo "Go 1.26 or newer is required: install it from https://go.dev/dl and put its bin/ on PATH" >&2
	exit 1
fi
v=$(go env GOVERSION | sed 's/^go//')
major=${v%%.*}
rest=${v#*.}
minor=${rest%%.*}
if [ "$major" -lt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -lt 26 ]; }; then
	echo "Go $v found; go.work needs Go 1.26 or newer (the provider module itself builds with 1.25, as upstream CAA)" >&2
	exit 1
fi
