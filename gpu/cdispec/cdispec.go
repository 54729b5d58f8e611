// Package cdispec describes the active NVIDIA driver as a Container Device Interface
// (CDI) spec of kind nvidia.com/gpu: one device per GPU (named by index and by UUID)
// and "all", with the device nodes, the driver version's libraries and binaries, the
// GSP firmware, the nvidia-persistenced socket and a createContainer hook that
// updates the container's linker cache. Generation is a pure function of a root
// directory (its proc, sys, dev, run, etc, opt and lib trees), so it runs on a live
// system ("/") and on test trees alike. Every file of the root is read through
// internal/inroot: paths and links resolve inside the root, only regular files are
// read and each read is bounded. The spec types and their validation are the
// CDI project's own (tags.cncf.io/container-device-interface).
//
// The MIG capabilities are not given to every container: /dev/nvidia-caps's
// MIG configuration node (a root process holding it can reconfigure MIG on
// the host) and monitoring node are devices of their own,
// nvidia.com/gpu=mig-config and nvidia.com/gpu=mig-monitor, requested beside
// the GPUs.
package cdispec

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/devnodes"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/names"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// Kind is the CDI kind of the spec: devices are requested as nvidia.com/gpu=0,
// nvidia.com/gpu=GPU-<uuid> or nvidia.com/gpu=all.
const Kind = "nvidia.com/gpu"

// SpecVersion is the CDI version the spec is written in (the oldest that holds
// everything it uses, so older runtimes read it too).
const SpecVersion = "0.5.0"

// DefaultHookPath is where kpreload images install the kpreload binary, the
// program the createContainer hook runs.
const DefaultHookPath = "/usr/bin/kpreload"

// ContainerLibDir is where libraries of a kpreload image's driver are mounted in
// containers: the Debian/Ubuntu multiarch directory CUDA images search.
const ContainerLibDir = "/usr/lib/x86_64-linux-gnu"

// ContainerBinDir is where the driver's binaries (nvidia-smi, ...) are mounted.
const ContainerBinDir = "/usr/bin"

// PersistencedSocket is nvidia-persistenced's socket, mounted when it exists.
const PersistencedSocket = "/run/nvidia-persistenced/socket"

// DeviceMIGConfig and DeviceMIGMonitor name the devices that carry the MIG
// capabilities (--device nvidia.com/gpu=mig-config): configuring MIG (the node
// of /proc/driver/nvidia/capabilities/mig/config, nvidia-cap1 as a rule) and
// monitoring it (mig/monitor, nvidia-cap2). They follow NVIDIA's names for the
// same grants (NVIDIA_MIG_CONFIG_DEVICES, NVIDIA_MIG_MONITOR_DEVICES,
// nvidia-container-cli --mig-config/--mig-monitor); no other device, "all"
// included, brings them.
const (
	DeviceMIGConfig  = "mig-config"
	DeviceMIGMonitor = "mig-monitor"
)

// Binaries are the driver programs mounted into containers when present, the same
// list nvidia-ctk mounts.
var Binaries = []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}

// HostLibDirs are the directories searched for driver libraries on a host that is
// not a kpreload image, besides the directories of the linker cache's entries.
var HostLibDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib",
	"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu/nvidia/current",
}

