# shellcheck shell=bash
# Shared steps for putting gcpt4 into an upstream CAA tree; sourced by
# test/dropin/check.sh (the drop-in contract check) and
# scripts/upstream-patch/patch.sh (the contribution series and the image).
# Callers set `set -euo pipefail`, GOWORK=off (upstream's own go.mod files
# are the only ones used inside its tree) and `here`, our repository root.

# A module the proxy refuses: Go prints "MOD@VER: reading URL: 403 Forbidden".
dropin_unavailable_re=': reading [^[:space:]]+: (403 Forbidden|404 Not Found|410 Gone)'
# Modules found unavailable in DROPIN_TOLERATE_UNAVAILABLE=1 mode.
dropin_unavailable=

# dropin_mod_tidy DIR: go mod tidy in DIR. With DROPIN_TOLERATE_UNAVAILABLE=1
# (for a network whose proxy lacks some of upstream's dependencies), a tidy
# that fails only for that reason is redone with -e, and the requirements -e
# dropped because it could not load them are put back (tidy-keep).
dropin_mod_tidy() {
	local dir=$1 err missing orig
	err=$(mktemp)
	if (cd "$dir" && go mod tidy) 2>"$err"; then
		rm -f "$err"
		return 0
	fi
	cat "$err" >&2
	missing=$(grep -oE "[^[:space:]]+@v[^:[:space:]]+$dropin_unavailable_re" "$err" | sed 's/: reading.*//' | sort -u | tr '\n' ' ' || true)
	rm -f "$err"
	if [ "${DROPIN_TOLERATE_UNAVAILABLE:-}" != 1 ] || [ -z "$missing" ]; then
		return 1
	fi
	echo "WARNING: the module proxy does not serve ${missing}; tidying $dir with -e and keeping the requirements it cannot load" >&2
	dropin_unavailable="$dropin_unavailable $missing"
	orig=$(mktemp -d)
	cp "$dir/go.mod" "$dir/go.sum" "$orig/"
	(cd "$dir" && go mod tidy -e) 2>/dev/null || true
	if [ -n "${TIDY_KEEP:-}" ]; then
		"$TIDY_KEEP" -orig "$orig/go.mod" -orig-sum "$orig/go.sum" "$dir"
	else
		# shellcheck disable=SC2154 # here: set by the sourcing script
		(cd "$here/test/upstream" && go run ./cmd/tidy-keep -orig "$orig/go.mod" -orig-sum "$orig/go.sum" "$dir")
	fi
	rm -rf "$orig"
}

# The module versions upstream pins that gcpt4 relies on; `go mod tidy` in
# upstream's src/cloud-providers must leave them as they are.
dropin_pins() {
	grep -E '^\s*(cloud.google.com/go/compute|google.golang.org/api|google.golang.org/protobuf|github.com/google/uuid|github.com/googleapis/gax-go/v2|gopkg.in/yaml.v2) ' "$1/go.mod" | sed 's/\/\/ indirect//; s/[[:space:]]*$//' | sort || true
}

# dropin_copy REPO CP_DIR: copy our gcpt4 package into CP_DIR (an upstream
# src/cloud-providers directory).
dropin_copy() {
	if [ -e "$2/gcpt4" ]; then
		echo "$2 already has a gcpt4 package: start from a clean upstream checkout" >&2
		return 1
	fi
	# From a checkout, only files git tracks or would track: no build
	# outputs or editor files in a patch. (The image build has no .git.)
	if git -C "$1" rev-parse --git-dir >/dev/null 2>&1; then
		(cd "$1/src/cloud-providers" && git ls-files -z --cached --others --exclude-standard -- gcpt4 |
			while IFS= read -r -d '' f; do if [ -f "$f" ]; then printf '%s\0' "$f"; fi; done |
			tar --null -T - -cf -) | tar -xf - -C "$2"
	else
		cp -R "$1/src/cloud-providers/gcpt4" "$2/gcpt4"
	fi
	if [ ! -f "$2/gcpt4/manager.go" ]; then
		echo "copying gcpt4 from $1 into $2 failed" >&2
		return 1
	fi
}

# dropin_tidy CP_DIR: build gcpt4 with upstream's go.mod as it is; if that
# is not enough, `go mod tidy`, the one change the contract allows, which
# must keep upstream's pins.
dropin_tidy() {
	local before after
	before=$(dropin_pins "$1")
	if (cd "$1" && go build ./gcpt4/... 2>/dev/null) && [ "${DROPIN_ALWAYS_TIDY:-}" != 1 ]; then
		echo "gcpt4 builds with upstream's src/cloud-providers/go.mod unchanged"
		return 0
	fi
	dropin_mod_tidy "$1" || {
		echo "go mod tidy failed in $1: see above for the module that could not be fetched (GOPROXY=$(go env GOPROXY))" >&2
		return 1
	}
	after=$(dropin_pins "$1")
	if [ "$before" != "$after" ]; then
		echo "go mod tidy changed versions upstream pins in $1/go.mod; gcpt4 must build with upstream's pins:" >&2
		diff <(echo "$before") <(echo "$after") >&2 || true
		return 1
	fi
	echo "gcpt4 builds after go mod tidy in src/cloud-providers; upstream's pins unchanged"
}

# dropin_test CP_DIR: build, vet and test gcpt4 inside upstream's module.
# A hung test fails after DROPIN_TEST_TIMEOUT instead of blocking the caller.
dropin_test() {
	(cd "$1" && go build ./gcpt4/... && go vet ./gcpt4/... &&
		go test -count=1 -timeout "${DROPIN_TEST_TIMEOUT:-5m}" ./gcpt4/...)
}
