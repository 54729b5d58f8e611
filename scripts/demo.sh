#!/usr/bin/env bash
# demo.sh: kpreload's main job on its built-in default, end to end with real parts:
#   1. build the project's test driver (recipes/testdriver) for the default kernel
#      with the real dkms, in an isolated tree;
#   2. put it in a kpreload module cache;
#   3. build a kpreload initramfs for that kernel (boot-critical modules + the cache);
#   4. build an ext4 root disk whose /sbin/init records what it sees;
#   5. boot it all in QEMU with QEMU's edu device and print the boot timeline.
# Usage: scripts/demo.sh [KVER]   (run through `make demo`, which builds bin/ first)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)
kp="$top/bin/kpreload"
[ -x "$kp" ] || die "$kp not built: run make build (or make demo)"

kver=${1:-${KPRELOAD_KERNELS[0]}}
out=${KPRELOAD_DEMO_DIR:-$top/out/demo}
mkdir -p "$out"
"$here/kernels.sh" "$kver"
ktree="$KPRELOAD_CACHE/kernels/$kver"

log "1/5 building the test driver for $kver with dkms"
"$here/build-testdriver.sh" "$kver" "$out/modules"

log "2/5 adding it to the module cache $out/cache"
rm -rf "$out/cache"
"$kp" cache add --cache "$out/cache" --driver kpreload-edu --version 1.0.0 "$out/modules/kpreload_edu.ko"

log "3/5 building the initramfs"
"$kp" initramfs --kernel "$kver" --root "$ktree" --cache "$out/cache" -o "$out/initrd.img"

log "4/5 building the root disk"
uuid=5f1d2c3b-8a9e-4f70-b6d5-4c3b2a190807
"$kp" rootdisk -o "$out/root.img" --uuid "$uuid"

log "5/5 booting in QEMU (TCG) with -device edu"
"$kp" boot --kernel "$ktree/boot/vmlinuz-$kver" --initramfs "$out/initrd.img" \
  --root-disk "$out/root.img" --append "root=UUID=$uuid" --device edu --work-dir "$out" \
  || die "boot failed; console log: $out/console.log"
echo
echo "Artifacts in $out: initrd.img, root.img, cache/, console.log, report.log (the full report as JSON)"
