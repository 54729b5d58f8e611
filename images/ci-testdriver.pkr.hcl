# ci-testdriver: the CI image. Debian bookworm (or trixie, -var suite=trixie) with one kernel,
# kpreload's /init and only the
# project's own test driver (recipes/testdriver.yaml: kpreload_edu for QEMU's `-device edu`),
# so that a QEMU boot proves the whole chain (match, load, probe, bind before /sbin/init)
# without a GPU. The kernel command line sends the console to ttyS0 and kpreload's boot
# report to ttyS1, where builder/qemu reads them.
#
#   packer plugins install --path bin/packer-plugin-kpreload github.com/kpreload/kpreload
#   packer init images/ci-testdriver.pkr.hcl
#   packer build images/ci-testdriver.pkr.hcl
#   packer build -var suite=trixie images/ci-testdriver.pkr.hcl
#
# (after `make plugin`; the plugin finds bin/kpreload and bin/kpreload-init in the directory
# Packer runs in: docs/packer.md.)

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
  default     = "output/ci-testdriver"
  description = "Where ci-testdriver.raw, .qcow2 and .manifest.json are written."
}

variable "suite" {
  type        = string
  default     = "bookworm"
  description = "The Debian suite of the root filesystem: bookworm (Debian 12) or trixie (Debian 13)."
}

variable "kernel" {
  type        = string
  default     = ""
  description = "The kernel release the image boots (must be in recipes/testdriver.yaml's matrix); empty: the suite's cloud kernel of the matrix (bookworm 6.1.0-56-cloud-amd64, trixie 6.12.118+deb13-cloud-amd64)."
}

locals {
  default_kernel = {
    bookworm = "6.1.0-56-cloud-amd64"
    trixie   = "6.12.118+deb13-cloud-amd64"
  }
  kernel = var.kernel != "" ? var.kernel : lookup(local.default_kernel, var.suite, "")
}

variable "cache_dir" {
  type        = string
  default     = ""
  description = "The kpreload module cache; empty: $KPRELOAD_CACHE_DIR, else /var/lib/kpreload/cache."
}

variable "rootfs_cache_dir" {
  type        = string
  default     = ""
  description = "Where mmdebstrap tarballs are kept between builds; empty: /var/cache/kpreload/rootfs, off: never."
}

variable "bootloader" {
  type        = string
  default     = "systemd-boot"
  description = "The image's boot loader: systemd-boot (UEFI) or grub (BIOS and UEFI from one disk)."
}

variable "secure_boot" {
  type        = bool
  default     = false
  description = "Build for UEFI Secure Boot (needs bootloader = grub and a recipes_dir whose testdriver recipe signs its modules; scripts/bench-image.sh makes one)."
}

variable "cloud_init" {
  type        = bool
  default     = false
  description = "Add Debian's cloud-init (NoCloud and the clouds' datasources)."
}

variable "recipes_dir" {
  type        = string
  default     = ""
  description = "Where the testdriver recipe is looked up; empty: the repository's recipes/."
}

variable "extra_cmdline" {
  type        = string
  default     = ""
  description = "Appended to the kernel command line (scripts/bench-image.sh adds systemd.log_target=kmsg)."
}

variable "kpreload_binary" {
  type        = string
  default     = ""
  description = "The static kpreload CLI put into the image; empty: kpreload next to the plugin, else bin/kpreload where Packer runs (make build)."
}

variable "init_binary" {
  type        = string
  default     = ""
  description = "The static /init program; empty: kpreload-init next to the plugin, else bin/kpreload-init where Packer runs (make build)."
}

source "kpreload" "ci-testdriver" {
  name             = "ci-testdriver"
  output_directory = var.output_directory
  suite            = var.suite
  kernels          = [local.kernel]
  recipes          = ["testdriver"]
  recipes_dir      = var.recipes_dir != "" ? var.recipes_dir : "${path.root}/../recipes"
  cache_dir        = var.cache_dir
  rootfs_cache_dir = var.rootfs_cache_dir
  instance_file    = "${path.root}/instance-ci.yaml"
  kernel_cmdline   = trimspace("console=ttyS0 panic=-1 kpreload.report=/dev/ttyS1 ${var.extra_cmdline}")
  bootloader       = var.bootloader
  secure_boot      = var.secure_boot
  cloud_init       = var.cloud_init
  disk_size        = "1536M"
  esp_size         = "128M"
  formats          = ["raw", "qcow2"]
  kpreload_binary  = var.kpreload_binary
  init_binary      = var.init_binary
}

build {
  sources = ["source.kpreload.ci-testdriver"]
}
