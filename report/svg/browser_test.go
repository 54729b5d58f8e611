package svg

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/report/timeline"
)

// TestChromiumShowsTimeline opens the picture of a recorded boot report in
// Debian's chromium, headless: the screenshot must not be blank, and the DOM
// chromium parsed must hold every module's name.
func TestChromiumShowsTimeline(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is missing (scripts/deps.sh installs it): %v", err)
	}
	r := readFixture(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "boot.svg")
	var buf bytes.Buffer
	if err := Write(&buf, "kpreload boot", []*timeline.Boot{{Name: "kpreload", Report: r}}); err != nil {
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
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1200,800"}
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
	chromium("--screenshot="+shot, "file://"+file)
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

	dom := string(chromium("--dump-dom", "file://"+file))
	if !strings.Contains(dom, "<svg") {
		t.Fatalf("chromium's DOM holds no svg element:\n%.500s", dom)
	}
	for _, m := range r.Modules {
		if !strings.Contains(dom, ">"+m.Name+" ") {
			t.Errorf("module %s is not in chromium's DOM", m.Name)
		}
	}
	for _, want := range []string{"switch_root", "drivers ready"} {
		if !strings.Contains(dom, want) {
			t.Errorf("%q is not in chromium's DOM", want)
		}
	}
}
