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
# Without --suite, each release names its suite (as builder/archive.KernelSuite):
# "+deb13" is trixie, "+deb14" forky, anything else bookworm.
suite=
if [ "${1:-}" = --suite ]; then suite=${2:?--suite needs a suite name}; shift 2; fi
kernel_suite() {
  if [ -n "$suite" ]; then echo "$suite"; return; fi
  case "$1" in *+deb13*) echo trixie ;; *+deb14*) echo forky ;; *) echo bookworm ;; esac
}

[ $# -gt 0 ] || set -- "${KPRELOAD_KERNELS[@]}"
debs="$KPRELOAD_CACHE/debs"
mkdir -p "$debs" "$KPRELOAD_CACHE/kernels" "$KPRELOAD_CACHE/logs"
aptlog="$KPRELOAD_CACHE/logs/kernels-apt.log"

for kver in "$@"; do
  dest="$KPRELOAD_CACHE/kernels/$kver"
  if [ -f "$dest/.complete" ]; then
    continue
  fi
  ksuite=$(kernel_suite "$kver")
  mapfile -t apt_opts < <(apt_suite_opts "$ksuite")
  [ "$ksuite" = bookworm ] || [ ${#apt_opts[@]} -gt 0 ] || die "could not set up apt for suite $ksuite"
  log "fetching kernel $kver ($ksuite)"
  image="linux-image-$kver"
  # The signed image package is a meta package around linux-image-<kver>-unsigned.
  if apt-cache "${apt_opts[@]}" show "$image-unsigned" >/dev/null 2>&1; then image="$image-unsigned"; fi
  apt-cache "${apt_opts[@]}" show "$image" >/dev/null 2>&1 || {
    avail=$(apt-cache "${apt_opts[@]}" search --names-only '^linux-image-[0-9.]+.*-cloud-amd64$' | awk '{print $1}' | sed 's/^linux-image-//' | sort -V | tr '\n' ' ')
    die "kernel $kver is not in the apt archive (suite $ksuite); available cloud kernels: $avail"
  }
  headers="linux-headers-$kver"
  # The headers package depends on the -common headers and linux-kbuild of its series.
  mapfile -t hdeps < <(apt-cache "${apt_opts[@]}" depends "$headers" 2>/dev/null | awk '/Depends: linux-(headers|kbuild)-/ {print $2}')
  pkgs=("$image" "$headers" "${hdeps[@]}")
  (cd "$debs" && for p in "${pkgs[@]}"; do
     ver=$(apt-cache "${apt_opts[@]}" policy "$p" | awk '/Candidate:/ {print $2}')
     ls "${p}_"*.deb >/dev/null 2>&1 || apt-get "${apt_opts[@]}" download -q "$p=$ver" >>"$aptlog" 2>&1 ||
       die "apt-get download $p=$ver failed (log: $aptlog)"
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
