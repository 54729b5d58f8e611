#!/usr/bin/env bash
# bench-follow.sh: one follow cycle, measured against a local registry.
#
#   scripts/bench-follow.sh [--keep] [--nvidia] [--vm]
#   scripts/bench-follow.sh --cells N
#
#   --keep    keep the work directory (it is always kept when something fails)
#   --nvidia  add the rows of one NVIDIA branch (nvidia-535: minutes of compiling)
#   --vm      add the rows upload → cell in the registry and upload → VM on the new
#             kernel with its driver, from the end-to-end test TestFollowE2E
#             (builder/follow/e2e; KPRELOAD_FOLLOW_TIMINGS names its JSON file)
#   --cells N the scale figure instead: matrices of N/10, 2N/5 and N cells (synthetic
#             recipes × up to 25 synthetic kernels) against a real registry on loopback,
#             every cell already pushed; times one follow cycle and one build with the
#             registry, both with nothing new (the Go benchmark BenchmarkNothingNew of
#             builder/follow: the real cycle, matrix and registry; kernels unpacked by
#             testenv.SyntheticKernel, dkms faked by builder/dkms/dkmstest, package dates
#             from a fake archive: no network). Seconds of work, plus the first cycles
#             that push the cells (not timed).
#
# A real registry (Debian's docker-registry) runs on a free loopback port. The recipe's
# kernel matrix first holds 6.1.0-56 and a cycle pushes its cell (not timed); then
#   nothing new:  `kpreload follow` with nothing to build (the archives are still read
#                 afresh and every cell looked up in the registry);
#   one new kernel: 6.12.117 joins the matrix (as a new upload joins a kernels.select);
#                 the cycle builds and pushes its one cell, against
#   full rebuild: `kpreload build --remote` of the same two-kernel matrix into an empty
#                 cache and a fresh repository, in the same run; ratio = cycle / rebuild.
# Progress goes to stderr, a markdown table to stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

keep=0
nvidia=0
vm=0
scale=
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --cells) [ $# -ge 2 ] || die "--cells needs a number"; scale=$2; shift ;;
    --nvidia) nvidia=1 ;;
    --vm) vm=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

if [ -n "$scale" ]; then
  case "$scale" in ''|*[!0-9]*) die "--cells $scale: want a number of cells" ;; esac
  [ "$scale" -ge 10 ] || die "--cells $scale: want at least 10"
  sizes="$((scale / 10)),$((scale * 2 / 5)),$scale"
  bench_start bench-follow-cells go
  log "scale: matrices of $sizes cells, nothing new (BenchmarkNothingNew; first cycles push every cell, not timed)"
  (cd "$top" && KPRELOAD_BENCH_CELLS=$sizes CGO_ENABLED=0 go test -trimpath -count=1 -run '^$' \
    -bench '^BenchmarkNothingNew$' -benchtime 1x -timeout 60m ./builder/follow/) >"$work/bench.txt" 2>&1 \
    || die "BenchmarkNothingNew failed: $(tail -20 "$work/bench.txt")"
  grep '^BenchmarkNothingNew' "$work/bench.txt" >&2
  echo "Follow scale benchmark ($(nproc) CPUs, load average at the end $(cut -d' ' -f1-3 /proc/loadavg)); registry: Debian's docker-registry on loopback"
  echo
  echo "| cells | follow cycle, nothing new | per cell (CPU) | build --remote, nothing new | per cell (CPU) |"
  echo "| --- | --- | --- | --- | --- |"
  awk '/^BenchmarkNothingNew\/cells=/ {
    n = $1; sub(/.*cells=/, "", n); sub(/-[0-9]+$/, "", n)
    for (i = 3; i < NF; i += 2) v[$(i + 1)] = $i
    printf "| %d | %.2f s | %.2f ms (%.2f ms) | %.2f s | %.2f ms (%.2f ms) |\n", n, v["follow-s"], v["follow-ms/cell"], v["follow-cpu-ms/cell"], v["build-s"], v["build-ms/cell"], v["build-cpu-ms/cell"]
  }' "$work/bench.txt"
  ok=1
  exit 0
fi

k61=6.1.0-56-cloud-amd64
k612=6.12.117+deb12-cloud-amd64
bench_start bench-follow dkms go curl jq

