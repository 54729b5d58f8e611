// Package devnodes creates the NVIDIA device nodes (/dev/nvidiactl, /dev/nvidia<minor>,
// /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia-caps/nvidia-cap<minor>) after the
// driver is loaded, the way nvidia-modprobe would, without running it: majors come
// from /proc/devices (the uvm and caps majors are dynamic), GPU minors from
// /proc/driver/nvidia/gpus/*/information and capability minors and modes from
// /proc/driver/nvidia/capabilities.
package devnodes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/internal/inroot"
)

// Node is one character device node to create.
type Node struct {
	// Path is the node's absolute path under the dev directory given to Plan.
	Path string
	// Major and Minor are the device numbers.
	Major, Minor uint32
	// Mode holds the permission bits (0666 for most nodes); every node is a
	// character device.
	Mode os.FileMode
}

// String renders the node like ls -l does: "/dev/nvidia0 c 195,0 0666".
func (n Node) String() string {
	return fmt.Sprintf("%s c %d,%d %04o", n.Path, n.Major, n.Minor, n.Mode.Perm())
}

// CtlMinor is the minor number of /dev/nvidiactl.
const CtlMinor = 255

// capabilities are the system-wide capability files nvidia-modprobe -f makes nodes
// for (what nvidia-smi asks it to create): MIG configuration and monitoring.
// Per-instance capabilities (gpu*/mig/gi*/access) only exist while MIG instances
// do and are made by the container runtime that hands them out.
var capabilities = []string{CapMIGConfig, CapMIGMonitor}

// CapMIGConfig and CapMIGMonitor name the MIG capabilities under
// /proc/driver/nvidia/capabilities: configuring MIG (creating and destroying
// GPU and compute instances, for every GPU) and monitoring it.
const (
	CapMIGConfig  = "mig/config"
	CapMIGMonitor = "mig/monitor"
)

// Plan returns the nodes the loaded NVIDIA driver needs, reading procDir (usually
// "/proc") and naming them under devDir (usually "/dev"), sorted by path. With no
// NVIDIA driver loaded (no "nvidia" major in <procDir>/devices) it returns no nodes
// and no error. uvm and caps nodes are planned only when their majors are registered.
func Plan(procDir, devDir string) ([]Node, error) {
	return plan(hostFiles, procDir, devDir)
}

// PlanIn is Plan for the system at root (procDir is a path inside it): every
// file is resolved inside root and read up to inroot.MaxText bytes, and
// errors name files as root joined with their path.
func PlanIn(root, procDir, devDir string) ([]Node, error) {
	return plan(rootFiles(root), procDir, devDir)
}

// CapabilityIn returns the minor number of the capability (CapMIGConfig,
// CapMIGMonitor) as the driver at root registered it (the node is
// <devDir>/nvidia-caps/nvidia-cap<minor>); the error wraps fs.ErrNotExist
// when the driver has no such capability.
func CapabilityIn(root, procDir, capability string) (uint32, error) {
	minor, _, err := readCapability(rootFiles(root), filepath.Join(procDir, "driver", "nvidia", "capabilities", capability))
	return minor, err
}

// files is how Plan reads: from the host, or inside a root.
type files struct {
	read func(name string) ([]byte, error)
	glob func(pattern string) ([]string, error)
	// name is the file's name for errors.
	name func(name string) string
}

var hostFiles = files{read: os.ReadFile, glob: filepath.Glob, name: func(n string) string { return n }}

func rootFiles(root string) files {
	return files{
		read: func(n string) ([]byte, error) { return inroot.ReadFile(root, n, inroot.MaxText) },
		glob: func(p string) ([]string, error) { return inroot.Glob(root, p) },
		name: func(n string) string { return filepath.Join(root, n) },
	}
}

func plan(fsys files, procDir, devDir string) ([]Node, error) {
	majors, err := readMajors(fsys, filepath.Join(procDir, "devices"))
	if err != nil {
		return nil, err
	}
	gpuMajor, ok := first(majors, "nvidia", "nvidia-frontend")
	if !ok {
		return nil, nil
	}
	ctlMajor, _ := first(majors, "nvidiactl", "nvidia-frontend", "nvidia")
	nodes := []Node{{Path: filepath.Join(devDir, "nvidiactl"), Major: ctlMajor, Minor: CtlMinor, Mode: 0o666}}
	minors, err := gpuMinors(fsys, filepath.Join(procDir, "driver", "nvidia", "gpus"))
	if err != nil {
		return nil, err
	}
	for _, m := range minors {
		nodes = append(nodes, Node{Path: filepath.Join(devDir, fmt.Sprintf("nvidia%d", m)), Major: gpuMajor, Minor: m, Mode: 0o666})
	}
	if uvm, ok := majors["nvidia-uvm"]; ok {
		nodes = append(nodes,
			Node{Path: filepath.Join(devDir, "nvidia-uvm"), Major: uvm, Minor: 0, Mode: 0o666},
			Node{Path: filepath.Join(devDir, "nvidia-uvm-tools"), Major: uvm, Minor: 1, Mode: 0o666})
	}
	if caps, ok := majors["nvidia-caps"]; ok {
		for _, c := range capabilities {
			path := filepath.Join(procDir, "driver", "nvidia", "capabilities", c)
			minor, mode, err := readCapability(fsys, path)
			if errors.Is(err, fs.ErrNotExist) {
				continue // older drivers, or MIG not supported
			}
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, Node{Path: filepath.Join(devDir, "nvidia-caps", fmt.Sprintf("nvidia-cap%d", minor)), Major: caps, Minor: minor, Mode: mode})
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Path < nodes[j].Path })
	return nodes, nil
}

