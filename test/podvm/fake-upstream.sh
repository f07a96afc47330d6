#!/usr/bin/env bash
# Makes two small git repositories shaped as upstream's are where
# podvm/scripts/build-caa-programs.sh reads them, for tests (never the real
# trees: make test builds nothing from fetched code):
#   <dir>/kata  src/runtime: the kata runtime module, with a package the
#               programs import (so the replace is what makes them build)
#   <dir>/caa   src/cloud-api-adaptor with upstream's module path, cmd/<program>
#               for both programs, the cmd.VERSION/COMMIT stamps, a go.mod
#               requiring the kata module by a pseudo-version ending in the
#               kata commit, no replace; src/cloud-providers, src/peerpod-ctrl
#   <dir>/pins  podvm/guest-artefacts.pins with its "#@" lines naming them
#   fake-upstream.sh <dir>
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$1
mkdir -p "$work"
go_version=$(awk '$1 == "#@" && $2 == "go" {print $3}' podvm/guest-artefacts.pins)
g() { git -C "$1" -c user.name=test -c user.email=test@example.invalid "${@:2}"; }

# The kata tree.
k=$work/kata
mkdir -p "$k/src/runtime/protocols"
printf 'module github.com/kata-containers/kata-containers/src/runtime\n\ngo 1.24\n' >"$k/src/runtime/go.mod"
printf 'package protocols\n\n// Name is what the programs print.\nconst Name = "kata-stand-in"\n' >"$k/src/runtime/protocols/protocols.go"
git init -q "$k" && g "$k" add -A && g "$k" commit -qm kata
kc=$(git -C "$k" rev-parse HEAD)

# The CAA tree, its go.mod pinning that kata commit.
c=$work/caa
m=$c/src/cloud-api-adaptor
mkdir -p "$m/cmd" "$c/src/cloud-providers" "$c/src/peerpod-ctrl"
cat >"$m/go.mod" <<MOD
module github.com/confidential-containers/cloud-api-adaptor/src/cloud-api-adaptor

go $go_version

require github.com/kata-containers/kata-containers/src/runtime v0.0.0-20260720141120-${kc:0:12}
MOD
printf 'package cmd\n\nvar (\n\tVERSION = "unknown"\n\tCOMMIT  = "unknown"\n)\n' >"$m/cmd/version.go"
for p in agent-protocol-forwarder process-user-data; do
	mkdir -p "$m/cmd/$p"
	cat >"$m/cmd/$p/main.go" <<GO
package main

import (
	"fmt"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-api-adaptor/cmd"
	"github.com/kata-containers/kata-containers/src/runtime/protocols"
)

func main() { fmt.Println("$p", cmd.VERSION, cmd.COMMIT, protocols.Name) }
GO
done
echo "module x" >"$c/src/cloud-providers/go.mod"
echo "module y" >"$c/src/peerpod-ctrl/go.mod"
git init -q "$c" && g "$c" add -A && g "$c" commit -qm caa
cc=$(git -C "$c" rev-parse HEAD)

awk -v c="$cc" -v k="$kc" '$1 == "#@" && $2 == "caa-commit" {$3 = c} $1 == "#@" && $2 == "kata-commit" {$3 = k} {print}' podvm/guest-artefacts.pins >"$work/pins"
