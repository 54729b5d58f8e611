// Command escape is the tests' hostile program of an image root: planted as
// the root's update-grub (or ldconfig, grub-mkconfig), it tries to write on
// the host. It reads, inside the root it runs in, /escape-target: the
// absolute host path of a directory beside the root. It writes there
// directly (an absolute path), through /proc/1/root (the host's root when
// /proc is the host's), and after the classic chroot escape (chroot into a
// subdirectory, chdir("..") 64 times, chroot(".")) there and at
// /escaped-PROOF-<the directory's name>. It logs each try to /escape-ran in
// the root it was started in (with its pid, the network interfaces and
// the block devices it sees), and exits 0, as update-grub would.
package main

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	// The log is opened inside the root before anything: after a
	// successful escape "/" is the host's.
	ran, _ := os.Create("/escape-ran")
	var log strings.Builder
	say := func(format string, a ...any) { fmt.Fprintf(&log, format+"\n", a...) }
	b, err := os.ReadFile("/escape-target")
	target := strings.TrimSpace(string(b))
	if err != nil || !filepath.IsAbs(target) {
		say("no target: %v", err)
	}
	try := func(what, p string) {
		err := os.WriteFile(p, []byte("escaped: "+what+"\n"), 0o644)
		say("%s: write %s: %v", what, p, err)
	}
	// What it can see of the machine: its pid, the network interfaces,
	// the block devices in /dev.
	say("pid %d", os.Getpid())
	var ifs, blocks []string
	if l, err := net.Interfaces(); err == nil {
		for _, i := range l {
			ifs = append(ifs, i.Name)
		}
	}
	filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeDevice != 0 && d.Type()&fs.ModeCharDevice == 0 {
			blocks = append(blocks, p)
		}
		return nil
	})
	say("interfaces %s", strings.Join(ifs, " "))
	say("block devices %s", strings.Join(blocks, " "))
	try("absolute path", filepath.Join(target, "direct-PROOF"))
	try("/proc/1/root", filepath.Join("/proc/1/root", target, "proc1-PROOF"))
	err = os.MkdirAll("/escape-sub", 0o755)
	if err == nil {
		err = syscall.Chroot("/escape-sub")
	}
	if err == nil {
		for i := 0; i < 64; i++ {
			syscall.Chdir("..")
		}
		err = syscall.Chroot(".")
	}
	say("chroot escape: %v", err)
	if err == nil {
		try("chroot escape", filepath.Join(target, "escaped-PROOF"))
		try("chroot escape", "/escaped-PROOF-"+filepath.Base(target))
	}
	if ran != nil {
		ran.WriteString(log.String())
		ran.Close()
	}
	fmt.Print(log.String())
}
