package cdispec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/gpu/activate"
)

// toolkitSpec is a real `nvidia-ctk cdi generate` output (NVIDIA Container
// Toolkit 1.20.1 on an H100 VM): what nvidia-cdi-refresh keeps at
// /var/run/cdi/nvidia.yaml.
func toolkitSpec(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/h100-capture/ctk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheck: only a regular file starting with the marker is kpreload's; a
// link (even to a marked file), a FIFO (never opened), a directory and an
// unmarked spec are not.
func TestCheck(t *testing.T) {
	marked := Mark([]byte("cdiVersion: 0.5.0\n"))
	tests := []struct {
		name  string
		setup func(t *testing.T, root, p string)
		want  Ownership
	}{
		{"missing", func(t *testing.T, root, p string) {}, Ownership{}},
		{"marked", func(t *testing.T, root, p string) { write(t, p, string(marked)) }, Ownership{Exists: true, Own: true}},
		{"toolkit's spec", func(t *testing.T, root, p string) { write(t, p, string(toolkitSpec(t))) },
			Ownership{Exists: true, Why: "no kpreload marker on its first line"}},
		{"marker not on the first line", func(t *testing.T, root, p string) { write(t, p, "# other\n"+string(marked)) },
			Ownership{Exists: true, Why: "no kpreload marker on its first line"}},
		{"link to a marked file", func(t *testing.T, root, p string) {
			write(t, filepath.Join(root, "elsewhere.yaml"), string(marked))
			if err := os.Symlink("/elsewhere.yaml", p); err != nil {
				t.Fatal(err)
			}
		}, Ownership{Exists: true, Why: "a symbolic link"}},
		{"FIFO", func(t *testing.T, root, p string) {
			if err := unix.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, Ownership{Exists: true, Why: "a named pipe"}},
		{"directory", func(t *testing.T, root, p string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, Ownership{Exists: true, Why: "a directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			p := filepath.Join(root, DefaultSpecFile)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, root, p)
			got, err := Check(root, DefaultSpecFile)
			if err != nil || got != tt.want {
				t.Errorf("Check = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// nvidiaRoot is a kpreload image with the H200's NVIDIA driver active.
func nvidiaRoot(t *testing.T) string {
	t.Helper()
	drv := "opt/kpreload/drivers/" + h200Version + "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so." + h200Version
	root := h200Tree(t, map[string]string{drv: "elf"})
	run := filepath.Join(root, activate.RunDir)
	if err := activate.Point(run, root, activate.DriversDir, h200Version); err != nil {
		t.Fatal(err)
	}
	if err := activate.MarkReady(run, activate.Ready{Driver: "nvidia", Version: h200Version, By: "init"}); err != nil {
		t.Fatal(err)
	}
	return root
}

// noneRoot is a host kpreload drives no driver on.
func noneRoot(t *testing.T) string { return t.TempDir() }

// TestRefreshActiveLeavesOthers runs RefreshActive beside specs other tools
// wrote and hostile files at kpreload's own name: nothing kpreload did not
// write is ever changed or removed, and what is left is named.
func TestRefreshActiveLeavesOthers(t *testing.T) {
	ctk := toolkitSpec(t)
	sum := sha256.Sum256(ctk)
	type file struct{ path, content string }
	tests := []struct {
		name    string
		root    func(t *testing.T) string
		files   []file // written before the refresh, checked unchanged after
		special func(t *testing.T, root string)
		opts    Options
		// want: the result's written file, removed files, left files;
		// wantErr in the error; wantWarn in a warning.
		written           string
		removed, left     []string
		wantErr, wantWarn string
		// gone: a file that must not exist afterwards.
		gone string
	}{
		{name: "no driver, toolkit's runtime spec", root: noneRoot,
			files: []file{{LegacySpecFile, string(ctk)}},
			left:  []string{LegacySpecFile}},
		{name: "no driver, toolkit's specs in both directories", root: noneRoot,
			files: []file{{LegacySpecFile, string(ctk)}, {"/etc/cdi/nvidia.yaml", string(ctk)}},
			left:  []string{"/etc/cdi/nvidia.yaml", LegacySpecFile}},
		{name: "no driver, kpreload's own spec goes", root: noneRoot,
			files:   []file{{LegacySpecFile, string(ctk)}},
			special: func(t *testing.T, root string) { write(t, filepath.Join(root, DefaultSpecFile), string(Mark(ctk))) },
			removed: []string{DefaultSpecFile}, left: []string{LegacySpecFile}, gone: DefaultSpecFile},
		{name: "NVIDIA active beside toolkit's runtime spec: conflict warned", root: nvidiaRoot,
			files:   []file{{LegacySpecFile, string(ctk)}},
			written: DefaultSpecFile, left: []string{LegacySpecFile},
			wantWarn: "/var/run/cdi/nvidia.yaml (not written by kpreload) also defines nvidia.com/gpu=0, nvidia.com/gpu=all in /var/run/cdi"},
		{name: "NVIDIA active beside toolkit's static spec", root: nvidiaRoot,
			files:   []file{{"/etc/cdi/nvidia.yaml", string(ctk)}},
			written: DefaultSpecFile, left: []string{"/etc/cdi/nvidia.yaml"}},
		{name: "foreign spec at kpreload's name, NVIDIA active", root: nvidiaRoot,
			files:   []file{{DefaultSpecFile, string(ctk)}},
			left:    []string{DefaultSpecFile},
			wantErr: "/var/run/cdi/kpreload-nvidia.yaml is not a spec kpreload wrote (no kpreload marker on its first line): left as it is"},
		{name: "foreign spec at kpreload's name, no driver", root: noneRoot,
			files: []file{{DefaultSpecFile, string(ctk)}},
			left:  []string{DefaultSpecFile}},
		{name: "link at kpreload's name", root: nvidiaRoot,
			files: []file{{"/etc/cdi/mine.yaml", string(Mark(ctk))}},
			special: func(t *testing.T, root string) {
				p := filepath.Join(root, DefaultSpecFile)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.Symlink("/etc/cdi/mine.yaml", p); err != nil {
					t.Fatal(err)
				}
			},
			left:    []string{DefaultSpecFile},
			wantErr: "kpreload-nvidia.yaml is not a spec kpreload wrote (a symbolic link)"},
		{name: "FIFO at kpreload's name", root: nvidiaRoot,
			special: func(t *testing.T, root string) {
				p := filepath.Join(root, DefaultSpecFile)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := unix.Mkfifo(p, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			left:    []string{DefaultSpecFile},
			wantErr: "kpreload-nvidia.yaml is not a spec kpreload wrote (a named pipe)"},
		{name: "an older kpreload's spec, as recorded, goes", root: noneRoot,
			files: []file{{"/etc/cdi/nvidia.yaml", string(ctk)}},
			special: func(t *testing.T, root string) {
				write(t, filepath.Join(root, LegacySpecFile), string(ctk)) // its bytes, as recorded
			},
			opts:    Options{Recorded: &Record{Path: LegacySpecFile, SHA256: hex.EncodeToString(sum[:])}},
			removed: []string{LegacySpecFile}, left: []string{"/etc/cdi/nvidia.yaml"}, gone: LegacySpecFile},
		{name: "a recorded path holding other bytes stays", root: noneRoot,
			files: []file{{LegacySpecFile, string(ctk)}},
			opts:  Options{Recorded: &Record{Path: LegacySpecFile, SHA256: strings.Repeat("0", 64)}},
			left:  []string{LegacySpecFile}},
		{name: "nvidia: false turns kpreload's spec off", root: nvidiaRoot,
			files: []file{{LegacySpecFile, string(ctk)}, {ConfigFile, "nvidia: false\n"}},
			special: func(t *testing.T, root string) {
				write(t, filepath.Join(root, DefaultSpecFile), string(Mark(ctk)))
			},
			removed: []string{DefaultSpecFile}, left: []string{LegacySpecFile}, gone: DefaultSpecFile},
		{name: "a bad configuration is an error naming it", root: nvidiaRoot,
			files:   []file{{ConfigFile, "nvidia: off-ish\n"}},
			wantErr: "/etc/kpreload/cdi.yaml: yaml: unmarshal errors"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tt.root(t)
			for _, f := range tt.files {
				write(t, filepath.Join(root, f.path), f.content)
			}
			if tt.special != nil {
				tt.special(t, root)
			}
			type out struct {
				res *Result
				err error
			}
			done := make(chan out, 1)
			go func() { r, err := RefreshActive(root, tt.opts); done <- out{r, err} }()
			var o out
			select {
			case o = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("RefreshActive hung")
			}
			res, err := o.res, o.err
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("RefreshActive error %v; want %q", err, tt.wantErr)
			}
			var left []string
			for _, l := range res.Left {
				left = append(left, l.Path)
			}
			if res.Written != tt.written || !reflect.DeepEqual(res.Removed, tt.removed) || !reflect.DeepEqual(left, tt.left) {
				t.Errorf("result written %q removed %q left %q; want %q, %q, %q", res.Written, res.Removed, left, tt.written, tt.removed, tt.left)
			}
			for _, f := range tt.files {
				if b, err := os.ReadFile(filepath.Join(root, f.path)); err != nil || string(b) != f.content {
					t.Errorf("%s changed: %v", f.path, err)
				}
			}
			if tt.written != "" {
				b, err := os.ReadFile(filepath.Join(root, tt.written))
				if err != nil || !IsMarked(b) {
					t.Errorf("written spec %s unmarked: %v", tt.written, err)
				}
				if _, err := ValidateFile(filepath.Join(root, tt.written)); err != nil {
					t.Error(err)
				}
			}
			if tt.gone != "" {
				if _, err := os.Lstat(filepath.Join(root, tt.gone)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s still there: %v", tt.gone, err)
				}
			}
			warns := strings.Join(res.Warnings, "\n")
			if tt.wantWarn == "" && warns != "" || !strings.Contains(warns, tt.wantWarn) {
				t.Errorf("warnings %q; want %q", warns, tt.wantWarn)
			}
		})
	}
}

// TestRefreshFile: refresh -o FILE keeps the same rules, and refuses JSON.
func TestRefreshFile(t *testing.T) {
	root := nvidiaRoot(t)
	ctk := string(toolkitSpec(t))
	write(t, filepath.Join(root, "/etc/cdi/nvidia.yaml"), ctk)
	if _, err := Refresh(root, "/etc/cdi/nvidia.yaml", Options{}); err == nil || !strings.Contains(err.Error(), "is not a spec kpreload wrote") {
		t.Errorf("Refresh over toolkit's spec: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "/etc/cdi/nvidia.yaml")); string(b) != ctk {
		t.Error("toolkit's spec changed")
	}
	if _, err := Refresh(root, "/etc/cdi/kp.json", Options{}); err == nil || !strings.Contains(err.Error(), "YAML spec files only") {
		t.Errorf("Refresh to JSON: %v", err)
	}
	res, err := Refresh(root, "/etc/cdi/kp.yaml", Options{})
	if err != nil || res.Written != "/etc/cdi/kp.yaml" || len(res.Left) != 1 {
		t.Errorf("Refresh = %+v, %v", res, err)
	}
}

// TestWriteNew: a JSON spec is only created, never written over.
func TestWriteNew(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "kp.json")
	data := []byte(`{"cdiVersion":"0.5.0","kind":"a.b/c","devices":[{"name":"x","containerEdits":{"env":["A=1"]}}]}`)
	if err := WriteNew(p, data, true); err != nil {
		t.Fatal(err)
	}
	if err := WriteNew(p, data, true); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second WriteNew: %v", err)
	}
}
