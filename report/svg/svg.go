// Package svg draws boots (report/timeline) as a self-contained SVG picture,
// as systemd-analyze plot does: per boot its summary line, the driver
// decision in words, its phases as bands from the kernel's start (the
// kernel, the initramfs, userspace up to its target), its milestones, and
// /init's steps and module loads as bars, on a magnified axis of their own
// when they take a small part of the boot; a legend closes the picture.
// Boots share their axes, so two drawn together compare. The picture has no
// scripts, fonts or other external resources, so any browser shows it as
// it is. It is never linked into /init.
package svg

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/report/timeline"
)

// Geometry of the picture, in SVG user units (pixels).
const (
	width     = 1200.0
	left      = 40.0  // the axes start here
	right     = 40.0  // room after the last tick
	rowHeight = 18.0  // one step or module bar
	markRow   = 16.0  // one milestone label
	textRow   = 16.0  // one line of the summary or the decision
	bandRow   = 24.0  // the phases' bands
	axisRow   = 18.0  // an axis's tick labels
	zoomGap   = 26.0  // the magnifier between the overview and /init's steps
	laneGap   = 24.0  // between boots
	titleRow  = 30.0  // the picture's title
	laneTitle = 22.0  // a boot's name
	legendRow = 40.0  // the legend
	fontSize  = 12.0  // every text
	charWidth = 6.6   // an estimate of one character's width at fontSize
	minBar    = 1.5   // a step shorter than a pixel still shows
	maxLabel  = 160.0 // characters of a label before it is cut
	zoomBelow = 0.5   // /init's steps get their own axis when they span less of the boot than this
)

// kinds are the legend's entries, in its order: a step's kind, its colour, its words.
var kinds = []struct{ kind, colour, words string }{
	{timeline.KindFirmware, "#7f8c8d", "firmware"},
	{timeline.KindLoader, "#95a5a6", "boot loader"},
	{timeline.KindKernel, "#8e44ad", "kernel"},
	{timeline.KindInitramfs, "#2874a6", "initramfs (/init)"},
	{timeline.KindUserspace, "#1e8449", "userspace (real init)"},
	{timeline.KindSetup, "#f5cba7", "/init start-up"},
	{timeline.KindScan, "#5dade2", "device scan"},
	{timeline.KindRoot, "#f4d03f", "root wait"},
	{timeline.KindDecision, "#af7ac5", "driver decision"},
	{timeline.KindDrivers, "#48c9b0", "driver loads"},
	{timeline.KindHandOver, "#abebc6", "hand-over"},
	{timeline.KindModule, "#2e86c1", "module load"},
	{timeline.KindFailed, "#e67e22", "refused or failed"},
}

// axis maps seconds to x between left and width-right.
type axis struct{ lo, hi, step float64 }

func newAxis(lo, hi float64) axis {
	if hi <= lo {
		hi = lo + 1
	}
	step := tickStep(hi - lo)
	return axis{lo: math.Floor(lo/step) * step, hi: math.Ceil(hi/step) * step, step: step}
}

func (a axis) x(t float64) float64 { return left + (t-a.lo)*(width-left-right)/(a.hi-a.lo) }

// ticks draws the axis's labels at y and its grid lines from y+4 down to bottom.
func (a axis) ticks(b *bytes.Buffer, y, bottom float64) {
	for t := a.lo; t <= a.hi+a.step/2; t += a.step {
		fmt.Fprintf(b, `<line class="grid" x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f"/>`+"\n", a.x(t), y+4, a.x(t), bottom)
		fmt.Fprintf(b, `<text class="d" x="%.1f" y="%.0f" text-anchor="middle">%s s</text>`+"\n", a.x(t), y, trimFloat(t))
	}
}

// layout is what every boot of a picture shares: the overview axis, and
// /init's magnified one (zoom) when its steps need it.
type layout struct {
	all, detail axis
	zoom        bool
}

