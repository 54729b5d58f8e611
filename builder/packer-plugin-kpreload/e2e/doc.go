// Package e2e holds the kpreload Packer plugin's end-to-end tests: the real
// Packer (installed by scripts/packer.sh when missing), the plugin built from
// this tree and found through PACKER_PLUGIN_PATH, `packer validate` of the
// templates in images/, a real `packer build` of images/ci-testdriver.pkr.hcl
// (mmdebstrap, the real dkms) and a QEMU boot of its qcow2 through OVMF and the
// image's own bootloader.
package e2e
