#!/usr/bin/env bash
# bench-dist.sh: the module cache on an OCI registry, measured in one run.
#
#   scripts/bench-dist.sh [--keep] [--no-nvidia] [--no-shards] [--no-hook] [--cell RECIPE]
#                         [--baseline REV] [--rounds N]
#
#   --keep          keep the work directory (it is always kept when something fails)
#   --no-nvidia     leave out the NVIDIA cell (a quick run of the shard comparison only)
#   --no-shards     leave out the shard comparison (the NVIDIA cell and trust only)
#   --no-hook       leave out the kernel hook's rows
#   --cell RECIPE   the recipe whose cell the nvidia and trust rows build, push and pull
#                   (default nvidia-535; testdriver makes a run of minutes, not an hour)
#   --baseline REV  the revision the trust and hook rows compare with
#                   (default 0f31fb3: the last before signatures and re-derived metadata)
#   --rounds N      rounds of the trust and hook comparisons (default 3; medians)
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
#   trust:   the NVIDIA cell pushed from the local cache into a fresh repository and pulled
#            into an empty cache (kpreload cache push / cache pull), by the --baseline build
#            (no signature, metadata taken from set.json) and by this one with --sign and
#            --trust (the cell signed; on pull the signature checked and every module's
#            metadata read again from its file), N rounds alternating, medians; the ratio
#            of this build's time to the baseline's (goal: at most 1.1).
#   hook:    `kpreload kernel-hook postinst 6.12.117 --root R` on a root (systemd-boot, the
#            kernel's image and modules, kpreload's /init) whose cache has the --cell driver
#            for 6.1.0-56 and whose /etc/kpreload/remote.yaml names a registry holding the
#            cell for 6.12.117, signed: the hook pulls and verifies the cell, builds the
#            initramfs and updates the loader. A fresh copy of the root per run, N rounds
#            alternating the --baseline build and this one, medians (goal: at most 1.2).
# Kernels and sources are fetched first, outside the timings. Progress goes to stderr, a
# markdown table to stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

keep=0
nvidia=1
shards=1
hook=1
cell=nvidia-535
baseline=0f31fb3
rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --no-nvidia) nvidia=0 ;;
    --no-shards) shards=0 ;;
    --no-hook) hook=0 ;;
    --cell) cell=$2; shift ;;
    --baseline) baseline=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

k61=6.1.0-56-cloud-amd64
k612=6.12.117+deb12-cloud-amd64
bench_start bench-dist dkms go curl

log "building kpreload"
(cd "$top" && CGO_ENABLED=0 go build -o "$work/kpreload" ./cmd/kpreload)
kp="$work/kpreload"
if [ "$nvidia" = 1 ] || [ "$hook" = 1 ]; then
  log "building kpreload at $baseline (the trust and hook rows' baseline)"
  mkdir -p "$work/base-src"
  git -C "$top" archive "$baseline" | tar -x -C "$work/base-src"
  (cd "$work/base-src" && CGO_ENABLED=0 go build -o "$work/kpreload-base" ./cmd/kpreload)
fi

log "fetching the kernels (not timed)"
for k in "$k61" "$k612"; do "$here/kernels.sh" "$k" >&2; done

start_registry
log "registry on 127.0.0.1:$port (distribution $("$REGISTRY" --version | awk '{print $3}'))"

kpb() { # kpb CACHE REPO ARGS...: kpreload build against the registry, JSON to a file
  local cache=$1 repo=$2; shift 2
  "$kp" build --recipes "$top/recipes" --cache "$work/$cache" --remote "oci://127.0.0.1:$port/$repo" \
    --plain-http --docker-config "$work/none.json" --json "$@" >"$work/$cache.json" 2>"$work/$cache.log"
}
cells=(testdriver:$k61 testdriver:$k612 testdriver-2)

if [ "$shards" = 1 ]; then
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
fi

