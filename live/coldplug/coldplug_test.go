package coldplug

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// fixture is the PCI sysfs capture of a real VM with one NVIDIA H200.
const fixture = "../../testdata/h200-gpu-vm/pci-sysfs.txt" // testdata/ at the repository's root

// Modaliases of the fixture's devices.
const (
	hostBridge = "pci:v00008086d00000D57sv00000000sd00000000bc06sc00i00"
	virtioBlk  = "pci:v00001AF4d00001042sv00001AF4sd00001042bc01sc80i00"
	virtioNet  = "pci:v00001AF4d00001041sv00001AF4sd00001041bc02sc00i00"
	virtioSock = "pci:v00001AF4d00001053sv00001AF4sd00001053bcFFscFFi00"
	virtioRNG  = "pci:v00001AF4d00001044sv00001AF4sd00001044bcFFscFFi00"
	h200       = "pci:v000010DEd00002335sv000010DEsd000018BFbc03sc02i00"
)

// sysfsFromFixture rebuilds <root>/bus/pci/devices/<addr>/<file> from the fixture;
// "driver" lines become the symlink sysfs has: driver -> ../../../bus/pci/drivers/<name>.
func sysfsFromFixture(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatalf("fixture missing: %v", err)
	}
	root := t.TempDir()
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		if len(f) != 3 {
			t.Fatalf("%s: bad line %q", fixture, sc.Text())
		}
		dir := filepath.Join(root, "bus", "pci", "devices", f[0])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if f[1] == "driver" {
			if err := os.MkdirAll(filepath.Join(root, "bus", "pci", "drivers", f[2]), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../../../bus/pci/drivers/"+f[2], filepath.Join(dir, "driver")); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, f[1]), []byte(f[2]+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestScanFixture(t *testing.T) {
	root := sysfsFromFixture(t)
	devs, err := Scan(root)
	if err != nil {
		t.Fatalf("Scan(%s): %v", root, err)
	}
	dev := func(addr, alias, driver string) Device {
		return Device{Path: filepath.Join(root, "bus", "pci", "devices", addr), Modalias: alias, Driver: driver}
	}
	want := []Device{
		dev("0000:00:00.0", hostBridge, ""),
		dev("0000:00:01.0", virtioBlk, "virtio-pci"),
		dev("0000:00:02.0", virtioBlk, "virtio-pci"),
		dev("0000:00:03.0", virtioNet, "virtio-pci"),
		dev("0000:00:04.0", virtioSock, "virtio-pci"),
		dev("0000:00:05.0", virtioRNG, "virtio-pci"),
		dev("0000:00:06.0", h200, "nvidia"),
	}
	if !reflect.DeepEqual(devs, want) {
		t.Errorf("Scan(fixture) =\n%v\nwant\n%v", devs, want)
	}
	for _, d := range devs {
		if got := BoundDriver(d.Path); got != d.Driver {
			t.Errorf("BoundDriver(%s) = %q, want %q", d.Path, got, d.Driver)
		}
	}
}

// TestScanBuses checks every bus is read, devices without (or with an empty)
// modalias are skipped, and the result is sorted by path whatever the bus.
func TestScanBuses(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	write("bus/virtio/devices/virtio1/modalias", "virtio:d00000002v00001AF4\n")
	write("bus/virtio/devices/virtio0/modalias", "virtio:d00000001v00001AF4\n")
	write("bus/pci/devices/0000:00:06.0/modalias", h200+"\n")
	write("bus/pci/devices/0000:00:07.0/modalias", "\n")        // empty: skipped
	write("bus/pci/devices/0000:00:08.0/vendor", "0x1af4\n")    // no modalias: skipped
	write("bus/cpu/devices/cpu0/uevent", "MODALIAS=cpu:type\n") // no modalias file: skipped

	devs, err := Scan(root)
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	var got []string
	for _, d := range devs {
		rel, _ := filepath.Rel(root, d.Path)
		got = append(got, rel+" "+d.Modalias+" driver="+d.Driver)
	}
	want := []string{
		"bus/pci/devices/0000:00:06.0 " + h200 + " driver=",
		"bus/virtio/devices/virtio0 virtio:d00000001v00001AF4 driver=",
		"bus/virtio/devices/virtio1 virtio:d00000002v00001AF4 driver=",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Scan =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	pciOnly, err := ScanBus(root, "pci")
	if err != nil {
		t.Fatalf("ScanBus(pci): %v", err)
	}
	if len(pciOnly) != 1 || pciOnly[0].Modalias != h200 {
		t.Errorf("ScanBus(pci) = %v, want the one PCI device with a modalias", pciOnly)
	}
	known := map[string]bool{devs[0].Path: true, devs[1].Path: true}
	fresh, err := ScanNew(root, "*", known)
	if err != nil || len(fresh) != 1 || fresh[0].Path != devs[2].Path {
		t.Errorf("ScanNew(known: the first two) = %v, %v; want only %s", fresh, err, devs[2].Path)
	}
	if none, err := ScanBus(root, "usb"); err != nil || len(none) != 0 {
		t.Errorf("ScanBus(usb) = %v, %v; want no devices, no error", none, err)
	}

	empty, err := Scan(filepath.Join(root, "no-such-sysfs"))
	if err != nil || len(empty) != 0 {
		t.Errorf("Scan(missing root) = %v, %v; want no devices, no error", empty, err)
	}
}

// handIndex is a small boot index with real alias patterns: virtio_pci's from the
// Debian 6.1 kernel, nouveau's, and NVIDIA's for display and 3D controllers.
func handIndex() *bootindex.Index {
	return &bootindex.Index{Format: bootindex.FormatVersion, Kernel: "6.1.0-56-cloud-amd64", Sets: []bootindex.Set{
		{ID: "kernel", Dir: "kernel", Modules: []bootindex.Module{
			{Name: "virtio_pci", Path: "drivers/virtio/virtio_pci.ko", Aliases: []string{"pci:v00001AF4d*sv*sd*bc*sc*i*"}},
			{Name: "virtio_blk", Path: "drivers/block/virtio_blk.ko", Aliases: []string{"virtio:d00000002v*"}},
			{Name: "nouveau", Path: "drivers/gpu/drm/nouveau/nouveau.ko", Aliases: []string{"pci:v000012D2d*sv*sd*bc03sc*i*", "pci:v000010DEd*sv*sd*bc03sc*i*"}},
		}},
		{ID: "0123abcd", Driver: "nvidia", Version: "580.159.04", Flavor: "open", Dir: "sets/0123abcd", Modules: []bootindex.Module{
			{Name: "nvidia", Path: "nvidia.ko", Aliases: []string{"pci:v000010DEd*sv*sd*bc03sc00i00*", "pci:v000010DEd*sv*sd*bc03sc02i00*"}},
			{Name: "nvidia-uvm", Path: "nvidia-uvm.ko", Depends: []string{"nvidia"}},
		}},
		{ID: "4567cdef", Driver: "nvidia", Version: "535.261.03", Flavor: "open", Dir: "sets/4567cdef", Modules: []bootindex.Module{
			{Name: "nvidia", Path: "nvidia.ko", Aliases: []string{"pci:v000010DEd*sv*sd*bc03sc02i00*"}},
		}},
	}}
}

func TestMatch(t *testing.T) {
	ix := NewIndex()
	ix.Add("/lib/modules/6.1.0-56-cloud-amd64", handIndex(), nil)
	onlyNvidia := NewIndex()
	onlyNvidia.Add("/lib/modules/6.1.0-56-cloud-amd64", handIndex(), func(s *bootindex.Set) bool { return s.Driver == "nvidia" })

	tests := []struct {
		ix    *Index
		alias string
		want  []string
	}{
		{ix, h200, []string{"nouveau", "nvidia"}}, // index order, nvidia once although two sets match
		{ix, virtioBlk, []string{"virtio_pci"}},
		{ix, virtioNet, []string{"virtio_pci"}},
		{ix, virtioSock, []string{"virtio_pci"}},
		{ix, virtioRNG, []string{"virtio_pci"}},
		{ix, hostBridge, nil},
		{ix, "virtio:d00000002v00001AF4", []string{"virtio_blk"}},
		{ix, "virtio:d00000001v00001AF4", nil},
		{ix, "pci:v000010DEd00002335sv000010DEsd000018BFbc03sc80i00", []string{"nouveau"}}, // other subclass
		{ix, "pci:v000010DEd00002335sv000010DEsd000018BFbc03sc02i01", []string{"nouveau"}}, // other prog-if
		{ix, "", nil},
		{onlyNvidia, h200, []string{"nvidia"}},
		{onlyNvidia, virtioBlk, nil},
	}
	for _, tt := range tests {
		if got := tt.ix.Match(tt.alias); !slices.Equal(got, tt.want) {
			t.Errorf("Match(%q) = %q, want %q", tt.alias, got, tt.want)
		}
	}
}

func TestAliasKinds(t *testing.T) {
	all := NewIndex()
	all.Add("/lib/modules/k", handIndex(), nil)
	drivers := NewIndex()
	drivers.Add("/lib/modules/k", handIndex(), func(s *bootindex.Set) bool { return s.Driver == "nvidia" })
	odd := NewIndex()
	odd.Add("/lib/modules/k", &bootindex.Index{Sets: []bootindex.Set{{ID: "x", Modules: []bootindex.Module{
		{Name: "a", Aliases: []string{"acpi*:QEMU0002:*"}},
		{Name: "b", Aliases: []string{"*"}},
	}}}}, nil)
	tests := []struct {
		name string
		ix   *Index
		want []string
	}{
		{"kernel and driver sets", all, []string{"pci", "virtio"}},
		{"driver sets only", drivers, []string{"pci"}},
		{"no ':' counts as any", odd, []string{"*", "acpi*"}},
		{"empty", NewIndex(), []string{}},
	}
	for _, tt := range tests {
		if got := tt.ix.AliasKinds(); !slices.Equal(got, tt.want) {
			t.Errorf("%s: AliasKinds() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestByName(t *testing.T) {
	ix := NewIndex()
	ix.Add("/lib/modules/k", handIndex(), nil)
	tests := []struct {
		name  string
		files []string
	}{
		{"nvidia", []string{"/lib/modules/k/sets/0123abcd/nvidia.ko", "/lib/modules/k/sets/4567cdef/nvidia.ko"}},
		{"nvidia_uvm", []string{"/lib/modules/k/sets/0123abcd/nvidia-uvm.ko"}}, // indexed as nvidia-uvm
		{"nvidia-uvm", []string{"/lib/modules/k/sets/0123abcd/nvidia-uvm.ko"}},
		{"virtio-pci", []string{"/lib/modules/k/kernel/drivers/virtio/virtio_pci.ko"}},
		{"e1000", nil},
	}
	for _, tt := range tests {
		var files []string
		for _, c := range ix.ByName(tt.name) {
			files = append(files, c.File)
		}
		if !slices.Equal(files, tt.files) {
			t.Errorf("ByName(%q) files = %q, want %q", tt.name, files, tt.files)
		}
	}
}

// TestMatchAgainstModprobe builds an index from a real kernel's modules.alias and
// checks Match names the same modules as the real `modprobe -R` for the fixture's
// devices and the virtio devices virtio_pci creates.
func TestMatchAgainstModprobe(t *testing.T) {
	modprobe := modprobePath(t)
	aliases := []string{hostBridge, virtioBlk, virtioNet, virtioSock, virtioRNG, h200,
		"virtio:d00000001v00001AF4", "virtio:d00000002v00001AF4", "virtio:d00000004v00001AF4", "virtio:d00000013v00001AF4"}
	for _, kver := range []string{"6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64"} {
		root := kernelRoot(t, kver)
		ix := NewIndex()
		ix.Add("/", indexFromAliasFile(t, filepath.Join(root, "lib/modules", kver, "modules.alias"), kver), nil)
		for _, a := range aliases {
			got := ix.Match(a)
			want := modprobeResolve(t, modprobe, root, kver, a)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s: Match(%q) = %q, modprobe -R says %q", kver, a, got, want)
			}
			t.Logf("%s: %s -> %q", kver, a, got)
		}
	}
}

// indexFromAliasFile turns a depmod modules.alias file into a boot index set.
func indexFromAliasFile(t *testing.T, path, kver string) *bootindex.Index {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	set := bootindex.Set{ID: "kernel"}
	at := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "alias" {
			continue
		}
		i, ok := at[f[2]]
		if !ok {
			i = len(set.Modules)
			at[f[2]] = i
			set.Modules = append(set.Modules, bootindex.Module{Name: f[2]})
		}
		set.Modules[i].Aliases = append(set.Modules[i].Aliases, f[1])
	}
	if len(set.Modules) < 100 {
		t.Fatalf("%s: only %d modules with aliases; is the kernel tree complete? run scripts/deps.sh", path, len(set.Modules))
	}
	return &bootindex.Index{Format: bootindex.FormatVersion, Kernel: kver, Sets: []bootindex.Set{set}}
}

// kernelRoot returns the directory holding lib/modules/<kver> of an unpacked test kernel.
func kernelRoot(t *testing.T, kver string) string {
	t.Helper()
	root := testenv.KernelTree(t, kver)
	if _, err := os.Stat(filepath.Join(root, "lib/modules", kver, "modules.alias")); err != nil {
		t.Fatalf("kernel %s is not unpacked at %s (%v): run scripts/deps.sh (or scripts/kernels.sh %s)", kver, root, err, kver)
	}
	return root
}

func modprobePath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("modprobe"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/modprobe", "/sbin/modprobe"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("modprobe not found: install kmod with scripts/deps.sh")
	return ""
}

// modprobeResolve runs the real `modprobe -R` without the host's modprobe.d.
func modprobeResolve(t *testing.T, modprobe, root, kver, alias string) []string {
	t.Helper()
	cmd := exec.Command(modprobe, "-C", t.TempDir(), "-d", root, "-S", kver, "-R", "--", alias)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if strings.Contains(errb.String(), " not found in directory ") {
			return nil
		}
		t.Fatalf("modprobe -R %s: %v: %s", alias, err, errb.String())
	}
	return strings.Fields(out.String())
}

func TestCandidateMatches(t *testing.T) {
	ix := NewIndex()
	ix.Add("/lib/modules/k", handIndex(), nil)
	tests := []struct {
		name, alias string
		want        bool
	}{
		{"virtio_pci", virtioBlk, true},
		{"virtio_pci", h200, false},
		{"nvidia", h200, true},      // both sets' nvidia match a 3D controller
		{"nvidia_uvm", h200, false}, // no aliases at all
	}
	for _, tt := range tests {
		cands := ix.ByName(tt.name)
		if len(cands) == 0 {
			t.Fatalf("ByName(%q): no candidates", tt.name)
		}
		for _, c := range cands {
			if got := c.Matches(tt.alias); got != tt.want {
				t.Errorf("%s (%s).Matches(%q) = %v, want %v", tt.name, c.File, tt.alias, got, tt.want)
			}
		}
	}
}
