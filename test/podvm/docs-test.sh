#!/usr/bin/env bash
# The podVM path the docs tell a user to walk, run as written from a fresh
# copy of the repository:
#   docs/install.md step 1 (<!-- step: podvm -->), the runbook's §4.1
#   (<!-- podvm-path -->, the same commands) and the serial-console check
#   (<!-- podvm-console -->, in install.md and the build guide).
# What this machine cannot supply is put where the user's machine would
# have it, and nothing else: upstream's two trees are small stand-in git
# repositories (test/podvm/fake-upstream.sh) named with CAA_SRC/KATA_SRC
# and a pin file naming their commits, no registry is reachable
# (PODVM_OFFLINE=1), gcloud is a shim that records its arguments (and, for
# the console, prints a console holding the slot line the image's
# slot-report script prints), and the image gce-pack.sh packs is a small
# disk with a production or a test manifest. Each command's result is
# checked for what the next step relies on.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "docs-test: FAIL: $*" >&2; exit 1; }
n=0

# block FILE MARKER: the commands of the first ```sh block after MARKER,
# continuation lines joined, comments dropped, indentation removed.
block() {
	awk -v m="$2" '
		index($0, m) {found = 1; next}
		found && !inb && /^ *```sh$/ {inb = 1; next}
		inb && /^ *```$/ {exit}
		inb {
			sub(/^ +/, ""); sub(/ +#.*$/, "")
			if ($0 ~ /\\$/) {sub(/\\$/, ""); cont = cont $0; next}
			line = cont $0; cont = ""
			gsub(/  +/, " ", line)
			if (line != "") print line
		}' "$1"
}
install_cmds=$(block docs/install.md '<!-- step: podvm -->')
runbook_cmds=$(block docs/runbook-mistral-tp2.md '<!-- podvm-path -->')
[ -n "$install_cmds" ] || fail "docs/install.md has no podvm step block"
# The runbook names its upload bucket UPLOAD (BUCKET is its model bucket).
# shellcheck disable=SC2016 # the doc's variable names, not expanded
[ "$(grep -v '^export UPLOAD=' <<<"$runbook_cmds" | sed 's/\$UPLOAD/$BUCKET/g')" = "$install_cmds" ] ||
	fail "the runbook's §4.1 commands differ from install.md's step 1:
$runbook_cmds
---
$install_cmds"
console_install=$(block docs/install.md '<!-- podvm-console -->')
console_guide=$(block docs/podvm-build-guide.md '<!-- podvm-console -->')
{ [ -n "$console_install" ] && [ "$console_install" = "$console_guide" ]; } || fail "the console check differs: install.md '$console_install', build guide '$console_guide'"
n=$((n + 1))

# The path, step by step.
mkdir "$work/clone" "$work/shims" "$work/home"
git ls-files -z | xargs -0 tar -cf - | tar -xf - -C "$work/clone"
test/podvm/fake-upstream.sh "$work/up" >/dev/null
for c in mkosi flock apt-get; do
	printf '#!/bin/sh\necho %s "$@" >>%s/calls\nexit 97\n' "$c" "$work" >"$work/shims/$c"
done
cat >"$work/shims/gcloud" <<SH
#!/bin/sh
echo "gcloud \$*" >>$work/gcloud.calls
case "\$*" in *get-serial-port-output*) cat $work/console.txt ;; esac
SH
chmod 0755 "$work/shims"/*
export PROJECT=test-proj ZONE=us-central1-a BUCKET=test-bucket
run() { # one doc command in the copy, the user's environment plus ours
	(cd "$work/clone" && env HOME="$work/home" PATH="$work/shims:$PATH" PODVM_CACHE="$work/cache" PODVM_OFFLINE=1 \
		PODVM_ARTEFACTS="$work/layouts" PODVM_PINS="$work/up/pins" CAA_SRC="$work/up/caa" KATA_SRC="$work/up/kata" \
		bash -c "$1")
}
i=0
while IFS= read -r cmd; do
	i=$((i + 1))
	case "$cmd" in
	"make podvm-binaries")
		# Offline: the two programs built, the pulled artefacts named with the
		# command that fetches them; exit non-zero.
		if run "$cmd" >"$work/binaries.txt" 2>&1; then fail "make podvm-binaries offline succeeded: $(cat "$work/binaries.txt")"; fi
		for s in agent-protocol-forwarder process-user-data; do
			[ -x "$work/clone/podvm/binaries/$s" ] || fail "make podvm-binaries did not stage $s: $(cat "$work/binaries.txt")"
			grep -q "^$s v0.22.0 github.com/confidential-containers/cloud-api-adaptor@" "$work/clone/podvm/binaries/VERSIONS" || fail "no VERSIONS line for $s"
		done
		for s in kata-agent attestation-agent confidential-data-hub api-server-rest; do
			grep -q "^  $s: on a machine that reaches the registry, run" "$work/binaries.txt" || fail "make podvm-binaries does not say how to get $s: $(cat "$work/binaries.txt")"
		done
		;;
	"make podvm")
		# Before the pulled artefacts are there: refused at once, naming
		# exactly what is still missing.
		if run "$cmd" >"$work/podvm.txt" 2>&1; then fail "make podvm built without kata-agent and CDH"; fi
		grep -q "without kata-agent confidential-data-hub (in " "$work/podvm.txt" || fail "make podvm: $(cat "$work/podvm.txt")"
		[ ! -e "$work/calls" ] || fail "make podvm got past the binaries check: $(cat "$work/calls")"
		# What the user does next (the build guide's offline path) is put in
		# place: a production image in the cache directory make podvm prints.
		d=$work/home/.cache/caa-gcp-t4/podvm-KEY
		mkdir -p "$d"
		truncate -s 4M "$d/podvm.raw"
		echo 'label: gpt' | sfdisk -q "$d/podvm.raw" >/dev/null
		echo '{"caa-gcp-t4": {"image_kind": "production", "secure_boot": {"signed": false}}}' >"$d/podvm.manifest"
		echo '{"key": "KEY"}' >"$d/build-info.json"
		;;
	*gce-pack.sh*)
		run "$cmd" >"$work/pack.txt" 2>&1 || fail "gce-pack.sh: $(cat "$work/pack.txt")"
		grep -q "^gcloud storage cp .*/podvm-gce.tar.gz gs://test-bucket/podvm-t4.tar.gz$" "$work/gcloud.calls" || fail "no upload: $(cat "$work/gcloud.calls")"
		grep -q "^gcloud compute images create podvm-t4 --project=test-proj --source-uri=gs://test-bucket/podvm-t4.tar.gz --family=caa-gcp-t4-podvm " "$work/gcloud.calls" ||
			fail "no image create: $(cat "$work/gcloud.calls")"
		# A test image at the same place is refused, nothing uploaded.
		: >"$work/gcloud.calls"
		sed -i 's/"production"/"test"/' "$d/podvm.manifest"
		if run "$cmd" >"$work/pack-test.txt" 2>&1; then fail "gce-pack.sh packed a test image"; fi
		grep -q "is a test image" "$work/pack-test.txt" || fail "gce-pack.sh on a test image: $(cat "$work/pack-test.txt")"
		[ ! -s "$work/gcloud.calls" ] || fail "gce-pack.sh called gcloud for a test image: $(cat "$work/gcloud.calls")"
		;;
	*) fail "docs-test does not know the step-1 command '$cmd': teach it, or move it out of the step" ;;
	esac
	n=$((n + 1))
