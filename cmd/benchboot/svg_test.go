package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/report"
)

// TestSVGRound draws a Debian boot and a kpreload boot (a real report) of
// one round into one picture: both lanes, Debian's console milestones and
// kpreload's module loads.
func TestSVGRound(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, v any) string {
		t.Helper()
		p := filepath.Join(dir, name)
		var b []byte
		switch x := v.(type) {
		case string:
			b = []byte(x)
		default:
			var err error
			if b, err = json.Marshal(x); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	data, err := os.ReadFile("../../report/svg/testdata/report.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	kp := goodBoot()
	kp.Error, kp.Report = "", &rep
	kp.RootInit.Kmsg[0].Time = 3.25
	kpConsole := "[    2.701000] Run /init as init process\n[    3.060000] virtio_blk virtio0: [vda] 131072 512-byte logical blocks (67.1 MB/64.0 MiB)\n" +
		"[    3.210000] EXT4-fs (vda): mounted filesystem with ordered data mode. Quota mode: none.\n"
	out := filepath.Join(dir, "round-1.svg")
	var stdout, stderr bytes.Buffer
	err = run([]string{"svg", "-o", out, "-kernel", "6.1.0-56-cloud-amd64", "-round", "1",
		"-boot", "debian=" + write("debian.json", goodBoot()) + "," + write("debian.console", console),
		"-boot", "kpreload=" + write("kpreload.json", kp) + "," + write("kpreload.console", kpConsole)}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := stdout.String(), out+": 2 boots of round 1\n"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{`data-name="debian"`, `data-name="kpreload"`, "kernel runs /init 4.047 s", "root disk seen (vda) 5.962 s",
		"kpreload_edu bound 5.740 s", "real init 7.580 s", "kernel runs /init 2.701 s", "switch_root 3.285 s", ">virtio_blk ", ">kpreload_edu ", "round 1",
		"Startup finished in 4.047s (kernel) + 3.533s (initramfs) = 7.580s", "Startup finished in 2.701s (kernel) + "} {
		if !strings.Contains(got, want) {
			t.Errorf("the picture lacks %q", want)
		}
	}
	// A broken boot is refused, naming it.
	bad := goodBoot()
	bad.RootInit = nil
	err = run([]string{"svg", "-o", out, "-boot", "debian=" + write("bad.json", bad) + "," + write("bad.console", console)}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "debian boot (console ") {
		t.Errorf("svg of a broken boot: %v, want an error naming it", err)
	}
	if err := run([]string{"svg", "-o", out, "-boot", "debian"}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "want VARIANT=BOOT.json,CONSOLE") {
		t.Errorf("svg -boot debian: %v, want the form named", err)
	}
}
