#!/usr/bin/env bash
# bench-build.sh: `kpreload build` against the sequential path people use today,
# `dkms autoinstall` once per kernel, on the same matrix, measured in one run.
#
#   scripts/bench-build.sh [--keep] [--no-nvidia]
#   scripts/bench-build.sh --matrix [--keep] [RECIPE[:KVER]...]
#
#   --keep       keep the work directory (it is always kept when something fails)
#   --no-nvidia  leave nvidia-535 out of the matrix (a quick run of the test driver only)
#   --matrix     the whole recipe × kernel matrix instead (default: every
#                recipes/nvidia-*.yaml over its own kernels; hours on 2 CPUs): a table
#                with one row per cell, each cell's state and seconds under kpreload and
#                under dkms, and the totals. Not part of CI.
#   --dkms-from TSV  (--matrix) take the dkms side from an earlier run's dkms.tsv instead
#                of running it again (the table says so); $KPRELOAD_BENCH_OUT, if set, is a
#                directory that gets dkms.tsv (as each cell ends) and kpreload's JSON.
#
# Default matrix: the test driver (recipes/testdriver.yaml) for 6.1.0-56-cloud-amd64 and
# 6.12.117+deb12-cloud-amd64, and nvidia-535 (nvidia-kernel-dkms 535.261.03) for
# 6.1.0-56-cloud-amd64.
#   kpreload: `kpreload build testdriver nvidia-535:6.1.0-56-cloud-amd64` into a fresh,
#             empty module cache (cold: every cell compiles), then the same command again
#             (no-op: every cell is cached; target under 5 s).
#   dkms:     for each kernel, one after the other, what a machine with the kernel's
#             headers installed does: `dkms add` of that kernel's packages and
#             `dkms autoinstall -k KVER` (build + install). It runs the real dkms in an
#             isolated tree (--dkmstree, --sourcetree, --installtree, --kernelsourcedir
#             and --no-depmod, signing disabled) as builder/dkms does, so nothing on the
#             host changes; NVIDIA's Makefile gets SYSSRC/SYSOUT as kpreload gives it,
#             since the headers are unpacked rather than installed.
# With --matrix, the NVIDIA branches conflict (one nvidia.ko each), so the dkms side is
# one machine per driver: for every cell, one after the other, a fresh dkms tree, `dkms
# add` of the recipe's source (the same tree kpreload builds, patched where the recipe
# has patches) and `dkms autoinstall -k KVER`; for a kernel of another suite (trixie)
# dkms runs in kpreload's build root of that suite, as kpreload does. A cell that fails
# to compile fails on both sides, is timed and counted, and the run goes on.
# Everything is downloaded first (`kpreload build --fetch-only`), outside the timings.
# Both sides use the unpacked kernels and sources under $KPRELOAD_CACHE and the same
# compiler (the kernel's own). Progress goes to stderr, a markdown table to stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

keep=0
nvidia=1
matrix=0
dkms_from=
cellargs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --no-nvidia) nvidia=0 ;;
    --matrix) matrix=1 ;;
    --dkms-from) [ $# -ge 2 ] || die "--dkms-from needs a file"; dkms_from=$(realpath "$2"); shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown argument $1 (see --help)" ;;
    *) [ "$matrix" = 1 ] || die "cells ($1) are for --matrix (see --help)"; cellargs+=("$1") ;;
  esac
  shift
done

