#!/usr/bin/env bash
# Progress for the Go steps that compile for minutes on a fresh clone (empty
# build and module caches). Go prints nothing while it compiles unless asked
# (-v), and then one line per package, hundreds of them: a newcomer sees a
# silent terminal for ten minutes, or a wall of import paths. This says what
# is compiled and why before it starts, then "compiled k of N packages" each
# tenth of the way and whenever half a minute passed without a line, so a
# long step never looks hung; a warm step (nothing to compile) prints nothing
# more than before.
#
#   go-progress.sh build "PKG..." [go build flags]  go build -v; N is what go list calls stale
#   go-progress.sh deps "PKG..." [-tags T]          compile what PKG... and their tests import,
#                                                   counted, so the go test or go vet after it
#                                                   finds them in the build cache
#   go-progress.sh watch CMD...                     run go test (or anything printing a line per
#                                                   package) and say so after each silent minute
#   go-progress.sh install PKG@VERSION [flags]      go install -v, counted without a total
#                                                   (go list cannot resolve PKG@VERSION)
#
# PKG... is one argument (the Makefile's MODULES as it is). $GO names the go
# command (the Makefile exports its GO). Exit status: go's.
# GO_PROGRESS_SILENCE=S sets every silent stretch's length (count's 30 s and
# watch's 60 s); the tests shorten it.
set -euo pipefail

usage() {
	echo 'usage: go-progress.sh build|deps "PKG..." [go flags] | watch CMD... | install PKG@VERSION [go flags]' >&2
	exit 2
}
[[ $# -ge 2 ]] || usage
mode=$1
shift
GO=${GO:-go}
start=$SECONDS

# elapsed: time since the step began, as 4m05s or 41s.
elapsed() {
	local s=$((SECONDS - start))
	if ((s >= 60)); then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

report() {
	if (($2 > 0)); then
		printf '  compiled %d of %d packages (%d%%), %s%s\n' "$1" "$2" $(($1 * 100 / $2)) "$(elapsed)" "${3:-}"
	else
		printf '  compiled %d packages, %s%s\n' "$1" "$(elapsed)" "${3:-}"
	fi
}

# next_line SECONDS: reads one line of the command's output into $line
# and sets $got: "line", "eof" or "silent" (nothing for SECONDS; a partial
# line read so far is kept in $line). The status of read itself must be
# taken, not $? after an if: that is 0 whatever the condition returned,
# which once made count and watch take a silent stretch for the end of
# input, return, and leave go to die of SIGPIPE mid-build (make: Error 141).
# scripts_test (gcp-t4/internal/repocheck) runs every mode around a go that
# stays silent past these timeouts.
next_line() {
	local rc=0
	line=""
	IFS= read -r -t "$1" line || rc=$?
	if ((rc == 0)); then
		got=line
	elif ((rc > 128)); then
		got=silent
	else
		got=eof
	fi
}

# count TOTAL: reads go -v output on stdin; a line that is an import path
# alone is one compiled package, anything else (errors, downloads) is
# printed as it is. Half a minute without a line (one large package, or
# the link) is said, and waited out.
count() {
	local total=$1 n=0 step=0 last=$SECONDS line pending="" got
	while :; do
		next_line "${GO_PROGRESS_SILENCE:-30}"
		case $got in
		line)
			line=$pending$line pending=""
			if [[ $line =~ ^[A-Za-z0-9_][^[:space:]:]*$ ]]; then
				n=$((n + 1))
				# go -v also names main packages, which stale leaves out.
				((total > 0 && n > total)) && total=$n
				# Each tenth of the total, or half a minute since the last line.
				if ((total > 0 && n * 10 / total > step)) || ((SECONDS - last >= 30)); then
					((total > 0)) && step=$((n * 10 / total))
					report "$n" "$total"
					last=$SECONDS
				fi
			else
				printf '%s\n' "$line"
				last=$SECONDS
			fi
			;;
		silent)
			pending+=$line
			report "$n" "$total" " (go is still at work: a large package or the link)"
			last=$SECONDS
			;;
		eof)
			line=$pending$line
			[[ -z $line ]] || printf '%s\n' "$line"
			return 0
			;;
		esac
	done
}

# watch: go test's output as it is, with a line after each silent minute
# (linking a test binary, or a long package) and the count of packages
# reported so far.
watch() {
	local n=0 line pending="" last=$SECONDS got
	while :; do
		next_line "${GO_PROGRESS_SILENCE:-60}"
		case $got in
		line)
			line=$pending$line pending=""
			[[ $line =~ ^(ok|FAIL|\?)[[:space:]]+[^[:space:]]+ ]] && n=$((n + 1))
			printf '%s\n' "$line"
			last=$SECONDS
			;;
		silent)
			pending+=$line
			echo "  ... $(elapsed): $n packages reported; nothing printed for $((SECONDS - last))s while the next test binaries link or run"
			;;
		eof)
			line=$pending$line
			[[ -z $line ]] || printf '%s\n' "$line"
			return 0
			;;
		esac
	done
}

# run COUNT-ARG CMD...: CMD's output through count, CMD's exit status.
run() {
	local total=$1
	shift
	set +e
	"$@" 2>&1 | count "$total"
	local rc=${PIPESTATUS[0]}
	set -e
	return "$rc"
}

case $mode in
build | deps)
	read -r -a pkgs <<<"$1"
	shift
	# Of go's build flags, those that change which packages are stale (the
	# rest, -o and -ldflags, only change the link).
	list=()
	for ((i = 1; i <= $#; i++)); do
		case ${!i} in
		-trimpath | -race | -tags=* | -mod=*) list+=("${!i}") ;;
		-tags | -mod) j=$((i + 1)) && list+=("${!i}" "${!j}") ;;
		esac
	done
	deps=(-deps)
	[[ $mode == deps ]] && deps+=(-test)
	# Main packages are always stale (go list calls a binary stale unless it
	# is installed); linking them is what a warm build does.
	mapfile -t todo < <("$GO" list "${list[@]}" "${deps[@]}" -f '{{if and .Stale (not .ForTest) (ne .Name "main")}}{{.ImportPath}}{{end}}' "${pkgs[@]}" | sed '/^$/d')
	# A few packages are an edit's; hundreds are a fresh clone's.
	why=""
	((${#todo[@]} < 100)) || why="; this once takes minutes on a fresh clone, later runs reuse the cache and take seconds"
	if [[ $mode == build ]]; then
		((${#todo[@]} == 0)) || echo "go build: compiling ${#todo[@]} packages not yet in Go's build cache, the binaries' dependencies$why"
		run "${#todo[@]}" "$GO" build -v "$@" "${pkgs[@]}"
		((${#todo[@]} == 0)) || echo "go build: done in $(elapsed)"
		exit 0
	fi
	((${#todo[@]} > 0)) || exit 0
	echo "go: first compiling the ${#todo[@]} packages that ${pkgs[*]} and their tests import and Go's build cache lacks$why"
	run "${#todo[@]}" "$GO" build -v "${list[@]}" "${todo[@]}"
	echo "go: compiled in $(elapsed)"
	;;
watch)
	set +e
	"$@" 2>&1 | watch
	rc=${PIPESTATUS[0]}
	set -e
	exit "$rc"
	;;
install)
	pkg=$1
	shift
	echo "go install $pkg: compiling it and every package it imports (how many is not known before: go list cannot resolve PKG@VERSION)"
	run 0 "$GO" install -v "$@" "$pkg"
	;;
*) usage ;;
esac
