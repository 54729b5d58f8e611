// Command init is kpreload's /init for the initramfs (see package pid1).
// Build it static: CGO_ENABLED=0 go build -o init ./initramfs/cmd/init
package main

import "github.com/kpreload/kpreload/initramfs/pid1"

func main() { pid1.Main() }