func newLayout(boots []*timeline.Boot) layout {
	lo, hi := 0.0, 0.0
	dlo, dhi := math.Inf(1), math.Inf(-1)
	for _, b := range boots {
		for _, p := range b.Phases() {
			lo, hi = math.Min(lo, p.Start), math.Max(hi, p.End)
		}
		for _, m := range b.Milestones() {
			hi = math.Max(hi, m.Time)
		}
		for _, s := range b.Steps() {
			hi = math.Max(hi, s.End)
			dlo, dhi = math.Min(dlo, s.Start), math.Max(dhi, s.End)
		}
	}
	l := layout{all: newAxis(lo, hi)}
	l.detail = l.all
	if dhi > dlo && (dhi-dlo) < zoomBelow*(l.all.hi-l.all.lo) {
		l.zoom = true
		l.detail = newAxis(dlo, dhi)
	}
	return l
}

// laneHeight is the height of boot b's lane.
func (l layout) laneHeight(b *timeline.Boot) float64 {
	h := laneTitle + textRow + float64(len(b.Decision()))*textRow + axisRow + bandRow + markRow + float64(len(b.Milestones()))*markRow + 8
	if n := len(b.Steps()); n > 0 {
		if l.zoom {
			h += zoomGap + axisRow
		}
		h += float64(n)*rowHeight + 6
	}
	return h
}

