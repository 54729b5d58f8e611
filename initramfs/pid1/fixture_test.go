package pid1

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/pci/pcitest"
	"github.com/kpreload/kpreload/initramfs/modprobe"
	"github.com/kpreload/kpreload/initramfs/rootfs"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/report"
)

// Names of the fixture's kernel and devices.
const (
	testRelease  = "6.1.0-99-test-amd64"
	testVermagic = testRelease + " SMP preempt mod_unload modversions "
	// eduAddr is QEMU's edu test device (1234:11e8), as -device edu shows it.
	eduAddr  = "0000:00:07.0"
	eduAlias = "pci:v00001234d000011E8sv00001AF4sd00001100bc00scFFi00"
	gpuAddr  = "0000:00:06.0"
	rootUUID = "0b7c6a52-0000-4000-8000-000000000001"
)

// fixture is a whole machine for one Boot run in a temporary directory: a
// sysfs, a procfs, /dev, /run, the initramfs's root and the root filesystem
// to be mounted, with a fake kernel and fake system calls.
type fixture struct {
	t    *testing.T
	dir  string
	sys  *fakeSystem
	kern *fakeKernel
	// cmdline is the kernel command line; root=UUID=rootUUID is added.
	cmdline string
	// initSets and rootSets are the initramfs's and the root cache's
	// driver sets (the kernel's own set is always in the initramfs).
	initSets, rootSets []testSet
	// complete marks the initramfs index complete (the early decision).
	complete bool
	// noRoot leaves root= off the command line, noIndex the initramfs's
	// boot index out; indexKernel, when set, is the kernel it names.
	noRoot, noIndex bool
	indexKernel     string
}

// testSet is a driver set of the fixture's indexes.
type testSet struct {
	driver, version, flavor string
	// module is the module's name and alias its one alias.
	module, alias string
	unsigned      bool
	// corrupt writes a file whose digest is not the index's.
	corrupt bool
	// firmware is a file the module declares.
	firmware string
}

// edu is the test driver's set at version v.
func edu(v string) testSet {
	return testSet{driver: "kpreload-edu", version: v, flavor: "open", module: "kpreload_edu", alias: "pci:v00001234d000011E8sv*sd*bc*sc*i*"}
}

// nvidia is an NVIDIA driver set at version v matching any 3D controller.
func nvidia(v, flavor string) testSet {
	return testSet{driver: "nvidia", version: v, flavor: flavor, module: "nvidia", alias: "pci:v000010DEd*sv*sd*bc03sc02i00*"}
}

// newFixture is a machine whose PCI devices are the capture's (a
// testdata/*/pci-sysfs.txt, "" for none) plus QEMU's edu device, with
// QEMU's fw_cfg device on ACPI.
func newFixture(t *testing.T, capture string) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir()}
	f.sys = &fakeSystem{f: f, roots: map[string]string{"UUID=" + rootUUID: "vda2"}, fwErr: fs.ErrNotExist, sleepLimit: 30 * time.Second}
	f.kern = &fakeKernel{f: f, errs: map[string]error{}}
	for _, d := range []string{"sys/module/firmware_class/parameters", "proc", "dev", "run", "initramfs", "newroot/sbin", "newroot/lib/firmware"} {
		f.mkdir(d)
	}
	f.write("sys/module/firmware_class/parameters/path", "\n")
	if capture != "" {
		if err := pcitest.WriteFixture(f.dir, filepath.Join(pcitest.H200(t), "..", capture, "pci-sysfs.txt")); err != nil {
			t.Fatal(err)
		}
	}
	f.pciDevice(eduAddr, eduAlias)
	f.write("sys/bus/acpi/devices/QEMU0002:00/modalias", "acpi:QEMU0002:\n")
	f.write("newroot/sbin/init", "#!/bin/true\n")
	// The root disk: an ext4 superblock's magic (rootfs.FSType) in a file.
	disk := make([]byte, 2048)
	copy(disk[1024+56:], []byte{0x53, 0xef})
	f.write("dev/vda2", string(disk))
	return f
}

func (f *fixture) path(rel string) string { return filepath.Join(f.dir, rel) }

