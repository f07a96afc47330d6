#!/usr/bin/env bash
# Installs the podVM build and boot-test prerequisites from Debian, idempotently:
# mkosi (pinned, from bookworm-backports, which also brings the systemd >= 254
# tools mkosi needs for disk images), QEMU, OVMF and shellcheck, and the
# tools of the verity root, the Secure Boot signing and the measured-boot test.
#
# bookworm-backports is not in a fresh machine's sources, so it is added here,
# derived from the URIs: of the machine's existing Debian stanza (override with
# PODVM_DEBIAN_MIRROR=<archive URL>) so no archive host is hard-coded.
set -euo pipefail

# The mkosi version the Makefile installs. Supported: 24.x (this pin), 25.x;
# mkosi 14 (bookworm) cannot build disk images; 26 changed Mirror= semantics.
MKOSI_VERSION=${MKOSI_VERSION:-24.3-1~bpo12+1}
BACKPORTS_LIST=/etc/apt/sources.list.d/caa-gcp-t4-backports.sources
# From bookworm-backports with mkosi: systemd-boot (bootctl, the EFI stub) at
# the same 254 version as the systemd mkosi pulls in (ukify ships in
# systemd), and e2fsprogs 1.47.2: bookworm's 1.47.0 `mke2fs -d` copies the
# build tree's atimes/ctimes into the image, so no two root filesystems match.
# systemd-boot-efi also gives the image its UKI stub (build.sh): 254's has
# 4 KiB section alignment, bookworm's 252 does not (see the build guide).
# python3-virt-firmware (virt-fw-vars) enrols the boot test's key in OVMF's
# variable store; it is in backports only.
BACKPORTS_PACKAGES=(systemd-boot systemd-boot-efi e2fsprogs python3-virt-firmware)
# squashfs-tools and cryptsetup-bin (veritysetup) build the verity root;
# osslsigncode signs the UKI with a fixed signing time (sbsign stamps the
# current time, so two signed builds would differ), sbsigntool's sbverify
# checks it; swtpm is the boot test's TPM; openssl makes the test key.
HOST_PACKAGES=(qemu-system-x86 qemu-utils ovmf shellcheck kmod dosfstools mtools fdisk cpio zstd jq xz-utils python3-pefile umoci binutils
	squashfs-tools cryptsetup-bin osslsigncode sbsigntool swtpm openssl)

have_all() {
	[ "$(dpkg-query -W -f='${Version}' mkosi 2>/dev/null || true)" = "$MKOSI_VERSION" ] || return 1
	local p
	for p in "${BACKPORTS_PACKAGES[@]}"; do
		case "$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)" in
		*bpo12*) ;;
		*) return 1 ;;
		esac
	done
	for p in "${HOST_PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || return 1
	done
}

if have_all; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "podVM prerequisites are missing and installing them needs root. Run as root:" >&2
	echo "  sudo $0" >&2
	echo "or install by hand: from bookworm-backports mkosi=$MKOSI_VERSION ${BACKPORTS_PACKAGES[*]}; and ${HOST_PACKAGES[*]}" >&2
	exit 1
fi

# shellcheck source=/dev/null
. /etc/os-release
if [ "${VERSION_CODENAME:-}" != bookworm ]; then
	echo "this set-up targets Debian 12 (bookworm); found ${PRETTY_NAME:-unknown}." >&2
	echo "Elsewhere install mkosi 24.x or 25.x, systemd >= 254 tools, QEMU, OVMF by hand (docs/podvm-build-guide.md)." >&2
	exit 1
fi

mirror=${PODVM_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(podvm/scripts/debian-mirror.sh)
fi

if [ ! -f "$BACKPORTS_LIST" ] || ! grep -q "^URIs: $mirror\$" "$BACKPORTS_LIST"; then
	tmp=$(mktemp "$BACKPORTS_LIST.XXXXXX")
	cat >"$tmp" <<SRC
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
	chmod 0644 "$tmp"
	mv "$tmp" "$BACKPORTS_LIST"
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends -t bookworm-backports "mkosi=$MKOSI_VERSION" "${BACKPORTS_PACKAGES[@]}"
apt-get install -y -qq --no-install-recommends "${HOST_PACKAGES[@]}"
have_all || { echo "podVM prerequisites still missing after apt-get install" >&2; exit 1; }
