// Package e2e holds the build half's end-to-end tests (no non-test code):
// the real `kpreload build` with the real dkms against real Debian kernels
// into a module cache, kpreload initramfs images assembled from that cache,
// and real QEMU boots of those kernels that prove each built driver loads on
// the kernel it was built for. Run them with go test; -short skips them.
package e2e
