package svg

import (
	"bytes"
	"context"
	"fmt"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/report/timeline"
)

// TestChromiumShowsTimeline opens the picture of a recorded boot report, with
// the console's times and kpreload-up.service's target, in Debian's
// chromium, headless: the screenshot must not be blank, the kernel's band
// must be painted in its colour from the axis's 0 up to /init and
// userspace's beyond switch_root, and the DOM chromium parsed must hold
// every module's name, the summary line, the decision and the legend.
func TestChromiumShowsTimeline(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is missing (scripts/deps.sh installs it): %v", err)
	}
	r := readFixture(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "boot.svg")
	var buf bytes.Buffer
	bt := &timeline.Boot{Name: "kpreload", Report: r, RunInit: 2.701, Up: 30.252, Target: "multi-user.target"}
	if err := Write(&buf, "kpreload boot", []*timeline.Boot{bt}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	chromium := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Root needs --no-sandbox; a private profile keeps parallel runs apart.
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + filepath.Join(dir, "profile"), "--force-device-scale-factor=1"}
		cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		t.Logf("chromium %s took %v", args[0], time.Since(start).Round(time.Millisecond))
		return out
	}

	shot := filepath.Join(dir, "shot.png")
	chromium("--screenshot="+shot, "--window-size=1200,800", "file://"+file)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	inked := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r < 0xe000 || g < 0xe000 || bl < 0xe000 {
				inked++
			}
		}
	}
	// Bars, text, lines and the axis cover well over 1% of the window.
	if total := b.Dx() * b.Dy(); inked*100 < total {
		t.Errorf("screenshot %dx%d has %d non-white pixels: blank?", b.Dx(), b.Dy(), inked)
	}

	// The bands, where the SVG put them, in the colours the legend gives them.
	for kind, at := range map[string]float64{timeline.KindKernel: 1.0, timeline.KindUserspace: 20} {
		x := newLayout([]*timeline.Boot{bt}).all.x(at)
		y := bandY(t, buf.String(), kind)
		if got, want := colour(img.At(int(x), int(y))), colourOf(kind); got != want {
			t.Errorf("the %s band at %v s (%v,%v) is painted %s, want %s", kind, at, int(x), int(y), got, want)
		}
	}

	dom := string(chromium("--dump-dom", "file://"+file))
	if !strings.Contains(dom, "<svg") {
		t.Fatalf("chromium's DOM holds no svg element:\n%.500s", dom)
	}
	for _, m := range r.Modules {
		if !strings.Contains(dom, ">"+m.Name+" ") {
			t.Errorf("module %s is not in chromium's DOM", m.Name)
		}
	}
	for _, want := range []string{"switch_root", "drivers ready", "Startup finished in 2.701s (kernel) + 0.584s (initramfs) + 26.967s (userspace) = 30.252s",
		"kpreload-edu 1.0.0, flavour -, from initramfs: chosen by the rule latest", ">userspace (real init)<", ">milestone<"} {
		if !strings.Contains(dom, want) {
			t.Errorf("%q is not in chromium's DOM", want)
		}
	}
}

// bandY is the middle of the band of kind in the SVG document doc.
func bandY(t *testing.T, doc, kind string) float64 {
	t.Helper()
	for _, e := range parse(t, doc) {
		if e.attr["class"] == "phase k-"+kind {
			y, err1 := strconv.ParseFloat(e.attr["y"], 64)
			h, err2 := strconv.ParseFloat(e.attr["height"], 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("the %s band's y %q, height %q", kind, e.attr["y"], e.attr["height"])
			}
			return y + h/2
		}
	}
	t.Fatalf("no %s band in the picture", kind)
	return 0
}

// colour is c as #rrggbb.
func colour(c color.Color) string {
	r, g, b, _ := c.RGBA()
	return fmt.Sprintf("#%02x%02x%02x", r>>8, g>>8, b>>8)
}

// colourOf is the colour the legend gives kind.
func colourOf(kind string) string {
	for _, k := range kinds {
		if k.kind == kind {
			return k.colour
		}
	}
	return ""
}
