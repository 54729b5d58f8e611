package image

import (
	"os"
	"path/filepath"
	"testing"
)

// TestBootloaderPhase runs the bootloader phase of a GRUB image: the ESP's
// files and core.img are laid out in the work directory, and its cleanup
// removes them.
func TestBootloaderPhase(t *testing.T) {
	f := &fakeRunner{}
	j, _ := fakeJob(t, f, nil)
	if err := runThrough(t, j, PhaseBootloader); err != nil {
		t.Fatal(err)
	}
	if len(j.esp) == 0 {
		t.Errorf("no files for the ESP")
	}
	for _, e := range j.esp {
		if _, err := os.Stat(e.Src); err != nil {
			t.Errorf("ESP file %s: %v", e.Dst, err)
		}
	}
	if _, err := os.Stat(j.coreImg); err != nil {
		t.Fatalf("core.img: %v", err)
	}
	j.cleanupBootloader(false)
	for _, p := range []string{filepath.Join(j.work, "esp"), filepath.Join(j.work, "core.img")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there after the cleanup (%v)", p, err)
		}
	}
}
