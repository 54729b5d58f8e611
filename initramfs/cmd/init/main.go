// Command init is kpreload's /init for the initramfs (see package pid1).
// Build it static: CGO_ENABLED=0 go build -o init ./initramfs/cmd/init
//
// Run as "init __kpreload_finit PARAMS FLAGS" it is the helper process of an
// isolated module load (loader.HelperMain): /init loads driver sets that way,
// so a module whose init never returns cannot hold the boot.
package main

import (
	"os"

	"github.com/kpreload/kpreload/initramfs/pid1"
	"github.com/kpreload/kpreload/live/loader"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == loader.HelperArg {
		os.Exit(loader.HelperMain(os.Args[2:]))
	}
	pid1.Main()
}
