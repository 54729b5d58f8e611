#!/usr/bin/env bash
# nvidia-breakdown.sh: where the NVIDIA driver set's path spends its time, step by
# step, in boots whose timings do not move with the host's load (QEMU -icount, as
# ab-init.sh boots). bench-nvidia.sh is the comparison with Debian's way; this is
# the breakdown of kpreload's own part.
#
#   scripts/nvidia-breakdown.sh [--kernel KVER] [--recipe R] [--boots N] [--icount N]
#                               [--variants "V ..."] [--keep]
#
#   --kernel KVER  default 6.12.117+deb12-cloud-amd64
#   --recipe R     default nvidia-550-open (built with the real dkms into
#                  $KPRELOAD_CACHE/store if that cell is not there yet: minutes)
#   --boots N      boots per variant (default 3), interleaved; medians are reported
#   --icount N     the guest's clock runs 2^N ns per instruction (default 3), 1 vCPU
#   --variants L   which of these to boot (default: all), each PATH-FORM:
#                    early-*   the set in the initramfs, index complete: /init decides
#                              while it finds the root (kpreload.load= modules, with no
#                              GPU to match, still load once the root is mounted)
#                    after-*   the set on the root's module cache, decided after the root
#                  with the modules as FORM: plain (.ko), xz (as the kernel's own: the
#                  kernel decompresses them if it can, else /init does), zstd (the same
#                  rule), signed (plain, signed with a throwaway key: what the kernel's
#                  signature check costs; cells are unsigned unless their recipe signs)
#
# Every boot gets kpreload.load=<driver> (QEMU has no GPU) and initcall_debug
# loglevel=8, whose "calling"/"initcall ... returned after N usecs" lines split the
# module's system call into the kernel's load_module work and the module's own init;
# /init records the rest in its report (each module's read, digest, decompression and
# call times). The table gives medians per variant, seconds; progress to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

