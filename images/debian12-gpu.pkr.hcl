# debian12-gpu: a Debian bookworm GPU image with NVIDIA's 535 driver (recipes/nvidia-535.yaml:
# proprietary kernel modules built by the real dkms, firmware-nvidia-gsp, and the matching
# userspace under /opt/kpreload/drivers/535.261.03/) on the newest 6.1 cloud kernel. The
# recipe's kernel matrix decides which kernel that is: it selects the newest 6.1 cloud-amd64
# release the archive offers, and the kernel must be in it (Prepare says so otherwise).
# A cold build compiles the driver once (about 4 minutes on 2 cores) into the module cache;
# later builds read it from there.
#
#   packer init images/debian12-gpu.pkr.hcl
#   packer build images/debian12-gpu.pkr.hcl
#   packer build -var kernel=6.1.0-57-cloud-amd64 images/debian12-gpu.pkr.hcl
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
  default     = "output/debian12-gpu"
  description = "Where debian12-gpu.raw, .qcow2 and .manifest.json are written."
}

variable "kernel" {
  type        = string
  default     = "6.1.0-56-cloud-amd64"
  description = "The newest 6.1 cloud kernel (nvidia-535's matrix: newest 1 of 6.1 cloud-amd64)."
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

source "kpreload" "debian12-gpu" {
  name             = "debian12-gpu"
  output_directory = var.output_directory
  kernels          = [var.kernel]
  recipes          = ["nvidia-535"]
  recipes_dir      = "${path.root}/../recipes"
  cache_dir        = var.cache_dir
  rootfs_cache_dir = var.rootfs_cache_dir
  build_missing    = true
  instance_file    = "${path.root}/instance-gpu.yaml"
  kernel_cmdline   = var.kernel_cmdline
  disk_size        = "8G"
  packages         = ["ca-certificates"]
  # cloud-init (NoCloud, ConfigDrive, EC2, GCE, Azure, OpenStack): the default user and its
  # SSH key from the metadata, the root grown to the disk; host keys made per instance.
  cloud_init = true
}

build {
  sources = ["source.kpreload.debian12-gpu"]
}
