#!/usr/bin/env bash
# Builds the podVM disk image with mkosi, or reuses a cached build whose
# inputs hash to the same key, and prints the directory holding it:
#   podvm.raw  podvm.efi  podvm.roothash  podvm.manifest  podvm.nvidia-modules.json
#   build-info.json  SHA256SUMS  (signed builds: podvm.db.crt  podvm.db.der)
# podvm.manifest is mkosi's package list plus, under "caa-gcp-t4", every
# binary no Debian package installed (name, version, source, sha256, path),
# the UKI stub, and whether and with which certificate the image is signed.
#
# Inputs of the key: every file under podvm/ that mkosi reads, the generated
# apt sources, the mkosi version, the gpu-init/podvm-notice/podvm-cache-mirror/podvm-cache-store/nvidia-ctk/
# nvidia-cdi-hook binaries, the guest binaries, the UKI stub and the signing certificate.
# Package versions in the archive are not part of it: pin
# PODVM_DEBIAN_MIRROR to a snapshot for a fixed universe.
#
# Secure Boot: with PODVM_SB_KEY and PODVM_SB_CERT (PEM, RSA) the NVIDIA
# modules (in mkosi.postinst) and the UKI (sign-uki.sh) are signed with that
# key, and the certificate is what the VM's db must hold (gce-pack.sh
# prints the gcloud call). Without them the image is unsigned, which the
# manifest says: boot it with Secure Boot off.
#
# Environment:
#   PODVM_BINARIES        guest binaries input dir (default podvm/binaries)
#   PODVM_IMAGE_KIND      production (default): refused, before anything is
#                         built, unless kata-agent, agent-protocol-forwarder,
#                         process-user-data and confidential-data-hub are all
#                         in the input; test: any slot may be empty or hold a
#                         stand-in, and the image says so (slot report line,
#                         manifest, /etc/os-release); gce-pack.sh refuses it
#   PODVM_DEBIAN_MIRROR   Debian archive URL (default: this machine's apt source)
#   PODVM_DEBIAN_SECURITY_MIRROR  security archive URL (default: likewise)
#   PODVM_SNAPSHOT=1      the mirrors are snapshots: accept expired Release files
#   PODVM_CACHE           cache root (default ${XDG_CACHE_HOME:-~/.cache}/caa-gcp-t4)
#   PODVM_FORCE=1         rebuild even if a cached image matches
#   PODVM_OUT=<dir>       build into this directory instead (no cache, not even
#                         mkosi's incremental one unless PODVM_INCREMENTAL=1; podvm-verify)
#   PODVM_SB_KEY, PODVM_SB_CERT  Secure Boot signing key and certificate (PEM)
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

binaries=${PODVM_BINARIES:-$repo/podvm/binaries}
kind=${PODVM_IMAGE_KIND:-production}
case "$kind" in
production | test) ;;
*) echo "podvm: PODVM_IMAGE_KIND=$kind: want production (the default) or test" >&2; exit 1 ;;
esac
cache=${PODVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/caa-gcp-t4}
mkdir -p "$cache"
gen=$(mktemp -d "$cache/podvm-inputs.XXXXXX")
sign=""
out=""
cleanup() { rm -rf "$gen" ${sign:+"$sign"} ${out:+"$out"}; }
trap cleanup EXIT

# 0. The guest binaries first, before the host set-up, the lock and
#    anything slow: a production image without the programs that run pods
#    is refused here, in seconds (stage-binaries.sh names what is missing
#    and the command that provides it), and bad input (a checksum that does
#    not match, an unknown slot, a missing VERSIONS line) is refused with
#    nothing staged.
PODVM_IMAGE_KIND=$kind podvm/scripts/stage-binaries.sh "$binaries" "$gen/binaries-tree"

podvm/scripts/setup-host.sh
# One build at a time per cache: builds share mkosi's incremental cache.
exec 9>"$cache/podvm.lock"
flock 9

# The signing key is copied into $sign for mkosi.postinst's sign-file (mkosi
# mounts it read-write into the build sandbox as a build source) and
# removed on exit; only the certificate goes into the inputs and the key.

