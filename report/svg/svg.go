// Package svg draws boot timelines as a self-contained SVG picture: one lane
// per boot on a shared time axis (seconds since kernel start), its
// milestones as labelled ticks and each module load as a bar with its
// reason and phase. The picture has no scripts, fonts or other external
// resources, so any browser shows it as it is. It is never linked into /init.
package svg

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/report"
)

// Mark is one instant of a boot: kernel start, /init, root found, ...
type Mark struct {
	Time  float64
	Label string
}

// Span is one interval of a boot, such as a module load.
type Span struct {
	Start, End float64
	// Label is the bar's name (the module), Detail what follows it (its
	// result, phase and reason).
	Label, Detail string
	// Failed draws the bar as a refusal or a failure.
	Failed bool
}

// Lane is one boot: its milestones and its module loads.
type Lane struct {
	Name  string
	Marks []Mark
	Spans []Span
}

// FromReport makes a lane from a kpreload boot report: kernel start,
// /init's start, each module load (name, result and the report's notes:
// phase, the devices it was for, its reason), the root
// mounted, the drivers ready and switch_root; extra adds milestones the
// report cannot know (the kernel's "Run /init", systemd's targets).
func FromReport(name string, r *report.Report, extra ...Mark) Lane {
	l := Lane{Name: name, Marks: []Mark{{0, "kernel start"}}}
	if r.InitStart > 0 {
		l.Marks = append(l.Marks, Mark{r.InitStart, "kpreload /init main"})
	}
	if r.Root.Mounted > 0 {
		l.Marks = append(l.Marks, Mark{r.Root.Mounted, fmt.Sprintf("root %s (%s) mounted", r.Root.Device, r.Root.FSType)})
	}
	if r.DriversReady > 0 {
		l.Marks = append(l.Marks, Mark{r.DriversReady, "drivers ready"})
	}
	if r.SwitchRoot > 0 {
		l.Marks = append(l.Marks, Mark{r.SwitchRoot, "switch_root"})
	}
	l.Marks = append(l.Marks, extra...)
	notes := r.ModuleNotes()
	for i, m := range r.Modules {
		detail := m.Result
		if len(notes[i]) > 0 {
			detail += "; " + strings.Join(notes[i], "; ")
		}
		end := m.End
		if end < m.Start {
			end = m.Start
		}
		l.Spans = append(l.Spans, Span{Start: m.Start, End: end, Label: m.Name, Detail: detail,
			Failed: m.Result == "refused" || m.Result == "failed"})
	}
	sort.SliceStable(l.Spans, func(i, j int) bool { return l.Spans[i].Start < l.Spans[j].Start })
	return l
}

// Geometry of the picture, in SVG user units (pixels).
const (
	width     = 1200.0
	left      = 40.0  // the axis starts here
	right     = 40.0  // room after the last tick
	rowHeight = 18.0  // one module bar
	markRow   = 16.0  // one milestone label
	laneGap   = 28.0  // between lanes
	axisSpace = 34.0  // the time axis at the bottom
	titleRow  = 30.0  // the picture's title
	laneTitle = 22.0  // a lane's name
	fontSize  = 12.0  // every text
	charWidth = 6.6   // an estimate of one character's width at fontSize
	minBar    = 1.5   // a load shorter than a pixel still shows
	maxLabel  = 140.0 // characters of a label before it is cut
)

