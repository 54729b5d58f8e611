#!/usr/bin/env bash
# demo-image.sh: kpreload's main user path, end to end, on its built-in default.
#
#   scripts/demo-image.sh [OUTDIR]     (default /tmp/kpreload-demo-image)
#
#   1. install Packer 1.15.0 if needed (scripts/packer.sh), build the kpreload plugin (make
#      plugin) and install it the way Packer 1.11 and later want it, `packer plugins install
#      --path bin/packer-plugin-kpreload github.com/kpreload/kpreload`, into a plugin
#      directory of the demo's own (OUTDIR/packer: PACKER_PLUGIN_PATH and PACKER_CONFIG_DIR,
#      so nothing is written under ~/.config/packer);
#   2. `packer init`, `packer validate` and `packer build images/ci-testdriver.pkr.hcl` with
#      the real Packer: a Debian bookworm image (mmdebstrap), the test driver
#      built by the real dkms into a module cache, the kpreload initramfs and systemd-boot
#      on a GPT disk, written as raw + qcow2 + manifest;
#   3. `kpreload boot --image`: a copy-on-write overlay of the qcow2 in QEMU through OVMF and
#      the image's own bootloader, with -device edu and images/instance-testdriver.yaml passed
#      to /init through fw_cfg, until systemd reaches its default target;
#   4. print what it printed: the boot's milestones, /init's decision, the modules, the report.
#
# The image gets systemd.log_target=kmsg so that the timeline has systemd's default target in
# kernel time. The module cache and the root filesystem tarballs persist between runs under
# $KPRELOAD_CACHE (module-cache/ and rootfs/), so the second demo is much faster.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
top=$(cd "$here/.." && pwd)

out=$(realpath -m "${1:-/tmp/kpreload-demo-image}")
mkdir -p "$out/boot"
# The demo's own Packer plugin and configuration directories.
export PACKER_PLUGIN_PATH="$out/packer/plugins" PACKER_CONFIG_DIR="$out/packer/config" CHECKPOINT_DISABLE=1

log "1/4 Packer and the kpreload plugin"
packer=$("$here/packer.sh" | tail -n1)
echo "packer: $packer ($("$packer" version | head -n1))"
(cd "$top" && make -s plugin) || die "make plugin failed"
(cd "$top" && "$packer" plugins install --path bin/packer-plugin-kpreload github.com/kpreload/kpreload) ||
  die "packer plugins install failed"
"$packer" plugins installed

log "2/4 packer init, validate and build images/ci-testdriver.pkr.hcl"
vars=(
  -var "output_directory=$out/image"
  -var "cache_dir=$KPRELOAD_CACHE/module-cache"
  -var "rootfs_cache_dir=$KPRELOAD_CACHE/rootfs"
  -var "extra_cmdline=systemd.log_target=kmsg printk.devkmsg=on"
)
rm -rf "$out/image" # the last demo's image: validate refuses an existing output directory
start=$(date +%s)
(
  cd "$top"
  "$packer" init images/ci-testdriver.pkr.hcl
  "$packer" validate "${vars[@]}" images/ci-testdriver.pkr.hcl
  "$packer" build "${vars[@]}" images/ci-testdriver.pkr.hcl
)
echo "packer build took $(( $(date +%s) - start )) s"
ls -l "$out/image"

log "3/4 kpreload boot --image: the qcow2 through OVMF and systemd-boot, -device edu, instance YAML via fw_cfg"
# --timeout: TCG on a busy 2-core host can take more than boot's default 2 minutes.
"$top/bin/kpreload" boot --image "$out/image/ci-testdriver.qcow2" --device edu --timeout 10m \
  --instance "$top/images/instance-testdriver.yaml" --work-dir "$out/boot" >"$out/boot/summary.txt" ||
  { cat "$out/boot/summary.txt"; die "the image did not boot (see above)"; }

log "4/4 boot timeline and report"
cat "$out/boot/summary.txt"
echo "image manifest: $out/image/ci-testdriver.manifest.json"
