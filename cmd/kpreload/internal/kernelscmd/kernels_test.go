package kernelscmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKernelsFetch(t *testing.T) {
	cache := t.TempDir()
	// A kernel already unpacked (its .complete marker) is kept without apt.
	kept := "6.1.0-56-cloud-amd64"
	if err := os.MkdirAll(filepath.Join(cache, "kernels", kept), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "kernels", kept, ".complete"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string // substring of stdout
		wantErr  string // substring of stderr
	}{
		{"no kernel named", []string{"kernels", "fetch", "--cache", cache}, 1, "", "name at least one kernel release"},
		{"unknown suite", []string{"kernels", "fetch", "--cache", cache, "--suite", "nosuch", kept}, 1, "", "nosuch"},
		{"kept kernel, JSON", []string{"kernels", "fetch", "--cache", cache, "--json", kept}, 0, `"fetched": false`, "already unpacked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := cli.Execute(tt.args, &out, &errOut)
			if code != tt.wantCode || !strings.Contains(out.String(), tt.wantOut) || !strings.Contains(errOut.String(), tt.wantErr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, out.String(), errOut.String(), tt.wantCode, tt.wantOut, tt.wantErr)
			}
			if tt.wantCode == 0 {
				var got []kernelJSON
				if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got) != 1 || got[0].Kernel != kept || got[0].Dir != filepath.Join(cache, "kernels", kept) {
					t.Errorf("--json = %s (%v), want the kept kernel in %s", out.String(), err, cache)
				}
			}
		})
	}
}