# 0. Secure Boot signing inputs: both or neither, a matching RSA pair.
sbkey=${PODVM_SB_KEY:-}
sbcert=${PODVM_SB_CERT:-}
if [ -n "$sbkey" ] || [ -n "$sbcert" ]; then
	if [ -z "$sbkey" ] || [ -z "$sbcert" ]; then
		echo "podvm: set both PODVM_SB_KEY (PEM private key) and PODVM_SB_CERT (PEM certificate), or neither for an unsigned image" >&2
		exit 1
	fi
	[ -r "$sbkey" ] || { echo "podvm: PODVM_SB_KEY=$sbkey is not a readable file" >&2; exit 1; }
	[ -r "$sbcert" ] || { echo "podvm: PODVM_SB_CERT=$sbcert is not a readable file" >&2; exit 1; }
	openssl x509 -in "$sbcert" -noout 2>/dev/null || { echo "podvm: PODVM_SB_CERT=$sbcert is not a PEM X.509 certificate" >&2; exit 1; }
	# RSA: the kernel's module signatures and UEFI's db take RSA-2048 and up,
	# and an RSA PKCS#1 v1.5 signature is reproducible (ECDSA's is not).
	openssl rsa -in "$sbkey" -check -noout >/dev/null 2>&1 ||
		{ echo "podvm: PODVM_SB_KEY=$sbkey is not a PEM RSA private key (the UEFI db and the kernel's module check need RSA; an ECDSA signature would also differ on every build)" >&2; exit 1; }
	if [ "$(openssl pkey -in "$sbkey" -pubout 2>/dev/null | sha256sum)" != "$(openssl x509 -in "$sbcert" -noout -pubkey | sha256sum)" ]; then
		echo "podvm: PODVM_SB_KEY and PODVM_SB_CERT are not a pair (the certificate's public key is another key's)" >&2
		exit 1
	fi
	sign=$(mktemp -d "$cache/podvm-signing.XXXXXX")
	chmod 0700 "$sign"
	install -m 0600 "$sbkey" "$sign/db.key"
	openssl x509 -in "$sbcert" -out "$sign/db.crt"
	mkdir -p "$gen/signing"
	cp "$sign/db.crt" "$gen/signing/db.crt"
fi

