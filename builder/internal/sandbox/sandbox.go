// Package sandbox runs a program of a root other than / inside that root,
// with none of the host's powers: the one place that turns "run argv inside
// root R" into bubblewrap's command line. The root is bound as / of a new
// mount namespace (bwrap pivots into it and detaches the host's tree, so no
// chroot escape or ".." leads back), with its own pid, IPC, UTS, cgroup and
// network namespaces (no network), a fresh /proc, a /dev of the basic
// character devices and only the block devices a Spec names, a tmpfs over
// /run, every capability dropped unless a Spec keeps it, no new privileges,
// a new session (no terminal to inject into), an environment of PATH and
// what the Spec adds, and the program killed when kpreload dies.
package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/internal/mountinfo"
)

// Bwrap is bubblewrap's program.
const Bwrap = "bwrap"

// Path is the PATH a program in the sandbox gets.
const Path = "/usr/sbin:/usr/bin:/sbin:/bin"

// ErrNoBwrap is Run's error when bubblewrap is not installed.
var ErrNoBwrap = errors.New("bwrap (Debian's bubblewrap package) is not installed: kpreload runs the programs of a root other than / only inside its sandbox; install it with apt-get install bubblewrap")

// Link is a symbolic link made inside the sandbox (in its /dev, say).
type Link struct {
	// Path is the link, Target what it points at.
	Path, Target string
}

// Spec is one program of a root, run inside it.
type Spec struct {
	// Root is the root the program comes from, bound read-write as /.
	Root string
	// Argv is the program, looked up in Path inside the root, and its
	// arguments.
	Argv []string
	// Env is added to the program's environment (KEY=VALUE), which holds
	// PATH and nothing of kpreload's.
	Env []string
	// Devices are host device nodes bound at their own paths (a root's
	// block devices, for grub-probe: RootDevices).
	Devices []string
	// HostSys binds the host's /sys read-only (grub-probe finds a device's
	// disk and partitions there); without it /sys is an empty tmpfs.
	HostSys bool
	// Links are made after /dev is mounted.
	Links []Link
	// Caps are the capabilities the program keeps (CAP_CHOWN ...); none
	// unless named.
	Caps []string
	// Log, when set, is given the program's output as it is written.
	Log io.Writer
}

// Args returns bwrap's arguments for s.
func Args(s Spec) []string {
	a := []string{
		"--die-with-parent", "--new-session",
		// user (identity-mapped for root), pid, net, ipc, uts, cgroup.
		"--unshare-all",
		"--cap-drop", "ALL",
	}
	for _, c := range s.Caps {
		a = append(a, "--cap-add", c)
	}
	a = append(a,
		"--bind", s.Root, "/",
		"--proc", "/proc",
		"--dev", "/dev",
		// The host's sockets never reach a root's program through a /run
		// bound into the root.
		"--tmpfs", "/run",
	)
	for _, d := range s.Devices {
		a = append(a, "--dev-bind", d, d)
	}
	if s.HostSys {
		a = append(a, "--ro-bind", "/sys", "/sys")
	} else {
		a = append(a, "--tmpfs", "/sys", "--remount-ro", "/sys")
	}
	for _, l := range s.Links {
		a = append(a, "--symlink", l.Target, l.Path)
	}
	a = append(a, "--chdir", "/", "--clearenv", "--setenv", "PATH", Path)
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	return append(append(a, "--"), s.Argv...)
}

// Cmd is the runner's command for s.
func Cmd(s Spec) runner.Cmd {
	return runner.Cmd{Name: Bwrap, Args: Args(s), Log: s.Log}
}

// Run runs s with r (nil: runner.Default) and returns the program's
// standard output; it fails with ErrNoBwrap, before anything runs, when
// bubblewrap is not installed.
func Run(ctx context.Context, r runner.Runner, s Spec) ([]byte, error) {
	r = runner.Or(r)
	if len(s.Argv) == 0 {
		return nil, errors.New("sandbox: no program to run")
	}
	if _, err := r.LookPath(Bwrap); err != nil {
		return nil, fmt.Errorf("%s in %s: %w", s.Argv[0], s.Root, ErrNoBwrap)
	}
	out, err := r.Run(ctx, Cmd(s))
	if err != nil {
		return out, fmt.Errorf("%s in the sandbox of %s: %w", s.Argv[0], s.Root, err)
	}
	return out, nil
}

// RootDevices returns the block devices grub-probe needs to examine root:
// when root is the mount point of a whole filesystem on a block device
// (a loop-mounted image, a volume being built), that device, and the disk
// it is a partition of unless another mounted filesystem lies on that disk
// (the host's own disk is never handed to a root's program). A root that is
// a directory of a larger filesystem, or a bind mount of one, gets none.
func RootDevices(root string) []string {
	return rootDevices(root, "/proc/self/mountinfo", "/sys", "/dev")
}

// mount is one line of mountinfo: its device, the path of the filesystem
// it shows, and where.
type mount struct{ dev, fsRoot, at string }

func readMounts(file string) []mount {
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	var ms []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 {
			continue
		}
		ms = append(ms, mount{dev: fs[2], fsRoot: mountinfo.Unescape(fs[3]), at: mountinfo.Unescape(fs[4])})
	}
	return ms
}

func rootDevices(root, mountinfoFile, sys, dev string) []string {
	abs, err := filepath.Abs(root)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return nil
	}
	ms := readMounts(mountinfoFile)
	var top *mount
	for i := range ms {
		if ms[i].at == abs {
			top = &ms[i] // the last is the one on top
		}
	}
	if top == nil || top.fsRoot != "/" {
		return nil
	}
	devDir := filepath.Join(sys, "dev/block", top.dev)
	node := devNode(devDir, dev)
	if node == "" {
		return nil
	}
	devs := []string{node}
	if _, err := os.Stat(filepath.Join(devDir, "partition")); err != nil {
		return devs
	}
	real, err := filepath.EvalSymlinks(devDir)
	if err != nil {
		return devs
	}
	disk := filepath.Dir(real)
	for _, m := range ms {
		if m.dev == top.dev {
			continue
		}
		p, err := filepath.EvalSymlinks(filepath.Join(sys, "dev/block", m.dev))
		if err == nil && (p == disk || strings.HasPrefix(p, disk+"/")) {
			return devs // the disk holds another mounted filesystem
		}
	}
	if d := devNode(disk, dev); d != "" {
		devs = append(devs, d)
	}
	return devs
}

// devNode is the node in devDir (/dev) of the block device whose sysfs
// directory is dir (its uevent's DEVNAME), when devDir has it as that block
// device.
func devNode(dir, devDir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "uevent"))
	if err != nil {
		return ""
	}
	var name, dev string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "DEVNAME="); ok {
			name = v
		}
	}
	if d, err := os.ReadFile(filepath.Join(dir, "dev")); err == nil {
		dev = strings.TrimSpace(string(d))
	}
	if name == "" || strings.Contains(name, "..") {
		return ""
	}
	node := filepath.Join(devDir, name)
	var st unix.Stat_t
	if err := unix.Stat(node, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK ||
		fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)) != dev {
		return ""
	}
	return node
}
