#!/usr/bin/env bash
# demo-image.sh: kpreload's main user path, end to end, on its built-in default.
#
#   scripts/demo-image.sh [OUTDIR]     (default /tmp/kpreload-demo-image)
#
#   1. install Packer 1.9.4 if needed (scripts/packer.sh) and build the kpreload plugin;
#   2. `packer build images/ci-testdriver.pkr.hcl` with the real Packer, the plugin found
#      through PACKER_PLUGIN_PATH: a Debian bookworm image (mmdebstrap), the test driver
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
mkdir -p "$out/plugins" "$out/boot"

log "1/4 Packer and the kpreload plugin"
packer=$("$here/packer.sh" | tail -n1)
echo "packer: $packer ($("$packer" version | head -n1))"
(
  cd "$top"
  go build -o "$out/plugins/packer-plugin-kpreload" ./cmd/packer-plugin-kpreload
  CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/plugins/kpreload" ./cmd/kpreload
  CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/plugins/kpreload-init" ./initramfs/cmd/init
) || die "go build failed"
echo "PACKER_PLUGIN_PATH=$out/plugins"

log "2/4 packer build images/ci-testdriver.pkr.hcl"
start=$(date +%s)
(cd "$top" && PACKER_PLUGIN_PATH="$out/plugins" CHECKPOINT_DISABLE=1 "$packer" build -force \
  -var "output_directory=$out/image" \
  -var "cache_dir=$KPRELOAD_CACHE/module-cache" \
  -var "rootfs_cache_dir=$KPRELOAD_CACHE/rootfs" \
  -var "extra_cmdline=systemd.log_target=kmsg printk.devkmsg=on" \
  images/ci-testdriver.pkr.hcl)
echo "packer build took $(( $(date +%s) - start )) s"
ls -l "$out/image"

log "3/4 kpreload boot --image: the qcow2 through OVMF and systemd-boot, -device edu, instance YAML via fw_cfg"
"$out/plugins/kpreload" boot --image "$out/image/ci-testdriver.qcow2" --device edu \
  --instance "$top/images/instance-testdriver.yaml" --work-dir "$out/boot" >"$out/boot/summary.txt" ||
  { cat "$out/boot/summary.txt"; die "the image did not boot (see above)"; }

log "4/4 boot timeline and report"
cat "$out/boot/summary.txt"
echo "image manifest: $out/image/ci-testdriver.manifest.json"