if [ "$nvidia" = 1 ]; then
  log "$cell for $k61: build cold and push (minutes)"
  "$kp" build --recipes "$top/recipes" --cache "$work/warmup" --pull-only --remote "oci://127.0.0.1:$port/none" \
    --plain-http --docker-config "$work/none.json" "$cell:$k61" >/dev/null 2>&1 || true # fetch the source (not timed)
  t=$(now); kpb nvbuild bench/nvidia "$cell:$k61" || die "nvidia build failed: $(tail -5 "$work/nvbuild.log")"
  nvbuild=$(since "$t")
  log "$cell for $k61: pull into an empty cache (--pull-only)"
  t=$(now); kpb nvpull bench/nvidia --pull-only "$cell:$k61" || die "nvidia pull failed: $(tail -5 "$work/nvpull.log")"
  nvpull=$(since "$t")
  state=$(jq -r '.[0].state' "$work/nvpull.json")
  [ "$state" = pulled ] || die "the pull-only build says $state, not pulled"
  size=$(du -sb "$work/nvpull/objects" | awk '{printf "%.1f MiB", $1/1048576}')

  "$kp" cache keygen "$work/team" >/dev/null
  rem() { echo --remote "oci://127.0.0.1:$port/$1" --plain-http --docker-config "$work/none.json"; }
  median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  : >"$work/t-basepush"; : >"$work/t-push"; : >"$work/t-basepull"; : >"$work/t-pull"
  for r in $(seq "$rounds"); do
    log "trust round $r of $rounds: push and pull of the $cell cell, $baseline and this build"
    t=$(now); "$work/kpreload-base" cache push --cache "$work/nvbuild" $(rem "trust/base$r") >/dev/null 2>>"$work/trust.log" || die "baseline push failed: $(tail -3 "$work/trust.log")"
    since "$t" >>"$work/t-basepush"
    t=$(now); "$kp" cache push --cache "$work/nvbuild" $(rem "trust/signed$r") --sign "$work/team.key" >/dev/null 2>>"$work/trust.log" || die "signed push failed: $(tail -3 "$work/trust.log")"
    since "$t" >>"$work/t-push"
    t=$(now); "$work/kpreload-base" cache pull --cache "$work/basepull$r" $(rem "trust/base$r") >/dev/null 2>>"$work/trust.log" || die "baseline pull failed: $(tail -3 "$work/trust.log")"
    since "$t" >>"$work/t-basepull"
    t=$(now); "$kp" cache pull --cache "$work/pull$r" $(rem "trust/signed$r") --trust "$work/team.pub" >/dev/null 2>>"$work/trust.log" || die "trusted pull failed: $(tail -3 "$work/trust.log")"
    since "$t" >>"$work/t-pull"
    [ -n "$(ls "$work/pull$r/sets")" ] || die "the trusted pull took nothing"
  done
  basepush=$(median <"$work/t-basepush"); tpush=$(median <"$work/t-push")
  basepull=$(median <"$work/t-basepull"); tpull=$(median <"$work/t-pull")
fi

