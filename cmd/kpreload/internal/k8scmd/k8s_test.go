package k8scmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestK8sRefreshReport: the boot report is read as a regular file of
// bounded size: a FIFO or a huge file there is an error naming it, not a hang
// or an unbounded read; a missing one means nothing was asked.
func TestK8sRefreshReport(t *testing.T) {
	tests := []struct {
		name     string
		make     func(t *testing.T, p string)
		wantCode int
		want     string // in stderr after the report's path; "" for none
	}{
		{"no report", func(t *testing.T, p string) {}, 0, ""},
		{"report is a FIFO", func(t *testing.T, p string) {
			if err := unix.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, 1, ": not a regular file"},
		{"report of 1.5 GB", func(t *testing.T, p string) {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, 1500<<20); err != nil {
				t.Fatal(err)
			}
		}, 1, ": file too large"},
		{"report without a selection", func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte(`{"format":1}`), 0o644); err != nil {
				t.Fatal(err)
			}
		}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			report := filepath.Join(t.TempDir(), "report.json")
			tt.make(t, report)
			var out, errOut bytes.Buffer
			done := make(chan int)
			go func() {
				done <- cli.Execute([]string{"k8s", "refresh", "--root", t.TempDir(), "--report", report}, &out, &errOut)
			}()
			select {
			case code := <-done:
				if code != tt.wantCode || (tt.want != "" && !strings.Contains(errOut.String(), report+tt.want)) {
					t.Errorf("k8s refresh: exit %d, stderr %q; want %d and %q", code, errOut.String(), tt.wantCode, tt.want)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("k8s refresh hung")
			}
		})
	}
}
