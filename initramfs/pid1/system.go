package pid1

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/u-root/u-root/pkg/mount"
	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/initramfs/rootfs"
	"github.com/kpreload/kpreload/live/coldplug"
	"github.com/kpreload/kpreload/live/fwcfg"
)

// System is the system calls /init makes that a test cannot: mounts, the
// root's lookup, fw_cfg's I/O ports, the hand-over and waits. Module loads
// go through Options.Kernel.
type System interface {
	// Release returns the running kernel's release (uname -r).
	Release() string
	// Mount mounts a filesystem (mount(2)).
	Mount(src, dst, fstype string, flags uintptr, data string) error
	// Unmount unmounts dir (umount(2)).
	Unmount(dir string) error
	// FindRoot returns the block device root= names (rootfs.Find).
	FindRoot(spec rootfs.Spec) (string, error)
	// MountRoot mounts the root filesystem (rootfs.Mount).
	MountRoot(dev, dir, fstype string, o rootfs.Options) error
	// ReadFwCfg reads a fw_cfg file through the device's I/O ports (fwcfg.ReadFile).
	ReadFwCfg(name string) ([]byte, error)
	// SwitchRoot makes newRoot the root and executes init in it; it returns only on failure.
	SwitchRoot(newRoot, init string) error
	// Exec executes path in place of this process; it returns only on failure.
	Exec(path string) error
	// Shell runs the emergency shell at path on console and waits for it.
	Shell(path string, console io.Writer) error
	// Sleep waits for d.
	Sleep(d time.Duration)
	// WatchDevices starts listening for the kernel's device events: wait
	// returns once one has come or after d, stop ends the listening.
	WatchDevices() (wait func(d time.Duration), stop func(), err error)
	// Reboot restarts the machine (reboot(2)), so that the boot loader
	// picks its fallback entry; it returns only on failure.
	Reboot() error
}

// realSystem is the running kernel's; env is the environment the kernel
// gave /init, passed on to the programs it executes.
type realSystem struct{ env []string }

func (realSystem) Release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func (realSystem) Mount(src, dst, fstype string, flags uintptr, data string) error {
	return unix.Mount(src, dst, fstype, flags, data)
}

func (realSystem) Unmount(dir string) error { return unix.Unmount(dir, 0) }

func (realSystem) FindRoot(spec rootfs.Spec) (string, error) { return rootfs.Find(spec) }

func (realSystem) MountRoot(dev, dir, fstype string, o rootfs.Options) error {
	return rootfs.Mount(dev, dir, fstype, o)
}

func (realSystem) ReadFwCfg(name string) ([]byte, error) { return fwcfg.ReadFile(name) }

func (realSystem) SwitchRoot(newRoot, init string) error { return mount.SwitchRoot(newRoot, init) }

func (s realSystem) Exec(path string) error { return unix.Exec(path, []string{path}, s.env) }

func (realSystem) Shell(path string, console io.Writer) error {
	c := exec.Command(path)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, console, console
	if err := c.Run(); err != nil {
		return fmt.Errorf("shell %s: %w", path, err)
	}
	return nil
}

func (realSystem) Sleep(d time.Duration) { time.Sleep(d) }

func (realSystem) WatchDevices() (func(time.Duration), func(), error) {
	ev, err := coldplug.OpenEvents()
	if err != nil {
		return nil, nil, err
	}
	return func(d time.Duration) { ev.Wait(d) }, func() { ev.Close() }, nil
}

func (realSystem) Reboot() error {
	// Nothing /init mounted is written to; the ESP and /boot are not mounted.
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); err != nil {
		return fmt.Errorf("reboot(2): %w", err)
	}
	return nil
}
