// Command init is kpreload's /init for the initramfs (see package pid1).
// Build it static: CGO_ENABLED=0 go build -o init ./initramfs/cmd/init
package main

import "github.com/kpreload/kpreload/initramfs/pid1"

// main runs the boot on the running system's roots and system calls; it does not return.
func main() { pid1.Run(pid1.RealOptions()) }
