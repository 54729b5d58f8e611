#!/usr/bin/env bash
# plan-bundle.sh CACHE KERNEL OUT: copy what `kpreload plan` reads from a module cache for
# one kernel (the boot index index/KERNEL.json and every supported-gpus.json it names),
# without the modules themselves, into OUT, laid out as a cache. A plan against OUT gives
# the same decision as against CACHE; the bundle is small enough to carry to a GPU machine
# (a cache with 535 and 550 sets is several hundred MB, the bundle well under 1 MB).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ $# -eq 3 ] || die "usage: plan-bundle.sh CACHE KERNEL OUT"
cache=$1 kernel=$2 out=$3
idx="$cache/index/$kernel.json"
[ -f "$idx" ] || die "$cache has no boot index for $kernel (kernels: $(ls "$cache/index" 2>/dev/null | sed 's/\.json$//' | tr '\n' ' '))"
command -v jq >/dev/null || die "jq is missing: run scripts/deps.sh"
rm -rf "$out.tmp" && mkdir -p "$out.tmp/index"
cp "$idx" "$out.tmp/index/"
jq -r '.sets[] | select(.supported_gpus != null) | "\(.dir)/\(.supported_gpus)"' "$idx" | sort -u | while read -r rel; do
  mkdir -p "$(dirname "$out.tmp/index/$rel")"
  cp "$cache/index/$rel" "$out.tmp/index/$rel"
done
rm -rf "$out" && mv "$out.tmp" "$out"
jq -r '.sets[] | "\(.driver) \(.version) \(.flavor)"' "$idx" | sed 's/^/  /' >&2
log "plan bundle for $kernel in $out ($(du -sh "$out" | cut -f1))"