# 1. Tools that go into the image: gpu-init (static, the GPU init unit),
#    podvm-notice (static, GCE's notices for the pod's containers),
#    podvm-cache-mirror (static, the cache disk's registry mirror) and
#    podvm-cache-store (static, the disk's pre-unpacked store handed to
#    image-rs), the binaries of ours in the podVM, and NVIDIA's CDI tools.
tools=$gen/tools-tree/usr/bin
mkdir -p "$tools" "$gen/tools-tree/usr/lib/caa-gcp-t4"
for b in gpu-init podvm-notice podvm-cache-mirror podvm-cache-store; do
	(cd gcp-t4 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -buildid=" -o "$tools/$b" "./cmd/$b")
done
nvbin=$(podvm/scripts/nvidia-tools.sh)
install -m 0755 "$nvbin/nvidia-ctk" "$nvbin/nvidia-cdi-hook" "$tools/"

# 1b. The UKI's stub: Debian's systemd-boot-efi from bookworm-backports (the
#     host's, installed by setup-host.sh), not bookworm's 252. The 252 stub
#     has a section alignment of 0x200, and ukify (254) merges the kernel's
#     SBAT lines into its .sbat section in place, so .sbat then overlaps
#     .sdmagic in memory: the stub prints "Overlapping PE sections detected.
#     Boot may fail due to image memory corruption!". 254's stub aligns its
#     sections to 4 KiB, which leaves room, and it loads the kernel payload
#     under Secure Boot without a signature of its own (src/boot/efi/linux.c).
#     mkosi builds the UKI from the image tree's stub, so it goes in as an
#     extra tree; the image's RemoveFiles= drops it after the UKI is built.
stub=/usr/lib/systemd/boot/efi/linuxx64.efi.stub
stubver=$(dpkg-query -W -f='${Version}' systemd-boot-efi 2>/dev/null || true)
if [ ! -f "$stub" ] || [ -z "$stubver" ]; then
	echo "podvm: no $stub (systemd-boot-efi from bookworm-backports; podvm/scripts/setup-host.sh)" >&2
	exit 1
fi
align=$(/usr/bin/python3 -c 'import pefile, sys; print(pefile.PE(sys.argv[1], fast_load=True).OPTIONAL_HEADER.SectionAlignment)' "$stub")
[ "$align" -ge 4096 ] || { echo "podvm: $stub (systemd-boot-efi $stubver) has a section alignment of $align; the UKI needs >= 4096 (systemd >= 254's stub)" >&2; exit 1; }
mkdir -p "$gen/tools-tree/usr/lib/systemd/boot/efi"
install -m 0644 "$stub" "$gen/tools-tree/usr/lib/systemd/boot/efi/linuxx64.efi.stub"

# 2. The image's kind, in the image: the slot report prints it on the
#    console, /etc/os-release carries it (mkosi.finalize), the manifest too.
echo "$kind" >"$gen/tools-tree/usr/lib/caa-gcp-t4/image-kind"
# 2a. The guest-components commit of the image's CDH, whose image-rs reads
#     the cache disk's store: the tag of its pin (podvm/guest-artefacts.pins,
#     <commit>-<arch>). podvm-cache-store hands image-rs only a store written
#     for this commit. Part of the cache key through the tools tree.
gcref=$(awk '$1 == "confidential-data-hub" {print $2}' podvm/guest-artefacts.pins)
gccommit=${gcref##*:}
gccommit=${gccommit%%-*}
[[ "$gccommit" =~ ^[0-9a-f]{40}$ ]] ||
	{ echo "podvm: podvm/guest-artefacts.pins: the confidential-data-hub reference '$gcref' has no <40-hex commit>-<arch> tag" >&2; exit 1; }
echo "$gccommit" >"$gen/tools-tree/usr/lib/caa-gcp-t4/guest-components"

# 2b. Every file in the image that no Debian package installed, with its
#     version, source and sha256: /usr/lib/caa-gcp-t4/binaries.json inside
#     the image, and the same list under "caa-gcp-t4" in podvm.manifest.
# Our binaries' versions: the last commit that changed their sources
# (workspace builds carry no VCS stamp), "-modified" if they differ from it,
# and the Go release; unrelated commits leave them, and so the cache key,
# unchanged.
ourrev() {
	local bin=$1 r
	shift
	r=$(git log -1 --format=%h --abbrev=12 -- "$@" gcp-t4/go.mod gcp-t4/go.sum 2>/dev/null || true)
	if [ -n "$r" ] && [ -n "$(git status --porcelain -- "$@" gcp-t4/go.mod gcp-t4/go.sum 2>/dev/null)" ]; then r="$r-modified"; fi
	echo "${r:-no-git}+$(go version "$tools/$bin" | awk '{print $2}')"
}
rev=$(ourrev gpu-init gcp-t4/cmd/gpu-init gcp-t4/internal/gpuinit)
noticerev=$(ourrev podvm-notice gcp-t4/cmd/podvm-notice gcp-t4/internal/notice)
mirrorrev=$(ourrev podvm-cache-mirror gcp-t4/cmd/podvm-cache-mirror gcp-t4/internal/cachemirror)
storerev=$(ourrev podvm-cache-store gcp-t4/cmd/podvm-cache-store gcp-t4/internal/cachestore gcp-t4/internal/imagestore)
nvver=$("$tools/nvidia-ctk" --version | sed -n 's/.*version \([^ ]*\).*/\1/p' | head -n 1)
{
	printf 'gpu-init\t%s\t%s\tgcp-t4/cmd/gpu-init (this repository)\t/usr/bin/gpu-init\n' "$(sha256sum "$tools/gpu-init" | cut -c1-64)" "$rev"
	printf 'podvm-notice\t%s\t%s\tgcp-t4/cmd/podvm-notice (this repository)\t/usr/bin/podvm-notice\n' "$(sha256sum "$tools/podvm-notice" | cut -c1-64)" "$noticerev"
	printf 'podvm-cache-mirror\t%s\t%s\tgcp-t4/cmd/podvm-cache-mirror (this repository)\t/usr/bin/podvm-cache-mirror\n' "$(sha256sum "$tools/podvm-cache-mirror" | cut -c1-64)" "$mirrorrev"
	printf 'podvm-cache-store\t%s\t%s\tgcp-t4/cmd/podvm-cache-store (this repository)\t/usr/bin/podvm-cache-store\n' "$(sha256sum "$tools/podvm-cache-store" | cut -c1-64)" "$storerev"
	for t in nvidia-ctk nvidia-cdi-hook; do
		printf '%s\t%s\t%s\tgithub.com/NVIDIA/nvidia-container-toolkit/cmd/%s@v%s (Go module)\t/usr/bin/%s\n' "$t" "$(sha256sum "$tools/$t" | cut -c1-64)" "$nvver" "$t" "$nvver" "$t"
	done
	awk -F'\t' '{printf "%s\t%s\t%s\t%s\t/usr/local/bin/%s\n", $1, $2, $3, $4, $1}' "$gen/binaries-tree/usr/lib/caa-gcp-t4/guest-binaries.tsv"
} | jq -R -s 'split("\n") | map(select(length > 0) | split("\t") | {name: .[0], sha256: .[1], version: .[2], source: .[3], path: .[4]}) | {binaries: .}' \
	>"$gen/binaries.json"
cp "$gen/binaries.json" "$gen/tools-tree/usr/lib/caa-gcp-t4/binaries.json"

# 3. apt sources for the build (mkosi's own list would add the debug archive).
mirror=$(podvm/scripts/debian-mirror.sh)
security=${PODVM_DEBIAN_SECURITY_MIRROR:-}
if [ -z "$security" ]; then
	security=$(awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm-security/ {print u; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
fi
security=${security:-${mirror%/debian}/debian-security}
pm=$gen/pkgmngr/etc/apt
mkdir -p "$pm/sources.list.d" "$pm/apt.conf.d"
cat >"$pm/sources.list.d/mkosi.sources" <<SRC
Types: deb
URIs: ${mirror%/}
Suites: bookworm bookworm-updates
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${security%/}
Suites: bookworm-security
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
if [ "${PODVM_SNAPSHOT:-0}" = 1 ]; then
	echo 'Acquire::Check-Valid-Until "false";' >"$pm/apt.conf.d/10-snapshot.conf"
fi

# 4. Cache key over every input.
mkosi_version=$(mkosi --version | awk '{print $2}')
key=$( {
	echo "mkosi $mkosi_version"
	find podvm -path podvm/binaries -prune -o -type f ! -name '*.md' ! -name '*.pins' ! -name podvm-binaries.sh ! -name build-caa-programs.sh -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
	# Links (the masks in the initrd's extra tree) by their targets.
	find podvm -path podvm/binaries -prune -o -type l -printf '%p -> %l\n' | LC_ALL=C sort
	(cd "$gen" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
} | sha256sum | cut -c1-16)

if [ -n "${PODVM_OUT:-}" ]; then
	final=$PODVM_OUT
else
	final=$cache/podvm-$key
	if [ "${PODVM_FORCE:-0}" != 1 ] && [ -f "$final/SHA256SUMS" ]; then
		echo "podvm: inputs unchanged (key $key), reusing $final" >&2
		echo "$final"
		exit 0
	fi
fi

# 5. Build. The workspace must be outside the config dir; mkosi's incremental
#    cache keeps the package-installed tree (the DKMS compile) across builds
#    whose package set is unchanged.
out=$(mktemp -d "$cache/podvm-build.XXXXXX")
mkdir -p "$cache/mkosi-cache" "$cache/mkosi-packages" "$cache/mkosi-workspace"
start=$(date +%s)
# ukify runs under this interpreter; a python3 earlier on PATH (pyenv, venv)
# may lack the pefile module from Debian.
export MKOSI_INTERPRETER=${MKOSI_INTERPRETER:-/usr/bin/python3}
incremental=yes
if [ -n "${PODVM_OUT:-}" ] && [ "${PODVM_INCREMENTAL:-0}" != 1 ]; then
	incremental=no
fi
signargs=()
if [ -n "$sign" ]; then
	# mkosi.postinst finds the key and certificate here (sign-file).
	signargs=(--build-sources="$sign:caa-gcp-t4-signing")
fi
mkosi -C podvm \
	--package-manager-tree="$repo/podvm/pkgmngr,$gen/pkgmngr" \
	--extra-tree="$gen/tools-tree" \
	--extra-tree="$gen/binaries-tree" \
	"${signargs[@]}" \
	--output-dir="$out" \
	--workspace-dir="$cache/mkosi-workspace" \
	--cache-dir="$cache/mkosi-cache" \
	--package-cache-dir="$cache/mkosi-packages" \
	--incremental="$incremental" \
	--force build >&2

# 6. Secure Boot: the UKI signed and put back into the ESP (sign-uki.sh);
#    the modules were signed in mkosi.postinst.
if [ -n "$sign" ]; then
	SOURCE_DATE_EPOCH=1704067200 podvm/scripts/sign-uki.sh "$out" "$sign/db.key" "$sign/db.crt"
	secure_boot=$(jq -n --arg subject "$(openssl x509 -in "$sign/db.crt" -noout -subject -nameopt RFC2253 | sed 's/^subject=//')" \
		--arg sha256 "$(openssl x509 -in "$sign/db.crt" -outform DER | sha256sum | cut -c1-64)" \
		--arg tool "$(osslsigncode --version 2>&1 | head -n 1)" \
		'{signed: true, certificate: {subject: $subject, sha256_der: $sha256, files: ["podvm.db.crt", "podvm.db.der"]},
		  uki: "signed (Authenticode, sha256, signing time 2024-01-01T00:00:00Z)", sign_tool: $tool,
		  nvidia_modules: "signed (kernel sign-file, sha256)",
		  boot: "Secure Boot on, with this certificate in the db (gce-pack.sh prints the gcloud flags)"}')
else
	echo "podvm: no PODVM_SB_KEY/PODVM_SB_CERT: the image is unsigned (UKI and NVIDIA modules); boot it with Secure Boot off" >&2
	secure_boot='{"signed": false, "uki": "unsigned", "nvidia_modules": "unsigned", "boot": "Secure Boot off: firmware with Secure Boot refuses the UKI, and a kernel in lockdown the modules. Without Secure Boot the firmware passes any command line it is given to the UKI, so the root hash it embeds pins the root only when attestation checks PCR 12 (see docs/podvm-build-guide.md)"}'
fi
seconds=$(( $(date +%s) - start ))

# 7. Fold the non-Debian binaries, the UKI stub and the signing state into
#    mkosi's package manifest, check the result, then record what it is
#    made of and its checksums.
stubrec=$(jq -n --arg v "$stubver" --arg sha "$(sha256sum "$stub" | cut -c1-64)" \
	'{package: "systemd-boot-efi", version: $v, file: "/usr/lib/systemd/boot/efi/linuxx64.efi.stub", sha256: $sha, source: "Debian bookworm-backports, on the build host"}')
jq --slurpfile b "$gen/binaries.json" --argjson sb "$secure_boot" --argjson stub "$stubrec" \
	--arg kind "$kind" '. + {"caa-gcp-t4": ($b[0] + {image_kind: $kind, secure_boot: $sb, uki_stub: $stub})}' "$out/podvm.manifest" >"$out/podvm.manifest.tmp"
mv "$out/podvm.manifest.tmp" "$out/podvm.manifest"
podvm/scripts/check-image.sh "$out" >&2
cat >"$out/build-info.json" <<INFO
{"key":"$key","image_kind":"$kind","mkosi":"$mkosi_version","build_seconds":$seconds,"incremental":"$incremental","signed":$(jq .signed <<<"$secure_boot"),"raw_bytes":$(stat -c %s "$out/podvm.raw"),"raw_allocated_bytes":$(( $(stat -c %b "$out/podvm.raw") * $(stat -c %B "$out/podvm.raw") ))}
INFO
rm -f "$out"/*.tmp
files=$(cd "$out" && find . -maxdepth 1 -type f ! -name build-info.json -printf '%P\n' | LC_ALL=C sort)
# shellcheck disable=SC2086 # one file name per line, no spaces
(cd "$out" && sha256sum $files >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
chmod 0755 "$out"
if [ -n "${PODVM_OUT:-}" ]; then
	rm -rf "$final"
	mkdir -p "$(dirname "$final")"
fi
rm -rf "$final.old"
if [ -e "$final" ]; then mv "$final" "$final.old"; fi
# test/podvm/run.sh's record that a rebuild reproduced the image: a new
# image must be reproduced again.
rm -f "$final.reproduced"
mv "$out" "$final"
out=""
rm -rf "$final.old"
if [ -z "${PODVM_OUT:-}" ]; then
	# Keep the three newest images (about 1 GB each): every change to the
	# Go tools or podvm/ makes a new key.
	# shellcheck disable=SC2012,SC2010 # names are podvm-<hex key>
	ls -dt "$cache"/podvm-* 2>/dev/null | grep -E '/podvm-[0-9a-f]{16}$' | tail -n +4 | while read -r old; do
		rm -rf "$old" "$old.boot" "$old.reproduced"
	done
fi
echo "podvm: built in ${seconds}s (key $key): $final" >&2
echo "$final"
