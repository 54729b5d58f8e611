package cdicmd

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/report"
)

// toolkitSpec is a real `nvidia-ctk cdi generate` output (NVIDIA Container
// Toolkit 1.20.1): what nvidia-cdi-refresh keeps at /var/run/cdi/nvidia.yaml.
func toolkitSpec(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../../gpu/cdispec/testdata/h100-capture/ctk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCDIRefreshLeavesToolkitSpec: on a host where kpreload drives no
// driver, refresh leaves NVIDIA's toolkit spec and says so, in text and JSON.
func TestCDIRefreshLeavesToolkitSpec(t *testing.T) {
	root := t.TempDir()
	ctk := toolkitSpec(t)
	spec := filepath.Join(root, "var/run/cdi/nvidia.yaml")
	if err := os.MkdirAll(filepath.Dir(spec), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte(ctk), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("cdi", "refresh", "--root", root)
	want := "cdi: no active driver kpreload describes; no kpreload spec to remove; left /var/run/cdi/nvidia.yaml (not written by kpreload)\n"
	if code != 0 || out != want {
		t.Errorf("cdi refresh: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errOut, want)
	}
	code, out, errOut = runCLI("cdi", "refresh", "--root", root, "--json")
	var got struct {
		Removed []string `json:"removed"`
		Left    []struct {
			Path, Why, Kind string
		} `json:"left"`
		Summary string `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("cdi refresh --json: exit %d, %v: %s%s", code, err, out, errOut)
	}
	if len(got.Removed) != 0 || len(got.Left) != 1 || got.Left[0].Path != "/var/run/cdi/nvidia.yaml" || got.Left[0].Kind != "nvidia.com/gpu" ||
		got.Summary != strings.TrimSuffix(strings.TrimPrefix(want, "cdi: "), "\n") {
		t.Errorf("cdi refresh --json:\n%s", out)
	}
	if b, err := os.ReadFile(spec); err != nil || string(b) != ctk {
		t.Errorf("toolkit's spec changed or gone: %v", err)
	}
}

// TestCDIGenerateOwn: generate -o writes over only a spec kpreload wrote.
func TestCDIGenerateOwn(t *testing.T) {
	root := cdiTree(t)
	dir := t.TempDir()
	foreign := filepath.Join(dir, "nvidia.yaml")
	ctk := toolkitSpec(t)
	if err := os.WriteFile(foreign, []byte(ctk), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI("cdi", "generate", "--root", root, "-o", foreign)
	if code != 1 || !strings.Contains(errOut, foreign+" is not a spec kpreload wrote (no kpreload marker on its first line): left as it is") ||
		!strings.Contains(errOut, "move that file away") {
		t.Errorf("generate over toolkit's spec: exit %d, stderr %q", code, errOut)
	}
	if b, _ := os.ReadFile(foreign); string(b) != ctk {
		t.Error("toolkit's spec changed")
	}
	own := filepath.Join(dir, "kpreload-nvidia.yaml")
	for i := 0; i < 2; i++ { // created, then rewritten: it is kpreload's
		if code, _, errOut := runCLI("cdi", "generate", "--root", root, "-o", own); code != 0 {
			t.Fatalf("generate -o %s (run %d): exit %d: %s", own, i+1, code, errOut)
		}
	}
	if b, err := os.ReadFile(own); err != nil || !cdispec.IsMarked(b) {
		t.Errorf("%s not marked: %v", own, err)
	}
	js := filepath.Join(dir, "kp.json")
	if code, _, errOut := runCLI("cdi", "generate", "--root", root, "--json", "-o", js); code != 0 {
		t.Fatalf("generate --json -o: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI("cdi", "generate", "--root", root, "--json", "-o", js); code != 1 || !strings.Contains(errOut, js+" exists") {
		t.Errorf("generate --json over a JSON spec: exit %d, stderr %q", code, errOut)
	}
}

// TestCDIRefreshOlderKpreloadSpec: a spec an older kpreload wrote at
// /var/run/cdi/nvidia.yaml (no marker) goes only while it is the one the boot
// report records; once the toolkit has written over it, it stays.
func TestCDIRefreshOlderKpreloadSpec(t *testing.T) {
	old := "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n    env: [A=1]\n"
	sum := sha256.Sum256([]byte(old))
	tests := []struct {
		name, content, want string
	}{
		{"as recorded", old, "cdi: no active driver kpreload describes; removed /var/run/cdi/nvidia.yaml (written by kpreload)\n"},
		{"rewritten by the toolkit", toolkitSpec(t), "cdi: no active driver kpreload describes; no kpreload spec to remove; left /var/run/cdi/nvidia.yaml (not written by kpreload)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			spec := filepath.Join(root, "var/run/cdi/nvidia.yaml")
			clitest.MustWrite(t, spec, tt.content)
			clitest.MustWrite(t, filepath.Join(root, report.Path), `{"format":1,"kernel":"k","cdi":{"path":"/var/run/cdi/nvidia.yaml","sha256":"`+hex.EncodeToString(sum[:])+`","written":"2026-11-25T08:00:00Z"}}`)
			code, out, errOut := runCLI("cdi", "refresh", "--root", root)
			if code != 0 || out != tt.want {
				t.Errorf("cdi refresh: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, tt.want)
			}
			_, err := os.Stat(spec)
			if gone := os.IsNotExist(err); gone != (tt.content == old) {
				t.Errorf("spec gone %v (%v)", gone, err)
			}
		})
	}
}
