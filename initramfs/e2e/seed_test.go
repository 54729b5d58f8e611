package e2e

import (
	"os"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"
)

// seedDisk writes a NoCloud seed holding user-data; broken, it is a seed
// whose filesystem cannot be mounted (its boot sector's bytes-per-sector
// zeroed), as a truncated or garbled seed is.
func seedDisk(t *testing.T, userData string, broken bool) string {
	t.Helper()
	seed := testenv.NoCloudSeed(t, userData, "kpreload-e2e")
	if broken {
		f, err := os.OpenFile(seed, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{0, 0}, 0x0b); err != nil {
			t.Fatal(err)
		}
	}
	return seed
}

// TestSeedRequests: /init reads the instance request in a cloud-init seed's
// user-data (a write_files entry for /etc/kpreload/instance.yaml in
// #cloud-config; the config drive's, the deprecated kpreload: key, with its
// note) between fw_cfg and the image's
// file; a seed that is broken, asks with a wrong field, or holds user-data
// only cloud-init reads leaves the boot to the next source, with the fault
// and where it is in the report.
func TestSeedRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("QEMU boots; -short")
	}
	const ask1 = "#cloud-config\nwrite_files:\n  - path: /etc/kpreload/instance.yaml\n    content: |\n      resources:\n        driver:\n          version: \"1.0.0\"\n"
	const ask1Deprecated = "#cloud-config\nkpreload:\n  resources:\n    driver:\n      version: \"1.0.0\"\n"
	const (
		origin            = "NoCloud seed /dev/vdb (CIDATA) user-data"
		configDriveOrigin = "ConfigDrive seed /dev/vdb (CONFIG-2) openstack/latest/user_data"
	)
	tests := []struct {
		name    string
		c       selectBoot
		version string // chosen
		source  string
		want    string // in the report's errors or notes
	}{
		{"the seed's request", selectBoot{drives: []string{seedDisk(t, ask1, false)}}, "1.0.0", "seed", ""},
		{"fw_cfg before the seed", selectBoot{drives: []string{seedDisk(t, ask1, false)},
			instance: "resources:\n  driver:\n    version: \"2.0.0\"\n"}, "2.0.0", "fw_cfg", ""},
		{"a wrong field, with its line", selectBoot{drives: []string{seedDisk(t, "#cloud-config\nwrite_files:\n- path: /etc/kpreload/instance.yaml\n  content: |\n    resources:\n      driver:\n        verison: \"1\"\n", false)}},
			"2.0.0", "default", origin + ":7: resources.driver.verison: unknown field"},
		{"a seed that does not mount", selectBoot{drives: []string{seedDisk(t, ask1, true)}}, "2.0.0", "default",
			"instance request from seed ignored: NoCloud seed /dev/vdb (CIDATA): mount:"},
		{"an OpenStack config drive's request, the deprecated key", selectBoot{drives: []string{testenv.ConfigDriveSeed(t, ask1Deprecated)}}, "1.0.0", "seed",
			"seed: the top-level kpreload: key of #cloud-config is deprecated"},
		{"MIME multipart: left to cloud-init", selectBoot{drives: []string{seedDisk(t, "Content-Type: multipart/mixed; boundary=x\n\n--x--\n", false)}},
			"2.0.0", "default", "seed: user-data is " + origin + ": not a plain #cloud-config document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, con := bootSelect(t, tt.c)
			if len(b.rep.Errors) == 0 {
				checkChosen(t, b, con, tt.version, tt.source, "initramfs")
			} else if d := b.rep.Selection; d == nil || d.Source != tt.source || len(d.Drivers) != 1 || d.Drivers[0].Chosen == nil ||
				d.Drivers[0].Chosen.Version != tt.version || !d.Drivers[0].Active {
				t.Errorf("selection %+v: want %s from %s, active", d, tt.version, tt.source)
			}
			if o := b.rep.Selection.Origin; tt.source == "seed" && o != origin && o != configDriveOrigin {
				t.Errorf("origin %q, want %q or %q", o, origin, configDriveOrigin)
			}
			said := strings.Join(append(append(b.rep.Errors, b.rep.Selection.Errors...), b.rep.Selection.Notes...), "\n")
			if tt.want != "" && !strings.Contains(said, tt.want) {
				t.Errorf("report errors and notes:\n%s\nwant %q", said, tt.want)
			}
			if b.root == nil || b.root.Start <= 0 {
				t.Errorf("the real init did not run")
			}
		})
	}
}
