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

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/devnodes"
	"github.com/kpreload/kpreload/internal/inroot"
)

// kpreload's test driver (recipes/testdriver: kpreload_edu, QEMU's edu
// device) is described to container runtimes by the same generator, so the
// CDI path is proven in CI without a GPU: one device per bound edu device,
// /dev/kpreload-edu<N> (a misc device; its numbers from sysfs), named by
// index and "all"; the active version's libraries (*.so.<version>) and
// programs (usr/bin/*) from its userspace; the same ld-cache hook.
const (
	// EduDriver is the test driver's name in activation records.
	EduDriver = "kpreload-edu"
	// EduKind is its CDI kind: --device kpreload.dev/edu=all.
	EduKind = "kpreload.dev/edu"
	// EduSpecFile is where Refresh keeps its spec.
	EduSpecFile = "/var/run/cdi/kpreload-edu.yaml"
	// eduNodePrefix names its device nodes under /dev and /sys/class/misc.
	eduNodePrefix = "kpreload-edu"
)

// GenerateEdu describes the active test driver of a kpreload image at root.
func GenerateEdu(root string, opts Options) (*specs.Spec, *Found, error) {
	if opts.HookPath == "" {
		opts.HookPath = DefaultHookPath
	}
	ready, err := activate.ReadReadyIn(root, activate.RunDir)
	if err != nil {
		return nil, nil, fmt.Errorf("cdi: %w", err)
	}
	if ready.Driver != EduDriver {
		return nil, nil, fmt.Errorf("cdi: the active driver is %q, not %s", ready.Driver, EduDriver)
	}
	f := &Found{Source: "kpreload", Version: ready.Version}
	if f.DriverDir, err = activeUserspace(root, ready); err != nil {
		return nil, nil, err
	}
	nodes, err := eduNodes(root)
	if err != nil {
		return nil, nil, err
	}
	if len(nodes) == 0 {
		return nil, nil, fmt.Errorf("cdi: %s %s is active but no /dev/%s<N> is registered (%s)", EduDriver, f.Version, eduNodePrefix, filepath.Join(root, "sys/class/misc"))
	}
	f.Nodes = nodes
	libDir := path.Join(f.DriverDir, "usr/lib/x86_64-linux-gnu")
	names, err := versioned(root, libDir, f.Version)
	if err != nil {
		return nil, nil, err
	}
	common := specs.ContainerEdits{}
	ro := []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
	for _, n := range names {
		host := path.Join(libDir, n)
		f.Libraries = append(f.Libraries, host)
		common.Mounts = append(common.Mounts, &specs.Mount{HostPath: host, ContainerPath: path.Join(ContainerLibDir, n), Options: ro})
	}
	binDir := path.Join(f.DriverDir, "usr/bin")
	ents, err := inroot.ReadDir(root, binDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("cdi: %w", err)
	}
	for _, e := range ents {
		host := path.Join(binDir, e.Name())
		if isFile(root, host) {
			f.Binaries = append(f.Binaries, host)
			common.Mounts = append(common.Mounts, &specs.Mount{HostPath: host, ContainerPath: path.Join(ContainerBinDir, e.Name()), Options: ro})
		}
	}
	if len(names) > 0 {
		f.LdcacheFolders = []string{ContainerLibDir}
		common.Hooks = []*specs.Hook{{HookName: "createContainer", Path: opts.HookPath,
			Args: []string{"kpreload", "cdi", "hook", "update-ldcache", "--folder", ContainerLibDir}}}
	}
	var devices []specs.Device
	var all specs.ContainerEdits
	for i, n := range nodes {
		devices = append(devices, specs.Device{Name: strconv.Itoa(i), ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{node(n)}}})
		all.DeviceNodes = append(all.DeviceNodes, node(n))
	}
	devices = append(devices, specs.Device{Name: "all", ContainerEdits: all})
	return &specs.Spec{Version: SpecVersion, Kind: EduKind, Devices: devices, ContainerEdits: common}, f, nil
}

// eduNodes lists /dev/kpreload-edu<N> with the numbers the kernel gave them
// (/sys/class/misc/kpreload-edu<N>/dev, "major:minor"), in index order, read
// inside root.
func eduNodes(root string) ([]devnodes.Node, error) {
	dirs, err := inroot.Glob(root, path.Join("/sys/class/misc", eduNodePrefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("cdi: %w", err)
	}
	type indexed struct {
		i int
		n devnodes.Node
	}
	var out []indexed
	for _, d := range dirs {
		name := path.Base(d)
		i, err := strconv.Atoi(strings.TrimPrefix(name, eduNodePrefix))
		if err != nil {
			continue
		}
		b, err := inroot.ReadFile(root, path.Join(d, "dev"), inroot.MaxAttr)
		if err != nil {
			return nil, fmt.Errorf("cdi: %w", err)
		}
		maj, min, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
		ma, err1 := strconv.ParseUint(maj, 10, 32)
		mi, err2 := strconv.ParseUint(min, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("cdi: %s: %q is not major:minor", filepath.Join(root, d, "dev"), b)
		}
		out = append(out, indexed{i, devnodes.Node{Path: "/dev/" + name, Major: uint32(ma), Minor: uint32(mi)}})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].i < out[b].i })
	nodes := make([]devnodes.Node, len(out))
	for i, x := range out {
		nodes[i] = x.n
	}
	return nodes, nil
}

// activeUserspace resolves the active driver's userspace directory (the
// target of /run/kpreload/driver, else the record's), as a path of the root;
// it is read through inroot like every other path, so a link out of the root
// leads nowhere.
func activeUserspace(root string, ready *activate.Ready) (string, error) {
	target, err := activate.TargetIn(root, activate.RunDir)
	if err != nil {
		return "", fmt.Errorf("cdi: %w", err)
	}
	if target == "" {
		target = ready.Userspace
	}
	if target == "" {
		return "", fmt.Errorf("cdi: driver %s %s is active but has no userspace (%s is missing)", ready.Driver, ready.Version, activate.LinkPath(activate.RunDir))
	}
	if !path.IsAbs(target) {
		target = path.Join(path.Dir(activate.LinkPath(activate.RunDir)), target)
	}
	return path.Clean(target), nil
}