if [ "$hook" = 1 ]; then
  rem() { echo --remote "oci://127.0.0.1:$port/$1" --plain-http --docker-config "$work/none.json"; }
  median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  [ -f "$work/team.key" ] || "$kp" cache keygen "$work/team" >/dev/null
  log "hook: the $cell cell of $k612, built and pushed signed (not timed)"
  "$kp" build --recipes "$top/recipes" --cache "$work/hookcell" --json "$cell:$k612" >"$work/hookcell.json" 2>"$work/hookcell.log" \
    || die "hook cell build failed: $(tail -5 "$work/hookcell.log")"
  "$kp" cache push --cache "$work/hookcell" $(rem hook/cells) --sign "$work/team.key" >/dev/null 2>>"$work/hookcell.log" \
    || die "hook cell push failed: $(tail -3 "$work/hookcell.log")"
  read -r hdriver hversion hflavor < <(jq -r '.[0] | "\(.driver) \(.version) \(.flavor // "")"' "$work/hookcell.json")
  (cd "$top" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/kpreload-init" ./cmd/kpreload-init)
  ktree="$KPRELOAD_CACHE/kernels/$k612"
  tpl="$work/hookroot"
  mkdir -p "$tpl/boot/efi/loader" "$tpl/boot/kpreload" "$tpl/lib/modules" "$tpl/usr/lib/kpreload" \
    "$tpl/etc/kpreload/keys" "$tpl/var/lib/kpreload/cache/index"
  cp "$ktree/boot/vmlinuz-$k612" "$tpl/boot/"
  cp -a "$ktree/lib/modules/$k612" "$tpl/lib/modules/"
  cp "$work/kpreload-init" "$tpl/usr/lib/kpreload/kpreload-init"
  echo "root=UUID=00000000-0000-0000-0000-000000000000 rw" >"$tpl/etc/kpreload/cmdline"
  echo "timeout 3" >"$tpl/boot/efi/loader/loader.conf"
  cp "$work/team.pub" "$tpl/etc/kpreload/keys/team.pub"
  printf 'remote: oci://127.0.0.1:%s/hook/cells\nplain_http: true\ntrust: [/etc/kpreload/keys/team.pub]\n' "$port" >"$tpl/etc/kpreload/remote.yaml"
  jq -n --arg k "$k61" --arg d "$hdriver" --arg v "$hversion" --arg f "$hflavor" \
    '{format: 1, kernel: $k, sets: [{id: "kernel", dir: "x", modules: []}, ({id: ("0" * 64), driver: $d, version: $v, dir: "../objects/sha256", modules: []} + (if $f == "" then {} else {flavor: $f} end))]}' \
    >"$tpl/var/lib/kpreload/cache/index/$k61.json"
  : >"$work/t-basehook"; : >"$work/t-hook"
  for r in $(seq "$rounds"); do
    log "hook round $r of $rounds: kernel-hook postinst $k612, $baseline and this build"
    for which in base this; do
      bin="$kp"; out="$work/t-hook"
      if [ "$which" = base ]; then bin="$work/kpreload-base"; out="$work/t-basehook"; fi
      root="$work/hookroot-$which$r"
      cp -a "$tpl" "$root"
      t=$(now); "$bin" kernel-hook postinst "$k612" --root "$root" >"$root.log" 2>&1 || die "$which postinst failed: $(tail -5 "$root.log")"
      since "$t" >>"$out"
      grep -q "pulled $hdriver" "$root.log" || die "the $which postinst pulled nothing: $(tail -5 "$root.log")"
      rm -rf "$root"
    done
  done
  basehook=$(median <"$work/t-basehook"); thook=$(median <"$work/t-hook")
fi

echo "Distributed build benchmark ($(nproc) CPUs, load average at the end $(cut -d' ' -f1-3 /proc/loadavg)); registry: Debian's docker-registry on loopback"
echo
echo "| what | wall time (s) | ratio |"
echo "| --- | ---: | ---: |"
[ "$shards" = 1 ] && echo "| matrix (test driver 2 versions × 2 kernels, 4 cells), 1 process | $one | 1.00 |"
[ "$shards" = 1 ] && echo "| the same matrix, 1 process with --jobs 2 | $onej2 | $(awk -v a="$one" -v b="$onej2" 'BEGIN{printf "%.2f× faster", a/b}') |"
[ "$shards" = 1 ] && echo "| the same matrix, 2 shard processes at once ($built2 cells built, $pushed2 pushed) | $two | $(awk -v a="$one" -v b="$two" 'BEGIN{printf "%.2f× faster", a/b}') |"
if [ "$nvidia" = 1 ]; then
  echo "| $cell × $k61: build with dkms (cold) and push | $nvbuild | 1.00 |"
  echo "| $cell × $k61: pull into an empty cache ($size, key computed, verified) | $nvpull | $(awk -v a="$nvbuild" -v b="$nvpull" 'BEGIN{printf "%.0f× faster", a/b}') |"
  echo "| cache push of the $cell cell, $baseline (median of $rounds) | $basepush | 1.00 |"
  echo "| cache push --sign, this build (median of $rounds) | $tpush | $(awk -v a="$basepush" -v b="$tpush" 'BEGIN{printf "%.2f (goal ≤ 1.1)", b/a}') |"
  echo "| cache pull of the $cell cell, $baseline (median of $rounds) | $basepull | 1.00 |"
  echo "| cache pull --trust, signature and metadata checked, this build (median of $rounds) | $tpull | $(awk -v a="$basepull" -v b="$tpull" 'BEGIN{printf "%.2f (goal ≤ 1.1)", b/a}') |"
fi
if [ "$hook" = 1 ]; then
  echo "| kernel-hook postinst $k612 (pull of the signed $cell cell, initramfs, loader), $baseline (median of $rounds) | $basehook | 1.00 |"
  echo "| kernel-hook postinst, this build (median of $rounds) | $thook | $(awk -v a="$basehook" -v b="$thook" 'BEGIN{printf "%.2f (goal ≤ 1.2)", b/a}') |"
fi
ok=1
