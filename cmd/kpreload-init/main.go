// Command kpreload-init is kpreload's /init for the initramfs (see package pid1), and
// the kernel's module helper there (/sbin/modprobe links to it; see
// pid1.Modprobe). Build it static: CGO_ENABLED=0 go build -o init ./cmd/kpreload-init
package main

import (
	"os"

	"github.com/kpreload/kpreload/initramfs/modprobe"
	"github.com/kpreload/kpreload/initramfs/pid1"
)

// main serves the kernel's module request when started as its helper;
// otherwise it runs the boot on the running system's roots and system
// calls, and does not return.
func main() {
	if modprobe.Invoked(os.Args, os.Getpid()) {
		os.Exit(pid1.Modprobe(pid1.RealOptions(os.Environ()), os.Args[1:]))
	}
	pid1.Run(pid1.RealOptions(os.Environ()))
}