func (f *fixture) mkdir(rel string) {
	f.t.Helper()
	if err := os.MkdirAll(f.path(rel), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) write(rel, data string) {
	f.t.Helper()
	f.mkdir(filepath.Dir(rel))
	if err := os.WriteFile(f.path(rel), []byte(data), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// pciDevice adds a PCI device with its modalias to the fake sysfs.
func (f *fixture) pciDevice(addr, alias string) {
	f.write(filepath.Join("sys/bus/pci/devices", addr, "modalias"), alias+"\n")
}

// options are the fixture's roots, fakes and clock.
func (f *fixture) options() Options {
	return Options{
		SysDir: f.path("sys"), ProcDir: f.path("proc"), DevDir: f.path("dev"), RunDir: f.path("run"),
		Initramfs:     f.path("initramfs"),
		NewRoot:       f.path("newroot"),
		FirmwareParam: f.path("sys/module/firmware_class/parameters/path"),
		ReportPath:    f.path("run/kpreload/report.json"),
		SeedMount:     f.path("run/kpreload/seed"),
		Console:       &f.sys.console,
		System:        f.sys,
		Kernel:        f.kern,
		Now:           f.sys.now,
	}
}

// kernelModules are the kernel's own modules in the initramfs: what the
// fixture's devices, root filesystem and fw_cfg device need.
var kernelModules = []bootindex.Module{
	{Name: "virtio_pci", Aliases: []string{"pci:v00001AF4d*sv*sd*bc*sc*i*"}},
	{Name: "virtio_blk", Aliases: []string{"virtio:d00000002v*"}},
	{Name: "jbd2"},
	{Name: "ext4", Aliases: []string{"fs-ext4"}, Depends: []string{"jbd2"}},
	{Name: "vfat", Aliases: []string{"fs-vfat"}},
	{Name: "nls_cp437"},
	// What ext4's metadata checksums need; nothing here depends on it, so it
	// loads only when the kernel asks for it (Modprobe).
	{Name: "crc32c_generic", Aliases: []string{"crypto-crc32c-generic", "crypto-crc32c", "crc32c"}},
	{Name: "qemu_fw_cfg", Aliases: []string{"acpi*:QEMU0002:*"}},
}

// writeIndexes writes the initramfs's boot index, the root's cache index
// (when rootSets has any) and every module file.
func (f *fixture) writeIndexes() {
	f.t.Helper()
	initDir := filepath.Join("initramfs/lib/modules", testRelease)
	kernel := bootindex.Set{ID: bootindex.KernelSetID, Dir: "kernel"}
	for _, m := range kernelModules {
		m.Path, m.Vermagic = m.Name+".ko", testVermagic
		m.SHA256 = f.moduleFile(filepath.Join(initDir, "kernel", m.Path), m.Name)
		kernel.Modules = append(kernel.Modules, m)
	}
	init := &bootindex.Index{Format: bootindex.FormatVersion, Kernel: testRelease, Complete: f.complete, Sets: []bootindex.Set{kernel}}
	if f.indexKernel != "" {
		init.Kernel = f.indexKernel
	}
	init.Sets = append(init.Sets, f.driverSets(initDir, f.initSets)...)
	if !f.noIndex {
		f.index(filepath.Join(initDir, bootindex.InitramfsName), init)
	}
	if len(f.rootSets) > 0 {
		cache := filepath.Join("newroot", bootindex.RootCacheDir)
		root := &bootindex.Index{Format: bootindex.FormatVersion, Kernel: testRelease, Sets: f.driverSets(filepath.Join(cache, bootindex.IndexDir), f.rootSets)}
		f.index(bootindex.Path(cache, testRelease), root)
	}
}

// driverSets writes the sets' module files under dir and returns the sets.
func (f *fixture) driverSets(dir string, sets []testSet) []bootindex.Set {
	var out []bootindex.Set
	for _, s := range sets {
		id := setID(s)
		m := bootindex.Module{Name: s.module, Path: s.module + ".ko", Vermagic: testVermagic, Aliases: []string{s.alias}, Unsigned: s.unsigned}
		if s.firmware != "" {
			m.Firmware = []string{s.firmware}
		}
		m.SHA256 = f.moduleFile(filepath.Join(dir, id, m.Path), s.module+" "+s.version)
		if s.corrupt {
			f.write(filepath.Join(dir, id, m.Path), "\x7fELF flipped")
		}
		out = append(out, bootindex.Set{ID: id, Driver: s.driver, Version: s.version, Flavor: s.flavor, Dir: id, Modules: []bootindex.Module{m}})
	}
	return out
}

// setID is a set's content address, made up from what names it.
func setID(s testSet) string {
	sum := sha256.Sum256([]byte(s.driver + " " + s.version + " " + s.flavor))
	return hex.EncodeToString(sum[:])
}

// moduleFile writes a fake module file and returns its sha256.
func (f *fixture) moduleFile(rel, what string) string {
	data := "\x7fELF fake module " + what
	f.write(rel, data)
	sum := sha256.Sum256([]byte(data))
	return hex.EncodeToString(sum[:])
}

func (f *fixture) index(rel string, ix *bootindex.Index) {
	f.t.Helper()
	data, err := bootindex.Marshal(ix)
	if err != nil {
		f.t.Fatal(err)
	}
	f.write(rel, string(data))
}

// seed puts a NoCloud seed (a vfat filesystem labelled CIDATA) on /dev/vdb
// whose user-data is userData.
func (f *fixture) seed(userData string) {
	img := make([]byte, 1024)
	copy(img[0x47:], "CIDATA     ")
	copy(img[0x52:], "FAT32   ")
	f.write("dev/vdb", string(img))
	f.mkdir("sys/class/block/vdb")
	f.sys.seeds = map[string]string{f.path("dev/vdb"): userData}
}

// outcome is what one Boot run left: the report it wrote (nil when it
// wrote none), the one in memory, the console and the fakes' records.
type outcome struct {
	written *report.Report
	rep     *report.Report
	console string
	sys     *fakeSystem
	kern    *fakeKernel
}

// boot writes the fixture's files and runs a whole Boot on it until it hands
// over (the fake switch_root ends the run) or waits past the fake clock's
// limit.
func (f *fixture) boot() *outcome {
	f.t.Helper()
	f.writeIndexes()
	cmdline := f.cmdline
	if !f.noRoot {
		cmdline = strings.TrimSpace("root=UUID=" + rootUUID + " " + cmdline)
	}
	f.write("proc/cmdline", cmdline+"\n")
	b := newBoot(f.options())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.run()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		f.t.Fatal("Boot did not hand over within 30s")
	}
	out := &outcome{rep: &b.rep, console: f.sys.console.String(), sys: f.sys, kern: f.kern}
	if data, err := os.ReadFile(f.path("run/kpreload/report.json")); err == nil {
		out.written = &report.Report{}
		if err := json.Unmarshal(data, out.written); err != nil {
			f.t.Fatalf("the report written: %v", err)
		}
	}
	return out
}

// module returns the report's entries for a module.
func (o *outcome) module(name string) []report.Module {
	var out []report.Module
	for _, m := range o.written.Modules {
		if m.Name == name {
			out = append(out, m)
		}
	}
	return out
}

// events returns the written report's events, one per line.
func (o *outcome) events() string {
	var out []string
	for _, e := range o.written.Events {
		out = append(out, e.What)
	}
	return strings.Join(out, "\n")
}

// device returns the written report's entry for the PCI device at addr.
func (o *outcome) device(addr string) report.Device {
	for _, d := range o.written.Devices {
		if filepath.Base(d.Path) == addr {
			return d
		}
	}
	return report.Device{}
}

// fakeSystem stands in for the system calls: mounts are recorded, the root
// is found once findAfter lookups have failed, switch_root and the waits
// past sleepLimit end the run (runtime.Goexit), time only moves by Sleep.
type fakeSystem struct {
	f       *fixture
	console syncBuffer

	mu     sync.Mutex
	clock  time.Duration
	mounts []string
	// roots maps a root= spec to a device name under /dev.
	roots map[string]string
	// findAfter is how many root lookups fail before the root is there.
	findAfter, finds int
	// eventsErr, when set, is why device events cannot be listened for;
	// else an event comes every 20 ms of the fake clock. waits records
	// each wait's longest pause, stops the listenings ended.
	eventsErr error
	waits     []time.Duration
	stops     int
	// rootAfterLoad, when set, keeps the root away until the fake kernel
	// has been asked to load this module: a root that appears late.
	rootAfterLoad string
	// mountErrs is how many root mounts fail first.
	mountErrs int
	// fwData and fwErr are what fw_cfg's I/O ports give.
	fwData []byte
	fwErr  error
	// fwFiles are fw_cfg's other files, by name.
	fwFiles map[string][]byte
	// seeds maps a seed device to its user-data.
	seeds map[string]string
	// seedUserData, when set, makes a seed's user-data at the path given
	// instead of writing seeds' text there (a FIFO, a link).
	seedUserData func(path string) error
	// switchErr, when set, is what switch_root returns.
	switchErr       error
	switched, execs []string
	// reboots counts Reboot calls; rebootErr, when set, is what Reboot
	// returns (else a reboot ends the run).
	reboots            int
	rebootErr          error
	shells             int
	sleepLimit, slept  time.Duration
	securityfsMissing  bool
	rootMountedOptions rootfs.Options
}

func (s *fakeSystem) now() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return 1 + s.clock.Seconds() // the kernel started a second before /init
}

func (s *fakeSystem) tick() {
	s.mu.Lock()
	s.clock += time.Millisecond
	s.mu.Unlock()
}

func (s *fakeSystem) Release() string { return testRelease }

func (s *fakeSystem) Mount(src, dst, fstype string, flags uintptr, data string) error {
	s.mu.Lock()
	s.mounts = append(s.mounts, fstype+" "+dst)
	s.mu.Unlock()
	if fstype == "securityfs" && s.securityfsMissing {
		return unix.ENODEV
	}
	if ud, ok := s.seeds[src]; ok {
		if s.seedUserData != nil {
			return s.seedUserData(filepath.Join(dst, "user-data"))
		}
		return os.WriteFile(filepath.Join(dst, "user-data"), []byte(ud), 0o644)
	}
	return nil
}

func (s *fakeSystem) Unmount(dir string) error {
	return os.Remove(filepath.Join(dir, "user-data"))
}

func (s *fakeSystem) FindRoot(spec rootfs.Spec) (string, error) {
	s.mu.Lock()
	s.finds++
	late := s.finds <= s.findAfter
	s.mu.Unlock()
	if s.rootAfterLoad != "" && !s.f.kern.wasAsked(s.rootAfterLoad) {
		late = true
	}
	name, ok := s.roots[spec.String()]
	if !ok || late {
		return "", fmt.Errorf("no block device with %s (have: no block devices)", spec)
	}
	return filepath.Join(s.f.path("dev"), name), nil
}

func (s *fakeSystem) MountRoot(dev, dir, fstype string, o rootfs.Options) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mountErrs > 0 {
		s.mountErrs--
		return fmt.Errorf("mount %s (%s) on %s: %w", dev, fstype, dir, unix.EINVAL)
	}
	s.rootMountedOptions = o
	s.mounts = append(s.mounts, "root "+fstype+" "+dev)
	return nil
}

