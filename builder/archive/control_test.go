package archive

import (
	"slices"
	"testing"
)

// TestParseControls checks Provides and Conflicts/Breaks come back as package
// names, continuation lines included, from apt-cache show's records.
func TestParseControls(t *testing.T) {
	out := []byte(`Package: initramfs-tools
Version: 0.142+deb12u1
Depends: initramfs-tools-core (= 0.142+deb12u1), linux-base
Provides: linux-initramfs-tool
Breaks: e2fsprogs (<< 1.42.6-1~)
Conflicts: linux-initramfs-tool,
 usplash (<< 0.5.50)
Description-en: generic modular initramfs generator
 a: b

Package: dracut
Version: 059-4
Provides: linux-initramfs-tool
Conflicts: initramfs-tools | yaird:any

Package: htop
Version: 3.2.2-2
`)
	got := ParseControls(out)
	want := []Control{
		{Package: "initramfs-tools", Provides: []string{"linux-initramfs-tool"}, Conflicts: []string{"linux-initramfs-tool", "usplash", "e2fsprogs"}},
		{Package: "dracut", Provides: []string{"linux-initramfs-tool"}, Conflicts: []string{"initramfs-tools", "yaird"}},
		{Package: "htop"},
	}
	if len(got) != len(want) {
		t.Fatalf("ParseControls = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Package != want[i].Package || !slices.Equal(got[i].Provides, want[i].Provides) || !slices.Equal(got[i].Conflicts, want[i].Conflicts) {
			t.Errorf("record %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
