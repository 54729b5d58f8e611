package seed

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fixture makes a sysfs root listing block devices and a /dev holding their
// images: vda ext4 (a root), vdb a NoCloud seed, vdc a vfat disk of another
// label, vdd garbage, sr0 absent from /dev.
func fixture(t *testing.T) (sys, dev string) {
	t.Helper()
	dir := t.TempDir()
	sys, dev = filepath.Join(dir, "sys"), filepath.Join(dir, "dev")
	for _, n := range []string{"vda", "vdb", "vdc", "vdd", "sr0"} {
		if err := os.MkdirAll(filepath.Join(sys, "class/block", n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, size int64, cmd ...string) {
		p := filepath.Join(dev, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		if len(cmd) > 0 {
			if out, err := exec.Command(cmd[0], append(cmd[1:], p)...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", cmd, err, out)
			}
		}
	}
	mk("vda", 8<<20, "mkfs.ext4", "-q", "-F", "-L", "root")
	mk("vdb", 2<<20, "mkfs.vfat", "-n", "CIDATA")
	mk("vdc", 2<<20, "mkfs.vfat", "-n", "DATA")
	if err := os.WriteFile(filepath.Join(dev, "vdd"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	return sys, dev
}

func TestFind(t *testing.T) {
	sys, dev := fixture(t)
	got := Find(sys, dev)
	want := []Seed{{Device: filepath.Join(dev, "vdb"), FSType: "vfat", Label: "CIDATA", Kind: NoCloud}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Find = %+v, want %+v", got, want)
	}
	if got := Find(filepath.Join(sys, "none"), dev); got != nil {
		t.Errorf("Find with no block devices = %+v, want none", got)
	}
}

// dirMounter "mounts" a directory of files: what Read does around the mount.
type dirMounter struct {
	files      map[string]string
	mountErr   error
	unmounted  bool
	mountedDir string
}

func (m *dirMounter) Mount(dev, dir, fstype string) error {
	if m.mountErr != nil {
		return m.mountErr
	}
	m.mountedDir = dir
	for name, text := range m.files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (m *dirMounter) Unmount(dir string) error {
	m.unmounted = true
	return os.RemoveAll(dir)
}

func TestRead(t *testing.T) {
	nocloud := Seed{Device: "/dev/vdb", FSType: "vfat", Label: "CIDATA", Kind: NoCloud}
	cfg2 := Seed{Device: "/dev/sr0", FSType: "iso9660", Label: "config-2", Kind: ConfigDrive}
	tests := []struct {
		name    string
		s       Seed
		m       *dirMounter
		want    string
		wantErr string
	}{
		{"NoCloud", nocloud, &dirMounter{files: map[string]string{"user-data": "#cloud-config\n", "meta-data": "instance-id: x\n"}}, "#cloud-config\n", ""},
		{"ConfigDrive", cfg2, &dirMounter{files: map[string]string{"openstack/latest/user_data": "#cloud-config\n"}}, "#cloud-config\n", ""},
		{"no user-data", nocloud, &dirMounter{files: map[string]string{"meta-data": "x"}}, "", "NoCloud seed /dev/vdb (CIDATA): no user-data (user-data)"},
		{"too large", nocloud, &dirMounter{files: map[string]string{"user-data": strings.Repeat("x", 101)}}, "", "larger than 100 bytes"},
		{"mount fails", nocloud, &dirMounter{mountErr: errors.New("no vfat")}, "", "NoCloud seed /dev/vdb (CIDATA): mount: no vfat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(tt.s, filepath.Join(t.TempDir(), "seed"), tt.m, 100)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Read = %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
			} else if err != nil || string(got) != tt.want {
				t.Fatalf("Read = %q, %v; want %q", got, err, tt.want)
			}
			if tt.m.mountErr == nil && !tt.m.unmounted {
				t.Errorf("the seed was left mounted")
			}
		})
	}
}
