package disk

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewLayout(t *testing.T) {
	l, err := NewLayout(1536, 256, "11111111-2222-4333-8444-555555555555", "aaaaaaaa-2222-4333-8444-555555555555", "bbbbbbbb-2222-4333-8444-555555555555")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"disk size", l.DiskSize, 1536 * MiB},
		{"ESP offset", l.ESP.Offset, MiB},
		{"ESP size", l.ESP.Size, 256 * MiB},
		{"root offset", l.Root.Offset, 257 * MiB},
		{"root size", l.Root.Size, (1536 - 258) * MiB},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
	if l.ESP.Type != TypeESP || l.Root.Type != TypeRootX86_64 {
		t.Errorf("types = %s, %s; want ESP then x86-64 root", l.ESP.Type, l.Root.Type)
	}
	for _, bad := range [][2]int{{256, 256}, {100, 0}, {258, 256}} {
		if _, err := NewLayout(bad[0], bad[1], "", "", ""); err == nil {
			t.Errorf("NewLayout(%d, %d) = nil error, want one", bad[0], bad[1])
		}
	}
}

// TestSfdiskScript writes the partition table with the real sfdisk and reads it
// back with sfdisk --json.
func TestSfdiskScript(t *testing.T) {
	if _, err := exec.LookPath("sfdisk"); err != nil {
		t.Fatalf("sfdisk missing (install fdisk: scripts/deps.sh): %v", err)
	}
	l, err := NewLayout(600, 64, NewUUID(), NewUUID(), NewUUID())
	if err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(t.TempDir(), "disk.raw")
	f, err := os.Create(disk)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(l.DiskSize); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := exec.Command("sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", disk)
	cmd.Stdin = strings.NewReader(l.SfdiskScript())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s\nscript:\n%s", err, out, l.SfdiskScript())
	}
	out, err := exec.Command("sfdisk", "--json", disk).Output()
	if err != nil {
		t.Fatalf("sfdisk --json: %v", err)
	}
	var dump struct {
		PartitionTable struct {
			Label      string `json:"label"`
			ID         string `json:"id"`
			Partitions []struct {
				Start int64  `json:"start"`
				Size  int64  `json:"size"`
				Type  string `json:"type"`
				UUID  string `json:"uuid"`
				Name  string `json:"name"`
			} `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal(out, &dump); err != nil {
		t.Fatal(err)
	}
	pt := dump.PartitionTable
	if pt.Label != "gpt" || !strings.EqualFold(pt.ID, l.DiskGUID) || len(pt.Partitions) != 2 {
		t.Fatalf("table = %+v, want gpt %s with 2 partitions", pt, l.DiskGUID)
	}
	for i, want := range []Partition{l.ESP, l.Root} {
		got := pt.Partitions[i]
		if got.Start*SectorSize != want.Offset || got.Size*SectorSize != want.Size || !strings.EqualFold(got.Type, want.Type) || !strings.EqualFold(got.UUID, want.UUID) || got.Name != want.Name {
			t.Errorf("partition %d = %+v, want %+v", i+1, got, want)
		}
	}
}

func TestFatClusterSectors(t *testing.T) {
	for _, c := range []struct {
		mb   int64
		want int
	}{{64, 1}, {128, 2}, {256, 4}, {512, 8}, {4096, 8}} {
		got := FATClusterSectors(c.mb * MiB)
		if got != c.want {
			t.Errorf("FATClusterSectors(%d MiB) = %d, want %d", c.mb, got, c.want)
		}
		// Clusters left after the FATs (4 bytes per cluster, two copies) and 32 reserved sectors.
		sectors := c.mb*MiB/SectorSize - 32
		if clusters := sectors * SectorSize / (int64(got)*SectorSize + 8); clusters < 65525 {
			t.Errorf("%d MiB: %d clusters, below FAT32's minimum", c.mb, clusters)
		}
	}
}
