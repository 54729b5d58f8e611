package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/qemu"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestPrintkLines(t *testing.T) {
	console := "[    0.000000] Linux version 6.1\r\nnot a kernel line\n[   42.300204] systemd[1]: Reached target multi-user.target - Multi-User System.\n"
	got := printkLines([]byte(console))
	if len(got) != 2 || got[1].Time != 42.300204 || !defaultTarget.MatchString(got[1].Text) {
		t.Errorf("printkLines = %+v, want 2 lines, the second the default target at 42.300204", got)
	}
}

func TestTable(t *testing.T) {
	samples := filepath.Join(t.TempDir(), "s.jsonl")
	data := `{"kind":"build","name":"cold","seconds":100}
{"kind":"build","name":"warm","seconds":20}
{"kind":"build","name":"warm","seconds":30}
{"kind":"size","name":"x.qcow2","bytes":1048576}
{"kind":"boot","name":"kpreload","bound":2,"init":3,"target":10,"wall":20}
{"kind":"boot","name":"debian","bound":4,"init":5,"target":15,"wall":25}
`
	if err := os.WriteFile(samples, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := table(samples, &b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| cold | 1 | 100.0 | 100.0 |",
		"| warm | 2 | 25.0 | 20.0, 30.0 |",
		"cold / warm: 4.0x",
		"| x.qcow2 | 1048576 | 1 |",
		"| kpreload | 1 | 2.00 | 3.00 | 10.00 | 20.0 |",
		"ratios debian / kpreload: driver bound 2.00, default target 1.50",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestTableVersus: the builds of the same image by two tools, cold and
// warm, with their sizes and the ratios to the first; a table of only
// those has no empty sections.
func TestTableVersus(t *testing.T) {
	samples := filepath.Join(t.TempDir(), "s.jsonl")
	data := `{"kind":"versus","name":"kpreload image build","phase":"cold","seconds":100,"bytes":2147483648,"allocated":629145600}
{"kind":"versus","name":"disk-image-create","phase":"cold","seconds":300,"bytes":1073741824,"allocated":943718400}
{"kind":"versus","name":"kpreload image build","phase":"warm","seconds":40}
{"kind":"versus","name":"disk-image-create","phase":"warm","seconds":200}
`
	if err := os.WriteFile(samples, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := table(samples, &b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| kpreload image build | 100.0 | 40.0 | 2048 | 600 |",
		"| disk-image-create | 300.0 | 200.0 | 1024 | 900 |",
		"ratios disk-image-create / kpreload image build: cold 3.00, warm 5.00, apparent size 0.50, allocated size 1.50",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	for _, absent := range []string{"packer build", "| file |", "Boot timeline"} {
		if strings.Contains(b.String(), absent) {
			t.Errorf("table of versus samples only has %q:\n%s", absent, b.String())
		}
	}
	if err := os.WriteFile(samples, []byte(`{"kind":"versus","name":"x","phase":"lukewarm","seconds":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := table(samples, &b); err == nil || !strings.Contains(err.Error(), `phase "lukewarm"`) {
		t.Errorf("a sample of an unknown phase: %v, want an error naming it", err)
	}
}

func TestMeasure(t *testing.T) {
	console := filepath.Join(t.TempDir(), "console.log")
	if err := os.WriteFile(console, []byte("[    0.000000] Linux version 6.1\n"+
		"[    1.500000] systemd[1]: systemd 252 running in system mode\n"+
		"[    4.250000] systemd[1]: Reached target multi-user.target - Multi-User System.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bound := qemu.KernelLine{Time: 0.75, Text: "kpreload_edu 0000:00:04.0: bound, id 0x010000ed"}
	tests := []struct {
		name    string
		human   bool
		kernel  []qemu.KernelLine
		want    Sample
		wantErr string
	}{
		{"bound", false, []qemu.KernelLine{bound}, Sample{Kind: "boot", Name: "v", Wall: 9, Bound: 0.75, Init: 1.5, Target: 4.25}, ""},
		{"never bound", false, nil, Sample{}, "never bound the edu device"},
		{"never bound, for people", true, nil, Sample{Kind: "boot", Name: "v", Wall: 9, Init: 1.5, Target: 4.25}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &bootOptions{name: "v", human: tt.human}
			got, line, err := o.measure(&qemu.Result{Console: console, Kernel: tt.kernel, Duration: 9 * time.Second})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("measure() error = %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("measure() = %+v, want %+v", got, tt.want)
			}
			if (line != nil) != (len(tt.kernel) > 0) {
				t.Errorf("measure() bound line = %v, want one only when the driver bound", line)
			}
			var out strings.Builder
			printBoot(&out, o.name, qemu.Config{}, &qemu.Result{Console: console}, got, line)
			if want := "systemd reached its default target"; !strings.Contains(out.String(), want) {
				t.Errorf("printBoot wrote %q, want it to say %q", out.String(), want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		o       bootOptions
		res     qemu.Result
		wantErr string
	}{
		{"reached", bootOptions{name: "v"}, qemu.Result{UntilMatched: true}, ""},
		{"not reached", bootOptions{name: "v"}, qemu.Result{}, "did not reach its default target"},
		{"secure boot unproven", bootOptions{name: "v", firmware: qemu.FirmwareUEFISecure}, qemu.Result{UntilMatched: true}, "Secure Boot was on"},
		{"request from elsewhere", bootOptions{name: "v", wantSource: "seed"}, qemu.Result{UntilMatched: true}, "came from no report, want seed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.check(&tt.res)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("check() error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
