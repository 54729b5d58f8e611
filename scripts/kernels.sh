#!/usr/bin/env bash
# kernels.sh [--suite SUITE] KVER...: fetch a Debian kernel image and its headers and
# unpack them, without installing anything system-wide, into
#   $KPRELOAD_CACHE/kernels/<kver>/          (boot/vmlinuz-<kver>, lib/modules/<kver>, usr/src/...)
# Each tree is unpacked into a temporary directory and renamed into place, so an
# interrupted fetch never leaves a half tree. Already-present trees are kept.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

# --suite SUITE reads another Debian suite (trixie, sid, ...) through kpreload's
# private apt configuration (apt_suite_opts); the default is the host's bookworm sources.
suite=
if [ "${1:-}" = --suite ]; then suite=${2:?--suite needs a suite name}; shift 2; fi
mapfile -t apt_opts < <(apt_suite_opts "$suite")
[ -z "$suite" ] || [ "$suite" = bookworm ] || [ ${#apt_opts[@]} -gt 0 ] || die "could not set up apt for suite $suite"

[ $# -gt 0 ] || set -- "${KPRELOAD_KERNELS[@]}"
debs="$KPRELOAD_CACHE/debs"
mkdir -p "$debs" "$KPRELOAD_CACHE/kernels"

for kver in "$@"; do
  dest="$KPRELOAD_CACHE/kernels/$kver"
  if [ -f "$dest/.complete" ]; then
    continue
  fi
  log "fetching kernel $kver"
  image="linux-image-$kver"
  # The signed image package is a meta package around linux-image-<kver>-unsigned.
  if apt-cache "${apt_opts[@]}" show "$image-unsigned" >/dev/null 2>&1; then image="$image-unsigned"; fi
  apt-cache "${apt_opts[@]}" show "$image" >/dev/null 2>&1 || {
    avail=$(apt-cache "${apt_opts[@]}" search --names-only '^linux-image-[0-9.]+.*-cloud-amd64$' | awk '{print $1}' | sed 's/^linux-image-//' | sort -V | tr '\n' ' ')
    die "kernel $kver is not in the apt archive (suite ${suite:-bookworm}); available cloud kernels: $avail"
  }
  headers="linux-headers-$kver"
  # The headers package depends on the -common headers and linux-kbuild of its series.
  mapfile -t hdeps < <(apt-cache "${apt_opts[@]}" depends "$headers" 2>/dev/null | awk '/Depends: linux-(headers|kbuild)-/ {print $2}')
  pkgs=("$image" "$headers" "${hdeps[@]}")
  (cd "$debs" && for p in "${pkgs[@]}"; do
     ver=$(apt-cache "${apt_opts[@]}" policy "$p" | awk '/Candidate:/ {print $2}')
     ls "${p}_"*.deb >/dev/null 2>&1 || apt-get "${apt_opts[@]}" download -q "$p=$ver" >&2
   done)
  tmp=$(mktemp -d "$KPRELOAD_CACHE/kernels/.tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  for p in "${pkgs[@]}"; do
    dpkg -x "$(ls "$debs/${p}_"*.deb | head -n1)" "$tmp"
  done
  # Debian puts vmlinuz under /boot and modules under /lib/modules (or /usr/lib/modules).
  [ -d "$tmp/lib/modules/$kver" ] || { [ -d "$tmp/usr/lib/modules/$kver" ] && mkdir -p "$tmp/lib/modules" && mv "$tmp/usr/lib/modules/$kver" "$tmp/lib/modules/"; }
  [ -f "$tmp/boot/vmlinuz-$kver" ] || die "no vmlinuz in $image"
  [ -f "$tmp/lib/modules/$kver/modules.dep" ] || depmod -b "$tmp" "$kver"
  touch "$tmp/.complete"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  trap - EXIT
  log "kernel $kver ready in $dest"
done
