package cdispec

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/testsupport/testenv"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

const h200Version = "580.159.04"
const h200UUID = "GPU-7843b487-7c5d-bf32-e87d-73ef066a19c5"

// h200Tree builds a root from the real H200 VM's /proc captures
// (testenv.H200Proc) and returns it; files maps more paths (relative to the
// root) to contents.
func h200Tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range testenv.H200Proc(t) {
		write(t, filepath.Join(root, p), c)
	}
	for p, c := range files {
		write(t, filepath.Join(root, p), c)
	}
	return root
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	write(t, to, string(b))
}

func write(t *testing.T, p, c string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(c), 0o755); err != nil {
		t.Fatal(err)
	}
}

func deviceNames(s *specs.Spec) []string {
	var n []string
	for _, d := range s.Devices {
		n = append(n, d.Name)
	}
	return n
}

func mounts(e specs.ContainerEdits) map[string]string {
	m := map[string]string{}
	for _, x := range e.Mounts {
		m[x.ContainerPath] = x.HostPath
	}
	return m
}

func nodePaths(nodes []*specs.DeviceNode) []string {
	var p []string
	for _, n := range nodes {
		p = append(p, n.Path)
	}
	return p
}

// TestGenerateHost is a host that is not a kpreload image, laid out like the
// device machine: libraries under /usr/local/nvidia/lib64, binaries behind
// wrapper-free links, firmware on firmware_class.path.
func TestGenerateHost(t *testing.T) {
	root := h200Tree(t, map[string]string{
		"usr/local/nvidia/lib64/libcuda.so." + h200Version:                   "elf",
		"usr/local/nvidia/lib64/libnvidia-ml.so." + h200Version:              "elf",
		"usr/local/nvidia/lib64/libcuda.so.1":                                "not a versioned name",
		"usr/local/nvidia/lib64/libnvidia-ml.so.570.1.1":                     "another version",
		"usr/local/nvidia/bin/nvidia-smi":                                    "elf",
		"usr/local/nvidia/firmware/nvidia/" + h200Version + "/gsp_ga10x.bin": "fw",
		"sys/module/firmware_class/parameters/path":                          "/usr/local/nvidia/firmware\n",
	})
	sock := filepath.Join(root, PersistencedSocket)
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	spec, found, err := Generate(root, Options{HookPath: "/opt/bin/kpreload"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := found.Source, "host"; got != want {
		t.Errorf("source = %q, want %q", got, want)
	}
	if got, want := deviceNames(spec), []string{"0", h200UUID, "all"}; !reflect.DeepEqual(got, want) {
		t.Errorf("devices = %q, want %q", got, want)
	}
	for _, d := range spec.Devices {
		if got, want := nodePaths(d.ContainerEdits.DeviceNodes), []string{"/dev/nvidia0"}; !reflect.DeepEqual(got, want) {
			t.Errorf("device %s nodes = %q, want %q", d.Name, got, want)
		}
	}
	if got, want := nodePaths(spec.ContainerEdits.DeviceNodes), []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"}; !reflect.DeepEqual(got, want) {
		t.Errorf("shared nodes = %q, want %q", got, want)
	}
	uvm := spec.ContainerEdits.DeviceNodes[0]
	if uvm.Major != 238 || uvm.Minor != 0 || uvm.Type != "c" {
		t.Errorf("nvidia-uvm = %+v, want c 238,0 (the H200's /proc/devices)", *uvm)
	}
	lib := "/usr/local/nvidia/lib64/"
	want := map[string]string{
		lib + "libcuda.so." + h200Version:      lib + "libcuda.so." + h200Version,
		lib + "libnvidia-ml.so." + h200Version: lib + "libnvidia-ml.so." + h200Version,
		"/usr/bin/nvidia-smi":                  "/usr/local/nvidia/bin/nvidia-smi",
		"/lib/firmware/nvidia/" + h200Version:  "/usr/local/nvidia/firmware/nvidia/" + h200Version,
		PersistencedSocket:                     PersistencedSocket,
	}
	if got := mounts(spec.ContainerEdits); !reflect.DeepEqual(got, want) {
		t.Errorf("mounts = %v, want %v", got, want)
	}
	hooks := spec.ContainerEdits.Hooks
	if len(hooks) != 1 {
		t.Fatalf("hooks = %d, want 1", len(hooks))
	}
	if got, want := hooks[0].Args, []string{"kpreload", "cdi", "hook", "update-ldcache", "--folder", "/usr/local/nvidia/lib64"}; !reflect.DeepEqual(got, want) || hooks[0].Path != "/opt/bin/kpreload" || hooks[0].HookName != "createContainer" {
		t.Errorf("hook = %s %s %q, want createContainer /opt/bin/kpreload %q", hooks[0].HookName, hooks[0].Path, hooks[0].Args, want)
	}
	for _, asJSON := range []bool{false, true} {
		b, err := Marshal(spec, asJSON)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Validate(b, asJSON)
		if err != nil {
			t.Fatalf("json=%v: %v\n%s", asJSON, err, b)
		}
		if !reflect.DeepEqual(back, spec) {
			t.Errorf("json=%v: the spec read back differs from the one generated", asJSON)
		}
	}
}

// TestGenerateKpreload is a kpreload image: the activation record, the driver
// link made by gpu/activate, Debian's nvidia/current layout.
func TestGenerateKpreload(t *testing.T) {
	drv := "opt/kpreload/drivers/" + h200Version + "/"
	cur := drv + "usr/lib/x86_64-linux-gnu/nvidia/current/"
	root := h200Tree(t, map[string]string{
		cur + "libcuda.so." + h200Version:                                           "elf",
		cur + "libnvidia-ml.so." + h200Version:                                      "elf",
		drv + "usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so." + h200Version: "elf",
		drv + "usr/lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.13":            "not the driver's version",
		drv + "usr/bin/nvidia-smi":                                                  "elf",
		drv + "usr/bin/nvidia-persistenced":                                         "elf",
		"lib/firmware/nvidia/" + h200Version + "/gsp_ga10x.bin":                     "fw",
		// A host-style library the image also has: not used on a kpreload image.
		"usr/local/nvidia/lib64/libcuda.so." + h200Version: "elf",
	})
	run := filepath.Join(root, "run")
	if err := activate.Point(run, root, activate.DriversDir, h200Version); err != nil {
		t.Fatal(err)
	}
	if err := activate.MarkReady(run, activate.Ready{Driver: "nvidia", Version: h200Version, Flavor: "open", By: "init"}); err != nil {
		t.Fatal(err)
	}
	spec, found, err := Generate(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if found.Source != "kpreload" || found.DriverDir != "/"+strings.TrimSuffix(drv, "/") {
		t.Errorf("source %q, driver dir %q; want kpreload, /%s", found.Source, found.DriverDir, drv)
	}
	d := "/" + drv
	want := map[string]string{
		"/usr/lib/x86_64-linux-gnu/libcuda.so." + h200Version:                  "/" + cur + "libcuda.so." + h200Version,
		"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so." + h200Version:             "/" + cur + "libnvidia-ml.so." + h200Version,
		"/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so." + h200Version: d + "usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so." + h200Version,
		"/usr/bin/nvidia-smi":                 d + "usr/bin/nvidia-smi",
		"/usr/bin/nvidia-persistenced":        d + "usr/bin/nvidia-persistenced",
		"/lib/firmware/nvidia/" + h200Version: "/lib/firmware/nvidia/" + h200Version,
	}
	if got := mounts(spec.ContainerEdits); !reflect.DeepEqual(got, want) {
		t.Errorf("mounts =\n%v\nwant\n%v", got, want)
	}
	h := spec.ContainerEdits.Hooks
	if len(h) != 1 || h[0].Path != DefaultHookPath || !reflect.DeepEqual(h[0].Args[4:], []string{"--folder", ContainerLibDir}) {
		t.Errorf("hook = %+v, want %s ... --folder %s", h, DefaultHookPath, ContainerLibDir)
	}
	b, err := Marshal(spec, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Validate(b, false); err != nil {
		t.Fatal(err)
	}
}

func TestGenerateErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) string
		want  string
	}{
		{"no nvidia major", func(t *testing.T) string {
			root := t.TempDir()
			write(t, filepath.Join(root, "proc/devices"), "Character devices:\n  1 mem\n\nBlock devices:\n  7 loop\n")
			return root
		}, ErrNoDriver.Error()},
		{"no /proc/devices", func(t *testing.T) string { return t.TempDir() }, "no such file"},
		{"no version on a host", func(t *testing.T) string {
			root := h200Tree(t, nil)
			os.Remove(filepath.Join(root, "proc/driver/nvidia/version"))
			return root
		}, "driver version"},
		{"active driver is not nvidia", func(t *testing.T) string {
			root := h200Tree(t, nil)
			if err := activate.MarkReady(filepath.Join(root, "run"), activate.Ready{Driver: "kpreload-edu", Version: "1.0.0"}); err != nil {
				t.Fatal(err)
			}
			return root
		}, `"kpreload-edu", not nvidia`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Generate(tt.setup(t), Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, _, err := Generate(noDriverRoot(t), Options{}); !errors.Is(err, ErrNoDriver) {
		t.Errorf("err = %v, want ErrNoDriver", err)
	}
}

// noDriverRoot returns a root whose /proc/devices has no NVIDIA major.
func noDriverRoot(t *testing.T) string {
	root := t.TempDir()
	write(t, filepath.Join(root, "proc/devices"), "Character devices:\n  1 mem\n")
	return root
}

func TestReadVersion(t *testing.T) {
	tests := []struct{ in, want string }{
		{"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \nGCC version:  gcc 15\n", "580.159.04"},
		{"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 30 2025\n", "535.261.03"},
		{"NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.86.15  Release Build  (dvs-builder@U16-I3-B04-4-1)  Thu Jan 23 2025\n", "570.86.15"},
		{"GCC version: 12\n", ""},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "version"), tt.in)
		got, err := ReadVersion(dir, "version")
		if got != tt.want || (err != nil) != (tt.want == "") {
			t.Errorf("ReadVersion(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestWriteFile(t *testing.T) {
	root := h200Tree(t, map[string]string{"usr/lib64/libcuda.so." + h200Version: "elf"})
	spec, _, err := Generate(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "cdi", "nvidia.yaml")
	b, _ := Marshal(spec, false)
	if err := WriteFile(out, b, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ValidateFile(out); err != nil {
		t.Fatal(err)
	}
	// An invalid spec is refused and the previous file stays.
	bad := *spec
	bad.Devices = append([]specs.Device(nil), spec.Devices...)
	bad.Devices[0].Name = "bad name!"
	b2, _ := Marshal(&bad, false)
	if err := WriteFile(out, b2, false); err == nil {
		t.Fatal("WriteFile accepted a device named \"bad name!\"")
	}
	got, _ := os.ReadFile(out)
	if string(got) != string(b) {
		t.Errorf("the invalid spec replaced the valid one")
	}
	ents, _ := os.ReadDir(filepath.Dir(out))
	if len(ents) != 1 {
		t.Errorf("%d files left in the directory, want 1 (no temporary files)", len(ents))
	}
	if err := Remove(out); err != nil {
		t.Fatal(err)
	}
	if err := Remove(out); err != nil {
		t.Errorf("removing a missing spec: %v", err)
	}
}

func TestRefresh(t *testing.T) {
	drv := "opt/kpreload/drivers/" + h200Version + "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so." + h200Version
	root := h200Tree(t, map[string]string{drv: "elf"})
	run := filepath.Join(root, "run")
	spec := filepath.Join(root, DefaultSpecFile)
	steps := []struct {
		name  string
		setup func() error
		want  bool // a spec file exists afterwards
	}{
		{"no driver active", func() error { return nil }, false},
		{"nvidia active", func() error {
			if err := activate.Point(run, root, activate.DriversDir, h200Version); err != nil {
				return err
			}
			return activate.MarkReady(run, activate.Ready{Driver: "nvidia", Version: h200Version})
		}, true},
		{"another driver active", func() error {
			return activate.MarkReady(run, activate.Ready{Driver: "kpreload-edu", Version: "1.0.0"})
		}, false},
		{"nvidia again", func() error {
			return activate.MarkReady(run, activate.Ready{Driver: "nvidia", Version: h200Version})
		}, true},
		{"readiness cleared (switch in progress)", func() error { return activate.ClearReady(run) }, false},
	}
	for _, s := range steps {
		if err := s.setup(); err != nil {
			t.Fatal(err)
		}
		res, err := Refresh(root, DefaultSpecFile, Options{})
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		wrote := res.Written != ""
		_, statErr := os.Stat(spec)
		if got := statErr == nil; got != s.want || wrote != s.want {
			t.Errorf("%s: spec exists %v (wrote %v), want %v", s.name, got, wrote, s.want)
		}
		if s.want {
			if _, err := ValidateFile(spec); err != nil {
				t.Errorf("%s: %v", s.name, err)
			}
		}
	}
}

// TestGenerateMIGCapabilities: the MIG capability nodes are never shared by
// every device (a root process holding nvidia-cap1 can reconfigure MIG on the
// host); each comes only with its own device, mig-config or mig-monitor, and
// "all" brings neither.
func TestGenerateMIGCapabilities(t *testing.T) {
	caps := "proc/driver/nvidia/capabilities/"
	tests := []struct {
		name        string
		files       map[string]string
		wantDevices []string
		wantNodes   map[string]string // device -> its nodes
	}{
		{"config and monitor", map[string]string{
			caps + "mig/config":  "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n",
			caps + "mig/monitor": "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
		}, []string{"0", h200UUID, "all", DeviceMIGConfig, DeviceMIGMonitor},
			map[string]string{DeviceMIGConfig: "/dev/nvidia-caps/nvidia-cap1", DeviceMIGMonitor: "/dev/nvidia-caps/nvidia-cap2", "all": "/dev/nvidia0"}},
		{"other minors", map[string]string{
			caps + "mig/config":  "DeviceFileMinor: 7\nDeviceFileMode: 256\nDeviceFileModify: 1\n",
			caps + "mig/monitor": "DeviceFileMinor: 3\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
		}, []string{"0", h200UUID, "all", DeviceMIGConfig, DeviceMIGMonitor},
			map[string]string{DeviceMIGConfig: "/dev/nvidia-caps/nvidia-cap7", DeviceMIGMonitor: "/dev/nvidia-caps/nvidia-cap3"}},
		{"monitor only", map[string]string{
			caps + "mig/monitor": "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
		}, []string{"0", h200UUID, "all", DeviceMIGMonitor},
			map[string]string{DeviceMIGMonitor: "/dev/nvidia-caps/nvidia-cap2"}},
		{"no MIG capabilities", nil, []string{"0", h200UUID, "all"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{"usr/lib64/libcuda.so." + h200Version: "elf"}
			for p, c := range tt.files {
				files[p] = c
			}
			spec, found, err := Generate(h200Tree(t, files), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := deviceNames(spec); !reflect.DeepEqual(got, tt.wantDevices) {
				t.Errorf("devices = %q, want %q", got, tt.wantDevices)
			}
			if got, want := nodePaths(spec.ContainerEdits.DeviceNodes), []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"}; !reflect.DeepEqual(got, want) {
				t.Errorf("shared nodes = %q, want %q (no /dev/nvidia-caps)", got, want)
			}
			for _, d := range spec.Devices {
				want, ok := tt.wantNodes[d.Name]
				if !ok {
					continue
				}
				if got := nodePaths(d.ContainerEdits.DeviceNodes); !reflect.DeepEqual(got, []string{want}) {
					t.Errorf("device %s nodes = %q, want [%s]", d.Name, got, want)
				}
				if n := d.ContainerEdits.DeviceNodes[0]; strings.HasPrefix(want, "/dev/nvidia-caps/") && (n.Major != 241 || n.Type != "c") {
					t.Errorf("device %s node %+v, want c 241,<minor> (the H200's nvidia-caps major)", d.Name, *n)
				}
			}
			if got, want := found.MIGConfig, tt.wantNodes[DeviceMIGConfig]; got != want {
				t.Errorf("found.MIGConfig = %q, want %q", got, want)
			}
			b, err := Marshal(spec, false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Validate(b, false); err != nil {
				t.Errorf("%v\n%s", err, b)
			}
		})
	}
}
