#!/usr/bin/env bash
# build-testdriver.sh KVER OUTDIR [VERSION]: build kpreload's test driver
# (recipes/testdriver, QEMU edu device) for one kernel with the real dkms, in an
# isolated dkms tree (never /var/lib/dkms or /lib/modules), and copy
# kpreload_edu.ko into OUTDIR. VERSION (default: dkms.conf's PACKAGE_VERSION)
# builds the same source as another driver version, e.g. 2.0.0.
# The kernel is fetched with scripts/kernels.sh if it is not unpacked yet.
# Set DKMSBUILD_FLAGS (e.g. "-json" or "-v") to pass flags to the Go builder.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

[ $# -ge 2 ] && [ $# -le 3 ] || die "usage: $0 KVER OUTDIR [VERSION]"
kver=$1
out=$(realpath -m "$2")
version=${3:-}
root=$(cd "$here/.." && pwd)
src="$root/recipes/testdriver"

"$here/kernels.sh" "$kver"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "$version" ]; then
  [[ $version =~ ^[A-Za-z0-9][A-Za-z0-9.+~_-]*$ ]] || die "bad version '$version'"
  cp -r "$src" "$tmp/src"
  sed -i "s/^PACKAGE_VERSION=.*/PACKAGE_VERSION=\"$version\"/" "$tmp/src/dkms.conf"
  src="$tmp/src"
fi

log "building kpreload-edu ${version:-(dkms.conf version)} for $kver"
# shellcheck disable=SC2086 # DKMSBUILD_FLAGS is a list of flags
(cd "$root" && go run ./cmd/dkmsbuild ${DKMSBUILD_FLAGS:-} -src "$src" -kernel "$kver" -out "$out")
