package run

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cmds")
	if err := os.WriteFile(p, []byte("# switch there and back\n/usr/bin/kpreload switch 2.0.0\n\n  /bin/true  \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ParseFile(p)
	want := []Command{{Line: 2, Argv: []string{"/usr/bin/kpreload", "switch", "2.0.0"}}, {Line: 4, Argv: []string{"/bin/true"}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParseFile = %+v, %v, want %+v", got, err, want)
	}
	if _, err := ParseFile(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Errorf("ParseFile(absent) = nil error, want one")
	}
}

func TestRunAndScan(t *testing.T) {
	now := func() float64 { return 1.5 }
	recs := []Record{
		Run(Command{Line: 1, Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, now),
		Run(Command{Line: 2, Argv: []string{"/nonexistent/prog"}}, now),
		Run(Command{Line: 3, Argv: []string{"true"}}, now),
	}
	if r := recs[0]; r.Exit != 3 || r.Output != "out\nerr\n" || r.Error != "" {
		t.Errorf("Run(exit 3) = %+v, want exit 3, output \"out\\nerr\\n\"", r)
	}
	if r := recs[1]; r.Exit != -1 || !strings.Contains(r.Error, "no such file") {
		t.Errorf("Run(absent program) = %+v, want exit -1 and an error", r)
	}
	if r := recs[2]; r.Exit != 0 || r.Start != 1.5 || r.End != 1.5 {
		t.Errorf("Run(true) = %+v, want exit 0 at 1.5", r)
	}
	var log strings.Builder
	log.WriteString("[    1.0] some kernel line\n")
	for _, r := range recs {
		log.WriteString(r.ConsoleLine() + "\r\n")
	}
	log.WriteString(Prefix + "{damaged\n")
	got, err := Scan(strings.NewReader(log.String()))
	if err != nil || !reflect.DeepEqual(got, recs) {
		t.Errorf("Scan = %+v, %v, want %+v", got, err, recs)
	}
}
