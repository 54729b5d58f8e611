package svg

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/report"
)

// readFixture reads the report of a real direct-kernel boot (scripts/demo.sh:
// 6.1 cloud kernel, the test driver on QEMU's edu device).
func readFixture(t *testing.T) *report.Report {
	t.Helper()
	b, err := os.ReadFile("testdata/report.json")
	if err != nil {
		t.Fatal(err)
	}
	var r report.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("testdata/report.json: %v", err)
	}
	return &r
}

func TestFromReport(t *testing.T) {
	r := readFixture(t)
	l := FromReport("kpreload", r, Mark{Time: 4.5, Label: "systemd started"})
	var got []string
	for _, m := range l.Marks {
		got = append(got, m.Label)
	}
	want := []string{"kernel start", "kpreload /init main", "root /dev/vda (ext4) mounted", "drivers ready", "switch_root", "systemd started"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("marks = %q, want %q", got, want)
	}
	if len(l.Spans) != len(r.Modules) {
		t.Fatalf("%d spans for %d modules", len(l.Spans), len(r.Modules))
	}
	for i := 1; i < len(l.Spans); i++ {
		if l.Spans[i].Start < l.Spans[i-1].Start {
			t.Errorf("spans out of start order at %d: %v", i, l.Spans)
		}
	}
	var edu *Span
	for i := range l.Spans {
		if l.Spans[i].Label == "kpreload_edu" {
			edu = &l.Spans[i]
		}
	}
	if edu == nil || !strings.HasPrefix(edu.Detail, "loaded; initramfs; ") || !strings.Contains(edu.Detail, "for 0000:") {
		t.Errorf("kpreload_edu span = %+v, want its result, phase and reason", edu)
	}
}

func TestWriteSelfContained(t *testing.T) {
	r := readFixture(t)
	r.Modules = append(r.Modules, report.Module{Name: "bad<&>\"mod", Result: "refused", Reason: "unsigned", Start: 3, End: 2.9})
	var buf bytes.Buffer
	if err := Write(&buf, "a <boot> & more", []Lane{FromReport("kpreload", r), {Name: "debian", Marks: []Mark{{1.5, "Run /init"}}}}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	// Well-formed XML: every element closes, every text is escaped.
	d := xml.NewDecoder(strings.NewReader(out))
	var texts []string
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, out)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = x.Name.Space + " " + x.Name.Local
			}
		case xml.CharData:
			texts = append(texts, string(x))
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q, want svg in the SVG namespace", root)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"a <boot> & more", "bad<&>\"mod", "switch_root", "Run /init 1.500 s"} {
		if !strings.Contains(all, want) {
			t.Errorf("text %q missing", want)
		}
	}
	for _, m := range r.Modules {
		if !strings.Contains(all, m.Name) {
			t.Errorf("module %s missing", m.Name)
		}
	}
	// Self-contained: nothing fetched, nothing run.
	for _, bad := range []string{"href", "<script", "url(", "@import", "<foreignObject"} {
		if strings.Contains(out, bad) {
			t.Errorf("the SVG contains %q", bad)
		}
	}
}

func TestTickStep(t *testing.T) {
	for _, c := range []struct{ end, want float64 }{{0.3, 0.05}, {4, 0.5}, {12, 1}, {35, 5}, {100000, 8334}} {
		if got := tickStep(c.end); got != c.want {
			t.Errorf("tickStep(%v) = %v, want %v", c.end, got, c.want)
		}
	}
}