log "building kpreload"
(cd "$top" && CGO_ENABLED=0 go build -o "$work/kpreload" ./cmd/kpreload)
kp="$work/kpreload"
log "fetching the kernels (not timed)"
for k in "$k61" "$k612"; do "$here/kernels.sh" "$k" >&2; done

start_registry
"$kp" cache keygen "$work/team" >/dev/null

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f\n", a / b }'; }
remote() { echo --remote "oci://127.0.0.1:$port/$1" --plain-http --docker-config "$work/none.json"; }

# matrix RECIPE KVER...: the cells RECIPE:KVER the next cycles follow and build, as a
# kernels.select does when a new upload joins it (the recipe itself is read by
# kpreload alone: no second recipe grammar here).
cells=()
matrix() {
  local name=$1; shift
  cells=()
  for k in "$@"; do cells+=("$name:$k"); done
}
follow() { # follow NAME LOG: one cycle of the recipe NAME, JSON to LOG.json
  local name=$1 out=$2
  "$kp" follow "${cells[@]}" --recipes "$top/recipes" --cache "$work/follow-cache-$name" $(remote "follow/$name") \
    --sign "$work/team.key" --json --new-exit-code 0 >"$work/$out.json" 2>"$work/$out.log" \
    || die "follow $name ($out) failed: $(tail -5 "$work/$out.log")"
}

rows=()
bench() { # bench NAME LABEL
  local name=$1 label=$2
  matrix "$name" "$k61"
  log "$label: first cycle for $k61 (not timed)"
  follow "$name" "$name-first"
  log "$label: a cycle with nothing new"
  t=$(now); follow "$name" "$name-nothing"; nothing=$(since "$t")
  [ "$(jq .new "$work/$name-nothing.json")" = 0 ] || die "the cycle with nothing new pushed cells"
  matrix "$name" "$k61" "$k612"
  log "$label: a cycle with one new kernel ($k612)"
  t=$(now); follow "$name" "$name-new"; new=$(since "$t")
  [ "$(jq .new "$work/$name-new.json")" = 1 ] || die "the cycle with one new kernel pushed $(jq .new "$work/$name-new.json") cells, want 1"
  log "$label: full rebuild of the same matrix (kpreload build --remote, empty cache)"
  t=$(now)
  "$kp" build "${cells[@]}" --recipes "$top/recipes" --cache "$work/full-cache-$name" $(remote "full/$name") \
    --sign "$work/team.key" --json >"$work/$name-full.json" 2>"$work/$name-full.log" \
    || die "the full rebuild failed: $(tail -5 "$work/$name-full.log")"
  full=$(since "$t")
  rows+=("| $label: cycle with nothing new | ${nothing} s | |")
  rows+=("| $label: cycle with one new kernel vs full rebuild (2 cells) | ${new} s vs ${full} s | $(ratio "$new" "$full") |")
}

bench testdriver "test driver"
[ "$nvidia" = 1 ] && bench nvidia-535 "nvidia-535"

if [ "$vm" = 1 ]; then
  [ -d "$top/builder/follow/e2e" ] || die "--vm: builder/follow/e2e (TestFollowE2E) is not in this tree"
  log "end to end: TestFollowE2E (VM boots)"
  (cd "$top" && KPRELOAD_FOLLOW_TIMINGS="$work/e2e.json" go test -count=1 -timeout 60m -run TestFollowE2E ./builder/follow/e2e/) >&2 \
    || die "TestFollowE2E failed"
  rows+=("| upload → cell in the registry | $(jq -r '.upload_to_cell_s / 60 | . * 100 | round / 100' "$work/e2e.json") min | |")
  rows+=("| upload → VM on the new kernel with its driver | $(jq -r '.upload_to_vm_s / 60 | . * 100 | round / 100' "$work/e2e.json") min | |")
fi

echo "Follow benchmark ($(nproc) CPUs, load average at the end $(cut -d' ' -f1-3 /proc/loadavg)); registry: Debian's docker-registry on loopback"
echo
echo "| measure | time | ratio |"
echo "| --- | --- | --- |"
printf '%s\n' "${rows[@]}"
ok=1
