#!/usr/bin/env bash
# Prints every tracked shell script, one per line: *.sh files and any other
# file whose first line is a sh or bash shebang (.ci/run, mkosi hooks, ...),
# so a new script is linted without anyone listing it.
set -euo pipefail
cd "$(dirname "$0")/../.."
git ls-files -z | while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue
	case $f in
	*.sh) echo "$f" ;;
	*)
		IFS= read -r first <"$f" || true
		if [[ $first =~ ^#!.*(/|[[:space:]])(ba)?sh([[:space:]]|$) ]]; then
			echo "$f"
		fi
		;;
	esac
done
