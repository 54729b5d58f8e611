// Command kpreload precompiles GPU drivers into a module cache, builds initramfs
// images that load them before userspace, and boots those images in QEMU.
package main

import (
	"os"

	"github.com/kpreload/kpreload/cmd/kpreload/cli"
)

func main() {
	os.Exit(cli.Execute(os.Args[1:], os.Stdout, os.Stderr))
}