func (s *fakeSystem) ReadFwCfg(name string) ([]byte, error) {
	if name != instance.FwCfgName {
		if data, ok := s.fwFiles[name]; ok {
			return data, nil
		}
		return nil, fs.ErrNotExist
	}
	return s.fwData, s.fwErr
}

func (s *fakeSystem) SwitchRoot(newRoot, init string) error {
	s.mu.Lock()
	s.switched = append(s.switched, newRoot+" "+init)
	err := s.switchErr
	s.mu.Unlock()
	if err != nil {
		return err
	}
	runtime.Goexit() // switch_root does not return: the run ends here
	return nil
}

func (s *fakeSystem) Exec(path string) error {
	s.mu.Lock()
	s.execs = append(s.execs, path)
	s.mu.Unlock()
	return unix.ENOENT
}

func (s *fakeSystem) Shell(path string, console io.Writer) error {
	s.mu.Lock()
	s.shells++
	s.mu.Unlock()
	return nil
}

func (s *fakeSystem) Reboot() error {
	s.mu.Lock()
	s.reboots++
	err := s.rebootErr
	s.mu.Unlock()
	if err != nil {
		return err
	}
	runtime.Goexit() // the machine restarts: the run ends here
	return nil
}

func (s *fakeSystem) Sleep(d time.Duration) {
	s.mu.Lock()
	s.clock += d
	s.slept += d
	over := s.slept > s.sleepLimit
	s.mu.Unlock()
	if over {
		runtime.Goexit() // a wait that would never end ends the run
	}
}

