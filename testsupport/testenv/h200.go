package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// H200Capture is the folder of the real H200 VM's captures, relative to
// the repository root (see its README.md): the one copy every test reads.
const H200Capture = "testdata/h200-gpu-vm"

// H200Proc returns the H200 VM's /proc files as a root holds them (paths
// relative to the root, such as "proc/devices", to their contents): its
// /proc/devices, /proc/driver/nvidia/version and each GPU's
// /proc/driver/nvidia/gpus/<bus>/information, from H200Capture.
func H200Proc(t testing.TB) map[string]string {
	t.Helper()
	dir := filepath.Join(RepoRoot(t), H200Capture)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("the H200 capture: %v", err)
		}
		return string(b)
	}
	files := map[string]string{"proc/devices": read("proc-devices.txt")}
	// proc-driver-nvidia-version.txt: /proc/driver/nvidia/version's two
	// lines, then /sys/module/nvidia/version.
	v := strings.SplitAfter(read("proc-driver-nvidia-version.txt"), "\n")
	if len(v) < 3 {
		t.Fatalf("the H200 capture's proc-driver-nvidia-version.txt: %d lines, want 3", len(v))
	}
	files["proc/driver/nvidia/version"] = v[0] + v[1]
	// proc-driver-nvidia-gpus.txt: "== /proc/driver/nvidia/gpus/<bus>"
	// then that GPU's information, up to a blank line.
	for _, block := range strings.Split(read("proc-driver-nvidia-gpus.txt"), "== ")[1:] {
		head, body, _ := strings.Cut(block, "\n")
		if !strings.HasPrefix(head, "/proc/driver/nvidia/gpus/") {
			continue
		}
		body, _, _ = strings.Cut(body, "\n\n")
		files[strings.TrimPrefix(head, "/")+"/information"] = body + "\n"
	}
	if len(files) < 3 {
		t.Fatalf("the H200 capture holds no GPU information block")
	}
	return files
}
