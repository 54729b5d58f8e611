package cdicmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/report"
)

// TestRecordCDI checks that the report's cdi section is set and dropped
// while everything /init wrote stays, and that a refresh on a system with no
// active driver leaves no spec and no cdi section.
func TestRecordCDI(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, report.Path)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	orig := `{"format": 1, "kernel": "6.1.0-56-cloud-amd64", "switch_root": 2.5, "future_field": {"x": 1}}`
	if err := os.WriteFile(path, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &report.CDI{Path: cdispec.DefaultSpecFile, SHA256: "ab", Written: "2026-11-25T08:00:00Z"}
	if err := recordCDI(root, report.Path, rec); err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var r report.Report
	json.Unmarshal(b, &r)
	if r.CDI == nil || *r.CDI != *rec || r.Kernel != "6.1.0-56-cloud-amd64" || string(got["future_field"]) == "" {
		t.Errorf("report after recordCDI:\n%s", b)
	}
	// No active driver: no spec, and the section goes.
	if err := os.MkdirAll(filepath.Join(root, "var/run/cdi"), 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(root, cdispec.DefaultSpecFile)
	if err := os.WriteFile(stale, cdispec.Mark([]byte("stale")), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Refresh(root, cdispec.DefaultSpecFile, cdispec.Options{})
	if err != nil || res.Written != "" || len(res.Removed) != 1 {
		t.Fatalf("Refresh without a driver = %+v, %v; want %s removed", res, err, cdispec.DefaultSpecFile)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale spec left: %v", err)
	}
	b, _ = os.ReadFile(path)
	r = report.Report{}
	json.Unmarshal(b, &r)
	if r.CDI != nil || r.Kernel == "" {
		t.Errorf("report after a refresh with no driver:\n%s", b)
	}
	// A system without a report is not an error.
	if err := recordCDI(t.TempDir(), "none.json", rec); err != nil {
		t.Errorf("recordCDI without a report: %v", err)
	}
}