// Write draws the boots, titled title, as a standalone SVG document (XML
// declaration, width, height and viewBox set).
func Write(w io.Writer, title string, boots []*timeline.Boot) error {
	l := newLayout(boots)
	height := titleRow
	for _, bt := range boots {
		height += l.laneHeight(bt) + laneGap
	}
	used := usedKinds(boots)
	legendRows := math.Ceil(float64(len(used)+1) / 6)
	height += legendRows*legendRow/2 + 8

	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="%.0f">`+"\n",
		width, height, width, height, fontSize)
	b.WriteString(`<style>.mark{stroke:#c0392b;stroke-width:1}.mark.thin{stroke-dasharray:3 3;opacity:.6}.grid{stroke:#e3e3e3;stroke-width:1}.lane{fill:#f7f9fb;stroke:#ccd}.zoom{fill:#d6eaf8;opacity:.5}.t{fill:#222}.d{fill:#555}.m{fill:#c0392b}.in{fill:#fff}.summary{font-weight:bold}`)
	for _, k := range kinds {
		fmt.Fprintf(&b, ".k-%s{fill:%s}", k.kind, k.colour)
	}
	b.WriteString("</style>\n")
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#fff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text class="t" x="%.0f" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(title))

	y := titleRow
	for _, bt := range boots {
		y = l.lane(&b, bt, y) + laneGap
	}
	legend(&b, used, y)
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// lane draws boot bt from y down and returns where it ends.
func (l layout) lane(b *bytes.Buffer, bt *timeline.Boot, y float64) float64 {
	h := l.laneHeight(bt)
	fmt.Fprintf(b, `<g class="boot" data-name="%s">`+"\n", esc(bt.Name))
	fmt.Fprintf(b, `<rect class="lane" x="%.0f" y="%.0f" width="%.0f" height="%.0f"/>`+"\n", left-30, y, width-left-right+60, h)
	fmt.Fprintf(b, `<text class="t" x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", left-24, y+15, esc(bt.Name))
	y += laneTitle
	fmt.Fprintf(b, `<text class="t summary" x="%.0f" y="%.0f">%s</text>`+"\n", left, y+12, esc(bt.Summary()))
	y += textRow
	for i, d := range bt.Decision() {
		prefix := "  "
		if i == 0 {
			prefix = "driver decision: "
		}
		fmt.Fprintf(b, `<text class="d decision" x="%.0f" y="%.0f" xml:space="preserve">%s</text>`+"\n", left, y+12, esc(prefix+d))
		y += textRow
	}

	// The overview: the phases' bands and the milestones on the whole boot's axis.
	marks := bt.Milestones()
	top := y + axisRow
	bottom := top + bandRow + markRow + float64(len(marks))*markRow + 4
	l.all.ticks(b, y+12, bottom)
	y = top
	phases := bt.Phases()
	for _, p := range phases {
		x0, x1 := l.all.x(p.Start), l.all.x(p.End)
		fmt.Fprintf(b, `<rect class="phase k-%s" x="%.1f" y="%.0f" width="%.1f" height="%.0f"><title>%s</title></rect>`+"\n",
			p.Kind, x0, y+2, math.Max(x1-x0, minBar), bandRow-4, esc(fmt.Sprintf("%s %.3f s: %.3f–%.3f s", p.Name, p.Duration(), p.Start, p.End)))
	}
	// A band's name goes inside it where it fits, else its kind's word,
	// else below the bands, left to right without overlapping.
	var below []string
	cursor := 0.0
	for _, p := range phases {
		x0, x1 := l.all.x(p.Start), l.all.x(p.End)
		long, short := fmt.Sprintf("%s %.3f s", p.Name, p.Duration()), fmt.Sprintf("%s %.3f s", p.Kind, p.Duration())
		switch {
		case textWidth(long)+8 < x1-x0:
			fmt.Fprintf(b, `<text class="in phase-label" x="%.1f" y="%.0f">%s</text>`+"\n", x0+4, y+bandRow-8, esc(long))
		case textWidth(short)+8 < x1-x0:
			fmt.Fprintf(b, `<text class="in phase-label" x="%.1f" y="%.0f">%s</text>`+"\n", x0+4, y+bandRow-8, esc(short))
		default:
			x := math.Max(x0, cursor)
			x, attr, text := place(x, x1, long)
			if attr == "" {
				cursor = x + textWidth(text) + 12
			}
			below = append(below, fmt.Sprintf(`<text class="t phase-label" x="%.1f" y="%.0f"%s>%s</text>`, x, y+bandRow+markRow-4, attr, esc(text)))
		}
	}
	// The row below the bands is kept whether or not a name needs it, so
	// boots drawn together keep their rows level.
	y += bandRow + markRow
	if len(below) > 0 {
		b.WriteString(strings.Join(below, "\n") + "\n")
	}
	for _, m := range marks {
		label := fmt.Sprintf("%s %.3f s", m.Label, m.Time)
		fmt.Fprintf(b, `<line class="mark" x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f"><title>%s</title></line>`+"\n", l.all.x(m.Time), top, l.all.x(m.Time), y+markRow, esc(label))
		tx, attr, text := place(l.all.x(m.Time)+4, l.all.x(m.Time)-4, label)
		fmt.Fprintf(b, `<text class="m mark-label" x="%.1f" y="%.0f"%s>%s</text>`+"\n", tx, y+markRow-3, attr, esc(text))
		y += markRow
	}
	y += 4

	// /init's steps and module loads, magnified where they need it.
	steps := bt.Steps()
	if len(steps) > 0 {
		if l.zoom {
			// The magnifier: from the stretch of the overview to the whole width below.
			fmt.Fprintf(b, `<path class="zoom" d="M%.1f %.0f L%.1f %.0f L%.0f %.0f L%.0f %.0f Z"/>`+"\n",
				l.all.x(l.detail.lo), y, l.all.x(l.detail.hi), y, width-right, y+zoomGap, left, y+zoomGap)
			fmt.Fprintf(b, `<text class="d" x="%.0f" y="%.0f">kpreload /init, magnified: %s–%s s</text>`+"\n", left, y+zoomGap-4, trimFloat(l.detail.lo), trimFloat(l.detail.hi))
			y += zoomGap
			l.detail.ticks(b, y+12, y+axisRow+float64(len(steps))*rowHeight+6)
			y += axisRow
			for _, m := range marks {
				if m.Time >= l.detail.lo && m.Time <= l.detail.hi {
					fmt.Fprintf(b, `<line class="mark thin" x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f"><title>%s</title></line>`+"\n",
						l.detail.x(m.Time), y, l.detail.x(m.Time), y+float64(len(steps))*rowHeight+6, esc(fmt.Sprintf("%s %.3f s", m.Label, m.Time)))
				}
			}
		}
		for _, s := range steps {
			by := y + 4
			x0 := l.detail.x(s.Start)
			bw := math.Max(l.detail.x(s.End)-x0, minBar)
			label := fmt.Sprintf("%s (%.3f s)", s.Name, s.Duration())
			if s.Detail != "" {
				label += "  " + s.Detail
			}
			class := "step"
			if s.Kind == timeline.KindModule || s.Kind == timeline.KindFailed {
				class = "module"
			}
			fmt.Fprintf(b, `<rect class="%s k-%s" x="%.1f" y="%.0f" width="%.1f" height="%.0f"><title>%s</title></rect>`+"\n",
				class, s.Kind, x0, by, bw, rowHeight-6, esc(fmt.Sprintf("%s: %.3f–%.3f s", label, s.Start, s.End)))
			tx, attr, text := place(x0+bw+4, x0-4, label)
			fmt.Fprintf(b, `<text class="t %s" x="%.1f" y="%.0f"%s>%s</text>`+"\n", class, tx, by+rowHeight-8, attr, esc(text))
			y += rowHeight
		}
	}
	b.WriteString("</g>\n")
	return y + 6
}

// usedKinds are the legend's entries the boots use, in the legend's order.
func usedKinds(boots []*timeline.Boot) []int {
	seen := map[string]bool{}
	for _, bt := range boots {
		for _, p := range append(bt.Phases(), bt.Steps()...) {
			seen[p.Kind] = true
		}
	}
	var out []int
	for i, k := range kinds {
		if seen[k.kind] {
			out = append(out, i)
		}
	}
	return out
}

// legend draws a swatch and its words for each used kind, then the
// milestone's line, six to a row, from y down.
func legend(b *bytes.Buffer, used []int, y float64) {
	b.WriteString(`<g class="legend">` + "\n")
	col := (width - left - right) / 6
	for i := 0; i <= len(used); i++ {
		x := left + float64(i%6)*col
		ry := y + float64(i/6)*legendRow/2
		if i == len(used) {
			fmt.Fprintf(b, `<line class="mark" x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f"/>`+"\n", x+6, ry, x+6, ry+12)
			fmt.Fprintf(b, `<text class="t" x="%.0f" y="%.0f">milestone</text>`+"\n", x+18, ry+11)
			break
		}
		k := kinds[used[i]]
		fmt.Fprintf(b, `<rect class="k-%s" x="%.0f" y="%.0f" width="12" height="12"/>`+"\n", k.kind, x, ry)
		fmt.Fprintf(b, `<text class="t" x="%.0f" y="%.0f">%s</text>`+"\n", x+18, ry+11, esc(k.words))
	}
	b.WriteString("</g>\n")
}

// place puts a label beside what it names: right of it from after, or,
// when it would run past the picture's right edge, left of it ending at
// before; when neither side holds it, on the roomier side, cut to fit.
func place(after, before float64, label string) (x float64, attr, text string) {
	const end = ` text-anchor="end"`
	n := textWidth(label)
	switch {
	case after+n <= width-4:
		return after, "", label
	case before-n >= 4:
		return before, end, label
	case width-4-after >= before-4:
		return after, "", cut(label, width-4-after)
	default:
		return before, end, cut(label, before-4)
	}
}

// textWidth estimates the width of label as drawn (at most maxLabel characters).
func textWidth(label string) float64 {
	return math.Min(float64(len([]rune(label))), maxLabel) * charWidth
}

// cut shortens label to fit room, ending it with "…" where it cut.
func cut(label string, room float64) string {
	r := []rune(label)
	n := int(room/charWidth) - 1
	if n >= len(r) {
		return label
	}
	if n < 1 {
		return "…"
	}
	return string(r[:n]) + "…"
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
	s = strings.TrimSuffix(s, ".")
	if s == "-0" {
		return "0"
	}
	return s
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

// WriteFile draws the boots into the file path (replaced atomically).
func WriteFile(path, title string, boots []*timeline.Boot) error {
	var b bytes.Buffer
	if err := Write(&b, title, boots); err != nil {
		return err
	}
	if err := fileutil.WriteAtomic(path, b.Bytes(), 0o644, false); err != nil {
		return fmt.Errorf("write the timeline picture: %w", err)
	}
	return nil
}