kver=6.12.117+deb12-cloud-amd64
recipe=nvidia-550-open
boots=3
icount=3
keep=0
all_variants="early-plain early-xz early-zstd after-plain after-xz after-zstd after-signed"
variants=$all_variants
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel) [ $# -ge 2 ] || die "--kernel needs a value"; kver=$2; shift 2 ;;
    --recipe) [ $# -ge 2 ] || die "--recipe needs a value"; recipe=$2; shift 2 ;;
    --boots) [ $# -ge 2 ] || die "--boots needs a value"; boots=$2; shift 2 ;;
    --icount) [ $# -ge 2 ] || die "--icount needs a value"; icount=$2; shift 2 ;;
    --variants) [ $# -ge 2 ] || die "--variants needs a value"; variants=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
[[ $boots =~ ^[1-9][0-9]*$ ]] || die "--boots '$boots': want a positive number"
[[ $icount =~ ^([1-9]|10)$ ]] || die "--icount '$icount': want 1 to 10"
for v in $variants; do
  [[ " $all_variants " == *" $v "* ]] || die "unknown variant '$v' (want some of: $all_variants)"
done
[ "$(id -u)" = 0 ] || die "run as root: kpreload rootdisk and build need it"
for b in kpreload kpreload-init kpreload-rootinit; do
  [ -x "$top/bin/$b" ] || die "$top/bin/$b is not built: run make build"
done
for tool in jq xz zstd; do command -v "$tool" >/dev/null || die "$tool is missing: run scripts/deps.sh"; done

"$here/kernels.sh" "$kver" >&2
ktree="$KPRELOAD_CACHE/kernels/$kver"
vmlinuz="$ktree/boot/vmlinuz-$kver"
work=$(mktemp -d /var/tmp/kpreload-nvidia-breakdown.XXXXXX)
ok=0
finish() { if [ "$ok" = 1 ] && [ "$keep" = 0 ]; then rm -rf "$work"; else log "work files kept in $work"; fi; }
trap finish EXIT
mkdir -p "$work/logs" "$work/boots" "$work/bin"
cp "$top/bin/kpreload" "$top/bin/kpreload-init" "$top/bin/kpreload-rootinit" "$work/bin/"
kp="$work/bin/kpreload"
bb="$work/benchboot"
(cd "$top" && CGO_ENABLED=0 go build -trimpath -o "$bb" ./cmd/benchboot) || die "go build ./cmd/benchboot failed"
fail() { [ -f "$2" ] && tail -n 25 "$2" >&2; die "$1 (log: $2)"; }

nvidia_cell "$kp" "$recipe" "$kver" "$work"
forms=$(for v in $variants; do echo "${v#*-}"; done | sort -u)
nvidia_forms "$kp" "$work" $forms

uuid=5f1d2c3b-8a9e-4f70-b6d5-4c3b2a190807
log "root disks and initramfs images"
"$kp" rootdisk -o "$work/root-none.img" --uuid "$uuid" >"$work/logs/rootdisk.log" 2>&1 || fail "rootdisk failed" "$work/logs/rootdisk.log"
"$kp" initramfs --kernel "$kver" --root "$ktree" -o "$work/kp-none.img" >"$work/logs/initramfs.log" 2>&1 ||
  fail "kpreload initramfs failed" "$work/logs/initramfs.log"
declare -A initrd disk
for v in $variants; do
  path=${v%%-*} form=${v#*-}
  if [ "$path" = early ]; then
    [ -f "$work/kp-early-$form.img" ] || "$kp" initramfs --kernel "$kver" --root "$ktree" --cache "$work/cache-$form" --complete \
      -o "$work/kp-early-$form.img" >"$work/logs/initramfs-early-$form.log" 2>&1 ||
      fail "kpreload initramfs --complete ($form) failed" "$work/logs/initramfs-early-$form.log"
    initrd[$v]=$work/kp-early-$form.img disk[$v]=$work/root-none.img
  else
    [ -f "$work/root-$form.img" ] || "$kp" rootdisk -o "$work/root-$form.img" --uuid "$uuid" --add "/var/lib/kpreload/cache=$work/cache-$form" \
      >"$work/logs/rootdisk-$form.log" 2>&1 || fail "rootdisk ($form) failed" "$work/logs/rootdisk-$form.log"
    initrd[$v]=$work/kp-none.img disk[$v]=$work/root-$form.img
  fi
done

how="TCG with -icount shift=$icount,sleep=off (a virtual clock of $((1 << icount)) ns per instruction), 1 vCPU, 2 GiB"
log "$boots boots of each variant ($how)"
samples="$work/steps.jsonl"
: >"$samples"
read -r -a vs <<<"$variants"
for i in $(seq 1 "$boots"); do
  for j in $(seq 0 $((${#vs[@]} - 1))); do
    v=${vs[$(( (j + i) % ${#vs[@]} ))]}
    base="$work/boots/$v-$i"
    cp --sparse=always "${disk[$v]}" "$base.root.img"
    "$kp" boot --kernel "$vmlinuz" --initramfs "${initrd[$v]}" --root-disk "$base.root.img" \
      --append "root=UUID=$uuid kpreload.load=$NVIDIA_DRIVER initcall_debug loglevel=8" --accel tcg --cpus 1 --icount "$icount" \
      --memory 2048 --timeout 600s --console "$base.console" --json >"$base.json" 2>"$base.stderr" || true
    rm -f "$base.root.img"
    "$bb" breakdown -variant "$v" -run "$i" -boot "$base.json" -console "$base.console" -modules "$NVIDIA_DRIVER" \
      -marker "NVRM: No NVIDIA GPU found" >>"$samples" || fail "$v boot $i did not load $NVIDIA_DRIVER" "$base.stderr"
    log "  boot $i $v: $(tail -n1 "$samples" | jq -r '"NVRM line at \(.loaded) s, real init at \(.real_init) s"')"
  done
done
echo "NVIDIA driver breakdown: $NVIDIA_DRIVER $NVIDIA_VERSION $NVIDIA_FLAVOR (set ${NVIDIA_SET:0:12}) on $kver, $how; $boots boots per variant, interleaved"
echo
"$bb" breakdown-table -samples "$samples" -note "Module sizes: $(nvidia_sizes "$work" $forms)."
ok=1