done <<<"$install_cmds"
[ "$i" = 3 ] || fail "install.md's step 1 has $i commands, the test knows 3"

# The console check: the slot line as the image's slot-report prints it for
# a production image with every slot filled (the script run on a copy of
# its tree), among other console lines.
r=$work/root
mkdir -p "$r/usr/lib/caa-gcp-t4" "$r/usr/local/bin" "$r/pause_bundle/rootfs"
echo production >"$r/usr/lib/caa-gcp-t4/image-kind"
for s in kata-agent agent-protocol-forwarder process-user-data attestation-agent confidential-data-hub api-server-rest; do
	echo "$s" >"$r/usr/local/bin/$s"
	(cd "$r/usr/local/bin" && sha256sum "$s") >>"$r/usr/lib/caa-gcp-t4/guest-binaries.sha256"
done
echo '{}' >"$r/pause_bundle/config.json"
install -m 0755 /dev/null "$r/pause_bundle/rootfs/pause"
sed -e "s|/usr/lib/caa-gcp-t4/|$r/usr/lib/caa-gcp-t4/|g" -e "s|/usr/local/bin/|$r/usr/local/bin/|g" -e "s|/pause_bundle/|$r/pause_bundle/|g" -e 's|/dev/console|/nonexistent|g' \
	podvm/mkosi.extra/usr/lib/caa-gcp-t4/slot-report >"$work/slot-report"
{
	echo '[    3.1] systemd[1]: Starting caa-gcp-t4-slots.service'
	echo 'CAA-GCP-T4-GPU {"state":"ready","gpus":1}'
	sh "$work/slot-report"
	echo 'CAA-GCP-T4-STANDIN not a line the check shows'
} >"$work/console.txt"
run "$console_install" >"$work/console-out.txt" 2>&1 || fail "the console check failed: $(cat "$work/console-out.txt")"
grep -q '^gcloud compute instances get-serial-port-output PODVM --zone us-central1-a --project test-proj$' "$work/gcloud.calls" || fail "console check called $(cat "$work/gcloud.calls")"
[ "$(wc -l <"$work/console-out.txt")" = 2 ] || fail "the console check shows $(cat "$work/console-out.txt")"
want=$(grep -o 'CAA-GCP-T4-SLOTS {"image":"production"[^`]*' docs/install.md | head -n 1)
[ -n "$want" ] || fail "install.md does not say what the slot line starts with"
grep -qF "$want" "$work/console-out.txt" || fail "the slot line '$(grep SLOTS "$work/console-out.txt")' does not start as install.md says: '$want'"
grep -q '"confidential-data-hub":"ok"' "$work/console-out.txt" || fail "no CDH ok in $(cat "$work/console-out.txt")"
n=$((n + 1))