// HostBinDirs are the directories searched for driver binaries on such a host.
var HostBinDirs = []string{"/usr/local/nvidia/bin", "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Options tune Generate.
type Options struct {
	// HookPath is the host path of the kpreload binary the createContainer hook
	// runs (DefaultHookPath when empty).
	HookPath string
	// Recorded is the spec the boot report says kpreload wrote (its "cdi"
	// section); RefreshActive removes it when an older kpreload wrote it
	// without the marker and it is unchanged (RemoveRecorded).
	Recorded *Record
}

// GPU is one GPU the driver registered.
type GPU struct {
	// Bus is the PCI address ("0000:00:06.0"), Minor its /dev/nvidia<minor>.
	Bus   string
	Minor uint32
	// UUID is the GPU's UUID ("GPU-7843b487-...").
	UUID string
}

// Found is what Generate discovered, for the caller to report.
type Found struct {
	// Source is "kpreload" (the activation record) or "host" (a system that is not
	// a kpreload image: the version from /proc, libraries from the linker cache).
	Source string
	// Version is the driver version; DriverDir its userspace on a kpreload image.
	Version   string
	DriverDir string
	GPUs      []GPU
	// Nodes are the device nodes, shared ones and per GPU.
	Nodes []devnodes.Node
	// MIGConfig and MIGMonitor are the paths of the MIG capability nodes (""
	// when the driver has none), given only by the devices DeviceMIGConfig and
	// DeviceMIGMonitor.
	MIGConfig, MIGMonitor string
	// Libraries and Binaries are host paths mounted into containers.
	Libraries []string
	Binaries  []string
	// Firmware is the GSP firmware directory ("" when there is none).
	Firmware string
	// Socket is the nvidia-persistenced socket ("" when it does not exist).
	Socket string
	// LdcacheFolders are the container directories the hook adds to the ld cache.
	LdcacheFolders []string
}

// ErrNoDriver is returned when no NVIDIA driver is loaded under the root.
var ErrNoDriver = errors.New("no NVIDIA driver is loaded")

// mount is one bind mount: host path (as seen from the root) and container path.
type mount struct{ host, container string }

// Generate reads the system mounted at root and returns its CDI spec and what it
// found. Paths in the spec are those of the system itself (root is stripped).
// Every path is resolved inside root (a link never leads out of it) and every
// file read is a regular file of bounded size (internal/inroot); errors name the
// file.
func Generate(root string, opts Options) (*specs.Spec, *Found, error) {
	if opts.HookPath == "" {
		opts.HookPath = DefaultHookPath
	}
	at := func(p string) string { return filepath.Join(root, p) }
	nodes, err := devnodes.PlanIn(root, "/proc", "/dev")
	if err != nil {
		return nil, nil, fmt.Errorf("cdi: %w", err)
	}
	if len(nodes) == 0 {
		return nil, nil, fmt.Errorf("cdi: %w (no nvidia major in %s)", ErrNoDriver, at("/proc/devices"))
	}
	gpus, err := readGPUs(root, "/proc/driver/nvidia/gpus")
	if err != nil {
		return nil, nil, err
	}
	if len(gpus) == 0 {
		return nil, nil, fmt.Errorf("cdi: the NVIDIA driver has no GPUs (%s is empty)", at("/proc/driver/nvidia/gpus"))
	}
	found := &Found{GPUs: gpus, Nodes: nodes}
	found.MIGConfig, found.MIGMonitor = capabilityNode(root, nodes, devnodes.CapMIGConfig), capabilityNode(root, nodes, devnodes.CapMIGMonitor)
	var libs, bins []mount
	if _, err := inroot.Stat(root, activate.ReadyPath(activate.RunDir)); err == nil {
		libs, bins, err = fromKpreload(root, found)
		if err != nil {
			return nil, nil, err
		}
	} else {
		libs, bins, err = fromHost(root, found)
		if err != nil {
			return nil, nil, err
		}
	}
	found.Firmware = firmwareDir(root, found.Version, found.DriverDir)
	if fi, err := inroot.Stat(root, PersistencedSocket); err == nil && fi.Mode()&fs.ModeSocket != 0 {
		found.Socket = PersistencedSocket
	}
	for _, l := range libs {
		found.Libraries = append(found.Libraries, l.host)
	}
	for _, b := range bins {
		found.Binaries = append(found.Binaries, b.host)
	}
	return build(found, libs, bins, opts), found, nil
}

// capabilityNode returns the node of a MIG capability among the nodes
// planned ("" when the driver has none).
func capabilityNode(root string, nodes []devnodes.Node, capability string) string {
	minor, err := devnodes.CapabilityIn(root, "/proc", capability)
	if err != nil {
		return ""
	}
	p := fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor)
	for _, n := range nodes {
		if n.Path == p {
			return p
		}
	}
	return ""
}

// isCapability reports whether a node is one of /dev/nvidia-caps: those are
// never shared by every device.
func isCapability(p string) bool { return strings.HasPrefix(p, "/dev/nvidia-caps/") }

