#!/usr/bin/env bash
# Runs shellcheck over every tracked shell script (scripts/lint/shell-scripts.sh
# lists them), following sourced files relative to each script;
# scripts/lint/setup.sh installs the tool.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v shellcheck >/dev/null 2>&1; then
	echo "shellcheck.sh: shellcheck is missing; run scripts/lint/setup.sh as root, or: sudo apt-get install -y shellcheck" >&2
	exit 1
fi
mapfile -t scripts < <(scripts/lint/shell-scripts.sh)
shellcheck -x -P SCRIPTDIR "${scripts[@]}"
echo "shellcheck $(shellcheck --version | awk '/^version:/ { print $2 }'): ${#scripts[@]} scripts clean"
