#!/usr/bin/env bash
# Prints the Debian archive URL this machine's apt already uses (first URIs:
# of a deb822 stanza serving the release suite, or the first "deb" line of a
# one-line sources list), so generated sources never name a host themselves.
# PODVM_DEBIAN_MIRROR overrides it.
set -euo pipefail
if [ -n "${PODVM_DEBIAN_MIRROR:-}" ]; then
	echo "${PODVM_DEBIAN_MIRROR%/}"
	exit 0
fi
# shellcheck source=/dev/null
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
for f in /etc/apt/sources.list.d/*.sources; do
	[ -f "$f" ] || continue
	uri=$(awk -v s="$codename" '
		/^URIs:/ {u=$2}
		/^Suites:/ {for (i = 2; i <= NF; i++) if ($i == s) found=1}
		/^$/ {if (found && u != "") {print u; exit} found=0; u=""}
		END {if (found && u != "") print u}' "$f" | head -n1)
	if [ -n "$uri" ]; then
		echo "${uri%/}"
		exit 0
	fi
done
if [ -f /etc/apt/sources.list ]; then
	uri=$(awk -v s="$codename" '$1 == "deb" && $3 == s {print $2; exit}' /etc/apt/sources.list | sed 's/\[.*\]//')
	if [ -n "$uri" ]; then
		echo "${uri%/}"
		exit 0
	fi
fi
echo "cannot find the Debian archive in this machine's apt sources; set PODVM_DEBIAN_MIRROR=<Debian archive URL>" >&2
exit 1
