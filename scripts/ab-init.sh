#!/usr/bin/env bash
# ab-init.sh: two builds of kpreload's boot path against each other, in boots whose
# timings do not move with the host's load. A developer's tool for telling what a
# change to /init did from this host's noise; bench-boot.sh is the comparison with
# what users would run instead (Debian's initramfs-tools).
#
#   scripts/ab-init.sh [--boots N] [--icount N | --wall] [--kernel KVER] [--json] [--keep] A B
#
#   A, B         git revisions (each built with `make build` in a temporary worktree)
#                or directories holding kpreload, kpreload-init and kpreload-rootinit;
#                A is the baseline
#   --boots N    boots per build and decision path (default 5), interleaved
#   --icount N   the guest's clock runs 2^N ns per instruction and skips idle time
#                (QEMU -icount shift=N,sleep=off, 1 vCPU; default N=3): medians of 5
#                boots of one build agree within ~0.03 s, whatever the host is doing
#                (single boots less so: the disk's I/O still completes in host time)
#   --wall       plain TCG with 2 vCPUs and the host's clock, as bench-boot.sh boots
#   --kernel K   kernel to boot (default 6.1.0-56-cloud-amd64)
#   --json       print the result as JSON
#   --keep       keep the work directory (it is always kept when something fails)
#
# Each build makes its own module cache (the test driver, built once by the real dkms),
# its own initramfs for both decision paths (after the root, and --complete: early)
# with its own kpreload-init, and boots each on the same root disk (a pristine copy
# per boot) with QEMU's edu device. Every boot must reach the root's init with edu
# bound to the test driver (benchboot sample checks it). The table gives medians
# from the kernel's "Run /init" line, so the kernel's own start-up drops out; its
# first row shows that start-up did not move. Caveat of --icount: it counts
# instructions and waits, not TCG's cost of translating code run for the first
# time, which makes Go's start-up (Run /init → main) far dearer in wall time under
# plain TCG than under icount or on real hardware.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

kver=6.1.0-56-cloud-amd64
boots=5
icount=3
wall=0
json=0
keep=0
usage() { sed -n '2,32s/^# \{0,1\}//p' "$0"; }
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --boots) [ $# -ge 2 ] || die "--boots needs a value"; boots=$2; shift 2 ;;
    --boots=*) boots=${1#*=}; shift ;;
    --icount) [ $# -ge 2 ] || die "--icount needs a value"; icount=$2; shift 2 ;;
    --icount=*) icount=${1#*=}; shift ;;
    --wall) wall=1; shift ;;
    --kernel) [ $# -ge 2 ] || die "--kernel needs a value"; kver=$2; shift 2 ;;
    --kernel=*) kver=${1#*=}; shift ;;
    --json) json=1; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; die "unknown argument '$1'" ;;
    *) args+=("$1"); shift ;;
  esac
