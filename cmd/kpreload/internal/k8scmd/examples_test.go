package k8scmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/report"
)

// TestK8sRefreshHelpExamples runs, exactly as written, the examples of k8s
// refresh (./root, from a report.json whose request asks time-slicing).
func TestK8sRefreshHelpExamples(t *testing.T) {
	lines := cli.ExamplesOf(t, "kpreload k8s refresh")
	t.Chdir(t.TempDir())
	rep := report.Report{Format: 1, Selection: &report.Selection{Request: report.SelectionRequest{Version: "latest", Sharing: "time-slicing", SharingReplicas: 4}}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("report.json", b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		code, out, errOut := cli.Run(strings.Fields(l)[1:]...)
		if code != 0 || !strings.Contains(out, "wrote ") {
			t.Fatalf("example %q: exit %d: %s%s", l, code, out, errOut)
		}
		plugin, err := os.ReadFile(filepath.Join("root", "etc", "kpreload", "k8s", "device-plugin.yaml"))
		if err != nil || !strings.Contains(string(plugin), "replicas: 4") {
			t.Errorf("example %q: device-plugin.yaml: %v\n%s", l, err, plugin)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("ran %d examples, want 1", len(lines))
	}
}
