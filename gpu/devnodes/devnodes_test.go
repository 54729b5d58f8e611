package devnodes

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fixtureDir holds the real H200 VM's captures (see its README.md): testdata/h200-gpu-vm
// at the repository's root.
const fixtureDir = "../../testdata/h200-gpu-vm"

func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatalf("fixture: %v (the H200 VM fixture lives in the repository: testdata/h200-gpu-vm)", err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixtureProc rebuilds the H200 VM's /proc/devices and /proc/driver/nvidia from the
// fixture. The fixture lists the capability files' names but not their contents; they
// are written in the driver's format (nv-caps: "DeviceFileMinor", "DeviceFileMode" in
// decimal, "DeviceFileModify") with the minors and modes of the nodes the VM had.
func fixtureProc(t *testing.T) string {
	t.Helper()
	proc := filepath.Join(t.TempDir(), "proc")
	writeFile(t, filepath.Join(proc, "devices"), readFixture(t, "proc-devices.txt"))
	var cur string
	var content strings.Builder
	flush := func() {
		if cur != "" {
			writeFile(t, filepath.Join(proc, strings.TrimPrefix(cur, "/proc/"), "information"), content.String())
		}
		cur = ""
		content.Reset()
	}
	gpus := 0
	for _, line := range strings.Split(readFixture(t, "proc-driver-nvidia-gpus.txt"), "\n") {
		if p, ok := strings.CutPrefix(line, "== "); ok {
			flush()
			cur = p
			gpus++
			continue
		}
		if strings.HasPrefix(line, "/proc/") {
			flush()
			continue
		}
		if cur != "" && line != "" {
			content.WriteString(line + "\n")
		}
	}
	flush()
	if gpus == 0 {
		t.Fatal("fixture proc-driver-nvidia-gpus.txt has no \"== /proc/driver/nvidia/gpus/...\" section")
	}
	caps := filepath.Join(proc, "driver/nvidia/capabilities")
	writeFile(t, filepath.Join(caps, "mig/config"), "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
	writeFile(t, filepath.Join(caps, "mig/monitor"), "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
	writeFile(t, filepath.Join(caps, "fabric-imex-mgmt"), "DeviceFileMinor: 3\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
	if err := os.MkdirAll(filepath.Join(caps, "gpu0/mig"), 0o755); err != nil {
		t.Fatal(err)
	}
	return proc
}

// fixtureNodes parses the VM's recorded `ls -la /dev/nvidia*` listing.
func fixtureNodes(t *testing.T) []Node {
	t.Helper()
	var nodes []Node
	dir := ""
	sc := bufio.NewScanner(strings.NewReader(readFixture(t, "nvidia-smi.txt")))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "/dev/") && strings.HasSuffix(line, ":") {
			dir = strings.TrimSuffix(line, ":")
			continue
		}
		if !strings.HasPrefix(line, "c") {
			continue
		}
		f := strings.Fields(strings.Replace(line, ",", " ", 1))
		// crw-rw-rw- 1 root root 195 0 Nov 22 09:59 /dev/nvidia0
		if len(f) != 10 {
			t.Fatalf("cannot parse listing line %q", line)
		}
		major, err1 := strconv.ParseUint(f[4], 10, 32)
		minor, err2 := strconv.ParseUint(f[5], 10, 32)
		if err1 != nil || err2 != nil {
			t.Fatalf("cannot parse numbers in %q", line)
		}
		var mode os.FileMode
		for i, c := range f[0][1:10] {
			if c != '-' {
				mode |= 1 << (8 - i)
			}
		}
		path := f[9]
		if !strings.HasPrefix(path, "/") {
			path = dir + "/" + path
		}
		nodes = append(nodes, Node{Path: path, Major: uint32(major), Minor: uint32(minor), Mode: mode})
	}
	if len(nodes) < 4 {
		t.Fatalf("fixture listing has %d nodes, want at least 4", len(nodes))
	}
	return nodes
}

// TestPlanH200 checks Plan against the nodes the real H200 VM had.
func TestPlanH200(t *testing.T) {
	got, err := Plan(fixtureProc(t), "/dev")
	if err != nil {
		t.Fatal(err)
	}
	want := fixtureNodes(t)
	sortNodes(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Plan(H200 fixture) =\n%v\nwant (the VM's /dev listing)\n%v", got, want)
	}
}

func sortNodes(n []Node) { sort.Slice(n, func(i, j int) bool { return n[i].Path < n[j].Path }) }

func TestPlanCases(t *testing.T) {
	tests := []struct {
		name    string
		devices string
		gpus    map[string]string // bus id -> information
		caps    map[string]string
		want    []string
		wantErr string
	}{
		{
			name:    "no driver loaded",
			devices: "Character devices:\n  1 mem\n\nBlock devices:\n259 blkext\n",
			want:    nil,
		},
		{
			name: "two GPUs, dynamic uvm major, no caps, old nvidia-frontend name",
			devices: "Character devices:\n  1 mem\n195 nvidia-frontend\n" +
				"509 nvidia-uvm\n\nBlock devices:\n195 nvidia\n",
			gpus: map[string]string{
				"0000:41:00.0": "Model: \t Tesla V100\nDevice Minor: \t 1\n",
				"0000:0a:00.0": "Model: \t Tesla V100\nDevice Minor: \t 0\n",
			},
			want: []string{
				"/d/nvidia-uvm c 509,0 0666", "/d/nvidia-uvm-tools c 509,1 0666",
				"/d/nvidia0 c 195,0 0666", "/d/nvidia1 c 195,1 0666", "/d/nvidiactl c 195,255 0666",
			},
		},
		{
			name:    "caps major without capability files",
			devices: "Character devices:\n195 nvidia\n195 nvidiactl\n500 nvidia-caps\n",
			want:    []string{"/d/nvidiactl c 195,255 0666"},
		},
		{
			name:    "bad minor",
			devices: "Character devices:\n195 nvidia\n",
			gpus:    map[string]string{"0000:01:00.0": "Device Minor: \t x\n"},
			wantErr: `Device Minor "x"`,
		},
		{
			name:    "missing minor",
			devices: "Character devices:\n195 nvidia\n",
			gpus:    map[string]string{"0000:01:00.0": "Model: A100\n"},
			wantErr: `no "Device Minor:" line`,
		},
		{
			name:    "bad capability mode",
			devices: "Character devices:\n195 nvidia\n241 nvidia-caps\n",
			caps:    map[string]string{"mig/config": "DeviceFileMinor: 1\nDeviceFileMode: 4096\n"},
			wantErr: "not a permission mode",
		},
		{
			name:    "damaged /proc/devices",
			devices: "Character devices:\n195\n",
			wantErr: "devices:2: want",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := t.TempDir()
			writeFile(t, filepath.Join(proc, "devices"), tt.devices)
			for bus, info := range tt.gpus {
				writeFile(t, filepath.Join(proc, "driver/nvidia/gpus", bus, "information"), info)
			}
			for p, c := range tt.caps {
				writeFile(t, filepath.Join(proc, "driver/nvidia/capabilities", p), c)
			}
			nodes, err := Plan(proc, "/d")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Plan error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range nodes {
				got = append(got, n.String())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Plan = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := Plan(t.TempDir(), "/dev"); err == nil {
		t.Errorf("Plan(no /proc/devices) = nil error, want one")
	}
}

// TestCreate makes real device nodes in a temporary directory (needs root, as
// mknod of a character device does; the project's tests run as root).
func TestCreate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestCreate needs root (mknod); run the tests as root")
	}
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	dev := t.TempDir()
	nodes, err := Plan(fixtureProc(t), dev)
	if err != nil {
		t.Fatal(err)
	}
	// A stale regular file and a node with wrong numbers are replaced.
	writeFile(t, filepath.Join(dev, "nvidiactl"), "not a device")
	if err := unix.Mknod(filepath.Join(dev, "nvidia0"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 2; round++ {
		if err := Create(nodes); err != nil {
			t.Fatalf("Create round %d: %v", round, err)
		}
		for _, n := range nodes {
			var st unix.Stat_t
			if err := unix.Lstat(n.Path, &st); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			got := Node{Path: n.Path, Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev), Mode: os.FileMode(st.Mode & 0o7777)}
			if st.Mode&unix.S_IFMT != unix.S_IFCHR || got != n {
				t.Errorf("round %d: %s is %v (type %o), want %v (character device)", round, n.Path, got, st.Mode&unix.S_IFMT, n)
			}
		}
	}
	fi, err := os.Stat(filepath.Join(dev, "nvidia-caps"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("nvidia-caps dir: %v, %v; want mode 0755", fi, err)
	}
	if err := Create([]Node{{Path: filepath.Join(dev, "nvidiactl", "below-a-device"), Major: 1, Minor: 1, Mode: 0o666}}); err == nil {
		t.Errorf("Create under a device node = nil error, want one")
	}
}
