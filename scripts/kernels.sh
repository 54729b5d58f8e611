#!/usr/bin/env bash
# kernels.sh [--suite SUITE] KVER...: make sure Debian kernels are unpacked, never installed, in
#   $KPRELOAD_CACHE/kernels/<kver>/          (boot/vmlinuz-<kver>, lib/modules/<kver>, usr/src/...)
# Without KVER: the default kernels (KPRELOAD_KERNELS, scripts/lib.sh).
#
# The work is Go's (builder/archive, through `kpreload kernels fetch`; see its --help): the image
# package (-unsigned when there is one), the headers and their linux-headers-*/linux-kbuild-*
# dependencies, downloaded into $KPRELOAD_CACHE/debs, unpacked into a temporary directory and
# renamed into place with a .complete marker. Kernels already unpacked are kept, and when every
# kernel asked for is, Go is not started at all.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

opts=() kvers=()
while [ $# -gt 0 ]; do
  case "$1" in
    --suite) opts+=(--suite "${2:?--suite needs a suite name}"); shift 2 ;;
    --suite=*) opts+=("$1"); shift ;;
    -*) die "kernels.sh: unknown option $1 (usage: kernels.sh [--suite SUITE] KVER...)" ;;
    *) kvers+=("$1"); shift ;;
  esac
done
[ ${#kvers[@]} -gt 0 ] || kvers=("${KPRELOAD_KERNELS[@]}")

missing=()
for kver in "${kvers[@]}"; do
  [ -f "$KPRELOAD_CACHE/kernels/$kver/.complete" ] || missing+=("$kver")
done
[ ${#missing[@]} -gt 0 ] || exit 0

# Built from this tree (go run caches the binary), so the script and the Go code never disagree.
cache=$(realpath -m "$KPRELOAD_CACHE")
cd "$here/.."
exec "${GO:-go}" run ./cmd/kpreload kernels fetch --cache "$cache" "${opts[@]}" "${missing[@]}"
