package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWrite checks that Write makes the report's directory, stores the
// report as indented JSON with a newline, and leaves no temporary file.
func TestWrite(t *testing.T) {
	root := t.TempDir()
	name := "/run/kpreload/report.json"
	if err := Write(root, name, &Report{Format: 1, Kernel: "6.1.0-56-cloud-amd64"}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(b, &got); err != nil || got.Kernel != "6.1.0-56-cloud-amd64" || !strings.HasSuffix(string(b), "}\n") {
		t.Errorf("report = %q (%v), want the report as JSON ending in a newline", b, err)
	}
	ents, _ := os.ReadDir(filepath.Join(root, "run/kpreload"))
	if len(ents) != 1 {
		t.Errorf("run/kpreload holds %v, want the report alone", ents)
	}
}

// TestSetSection runs section updates on reports of every kind: the update
// keeps the other fields, a nil value drops the section, a missing report
// is left missing, and a report that is not a JSON object is an error naming
// the file and is left as it was.
func TestSetSection(t *testing.T) {
	tests := []struct {
		name, report string // report "" is no report at all
		value        any
		want         string // the report afterwards; "" none
		wantErr      string
	}{
		{"adds", `{"format":1,"kernel":"k"}`, &CDI{Path: "/etc/cdi/nvidia.yaml"}, `{"cdi":{"path":"/etc/cdi/nvidia.yaml","sha256":"","written":""},"format":1,"kernel":"k"}`, ""},
		{"replaces", `{"cdi":{"path":"/old"},"format":1}`, &CDI{Path: "/new"}, `{"cdi":{"path":"/new","sha256":"","written":""},"format":1}`, ""},
		{"drops", `{"cdi":{"path":"/old"},"format":1}`, nil, `{"format":1}`, ""},
		{"no report", "", &CDI{Path: "/x"}, "", ""},
		{"not JSON", `{"format":`, &CDI{Path: "/x"}, `{"format":`, "report.json"},
		{"null", `null`, &CDI{Path: "/x"}, `null`, "report.json: it holds null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "run", "kpreload")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "report.json")
			if tt.report != "" {
				if err := os.WriteFile(p, []byte(tt.report), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := SetSection(root, Path, "cdi", tt.value)
			if (err != nil) != (tt.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("SetSection = %v, want an error containing %q", err, tt.wantErr)
			}
			b, rerr := os.ReadFile(p)
			got := ""
			if rerr == nil {
				got = string(b)
				if tt.wantErr == "" {
					var doc any
					json.Unmarshal(b, &doc)
					c, _ := json.Marshal(doc)
					got = string(c)
				}
			}
			if got != tt.want {
				t.Errorf("report after SetSection = %s, want %s", got, tt.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) > 1 {
				t.Errorf("%s holds %v: a temporary file was left", dir, ents)
			}
		})
	}
}

// TestSetSectionConfined checks that a report that is a link out of the
// root is neither read nor written through: the file outside stays as it was.
func TestSetSectionConfined(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim.json")
	if err := os.WriteFile(victim, []byte(`{"format":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "run", "kpreload")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("victim.json", filepath.Join(outside, "report.json")); err != nil {
		t.Fatal(err)
	}
	_ = SetSection(root, Path, "cdi", &CDI{Path: "/x"})
	if b, _ := os.ReadFile(victim); string(b) != `{"format":1}` {
		t.Errorf("the file outside the root became %s", b)
	}
}