# The build guide's boot-sequence table names every unit on the agent's
# path that the image ships (a .path unit that starts the agent included),
# and says the agent waits for CDH's socket, as kata-agent.path makes it.
table=$(sed -n '/^### Boot sequence/,/^How the waits are bounded/p' docs/podvm-build-guide.md)
for u in kata-agent.path kata-agent.service process-user-data.service attestation-agent.service confidential-data-hub.service api-server-rest.service agent-protocol-forwarder.path caa-gcp-t4-notice.socket caa-gcp-t4-notice.service caa-gcp-t4-cache-open.service caa-gcp-t4-cache-mirror.service caa-gcp-t4-cache-store.service; do
	[ -f "podvm/mkosi.extra/usr/lib/systemd/system/$u" ] || fail "the image has no $u"
	grep -q "^| \`$u\`" <<<"$table" || grep -q "^| \`${u%.*}\.path\` → " <<<"$table" || fail "the build guide's boot-sequence table has no row for $u"
done
grep -q '^PathExists=/run/confidential-containers/cdh.sock$' podvm/mkosi.extra/usr/lib/systemd/system/kata-agent.path || fail "kata-agent.path no longer waits for CDH's socket; the guide says it does"
# The notice endpoint the guide and the runbook name is the one the socket opens.
grep -q '^ListenStream=127.0.0.1:8007$' podvm/mkosi.extra/usr/lib/systemd/system/caa-gcp-t4-notice.socket || fail "caa-gcp-t4-notice.socket no longer listens on 127.0.0.1:8007; the guide says it does"
grep -q 'http://127.0.0.1:8007/v1/notice' docs/podvm-build-guide.md || fail "the build guide does not name the notice endpoint"
grep -q 'default="http://127.0.0.1:8007/v1/notice"' install/examples/mistral-tp2/drain-on-notice.py || fail "the serving example's sidecar does not default to the podVM's notice endpoint"
# The cache mirror's address and mount the guide and docs/cache.md give are
# the unit's.
grep -q '^ExecStart=/usr/bin/podvm-cache-mirror -dir /run/caa-gcp-t4/cache -listen 127.0.0.1:5000$' podvm/mkosi.extra/usr/lib/systemd/system/caa-gcp-t4-cache-mirror.service ||
	fail "caa-gcp-t4-cache-mirror.service no longer serves /run/caa-gcp-t4/cache on 127.0.0.1:5000; the guide and docs/cache.md say it does"
grep -q '^Where=/run/caa-gcp-t4/cache$' 'podvm/mkosi.extra/usr/lib/systemd/system/run-caa\x2dgcp\x2dt4-cache.mount' || fail "the cache disk's mount point is not the one the guide names"
grep -q '^Options=ro,noload,nodev,nosuid,noexec,nosymfollow$' 'podvm/mkosi.extra/usr/lib/systemd/system/run-caa\x2dgcp\x2dt4-cache.mount' || fail "the cache disk's mount options are not the ones the guide names"
for d in docs/podvm-build-guide.md docs/cache.md; do
	for w in 127.0.0.1:5000 ro,noload,nodev,nosuid,noexec,nosymfollow; do
		grep -qF "$w" "$d" || fail "$d does not name the mirror's $w"
	done
done
! grep -q 'does not wait for a CDH' docs/podvm-build-guide.md || fail "the build guide says the agent does not wait for CDH; kata-agent.path makes it wait"
n=$((n + 1))
echo "docs-test: ok ($n checks; $repo)"
