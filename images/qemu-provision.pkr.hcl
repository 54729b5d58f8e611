# qemu-provision: kpreload added to a disk image another tool made (diskimage-builder's, a
# cloud image: DHCP on its NIC, sshd with host keys, a login user with passwordless sudo;
# docs/packer.md says what diskimage-builder needs for that) by Packer's QEMU builder: it boots
# a copy of the image (disk_image = true), logs in over SSH as the image's non-root user, and
# provisioner "kpreload" installs the driver cells for the image's kernel through sudo
# (use_sudo) and makes the image's own GRUB boot kpreload's initramfs. The output is a
# raw disk in output_directory; the input is only read.
#
#   scripts/packer.sh --qemu --install
#   PKR_VAR_disk_image=debian.raw PKR_VAR_kernel=6.1.0-57-amd64 PKR_VAR_ssh_password=devuser \
#     packer build images/qemu-provision.pkr.hcl
#
# The kernel must be in the recipe's kernel matrix (recipes_dir holds a recipe of your own
# that lists the image's kernel). Tested with Packer 1.15.0 and packer-plugin-qemu 1.0.9
# (docs/packer.md); with the kpreload plugin installed as ci-testdriver.pkr.hcl says.

packer {
  required_plugins {
    qemu = {
      source  = "github.com/hashicorp/qemu"
      version = ">= 1.0.9"
    }
    kpreload = {
      source  = "github.com/kpreload/kpreload"
      version = ">= 0.2.0"
    }
  }
}

variable "disk_image" {
  type        = string
  description = "The raw disk image to add kpreload to (only read: the QEMU builder boots a copy)."
}

variable "kernel" {
  type        = string
  description = "The image's kernel release (uname -r), such as 6.1.0-57-amd64; it must be in the recipe's kernel matrix."
}

variable "recipe" {
  type        = string
  default     = "testdriver"
  description = "The driver: a recipe name in recipes_dir, or a path to a recipe file."
}

variable "recipes_dir" {
  type        = string
  default     = ""
  description = "Where the recipe is looked up; empty: the repository's recipes/."
}

variable "cache_dir" {
  type        = string
  default     = ""
  description = "The kpreload module cache; empty: $KPRELOAD_CACHE_DIR, else /var/lib/kpreload/cache."
}

variable "output_directory" {
  type        = string
  default     = "output/qemu-provision"
  description = "Where the provisioned disk (vm_name) is written."
}

variable "vm_name" {
  type        = string
  default     = "disk.raw"
  description = "The provisioned disk's file name in output_directory."
}

variable "ssh_username" {
  type        = string
  default     = "devuser"
  description = "The image's login user: not root, with passwordless sudo."
}

variable "ssh_password" {
  type        = string
  default     = ""
  sensitive   = true
  description = "Its password (or give ssh_private_key_file)."
}

variable "ssh_private_key_file" {
  type        = string
  default     = ""
  description = "Its SSH private key (or give ssh_password)."
}

variable "ssh_timeout" {
  type        = string
  default     = "30m"
  description = "How long the image may take to boot to SSH: minutes under TCG."
}

variable "shutdown_timeout" {
  type        = string
  default     = "10m"
  description = "How long the image may take to power off after the provisioner."
}

variable "accelerator" {
  type        = string
  default     = ""
  description = "QEMU's accelerator: kvm, tcg; empty: kvm where /dev/kvm opens, else tcg."
}

variable "serial_log" {
  type        = string
  default     = ""
  description = "A file the guest's first serial port (the console of images made for clouds) is written to; empty: none."
}

source "qemu" "image" {
  disk_image           = true
  iso_url              = var.disk_image
  iso_checksum         = "none"
  format               = "raw"
  skip_resize_disk     = true
  accelerator          = var.accelerator
  headless             = true
  memory               = 1024
  cpus                 = 2
  disk_interface       = "virtio"
  net_device           = "virtio-net"
  ssh_username         = var.ssh_username
  ssh_password         = var.ssh_password
  ssh_private_key_file = var.ssh_private_key_file
  ssh_timeout          = var.ssh_timeout
  shutdown_command     = "sudo -n poweroff"
  shutdown_timeout     = var.shutdown_timeout
  output_directory     = var.output_directory
  vm_name              = var.vm_name
  qemuargs             = var.serial_log != "" ? [["-serial", "file:${var.serial_log}"]] : []
}

build {
  sources = ["source.qemu.image"]

  provisioner "kpreload" {
    kernels     = [var.kernel]
    recipes     = [var.recipe]
    recipes_dir = var.recipes_dir != "" ? var.recipes_dir : "${path.root}/../recipes"
    cache_dir   = var.cache_dir
    use_sudo    = true
  }
}
