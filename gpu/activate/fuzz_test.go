package activate

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzReadReady feeds any bytes as <runDir>/kpreload/ready to ReadReady: it
// never panics, an error names the file, and a record it accepts has the
// current format and reads back the same once MarkReady has written it.
func FuzzReadReady(f *testing.F) {
	f.Add([]byte(`{"format":1,"driver":"nvidia","version":"580.159.04","flavor":"open","set":"abc","kernel":"6.1.0-56-cloud-amd64","time":2.5,"modules":["nvidia","nvidia_uvm"],"userspace":"/opt/kpreload/drivers/580.159.04","device_nodes":["/dev/nvidia0"],"by":"init"}`))
	f.Add([]byte(`{"format":1,"driver":"kpreload-edu","version":"2.0.0","modules":null,"by":"switch","previous":"1.0.0"}`))
	f.Add([]byte(`{"format":9}`))
	f.Add([]byte(`{"format":1,"time":1e400}`))
	f.Add([]byte(`{"format":1,"modules":[1]}`))
	f.Add([]byte("\xff\xfe"))
	f.Add([]byte{})
	run := f.TempDir()
	if err := os.MkdirAll(filepath.Dir(ReadyPath(run)), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(ReadyPath(run), b, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := ReadReady(run)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), ReadyPath(run)) {
				t.Fatalf("error %q: want one naming %s, not a missing file", err, ReadyPath(run))
			}
			return
		}
		if r.Format != ReadyFormat {
			t.Fatalf("accepted format %d", r.Format)
		}
		if err := MarkReady(run, *r); err != nil {
			t.Fatal(err)
		}
		back, err := ReadReady(run)
		if err != nil || !reflect.DeepEqual(normal(back), normal(r)) {
			t.Fatalf("record %+v written back reads %+v, %v", r, back, err)
		}
	})
}

// normal makes records compare equal across a write: MarkReady writes [] for
// no modules, and omits empty device nodes.
func normal(r *Ready) *Ready {
	if r == nil {
		return nil
	}
	c := *r
	if len(c.Modules) == 0 {
		c.Modules = []string{}
	}
	if len(c.DeviceNodes) == 0 {
		c.DeviceNodes = nil
	}
	return &c
}
