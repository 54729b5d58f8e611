package userdata

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/switcher"
	"github.com/kpreload/kpreload/kmodcache/bootindex"
	"github.com/kpreload/kpreload/report"
)

const kernel = "6.1.0-test"

// fakeSystem records the switch asked for instead of making it.
type fakeSystem struct {
	switched  []string
	switchErr error
	cdi       int
}

func (s *fakeSystem) Release() (string, error) { return kernel, nil }

func (s *fakeSystem) Switch(o switcher.Options) (*switcher.Result, error) {
	to := o.Choice.Set.Set
	s.switched = append(s.switched, to.Driver+" "+to.Version)
	if s.switchErr != nil {
		return &switcher.Result{}, s.switchErr
	}
	return &switcher.Result{From: &switcher.SetRef{Version: "1.0"}, To: &switcher.SetRef{Driver: to.Driver, Version: to.Version}}, nil
}

func (s *fakeSystem) RefreshCDI() error { s.cdi++; return nil }

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestApply runs apply over a fixture machine (a cache with nvidia 1.0 and
// 2.0, one GPU, 1.0 active) with a fake System: it decides once, and
// switches only to the set that decision chose.
func TestApply(t *testing.T) {
	vm := kernel + " SMP mod_unload "
	set := func(id, v string) bootindex.Set {
		return bootindex.Set{ID: id, Driver: "nvidia", Version: v, Flavor: "open", Dir: "x", Modules: []bootindex.Module{{Name: "nvidia", Path: "nvidia.ko", Vermagic: vm}}}
	}
	tests := []struct {
		name      string
		cloud     string // "" leaves the cloud-config out
		report    string // the boot report, "" for none
		switchErr error
		dryRun    bool
		action    string
		reason    string
		switched  string
		wantErr   bool
	}{
		{name: "no cloud-config", action: "none", reason: "cloud-init left no cloud-config"},
		{name: "no request", cloud: "#cloud-config\npackages: [htop]\n", action: "none", reason: "has neither a write_files entry for /etc/kpreload/instance.yaml nor a kpreload: key"},
		{name: "branch 2", cloud: "#cloud-config\nwrite_files:\n- path: /etc/kpreload/instance.yaml\n  content: |\n    resources:\n      driver:\n        version: \"2\"\n", action: "switched", reason: "the user-data asks for 2.0 (branch 2); /init had taken the request from nowhere", switched: "nvidia 2.0"},
		{name: "branch 2, deprecated key", cloud: "#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: \"2\"\n", action: "switched", reason: "/init had taken the request from nowhere (no driver decision at boot); user-data: the top-level kpreload: key of #cloud-config is deprecated", switched: "nvidia 2.0"},
		{name: "wrong field, deprecated key", cloud: "#cloud-config\nkpreload:\n  resources:\n    driver:\n      vresion: \"2\"\n", action: "failed", reason: "unknown field (known here: version, cuda, cuda_compat, flavor); user-data: the top-level kpreload: key of #cloud-config is deprecated", wantErr: true},
		{name: "the active version", cloud: "#cloud-config\nwrite_files:\n- path: /etc/kpreload/instance.yaml\n  encoding: b64\n  content: cmVzb3VyY2VzOiB7ZHJpdmVyOiB7dmVyc2lvbjogIjEuMCJ9fQo=\n", action: "unchanged", reason: "nvidia 1.0, which the user-data asks for, is active"},
		{name: "the kernel command line wins", cloud: "#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: \"2\"\n", report: `{"selection":{"source":"cmdline","origin":"kpreload.driver=1.0"}}`, action: "none", reason: "/init took the request from cmdline"},
		{name: "refused", cloud: "#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: \"2\"\n      flavor: proprietary\n", action: "failed", reason: "no nvidia driver will be loaded", wantErr: true},
		{name: "wrong field", cloud: "#cloud-config\nkpreload:\n  resources:\n    driver:\n      vresion: \"2\"\n", action: "failed", reason: "the request is not honoured", wantErr: true},
		{name: "branch 2, dry run", cloud: "#cloud-config\nwrite_files:\n- path: /etc/kpreload/instance.yaml\n  content: |\n    resources:\n      driver:\n        version: \"2\"\n", dryRun: true, action: "would-switch", reason: "the user-data asks for 2.0 (branch 2): apply would switch to nvidia 2.0 open (dry run: nothing changed)"},
		{name: "the active version, dry run", cloud: "#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: \"1.0\"\n", dryRun: true, action: "unchanged", reason: "nvidia 1.0, which the user-data asks for, is active"},
		{name: "the switch fails", cloud: "#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: \"2\"\n", switchErr: errors.New("nvidia failed"), action: "failed", reason: "nvidia failed", switched: "nvidia 2.0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			root, cache, sys, run := filepath.Join(dir, "root"), filepath.Join(dir, "cache"), filepath.Join(dir, "sys"), filepath.Join(dir, "run")
			write(t, filepath.Join(sys, "bus/pci/devices/0000:00:06.0/modalias"), "pci:v000010DEd00002335sv000010DEsd000018BFbc03sc02i00\n")
			if err := os.MkdirAll(filepath.Join(dir, "proc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(cache, bootindex.IndexDir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := bootindex.Write(bootindex.Path(cache, kernel), &bootindex.Index{Format: bootindex.FormatVersion, Kernel: kernel, Sets: []bootindex.Set{set("a", "1.0"), set("b", "2.0")}}); err != nil {
				t.Fatal(err)
			}
			if err := activate.MarkReady(run, activate.Ready{Driver: "nvidia", Version: "1.0", Set: "a", By: "init"}); err != nil {
				t.Fatal(err)
			}
			cloud := filepath.Join(dir, "cloud-config.txt")
			if tt.cloud != "" {
				write(t, cloud, tt.cloud)
			}
			if tt.report != "" {
				write(t, filepath.Join(root, report.Path), tt.report)
			}
			sys0 := &fakeSystem{switchErr: tt.switchErr}
			rec, err := Apply(Options{CloudConfig: cloud, CacheDir: cache, Root: root, ReportPath: report.Path,
				SysDir: sys, ProcDir: filepath.Join(dir, "proc"), DevDir: filepath.Join(dir, "dev"), RunDir: run,
				DriversDir: activate.DriversDir, System: sys0, Log: io.Discard, Now: time.Now, DryRun: tt.dryRun})
			if got, want := rec.Action, tt.action; got != want || !strings.Contains(rec.Reason, tt.reason) || (err != nil) != tt.wantErr {
				t.Errorf("Apply = %s: %q, %v; want %s: %q, error %v", got, rec.Reason, err, want, tt.reason, tt.wantErr)
			}
			if got, want := strings.Join(sys0.switched, ", "), tt.switched; got != want {
				t.Errorf("switched to %q, want %q", got, want)
			}
			if got, want := sys0.cdi, len(sys0.switched); got != want {
				t.Errorf("CDI refreshed %d times, want %d (once per switch)", got, want)
			}
		})
	}
}
