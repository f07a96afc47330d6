#!/usr/bin/env bash
# Checks the checkouts `make node-e2e UPSTREAM=… KATA=…` is given: each an
# existing git checkout, UPSTREAM's HEAD the CAA release the series targets
# (CAA_PIN), KATA's HEAD the kata-containers commit that release pins (its
# src/cloud-api-adaptor/versions.yaml, oci.kata-containers.reference).
# Prints the two commits on stdout; a wrong path or commit exits 2 naming
# the variable and the fix.
#
#   CAA_PIN=38d0fcf7… test/node/pins.sh /path/to/cloud-api-adaptor /path/to/kata-containers
set -euo pipefail
upstream=${1:-}
kata=${2:-}
pin=${CAA_PIN:?pins.sh: CAA_PIN (the CAA commit) is not set; the Makefile sets it}
versions=src/cloud-api-adaptor/versions.yaml

fail() {
	echo "node-e2e: $*" >&2
	exit 2
}
[[ -n $upstream && -n $kata ]] || fail "UPSTREAM and KATA go together: give both (UPSTREAM=<CAA checkout at $pin> KATA=<kata-containers checkout>) or neither (the CI part alone)"
head_of() { # VAR PATH -> the checkout's HEAD commit
	[[ -d $2 ]] || fail "$1=$2 is not a directory; give the path of a git checkout"
	git -C "$2" rev-parse --verify -q 'HEAD^{commit}' 2>/dev/null || fail "$1=$2 is not a git checkout (git rev-parse HEAD fails there)"
}
have=$(head_of UPSTREAM "$upstream")
[[ $have == "$pin" ]] || fail "UPSTREAM=$upstream is at $have, not CAA's pinned $pin (v0.22.0); run: git -C $upstream checkout $pin"
kpin=$(git -C "$upstream" show "HEAD:$versions" 2>/dev/null | awk '
	/^[^ #]/ { top = $1 }
	top == "oci:" && /^  kata-containers:/ { k = 1; next }
	k && /^  [^ ]/ { k = 0 }
	k && $1 == "reference:" { print $2; exit }') || true
[[ $kpin =~ ^[0-9a-f]{40}$ ]] || fail "UPSTREAM=$upstream: no oci.kata-containers.reference commit in $versions at HEAD"
khave=$(head_of KATA "$kata")
[[ $khave == "$kpin" ]] || fail "KATA=$kata is at $khave, not the kata-containers commit CAA pins ($kpin, $versions); run: git -C $kata checkout $kpin"
echo "UPSTREAM $have"
echo "KATA $khave"
