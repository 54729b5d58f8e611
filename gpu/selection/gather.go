package selection

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/pci"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/internal/none"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/kmodcache/secureboot"
)

// Machine is everything a decision reads of one machine besides the request:
// the running kernel (release and full vermagic), the cached sets, the PCI
// devices and what the kernel enforces about module signatures. /init fills
// it from its own indexes and bus scan; kpreload plan, switch and user-data
// apply fill it with Gather.
type Machine struct {
	// Kernel is the running kernel's release.
	Kernel string
	// Vermagic is the kernel's full vermagic ("" when unknown: KernelVermagic).
	Vermagic string
	// Sets are the cached sets decided over.
	Sets []Set
	// Devices are the PCI devices present.
	Devices []pci.Device
	// Signatures is what the kernel enforces about module signatures.
	Signatures secureboot.State
	// Index and IndexDir are the boot index Gather read (nil under /init,
	// which decides over several) and its directory.
	Index    *bootindex.Index
	IndexDir string
}

// Input returns the decision's input for a request on this machine.
func (m *Machine) Input(req instance.Request) Input {
	return Input{Kernel: m.Kernel, Vermagic: m.Vermagic, Request: req, Sets: m.Sets, Devices: m.Devices, Signatures: &m.Signatures}
}

// Decide takes the decision for a request on this machine.
func (m *Machine) Decide(req instance.Request) *Decision { return Decide(m.Input(req)) }

// Where says where Gather reads a machine's inputs.
type Where struct {
	// SysDir is a sysfs mount ("/sys"), a root holding sys/ ("/", a tree
	// built from a capture), or a capture itself (pci.IsCapture: a
	// pci-sysfs.txt, or a directory holding one). Everything under it is read
	// inside it, bounded.
	SysDir string
	// ProcDir is procfs; "" means the proc/ beside SysDir's sys (a root's
	// proc/, or /proc beside /sys).
	ProcDir string
	// CacheDir is the module cache holding index/<Kernel>.json.
	CacheDir string
	// Kernel is the kernel release whose sets are decided over.
	Kernel string
}

// Gather reads a machine's decision inputs: the cache's boot index for the
// kernel (its sets and the kernel's full vermagic), the PCI devices under
// SysDir and the Secure Boot and lockdown state. A missing index or PCI
// devices directory is an error naming what it looked for.
func Gather(w Where) (*Machine, error) {
	if w.Kernel == "" {
		return nil, errors.New("no kernel release given")
	}
	devs, capture, err := pci.ScanAny(w.SysDir)
	if err != nil {
		return nil, err
	}
	if _, err := inroot.Stat(w.SysDir, pci.DevicesDirIn(w.SysDir)); err != nil && !capture {
		return nil, fmt.Errorf("%s: no PCI devices directory (%s): give a sysfs mount (/sys), a root holding sys/, or a capture (%s)", w.SysDir, filepath.Join(w.SysDir, pci.DevicesDirIn(w.SysDir)), pci.CaptureFile)
	}
	idxPath := bootindex.Path(w.CacheDir, w.Kernel)
	idx, err := bootindex.Read(idxPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("the cache %s has no boot index for kernel %s (%s); kernels it has: %s", w.CacheDir, w.Kernel, idxPath, none.List(CachedKernels(w.CacheDir)))
		}
		return nil, err
	}
	if idx.Kernel != w.Kernel {
		return nil, fmt.Errorf("%s is the index of kernel %s, not %s", idxPath, idx.Kernel, w.Kernel)
	}
	// What the kernel enforces about signatures, as /init reads it: a root
	// such as / holds sys/ and proc/; a sysfs mount has its procfs beside it.
	sys, proc := w.SysDir, filepath.Join(filepath.Dir(filepath.Clean(w.SysDir)), "proc")
	if fi, err := os.Stat(filepath.Join(w.SysDir, "sys")); err == nil && fi.IsDir() {
		sys, proc = filepath.Join(w.SysDir, "sys"), filepath.Join(w.SysDir, "proc")
	}
	if w.ProcDir != "" {
		proc = w.ProcDir
	}
	sig := secureboot.State{SecureBoot: secureboot.Unknown}
	if !capture {
		// A capture holds PCI devices alone: nothing enforced is known.
		sig = secureboot.Read(sys, proc, "")
	}
	m := &Machine{Kernel: w.Kernel, Vermagic: KernelVermagic(idx), Devices: devs, Signatures: sig,
		Index: idx, IndexDir: filepath.Dir(idxPath)}
	for i := range idx.Sets {
		m.Sets = append(m.Sets, Set{Set: &idx.Sets[i], Dir: m.IndexDir, From: w.CacheDir})
	}
	return m, nil
}

// CachedKernels lists the kernels a cache has boot indexes for.
func CachedKernels(cacheDir string) []string {
	m, _ := filepath.Glob(filepath.Join(cacheDir, bootindex.IndexDir, "*.json"))
	var out []string
	for _, p := range m {
		out = append(out, strings.TrimSuffix(filepath.Base(p), ".json"))
	}
	sort.Strings(out)
	return out
}
