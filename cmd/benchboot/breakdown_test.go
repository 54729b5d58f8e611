package main

import (
	"math"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/report"
)

// initcallConsole is an excerpt of a real console log of an NVIDIA boot with
// initcall_debug loglevel=8 (scripts/nvidia-breakdown.sh), 6.12 under icount.
const initcallConsole = `[   12.130893] Run /init as init process
[   14.177012] calling  virtio_blk_init+0x0/0xff0 [virtio_blk] @ 133
[   14.207984] initcall virtio_blk_init+0x0/0xff0 [virtio_blk] returned 0 after 30802 usecs
kpreload: nvidia 550.163.01 open chosen (latest, request from default)
[   40.086189] nvidia: loading out-of-tree module taints kernel.
[   45.883543] calling  nvidia_init_module+0x0/0x750 [nvidia] @ 160
[   45.904132] NVRM: No NVIDIA GPU found.
[   45.926111] initcall nvidia_init_module+0x0/0x750 [nvidia] returned -19 after 32946 usecs
`

// nvidiaBoot is the boot result of that console's boot.
func nvidiaBoot() *bootResult {
	return &bootResult{
		Report: &report.Report{
			InitStart: 12.28,
			Root:      report.Root{Mounted: 23.93},
			Selection: &report.Selection{Time: 23.94},
			Modules: []report.Module{
				{Name: "virtio_blk", Start: 12.79, End: 14.19, ReadTime: 0.001, DigestTime: 0.24, Called: 13.03},
				{Name: "nvidia", Start: 24.13, End: 45.99, ReadTime: 0.35, DigestTime: 15.36, Called: 39.85},
			},
		},
		RootInit: &report.RootInit{Start: 47.4},
	}
}

func TestStepsOf(t *testing.T) {
	s, err := stepsOf(nvidiaBoot(), []byte(initcallConsole), "nvidia", "NVRM: No NVIDIA GPU found")
	if err != nil {
		t.Fatalf("stepsOf: %v", err)
	}
	if len(s.Modules) != 1 {
		t.Fatalf("modules %+v, want nvidia alone (virtio_blk is no driver module)", s.Modules)
	}
	rows := map[string]float64{}
	for _, r := range stepRows([]string{"nvidia"}) {
		rows[r.name] = r.get(s)
	}
	tests := []struct {
		row  string
		want float64
	}{
		{"kernel start → Run /init (the kernel's boot, initramfs unpacked)", 12.130893},
		{"Go main → root mounted", 23.93 - 12.28},
		{"nvidia: decision → insert starts (dependencies, the loader's turn)", 24.13 - 23.94},
		{"nvidia: sha256 of it (digest pass)", 15.36},
		{"nvidia: the rest of /init's checks before the call", 39.85 - 24.13 - 0.35 - 15.36},
		{"nvidia: the call → its init starts (the kernel's load_module: copy, decompression, signature, relocation)", 45.883543 - 39.85},
		{"nvidia: the module's own init (initcall_debug)", 0.032946},
		{"nvidia: its init returned → the call returned in /init", 45.99 - 45.883543 - 0.032946},
		{"kernel start → the driver's init ran (its marker line)", 45.904132},
		{"kernel start → real init", 47.4},
	}
	for _, tt := range tests {
		got, ok := rows[tt.row]
		if !ok {
			t.Errorf("no row %q", tt.row)
			continue
		}
		if math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", tt.row, got, tt.want)
		}
	}
}

func TestStepsOfRefuses(t *testing.T) {
	noInitcall := strings.ReplaceAll(initcallConsole, "[nvidia] @", "[other] @")
	tests := []struct {
		name    string
		console string
		edit    func(*bootResult)
		want    string
	}{
		{"no initcall_debug lines", noInitcall, func(*bootResult) {}, "no initcall_debug lines"},
		{"no marker line", strings.ReplaceAll(initcallConsole, "NVRM", "XXXX"), func(*bootResult) {}, "the driver's init"},
		{"no decision", initcallConsole, func(b *bootResult) { b.Report.Selection = nil }, "no driver decision"},
		{"nothing inserted", initcallConsole, func(b *bootResult) { b.Report.Modules = b.Report.Modules[:1] }, "no module named nvidia"},
		{"report errors", initcallConsole, func(b *bootResult) { b.Report.Errors = []string{"boom"} }, "boom"},
	}
	for _, tt := range tests {
		b := nvidiaBoot()
		tt.edit(b)
		_, err := stepsOf(b, []byte(tt.console), "nvidia", "NVRM: No NVIDIA GPU found")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: stepsOf = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

func TestWriteBreakdown(t *testing.T) {
	s, err := stepsOf(nvidiaBoot(), []byte(initcallConsole), "nvidia", "NVRM: No NVIDIA GPU found")
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := s, s, s
	a.Variant, b.Variant, c.Variant = "after-plain", "after-plain", "early-xz"
	b.RealInit = 49.4
	var out strings.Builder
	if err := writeBreakdown(&out, []stepBoot{a, b, c}, "a note"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| step (medians, s) | after-plain | early-xz |\n| --- | ---: | ---: |\n",
		"| kernel start → real init | 48.400 | 47.400 |\n",
		"\na note\n",
		"| kernel start → real init | after-plain | 47.400, 49.400 |\n",
	} {
		if got := out.String(); !strings.Contains(got, want) {
			t.Errorf("writeBreakdown printed\n%s\nwant it to contain %q", got, want)
		}
	}
}