func (s *fakeSystem) WatchDevices() (func(time.Duration), func(), error) {
	if s.eventsErr != nil {
		return nil, nil, s.eventsErr
	}
	wait := func(d time.Duration) {
		s.mu.Lock()
		s.waits = append(s.waits, d)
		s.mu.Unlock()
		s.Sleep(min(d, 20*time.Millisecond))
	}
	stop := func() {
		s.mu.Lock()
		s.stops++
		s.mu.Unlock()
	}
	return wait, stop, nil
}

// fakeKernel loads modules by name: a loaded module appears in the fake
// sysfs, and a PCI driver binds every device its aliases match.
type fakeKernel struct {
	f  *fixture
	mu sync.Mutex
	// errs holds the error a module's init returns.
	errs   map[string]error
	loaded []string
	// asked is every module a load was asked for, its init failing or not.
	asked  []string
	params map[string]string
	// helperLinked says, for each module load, whether the initramfs's
	// module helper link (modprobe.HelperPath) was there when it began.
	helperLinked []bool
}

func (k *fakeKernel) FinitModule(fd int, params string, flags int) error {
	path, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return fmt.Errorf("fake kernel: fd %d: %w", fd, err)
	}
	name := strings.TrimSuffix(filepath.Base(path), ".ko")
	k.f.sys.tick()
	_, lerr := os.Lstat(filepath.Join(k.f.path("initramfs"), modprobe.HelperPath))
	k.mu.Lock()
	defer k.mu.Unlock()
	k.helperLinked = append(k.helperLinked, lerr == nil)
	k.asked = append(k.asked, name)
	if err := k.errs[name]; err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(k.f.path("sys/module"), name)); err == nil {
		return unix.EEXIST
	}
	switch name {
	case "kpreload_edu":
		err = k.bind(eduAddr, name)
	case "nvidia":
		err = k.bind(gpuAddr, name)
	}
	if err != nil {
		return err // its init failed: the module is not there
	}
	k.loaded = append(k.loaded, name)
	if params != "" {
		if k.params == nil {
			k.params = map[string]string{}
		}
		k.params[name] = params
	}
	if err := os.MkdirAll(filepath.Join(k.f.path("sys/module"), name), 0o755); err != nil {
		return err
	}
	switch name {
	case "qemu_fw_cfg":
		if k.f.sys.fwData != nil {
			raw := filepath.Join(k.f.path("sys/firmware/qemu_fw_cfg/by_name/opt/kpreload/instance.yaml"), "raw")
			if err := os.MkdirAll(filepath.Dir(raw), 0o755); err != nil {
				return err
			}
			return os.WriteFile(raw, k.f.sys.fwData, 0o644)
		}
	}
	return nil
}

// bind binds the PCI device at addr to driver, when the device is there.
func (k *fakeKernel) bind(addr, driver string) error {
	dev := filepath.Join(k.f.path("sys/bus/pci/devices"), addr)
	if _, err := os.Stat(dev); err != nil {
		return unix.ENODEV // its init found no device
	}
	drv := filepath.Join(k.f.path("sys/bus/pci/drivers"), driver)
	if err := os.MkdirAll(drv, 0o755); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dev, "driver"))
	return os.Symlink(drv, filepath.Join(dev, "driver"))
}

func (k *fakeKernel) InitModule(image []byte, params string) error { return unix.ENOSYS }

// wasAsked reports whether a load of module name was asked for.
func (k *fakeKernel) wasAsked(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Contains(k.asked, name)
}

// names returns the modules the fake kernel loaded, sorted (loads of one
// round run in parallel).
func (k *fakeKernel) names() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Sorted(slices.Values(k.loaded))
}

// syncBuffer is a bytes.Buffer safe for the boot's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
