package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/report"
)

// TestHookHelpExamples runs, exactly as written, the examples of cdi hook
// update-ldcache (in ./rootfs, with the host's ldconfig) and of k8s refresh
// (./root, from a report.json whose request asks time-slicing).
func TestHookHelpExamples(t *testing.T) {
	root := withCompletion(NewRoot())
	lines := func(path ...string) []string {
		c, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		return exampleLines(t, c)
	}
	t.Chdir(t.TempDir())
	if err := os.MkdirAll("rootfs/usr/local/nvidia/lib64", 0o755); err != nil {
		t.Fatal(err)
	}
	rep := report.Report{Format: 1, Selection: &report.Selection{Request: report.SelectionRequest{Version: "latest", Sharing: "time-slicing", SharingReplicas: 4}}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("report.json", b, 0o644); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range lines("cdi", "hook", "update-ldcache") {
		if code, out, errOut := runCLI(strings.Fields(l)[1:]...); code != 0 {
			t.Fatalf("example %q: exit %d: %s%s", l, code, out, errOut)
		}
		conf, err := os.ReadFile("rootfs/etc/ld.so.conf.d/00-kpreload-cdi.conf")
		if err != nil || !strings.Contains(string(conf), "/usr/local/nvidia/lib64") {
			t.Errorf("example %q: the container's linker configuration: %v\n%s", l, err, conf)
		}
		n++
	}
	for _, l := range lines("k8s", "refresh") {
		code, out, errOut := runCLI(strings.Fields(l)[1:]...)
		if code != 0 || !strings.Contains(out, "wrote ") {
			t.Fatalf("example %q: exit %d: %s%s", l, code, out, errOut)
		}
		plugin, err := os.ReadFile(filepath.Join("root", "etc", "kpreload", "k8s", "device-plugin.yaml"))
		if err != nil || !strings.Contains(string(plugin), "replicas: 4") {
			t.Errorf("example %q: device-plugin.yaml: %v\n%s", l, err, plugin)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("ran %d examples, want 2", n)
	}
}