// first returns the major of the first name registered.
func first(majors map[string]uint32, names ...string) (uint32, bool) {
	for _, n := range names {
		if m, ok := majors[n]; ok {
			return m, true
		}
	}
	return 0, false
}

// readMajors parses the "Character devices:" section of /proc/devices.
func readMajors(fsys files, path string) (map[string]uint32, error) {
	b, err := fsys.read(path)
	if err != nil {
		return nil, fmt.Errorf("device majors: %w", err)
	}
	majors := map[string]uint32{}
	inChar := false
	for i, text := range strings.Split(string(b), "\n") {
		line := i + 1
		text = strings.TrimSpace(text)
		switch {
		case text == "Character devices:":
			inChar = true
			continue
		case strings.HasSuffix(text, "devices:"):
			inChar = false
			continue
		case text == "" || !inChar:
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want \"<major> <name>\", got %q", fsys.name(path), line, text)
		}
		v, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: major %q: %w", fsys.name(path), line, fields[0], err)
		}
		if _, dup := majors[fields[1]]; !dup {
			majors[fields[1]] = uint32(v)
		}
	}
	return majors, nil
}

// gpuMinors reads "Device Minor:" from every <dir>/*/information, sorted.
func gpuMinors(fsys files, dir string) ([]uint32, error) {
	files, err := fsys.glob(filepath.Join(dir, "*", "information"))
	if err != nil {
		return nil, err
	}
	var minors []uint32
	for _, p := range files {
		v, err := field(fsys, p, "Device Minor")
		if err != nil {
			return nil, err
		}
		minors = append(minors, v)
	}
	sort.Slice(minors, func(i, j int) bool { return minors[i] < minors[j] })
	return minors, nil
}

// readCapability reads a capability file's DeviceFileMinor and DeviceFileMode.
func readCapability(fsys files, path string) (uint32, os.FileMode, error) {
	minor, err := field(fsys, path, "DeviceFileMinor")
	if err != nil {
		return 0, 0, err
	}
	mode, err := field(fsys, path, "DeviceFileMode")
	if err != nil {
		return 0, 0, err
	}
	if mode&^0o777 != 0 {
		return 0, 0, fmt.Errorf("%s: DeviceFileMode %d is not a permission mode", fsys.name(path), mode)
	}
	return minor, os.FileMode(mode), nil
}

// field returns the decimal value of a "Key: value" line in a procfs file.
func field(fsys files, path, key string) (uint32, error) {
	b, err := fsys.read(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) != key {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%s: %s %q: %w", fsys.name(path), key, strings.TrimSpace(v), err)
		}
		return uint32(n), nil
	}
	return 0, fmt.Errorf("%s: no %q line", fsys.name(path), key+":")
}

// Create makes every node: parent directories (0755) as needed, a character device
// with the right numbers and exactly the node's mode (the umask does not apply).
// It is idempotent: a correct node is left alone, a wrong one (another type or
// other numbers) is replaced. It tries every node and returns all errors joined.
func Create(nodes []Node) error {
	var errs []error
	for _, n := range nodes {
		if err := create(n); err != nil {
			errs = append(errs, fmt.Errorf("create %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

func create(n Node) error {
	if err := mkdirs(filepath.Dir(n.Path)); err != nil {
		return err
	}
	dev := unix.Mkdev(n.Major, n.Minor)
	var st unix.Stat_t
	if err := unix.Lstat(n.Path, &st); err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == dev {
			if os.FileMode(st.Mode&0o7777) == n.Mode.Perm() {
				return nil
			}
			return os.Chmod(n.Path, n.Mode.Perm())
		}
		if err := os.Remove(n.Path); err != nil {
			return fmt.Errorf("replace wrong node: %w", err)
		}
	} else if !errors.Is(err, unix.ENOENT) {
		return err
	}
	if err := unix.Mknod(n.Path, unix.S_IFCHR|uint32(n.Mode.Perm()), int(dev)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("mknod: %w", err)
	}
	// mknod applies the umask; set the mode exactly.
	return os.Chmod(n.Path, n.Mode.Perm())
}

// mkdirs creates dir and its missing parents with mode 0755 whatever the umask.
func mkdirs(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirs(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(dir, 0o755)
}
