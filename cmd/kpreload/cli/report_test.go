package cli

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportHelpExamples runs every example of `kpreload report --help`
// exactly as written, in a directory holding a real boot's report as
// report.json: the timeline printed names every module, the picture is an
// SVG document naming them too.
func TestReportHelpExamples(t *testing.T) {
	fixture, err := filepath.Abs("../../../report/svg/testdata/report.json")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	code, help, _ := runCLI("report", "--help")
	if code != 0 {
		t.Fatalf("report --help: exit %d", code)
	}
	_, ex, ok := strings.Cut(help, "Examples:\n")
	if !ok {
		t.Fatalf("report --help has no Examples:\n%s", help)
	}
	ex, _, _ = strings.Cut(ex, "\n\n")
	t.Chdir(t.TempDir())
	if err := os.WriteFile("report.json", data, 0o644); err != nil {
		t.Fatal(err)
	}
	modules := []string{"virtio_blk", "virtio_pci", "kpreload_edu"}
	ran := 0
	for _, line := range strings.Split(ex, "\n") {
		args := strings.Fields(line)
		if len(args) < 2 || args[0] != "kpreload" || args[1] != "report" {
			t.Fatalf("example %q is not a kpreload report command", line)
		}
		code, out, errOut := runCLI(args[1:]...)
		if code != 0 {
			t.Fatalf("example %q: exit %d: %s", line, code, errOut)
		}
		ran++
		text := out
		if strings.Contains(line, "--svg") {
			b, err := os.ReadFile("boot.svg")
			if err != nil {
				t.Fatalf("example %q: %v", line, err)
			}
			var doc struct{ XMLName xml.Name }
			if err := xml.Unmarshal(b, &doc); err != nil || doc.XMLName.Local != "svg" {
				t.Fatalf("example %q wrote no SVG document (%v): %.200s", line, err, b)
			}
			if want := "boot.svg: the timeline of report.json (7 modules)\n"; out != want {
				t.Errorf("example %q printed %q, want %q", line, out, want)
			}
			text = string(b)
		}
		for _, m := range modules {
			if !strings.Contains(text, m) {
				t.Errorf("example %q: %s missing from\n%s", line, m, text)
			}
		}
	}
	if ran != 2 {
		t.Errorf("%d examples ran, want 2", ran)
	}
}

func TestReportBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{\"modules\": 3}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"report", filepath.Join(dir, "none.json")}, "boot report: "},
		{[]string{"report", bad}, "boot report " + bad + ": "},
		{[]string{"report", "--svg", filepath.Join(dir, "no/such/dir/x.svg"), bad}, "boot report " + bad + ": "},
	} {
		code, _, errOut := runCLI(c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q = exit %d, stderr %q, want failure with %q", c.args, code, errOut, c.want)
		}
	}
}
