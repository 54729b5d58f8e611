#!/usr/bin/env bash
# bench-dist.sh: the module cache on an OCI registry, measured in one run.
#
#   scripts/bench-dist.sh [--keep] [--no-nvidia]
#
#   --keep       keep the work directory (it is always kept when something fails)
#   --no-nvidia  leave out the NVIDIA cell (a quick run of the shard comparison only)
#
# A real registry (Debian's docker-registry, distribution 2.8) runs on a free loopback
# port with its storage in the work directory.
#   shards:  the matrix test driver 1.0.0 and 2.0.0 × 6.1.0-56 and 6.12.117 (4 cells) built
#            from empty caches by one `kpreload build --remote` process, then by two
#            `--shard I/2` processes at once (each with its own cache, as two CI runners
#            or two pods would have), each into a repository of its own. One process with
#            --jobs 2 is measured too: on one 2-CPU machine that is the fair comparison;
#            shards pay off when each runs on a machine of its own.
#   nvidia:  nvidia-535 for 6.1.0-56 built by `kpreload build --remote` into an empty cache
#            (cold: dkms compiles it, then it is pushed), against the same cell taken by a
#            second, empty cache from the registry: `kpreload build --pull-only` (the path an
#            image build or another CI runner takes: the cell's key is computed from the
#            recipe and headers, then the cell is pulled and verified).
# Kernels and sources are fetched first, outside the timings. Progress goes to stderr, a
# markdown table to stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

keep=0
nvidia=1
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --no-nvidia) nvidia=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

k61=6.1.0-56-cloud-amd64
k612=6.12.117+deb12-cloud-amd64
registry=/usr/bin/docker-registry
[ -x "$registry" ] || die "$registry is missing: run scripts/deps.sh"
for tool in dkms go curl; do
  command -v "$tool" >/dev/null || die "$tool is missing: run scripts/deps.sh"
done

work=$(mktemp -d /tmp/kpreload-bench-dist.XXXXXX)
ok=0
regpid=
cleanup() {
  [ -n "$regpid" ] && kill "$regpid" 2>/dev/null || true
  if [ "$ok" = 1 ] && [ "$keep" = 0 ]; then rm -rf "$work"; else echo "work directory kept: $work" >&2; fi
}
trap cleanup EXIT

log "building kpreload"
(cd "$top" && CGO_ENABLED=0 go build -o "$work/kpreload" ./cmd/kpreload)
kp="$work/kpreload"

log "fetching the kernels (not timed)"
for k in "$k61" "$k612"; do "$here/kernels.sh" "$k" >&2; done

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/registry.yml" <<CFG
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $work/registry}}
http: {addr: 127.0.0.1:$port}
CFG
"$registry" serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
regpid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/v2/" >/dev/null && break; sleep 0.1; done
curl -fs "http://127.0.0.1:$port/v2/" >/dev/null || die "the registry did not start: $(tail -5 "$work/registry.log")"
log "registry on 127.0.0.1:$port (distribution $("$registry" --version | awk '{print $3}'))"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
kpb() { # kpb CACHE REPO ARGS...: kpreload build against the registry, JSON to a file
  local cache=$1 repo=$2; shift 2
  "$kp" build --recipes "$top/recipes" --cache "$work/$cache" --remote "oci://127.0.0.1:$port/$repo" \
    --plain-http --docker-config "$work/none.json" --json "$@" >"$work/$cache.json" 2>"$work/$cache.log"
}
cells=(testdriver:$k61 testdriver:$k612 testdriver-2)

log "shards: 1 process, 4 cells"
t=$(now); kpb one bench/one "${cells[@]}" || die "one process failed: $(tail -5 "$work/one.log")"
one=$(since "$t")
log "shards: 1 process, 4 cells, --jobs 2 (two cells at once on this machine)"
t=$(now); kpb onej2 bench/onej2 "${cells[@]}" --jobs 2 || die "one process --jobs 2 failed: $(tail -5 "$work/onej2.log")"
onej2=$(since "$t")
log "shards: 2 processes at once (--shard 1/2, --shard 2/2)"
t=$(now)
kpb s1 bench/two "${cells[@]}" --shard 1/2 & p1=$!
kpb s2 bench/two "${cells[@]}" --shard 2/2 & p2=$!
wait $p1 || die "shard 1/2 failed: $(tail -5 "$work/s1.log")"
wait $p2 || die "shard 2/2 failed: $(tail -5 "$work/s2.log")"
two=$(since "$t")
built2=$(jq -s '[.[][] | select(.state=="ok")] | length' "$work/s1.json" "$work/s2.json")
pushed2=$(jq -s '[.[][] | select(.remote=="pushed")] | length' "$work/s1.json" "$work/s2.json")

if [ "$nvidia" = 1 ]; then
  log "nvidia-535 for $k61: build cold and push (minutes)"
  "$kp" build --recipes "$top/recipes" --cache "$work/warmup" --pull-only --remote "oci://127.0.0.1:$port/none" \
    --plain-http --docker-config "$work/none.json" "nvidia-535:$k61" >/dev/null 2>&1 || true # fetch the source (not timed)
  t=$(now); kpb nvbuild bench/nvidia "nvidia-535:$k61" || die "nvidia build failed: $(tail -5 "$work/nvbuild.log")"
  nvbuild=$(since "$t")
  log "nvidia-535 for $k61: pull into an empty cache (--pull-only)"
  t=$(now); kpb nvpull bench/nvidia --pull-only "nvidia-535:$k61" || die "nvidia pull failed: $(tail -5 "$work/nvpull.log")"
  nvpull=$(since "$t")
  state=$(jq -r '.[0].state' "$work/nvpull.json")
  [ "$state" = pulled ] || die "the pull-only build says $state, not pulled"
  size=$(du -sb "$work/nvpull/objects" | awk '{printf "%.1f MiB", $1/1048576}')
fi

echo "Distributed build benchmark ($(nproc) CPUs, load average at the end $(cut -d' ' -f1-3 /proc/loadavg)); registry: Debian's docker-registry on loopback"
echo
echo "| what | wall time (s) | ratio |"
echo "| --- | ---: | ---: |"
echo "| matrix (test driver 2 versions × 2 kernels, 4 cells), 1 process | $one | 1.00 |"
echo "| the same matrix, 1 process with --jobs 2 | $onej2 | $(awk -v a="$one" -v b="$onej2" 'BEGIN{printf "%.2f× faster", a/b}') |"
echo "| the same matrix, 2 shard processes at once ($built2 cells built, $pushed2 pushed) | $two | $(awk -v a="$one" -v b="$two" 'BEGIN{printf "%.2f× faster", a/b}') |"
if [ "$nvidia" = 1 ]; then
  echo "| nvidia-535 × $k61: build with dkms (cold) and push | $nvbuild | 1.00 |"
  echo "| nvidia-535 × $k61: pull into an empty cache ($size, key computed, verified) | $nvpull | $(awk -v a="$nvbuild" -v b="$nvpull" 'BEGIN{printf "%.0f× faster", a/b}') |"
fi
ok=1
