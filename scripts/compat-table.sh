#!/usr/bin/env bash
# compat-table.sh: the recipe × kernel compatibility table, as measured by the real dkms.
#
#   scripts/compat-table.sh [--cache DIR] [--jobs N] [--json FILE] [RECIPE[:KVER]...]
#   scripts/compat-table.sh --from FILE [--from FILE]...
#
# Runs `kpreload build --json` over the given recipes (default: every recipes/nvidia-*.yaml,
# each over its own kernel matrix: the newest 6.1 cloud kernel, the newest bookworm-backports
# 6.12 and the newest trixie cloud kernel) into the module cache DIR (default
# $KPRELOAD_CACHE/store, the cache the end-to-end tests keep: cells already built there are
# reported as cached, never rebuilt), then prints a markdown table with one row per recipe,
# one column per kernel: "ok (N s)" for a cell compiled in this run, "ok (cached)" for one
# the cache already held (same content key), or "failed: <first compiler error>". Failed
# cells are not cached, so they are compiled again on every run. --json FILE keeps
# kpreload's own JSON. Progress goes to stderr; the table to stdout. Hours on 2 cores for
# the whole matrix; not part of CI. --from renders the table from `kpreload build --json`
# outputs kept earlier (--json FILE, or kpreload build --json > FILE) without building; a cell
# in several files takes its last result that is not "cached" (else "cached").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

cache="$KPRELOAD_CACHE/store"
jobs=
json=
args=()
from=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cache) cache=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    --json) json=$2; shift ;;
    --from) from+=("$2"); shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) args+=("$1") ;;
  esac
  shift
done
command -v jq >/dev/null || die "jq is missing: run scripts/deps.sh"
work=$(mktemp -d /tmp/kpreload-compat.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ ${#from[@]} -gt 0 ]; then
  # Merge: per recipe/kernel, the last non-cached result wins.
  jq -s 'add | group_by(.recipe + "/" + .kernel) | map((map(select(.state != "cached")) | last) // last)' "${from[@]}" >"$work/cells.json"
  start=0 end=0
else
if [ ${#args[@]} -eq 0 ]; then
  for f in "$top"/recipes/nvidia-*.yaml; do args+=("$(basename "$f" .yaml)"); done
fi
log "building kpreload"
(cd "$top" && CGO_ENABLED=0 go build -o "$work/kpreload" ./cmd/kpreload)

log "kpreload build ${args[*]} (cache $cache)"
start=$(date +%s)
set +e
(cd "$top" && "$work/kpreload" build --json --cache "$cache" ${jobs:+--jobs "$jobs"} "${args[@]}") >"$work/cells.json"
rc=$?
set -e
end=$(date +%s)
[ -s "$work/cells.json" ] || die "kpreload build printed no JSON (exit $rc)"
[ -z "$json" ] || cp "$work/cells.json" "$json"
fi

# One row per recipe, one column per kernel (sorted by version).
jq -r --arg wall "$((end - start))" '
  def cell: if .state == "ok" then "ok (\(.seconds | floor) s)"
            elif .state == "cached" then "ok (cached)"
            elif .state == "failed" then "failed: `\(.first_error | gsub("\\|"; "\\\\|") | .[0:160])`"
            else .state end;
  (map(.kernel) | unique | sort_by(split(".") | map(tonumber? // 0))) as $kernels
  | (map(.recipe) | unique) as $recipes
  | "| recipe | " + ($kernels | join(" | ")) + " |",
    "| --- |" + ($kernels | map(" --- |") | join("")),
    ($recipes[] as $r
      | "| \($r) | " + ([$kernels[] as $k | (map(select(.recipe == $r and .kernel == $k)) | if length == 0 then "—" else (.[0] | cell) end)] | join(" | ")) + " |"),
    "",
    "\(length) cells: \(map(select(.state == "ok")) | length) compiled, \(map(select(.state == "cached")) | length) cached, \(map(select(.state == "failed")) | length) failed; wall time \(if $wall == "0" then "n/a (merged)" else "\($wall) s" end) (compile seconds summed: \(map(select(.state == "ok") | .seconds) | add // 0 | floor) s)"
' "$work/cells.json"