// build assembles the spec from what was found.
func build(f *Found, libs, bins []mount, opts Options) *specs.Spec {
	byPath := map[string]devnodes.Node{}
	for _, n := range f.Nodes {
		byPath[n.Path] = n
	}
	common := specs.ContainerEdits{}
	perGPU := map[string]bool{}
	for _, g := range f.GPUs {
		perGPU[fmt.Sprintf("/dev/nvidia%d", g.Minor)] = true
	}
	for _, n := range f.Nodes {
		if !perGPU[n.Path] && !isCapability(n.Path) {
			common.DeviceNodes = append(common.DeviceNodes, node(n))
		}
	}
	var all specs.ContainerEdits
	var devices []specs.Device
	for i, g := range f.GPUs {
		p := fmt.Sprintf("/dev/nvidia%d", g.Minor)
		n, ok := byPath[p]
		if !ok {
			continue
		}
		edits := specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{node(n)}}
		all.DeviceNodes = append(all.DeviceNodes, node(n))
		devices = append(devices, specs.Device{Name: strconv.Itoa(i), ContainerEdits: edits})
		if g.UUID != "" {
			devices = append(devices, specs.Device{Name: g.UUID, ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{node(n)}}})
		}
	}
	devices = append(devices, specs.Device{Name: "all", ContainerEdits: all})
	for _, c := range []struct{ name, path string }{{DeviceMIGConfig, f.MIGConfig}, {DeviceMIGMonitor, f.MIGMonitor}} {
		if n, ok := byPath[c.path]; ok && c.path != "" {
			devices = append(devices, specs.Device{Name: c.name, ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{node(n)}}})
		}
	}

	common.Env = []string{"NVIDIA_VISIBLE_DEVICES=void"}
	ro := []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
	add := func(host, container string) {
		common.Mounts = append(common.Mounts, &specs.Mount{HostPath: host, ContainerPath: container, Options: ro})
	}
	for _, m := range libs {
		add(m.host, m.container)
	}
	for _, m := range bins {
		add(m.host, m.container)
	}
	if f.Firmware != "" {
		add(f.Firmware, path.Join("/lib/firmware/nvidia", f.Version))
	}
	if f.Socket != "" {
		common.Mounts = append(common.Mounts, &specs.Mount{HostPath: f.Socket, ContainerPath: f.Socket, Options: []string{"ro", "nosuid", "nodev", "rbind", "rprivate", "noexec"}})
	}
	if len(f.LdcacheFolders) > 0 {
		args := []string{"kpreload", "cdi", "hook", "update-ldcache"}
		for _, d := range f.LdcacheFolders {
			args = append(args, "--folder", d)
		}
		common.Hooks = []*specs.Hook{{HookName: "createContainer", Path: opts.HookPath, Args: args}}
	}
	return &specs.Spec{Version: SpecVersion, Kind: Kind, Devices: devices, ContainerEdits: common}
}

// node is the CDI form of a device node: type and numbers given, so a runtime
// does not depend on the host node's presence at container start.
func node(n devnodes.Node) *specs.DeviceNode {
	return &specs.DeviceNode{Path: n.Path, HostPath: n.Path, Type: "c", Major: int64(n.Major), Minor: int64(n.Minor)}
}

// firmwareDir returns the GSP firmware directory nvidia/<version> the kernel loads
// from, searched as the kernel's firmware loader does: the custom path
// (/sys/module/firmware_class/parameters/path) first, then /lib/firmware/updates
// and /lib/firmware (and their /usr/lib twins); last the driver's userspace.
// A version that is not a name (kmodcache/names) has none: it would climb
// out of nvidia/.
func firmwareDir(root, version, driverDir string) string {
	if !names.Valid(version) {
		return ""
	}
	var bases []string
	if b, err := inroot.ReadFile(root, "/sys/module/firmware_class/parameters/path", inroot.MaxAttr); err == nil {
		if p := strings.TrimSpace(string(b)); path.IsAbs(p) {
			bases = append(bases, path.Clean(p))
		}
	}
	bases = append(bases, "/lib/firmware/updates", "/lib/firmware", "/usr/lib/firmware/updates", "/usr/lib/firmware")
	if driverDir != "" {
		bases = append(bases, path.Join(driverDir, "lib/firmware"), path.Join(driverDir, "usr/lib/firmware"))
	}
	for _, b := range bases {
		dir := path.Join(b, "nvidia", version)
		if fi, err := inroot.Stat(root, dir); err == nil && fi.IsDir() {
			return dir
		}
	}
	return ""
}

