package xorgcmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/gpu/pci/pcitest"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestXorgH200 runs the command on a sysfs tree built from the real H200 VM.
func TestXorgH200(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(pcitest.H200(t), "pci-sysfs.txt"))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	root := t.TempDir()
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) != 3 || f[1] == "driver" {
			continue
		}
		p := filepath.Join(root, "sys/bus/pci/devices", f[0], f[1])
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f[2]+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(t.TempDir(), "xorg.conf")
	var out, errOut bytes.Buffer
	if code := cli.Execute([]string{"xorg", "--sysfs", root, "-o", conf, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("xorg: exit %d: %s", code, errOut.String())
	}
	var res xorgResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.GPUs) != 1 || res.GPUs[0].BusID != "PCI:0:6:0" {
		t.Errorf("xorg --json GPUs = %+v, want the H200 at PCI:0:6:0", res.GPUs)
	}
	written, err := os.ReadFile(conf)
	if err != nil || !strings.Contains(string(written), `BusID          "PCI:0:6:0"`) || string(written) != res.Config {
		t.Errorf("written %s (%v):\n%s\nwant the JSON's config with BusID PCI:0:6:0", conf, err, written)
	}
	// No NVIDIA GPU: an error, nothing written.
	empty := t.TempDir()
	if err := os.MkdirAll(filepath.Join(empty, "sys/bus/pci/devices"), 0o755); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	if code := cli.Execute([]string{"xorg", "--sysfs", empty}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "no NVIDIA GPU") {
		t.Errorf("xorg on a machine without GPU: exit %d, %q; want 1 and \"no NVIDIA GPU\"", code, errOut.String())
	}
}

// TestXorgHostileSysfs: a FIFO among the attributes is an error naming it,
// not a hang; a devices directory linked out of the tree is not followed.
func TestXorgHostileSysfs(t *testing.T) {
	dev := "sys/bus/pci/devices/0000:41:00.0/"
	tests := []struct {
		name  string
		setup func(t *testing.T, root, outside string)
		want  string // in stderr, after the root
	}{
		{"class is a FIFO", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, "", filepath.Join(root, dev, "class"), func(p string) error { return unix.Mkfifo(p, 0o644) })
		}, "/" + dev + "class: not a regular file"},
		{"devices linked outside", func(t *testing.T, root, outside string) {
			inroottest.Remake(t, "", filepath.Join(root, "sys/bus/pci/devices"), func(p string) error {
				return os.Symlink(filepath.Join(outside, "sys/bus/pci/devices"), p)
			})
		}, "/sys/bus/pci/devices: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			for _, r := range []string{root, outside} {
				for f, v := range map[string]string{"vendor": "0x10de", "device": "0x20b0", "class": "0x030200"} {
					p := filepath.Join(r, dev, f)
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			tt.setup(t, root, outside)
			var out, errOut bytes.Buffer
			done := make(chan int)
			go func() { done <- cli.Execute([]string{"xorg", "--sysfs", root}, &out, &errOut) }()
			select {
			case code := <-done:
				if want := root + tt.want; code != 1 || !strings.Contains(errOut.String(), want) || strings.Contains(out.String(), "BusID") {
					t.Errorf("xorg: exit %d, stdout %q, stderr %q; want 1, no configuration and %q", code, out.String(), errOut.String(), want)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("xorg hung")
			}
		})
	}
}

// TestXorgHelpExamples runs the examples of `kpreload xorg --help` exactly as
// written in a checkout: the H200 capture's directory and the H100 capture
// file, each with one GPU at 0000:00:06.0.
func TestXorgHelpExamples(t *testing.T) {
	clitest.InCheckout(t, testenv.RepoRoot(t))
	lines := cli.ExamplesOf(t, "kpreload xorg")
	if len(lines) != 2 {
		t.Fatalf("xorg examples: %q, want two", lines)
	}
	if out := cli.RunLine(t, lines[0]); out != "0000:00:06.0 -> BusID \"PCI:0:6:0\"\nwrote xorg.conf (1 GPUs)\n" {
		t.Errorf("%s printed %q", lines[0], out)
	}
	if conf, err := os.ReadFile("xorg.conf"); err != nil || !strings.Contains(string(conf), `BusID          "PCI:0:6:0"`) || !strings.Contains(string(conf), "device 0x2335") {
		t.Errorf("%s wrote %v\n%s", lines[0], err, conf)
	}
	var res xorgResult
	if err := json.Unmarshal([]byte(cli.RunLine(t, lines[1])), &res); err != nil || len(res.GPUs) != 1 || res.GPUs[0].DeviceID != 0x2330 || res.GPUs[0].BusID != "PCI:0:6:0" {
		t.Errorf("%s: %+v, %v; want the H100 at PCI:0:6:0", lines[1], res.GPUs, err)
	}
}
