// Package e2e holds the end-to-end test of following an apt archive: a
// kernel published in a signed apt archive on loopback, its driver cell
// built and pushed to a registry by one cycle, and a VM booted from a
// kpreload GRUB image (under SeaBIOS and OVMF) that installs the kernel with
// apt and comes up on it with its driver bound, with the image's own
// update-grub, kernel removal and a boot with no driver that `kpreload
// switch` brings up (TestFollowE2E). It has no code outside its tests.
package e2e