// Write draws the lanes on one time axis, titled title, as a standalone SVG
// document (XML declaration, width, height and viewBox set).
func Write(w io.Writer, title string, lanes []Lane) error {
	end := 0.0
	for _, l := range lanes {
		for _, m := range l.Marks {
			end = math.Max(end, m.Time)
		}
		for _, s := range l.Spans {
			end = math.Max(end, s.End)
		}
	}
	if end <= 0 {
		end = 1
	}
	step := tickStep(end)
	end = math.Ceil(end/step) * step
	scale := (width - left - right) / end
	x := func(t float64) float64 { return left + t*scale }

	var b bytes.Buffer
	height := titleRow
	for _, l := range lanes {
		height += laneHeight(l) + laneGap
	}
	height += axisSpace
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="%.0f">`+"\n",
		width, height, width, height, fontSize)
	b.WriteString(`<style>.mark{stroke:#c0392b;stroke-width:1}.grid{stroke:#ddd;stroke-width:1}.bar{fill:#2e86c1}.bad{fill:#e67e22}.lane{fill:#f7f9fb;stroke:#ccd}.t{fill:#222}.d{fill:#555}.m{fill:#c0392b}</style>` + "\n")
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#fff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text class="t" x="%.0f" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(title))

	// Grid lines over the whole height, ticks and labels at the bottom.
	axisY := height - axisSpace + 6
	for t := 0.0; t <= end+step/2; t += step {
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f"/>`+"\n", x(t), titleRow, x(t), axisY)
		fmt.Fprintf(&b, `<text class="d" x="%.1f" y="%.0f" text-anchor="middle">%s s</text>`+"\n", x(t), axisY+16, trimFloat(t))
	}
	fmt.Fprintf(&b, `<line stroke="#333" x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f"/>`+"\n", left, axisY, x(end), axisY)

	y := titleRow
	for _, l := range lanes {
		h := laneHeight(l)
		fmt.Fprintf(&b, `<g class="boot" data-name="%s">`+"\n", esc(l.Name))
		fmt.Fprintf(&b, `<rect class="lane" x="%.0f" y="%.0f" width="%.0f" height="%.0f"/>`+"\n", left-30, y, width-left-right+60, h)
		fmt.Fprintf(&b, `<text class="t" x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", left-24, y+15, esc(l.Name))
		// Milestones: a vertical line through the lane, labels one per row,
		// placed left of the line when they would run off the right edge.
		marks := append([]Mark(nil), l.Marks...)
		sort.SliceStable(marks, func(i, j int) bool { return marks[i].Time < marks[j].Time })
		my := y + laneTitle
		for _, m := range marks {
			label := fmt.Sprintf("%s %.3f s", m.Label, m.Time)
			fmt.Fprintf(&b, `<line class="mark" x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f"><title>%s</title></line>`+"\n", x(m.Time), my+2, x(m.Time), y+h, esc(label))
			tx, attr := place(x(m.Time)+4, x(m.Time)-4, label)
			fmt.Fprintf(&b, `<text class="m mark-label" x="%.1f" y="%.0f"%s>%s</text>`+"\n", tx, my+markRow-3, attr, esc(label))
			my += markRow
		}
		// Module loads: one bar per row, the name and detail beside it.
		for i, s := range l.Spans {
			by := my + float64(i)*rowHeight + 4
			bw := math.Max((s.End-s.Start)*scale, minBar)
			class := "bar"
			if s.Failed {
				class = "bad"
			}
			label := fmt.Sprintf("%s  %.3f–%.3f s  %s", s.Label, s.Start, s.End, s.Detail)
			fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.0f" width="%.1f" height="%.0f"><title>%s</title></rect>`+"\n", class, x(s.Start), by, bw, rowHeight-6, esc(label))
			tx, attr := place(x(s.Start)+bw+4, x(s.Start)-4, label)
			fmt.Fprintf(&b, `<text class="t module" x="%.1f" y="%.0f"%s>%s</text>`+"\n", tx, by+rowHeight-8, attr, esc(label))
		}
		b.WriteString("</g>\n")
		y += h + laneGap
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// laneHeight is the height of lane l: its name, a row per milestone, a row per module.
func laneHeight(l Lane) float64 {
	return laneTitle + float64(len(l.Marks))*markRow + float64(len(l.Spans))*rowHeight + 8
}

// place puts a label to the right of what it names, starting at after, or,
// when it would run past the picture's right edge, ending at before.
func place(after, before float64, label string) (x float64, attr string) {
	n := math.Min(float64(len([]rune(label))), maxLabel)
	if after+n*charWidth > width-4 {
		return before, ` text-anchor="end"`
	}
	return after, ""
}

// tickStep picks a round tick interval giving 5 to 12 ticks over end seconds.
func tickStep(end float64) float64 {
	for _, s := range []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600} {
		if end/s <= 12 {
			return s
		}
	}
	return math.Ceil(end / 12)
}

// trimFloat prints t without trailing zeros.
func trimFloat(t float64) string {
	s := strings.TrimRight(fmt.Sprintf("%.2f", t), "0")
	return strings.TrimSuffix(s, ".")
}

// esc escapes s for XML text and attribute values, cut to maxLabel characters.
func esc(s string) string {
	if r := []rune(s); len(r) > int(maxLabel) {
		s = string(r[:int(maxLabel)-1]) + "…"
	}
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // writes to a strings.Builder never fail
	return b.String()
}

// WriteFile draws the lanes into the file path (replaced atomically).
func WriteFile(path, title string, lanes []Lane) error {
	var b bytes.Buffer
	if err := Write(&b, title, lanes); err != nil {
		return err
	}
	if err := fileutil.WriteAtomic(path, b.Bytes(), 0o644, false); err != nil {
		return fmt.Errorf("write the timeline picture: %w", err)
	}
	return nil
}
