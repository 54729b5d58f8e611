package image

import (
	"os"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/image/disk"
)

// TestDiskPhase runs the disk phase: the raw disk, of the size asked for,
// is in the temporary output directory (not yet in OutDir), partitioned for
// the build's disk GUID; its cleanup removes it.
func TestDiskPhase(t *testing.T) {
	f := &fakeRunner{}
	j, o := fakeJob(t, f, nil)
	if err := runThrough(t, j, PhaseDisk); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(j.raw)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Size(), int64(o.Disk.SizeMB)*disk.MiB; got != want {
		t.Errorf("raw disk is %d bytes, want %d", got, want)
	}
	if !strings.Contains(f.stdin["sfdisk"], "label-id: "+j.m.DiskGUID) {
		t.Errorf("sfdisk's script %q lacks the disk GUID %s", f.stdin["sfdisk"], j.m.DiskGUID)
	}
	if ents := dirEntries(t, o.OutDir); len(ents) != 1 || !strings.HasPrefix(ents[0], ".tmp-") {
		t.Errorf("OutDir holds %q, want only the temporary output directory", ents)
	}
	j.cleanupDisk(false)
	if _, err := os.Lstat(j.raw); !os.IsNotExist(err) {
		t.Errorf("the raw disk is still there after the cleanup (%v)", err)
	}
}