// fromKpreload reads the activation record and the driver link of a kpreload image.
func fromKpreload(root string, f *Found) (libs, bins []mount, err error) {
	f.Source = "kpreload"
	ready, err := activate.ReadReadyIn(root, activate.RunDir)
	if err != nil {
		return nil, nil, fmt.Errorf("cdi: %w", err)
	}
	if ready.Driver != "nvidia" {
		return nil, nil, fmt.Errorf("cdi: the active driver is %q, not nvidia", ready.Driver)
	}
	f.Version = ready.Version
	if f.DriverDir, err = activeUserspace(root, ready); err != nil {
		return nil, nil, err
	}
	libDirs, err := driverLibDirs(root, f.DriverDir)
	if err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	for _, dir := range libDirs {
		names, err := versioned(root, dir, f.Version)
		if err != nil {
			return nil, nil, err
		}
		for _, n := range names {
			if seen[n] {
				continue // the first directory wins, as in ld.so.conf.d/kpreload.conf
			}
			seen[n] = true
			libs = append(libs, mount{path.Join(dir, n), path.Join(ContainerLibDir, n)})
		}
	}
	sort.Slice(libs, func(i, j int) bool { return libs[i].container < libs[j].container })
	if len(libs) > 0 {
		f.LdcacheFolders = []string{ContainerLibDir}
	}
	for _, b := range Binaries {
		p := path.Join(f.DriverDir, "usr/bin", b)
		if isFile(root, p) {
			bins = append(bins, mount{p, path.Join(ContainerBinDir, b)})
		}
	}
	return libs, bins, nil
}

// driverLibDirs lists the library directories of a driver's userspace (Debian's
// multiarch directory and its nvidia/* subdirectories, as kpreload.conf lists
// them), as paths of the root.
func driverLibDirs(root, driverDir string) ([]string, error) {
	base := path.Join(driverDir, "usr/lib/x86_64-linux-gnu")
	var dirs []string
	sub, err := inroot.Glob(root, path.Join(base, "nvidia", "*"))
	if err != nil {
		return nil, fmt.Errorf("cdi: %w", err)
	}
	for _, s := range sub {
		if fi, err := inroot.Stat(root, s); err == nil && fi.IsDir() {
			dirs = append(dirs, path.Join(base, "nvidia", path.Base(s)))
		}
	}
	return append(dirs, base, path.Join(driverDir, "usr/lib64")), nil
}

