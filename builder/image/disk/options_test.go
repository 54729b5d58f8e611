package disk

import (
	"strings"
	"testing"
)

func TestOptionsProblems(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    Options
		want string // in the one problem; "" for none
	}{
		{"default sizes", Options{SizeMB: 4096, ESPSizeMB: 256}, ""},
		{"smallest", Options{SizeMB: 576, ESPSizeMB: 64}, ""},
		{"small ESP", Options{SizeMB: 4096, ESPSizeMB: 63}, "ESP size 63 MiB"},
		{"no room for the root", Options{SizeMB: 575, ESPSizeMB: 64}, "disk size 575 MiB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.o.Problems()
			switch {
			case tt.want == "" && len(got) != 0:
				t.Errorf("Problems() = %v, want none", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0].Error(), tt.want)):
				t.Errorf("Problems() = %v, want one saying %q", got, tt.want)
			}
		})
	}
}

func TestOptionsLayout(t *testing.T) {
	l, err := Options{SizeMB: 600, ESPSizeMB: 64}.Layout("d", "e", "r")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.DiskSize, int64(600)*MiB; got != want {
		t.Errorf("disk size = %d, want %d", got, want)
	}
	if got, want := l.ESP.Size, int64(64)*MiB; got != want {
		t.Errorf("ESP size = %d, want %d", got, want)
	}
	if l.DiskGUID != "d" || l.ESP.UUID != "e" || l.Root.UUID != "r" {
		t.Errorf("layout GUIDs %s %s %s, want d e r", l.DiskGUID, l.ESP.UUID, l.Root.UUID)
	}
}