ok=0
cleanup() { if [ "$ok" = 1 ] && [ "$keep" = 0 ]; then rm -rf "$work"; else echo "work directory kept: $work" >&2; fi; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# shadow DIR HEADERS ROOT: a kernel build directory whose entries link into HEADERS and
# whose Makefile includes the unpacked -common Makefile (Debian's headers include
# /usr/src/linux-headers-<x>-common/Makefile by absolute path), as builder/dkms does.
shadow() {
  local dir=$1 headers=$2 root=$3 e
  mkdir -p "$dir"
  for e in "$headers"/* "$headers"/.[!.]*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    [ "$(basename "$e")" = Makefile ] && continue
    ln -s "$e" "$dir/$(basename "$e")"
  done
  sed -E "s|^include (/usr/src/[^ ]*)|include $root\\1|" "$headers/Makefile" >"$dir/Makefile"
}

# run_matrix: the --matrix benchmark (see the header).
run_matrix() {
  local tool
  for tool in dkms make jq go unshare chroot; do
    command -v "$tool" >/dev/null || die "$tool is missing: run scripts/deps.sh"
  done
  if [ ${#cellargs[@]} -eq 0 ]; then
    local f
    for f in "$top"/recipes/nvidia-*.yaml; do cellargs+=("$(basename "$f" .yaml)"); done
  fi
  work=$(mktemp -d /tmp/kpreload-bench-matrix.XXXXXX)
  trap cleanup EXIT
  log "building kpreload"
  (cd "$top" && CGO_ENABLED=0 go build -o "$work/kpreload" ./cmd/kpreload)
  local kp="$work/kpreload"
  log "fetching kernels, sources and build roots for ${cellargs[*]} (not timed)"
  (cd "$top" && "$kp" build --fetch-only --json --cache "$work/cache" "${cellargs[@]}") >"$work/fetch.json" 2>"$work/fetch.log" ||
    { tail -20 "$work/fetch.log" >&2; die "kpreload build --fetch-only failed (log $work/fetch.log)"; }
  local n
  n=$(jq length "$work/fetch.json")
  log "$n cells; the dkms side first"
  # --- sequential dkms autoinstall, one fresh tree per cell ----------------------------
  local enter='set -e
root=$1; t=$2; k=$3; shift 3
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
for d in "$t" "$k"; do mkdir -p "$root$d"; mount --rbind "$d" "$root$d"; done
exec chroot "$root" "$@"'
  local i recipe k src root broot name version t common pkg state secs t0 t1 kp_cold kp_noop rc
  : >"$work/dkms.tsv"
  local seq_total=0 out=${KPRELOAD_BENCH_OUT:-}
  [ -z "$out" ] || mkdir -p "$out"
  if [ -n "$dkms_from" ]; then
    log "the dkms side from $dkms_from (not run again)"
    cp "$dkms_from" "$work/dkms.tsv"
    seq_total=$(awk -F'\t' '{ s += $4 } END { printf "%.1f", s }' "$work/dkms.tsv")
    n=0 # skip the loop
  fi
  for ((i = 0; i < n; i++)); do
    recipe=$(jq -r ".[$i].recipe" "$work/fetch.json")
    k=$(jq -r ".[$i].kernel" "$work/fetch.json")
    src=$(jq -r ".[$i].source_dir" "$work/fetch.json")
    root=$(jq -r ".[$i].kernel_dir" "$work/fetch.json")
    broot=$(jq -r ".[$i].build_root // \"\"" "$work/fetch.json")
    name=$(sed -n 's/^PACKAGE_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$src/dkms.conf")
    version=$(sed -n 's/^PACKAGE_VERSION="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$src/dkms.conf")
    [ -n "$name" ] && [ -n "$version" ] || die "$src/dkms.conf: no PACKAGE_NAME/PACKAGE_VERSION"
    t="$work/dkms/$recipe-$k"
    mkdir -p "$t/dkms" "$t/src" "$t/install/$k" "$t/tmp" "$t/nosign"
    common=$(readlink "$root/lib/modules/$k/source" || true)
    case "$common" in
      /*) common="$root$common" ;;               # bookworm: /usr/src/linux-headers-<x>-common
      ?*) common=$(realpath -m "$root/usr/lib/modules/$k/$common") ;; # trixie: relative to /usr/lib/modules/<release>
      *) common="$t/kernel" ;;
    esac
    shadow "$t/kernel" "$root/usr/src/linux-headers-$k" "$root"
    cp -rL "$src" "$t/src/$name-$version"
    local opts="--dkmstree $t/dkms --sourcetree $t/src --installtree $t/install --kernelsourcedir $t/kernel"
    local script="dkms add -m $name -v $version $opts && dkms autoinstall -k $k --arch x86_64 --no-depmod $opts"
    log "dkms add $name/$version + dkms autoinstall -k $k ($recipe${broot:+, in the trixie build root})"
    t0=$(now)
    set +e
    (
      export LC_ALL=C TMPDIR="$t/tmp" MAKEFLAGS=CC=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\([^ ]*\) .*/\1/p' "$root/usr/src/linux-headers-$k/.config")
      export sign_file="$t/nosign/sign-file" mok_signing_key="$t/nosign/mok.key" mok_certificate="$t/nosign/mok.pub"
      export SYSSRC="$common" SYSOUT="$t/kernel"
      if [ -n "$broot" ]; then
        unshare --mount --propagation private -- /bin/sh -c "$enter" bench "$broot" "$t" "$root" /bin/sh -c "$script"
      else
        /bin/sh -c "$script"
      fi
    ) >"$t/dkms.log" 2>&1
    rc=$?
    set -e
    t1=$(now)
    secs=$(elapsed "$t0" "$t1")
    state=ok
    if [ "$rc" != 0 ] || [ -z "$(find "$t/install/$k" -name '*.ko*' -print -quit)" ]; then
      state=failed
      log "  failed (exit $rc) after $secs s: $(grep -m1 -h -E ' error: |^\*\*\*' "$t"/dkms/"$name"/"$version"/build/make.log 2>/dev/null || tail -1 "$t/dkms.log")"
    else
      log "  ok in $secs s ($(find "$t/install/$k" -name '*.ko*' | wc -l) modules installed)"
    fi
    printf '%s\t%s\t%s\t%s\n' "$recipe" "$k" "$state" "$secs" >>"$work/dkms.tsv"
    [ -z "$out" ] || cp "$work/dkms.tsv" "$out/dkms.tsv"
    seq_total=$(awk -v a="$seq_total" -v b="$secs" 'BEGIN { printf "%.1f", a + b }')
    cp "$t/dkms/$name/$version/build/make.log" "$t/make.log" 2>/dev/null || true
    rm -rf "$t/dkms" "$t/src" "$t/kernel" # keep the logs only
  done

  # --- kpreload ------------------------------------------------------------------------
  # kp_build NAME: kpreload build of the cells into $work/cache, timed; the JSON to
  # $work/NAME.json, the seconds to $kp_secs. Exit status 3 means only cells failed to
  # compile (the table says which).
  kp_build() {
    local t0 rc
    t0=$(now)
    set +e
    (cd "$top" && "$kp" build --cache "$work/cache" --json "${cellargs[@]}") >"$work/$1.json" 2>"$work/$1.log"
    rc=$?
    set -e
    kp_secs=$(elapsed "$t0" "$(now)")
    [ "$rc" = 0 ] || [ "$rc" = 3 ] || { tail -20 "$work/$1.log" >&2; die "kpreload build ($1) failed with exit $rc (log $work/$1.log)"; }
  }
  log "kpreload build (cold cache)"
  kp_build cold
  kp_cold=$kp_secs
  log "kpreload build (cold) took $kp_cold s; again (no-op)"
  kp_build noop
  kp_noop=$kp_secs

  local ratio
  ratio=$(awk -v a="$seq_total" -v b="$kp_cold" 'BEGIN { printf "%.2f", a / b }')
  echo "Whole-matrix build benchmark ($(nproc) CPUs, load average at the end $(cut -d' ' -f1-3 /proc/loadavg)); cells: ${cellargs[*]}"
  echo
  echo "| recipe | kernel | \`kpreload build\`, cold | sequential \`dkms autoinstall\` |"
  echo "| --- | --- | ---: | ---: |"
  jq -r --rawfile tsv "$work/dkms.tsv" '
    ($tsv | split("\n") | map(select(length > 0) | split("\t") | {key: (.[0] + "/" + .[1]), value: {state: .[2], seconds: .[3]}}) | from_entries) as $d
    | .[] | ($d[.recipe + "/" + .kernel] // {state: "—", seconds: "0"}) as $x
    | "| \(.recipe) | \(.kernel) | \(.state) \(.seconds * 10 | round / 10) s | \($x.state) \($x.seconds) s |"' "$work/cold.json"
  n=$(jq length "$work/fetch.json")
  local okk okd ncached
  okk=$(jq '[.[] | select(.state == "ok")] | length' "$work/cold.json")
  okd=$(grep -c $'\tok\t' "$work/dkms.tsv" || true)
  ncached=$(jq '[.[] | select(.state == "cached")] | length' "$work/noop.json")
  cat <<EOT

| build | wall time (s) | cells ok | speed-up (sequential dkms ÷ this) |
| --- | ---: | ---: | ---: |
| sequential \`dkms add\` + \`dkms autoinstall -k\`, one cell after another | $seq_total | $okd of $n | 1.00 |
| \`kpreload build\`, cold cache (default --jobs: $(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))) | $kp_cold | $okk of $n | ${ratio}× |
| \`kpreload build\`, no-op rebuild ($ncached of $n cached) | $kp_noop | — | — |
EOT
  [ -z "$out" ] || cp "$work/cold.json" "$work/noop.json" "$out/"
  [ -z "$dkms_from" ] || echo "The dkms side is from $dkms_from, an earlier run of this script on this machine (--dkms-from)."
  ok=1
}

if [ "$matrix" = 1 ]; then
  run_matrix
  exit 0
fi

k61=6.1.0-56-cloud-amd64
k612=6.12.117+deb12-cloud-amd64
for tool in dkms make gcc-12 go; do
  command -v "$tool" >/dev/null || die "$tool is missing: run scripts/deps.sh"
done

work=$(mktemp -d /tmp/kpreload-bench-build.XXXXXX)
trap cleanup EXIT

log "building kpreload"
(cd "$top" && CGO_ENABLED=0 go build -o "$work/kpreload" ./cmd/kpreload)
kp="$work/kpreload"

log "fetching the kernels and the sources (not timed)"
for k in "$k61" "$k612"; do "$here/kernels.sh" "$k" >&2; done
cells=(testdriver)
[ "$nvidia" = 1 ] && cells+=("nvidia-535:$k61")
# The dkms side needs nvidia-kernel-dkms unpacked where kpreload build unpacks it
# ($KPRELOAD_CACHE/sources/<package>_<version>): the same apt-get download + dpkg -x.
nvsrc=""
if [ "$nvidia" = 1 ]; then
  pkgdir="$KPRELOAD_CACHE/sources/nvidia-kernel-dkms_535.261.03-1"
  if [ ! -d "$pkgdir" ]; then
    mkdir -p "$KPRELOAD_CACHE/debs"
    o=$(apt_suite_opts bookworm) || exit 1
    mapfile -t apt_opts <<<"$o"
    (cd "$KPRELOAD_CACHE/debs" && [ -n "$(ls nvidia-kernel-dkms_535.261.03-1_*.deb 2>/dev/null)" ] || apt-get "${apt_opts[@]}" download -q nvidia-kernel-dkms=535.261.03-1 >&2)
    tmp=$(mktemp -d "$KPRELOAD_CACHE/sources/.tmp-bench-XXXXXX")
    dpkg -x "$KPRELOAD_CACHE"/debs/nvidia-kernel-dkms_535.261.03-1_*.deb "$tmp"
    chmod 755 "$tmp"
    mv "$tmp" "$pkgdir"
  fi
  nvsrc="$pkgdir/usr/src/nvidia-current-535.261.03"
fi



# --- kpreload, cold -------------------------------------------------------------------
log "kpreload build ${cells[*]} (cold cache)"
t0=$(now)
if ! (cd "$top" && "$kp" build --cache "$work/cache" --json "${cells[@]}" >"$work/cold.json" 2>"$work/cold.log"); then
  cat "$work/cold.log" >&2
  die "kpreload build (cold) failed"
fi
t1=$(now)
kp_cold=$(elapsed "$t0" "$t1")
ncold=$(grep -c '"state": "ok"' "$work/cold.json" || true)

log "kpreload build ${cells[*]} (again: no-op)"
t0=$(now)
(cd "$top" && "$kp" build --cache "$work/cache" --json "${cells[@]}" >"$work/noop.json" 2>"$work/noop.log") || die "kpreload build (no-op) failed"
t1=$(now)
kp_noop=$(elapsed "$t0" "$t1")
ncached=$(grep -c '"state": "cached"' "$work/noop.json" || true)
ncells=$(grep -c '"state":' "$work/noop.json" || true)

# --- sequential dkms autoinstall ------------------------------------------------------
seq_total=0
declare -A seq_time=()
for k in "$k61" "$k612"; do
  root="$KPRELOAD_CACHE/kernels/$k"
  headers="$root/usr/src/linux-headers-$k"
  common=$(readlink "$root/lib/modules/$k/source" || true)
  t="$work/dkms-$k"
  mkdir -p "$t/dkms" "$t/src" "$t/install/$k" "$t/tmp" "$t/nosign"
  shadow "$t/kernel" "$headers" "$root"
  cp -rL "$top/recipes/testdriver" "$t/src/kpreload-edu-1.0.0"
  pkgs=("kpreload-edu/1.0.0")
  if [ "$nvidia" = 1 ] && [ "$k" = "$k61" ]; then
    cp -r "$nvsrc" "$t/src/nvidia-current-535.261.03"
    pkgs+=("nvidia-current/535.261.03")
  fi
  opts=(--dkmstree "$t/dkms" --sourcetree "$t/src" --installtree "$t/install" --kernelsourcedir "$t/kernel")
  log "dkms add ${pkgs[*]} + dkms autoinstall -k $k"
  t0=$(now)
  (
    export LC_ALL=C TMPDIR="$t/tmp" MAKEFLAGS=CC=gcc-12
    export sign_file="$t/nosign/sign-file" mok_signing_key="$t/nosign/mok.key" mok_certificate="$t/nosign/mok.pub"
    export SYSSRC="$root$common" SYSOUT="$t/kernel"
    for p in "${pkgs[@]}"; do
      dkms add -m "${p%/*}" -v "${p#*/}" "${opts[@]}"
    done
    dkms autoinstall -k "$k" --arch x86_64 --no-depmod "${opts[@]}"
  ) >"$t/dkms.log" 2>&1 || { tail -30 "$t/dkms.log" >&2; die "dkms autoinstall for $k failed (log $t/dkms.log)"; }
  t1=$(now)
  n=$(find "$t/install/$k" -name '*.ko*' | wc -l)
  want=1
  [ "$nvidia" = 1 ] && [ "$k" = "$k61" ] && want=6
  [ "$n" -ge "$want" ] || die "dkms autoinstall for $k installed $n modules, want $want (log $t/dkms.log)"
  seq_time[$k]=$(elapsed "$t0" "$t1")
  seq_total=$(awk -v a="$seq_total" -v b="${seq_time[$k]}" 'BEGIN { printf "%.1f", a + b }')
done

ratio=$(awk -v a="$seq_total" -v b="$kp_cold" 'BEGIN { printf "%.2f", a / b }')
noop_ok=$(awk -v a="$kp_noop" 'BEGIN { print (a < 5) ? "yes" : "NO" }')
matrix="testdriver × {$k61, $k612}"
[ "$nvidia" = 1 ] && matrix="$matrix + nvidia-535 × $k61"

cat <<EOF
Build benchmark ($(nproc) CPUs, load average at the end $(cut -d' ' -f1-3 /proc/loadavg)); matrix: $matrix

| build | wall time (s) | cells compiled | speed-up (sequential dkms time ÷ this) |
| --- | ---: | ---: | ---: |
| sequential \`dkms add\` + \`dkms autoinstall -k\` per kernel | $seq_total | $ncold | 1.00 |
| \`kpreload build\`, cold cache | $kp_cold | $ncold | ${ratio}× |
| \`kpreload build\`, no-op rebuild (${ncached}/${ncells} cached; target < 5 s: $noop_ok) | $kp_noop | 0 | — |

Sequential dkms per kernel: $(for k in "$k61" "$k612"; do printf '%s %s s; ' "$k" "${seq_time[$k]}"; done)
EOF
ok=1