// fromHost discovers a driver installed on a system that is not a kpreload image:
// the version from /proc/driver/nvidia/version, libraries named *.so.<version> in
// the directories of the linker cache and the usual library directories.
func fromHost(root string, f *Found) (libs, bins []mount, err error) {
	f.Source = "host"
	v, err := ReadVersion(root, "/proc/driver/nvidia/version")
	if err != nil {
		return nil, nil, err
	}
	f.Version = v
	dirs := append([]string(nil), HostLibDirs...)
	if entries, err := ReadLdcache(root, "/etc/ld.so.cache"); err == nil {
		for _, e := range entries {
			dirs = append(dirs, path.Dir(e.Path))
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	seenDir := map[string]bool{}
	seenLib := map[string]bool{}
	folders := map[string]bool{}
	for _, dir := range dirs {
		if seenDir[dir] {
			continue
		}
		seenDir[dir] = true
		real, err := inroot.EvalSymlinks(root, dir)
		if err != nil {
			continue
		}
		names, err := versioned(root, real, v)
		if err != nil {
			return nil, nil, err
		}
		for _, n := range names {
			host := path.Join(real, n)
			if seenLib[host] {
				continue // /lib -> /usr/lib and similar links
			}
			seenLib[host] = true
			libs = append(libs, mount{host, host})
			folders[path.Dir(host)] = true
		}
	}
	sort.Slice(libs, func(i, j int) bool { return libs[i].host < libs[j].host })
	for d := range folders {
		f.LdcacheFolders = append(f.LdcacheFolders, d)
	}
	sort.Strings(f.LdcacheFolders)
	for _, b := range Binaries {
		for _, dir := range HostBinDirs {
			real, err := inroot.EvalSymlinks(root, path.Join(dir, b))
			if err != nil || !isFile(root, real) {
				continue
			}
			bins = append(bins, mount{real, path.Join(ContainerBinDir, b)})
			break
		}
	}
	return libs, bins, nil
}

// versioned lists the regular files (or links to them) named *.so.<version> in
// dir, a directory of the tree at root.
func versioned(root, dir, version string) ([]string, error) {
	ents, err := inroot.ReadDir(root, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cdi: %w", err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".so."+version) && isFile(root, path.Join(dir, e.Name())) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// isFile reports whether name is a regular file (or a link to one) of the tree at root.
func isFile(root, name string) bool {
	fi, err := inroot.Stat(root, name)
	return err == nil && fi.Mode().IsRegular()
}

// ReadVersion returns the driver version from the file name of the tree at root,
// /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX Open Kernel Module for
// x86_64  580.159.04  Release Build ..."), read inside root and bounded
// (inroot.MaxText); errors name the file.
func ReadVersion(root, name string) (string, error) {
	b, err := inroot.ReadFile(root, name, inroot.MaxText)
	if err != nil {
		return "", fmt.Errorf("cdi: driver version: %w", err)
	}
	v, ok := parseVersion(b)
	if !ok {
		return "", fmt.Errorf("cdi: %s: no driver version on the NVRM line", filepath.Join(root, name))
	}
	return v, nil
}

// parseVersion finds the version on the NVRM line of /proc/driver/nvidia/version.
func parseVersion(b []byte) (string, bool) {
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "NVRM version:") {
			continue
		}
		for _, w := range strings.Fields(line) {
			if isVersion(w) {
				return w, true
			}
		}
	}
	return "", false
}

// isVersion reports whether w looks like a driver version (digits and dots, at least one dot).
func isVersion(w string) bool {
	if !strings.Contains(w, ".") {
		return false
	}
	for _, r := range w {
		if r != '.' && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// readGPUs parses every <dir>/*/information of the tree at root (each read
// inside root, at most inroot.MaxText bytes), sorted by minor.
func readGPUs(root, dir string) ([]GPU, error) {
	files, err := inroot.Glob(root, path.Join(dir, "*", "information"))
	if err != nil {
		return nil, fmt.Errorf("cdi: %w", err)
	}
	var gpus []GPU
	for _, file := range files {
		b, err := inroot.ReadFile(root, file, inroot.MaxText)
		if err != nil {
			return nil, fmt.Errorf("cdi: %w", err)
		}
		g, err := parseInformation(b, path.Base(path.Dir(file)))
		if err != nil {
			return nil, fmt.Errorf("cdi: %s: %w", filepath.Join(root, file), err)
		}
		gpus = append(gpus, g)
	}
	sort.Slice(gpus, func(i, j int) bool { return gpus[i].Minor < gpus[j].Minor })
	return gpus, nil
}

// parseInformation reads a GPU's UUID and minor from its
// /proc/driver/nvidia/gpus/<bus>/information.
func parseInformation(b []byte, bus string) (GPU, error) {
	g := GPU{Bus: bus}
	minor := ""
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "GPU UUID":
			g.UUID = strings.TrimSpace(v)
		case "Device Minor":
			minor = strings.TrimSpace(v)
		}
	}
	m, err := strconv.ParseUint(minor, 10, 32)
	if err != nil {
		return g, fmt.Errorf("Device Minor %q: %w", minor, err)
	}
	g.Minor = uint32(m)
	return g, nil
}
