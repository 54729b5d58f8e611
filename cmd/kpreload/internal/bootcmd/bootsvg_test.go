package bootcmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/qemu"
	"github.com/kpreload/kpreload/report"
)

// TestWriteBootSVG draws a real boot's report with the console's
// milestones, as kpreload boot --svg does: the kernel running /init,
// systemd's start and the target --until waited for are in the picture
// beside every module, and the target ends userspace's band and the
// summary line.
func TestWriteBootSVG(t *testing.T) {
	data, err := os.ReadFile("../../../../report/svg/testdata/report.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	res := &qemu.Result{Report: &rep, UntilMatched: true, UntilMatch: "Reached target multi-user.target - Multi-User System",
		Kernel: []qemu.KernelLine{
			{Time: 2.701, Text: "Run /init as init process"},
			{Time: 4.629, Text: "systemd[1]: systemd 252.39-1~deb12u1 running in system mode (+PAM ...)"},
			{Time: 30.252, Text: "systemd[1]: Reached target multi-user.target - Multi-User System."},
		}}
	file := filepath.Join(t.TempDir(), "boot.svg")
	if err := writeBootSVG(file, res); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"<svg", "kernel runs /init 2.701 s", "systemd started 4.629 s", "Reached target multi-user.target - Multi-User System 30.252 s", "30 s</text>", "kpreload_edu", "switch_root 3.285 s",
		`class="phase k-userspace"`, "Startup finished in 2.701s (kernel) + 0.584s (initramfs) + 26.967s (userspace) = 30.252s"} {
		if !strings.Contains(got, want) {
			t.Errorf("the picture lacks %q", want)
		}
	}
}
