# debian13-gpu: a Debian 13 (trixie) GPU image with NVIDIA's 550 branch in both flavours,
# nvidia-550 (proprietary) and nvidia-550-open, precompiled for trixie's cloud kernel in a
# trixie build root (gcc-14) and chosen at boot by /init (flavour auto: open on GPUs whose
# supported-gpus.json entry has "kernelopen", such as the H100 and H200). Each version's
# userspace (libcuda1, libnvidia-ml1, libnvidia-cfg1, nvidia-smi, nvidia-persistenced) is
# under /opt/kpreload/drivers/550.163.01, the GSP firmware in /lib/firmware/nvidia/550.163.01.
#
#   packer init images/debian13-gpu.pkr.hcl
#   packer build images/debian13-gpu.pkr.hcl
#
# (with the plugin installed: see ci-testdriver.pkr.hcl and docs/packer.md.)

packer {
  required_plugins {
    kpreload = {
      source  = "github.com/kpreload/kpreload"
      version = ">= 0.2.0"
    }
  }
}

variable "output_directory" {
  type        = string
  default     = "output/debian13-gpu"
  description = "Where debian13-gpu.raw, .qcow2 and .manifest.json are written."
}

variable "kernel" {
  type        = string
  default     = "6.12.118+deb13-cloud-amd64"
  description = "Trixie's newest cloud kernel (the recipes' matrix: newest 1 of 6.12 cloud-amd64 in trixie)."
}

variable "cache_dir" {
  type        = string
  default     = ""
  description = "The kpreload module cache; empty: $KPRELOAD_CACHE_DIR, else /var/lib/kpreload/cache."
}

variable "rootfs_cache_dir" {
  type    = string
  default = ""
}

variable "kernel_cmdline" {
  type        = string
  default     = "console=tty0 console=ttyS0,115200"
  description = "Added to the boot entries after root=UUID=... rw."
}

source "kpreload" "debian13-gpu" {
  name             = "debian13-gpu"
  output_directory = var.output_directory
  suite            = "trixie"
  kernels          = [var.kernel]
  recipes          = ["nvidia-550", "nvidia-550-open"]
  recipes_dir      = "${path.root}/../recipes"
  cache_dir        = var.cache_dir
  rootfs_cache_dir = var.rootfs_cache_dir
  build_missing    = true
  instance_file    = "${path.root}/instance-gpu-550.yaml"
  kernel_cmdline   = var.kernel_cmdline
  disk_size        = "8G"
  packages         = ["ca-certificates"]
  # cloud-init (NoCloud, ConfigDrive, EC2, GCE, Azure, OpenStack): the default user and its
  # SSH key from the metadata, the root grown to the disk; host keys made per instance.
  cloud_init = true
}

build {
  sources = ["source.kpreload.debian13-gpu"]
}
