package cli

import (
	"bytes"
	"testing"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/gpu/switcher"
)

// TestPrintImageManifest: the summary image build prints of its manifest.
func TestPrintImageManifest(t *testing.T) {
	m := &image.Manifest{Name: "ci", Seconds: 42, RootUUID: "5f1d2c3b", Kernels: []string{"6.1.0-56-cloud-amd64"},
		KernelPackages: map[string]string{"6.1.0-56-cloud-amd64": "linux-image-6.1.0-56-cloud-amd64 6.1.158-1"},
		Files:          []image.File{{Format: "qcow2", Path: "out/ci.qcow2", Size: 1024, SHA256: "ab12"}},
		Drivers:        []image.Driver{{Driver: "testdriver", Version: "1.0", Kernel: "6.1.0-56-cloud-amd64", SetID: "0123456789abcdef0123"}},
		Cmdline:        "console=ttyS0", BootFirmware: []string{"bios", "uefi"}}
	var b bytes.Buffer
	printImageManifest(&b, m, "out")
	want := "image ci built in 42s (root UUID 5f1d2c3b)\n" +
		"  qcow2  out/ci.qcow2  1024 bytes  sha256 ab12\n" +
		"  manifest out/ci.manifest.json\n" +
		"  kernel 6.1.0-56-cloud-amd64 (linux-image-6.1.0-56-cloud-amd64 6.1.158-1)\n" +
		"  driver testdriver 1.0  for 6.1.0-56-cloud-amd64: set 0123456789abcdef\n" +
		"  cmdline console=ttyS0\n" +
		"  boots under bios and uefi (secure boot: false)\n"
	if got := b.String(); got != want {
		t.Errorf("printImageManifest =\n%s\nwant\n%s", got, want)
	}
}

// TestPrintSwitchOutcome: what a switch says it did, and what a dry run
// says it would replace.
func TestPrintSwitchOutcome(t *testing.T) {
	to := &switcher.SetRef{Driver: "nvidia", Version: "550.54.14"}
	from := &switcher.SetRef{Driver: "nvidia", Version: "535.261.03"}
	for _, tt := range []struct {
		res      switcher.Result
		want     string
		wantFrom string
	}{
		{switcher.Result{To: to, Unchanged: true}, "nvidia 550.54.14 is already active\n", "already active"},
		{switcher.Result{To: to, Seconds: 1.5}, "nvidia 550.54.14 loaded in 1.50s\n", "no driver active now"},
		{switcher.Result{To: to, From: from, Seconds: 2, Bound: []switcher.Binding{{Device: "0000:00:03.0", Driver: "nvidia"}}},
			"nvidia 535.261.03 -> 550.54.14 in 2.00s\n  0000:00:03.0 bound to nvidia\n", "replacing 535.261.03"},
	} {
		var b bytes.Buffer
		printSwitchOutcome(&b, &tt.res)
		if got := b.String(); got != tt.want {
			t.Errorf("printSwitchOutcome(%+v) = %q, want %q", tt.res, got, tt.want)
		}
		if got := fromText(&tt.res); got != tt.wantFrom {
			t.Errorf("fromText(%+v) = %q, want %q", tt.res, got, tt.wantFrom)
		}
	}
}
