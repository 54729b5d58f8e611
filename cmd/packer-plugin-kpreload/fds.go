package main

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// cloexecInherited marks every inherited file descriptor above stderr
// close-on-exec. Packer starts plugins with some of its own descriptors open
// (its log output, /dev/null, a pipe) and without FD_CLOEXEC, so they would
// leak into every program the plugin runs; mmdebstrap then gets pipe numbers
// of 10 and up, which apt hands to /bin/sh as `cat >&10`, and dash cannot
// parse a two-digit descriptor ("Bad fd number"). The plugin itself keeps
// the descriptors; only its children no longer inherit them.
func cloexecInherited() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		unix.CloseOnExec(fd)
	}
}