done
[ ${#args[@]} = 2 ] || { usage >&2; die "want two builds, A and B (git revisions or directories)"; }
[[ $boots =~ ^[1-9][0-9]*$ ]] || die "--boots '$boots': want a positive number"
[[ $icount =~ ^([1-9]|10)$ ]] || die "--icount '$icount': want 1 to 10 (or --wall for plain TCG)"
[ "$wall" = 0 ] || icount=0
[ "$(id -u)" = 0 ] || die "run as root: the test driver is built with dkms"
[ -x "$top/bin/kpreload" ] || die "$top/bin/kpreload is not built: run make build (it boots QEMU for both builds)"

work=$(mktemp -d /var/tmp/kpreload-ab.XXXXXX)
ok=0
worktrees=()
finish() {
  local w
  for w in "${worktrees[@]}"; do git -C "$top" worktree remove --force "$w" >/dev/null 2>&1 || true; done
  if [ "$ok" = 1 ] && [ "$keep" = 0 ]; then rm -rf "$work"; else log "work files kept in $work"; fi
}
trap finish EXIT
mkdir -p "$work/logs" "$work/boots"
fail() { [ -f "$2" ] && tail -n 25 "$2" >&2; die "$1 (log: $2)"; }

# build SPEC LABEL: put SPEC's three binaries in $work/LABEL/bin.
build() {
  local spec=$1 label=$2 dst="$work/$2/bin" b
  mkdir -p "$dst"
  if [ -d "$spec" ]; then
    for b in kpreload kpreload-init kpreload-rootinit; do
      [ -x "$spec/$b" ] || die "$spec has no $b (want a directory of built binaries, or a git revision)"
      cp "$spec/$b" "$dst/"
    done
    return
  fi
  git -C "$top" rev-parse --verify --quiet "$spec^{commit}" >/dev/null ||
    die "'$spec' is neither a directory nor a git revision of $top"
  local src="$work/$label/src"
  log "building $spec ($label) in a temporary worktree"
  git -C "$top" worktree add --detach "$src" "$spec" >"$work/logs/worktree-$label.log" 2>&1 ||
    fail "git worktree add $spec failed" "$work/logs/worktree-$label.log"
  worktrees+=("$src")
  make -C "$src" build >"$work/logs/build-$label.log" 2>&1 || fail "make build at $spec failed" "$work/logs/build-$label.log"
  cp "$src/bin/kpreload" "$src/bin/kpreload-init" "$src/bin/kpreload-rootinit" "$dst/"
}

# Labels: the revisions' short names, or the directories' paths.
label_of() {
  if [ -d "$1" ]; then echo "$1"; else git -C "$top" rev-parse --short "$1^{commit}"; fi
}
la=$(label_of "${args[0]}")
lb=$(label_of "${args[1]}")
[ "$la" != "$lb" ] || die "A and B are the same build ($la)"
build "${args[0]}" a
build "${args[1]}" b

log "building the benchmark helper and the test driver (dkms) for $kver"
bb="$work/benchboot"
(cd "$top" && go build -o "$bb" ./cmd/benchboot) || die "go build ./cmd/benchboot failed"
"$here/build-testdriver.sh" "$kver" "$work/edu" >"$work/logs/testdriver.log" 2>&1 || fail "test driver build failed" "$work/logs/testdriver.log"
ktree="$KPRELOAD_CACHE/kernels/$kver"
vmlinuz="$ktree/boot/vmlinuz-$kver"
uuid=5f1d2c3b-8a9e-4f70-b6d5-4c3b2a190807
kp="$work/kpreload-boot"   # boots QEMU and makes the root disk: this checkout's, for both builds
cp "$top/bin/kpreload" "$kp"
"$kp" rootdisk -o "$work/root.img" --uuid "$uuid" >"$work/logs/rootdisk.log" 2>&1 || fail "kpreload rootdisk failed" "$work/logs/rootdisk.log"

for x in a b; do
  k="$work/$x/bin/kpreload"
  "$k" cache add --cache "$work/$x/cache" --driver kpreload-edu --version 1.0.0 "$work/edu/kpreload_edu.ko" >"$work/logs/cache-$x.log" 2>&1 ||
    fail "kpreload cache add ($x) failed" "$work/logs/cache-$x.log"
  "$k" initramfs --kernel "$kver" --root "$ktree" --cache "$work/$x/cache" --filesystems ext4 -o "$work/$x/after.img" >"$work/logs/initramfs-$x.log" 2>&1 ||
    fail "kpreload initramfs ($x) failed" "$work/logs/initramfs-$x.log"
  "$k" initramfs --kernel "$kver" --root "$ktree" --cache "$work/$x/cache" --filesystems ext4 --complete -o "$work/$x/early.img" >>"$work/logs/initramfs-$x.log" 2>&1 ||
    fail "kpreload initramfs --complete ($x) failed" "$work/logs/initramfs-$x.log"
done

if [ "$icount" = 0 ]; then
  mode=(--cpus 2)
  how="plain TCG, 2 vCPUs, the host's clock"
else
  mode=(--cpus 1 --icount "$icount")
  how="TCG with -icount shift=$icount,sleep=off (a virtual clock of $((1 << icount)) ns per instruction), 1 vCPU"
fi
log "$boots boots of each build and path ($how): A = $la, B = $lb"
samples="$work/samples.jsonl"
: >"$samples"
for i in $(seq 1 "$boots"); do
  order="a b"
  [ $((i % 2)) = 0 ] && order="b a"
  for x in $order; do
    for path in after early; do
      variant=kpreload
      [ "$path" = early ] && variant=kpreload-early
      base="$work/boots/$x-$path-$i"
      cp --sparse=always "$work/root.img" "$base.root.img"
      "$kp" boot --kernel "$vmlinuz" --initramfs "$work/$x/$path.img" --root-disk "$base.root.img" --device edu \
        --append "root=UUID=$uuid" --accel tcg "${mode[@]}" --memory 1024 --timeout 180s \
        --console "$base.console" --json >"$base.json" 2>"$base.stderr" || true
      rm -f "$base.root.img"
      label=$la
      [ "$x" = b ] && label=$lb
      "$bb" sample -variant "$variant" -label "$label" -run "$i" -kernel "$kver" -boot "$base.json" -console "$base.console" >>"$samples" ||
        fail "$label $path boot $i did not reach the root's init with edu bound" "$base.stderr"
    done
  done
done

ab_args=(-samples "$samples" -a "$la" -b "$lb" -note "Kernel $kver, $how; $boots boots of each build and path, interleaved; medians in seconds.")
[ "$json" = 1 ] && ab_args+=(-json)
"$bb" ab "${ab_args[@]}"
ok=1
