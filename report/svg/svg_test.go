package svg

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/report/timeline"
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

// element is one SVG element as the XML decoder read it: its name, its
// attributes and the text directly inside it.
type element struct {
	name  string
	attr  map[string]string
	text  string
	title string
}

// parse checks that out is a well-formed SVG document and returns its elements.
func parse(t *testing.T, out string) []element {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(out))
	var els []element
	var stack []int
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
			if len(els) == 0 && x.Name.Space+" "+x.Name.Local != "http://www.w3.org/2000/svg svg" {
				t.Errorf("root element %s %s, want svg in the SVG namespace", x.Name.Space, x.Name.Local)
			}
			e := element{name: x.Name.Local, attr: map[string]string{}}
			for _, a := range x.Attr {
				e.attr[a.Name.Local] = a.Value
			}
			els = append(els, e)
			stack = append(stack, len(els)-1)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				i := stack[len(stack)-1]
				if els[i].name == "title" && len(stack) > 1 {
					els[stack[len(stack)-2]].title += string(x)
				}
				els[i].text += string(x)
			}
		}
	}
	return els
}

// texts joins the text of every text element, one a line.
func texts(els []element) string {
	var out []string
	for _, e := range els {
		if e.name == "text" {
			out = append(out, e.text)
		}
	}
	return strings.Join(out, "\n")
}

// TestWriteSelfContained: hostile names in the title, a boot's name, a
// module, the decision's source and driver are escaped (the document stays
// well-formed and shows them as text), and nothing is fetched or run.
func TestWriteSelfContained(t *testing.T) {
	r := readFixture(t)
	r.Modules = append(r.Modules, report.Module{Name: "bad<&>\"mod", Result: "refused", Reason: "unsigned", Start: 3, End: 2.9})
	r.Selection.Origin = "</text><script>alert(1)</script>"
	r.Selection.Drivers[0].Driver = "edu&<evil>"
	var buf bytes.Buffer
	boots := []*timeline.Boot{{Name: "kpreload", Report: r}, {Name: "debian <&>", RunInit: 1.5, RealInit: 4}}
	if err := Write(&buf, "a <boot> & more", boots); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	all := texts(parse(t, out))
	for _, want := range []string{"a <boot> & more", "debian <&>", "bad<&>\"mod", "switch_root", "kernel runs /init 1.500 s",
		"</text><script>alert(1)</script>", "edu&<evil> 1.0.0, flavour -, from initramfs"} {
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

// TestWriteTellsTheStory: the summary line, the decision, the kernel's band
// from the axis's 0 to /init, the initramfs's and userspace's bands, /init's
// steps on a magnified axis, and a legend of what is drawn.
func TestWriteTellsTheStory(t *testing.T) {
	r := readFixture(t)
	var buf bytes.Buffer
	bt := &timeline.Boot{Name: "kpreload", Report: r, RunInit: 2.701, Up: 30.252, Target: "multi-user.target"}
	if err := Write(&buf, "kpreload boot", []*timeline.Boot{bt}); err != nil {
		t.Fatal(err)
	}
	els := parse(t, buf.String())
	all := texts(els)
	for _, want := range []string{
		"Startup finished in 2.701s (kernel) + 0.584s (initramfs) + 26.967s (userspace) = 30.252s; drivers ready at 3.251s",
		"driver decision: request from default (no instance request found: latest cached version, flavour auto): version latest, flavour auto",
		"kpreload-edu 1.0.0, flavour -, from initramfs: chosen by the rule latest; loaded, active",
		"kernel 2.701 s", "kpreload /init, magnified: 2.75–3.3 s", "device scan (initramfs) (0.213 s)  2 rounds", "root wait and mount",
		"multi-user.target 30.252 s",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the picture lacks %q:\n%s", want, all)
		}
	}
	// The phases: the kernel's band starts at the axis's 0 and meets the initramfs's.
	x := func(e element, a string) float64 {
		f, err := strconv.ParseFloat(e.attr[a], 64)
		if err != nil {
			t.Fatalf("%s %s=%q: %v", e.name, a, e.attr[a], err)
		}
		return f
	}
	phases := map[string]element{}
	var legend []string
	inLegend := false
	for _, e := range els {
		if e.name == "g" {
			inLegend = e.attr["class"] == "legend"
		}
		if inLegend && e.name == "text" {
			legend = append(legend, e.text)
		}
		if strings.HasPrefix(e.attr["class"], "phase k-") {
			phases[strings.TrimPrefix(e.attr["class"], "phase k-")] = e
		}
	}
	k, i, u := phases["kernel"], phases["initramfs"], phases["userspace"]
	if k.attr == nil || i.attr == nil || u.attr == nil {
		t.Fatalf("phases drawn: %v, want kernel, initramfs and userspace", phases)
	}
	if x(k, "x") != left {
		t.Errorf("the kernel's band starts at x=%v, want the axis's 0 at %v", x(k, "x"), left)
	}
	if d := x(k, "x") + x(k, "width") - x(i, "x"); d*d > 0.01 {
		t.Errorf("the kernel's band ends %v away from the initramfs's start", d)
	}
	if got, want := x(u, "x")+x(u, "width"), newAxis(0, 30.252).x(30.252); (got-want)*(got-want) > 0.01 {
		t.Errorf("userspace's band ends at x=%v, want the target's %v", got, want)
	}
	// Everything of the boot lies inside its lane, the legend inside the picture.
	var lane element
	h := x(els[0], "height")
	inLegend = false
	for _, e := range els {
		if e.name == "g" {
			inLegend = e.attr["class"] == "legend"
		}
		if e.attr["class"] == "lane" {
			lane = e
			continue
		}
		if lane.attr == nil || (e.name != "text" && e.name != "rect") {
			continue
		}
		bottom := x(lane, "y") + x(lane, "height")
		if inLegend {
			bottom = h
		}
		if y := x(e, "y"); y > bottom {
			t.Errorf("%s %q at y=%v is below %v", e.name, e.text, y, bottom)
		}
	}
	if want := "kernel|initramfs (/init)|userspace (real init)|/init start-up|device scan|root wait|driver decision|driver loads|hand-over|module load|milestone"; strings.Join(legend, "|") != want {
		t.Errorf("legend %q, want %q", strings.Join(legend, "|"), want)
	}
}

func TestTickStep(t *testing.T) {
	for _, c := range []struct{ end, want float64 }{{0.3, 0.05}, {4, 0.5}, {12, 1}, {35, 5}, {100000, 8334}} {
		if got := tickStep(c.end); got != c.want {
			t.Errorf("tickStep(%v) = %v, want %v", c.end, got, c.want)
		}
	}
}
